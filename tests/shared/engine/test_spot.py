"""Spot: eviction detection from instance states and node signals, replacement demand, keeping pods off spot."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.domain import SPOT, SPOT_LABEL, GroupState, Instance, Taint, Toleration
from shared.engine.scale_up import ScaleUpOptions, plan_scale_up
from shared.engine.spot import (
    DEALLOCATED,
    DELETED,
    NOTICE,
    SIGNAL,
    EvictionSignal,
    find_evictions,
    keep_off_spot,
    replacement_demand,
    stopped_by_eviction,
)
from shared.engine.templates import template_from_tags
from tests.builders import group, node, pod, res, sel, snapshot, template

SPOT_GROUP = replace(group("spot", target=3), priority=SPOT, eviction_policy="Delete")
REGULAR = group("od", target=1)
TOLERATES_SPOT = (Toleration(SPOT_LABEL, "Equal", "spot", "NoSchedule"),)


def world(**instance_states: str):  # type: ignore[no-untyped-def]
    nodes = [node(f"spot-{i}", group_name="spot", instance=i) for i in range(3)] + [node("od-0", group_name="od")]
    pods = [pod("web-a", node_name="spot-0"), pod("job-a", node_name="spot-0", owner="Job"),
            pod("bare", node_name="spot-0", owner=None), pod("web-b", node_name="spot-1"), pod("x", node_name="od-0")]
    listed = [Instance(str(i), power_state=instance_states.get(str(i), "running")) for i in range(3)
              if instance_states.get(str(i)) != "gone"]
    return snapshot(nodes=nodes, pods=pods, groups=[SPOT_GROUP, REGULAR]), {SPOT_GROUP.id: listed}


@pytest.mark.parametrize("case_id,states,group_state,signal,noticed,expected", [
    ("all running: nothing", {}, GroupState(SPOT_GROUP.id), None, (), {}),
    ("instance gone: deleted", {"0": "gone"}, GroupState(SPOT_GROUP.id), None, (), {"spot-0": DELETED}),
    ("instance deallocated by Azure", {"1": "deallocated"}, GroupState(SPOT_GROUP.id), None, (),
     {"spot-1": DEALLOCATED}),
    ("deallocated by us: not an eviction", {"1": "deallocated"}, GroupState(SPOT_GROUP.id, stopped=frozenset({"1"})),
     None, (), {}),
    ("being removed by us: not an eviction", {"0": "gone"},
     GroupState(SPOT_GROUP.id, removing={"spot-0": "scale-down:x"}), None, (), {}),
    ("a Preempt notice names it", {}, GroupState(SPOT_GROUP.id), None, ("spot-2",), {"spot-2": NOTICE}),
    ("an agent's taint", {}, GroupState(SPOT_GROUP.id), EvictionSignal("taint", "evict-soon"), (), {"spot-1": SIGNAL}),
])
def test_find_evictions(case_id, states, group_state, signal, noticed, expected) -> None:  # type: ignore[no-untyped-def]
    snap, listed = world(**states)
    if signal is not None:
        snap = replace(snap, nodes=tuple(replace(n, taints=(Taint("evict-soon"),)) if n.name == "spot-1" else n
                                         for n in snap.nodes))
    found = find_evictions(snap, listed, {SPOT_GROUP.id: group_state, REGULAR.id: GroupState(REGULAR.id)},
                           signal=signal, noticed=noticed, batch={"default/job-a"})
    assert {e.node: e.how for e in found} == expected
    for eviction in found:  # only spot nodes, and never a DaemonSet pod
        assert eviction.group_id == SPOT_GROUP.id
        if eviction.node == "spot-0":
            assert set(eviction.pods) == {"default/web-a", "default/job-a", "default/bare"}
            assert eviction.job_pods == ("default/job-a",)


def test_a_regular_group_never_reports_evictions() -> None:
    snap, _ = world()
    assert find_evictions(snap, {REGULAR.id: []}, {REGULAR.id: GroupState(REGULAR.id)}) == []


def test_replacements_are_demand_at_once_and_the_node_is_gone() -> None:
    snap, listed = world(**{"0": "gone"})
    found = find_evictions(snap, listed, {SPOT_GROUP.id: GroupState(SPOT_GROUP.id)})
    planning = replacement_demand(snap, found)
    assert "spot-0" not in {n.name for n in planning.nodes}
    pending = {p.key for p in planning.pods if p.unschedulable and p.node_name is None}
    # Pods whose controller recreates them wait for a node again; a bare pod is gone for good.
    assert pending == {"default/web-a", "default/job-a"}
    assert "default/bare" not in {p.key for p in planning.pods}
    assert {p.key for p in planning.pods if p.node_name} == {"default/web-b", "default/x"}


def test_deallocated_evictions_are_stopped_capacity() -> None:
    snap, listed = world(**{"1": "deallocated"})
    found = find_evictions(snap, listed, {SPOT_GROUP.id: GroupState(SPOT_GROUP.id)})
    assert stopped_by_eviction(found) == {SPOT_GROUP.id: {"1"}}


@pytest.mark.parametrize("text,ok", [("taint:x/y", True), ("condition:Preempting", True), ("", True),
                                     ("label:x", False), ("taint:", False), ("x", False)])
def test_signal_setting(text, ok) -> None:  # type: ignore[no-untyped-def]
    if ok:
        EvictionSignal.parse(text)
    else:
        with pytest.raises(ValueError, match="taint:<key> or condition:<type>"):
            EvictionSignal.parse(text)


def test_spot_templates_carry_the_label_and_taint() -> None:
    tmpl = template_from_tags(replace(SPOT_GROUP, tags={"k8s.io_cluster-autoscaler_node-template_resources_cpu": "4",
                                                        "k8s.io_cluster-autoscaler_node-template_resources_memory": "16Gi"}))
    assert tmpl is not None and tmpl.labels[SPOT_LABEL] == "spot"
    assert Taint(SPOT_LABEL, "spot", "NoSchedule") in tmpl.taints
    regular = template_from_tags(replace(REGULAR, tags=dict(SPOT_GROUP.tags, **{
        "k8s.io_cluster-autoscaler_node-template_resources_cpu": "4",
        "k8s.io_cluster-autoscaler_node-template_resources_memory": "16Gi"})))
    assert regular is not None and SPOT_LABEL not in regular.labels


def _planning(pods):  # type: ignore[no-untyped-def]
    spot, od = replace(group("spot", target=0), priority=SPOT), group("od", target=0)
    spot_template = template(res(4, 16, 110), labels={SPOT_LABEL: "spot"},
                             taints=(Taint(SPOT_LABEL, "spot", "NoSchedule"),))
    return spot, od, snapshot(pods=pods, groups=[spot, od], templates={spot.id: spot_template, od.id: template(res(4, 16, 110))})


def test_spot_first_for_pods_that_tolerate_it_on_demand_otherwise() -> None:
    pods = [pod("batch", cpu=3, pending=True, tolerations=TOLERATES_SPOT, owner="Job"),
            pod("web", cpu=3, pending=True)]
    spot, od, snap = _planning(pods)
    plan = plan_scale_up(snap, options=ScaleUpOptions(spot_first=True))
    placed = {key: inc.group_id for inc in plan.increases for key in inc.pods}
    assert placed == {"default/batch": spot.id, "default/web": od.id}


def test_on_demand_selector_keeps_tolerating_pods_off_spot() -> None:
    pods = [pod("db", cpu=3, pending=True, tolerations=TOLERATES_SPOT, labels={"tier": "db"}),
            pod("batch", cpu=3, pending=True, tolerations=TOLERATES_SPOT)]
    spot, od, snap = _planning(pods)
    snap = replace(snap, pods=keep_off_spot(snap.pods, sel(tier="db")))
    plan = plan_scale_up(snap, options=ScaleUpOptions(spot_first=True))
    placed = {key: inc.group_id for inc in plan.increases for key in inc.pods}
    assert placed == {"default/db": od.id, "default/batch": spot.id}


def test_a_replacement_already_made_is_not_planned_twice() -> None:
    from datetime import timedelta

    from tests.builders import T0
    snap, _ = world()
    snap = replace(snap, nodes=tuple(replace(n, taints=(Taint("vmss-autoscaler.io/spot-preempted"),))
                                     if n.name == "spot-0" else n for n in snap.nodes))
    evicted = next(p for p in snap.pods if p.name == "web-a")
    evicted = replace(evicted, terminating=True, deleted_at=T0)
    fresh = replace(pod("web-a2", pending=True, owner_name=evicted.owner.name), created_at=T0 + timedelta(seconds=1))
    snap = replace(snap, pods=tuple(evicted if p.name == "web-a" else p for p in snap.pods) + (fresh,))
    found = find_evictions(snap, {}, {SPOT_GROUP.id: GroupState(SPOT_GROUP.id)}, noticed=("spot-0",))
    planning = replacement_demand(snap, found)
    waiting = [p for p in planning.pods if p.node_name is None and p.owner and p.owner.name == evicted.owner.name]
    assert len(waiting) == 1  # one pod of the owner was lost, one replacement is planned


def test_a_node_under_notice_is_written_off_so_its_replacement_gets_new_capacity() -> None:
    snap, _ = world()
    snap = replace(snap, nodes=tuple(replace(n, taints=(Taint("vmss-autoscaler.io/spot-preempted"),), unschedulable=True)
                                     if n.name == "spot-0" else n for n in snap.nodes))
    found = find_evictions(snap, {}, {SPOT_GROUP.id: GroupState(SPOT_GROUP.id)}, noticed=("spot-0",))
    planning = replacement_demand(snap, found)
    spot = next(g for g in planning.groups if g.id == SPOT_GROUP.id)
    assert spot.running_target == SPOT_GROUP.running_target - 1
    # A live-node template of the group never carries our notice taint.
    from shared.engine.templates import template_from_node
    noticed = next(n for n in snap.nodes if n.name == "spot-0")
    assert not any(t.key.startswith("vmss-autoscaler.io/") for t in template_from_node(noticed, SPOT_GROUP).taints)


def test_a_replacement_made_within_the_grace_period_is_not_planned_twice() -> None:
    """The API sets deletionTimestamp to the request time plus the grace period: the replacement is older."""
    from datetime import timedelta

    from tests.builders import T0
    snap, _ = world()
    evicted = replace(next(p for p in snap.pods if p.name == "web-a"), terminating=True,
                      deleted_at=T0 + timedelta(seconds=20), termination_grace_seconds=20)
    fresh = replace(pod("web-a2", pending=True, owner_name=evicted.owner.name), created_at=T0 + timedelta(seconds=1))
    other = replace(pod("web-z", pending=True, owner_name=evicted.owner.name), created_at=T0 - timedelta(minutes=5))
    snap = replace(snap, pods=tuple(evicted if p.name == "web-a" else p for p in snap.pods) + (fresh, other))
    found = find_evictions(snap, {}, {SPOT_GROUP.id: GroupState(SPOT_GROUP.id)}, noticed=("spot-0",))
    planning = replacement_demand(snap, found)
    waiting = {p.name for p in planning.pods if p.node_name is None and p.owner and p.owner.name == evicted.owner.name}
    assert waiting == {"web-a", "web-z"}  # the stand-in, and a pending replica older than the eviction


@pytest.mark.parametrize(("other", "covered"), [
    ({}, True),  # the group itself
    ({"name": "twin"}, True),  # another spot group of the size in the zone: Azure is short of the same capacity
    ({"priority": "Regular"}, False),  # on demand of the size: where the replacements go
    ({"vm_size": "Standard_E4s_v5"}, False),  # another spot size
    ({"zones": ("2",)}, False),  # the size's spot capacity in another zone
])
def test_a_preempt_notice_marks_its_spot_size_in_its_zones_only(other: dict[str, object], covered: bool) -> None:
    from shared.engine.offerings import covers
    from shared.engine.spot import preempted_offerings

    spot = replace(group("spot", zones=("1",)), priority="Spot")
    keys = preempted_offerings(spot)
    assert [(k.scope, k.name, k.zone, k.priority) for k in keys] == [("size", "standard_d4s_v5", "1", "Spot")]
    assert any(covers(k, replace(spot, **other)) for k in keys) == covered  # type: ignore[arg-type]
    regional = preempted_offerings(replace(spot, zones=()))
    assert [k.zone for k in regional] == [""]  # a regional group: every zone
