"""`make bench`: how fast the decision engine plans, on synthetic clusters of the sizes issues 3 and 4 name.

Prints the wall time and peak Python memory (tracemalloc) of each plan, best of a few runs:

- on a nearly full cluster with pending pods (issue 3): one scale-up plan, and one scale-down
  plan, which finds few candidates there;
- on a cluster where about 40% of the nodes are under-utilised (issue 4): one scale-down
  evaluation that classifies every candidate's pods, simulates moving them all onto the
  nodes that stay, and chooses the removals.

Figures, not assertions: targets belong here, not in timed tests that flake on a noisy machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

from shared.domain import (
    ClusterSnapshot,
    DisruptionBudget,
    GroupState,
    Instance,
    LabelSelector,
    Node,
    NodeGroup,
    OwnerRef,
    Pod,
    PodAffinityTerm,
    Resources,
    TopologySpreadConstraint,
)
from shared.engine.drainability import SAFE_TO_EVICT
from shared.engine.placement import PlacementState
from shared.engine.scale_down import ScaleDownPlan, plan_scale_down
from shared.engine.scale_up import plan_scale_up
from shared.engine.templates import build_templates

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
GIB = 1024**3
SUB = "00000000-0000-0000-0000-000000000000"
ROOT = Path(__file__).resolve().parents[1]
_R = TypeVar("_R")


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


# --- scale-down evaluation (issue 4) -----------------------------------------------------------


@dataclass(frozen=True)
class DrainCase:
    name: str
    nodes: int
    pods_per_node: int
    groups: int
    target_seconds: float | None  # the target for the scale-down evaluation; None: for information


DRAIN_CASES = (
    DrainCase("1,000 nodes x 30 pods, 40% under-utilised", 1000, 30, 10, 1.0),
    DrainCase("5,000 nodes x 30 pods, 40% under-utilised", 5000, 30, 10, None),
)

DEPLOYMENTS_PER_TIER = 60  # more than the pods a node runs, so a node holds at most one pod of each
UNNEEDED_FOR = timedelta(minutes=20)  # longer than the default unneeded time, so candidates are due
SPREAD_DEPLOYMENTS = (5, 17)  # spread over zones, maxSkew 1
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


def _deployment_pod(tier: str, d: int, node_name: str, p: int, cpu: int) -> Pod:
    """Replica `p` of deployment `d` of a tier, shaped as the scheduler's filters see real workloads.

    One deployment in three selects its tier's nodes, one in eight keeps its replicas on
    distinct hosts (required anti-affinity), two spread over zones (DoNotSchedule).
    """
    app = f"{tier}-app-{d:02d}"
    selector = LabelSelector((("app", app),))
    return Pod(
        "apps", f"{app}-{node_name}-{p}", Resources(cpu, cpu * 3 * 1024**2), NOW - timedelta(hours=1),
        node_name=node_name, phase="Running", owner=OwnerRef("ReplicaSet", f"{app}-7d9f"),
        labels={"app": app, "pod-template-hash": "7d9f", "team": f"team-{d % 4}"},
        node_selector={"tier": tier} if d % 3 == 0 else {"kubernetes.io/os": "linux"} if d % 3 == 1 else {},
        pod_anti_affinity=(PodAffinityTerm(HOSTNAME, selector),) if d % 8 == 0 else (),
        topology_spread=(TopologySpreadConstraint(1, ZONE, label_selector=selector),) if d in SPREAD_DEPLOYMENTS else (),
    )


def _special_pod(kind: str, node_name: str) -> Pod:
    """A pod that changes what removing its node involves: it pins the node, or makes it wait."""
    started = NOW - timedelta(minutes=30)
    if kind == "not-safe-to-evict":
        return Pod("apps", f"cache-{node_name}", Resources(100, 256 * 1024**2), started, node_name=node_name,
                   phase="Running", owner=OwnerRef("ReplicaSet", "cache-5c4b"), labels={"app": "cache"},
                   annotations={SAFE_TO_EVICT: "false"})
    if kind == "kube-system-no-pdb":
        return Pod("kube-system", f"metrics-server-{node_name}", Resources(100, 200 * 1024**2), started,
                   node_name=node_name, phase="Running", owner=OwnerRef("ReplicaSet", "metrics-server-6d8c"),
                   labels={"k8s-app": "metrics-server"})
    if kind == "kube-system-pdb":  # movable, but its PodDisruptionBudget allows one disruption in all
        return Pod("kube-system", f"coredns-{node_name}", Resources(100, 70 * 1024**2), started,
                   node_name=node_name, phase="Running", owner=OwnerRef("ReplicaSet", "coredns-59b4"),
                   labels={"k8s-app": "kube-dns"})
    assert kind == "job"  # batch work: the node waits for it
    return Pod("batch", f"render-{node_name}", Resources(500, 1 * GIB), started, node_name=node_name,
               phase="Running", owner=OwnerRef("Job", f"render-{node_name}"), labels={"job": "render"},
               started_at=started, active_deadline_seconds=7200)


def _light_node_role(k: int) -> str | None:
    """What sets the k-th under-utilised node apart, if anything: every 50th is empty, every 25th is
    pinned by each of three pod rules, every 5th waits for a Job; the rest only run light replicas."""
    if k % 50 == 0:
        return "empty"
    if k % 25 in (1, 2, 3):
        return ("not-safe-to-evict", "kube-system-no-pdb", "kube-system-pdb")[k % 25 - 1]
    return "job" if k % 5 == 4 else None


def drainable_cluster(case: DrainCase, *, seed: int = 0) -> ClusterSnapshot:
    """D16-like nodes in three zones, web and batch tiers; about 40% of the nodes run light pods.

    Busy nodes run at about 90% of their CPU, light ones at about 25%, so the light pods
    fill the busy nodes' room, then that of the light nodes removed last. Some light nodes
    are empty, some hold a pod that pins them (safe-to-evict false, kube-system without a
    PodDisruptionBudget, or covered by an exhausted one) or a running Job. A few pending
    pods fit no node at all.
    """
    rng = random.Random(seed)
    groups: list[NodeGroup] = []
    nodes: list[Node] = []
    pods: list[Pod] = []
    per_group = case.nodes // case.groups
    light_count = 0
    for g in range(case.groups):
        name = f"pool-{g:02d}"
        tier = "batch" if g % 2 else "web"
        groups.append(NodeGroup("rg-bench", name, per_group // 10, per_group * 3, per_group, "Standard_D16s_v5",
                                instances=tuple(Instance(str(i)) for i in range(per_group)), zones=(str(g % 3 + 1),)))
        for i in range(per_group):
            node_name = f"{name}-{i:05d}"
            labels = {HOSTNAME: node_name, ZONE: f"westeurope-{g % 3 + 1}", "agentpool": name,
                      "kubernetes.io/os": "linux", "tier": tier}
            nodes.append(Node(node_name, Resources(15_740, 58 * GIB, 110), NOW - timedelta(hours=2, minutes=i % 60),
                              f"azure:///subscriptions/{SUB}/resourceGroups/rg-bench/providers/Microsoft.Compute/"
                              f"virtualMachineScaleSets/{name}/virtualMachines/{i}", labels=labels, ready=True))
            pods.append(Pod("kube-system", f"kube-proxy-{node_name}", Resources(100, 128 * 1024**2),
                            NOW - timedelta(hours=2), node_name=node_name, phase="Running",
                            owner=OwnerRef("DaemonSet", "kube-proxy")))
            light = rng.random() < 0.4
            role = None
            if light:
                light_count += 1
                role = _light_node_role(light_count)
            if role == "empty":
                continue  # only its DaemonSet pod: removable without a drain
            offset = rng.randrange(DEPLOYMENTS_PER_TIER)
            for p in range(case.pods_per_node - 1 - (role is not None)):
                cpu = rng.choice((50, 100, 150, 200) if light else (400, 500, 600))
                pods.append(_deployment_pod(tier, (offset + p) % DEPLOYMENTS_PER_TIER, node_name, p, cpu))
            if role is not None:
                pods.append(_special_pod(role, node_name))
    for r in range(20):  # too big for any node: checked against every candidate, keeps none
        pods.append(Pod("apps", f"etl-{r}", Resources(32_000, 64 * GIB), NOW - timedelta(minutes=5),
                        unschedulable=True, owner=OwnerRef("ReplicaSet", "etl-6f7a"), labels={"app": "etl"}))
    budgets = (DisruptionBudget("kube-system", "coredns", LabelSelector((("k8s-app", "kube-dns"),)), 1),)
    return ClusterSnapshot(NOW, tuple(nodes), tuple(pods), tuple(groups), build_templates(groups, nodes),
                           disruption_budgets=budgets)


def plan_drainable(snapshot: ClusterSnapshot, *, simulated_at: Mapping[str, datetime] | None = None,
                   state: PlacementState | None = None,
                   pending_placements: Mapping[str, Sequence[str]] | None = None) -> ScaleDownPlan:
    """The scale-down plan the bench times: every node unneeded long enough, every group free of cooldowns.

    `simulated_at` ({} for a first poll) bounds the simulation to the candidate pool; None simulates every
    candidate. `state` and `pending_placements`: a tick's scale-up simulation's, to share them
    (`plan_scale_down`); None runs that simulation here, on the plan's own state.
    """
    since = {n.name: NOW - UNNEEDED_FOR for n in snapshot.nodes}
    states = {g.id: GroupState(g.id) for g in snapshot.groups}
    return plan_scale_down(snapshot, unneeded_since=since, group_states=states, now=NOW, simulated_at=simulated_at,
                           state=state, pending_placements=pending_placements)


def measure(action: Callable[[], _R], *, repeat: int) -> tuple[float, float, _R]:
    """(best seconds, peak MiB, result) over `repeat` runs; tracemalloc runs separately so it does not slow the timing."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - started)
    gc.collect()
    tracemalloc.start()
    action()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return best, peak / 1024**2, result


def run(*, quick: bool = False) -> dict[str, Any]:
    """Every case's figures, by case name: the scale-up cases (issue 3), then the scale-down evaluations (issue 4)."""
    results: dict[str, Any] = {}
    for case in CASES[:1] if quick else CASES:
        snapshot = synthetic_cluster(case)
        up_seconds, up_mib, plan = measure(lambda: plan_scale_up(snapshot), repeat=3)
        states = {g.id: GroupState(g.id) for g in snapshot.groups}
        since = {n.name: NOW - timedelta(minutes=20) for n in snapshot.nodes[:: 7]}
        down_seconds, down_mib, _ = measure(
            lambda: plan_scale_down(snapshot, unneeded_since=since, group_states=states, now=NOW), repeat=3)
        results[case.name] = {
            "scale_up_seconds": round(up_seconds, 3), "scale_up_peak_mib": round(up_mib, 1),
            "scale_up_target_seconds": case.target_seconds,
            "scale_down_seconds": round(down_seconds, 3), "scale_down_peak_mib": round(down_mib, 1),
            "pods": len(snapshot.pods), "nodes": len(snapshot.nodes),
            "planned_new_nodes": sum(i.delta for i in plan.increases), "absorbed": len(plan.absorbed),
            "unplaceable": len(plan.unplaceable),
        }
    for drain_case in DRAIN_CASES[:1] if quick else DRAIN_CASES:
        snapshot = drainable_cluster(drain_case)
        # One timed run of the largest case: it is there for information, and `make bench` should stay short.
        seconds, mib, down = measure(lambda: plan_drainable(snapshot), repeat=3 if drain_case.nodes <= 1000 else 1)
        results[drain_case.name] = {
            "scale_down_eval_seconds": round(seconds, 3), "scale_down_eval_peak_mib": round(mib, 1),
            "scale_down_eval_target_seconds": drain_case.target_seconds,
            "pods": len(snapshot.pods), "nodes": len(snapshot.nodes),
            "candidates": len(set(down.unneeded) | set(down.kept)), "unneeded": len(down.unneeded),
            "removals": len(down.removals),
            "kept": dict(sorted(Counter(reason.code for reason in down.kept.values()).items())),
        }
    return results


def table(results: Mapping[str, Any]) -> list[str]:
    """One row per plan timed, with what the plan found, so a fast plan that found nothing shows."""
    rows = ["| cluster | plan | time | target | peak memory | found |", "|---|---|---|---|---|---|"]
    for name, r in results.items():
        if "scale_up_seconds" in r:
            rows.append(f"| {name} | scale-up | {r['scale_up_seconds']:.3f} s | "
                        f"{_target(r['scale_up_seconds'], r['scale_up_target_seconds'])} | "
                        f"{r['scale_up_peak_mib']:.0f} MiB | {r['planned_new_nodes']:,} new nodes |")
            rows.append(f"| {name} | scale-down (few candidates) | {r['scale_down_seconds']:.3f} s | - | "
                        f"{r['scale_down_peak_mib']:.0f} MiB | |")
        else:
            rows.append(f"| {name} | scale-down evaluation | {r['scale_down_eval_seconds']:.3f} s | "
                        f"{_target(r['scale_down_eval_seconds'], r['scale_down_eval_target_seconds'])} | "
                        f"{r['scale_down_eval_peak_mib']:.0f} MiB | {r['unneeded']:,} of {r['candidates']:,} "
                        f"candidates unneeded, {r['removals']} removed now |")
    return rows


def _target(seconds: float, target: float | None) -> str:
    if target is None:
        return "-"
    return f"{target} s ({'met' if seconds <= target else 'MISSED'})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="only the 1,000-node cases")
    parser.add_argument("--json", type=Path, default=ROOT / "out" / "bench" / "engine.json")
    args = parser.parse_args(argv)
    results = run(quick=args.quick)
    print("\n".join(table(results)))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"engine": results, "python": sys.version.split()[0]}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
