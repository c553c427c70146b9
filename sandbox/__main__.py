"""Command line: `python -m sandbox serve --scenario burst --speed 20 --seed 0 --port 0 --workdir out/sandbox`.

`serve` prints one JSON line (url, ca_path, kubeconfig_path, env, and for the other ways
to reach the cluster identity_endpoint, identity_header, aks_cluster_id and
kubeconfig_secret_uri) on stdout once the server listens, then serves until SIGTERM or
SIGINT and exits 0.
`validate` checks scenario files and prints what is wrong.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from sandbox.api.server import SandboxServer
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world.identity import DEFAULT_TOKEN_LIFETIME, IDENTITY_HEADER


def _serve(args: argparse.Namespace) -> int:
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    if scenario.render_queue is not None and scenario.render_queue.storage_queue and not args.storage_connection:
        print(f"error: {scenario.source}: its render queue is published in Storage queue "
              f"{scenario.render_queue.storage_queue}: give --storage-connection", file=sys.stderr)
        return 2
    server = SandboxServer(scenario, speed=args.speed, seed=args.seed, workdir=Path(args.workdir), port=args.port,
                           token_lifetime=args.token_lifetime, wait_for_runner=args.wait_for_runner,
                           storage_connection=args.storage_connection)
    with server:
        line = {
            "url": server.url,
            "ca_path": str(server.ca_path),
            "kubeconfig_path": str(server.kubeconfig_path),
            "env": server.env(),
            "identity_endpoint": server.identity_endpoint,
            "identity_header": IDENTITY_HEADER,
            "aks_cluster_id": server.aks_cluster_id,
            "kubeconfig_secret_uri": server.kubeconfig_secret_uri,
        }
        print(json.dumps(line), flush=True)
        while not stop.wait(0.5):
            pass
    return 0


def _validate(args: argparse.Namespace) -> int:
    status = 0
    for source in args.scenarios:
        try:
            scenario = load_scenario(source)
        except ScenarioError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
        else:
            print(f"ok: {scenario.source} ({scenario.name}: {len(scenario.node_groups)} scale sets, "
                  f"{sum(w.count * w.repeat_times for w in scenario.workloads)} workload pods)")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description="Simulated AKS-style cluster for the autoscaler.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the Kubernetes and ARM doubles over HTTPS on 127.0.0.1")
    serve.add_argument("--scenario", default="burst", help="scenario name (sandbox/scenarios/<name>.json) or path")
    serve.add_argument("--speed", type=float, default=1.0, help="sim seconds per wall second")
    serve.add_argument("--seed", type=int, default=0)
    serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    serve.add_argument("--workdir", default="out/sandbox", help="where ca.pem and kubeconfig are written")
    serve.add_argument("--token-lifetime", type=float, default=DEFAULT_TOKEN_LIFETIME,
                       help="wall seconds each token from the identity endpoint lives (default 3600)")
    serve.add_argument("--wait-for-runner", type=float, default=0.0, metavar="SECONDS",
                       help="hold the clock at 0 until a local runner holds it, for at most this many wall seconds")
    serve.add_argument("--storage-connection", default="", metavar="CONNECTION_STRING",
                       help="a Storage connection string (Azurite's) where a render queue with a storage_queue is "
                            "published for LOAD_BACKLOG_QUEUE; the runner must be given the same account")
    serve.add_argument("--log-level", default="WARNING")
    validate = commands.add_parser("validate", help="check scenario files")
    validate.add_argument("scenarios", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "serve":
        logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
        if args.speed <= 0:
            parser.error("--speed must be positive")
        if args.token_lifetime <= 0:
            parser.error("--token-lifetime must be positive")
        return _serve(args)
    return _validate(args)


if __name__ == "__main__":
    sys.exit(main())
