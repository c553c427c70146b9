"""engine.consolidation: replacing under-used nodes with one cheaper node.

Prices are made up (USD per hour, linear in cores as Azure's are within a family): what matters is their order.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import REPLACE, SPOT, ClusterSnapshot, GroupState, Replacement, Taint, Toleration
from shared.engine.consolidation import (
    ALWAYS,
    BALANCED,
    OFF,
    SPOT_TAINT,
    ConsolidationOptions,
    fit_on_new_node,
    plan_consolidation,
)
from shared.engine.drainability import DO_NOT_DISRUPT
from shared.engine.scale_down import SCALE_DOWN_DISABLED
from shared.engine.spot_work import EXPECTED_RUNTIME_ANNOTATION as EXPECTED_RUNTIME
from tests.builders import T0, affinity, group, node, pod, res, sel, snapshot, template

D8, D16, D4 = "Standard_D8s_v5", "Standard_D16s_v5", "Standard_D4s_v5"
PRICE = {D4: 0.2, D8: 0.4, D16: 0.8}
ALLOC = {D4: res(3.8, 14, 110), D8: res(7.8, 29, 110), D16: res(15.8, 58, 110)}
ALWAYS_OPTS = ConsolidationOptions(policy=ALWAYS)


def _cluster(*, d8_pods: list[list[dict]] | None = None, extra_nodes=(), extra_pods=(), d16_spot: bool = False,
             d16_taints: tuple[Taint, ...] = (), prices: dict[str, float] | None = None,
             with_d4: bool = False) -> ClusterSnapshot:
    """Nodes of a D8 group (one per entry of `d8_pods`, each a list of pod kwargs) and an empty D16 group."""
    # By default three half-used D8s: the pods of two do not fit one D8.
    d8_pods = d8_pods if d8_pods is not None else [[{"cpu": 2, "mem": 6}] * 2] * 3
    d16 = replace(group("d16", target=0, vm_size=D16), priority=SPOT if d16_spot else "Regular")
    groups = [group("d8", target=len(d8_pods), vm_size=D8), d16]
    if with_d4:
        groups.append(group("d4", target=0, vm_size=D4))
    nodes, pods = [], []
    for i, specs in enumerate(d8_pods):
        nodes.append(node(f"d8-{i}", group_name="d8", instance=i, alloc=ALLOC[D8]))
        for j, spec in enumerate(specs):
            spec = dict(spec)
            make = spec.pop("make", None)
            p = pod(f"web-{i}-{j}", node_name=f"d8-{i}", **spec)
            pods.append(make(p) if make else p)
    prices = prices or PRICE
    snap = snapshot(nodes=[*nodes, *extra_nodes], pods=[*pods, *extra_pods], groups=groups, templates={
        g.id: template(ALLOC[g.vm_size], taints=d16_taints if g.name == "d16" else ()) for g in groups})
    return replace(snap, prices={g.id: prices[g.vm_size] for g in groups if g.vm_size in prices})


def _plan(snap: ClusterSnapshot, options: ConsolidationOptions = ALWAYS_OPTS, *, states=None, unneeded=()):
    return plan_consolidation(snap, states=states or {}, unneeded=unneeded, options=options, now=T0)


def _assert_fits(snap: ClusterSnapshot, proposal) -> None:
    """The property: the proposed group's node holds every pod moved off the replaced nodes (scale-up's checks)."""
    leaving = {n for n, _ in proposal.nodes}
    moved = [p for p in snap.pods if p.node_name in leaving]
    target = snap.group(proposal.to_group)
    assert target is not None
    assert fit_on_new_node(snap, moved, leaving, target, snap.templates[target.id]) is None
    old = sum(snap.prices[g] for _, g in proposal.nodes)
    assert proposal.saving_per_hour == pytest.approx(old - snap.prices[target.id])
    assert proposal.saving_per_hour > 0


def test_three_half_used_d8_become_one_d16():
    snap = _cluster()
    plan = _plan(snap)
    assert len(plan.proposals) == 1
    (proposal,) = plan.proposals
    assert proposal.reason == REPLACE and proposal.count == 1 and proposal.to_group == "rg/d16"
    assert {n for n, _ in proposal.nodes} == {"d8-0", "d8-1", "d8-2"}
    assert proposal.detail == f"3 x {D8} -> 1 x {D16}"
    _assert_fits(snap, proposal)
    assert all("replace" in plan.candidates[n] for n in ("d8-0", "d8-1", "d8-2"))


def test_policy_off_proposes_nothing():
    assert _plan(_cluster(), ConsolidationOptions(policy=OFF)).proposals == ()


@pytest.mark.parametrize("kwargs", [
    {"policy": "sometimes"}, {"threshold": -0.1}, {"max_nodes": 0}, {"min_age": timedelta(minutes=-1)},
])
def test_bad_options_are_refused_by_name(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs)).replace("_", " ").split()[0]):
        ConsolidationOptions(**kwargs)


def _job_pod(p):
    return replace(p, owner=replace(p.owner, kind="Job"))


@pytest.mark.parametrize("label, node_annotations, make", [
    ("batch pod", {}, _job_pod),
    ("do-not-disrupt pod", {}, lambda p: replace(p, annotations={DO_NOT_DISRUPT: "true"})),
    ("do-not-disrupt node", {DO_NOT_DISRUPT: "true"}, None),
    ("scale-down-disabled node", {SCALE_DOWN_DISABLED: "true"}, None),
])
def test_a_protected_node_is_never_a_candidate(label, node_annotations, make):
    specs = [[{"cpu": 2, "mem": 6}] * 2] * 3
    specs[1] = [{"cpu": 2, "mem": 6, "make": make}, {"cpu": 2, "mem": 6}] if make else specs[1]
    snap = _cluster(d8_pods=specs)
    if node_annotations:
        nodes = tuple(replace(n, annotations=node_annotations) if n.name == "d8-1" else n for n in snap.nodes)
        snap = replace(snap, nodes=nodes)
    plan = _plan(snap)
    assert plan.proposals == (), label
    assert plan.candidates["d8-1"].startswith("not moved"), label
    # the other two alone: one D16 costs what they do, and a pair does not fit one D8


def test_no_proposal_when_not_cheaper():
    # a D16 priced above three D8s
    snap = _cluster(prices={D8: 0.4, D16: 1.3})
    plan = _plan(snap)
    assert plan.proposals == ()
    assert all("cheaper" in plan.candidates[n] for n in ("d8-0", "d8-1", "d8-2"))


def test_no_proposal_when_pods_do_not_fit():
    snap = _cluster(d8_pods=[[{"cpu": 3, "mem": 10}] * 2] * 3)  # 18 cores > one D16
    plan = _plan(snap)
    assert plan.proposals == ()


def test_anti_affinity_among_moved_pods_is_checked():
    anti = (affinity("kubernetes.io/hostname", sel(app="web")),)
    specs = [[{"cpu": 1, "mem": 2, "labels": {"app": "web"}, "anti_affinity": anti}]] * 3
    plan = _plan(_cluster(d8_pods=specs))
    assert plan.proposals == ()


def test_balanced_refuses_a_small_saving_that_moves_many_pods():
    # Three D8s with many small pods, beside seven well-used D8s: the saving is one D8 of ten (10 %),
    # the disruption 12 of the 19 movable pods (63 %): score 0.16 < 0.5.
    busy = [[{"cpu": 6, "mem": 20}]] * 7
    light = [[{"cpu": 0.75, "mem": 2}] * 4] * 3
    snap = _cluster(d8_pods=light + busy)
    assert _plan(snap, ConsolidationOptions(policy=ALWAYS)).proposals
    balanced = _plan(snap, ConsolidationOptions(policy=BALANCED, threshold=0.5))
    assert balanced.proposals == ()
    assert any("balanced score" in v for v in balanced.candidates.values())


def test_balanced_accepts_a_saving_that_moves_few_pods():
    # The same saving, the light nodes holding one pod each among busy nodes with many pods.
    busy = [[{"cpu": 0.8, "mem": 2}] * 9] * 7
    light = [[{"cpu": 3, "mem": 10}]] * 3
    snap = _cluster(d8_pods=light + busy)
    plan = _plan(snap, ConsolidationOptions(policy=BALANCED, threshold=0.5))
    assert len(plan.proposals) == 1
    assert {n for n, _ in plan.proposals[0].nodes} == {"d8-0", "d8-1", "d8-2"}
    _assert_fits(snap, plan.proposals[0])


@pytest.mark.parametrize("tolerate, expected_spot", [(False, False), (True, True)])
def test_spot_target_only_for_pods_tolerating_spot(tolerate, expected_spot):
    # The D16 spot group is cheapest; an on-demand D4... is too small: the on-demand alternative is none.
    tol = (Toleration(SPOT_TAINT.key, "Equal", SPOT_TAINT.value, "NoSchedule"),) if tolerate else ()
    specs = [[{"cpu": 2, "mem": 6, "tolerations": tol}] * 2] * 3
    snap = _cluster(d8_pods=specs, d16_spot=True, prices={D8: 0.4, D16: 0.2})
    plan = _plan(snap)
    assert bool(plan.proposals) == expected_spot
    if not expected_spot:
        assert any("spot" in v for v in plan.candidates.values())


def test_spot_taint_on_template_is_honoured_by_the_fit():
    # Even without the engine's own spot rule, a tainted template refuses pods without the toleration.
    snap = _cluster(d16_taints=(SPOT_TAINT,))
    target = snap.group("rg/d16")
    pods = [p for p in snap.pods if p.node_name == "d8-0"]
    assert fit_on_new_node(snap, pods, {"d8-0"}, target, snap.templates[target.id]) is not None


def test_single_node_replaced_by_a_smaller_size():
    # One D8 at a quarter: a D4 holds its pods; multi-node first finds nothing cheaper for the pair.
    specs = [[{"cpu": 1, "mem": 3}] * 2, [{"cpu": 6, "mem": 20}]]
    snap = _cluster(d8_pods=specs, with_d4=True)
    plan = _plan(snap)
    assert len(plan.proposals) == 1
    proposal = plan.proposals[0]
    assert proposal.to_group == "rg/d4" and [n for n, _ in proposal.nodes] == ["d8-0"]
    _assert_fits(snap, proposal)


@pytest.mark.parametrize("why", ["unneeded", "young", "removing", "replacing", "given up", "not ready", "no price"])
def test_nodes_out_of_scope_are_skipped(why):
    snap = _cluster()
    states, unneeded = {}, ()
    if why == "unneeded":
        unneeded = ("d8-1",)
    elif why == "young":
        snap = replace(snap, nodes=tuple(replace(n, created_at=T0 - timedelta(minutes=2)) if n.name == "d8-1" else n
                                         for n in snap.nodes))
    elif why == "removing":
        states = {"rg/d8": GroupState("rg/d8", removing={"d8-1": "a1"})}
    elif why == "replacing":
        states = {"rg/d8": GroupState("rg/d8", replacing={"d8-1": Replacement("d8-1", REPLACE, "rg/d16", T0)})}
    elif why == "given up":  # a tombstone: not proposed again until it expires
        states = {"rg/d8": GroupState("rg/d8", replacing={"d8-1": Replacement(
            "d8-1", REPLACE, "rg/d16", T0 - timedelta(hours=1), given_up_at=T0 - timedelta(minutes=5))})}
    elif why == "not ready":
        snap = replace(snap, nodes=tuple(replace(n, ready=False) if n.name == "d8-1" else n for n in snap.nodes))
    else:
        snap = replace(snap, prices={"rg/d16": PRICE[D16]})
    plan = _plan(snap, states=states, unneeded=unneeded)
    assert all("d8-1" not in {n for n, _ in p.nodes} for p in plan.proposals)
    assert "d8-1" not in plan.candidates


def test_target_without_room_or_in_backoff_is_not_used():
    snap = _cluster()
    full = replace(snap, groups=tuple(replace(g, max_size=0) if g.name == "d16" else g for g in snap.groups))
    assert _plan(full).proposals == ()
    backoff = {"rg/d16": GroupState("rg/d16", backoff_until=T0 + timedelta(minutes=5))}
    assert _plan(snap, states=backoff).proposals == ()


@pytest.mark.parametrize("runtime, started_ago, expected", [
    ("2h", timedelta(minutes=10), True),  # 110 min left: the saving pays the boot many times over
    ("10m", timedelta(minutes=9), False),  # a minute left: the new node's boot costs more than the saving
    (None, None, True),  # long-running
])
def test_expected_remaining_time_weighs_against_the_boot(runtime, started_ago, expected):
    def annotate(p):
        if runtime is None:
            return p
        return replace(p, annotations={EXPECTED_RUNTIME: runtime}, started_at=T0 - started_ago)
    specs = [[{"cpu": 2, "mem": 6, "make": annotate}] * 2] * 3
    plan = _plan(_cluster(d8_pods=specs))
    assert bool(plan.proposals) == expected


def test_at_most_max_nodes_are_replaced_together():
    specs = [[{"cpu": 0.5, "mem": 1}]] * 6
    snap = _cluster(d8_pods=specs)
    plan = _plan(snap, ConsolidationOptions(policy=ALWAYS, max_nodes=4))
    assert len(plan.proposals) == 1 and len(plan.proposals[0].nodes) == 4
    _assert_fits(snap, plan.proposals[0])


@pytest.mark.parametrize("seed", range(12))
def test_property_every_proposal_fits_and_saves(seed):
    import random
    rng = random.Random(seed)
    specs = [[{"cpu": rng.choice([0.25, 0.5, 1, 2, 3]), "mem": rng.choice([1, 2, 4, 8])}
              for _ in range(rng.randint(1, 5))] for _ in range(rng.randint(2, 8))]
    snap = _cluster(d8_pods=specs, with_d4=rng.random() < 0.5)
    for policy in (ALWAYS, BALANCED):
        plan = _plan(snap, ConsolidationOptions(policy=policy, threshold=rng.choice([0.1, 0.5, 1.0])))
        assert len(plan.proposals) <= 1
        for proposal in plan.proposals:
            _assert_fits(snap, proposal)
            assert len({n for n, _ in proposal.nodes}) == len(proposal.nodes)


def test_a_proposal_the_budgets_refuse_gives_way_to_fewer_nodes():
    # Three nearly idle D8s fit one D4, but the budgets allow two nodes at once: two of them are proposed.
    specs = [[{"cpu": 0.5, "mem": 1}]] * 3
    snap = _cluster(d8_pods=specs, with_d4=True)

    def at_most_two(proposal):
        return "" if len(proposal.nodes) <= 2 else "budget allows 2"
    plan = _plan(snap, ConsolidationOptions(policy=ALWAYS, admissible=at_most_two))
    assert len(plan.proposals) == 1 and len(plan.proposals[0].nodes) <= 2
    _assert_fits(snap, plan.proposals[0])
    refused = _plan(snap, ConsolidationOptions(policy=ALWAYS, admissible=lambda p: "budget allows 0"))
    assert refused.proposals == ()
    assert any("budget allows 0" in v for v in refused.candidates.values())
