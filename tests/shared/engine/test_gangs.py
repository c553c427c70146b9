"""Gangs: which pods make one (engine.gangs), and the scale-up planner placing a gang's pending pods all or none."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.domain import ClusterSnapshot, Pod
from shared.engine.gangs import GANG_KEYS, LABEL, gang_of, gangs, partial_reason
from shared.engine.scale_up import (
    ScaleUpOptions,
    ScaleUpPlan,
    existing_placements,
    initial_state,
    plan_scale_up,
    simulate_scale_up,
)
from shared.options import scale_up_options
from shared.settings import load_settings
from tests.builders import T0, group, node, pod, res, snapshot, template
from tests.shared.engine.test_scale_up_properties import PROPERTY_SETTINGS, clusters

GANGS = ScaleUpOptions(gangs=True)
POD_GROUP = "scheduling.x-k8s.io/pod-group"
REQUIRED = {
    "CLUSTER_NAME": "c1",
    "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000",
    "NODE_RESOURCE_GROUPS": "rg-a",
    "KUBECONFIG_PATH": "/tmp/kubeconfig",
}


def member(name: str, gang: str | None, *, cpu: float = 4, namespace: str = "default", **kw: object) -> Pod:
    """A pending pod of `gang` (coscheduling's label); by default it needs a whole 4-CPU node."""
    labels = {POD_GROUP: gang} if gang else {}
    return pod(name, pending=True, cpu=cpu, labels=labels, namespace=namespace, owner_name=gang or name,
               **kw)  # type: ignore[arg-type]


def members(gang: str, n: int, **kw: object) -> list[Pod]:
    return [member(f"{gang}-{i}", gang, **kw) for i in range(n)]  # type: ignore[arg-type]


def placed_keys(plan: ScaleUpPlan) -> set[str]:
    return {*plan.absorbed, *(p for increase in plan.increases for p in increase.pods)}


def gang_outcomes(snap: ClusterSnapshot, plan: ScaleUpPlan) -> dict[str, tuple[int, int]]:
    """Gang -> (pending pods placed, pending pods) in the plan."""
    placed = placed_keys(plan)
    pending = [p for p in snap.pods if p.unschedulable and p.node_name is None]
    return {g: (sum(p.key in placed for p in pods), len(pods)) for g, pods in gangs(pending).items()}


def assert_all_or_nothing(snap: ClusterSnapshot, plan: ScaleUpPlan) -> None:
    for gang, (placed, count) in gang_outcomes(snap, plan).items():
        assert placed in (0, count), f"gang {gang}: {placed} of {count} placed"


# --- gang_of ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("where,key", GANG_KEYS, ids=[f"{w}:{k}" for w, k in GANG_KEYS])
def test_each_gang_key_names_a_namespaced_gang(where: str, key: str) -> None:
    base = pod("p", namespace="ml", pending=True)
    marked = (replace(base, labels={key: "train"}) if where == LABEL else replace(base, annotations={key: "train"}))
    assert gang_of(marked) == "ml/train"
    assert gang_of(base) is None
    # The same key on the other side (a label read as an annotation, or the reverse) is not taken for it,
    # unless that side is a gang key too.
    other = replace(base, annotations={key: "train"}) if where == LABEL else replace(base, labels={key: "train"})
    assert (gang_of(other) is not None) == any(k == key and w != where for w, k in GANG_KEYS)


def test_the_first_gang_key_found_wins_and_an_empty_value_is_none() -> None:
    first_where, first_key = GANG_KEYS[0]
    last_where, last_key = GANG_KEYS[-1]
    assert first_where == LABEL
    both = replace(pod("p"), labels={first_key: "a"}, annotations={last_key: "b"})
    assert gang_of(both) == "default/a"
    assert gang_of(replace(pod("p"), labels={first_key: ""}, annotations={last_key: "b"})) == "default/b"
    assert gang_of(replace(pod("p"), labels={"app": "web"})) is None


def test_gangs_group_pods_by_namespace_and_name_in_order() -> None:
    pods = [member("a0", "a"), member("x", None), member("a1", "a"), member("b0", "a", namespace="other")]
    grouped = gangs(pods)
    assert {g: [p.name for p in ps] for g, ps in grouped.items()} == {"default/a": ["a0", "a1"], "other/a": ["b0"]}


# --- the planner ---------------------------------------------------------------------------------------------

# Every group's nodes have 4 CPUs and member() pods ask for 4: one pod per new node.
CASES = [
    # (id, snapshot, {gang: placed} with gangs all-or-nothing, {gang: placed} with gangs off)
    ("a gang the group's max can hold is planned whole",
     snapshot(groups=[group(target=0, max_size=4)], pods=members("g", 4)), {"default/g": 4}, {"default/g": 4}),
    ("max size holds 3 of 4: nothing is asked for",
     snapshot(groups=[group(target=0, max_size=3)], pods=members("g", 4)), {"default/g": 0}, {"default/g": 3}),
    ("free room on existing nodes for 2 of 3 is not taken",
     snapshot(groups=[group(target=2, max_size=2)], nodes=[node("n0"), node("n1", instance=1)], pods=members("g", 3)),
     {"default/g": 0}, {"default/g": 2}),
    ("nodes on their way for 2 of 3 are not counted for the gang",
     snapshot(groups=[group(target=3, max_size=3)], nodes=[node("n0")],
              pods=[pod("busy", cpu=4, node_name="n0"), *members("g", 3)]), {"default/g": 0}, {"default/g": 2}),
    ("a gang too big for the limits leaves its room to a smaller one behind it",
     snapshot(groups=[group(target=0, max_size=3)], pods=members("big", 5) + members("small", 2, cpu=3.5)),
     {"default/big": 0, "default/small": 2}, {"default/big": 3, "default/small": 0}),
    ("two gangs that fit one at a time: one whole, the other none",
     snapshot(groups=[group(target=0, max_size=4)], pods=members("a", 3) + members("b", 3)),
     {"default/a": 3, "default/b": 0}, {"default/a": 3, "default/b": 1}),
    ("running pods of a gang count as placed: only the pending ones must fit",
     snapshot(groups=[group(target=2, max_size=4)], nodes=[node("n0"), node("n1", instance=1)],
              pods=[replace(pod("g-run0", cpu=4, node_name="n0"), labels={POD_GROUP: "g"}),
                    replace(pod("g-run1", cpu=4, node_name="n1"), labels={POD_GROUP: "g"}), *members("g", 2)]),
     {"default/g": 2}, {"default/g": 2}),
]


@pytest.mark.parametrize("case_id,snap,with_gangs,without", CASES, ids=[c[0] for c in CASES])
def test_a_gangs_pending_pods_are_placed_all_or_none(case_id: str, snap: ClusterSnapshot,
                                                      with_gangs: dict[str, int], without: dict[str, int]) -> None:
    plan = plan_scale_up(snap, options=GANGS)
    assert {g: placed for g, (placed, _) in gang_outcomes(snap, plan).items()} == with_gangs
    assert_all_or_nothing(snap, plan)
    # Nodes are asked for only for pods placed on them.
    assert sum(i.delta for i in plan.increases) <= sum(len(i.pods) for i in plan.increases)
    off = plan_scale_up(snap, options=ScaleUpOptions(gangs=False))
    assert {g: placed for g, (placed, _) in gang_outcomes(snap, off).items()} == without


def test_a_partial_gang_is_told_how_many_of_its_pods_fit() -> None:
    snap = snapshot(groups=[group(target=0, max_size=3)], pods=members("g", 4))
    plan = plan_scale_up(snap, options=GANGS)
    assert plan.increases == ()
    assert {pod.key: plan.unplaceable[pod.key] for pod in snap.pods} == {
        pod.key: partial_reason("default/g", 3, 4) for pod in snap.pods}
    assert partial_reason("default/g", 3, 4) == "gang default/g: only 3 of 4 pending pods fit"


def test_a_gang_none_of_whose_pods_fit_keeps_the_filters_reason() -> None:
    snap = snapshot(groups=[group(target=0)], pods=members("g", 2, cpu=64))
    with_gangs, off = plan_scale_up(snap, options=GANGS), plan_scale_up(snap)
    assert with_gangs.unplaceable == off.unplaceable
    assert all("gang" not in why for why in with_gangs.unplaceable.values())


def test_existing_room_a_partial_gang_would_take_is_left_to_scale_down() -> None:
    """What the utilisation poll keeps for pending pods (existing_placements) holds no pod of a partial gang."""
    snap = snapshot(groups=[group(target=2, max_size=2)], nodes=[node("n0"), node("n1", instance=1)],
                    pods=members("g", 3) + [member("solo", None, cpu=1)])
    kept = existing_placements(simulate_scale_up(snap, options=GANGS))
    assert [p for pods in kept.values() for p in pods] == ["default/solo"]
    # Without gangs, two of the gang's pods take both nodes and the other pod gets none.
    assert sorted(p for pods in existing_placements(simulate_scale_up(snap)).values() for p in pods) == [
        "default/g-0", "default/g-1"]


def test_pods_of_no_gang_are_planned_exactly_as_without_gangs() -> None:
    groups = [group("a", target=1, max_size=5), group("b", target=0, max_size=5)]
    templates = {"rg/a": template(res(4, 16, 110)), "rg/b": template(res(8, 32, 110))}
    pods = [pod("busy", cpu=3, node_name="a0")] + [
        pod(f"w{c}-{i}", pending=True, cpu=cpu, owner_name=f"w{c}") for c, cpu in enumerate((0.5, 2, 3)) for i in range(6)]
    snap = snapshot(groups=groups, templates=templates, nodes=[node("a0", group_name="a")], pods=pods)
    on, off = simulate_scale_up(snap, options=GANGS), simulate_scale_up(snap)
    assert on == off
    assert off.plan.increases  # the case asks for nodes: the comparison is not of two empty plans


def test_a_gang_of_mixed_sizes_does_not_split_the_room_with_another() -> None:
    """Two gangs of a big and a small pod each, room for 2 nodes: the first-fit order places both big pods
    first and neither gang whole; the planner keeps the first gang and gives it the other's room."""
    pods = [member("a-big", "a"), member("a-small", "a", cpu=3), member("b-big", "b"), member("b-small", "b", cpu=3)]
    snap = snapshot(groups=[group(target=0, max_size=2)], pods=pods)
    assert sorted(gang_outcomes(snap, plan_scale_up(snap)).values()) == [(1, 2), (1, 2)]  # off: both split
    assert sorted(gang_outcomes(snap, plan_scale_up(snap, options=GANGS)).values()) == [(0, 2), (2, 2)]


@pytest.mark.parametrize("value,gangs_on", [("all-or-nothing", True), ("off", False)])
def test_the_setting_reaches_the_planner(value: str, gangs_on: bool) -> None:
    settings = load_settings(REQUIRED | {"GANG_SCALE_UP": value})
    options = scale_up_options(settings, now=T0)
    assert options.gangs is gangs_on
    assert scale_up_options(load_settings(REQUIRED), now=T0).gangs  # all-or-nothing by default
    if not gangs_on:  # off: exactly the plan without gangs, on a cluster where gangs change it
        snap = snapshot(groups=[group(target=0, max_size=3)], pods=members("g", 4))
        assert simulate_scale_up(snap, options=options) == simulate_scale_up(snap, options=replace(options, gangs=False))
        assert simulate_scale_up(snap, options=replace(options, gangs=True)) != simulate_scale_up(snap, options=options)


# --- properties over generated clusters ---------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(clusters(), st.integers(1, 3), st.integers(0, 2**16))
def test_no_plan_holds_part_of_a_gang(snap: ClusterSnapshot, gang_size: int, seed: int) -> None:
    """Pending pods are put in gangs (consecutive runs of `gang_size`, some left out): every gang is placed
    whole or not at all, nothing is asked for twice, and every new node holds a pod."""
    pods, index = [], 0
    for p in snap.pods:
        if p.unschedulable and (seed >> (index % 16)) & 1:
            p = replace(p, labels={**p.labels, POD_GROUP: f"g{index // gang_size}"})
        index += p.unschedulable
        pods.append(p)
    snap = replace(snap, pods=tuple(pods))
    simulation = simulate_scale_up(snap, options=GANGS)
    plan = simulation.plan
    assert_all_or_nothing(snap, plan)
    placed = [*plan.absorbed, *(p for i in plan.increases for p in i.pods)]
    assert len(placed) == len(set(placed)) and not set(placed) & set(plan.unplaceable)
    new_nodes = {s.node.name for s in simulation.steps if s.kind == "new" and s.pod is None}
    used = {s.node.name for s in simulation.steps if s.kind == "new" and s.pod is not None}
    assert new_nodes == used and len(new_nodes) == sum(i.delta for i in plan.increases)


@PROPERTY_SETTINGS
@given(clusters())
def test_without_gang_labels_the_plan_is_the_same(snap: ClusterSnapshot) -> None:
    assert simulate_scale_up(snap, options=GANGS) == simulate_scale_up(snap)


def test_a_shared_placement_state_gives_the_same_plan_and_is_left_as_found() -> None:
    """The utilisation poll shares one placement state with scale-down: the gang rounds roll back their own."""
    snap = snapshot(groups=[group(target=2, max_size=3)], nodes=[node("n0"), node("n1", instance=1)],
                    pods=members("big", 5) + members("small", 2, cpu=3.5) + [member("solo", None, cpu=1)])
    state = initial_state(snap)
    before = {n.name: state.requested(n.name) for n in snap.nodes}
    shared = simulate_scale_up(snap, options=GANGS, state=state)
    assert shared == simulate_scale_up(snap, options=GANGS)
    assert {n.name: state.requested(n.name) for n in snap.nodes} == before
    assert_all_or_nothing(snap, shared.plan)
