from __future__ import annotations

import pytest

from shared.domain import Taint, Toleration
from shared.engine.scale_up import ScaleUpOptions, plan_scale_up
from tests.builders import daemon_pod, group, node, pod, res, snapshot, template


def pending(n: int, **kw: object) -> list:
    return [pod(f"p{i}", pending=True, **kw) for i in range(n)]  # type: ignore[arg-type]


CASES = [
    # (id, snapshot, expected {group: new_target}, expected absorbed count, expected unplaceable count)
    ("no pending pods", snapshot(groups=[group(target=1)], nodes=[node("n0")]), {}, 0, 0),
    ("fits on free space of a ready node",
     snapshot(groups=[group(target=1)], nodes=[node("n0")], pods=pending(3)), {}, 3, 0),
    ("4 cpu node: 8 one-cpu pods need 2 more nodes beyond a full node",
     snapshot(groups=[group(target=1)], nodes=[node("n0")],
              pods=[pod("busy", cpu=4, node_name="n0")] + pending(8)), {"rg/pool": 3}, 0, 0),
    ("booting nodes absorb pods: never ask twice",
     snapshot(groups=[group(target=3)], nodes=[node("n0")],
              pods=[pod("busy", cpu=4, node_name="n0")] + pending(8)), {}, 8, 0),
    ("max size caps the increase, the rest stays unplaceable",
     snapshot(groups=[group(target=1, max_size=2)], nodes=[node("n0")],
              pods=[pod("busy", cpu=4, node_name="n0")] + pending(8)), {"rg/pool": 2}, 0, 4),
    ("pod bigger than any node triggers nothing",
     snapshot(groups=[group(target=0)], pods=pending(1, cpu=64)), {}, 0, 1),
    ("node selector picks the matching group",
     snapshot(groups=[group("a", target=0), group("b", target=0)],
              templates={"rg/a": template(labels={"pool": "a"}), "rg/b": template(labels={"pool": "b"})},
              pods=pending(2, selector={"pool": "b"})), {"rg/b": 1}, 0, 0),
    ("untolerated taint blocks a group; toleration admits it",
     snapshot(groups=[group("gpu", target=0)],
              templates={"rg/gpu": template(taints=(Taint("nvidia.com/gpu", "true", "NoSchedule"),))},
              pods=pending(1) + [pod("tol", pending=True, tolerations=(Toleration("nvidia.com/gpu", "Exists"),))]),
     {"rg/gpu": 1}, 0, 1),
    ("cordoned and deleting nodes offer no free space",
     snapshot(groups=[group(target=2)],
              nodes=[node("n0", cordoned=True), node("n1", instance=1, taints=(Taint("ToBeDeletedByClusterAutoscaler"),))],
              pods=pending(1)), {"rg/pool": 3}, 0, 0),
    ("daemonset overhead shrinks new nodes",
     snapshot(groups=[group(target=1)], nodes=[node("n0")],
              pods=[daemon_pod("n0", cpu=0.5), pod("busy", cpu=3.5, node_name="n0")] + pending(4)), {"rg/pool": 3}, 0, 0),
    ("memory-bound pods",
     snapshot(groups=[group(target=0)], pods=pending(4, cpu=0.1, mem=7)), {"rg/pool": 2}, 0, 0),
]


@pytest.mark.parametrize("case_id,snap,expected,absorbed,unplaceable", CASES, ids=[c[0] for c in CASES])
def test_plan_scale_up(case_id, snap, expected, absorbed, unplaceable) -> None:
    plan = plan_scale_up(snap)
    assert {i.group_id: i.new_target for i in plan.increases} == expected
    assert len(plan.absorbed) == absorbed
    assert len(plan.unplaceable) == unplaceable


def test_least_waste_prefers_the_snugger_group() -> None:
    snap = snapshot(
        groups=[group("big", target=0), group("small", target=0)],
        templates={"rg/big": template(res(16, 64, 110)), "rg/small": template(res(2, 8, 110))},
        pods=pending(2, cpu=1, mem=4),
    )
    plan = plan_scale_up(snap)
    assert [(i.group_id, i.delta) for i in plan.increases] == [("rg/small", 1)]


def test_max_nodes_per_scale_up() -> None:
    snap = snapshot(groups=[group(target=0, max_size=100)], pods=pending(20, cpu=4))
    plan = plan_scale_up(snap, options=ScaleUpOptions(max_nodes_per_scale_up=5))
    assert [i.delta for i in plan.increases] == [5]
    assert len(plan.unplaceable) == 15


def test_unplaceable_reasons_name_each_group() -> None:
    snap = snapshot(groups=[group("a", target=0), group("b", target=0, max_size=0)],
                    templates={"rg/a": template(labels={"x": "1"}), "rg/b": template()},
                    pods=pending(1, selector={"x": "2"}))
    reason = plan_scale_up(snap).unplaceable["default/p0"]
    assert "rg/a: node(s) didn't match node selector" in reason
    assert "rg/b:" in reason


def test_group_without_template_is_skipped_with_reason() -> None:
    snap = snapshot(groups=[group(target=0, vm_size="Standard_Unknown")], templates={}, pods=pending(1))
    plan = plan_scale_up(snap)
    assert plan.increases == ()
    assert "no node template" in plan.unplaceable["default/p0"]
