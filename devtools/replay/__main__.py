"""`python -m devtools.replay`: replay one trace under one policy, or run the whole benchmark suite.

    python -m devtools.replay replay --trace alibaba2018 --policy ours [--json out.json]
    python -m devtools.replay replay --trace my-pods.csv --policy ours --setting SCALE_DOWN_UNNEEDED_TIME=5m
    python -m devtools.replay replay --trace alibaba2018 --policy ours+spot --spot-eviction-rate 0.2 \
        --quota-low-priority-cores 320
    python -m devtools.replay suite            # what `make bench` runs
    python -m devtools.replay frontier         # the suite's idle-time sweep alone (cost against p95 wait)

A trace is a name (alibaba2018, alibaba2023), a raw public trace file (an Alibaba openb pod list as
published, the 2018 batch tasks as CloudSimPy lays them out: read like the named trace, on its pools),
or a file in the pod-arrival format of docs/traces.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from devtools.replay.policies import POLICIES, SPOT_FIRST_POLICY, SPOT_POLICIES
from devtools.replay.pools import DEFAULT_POOLS, POOL_SETS
from devtools.replay.spot import SpotTier, quiet_spot_logs


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"--setting wants NAME=VALUE, got {text!r}")
    return name.strip(), value


def _pool_tag(text: str) -> tuple[str, str, str]:
    pool, sep, tag = text.partition("/")
    name, eq, value = tag.partition("=")
    if not sep or not eq or not pool.strip() or not name.strip():
        raise argparse.ArgumentTypeError(f"--pool-tag wants POOL/NAME=VALUE, got {text!r}")
    return pool.strip(), name.strip(), value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m devtools.replay", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("replay", help="replay one trace under one policy and print its figures")
    one.add_argument("--trace", required=True, help="alibaba2018, alibaba2023, a raw Alibaba trace file (openb pod "
                     "list, CloudSimPy jobs.csv) or a pod-arrival CSV/JSON file")
    one.add_argument("--policy", required=True, choices=(*POLICIES, SPOT_FIRST_POLICY))
    one.add_argument("--json", type=Path, help="also write the result (and the curves) to this file")
    one.add_argument("--seed", type=int, default=0, help="sampling, boot delays and failures (default 0)")
    one.add_argument("--pools", choices=sorted(POOL_SETS), help="the node pools of a named trace (default: the trace's own, "
                     "a raw trace file's format's own, or a D16s_v5 pool and two A100 pools for a file)")
    one.add_argument("--setting", type=_setting, action="append", default=[], metavar="NAME=VALUE",
                     help="an app setting for `ours` (repeatable), e.g. SCALE_DOWN_UNNEEDED_TIME=5m")
    one.add_argument("--pool-tag", type=_pool_tag, action="append", default=[], metavar="POOL/NAME=VALUE",
                     help="a scale-set tag on one pool (repeatable), e.g. gpu-nc48/autoscaler-standby=4: a per-group "
                          "choice an operator makes with tags")
    one.add_argument("--boot-median", type=float, default=100.0, help="median node boot delay, seconds (default 100)")
    one.add_argument("--boot-p95", type=float, default=300.0, help="p95 node boot delay, seconds (default 300)")
    one.add_argument("--start-fraction", type=float, default=0.5,
                     help="a deallocated instance's start delay as a fraction of the boot delay (default 0.5, the "
                          "suite's: no published figure; lower only to see what a faster start would change)")
    one.add_argument("--buffer-nodes", type=int, default=0, metavar="NODES",
                     help="running headroom: a CapacityBuffer per CPU pool keeping this many empty nodes' room "
                          "(default 0: none; devtools.replay.harness.headroom_buffers)")
    one.add_argument("--failure-rate", type=float, default=0.0,
                     help="share of capacity increases that fail with QuotaExceeded (default 0)")
    one.add_argument("--aci-quota", type=int, default=None,
                     help="ACI core quota of the virtual node, for ours+vn and ca+vn (default 100)")
    one.add_argument("--aci-creates", type=int, nargs=2, default=None, metavar=("PER_5MIN", "PER_HOUR"),
                     help="ACI container groups that may be created per 5 minutes and per hour (default 100 300)")
    one.add_argument("--aci-groups", type=int, default=None, metavar="GROUPS",
                     help="ACI container groups that may exist at once in the region (default 100)")
    spot = one.add_argument_group("spot tier (ours+spot, ca+spot; devtools/replay/spot.py)")
    spot.add_argument("--spot-eviction-rate", type=float, default=None, metavar="PER_HOUR",
                      help="spot evictions per running spot instance-hour, a Poisson process (default 0.05, assumed; "
                           "0: none)")
    spot.add_argument("--spot-no-notice", action="store_true",
                      help="evict without the 30 s Preempt Scheduled Event (default: with it)")
    spot.add_argument("--spot-eviction-policy", choices=("Delete", "Deallocate"), default=None,
                      help="the spot scale sets' eviction policy (default Delete, as AKS spot pools)")
    spot.add_argument("--spot-price-fraction", type=float, default=None, metavar="FRACTION",
                      help="bill spot instances at this fraction of on-demand (default: the shipped table, "
                           "devtools/replay/spot_prices.py)")
    spot.add_argument("--spot-stale-nodes", action="store_true",
                      help="leave an evicted VM's Node behind, NotReady (no cloud node lifecycle controller, as on "
                           "k3s or kubeadm); default: deleted 10 s after the eviction")
    quota = one.add_argument_group("Compute quota (every policy)")
    quota.add_argument("--quota-low-priority-cores", type=int, default=None, metavar="VCPUS",
                       help="the subscription's lowPriorityCores quota: spot vCPUs in the region (default unlimited)")
    quota.add_argument("--quota-cores", type=int, default=None, metavar="VCPUS",
                       help="the subscription's total regional vCPU quota for on-demand VMs (default unlimited)")
    suite = commands.add_parser("suite", help="both traces, every policy, engine at scale, cold start (make bench)")
    suite.add_argument("--seed", type=int, default=0)
    suite.add_argument("--quick", action="store_true", help="engine at scale up to 1,000 nodes only")
    suite.add_argument("--out", type=Path, default=None, help="output directory (default out/bench)")
    frontier = commands.add_parser("frontier", help="the suite's idle-time sweep alone: cost against p95 wait, and "
                                   "whether ours dominates ca and nap")
    frontier.add_argument("--seed", type=int, default=0)
    frontier.add_argument("--out", type=Path, default=None, help="output directory (default out/bench/frontier)")
    return parser


def _virtual_node(args: argparse.Namespace) -> dict[str, int] | None:
    """The virtual node's limits from --aci-quota, --aci-creates and --aci-groups; None leaves the sandbox's defaults."""
    limits: dict[str, int] = {}
    if args.aci_quota is not None:
        limits["quota_cores"] = args.aci_quota
    if args.aci_creates is not None:
        limits["creates_per_5min"], limits["creates_per_hour"] = args.aci_creates
    if args.aci_groups is not None:
        limits["max_container_groups"] = args.aci_groups
    return limits or None


def _spot(args: argparse.Namespace) -> dict[str, Any] | None:
    """The spot tier from the --spot-* flags; None leaves the tier's defaults (spot policies only use it)."""
    tier: dict[str, Any] = {}
    if args.spot_eviction_rate is not None:
        tier["eviction_rate_per_hour"] = args.spot_eviction_rate
    if args.spot_no_notice:
        tier["notice"] = False
    if args.spot_eviction_policy is not None:
        tier["eviction_policy"] = args.spot_eviction_policy
    if args.spot_price_fraction is not None:
        tier["price_fraction"] = args.spot_price_fraction
    if args.spot_stale_nodes:
        tier["cloud_node_lifecycle"] = False
    return tier or None


def _quotas(args: argparse.Namespace) -> dict[str, int]:
    quotas: dict[str, int] = {}
    if args.quota_low_priority_cores is not None:
        quotas["lowPriorityCores"] = args.quota_low_priority_cores
    if args.quota_cores is not None:
        quotas["cores"] = args.quota_cores
    return quotas


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "suite":
        from devtools.replay.suite import OUT, run_suite

        run_suite(seed=args.seed, quick=args.quick, out=args.out or OUT)
        return 0
    if args.command == "frontier":
        from devtools.replay.suite import OUT, run_frontier

        run_frontier(seed=args.seed, out=args.out or OUT / "frontier")
        return 0

    from devtools import bench_report
    from devtools.replay.harness import ReplayConfig
    from devtools.replay.metrics import lower_bound_for
    from devtools.replay.run import replay
    from devtools.replay.suite import with_reference_ratios
    from devtools.replay.traces import TraceError, load_trace, trace_pools_name

    if not 0.0 <= args.failure_rate <= 1.0:
        print(f"--failure-rate must be between 0 and 1, got {args.failure_rate}", file=sys.stderr)
        return 2
    if args.buffer_nodes < 0:
        print(f"--buffer-nodes must be 0 or more, got {args.buffer_nodes}", file=sys.stderr)
        return 2
    if args.start_fraction <= 0:
        print(f"--start-fraction must be above 0, got {args.start_fraction}", file=sys.stderr)
        return 2
    quiet_spot_logs()
    spot = _spot(args)
    if spot is not None and args.policy not in (*SPOT_POLICIES, SPOT_FIRST_POLICY):
        print(f"the --spot-* flags apply to {' and '.join(SPOT_POLICIES)} only", file=sys.stderr)
        return 2
    try:
        SpotTier.of(spot)
    except ValueError as exc:
        print(f"bad spot tier: {exc}", file=sys.stderr)
        return 2
    if any(v < 0 for v in _quotas(args).values()):
        print("a quota must be at least 0", file=sys.stderr)
        return 2
    try:
        trace = load_trace(args.trace, seed=args.seed)
        kind = trace_pools_name(args.trace)
    except (TraceError, OSError) as exc:
        print(f"cannot read trace: {exc}", file=sys.stderr)
        return 2
    pools = POOL_SETS[args.pools] if args.pools else POOL_SETS.get(kind or args.trace, DEFAULT_POOLS)
    unknown = sorted({pool for pool, _, _ in args.pool_tag} - {p.name for p in pools})
    if unknown:
        print(f"--pool-tag names no pool of this run: {', '.join(unknown)} (pools: {', '.join(p.name for p in pools)})",
              file=sys.stderr)
        return 2
    pools = tuple(replace(p, tags=(*p.tags, *((name, value) for pool, name, value in args.pool_tag if pool == p.name)))
                  for p in pools)
    config = ReplayConfig(seed=args.seed, pools=pools, boot_median_s=args.boot_median, boot_p95_s=args.boot_p95,
                          start_fraction=args.start_fraction,
                          provisioning_failure_rate=args.failure_rate, settings=dict(args.setting),
                          virtual_node=_virtual_node(args), spot=spot, quotas=_quotas(args),
                          buffer_nodes=args.buffer_nodes)
    try:
        outcome = replay(trace, args.policy, config)
    except ValueError as exc:  # a bad --setting (SettingsError names it) or a trace no pool can hold
        print(f"cannot replay: {exc}", file=sys.stderr)
        return 2
    # The lower bound of the on-demand pools at this run's boot median (devtools.replay.metrics.lower_bound_for);
    # the suite's rule says which runs it bounds.
    bound = lower_bound_for(trace, config)
    per_policy = {args.policy: with_reference_ratios(args.policy, outcome.result, bound["cost"]), "lower_bound": bound}
    results = {"traces": {trace.name: {"note": trace.note}}, "replay": {trace.name: per_policy}}
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
