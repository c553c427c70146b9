"""The benchmark's synthetic clusters exercise the planners the way the issues describe."""

from __future__ import annotations

from collections import Counter

from devtools.bench import Case, DrainCase, drainable_cluster, plan_drainable, synthetic_cluster, table
from shared.engine import reasons
from shared.engine.scale_up import pending_pods, plan_scale_up


def test_synthetic_cluster_has_the_requested_shape_and_real_demand() -> None:
    case = Case("tiny", nodes=20, pods_per_node=30, pending=1000, groups=4, target_seconds=1.0)
    snapshot = synthetic_cluster(case)
    assert len(snapshot.nodes) == 20
    assert len([p for p in snapshot.pods if p.node_name]) == 20 * 30
    assert len(pending_pods(snapshot)) == 1000
    plan = plan_scale_up(snapshot)
    assert sum(i.delta for i in plan.increases) > 0  # about 1,100 CPU pending against about 160 free: new nodes needed


def test_drainable_cluster_makes_the_scale_down_evaluation_do_the_work() -> None:
    """Many candidates, most of whose pods must really be moved (through every filter); some kept for each reason."""
    snapshot = drainable_cluster(DrainCase("small", nodes=250, pods_per_node=30, groups=10, target_seconds=None))
    assert len(snapshot.nodes) == 250
    per_node = Counter(p.node_name for p in snapshot.pods if p.node_name)
    assert Counter(per_node.values()).most_common(1)[0][0] == 30  # 30 pods a node, but for the empty ones

    plan = plan_drainable(snapshot)
    kept = Counter(reason.code for reason in plan.kept.values())
    # A large share of the cluster is found unneeded, with the moves simulated together.
    assert len(plan.unneeded) >= 50
    # Some candidates are kept for each pin rule, for the budget counted across nodes, and for shared room.
    for code in (reasons.NOT_SAFE_TO_EVICT, reasons.UNMOVABLE_KUBE_SYSTEM_POD, reasons.NOT_ENOUGH_PDB,
                 reasons.RECEIVES_MOVED_PODS):
        assert kept[code] >= 1, code
    # Removals are chosen, empty nodes first, within MAX_SCALE_DOWN_PARALLELISM (10).
    assert len(plan.removals) == 10 and kept[reasons.MAX_PARALLELISM_REACHED] == len(plan.unneeded) - 10
    assert {r.kind for r in plan.removals} == {"empty", "drain"}
    assert plan.removals[0].kind == "empty" and any(r.move for r in plan.removals)

    # Every movable pod of an unneeded node was placed elsewhere by the simulation: among them
    # are pods with node selectors, hostname anti-affinity and zone spread, so every filter ran.
    moved = [p for p in snapshot.pods if p.node_name in plan.unneeded and p.owner and p.owner.kind == "ReplicaSet"]
    assert len(moved) >= 50 * 25
    assert any(p.node_selector.get("tier") for p in moved)
    assert any(p.pod_anti_affinity for p in moved)
    assert any(p.topology_spread for p in moved)
    # Some unneeded nodes wait for a running Job: batch nodes are candidates too.
    batch_nodes = {p.node_name for p in snapshot.pods if p.owner and p.owner.kind == "Job"}
    assert batch_nodes & set(plan.unneeded)
    # Pending pods are there, and too big to keep any node.
    assert pending_pods(snapshot) and reasons.PENDING_PODS_COULD_USE not in kept


def test_the_table_says_whether_each_target_was_met() -> None:
    evaluation = {"scale_down_eval_peak_mib": 15.0, "unneeded": 3, "candidates": 4, "removals": 1}
    rows = table({
        "slow": {**evaluation, "scale_down_eval_seconds": 1.2, "scale_down_eval_target_seconds": 1.0},
        "fast": {**evaluation, "scale_down_eval_seconds": 0.4, "scale_down_eval_target_seconds": 1.0},
        "big": {**evaluation, "scale_down_eval_seconds": 3.0, "scale_down_eval_target_seconds": None},
    })
    assert "| slow | scale-down evaluation | 1.200 s | 1.0 s (MISSED) |" in rows[2]
    assert "1.0 s (met)" in rows[3] and "| 3.000 s | - |" in rows[4]
