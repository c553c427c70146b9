"""`python -m devtools.replay`: replay one trace under one policy, or run the whole benchmark suite.

    python -m devtools.replay replay --trace alibaba2018 --policy ours [--json out.json]
    python -m devtools.replay replay --trace my-pods.csv --policy ours --setting SCALE_DOWN_UNNEEDED_TIME=5m
    python -m devtools.replay suite            # what `make bench` runs

A trace is a name (alibaba2018, alibaba2023) or a file in the pod-arrival format of docs/traces.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from devtools.replay.policies import POLICIES
from devtools.replay.pools import DEFAULT_POOLS, POOL_SETS


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"--setting wants NAME=VALUE, got {text!r}")
    return name.strip(), value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m devtools.replay", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("replay", help="replay one trace under one policy and print its figures")
    one.add_argument("--trace", required=True, help="alibaba2018, alibaba2023 or a pod-arrival CSV/JSON file")
    one.add_argument("--policy", required=True, choices=POLICIES)
    one.add_argument("--json", type=Path, help="also write the result (and the curves) to this file")
    one.add_argument("--seed", type=int, default=0, help="sampling, boot delays and failures (default 0)")
    one.add_argument("--pools", choices=sorted(POOL_SETS), help="the node pools of a named trace (default: the trace's own, "
                     "or a D16s_v5 pool and two A100 pools for a file)")
    one.add_argument("--setting", type=_setting, action="append", default=[], metavar="NAME=VALUE",
                     help="an app setting for `ours` (repeatable), e.g. SCALE_DOWN_UNNEEDED_TIME=5m")
    one.add_argument("--boot-median", type=float, default=100.0, help="median node boot delay, seconds (default 100)")
    one.add_argument("--boot-p95", type=float, default=300.0, help="p95 node boot delay, seconds (default 300)")
    one.add_argument("--failure-rate", type=float, default=0.0,
                     help="share of capacity increases that fail with QuotaExceeded (default 0)")
    one.add_argument("--aci-quota", type=int, default=None,
                     help="ACI core quota of the virtual node, for ours+vn and ca+vn (default 100)")
    one.add_argument("--aci-creates", type=int, nargs=2, default=None, metavar=("PER_5MIN", "PER_HOUR"),
                     help="ACI container groups that may be created per 5 minutes and per hour (default 100 300)")
    suite = commands.add_parser("suite", help="both traces, every policy, engine at scale, cold start (make bench)")
    suite.add_argument("--seed", type=int, default=0)
    suite.add_argument("--quick", action="store_true", help="engine at scale up to 1,000 nodes only")
    suite.add_argument("--out", type=Path, default=None, help="output directory (default out/bench)")
    return parser


def _virtual_node(args: argparse.Namespace) -> dict[str, int] | None:
    """The virtual node's limits from --aci-quota and --aci-creates; None leaves the sandbox's defaults."""
    limits: dict[str, int] = {}
    if args.aci_quota is not None:
        limits["quota_cores"] = args.aci_quota
    if args.aci_creates is not None:
        limits["creates_per_5min"], limits["creates_per_hour"] = args.aci_creates
    return limits or None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "suite":
        from devtools.replay.suite import OUT, run_suite

        run_suite(seed=args.seed, quick=args.quick, out=args.out or OUT)
        return 0

    from devtools import bench_report
    from devtools.replay.harness import ReplayConfig
    from devtools.replay.run import replay
    from devtools.replay.traces import TraceError, load_trace

    if not 0.0 <= args.failure_rate <= 1.0:
        print(f"--failure-rate must be between 0 and 1, got {args.failure_rate}", file=sys.stderr)
        return 2
    try:
        trace = load_trace(args.trace, seed=args.seed)
    except (TraceError, OSError) as exc:
        print(f"cannot read trace: {exc}", file=sys.stderr)
        return 2
    pools = POOL_SETS[args.pools] if args.pools else POOL_SETS.get(args.trace, DEFAULT_POOLS)
    config = ReplayConfig(seed=args.seed, pools=pools, boot_median_s=args.boot_median, boot_p95_s=args.boot_p95,
                          provisioning_failure_rate=args.failure_rate, settings=dict(args.setting),
                          virtual_node=_virtual_node(args))
    try:
        outcome = replay(trace, args.policy, config)
    except ValueError as exc:  # a bad --setting (SettingsError names it) or a trace no pool can hold
        print(f"cannot replay: {exc}", file=sys.stderr)
        return 2
    results = {"traces": {trace.name: {"note": trace.note}}, "replay": {trace.name: {args.policy: outcome.result}}}
    print(bench_report.markdown_table(results))
    if outcome.pods_left_out:
        print(f"{outcome.pods_left_out} pods fit no pool and were left out.")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**results, "series": outcome.series, "demand": outcome.demand}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
