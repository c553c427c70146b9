"""The benchmark's synthetic cluster exercises the planner the way the issue describes."""

from __future__ import annotations

from devtools.bench import Case, synthetic_cluster
from shared.engine.scale_up import pending_pods, plan_scale_up


def test_synthetic_cluster_has_the_requested_shape_and_real_demand() -> None:
    case = Case("tiny", nodes=20, pods_per_node=30, pending=1000, groups=4, target_seconds=1.0)
    snapshot = synthetic_cluster(case)
    assert len(snapshot.nodes) == 20
    assert len([p for p in snapshot.pods if p.node_name]) == 20 * 30
    assert len(pending_pods(snapshot)) == 1000
    plan = plan_scale_up(snapshot)
    assert sum(i.delta for i in plan.increases) > 0  # about 1,100 CPU pending against about 160 free: new nodes needed
