"""`make bench`: how fast the decision engine plans, on synthetic clusters of the sizes issue 3 names.

Prints, for each size, the wall time and peak Python memory (tracemalloc) of one scale-up plan
and one scale-down plan, best of a few runs. Figures, not assertions: targets belong here, not in
timed tests that flake on a noisy machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from shared.domain import ClusterSnapshot, GroupState, Instance, Node, NodeGroup, OwnerRef, Pod, Resources
from shared.engine.scale_down import plan_scale_down
from shared.engine.scale_up import plan_scale_up
from shared.engine.templates import build_templates

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
GIB = 1024**3
SUB = "00000000-0000-0000-0000-000000000000"
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    name: str
    nodes: int
    pods_per_node: int
    pending: int
    groups: int
    target_seconds: float  # the target for the scale-up plan


CASES = (
    Case("1,000 nodes x 30 pods, 3,000 pending, 10 groups", 1000, 30, 3000, 10, 0.5),
    Case("5,000 nodes x 30 pods, 10,000 pending, 10 groups", 5000, 30, 10000, 10, 3.0),
)


def synthetic_cluster(case: Case, *, seed: int = 0) -> ClusterSnapshot:
    """Groups of D16-like nodes in three zones, 30 small pods per node, pending replicas of 50 deployments."""
    rng = random.Random(seed)
    groups = []
    nodes: list[Node] = []
    pods: list[Pod] = []
    per_group = case.nodes // case.groups
    for g in range(case.groups):
        name = f"pool-{g:02d}"
        zone = f"westeurope-{g % 3 + 1}"
        groups.append(NodeGroup("rg-bench", name, 0, per_group * 3, per_group, "Standard_D16s_v5",
                                instances=tuple(Instance(str(i)) for i in range(per_group)), zones=(str(g % 3 + 1),)))
        for i in range(per_group):
            node_name = f"{name}-{i:05d}"
            labels = {"kubernetes.io/hostname": node_name, "topology.kubernetes.io/zone": zone, "agentpool": name,
                      "kubernetes.io/os": "linux", "tier": "batch" if g % 2 else "web"}
            nodes.append(Node(node_name, Resources(15_740, 58 * GIB, 110), NOW - timedelta(hours=2),
                              f"azure:///subscriptions/{SUB}/resourceGroups/rg-bench/providers/Microsoft.Compute/"
                              f"virtualMachineScaleSets/{name}/virtualMachines/{i}", labels=labels, ready=True))
            pods.append(Pod("kube-system", f"kube-proxy-{node_name}", Resources(100, 128 * 1024**2), NOW - timedelta(hours=2),
                            node_name=node_name, phase="Running", owner=OwnerRef("DaemonSet", "kube-proxy")))
            for p in range(case.pods_per_node - 1):
                cpu = rng.choice((300, 500, 700))  # nodes run nearly full, so pending pods need new nodes
                pods.append(Pod("apps", f"{node_name}-p{p}", Resources(cpu, cpu * 4 * 1024**2), NOW - timedelta(hours=1),
                                node_name=node_name, phase="Running", owner=OwnerRef("ReplicaSet", f"rs-{p % 40}")))
    deployments = 50
    for d in range(deployments):
        cpu = 500 + 250 * (d % 6)
        selector = {"tier": "batch"} if d % 3 == 0 else {}
        for r in range(case.pending // deployments):
            pods.append(Pod("apps", f"pending-{d}-{r}", Resources(cpu, 2 * GIB), NOW - timedelta(minutes=1),
                            unschedulable=True, owner=OwnerRef("ReplicaSet", f"pending-{d}"), node_selector=selector))
    return ClusterSnapshot(NOW, tuple(nodes), tuple(pods), tuple(groups), build_templates(groups, nodes))


def measure(action: Callable[[], Any], *, repeat: int) -> tuple[float, float]:
    """(best seconds, peak MiB) over `repeat` runs; tracemalloc runs separately so it does not slow the timing."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    gc.collect()
    tracemalloc.start()
    action()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return best, peak / 1024**2


def run(*, quick: bool = False) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for case in CASES[:1] if quick else CASES:
        snapshot = synthetic_cluster(case)
        up_seconds, up_mib = measure(lambda: plan_scale_up(snapshot), repeat=3)
        states = {g.id: GroupState(g.id) for g in snapshot.groups}
        since = {n.name: NOW - timedelta(minutes=20) for n in snapshot.nodes[:: 7]}
        down_seconds, down_mib = measure(
            lambda: plan_scale_down(snapshot, unneeded_since=since, group_states=states, now=NOW), repeat=3)
        plan = plan_scale_up(snapshot)
        results[case.name] = {
            "scale_up_seconds": round(up_seconds, 3), "scale_up_peak_mib": round(up_mib, 1),
            "scale_up_target_seconds": case.target_seconds,
            "scale_down_seconds": round(down_seconds, 3), "scale_down_peak_mib": round(down_mib, 1),
            "pods": len(snapshot.pods), "nodes": len(snapshot.nodes),
            "planned_new_nodes": sum(i.delta for i in plan.increases), "absorbed": len(plan.absorbed),
            "unplaceable": len(plan.unplaceable),
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="only the 1,000-node case")
    parser.add_argument("--json", type=Path, default=ROOT / "out" / "bench" / "engine.json")
    args = parser.parse_args(argv)
    results = run(quick=args.quick)
    print("| cluster | scale-up plan | target | peak memory | scale-down plan | peak memory |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        verdict = "met" if r["scale_up_seconds"] <= r["scale_up_target_seconds"] else "MISSED"
        print(f"| {name} | {r['scale_up_seconds']:.3f} s | {r['scale_up_target_seconds']} s ({verdict}) | "
              f"{r['scale_up_peak_mib']:.0f} MiB | {r['scale_down_seconds']:.3f} s | {r['scale_down_peak_mib']:.0f} MiB |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"engine": results, "python": sys.version.split()[0]}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
