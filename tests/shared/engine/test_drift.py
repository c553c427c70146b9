"""engine.drift: which nodes drifted, and which of them are proposed for replacement now."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import DRIFTED, GroupState, Instance, Replacement, Taint, TO_BE_DELETED_TAINT
from shared.engine.drainability import DO_NOT_DISRUPT, DrainRules
from shared.engine.drift import AGE, IMAGE, MODEL, NODE_IMAGE_LABEL, drifted_nodes, plan_drift
from shared.engine.scale_down import SCALE_DOWN_DISABLED
from tests.builders import T0, group, node, pod, snapshot

GID = "rg/pool"


def _cluster(count: int = 4, *, stale: tuple[int, ...] = (), unknown: tuple[int, ...] = (), image: str = "",
             node_images: dict[int, str] | None = None, ages_h: dict[int, float] | None = None):
    """A pool of `count` nodes; instances in `stale` report latestModelApplied false, in `unknown` None."""
    def applied(i: int) -> bool | None:
        return None if i in unknown else i not in stale
    g = replace(group(target=count), instances=tuple(Instance(str(i), latest_model_applied=applied(i))
                                                     for i in range(count)), node_image_version=image)
    nodes = []
    for i in range(count):
        labels = {NODE_IMAGE_LABEL: (node_images or {}).get(i, image)} if image else {}
        n = node(f"n{i}", instance=i, labels=labels)
        nodes.append(replace(n, created_at=T0 - timedelta(hours=(ages_h or {}).get(i, 1.0))))
    return g, nodes


@pytest.mark.parametrize(
    "kwargs, max_age, expected",
    [
        ({}, timedelta(0), {}),
        ({"stale": (1, 3)}, timedelta(0), {"n1": MODEL, "n3": MODEL}),
        ({"unknown": (0, 1, 2, 3)}, timedelta(0), {}),
        ({"image": "AKSUbuntu-2204-202611.10.0", "node_images": {2: "AKSUbuntu-2204-202610.01.0"}}, timedelta(0),
         {"n2": IMAGE}),
        ({"ages_h": {0: 30.0, 1: 2.0}}, timedelta(hours=24), {"n0": AGE}),
        ({"ages_h": {0: 30.0}}, timedelta(0), {}),  # zero turns ages off
        # model comes before image and age
        ({"stale": (0,), "image": "v2", "node_images": {0: "v1"}, "ages_h": {0: 48.0}}, timedelta(minutes=30),
         {"n0": MODEL, "n1": AGE, "n2": AGE, "n3": AGE}),
    ],
)
def test_drifted_nodes(kwargs, max_age, expected):
    g, nodes = _cluster(**kwargs)
    found = drifted_nodes(snapshot(nodes=nodes, groups=[g]), max_age=max_age, now=T0)
    assert found == expected


def test_nodes_of_unknown_groups_never_drift():
    g, nodes = _cluster(stale=(0, 1))
    other = node("foreign", group_name="not-ours", instance=0)
    found = drifted_nodes(snapshot(nodes=[*nodes, other], groups=[g]), max_age=timedelta(minutes=1), now=T0)
    assert set(found) == {"n0", "n1", "n2", "n3"}  # every node of the pool is older than a minute


def test_negative_max_age_is_refused():
    g, nodes = _cluster()
    with pytest.raises(ValueError, match="max_age"):
        drifted_nodes(snapshot(nodes=nodes, groups=[g]), max_age=timedelta(seconds=-1), now=T0)


def _job(name: str, node_name: str):
    return pod(name, node_name=node_name, owner="Job")


@pytest.mark.parametrize(
    "case, pods, annotations, states, deleting, waits, skipped",
    [
        ("all free", [], {}, {}, (), {}, ()),
        ("batch pod waits", [_job("render-1", "n1")], {}, {}, (), {"n1": "batch pods running"}, ()),
        ("movable pods do not wait", [pod("web", node_name="n1")], {}, {}, (), {}, ()),
        ("pod do-not-disrupt waits", [replace(pod("web", node_name="n2"), annotations={DO_NOT_DISRUPT: "true"})],
         {}, {}, (), {"n2": DO_NOT_DISRUPT}, ()),
        ("node do-not-disrupt waits", [], {"n0": {DO_NOT_DISRUPT: "true"}}, {}, (), {"n0": DO_NOT_DISRUPT}, ()),
        ("scale-down-disabled waits", [], {"n3": {SCALE_DOWN_DISABLED: "true"}}, {}, (),
         {"n3": SCALE_DOWN_DISABLED}, ()),
        ("removing skipped", [], {}, {GID: GroupState(GID, removing={"n1": "a1"})}, (), {}, ("n1",)),
        ("replacing skipped", [], {},
         {GID: GroupState(GID, replacing={"n2": Replacement("n2", DRIFTED, GID, T0)})}, (), {}, ("n2",)),
        ("given-up replacement skipped until its tombstone expires", [], {},
         {GID: GroupState(GID, replacing={"n2": Replacement("n2", DRIFTED, GID, T0 - timedelta(hours=1),
                                                              given_up_at=T0 - timedelta(minutes=5))})},
         (), {}, ("n2",)),
        ("being deleted skipped", [], {}, {}, ("n0",), {}, ("n0",)),
    ],
)
def test_plan_drift(case, pods, annotations, states, deleting, waits, skipped):
    g, nodes = _cluster(stale=(0, 1, 2, 3), ages_h={0: 5.0, 1: 4.0, 2: 3.0, 3: 2.0})
    nodes = [replace(n, annotations=annotations.get(n.name, {}),
                     taints=(Taint(TO_BE_DELETED_TAINT, "1", "NoSchedule"),) if n.name in deleting else ())
             for n in nodes]
    snap = snapshot(nodes=nodes, pods=pods, groups=[g])
    drifted = drifted_nodes(snap, max_age=timedelta(0), now=T0)
    plan = plan_drift(snap, states=states, drifted=drifted, now=T0, drain=DrainRules())

    proposed = [name for p in plan.proposals for name, _ in p.nodes]
    # Every drifted node is proposed, waits, or is already on its way out: exactly one of these.
    assert sorted([*proposed, *plan.waiting, *skipped]) == sorted(drifted), case
    assert set(plan.waiting) == set(waits), case
    for name, fragment in waits.items():
        assert fragment in plan.waiting[name], case
    # One proposal per node, of its own group, oldest first; one new node first, none for a node with no pods to
    # move (the group, at minimum 0, always has room to lose it).
    movable = {p.node_name for p in pods}
    for proposal in plan.proposals:
        assert len(proposal.nodes) == 1 and proposal.count == (1 if proposal.nodes[0][0] in movable else 0)
        assert proposal.reason == DRIFTED and proposal.detail == MODEL
        assert proposal.to_group == proposal.nodes[0][1] == GID
    created = {n.name: n.created_at for n in nodes}
    assert [created[n] for n in proposed] == sorted(created[n] for n in proposed), case


def test_batch_node_is_proposed_once_its_job_ends():
    g, nodes = _cluster(stale=(0, 1))
    running = _job("render-1", "n0")
    busy = snapshot(nodes=nodes, pods=[running], groups=[g])
    done = snapshot(nodes=nodes, pods=[replace(running, phase="Succeeded")], groups=[g])
    for snap, expect_wait in ((busy, True), (done, False)):
        drifted = drifted_nodes(snap, max_age=timedelta(0), now=T0)
        plan = plan_drift(snap, states={}, drifted=drifted, now=T0, drain=DrainRules())
        assert ("n0" in plan.waiting) is expect_wait
        assert any(name == "n0" for p in plan.proposals for name, _ in p.nodes) is not expect_wait


def test_unready_node_waits_and_unknown_names_are_ignored():
    g, nodes = _cluster(stale=(0,))
    nodes[0] = replace(nodes[0], ready=False)
    snap = snapshot(nodes=nodes, groups=[g])
    plan = plan_drift(snap, states={}, drifted={"n0": MODEL, "ghost": MODEL}, now=T0, drain=DrainRules())
    assert not plan.proposals and set(plan.waiting) == {"n0"}


def test_lane_nodes_are_replaced_in_their_lane():
    lane = replace(group(target=1, vm_size="Standard_D8s_v5"), lane="Standard_D8s_v5",
                   lanes=("Standard_D4s_v5", "Standard_D8s_v5"),
                   instances=(Instance("pool_ab12", vm_size="Standard_D8s_v5", latest_model_applied=False),))
    n = node("n0")
    ref = replace(n.instance, instance_id="pool_ab12", lane="Standard_D8s_v5")
    n = replace(n, mapped=True, mapped_to=ref)
    snap = snapshot(nodes=[n], groups=[lane])
    drifted = drifted_nodes(snap, max_age=timedelta(0), now=T0)
    plan = plan_drift(snap, states={}, drifted=drifted, now=T0, drain=DrainRules())
    assert drifted == {"n0": MODEL}
    assert [p.to_group for p in plan.proposals] == [lane.id] and lane.id.endswith("~Standard_D8s_v5")


def _daemon(name: str, node_name: str):
    return pod(name, node_name=node_name, owner="DaemonSet")


@pytest.mark.parametrize(("case", "min_size", "removing", "counts"), [
    # n0..n3 drifted, oldest first; n1 and n3 have only DaemonSet pods, n0 and n2 a pod to move.
    ("room for both", 0, {}, {"n0": 1, "n1": 0, "n2": 1, "n3": 0}),
    ("room for one: the older goes first", 3, {}, {"n0": 1, "n1": 0, "n2": 1, "n3": 1}),
    ("removals in flight take the room", 2, {"x": "a1", "y": "a2"}, {"n0": 1, "n1": 1, "n2": 1, "n3": 1}),
    ("at the minimum: new nodes first", 4, {}, {"n0": 1, "n1": 1, "n2": 1, "n3": 1}),
])
def test_a_drifted_node_with_nothing_to_move_asks_no_new_node_while_its_group_is_above_min(
        case, min_size, removing, counts):  # type: ignore[no-untyped-def]
    g, nodes = _cluster(stale=(0, 1, 2, 3), ages_h={0: 5.0, 1: 4.0, 2: 3.0, 3: 2.0})
    g = replace(g, min_size=min_size)
    pods = [pod("web-0", node_name="n0"), pod("web-2", node_name="n2"),
            *(_daemon(f"ds-{i}", f"n{i}") for i in range(4))]
    snap = snapshot(nodes=nodes, pods=pods, groups=[g])
    states = {GID: GroupState(GID, removing=removing)} if removing else {}
    plan = plan_drift(snap, states=states, drifted=drifted_nodes(snap, max_age=timedelta(0), now=T0), now=T0,
                      drain=DrainRules())
    assert {p.nodes[0][0]: p.count for p in plan.proposals} == counts, case
    # Never below the minimum: the nodes removed without a new one fit in the room above it.
    assert sum(1 for p in plan.proposals if p.count == 0) <= max(0, g.running_target - len(removing) - min_size)
