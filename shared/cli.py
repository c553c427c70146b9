"""Command line: `python -m shared.cli plan` prints what the autoscaler would do now.

    python -m shared.cli plan --kubeconfig ~/.kube/config --subscription <id> \\
        --resource-group <node rg> --cluster-name <name> [--with-state] [--json] [--setting NAME=VALUE ...]

It reads the cluster and the scale sets with the same code the function app runs,
decides with the same planners, and changes nothing: no scale set is resized, no
node cordoned, no message enqueued, no status written. Settings come from the
environment (the app's settings exported, or a local.settings.json passed with
`--settings-file`), overridden by the flags. `--with-state` also reads the state
table through `AzureWebJobsStorage` (unneeded-since times, cooldowns, backoff);
without it, every idle node's unneeded time starts now.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

from shared.ports import ClusterError, ComputeError, StateStore
from shared.settings import Settings, SettingsError, misspelt_settings


def _settings_env(args: argparse.Namespace, base: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    if args.settings_file:
        try:
            values = json.loads(Path(args.settings_file).read_text(encoding="utf-8")).get("Values") or {}
        except (OSError, ValueError) as exc:
            raise SystemExit(f"plan: cannot read --settings-file {args.settings_file}: {exc}") from exc
        env.update({str(k): str(v) for k, v in values.items()})
    flags = {"KUBECONFIG_PATH": args.kubeconfig, "AZURE_SUBSCRIPTION_ID": args.subscription,
             "NODE_RESOURCE_GROUPS": ",".join(args.resource_group or []) or None, "CLUSTER_NAME": args.cluster_name}
    env.update({name: value for name, value in flags.items() if value})
    if args.kubeconfig:
        env["KUBE_AUTH"] = "kubeconfig"
    for item in args.setting or []:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise SystemExit(f"plan: --setting takes NAME=VALUE, got {item!r}")
        env[name.strip()] = value
    return env


def _state_table(settings: Settings, env: Mapping[str, str]) -> StateStore:
    """The app's state table, opened for reading: never created, so a reader's role suffices."""
    from shared.adapters.credentials import make_azure_credential
    from shared.adapters.storage import TableStateStore, resolve_storage_connection

    connection = resolve_storage_connection(settings, env, credential=make_azure_credential(settings))
    return TableStateStore(connection, settings.state_table, create_table=False)


def plan_command(args: argparse.Namespace, *, environ: Mapping[str, str], now: datetime | None = None) -> int:
    # Imported here so `--help` and settings errors answer at once, without loading the SDKs.
    from shared.context import connect, validated_settings
    from shared.services.plan import plan_now, render_text

    env = _settings_env(args, environ)
    for warning in misspelt_settings(env):
        print(f"plan: warning: app setting {warning}", file=sys.stderr)
    try:
        # Storage is checked only when it will be read (--with-state): plan runs from a laptop without it.
        settings = validated_settings(env, storage=args.with_state, warn=False)
    except SettingsError as exc:
        print(f"plan: {exc}", file=sys.stderr)
        return 2
    from shared.adapters.storage_connection import StorageError

    try:
        ports = connect(settings, env, storage=False)
        state = _state_table(settings, env) if args.with_state else None
        report = plan_now(ports, settings, now=now or datetime.now(timezone.utc), state=state)
    except (ClusterError, ComputeError, StorageError, SettingsError) as exc:
        # What could not be reached or read, by name; a traceback would bury it.
        print(f"plan: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(render_text(report), end="")
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m shared.cli", description=__doc__.split("\n\n")[0])
    commands = top.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("plan", help="print what the autoscaler would do now; change nothing")
    plan.add_argument("--kubeconfig", help="kubeconfig file of the cluster (sets KUBE_AUTH=kubeconfig)")
    plan.add_argument("--subscription", help="subscription holding the scale sets (AZURE_SUBSCRIPTION_ID)")
    plan.add_argument("--resource-group", action="append",
                      help="resource group with the scale sets; repeat for several (NODE_RESOURCE_GROUPS)")
    plan.add_argument("--cluster-name", help="CLUSTER_NAME the scale sets are tagged with")
    plan.add_argument("--settings-file", help="a local.settings.json whose Values are read as app settings")
    plan.add_argument("--setting", action="append", metavar="NAME=VALUE", help="any other app setting; repeatable")
    plan.add_argument("--with-state", action="store_true",
                      help="read the state table through AzureWebJobsStorage (never written)")
    plan.add_argument("--json", action="store_true", help="print JSON instead of text")
    return top


def main(argv: Sequence[str] | None = None, *, environ: Mapping[str, str] | None = None,
         now: datetime | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "plan":
        return plan_command(args, environ=os.environ if environ is None else environ, now=now)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
