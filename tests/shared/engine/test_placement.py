"""PlacementState and its helpers: what the scheduler simulation sees on each node, placed or planned.

The filters themselves are tested in test_predicates.py; here the state they read: resources consumed as
pods are placed, exact undo by checkpoint/rollback, the affinity, anti-affinity and spread indexes kept
equal to a fresh count whatever the order of placements, and the two static helpers (taints, node affinity).
"""

from __future__ import annotations

import random

import pytest

from shared.domain import (
    HostPort,
    NodeSelectorTerm,
    Pod,
    Resources,
    Taint,
    Toleration,
)
from shared.engine.placement import (
    NodeView,
    PlacementState,
    matches_node_affinity,
    term_key,
    tolerates_all,
)
from shared.engine.predicates import check, pod_requests
from tests.builders import affinity, node, pod, req, res, sel, spread, term

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
GPU = "nvidia.com/gpu"


def view(name: str, zone: str | None = "z1", *, alloc: Resources | None = None, taints: tuple[Taint, ...] = (),
         labels: dict[str, str] | None = None, reserved_ports: tuple[HostPort, ...] = ()) -> NodeView:
    """A node as the filters see it, from the shared node builder (hostname label, optional zone)."""
    base = NodeView.of(node(name, alloc=alloc or res(4, 16, 110), labels=labels, taints=taints, zone=zone))
    return NodeView(base.name, base.labels, base.taints, base.allocatable, base.unschedulable, reserved_ports)


def placed(state: PlacementState, the_pod: Pod, node_name: str) -> Pod:
    state.place(the_pod, node_name, pod_requests(the_pod))
    return the_pod


def snapshot_of(state: PlacementState) -> dict[str, tuple[Resources, tuple[str, ...], tuple[HostPort, ...]]]:
    """Everything per node a rollback must restore: requested resources, pods, host ports in use."""
    return {
        name: (state.requested(name), tuple(p.key for p in state.pods_on(name)), tuple(state.ports_in_use(name)))
        for name in state.nodes
    }


# --- NodeView -------------------------------------------------------------------------


def test_node_view_of_a_node_keeps_what_the_filters_read() -> None:
    the_node = node("n1", alloc=res(8, 32, 50), labels={"pool": "a"}, taints=(Taint("k", "v"),), cordoned=True)
    nv = NodeView.of(the_node)
    assert (nv.name, dict(nv.labels), nv.taints, nv.allocatable, nv.unschedulable) == (
        "n1", dict(the_node.labels), the_node.taints, the_node.allocatable, True)
    assert nv.reserved_ports == ()  # a real node shows its DaemonSets' ports through its pods


# --- tolerates_all ---------------------------------------------------------------------


@pytest.mark.parametrize("case_id,tolerations,taints,expected", [
    ("no taints", (), (), True),
    ("untolerated NoSchedule blocks", (), (Taint("dedicated", "gpu", "NoSchedule"),), False),
    ("untolerated NoExecute blocks", (), (Taint("dedicated", "gpu", "NoExecute"),), False),
    ("PreferNoSchedule never blocks", (), (Taint("dedicated", "gpu", "PreferNoSchedule"),), True),
    ("Equal toleration with the taint's key and value", (Toleration("dedicated", "Equal", "gpu"),),
     (Taint("dedicated", "gpu"),), True),
    ("Equal toleration with another value", (Toleration("dedicated", "Equal", "cpu"),),
     (Taint("dedicated", "gpu"),), False),
    ("Exists on the key, any value", (Toleration("dedicated", "Exists"),), (Taint("dedicated", "anything"),), True),
    ("Exists with no key tolerates everything", (Toleration(operator="Exists"),),
     (Taint("a", "1"), Taint("b", "2", "NoExecute")), True),
    ("toleration for another effect", (Toleration("dedicated", "Exists", effect="NoExecute"),),
     (Taint("dedicated", "gpu", "NoSchedule"),), False),
    ("every blocking taint must be tolerated", (Toleration("a", "Exists"),), (Taint("a"), Taint("b")), False),
])
def test_tolerates_all(case_id: str, tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...],
                       expected: bool) -> None:
    assert tolerates_all(tolerations, taints) is expected


# --- matches_node_affinity -------------------------------------------------------------

LABELS = {"pool": "gpu", "zone": "1", HOST: "n1"}


@pytest.mark.parametrize("case_id,selector,terms,expected", [
    ("no selector, no affinity", {}, (), True),
    ("nodeSelector: every pair matches", {"pool": "gpu", "zone": "1"}, (), True),
    ("nodeSelector: one pair differs", {"pool": "gpu", "zone": "2"}, (), False),
    ("nodeSelector: key absent from the node", {"disk": "ssd"}, (), False),
    ("affinity terms are ORed: one matches", {}, (term(req("pool", "In", "cpu")), term(req("zone", "In", "1"))), True),
    ("affinity terms are ORed: none matches", {}, (term(req("pool", "In", "cpu")), term(req("zone", "In", "2"))),
     False),
    ("a term's requirements are ANDed", {}, (term(req("pool", "In", "gpu"), req("zone", "NotIn", "1")),), False),
    ("selector and affinity must both hold", {"pool": "cpu"}, (term(req("zone", "In", "1")),), False),
    ("matchFields on the node's name", {}, (term(fields=(req("metadata.name", "In", "n1"),)),), True),
    ("matchFields naming another node", {}, (term(fields=(req("metadata.name", "In", "n2"),)),), False),
    ("an empty term matches no node", {}, (NodeSelectorTerm(),), False),
])
def test_matches_node_affinity(case_id: str, selector: dict[str, str], terms: tuple[NodeSelectorTerm, ...],
                               expected: bool) -> None:
    assert matches_node_affinity(selector, terms, LABELS, "n1") is expected


# --- term_key ----------------------------------------------------------------------------


@pytest.mark.parametrize("case_id,the_term,expected_namespaces", [
    ("no namespaces: the owner's", affinity(HOST, sel(app="db")), ("team-a",)),
    ("listed namespaces, sorted and deduplicated", affinity(HOST, sel(app="db"), "b", "a", "b"), ("a", "b")),
    ("all namespaces", affinity(HOST, sel(app="db"), all_namespaces=True), ("*",)),
])
def test_term_key_names_topology_selector_and_namespaces(case_id, the_term, expected_namespaces) -> None:
    assert term_key(the_term, "team-a") == (HOST, sel(app="db"), expected_namespaces)


def test_term_key_of_a_term_without_selector_is_none() -> None:
    assert term_key(affinity(HOST, None), "default") is None


# --- Loading the observed cluster -------------------------------------------------------


def test_from_cluster_counts_bound_unfinished_pods_on_known_nodes_with_one_slot_each() -> None:
    pods = [
        pod("a", cpu=1, mem=2, node_name="n1"),
        pod("b", requests=res(0.5, 1, eph_gib=3, gpu=1), node_name="n1"),
        pod("pending", cpu=3, mem=3),  # not bound: takes nothing
        pod("done", cpu=3, mem=3, node_name="n1", phase="Succeeded"),
        pod("failed", cpu=3, mem=3, node_name="n1", phase="Failed"),
        pod("elsewhere", cpu=3, mem=3, node_name="unknown"),  # a node we do not know
    ]
    state = PlacementState.from_cluster([view("n1", alloc=res(8, 32, 110, gpu=2)), view("n2")], pods)
    assert state.requested("n1") == res(1.5, 3, 2, eph_gib=3, gpu=1)
    assert {p.name for p in state.pods_on("n1")} == {"a", "b"}
    assert state.requested("n2") == Resources() and state.pods_on("n2") == ()
    assert not state.has_node("unknown")
    assert state.free("n1") == res(8, 32, 110, gpu=2) - res(1.5, 3, 2, eph_gib=3, gpu=1)


def test_from_cluster_is_not_undone_by_a_rollback() -> None:
    state = PlacementState.from_cluster([view("n1")], [pod("a", node_name="n1")])
    before = snapshot_of(state)
    assert state.checkpoint() == 0  # loading is not journaled
    placed(state, pod("planned"), "n1")
    state.rollback(0)
    assert snapshot_of(state) == before and [p.name for p in state.pods_on("n1")] == ["a"]


# --- Resources: fits and free room -------------------------------------------------------


@pytest.mark.parametrize("case_id,alloc,existing,requests,expected", [
    ("fits in an empty node", res(4, 16, 110), Resources(), res(4, 16, 1), True),
    ("cpu exhausted", res(4, 16, 110), res(3, 1, 1), res(1.5, 1, 1), False),
    ("cpu exactly used up", res(4, 16, 110), res(3, 1, 1), res(1, 1, 1), True),
    ("memory exhausted", res(4, 16, 110), res(1, 15, 1), res(1, 2, 1), False),
    ("pod slots exhausted", res(4, 16, 2), res(0.1, 0.1, 2), res(0.1, 0.1, 1), False),
    ("ephemeral storage exhausted", res(4, 16, 110, eph_gib=10), res(0, 0, 1, eph_gib=8), res(0, 0, 1, eph_gib=4),
     False),
    ("extended resource absent from the node", res(4, 16, 110), Resources(), res(1, 1, 1, gpu=1), False),
    ("extended resource used up", res(4, 16, 110, gpu=2), res(0, 0, 1, gpu=2), res(0, 0, 1, gpu=1), False),
    ("extended resource left", res(4, 16, 110, gpu=2), res(0, 0, 1, gpu=1), res(0, 0, 1, gpu=1), True),
    ("a zero request fits an over-committed node", res(4, 16, 110), res(6, 1, 1), res(0, 1, 1), True),
])
def test_fits_counts_what_is_already_on_the_node(case_id: str, alloc: Resources, existing: Resources,
                                                  requests: Resources, expected: bool) -> None:
    state = PlacementState.from_cluster([view("n1", alloc=alloc)], [])
    if not existing.is_zero():
        state.place(pod("existing", requests=existing), "n1", existing)
    assert state.fits(requests, state.node("n1")) is expected


def test_free_room_is_consumed_as_pods_are_placed() -> None:
    """Two pods that each fit alone do not fit together: the second sees what the first took."""
    state = PlacementState.from_cluster([view("n1", alloc=res(4, 16, 110))], [])
    first, second = pod("first", cpu=3, mem=4), pod("second", cpu=3, mem=4)
    target = state.node("n1")
    assert state.fits(pod_requests(first), target) and state.fits(pod_requests(second), target)
    placed(state, first, "n1")
    assert not state.fits(pod_requests(second), target)
    assert state.free("n1") == res(1, 12, 109)
    assert check(second, target, state) == "Insufficient cpu"  # and the filters see the same


def test_a_planned_node_takes_pods_until_it_is_full() -> None:
    """First-fit over real and planned nodes, as the planners run it: each pod lands where the filters allow."""
    state = PlacementState.from_cluster([view("real", alloc=res(2, 8, 110))], [pod("busy", cpu=1.5, node_name="real")])
    state.add_node(view("template-1", alloc=res(4, 16, 110), labels={"pool": "big"}))
    pending = [pod(f"p{i}", cpu=1, selector={"pool": "big"} if i == 0 else None) for i in range(6)]
    where: dict[str, str | None] = {}
    for p in pending:
        target = next((n for n in state.nodes.values() if check(p, n, state) is None), None)
        where[p.name] = target.name if target else None
        if target:
            placed(state, p, target.name)
    # p0's nodeSelector rules the real node out; the real node's 0.5 free cores take none of them;
    # the planned node takes four and is full.
    assert where == {"p0": "template-1", "p1": "template-1", "p2": "template-1", "p3": "template-1",
                     "p4": None, "p5": None}
    for name in state.nodes:  # nothing was overcommitted
        assert state.free(name).cpu_milli >= 0


@pytest.mark.parametrize("case_id,the_pod,reason", [
    ("taint not tolerated", pod("p"), "node(s) had untolerated taint {dedicated: gpu}"),
    ("nodeSelector mismatch", pod("p", selector={"pool": "cpu"}, tolerations=(Toleration("dedicated", "Exists"),)),
     "node(s) didn't match Pod's node affinity/selector"),
    ("tolerated and selected", pod("p", selector={"pool": "gpu"}, tolerations=(Toleration("dedicated", "Exists"),)),
     None),
])
def test_a_planned_node_carries_its_template_labels_and_taints(case_id: str, the_pod: Pod, reason: str | None) -> None:
    state = PlacementState.from_cluster([], [])
    state.add_node(view("gpu-1", labels={"pool": "gpu"}, taints=(Taint("dedicated", "gpu"),)))
    assert check(the_pod, state.node("gpu-1"), state) == reason


# --- Building and undoing ---------------------------------------------------------------


def test_add_node_refuses_a_name_already_present() -> None:
    state = PlacementState.from_cluster([view("n1")], [])
    with pytest.raises(ValueError, match="n1"):
        state.add_node(view("n1"))


def test_place_refuses_an_unknown_node() -> None:
    state = PlacementState.from_cluster([view("n1")], [])
    with pytest.raises(KeyError, match="n2"):
        placed(state, pod("p"), "n2")
    assert state.pods_on("n1") == () and state.requested("n1") == Resources()


def test_rollback_undoes_placements_and_planned_nodes_exactly() -> None:
    state = PlacementState.from_cluster([view("n1")], [pod("old", node_name="n1", ports=(HostPort(80),))])
    before = snapshot_of(state)
    mark = state.checkpoint()
    placed(state, pod("a", cpu=1, ports=(HostPort(8080),)), "n1")
    state.add_node(view("planned", reserved_ports=(HostPort(9100),)))
    placed(state, pod("b", requests=res(1, 1, gpu=0, ext={"example.com/dongle": 1})), "planned")
    placed(state, pod("c", cpu=2, ports=(HostPort(443),)), "planned")
    assert state.placed_since(mark) == {"n1", "planned"}
    assert [p.port for p in state.ports_in_use("planned")] == [9100, 443]
    state.rollback(mark)
    assert snapshot_of(state) == before
    assert not state.has_node("planned") and state.placed_since(mark) == set()


def test_rollback_to_an_inner_checkpoint_keeps_what_came_before_it() -> None:
    state = PlacementState.from_cluster([view("n1"), view("n2")], [])
    placed(state, pod("a"), "n1")
    inner = state.checkpoint()
    kept = snapshot_of(state)
    placed(state, pod("b"), "n2")
    assert state.placed_since(inner) == {"n2"}
    state.rollback(inner)
    assert snapshot_of(state) == kept
    assert [p.name for p in state.pods_on("n1")] == ["a"]


def test_reserved_ports_of_a_planned_node_are_in_use_before_any_pod() -> None:
    state = PlacementState.from_cluster([], [])
    state.add_node(view("planned", reserved_ports=(HostPort(9100),)))
    assert list(state.ports_in_use("planned")) == [HostPort(9100)]
    assert check(pod("exporter", ports=(HostPort(9100),)), state.node("planned"), state) == (
        "node(s) didn't have free ports for the requested pod ports")


def test_remove_pods_takes_them_off_for_good_and_keeps_the_node_and_its_domains() -> None:
    web = [pod(f"web-{i}", cpu=1, labels={"app": "web"}, node_name=f"n{i}", ports=(HostPort(80),)) for i in (1, 2)]
    agent = pod("agent-n1", cpu=0.5, node_name="n1", ports=(HostPort(9100),))
    state = PlacementState.from_cluster([view("n1", zone="z1"), view("n2", zone="z2")], [*web, agent])
    key = term_key(affinity(ZONE, sel(app="web")), "default")
    assert key is not None
    assert state.term_counts(key) == ({"z1": 1, "z2": 1}, 2)
    index = state.spread_index(("web", ZONE), spread(ZONE, sel(app="web")), "default", lambda v: True)
    state.remove_pods("n1", [web[0]])
    assert state.has_node("n1") and [p.name for p in state.pods_on("n1")] == ["agent-n1"]
    assert state.requested("n1") == pod_requests(agent)
    assert list(state.ports_in_use("n1")) == [HostPort(9100)]
    assert state.term_counts(key) == ({"z2": 1}, 1)
    assert (index.counts, index.global_min()) == ({"z1": 0, "z2": 1}, 0)  # z1 is still a domain, at 0
    state.rollback(0)  # not journaled: a rollback never brings the pod back
    assert [p.name for p in state.pods_on("n1")] == ["agent-n1"]


@pytest.mark.parametrize("compact_at", [1, 10**9])  # compacted at once, or never: the same answers
def test_removed_pods_match_nothing_later_and_planned_pods_still_roll_back(
        compact_at: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import shared.engine.placement as placement

    monkeypatch.setattr(placement, "_COMPACT_AT", compact_at)
    nodes = [view(f"n{i}", zone=f"z{i % 2}") for i in range(6)]
    web = [pod(f"web-{i}", labels={"app": "web"}, node_name=f"n{i}") for i in range(6)]
    state = PlacementState.from_cluster(nodes, web)
    mark = state.checkpoint()
    placed(state, pod("new-web", labels={"app": "web"}), "n5")
    for i in range(3):
        state.remove_pods(f"n{i}", [web[i]])
    key = term_key(affinity(ZONE, sel(app="web")), "default")
    assert key is not None
    assert state.term_counts(key) == ({"z1": 3, "z0": 1}, 4)  # built after the removals: only pods still there
    state.rollback(mark)
    assert state.term_counts(key) == ({"z1": 2, "z0": 1}, 3)
    assert all(state.has_node(f"n{i}") for i in range(3))


def test_remove_pods_refuses_a_node_that_received_planned_pods_and_pods_not_on_the_node() -> None:
    stay = pod("stay", node_name="n1")
    state = PlacementState.from_cluster([view("n1"), view("n2")], [stay])
    placed(state, pod("moved"), "n1")
    with pytest.raises(ValueError, match="n1"):
        state.remove_pods("n1", [stay])
    with pytest.raises(ValueError, match="default/elsewhere"):
        state.remove_pods("n2", [pod("elsewhere", node_name="n2")])
    assert [p.name for p in state.pods_on("n1")] == ["stay", "moved"]


HONOR_TAINTS = spread(ZONE, sel(app="web"), node_taints_policy="Honor")


def _honours_taints(v: NodeView) -> bool:
    return tolerates_all((), v.taints)


@pytest.mark.parametrize("policy,domains_after", [
    ("ignore taints", {"z1": 1, "z2": 1}),  # nodeTaintsPolicy's default: a tainted node is still a domain
    ("honour taints", {"z2": 1}),  # the pod does not tolerate ToBeDeleted: n1 and its pod leave, and z1 with it
])
def test_a_node_marked_removed_stays_a_domain_unless_the_constraint_honours_taints(
        policy: str, domains_after: dict[str, int]) -> None:
    web = [pod(f"web-{i}", labels={"app": "web"}, node_name=f"n{i}") for i in (1, 2)]
    state = PlacementState.from_cluster([view("n1", zone="z1"), view("n2", zone="z2")], web)
    eligible = _honours_taints if policy == "honour taints" else (lambda v: True)
    index = state.spread_index(policy, HONOR_TAINTS, "default", eligible)
    removed = state.node("n1").as_removed()
    assert [t.key for t in removed.taints] == ["ToBeDeletedByClusterAutoscaler"]
    state.replace_node(removed)
    assert index.counts == domains_after
    state.replace_node(view("n1", zone="z1"))  # the taint lifted: back as it was
    assert index.counts == {"z1": 1, "z2": 1}


def test_replace_node_keeps_the_labels_and_refuses_a_node_that_received_planned_pods() -> None:
    state = PlacementState.from_cluster([view("n1", zone="z1"), view("n2", zone="z2")], [])
    with pytest.raises(ValueError, match="labels"):
        state.replace_node(view("n1", zone="z9"))
    placed(state, pod("moved"), "n2")
    with pytest.raises(ValueError, match="n2"):
        state.replace_node(state.node("n2").as_removed())


def test_memo_computes_once_per_pod_and_kind() -> None:
    state = PlacementState.from_cluster([], [])
    calls: list[str] = []
    p, q = pod("p"), pod("q")

    def compute(x: Pod) -> str:
        calls.append(x.name)
        return x.name.upper()

    assert [state.memo("k", p, compute), state.memo("k", p, compute), state.memo("k", q, compute),
            state.memo("other", p, compute)] == ["P", "P", "Q", "P"]
    assert calls == ["p", "q", "p"]


# --- Affinity indexes --------------------------------------------------------------------


def test_term_counts_count_matching_pods_per_topology_value() -> None:
    pods = [
        pod("db-1", labels={"app": "db"}, node_name="a1"),
        pod("db-2", labels={"app": "db"}, node_name="a2"),
        pod("db-3", labels={"app": "db"}, node_name="b1"),
        pod("web", labels={"app": "web"}, node_name="a1"),  # the selector does not match
        pod("db-other-ns", labels={"app": "db"}, node_name="a1", namespace="other"),  # another namespace
        pod("db-no-zone", labels={"app": "db"}, node_name="nz"),  # its node has no zone label
    ]
    nodes = [view("a1", zone="za"), view("a2", zone="za"), view("b1", zone="zb"), view("nz", zone=None)]
    state = PlacementState.from_cluster(nodes, pods)
    key = term_key(affinity(ZONE, sel(app="db")), "default")
    assert key is not None
    assert state.term_counts(key) == ({"za": 2, "zb": 1}, 3)
    all_ns = term_key(affinity(ZONE, sel(app="db"), all_namespaces=True), "default")
    assert all_ns is not None
    assert state.term_counts(all_ns) == ({"za": 3, "zb": 1}, 4)


def test_all_terms_counts_need_one_pod_matching_every_term() -> None:
    """Two terms cannot be satisfied by two different pods (the scheduler's InterPodAffinity PreFilter)."""
    nodes = [view("a1", zone="za"), view("b1", zone="zb")]
    pods = [
        pod("only-app", labels={"app": "db"}, node_name="a1"),
        pod("only-tier", labels={"tier": "gold"}, node_name="a1"),
        pod("both", labels={"app": "db", "tier": "gold"}, node_name="b1"),
    ]
    state = PlacementState.from_cluster(nodes, pods)
    keys = tuple(k for k in (term_key(affinity(ZONE, sel(app="db")), "default"),
                             term_key(affinity(HOST, sel(tier="gold")), "default")) if k is not None)
    assert state.all_terms_counts(keys) == {(ZONE, "zb"): 1, (HOST, "b1"): 1}
    placed(state, pod("both-2", labels={"app": "db", "tier": "gold"}), "a1")
    assert state.all_terms_counts(keys) == {(ZONE, "zb"): 1, (HOST, "b1"): 1, (ZONE, "za"): 1, (HOST, "a1"): 1}


def test_anti_affinity_terms_of_placed_pods_are_indexed_and_undone() -> None:
    loner = affinity(HOST, sel(app="loner"))
    state = PlacementState.from_cluster([view("n1"), view("n2")],
                                        [pod("l1", labels={"app": "loner"}, anti_affinity=(loner,), node_name="n1")])
    key = term_key(loner, "default")
    assert state.has_anti_affinity
    assert state.anti_affinity_terms() == {key: {"n1": 1}}
    mark = state.checkpoint()
    placed(state, pod("l2", labels={"app": "loner"}, anti_affinity=(loner,)), "n2")
    assert state.anti_affinity_terms() == {key: {"n1": 1, "n2": 1}}
    state.rollback(mark)
    assert state.anti_affinity_terms() == {key: {"n1": 1}}
    state.remove_pods("n1", state.pods_on("n1"))
    assert not state.has_anti_affinity


# --- Topology spread index ---------------------------------------------------------------


def spread_state(nodes: list[NodeView], pods: list[Pod] = ()) -> tuple[PlacementState, object]:  # type: ignore[assignment]
    state = PlacementState.from_cluster(nodes, pods)
    constraint = spread(ZONE, sel(app="web"))
    index = state.spread_index(("web", ZONE), constraint, "default", lambda v: v.labels.get("pool") != "excluded")
    return state, index


def test_spread_index_counts_matching_pods_per_eligible_domain() -> None:
    nodes = [view("a1", zone="za"), view("b1", zone="zb"), view("c1", zone="zc", labels={"pool": "excluded"}),
             view("nz", zone=None)]
    pods = [
        pod("w1", labels={"app": "web"}, node_name="a1"),
        pod("w2", labels={"app": "web"}, node_name="a1"),
        pod("w3", labels={"app": "web"}, node_name="c1"),  # an ineligible node: not a domain
        pod("w4", labels={"app": "web"}, node_name="nz"),  # no zone label: not a domain
        pod("w5", labels={"app": "web"}, node_name="b1", terminating=True),  # terminating: not counted
        pod("w6", labels={"app": "web"}, node_name="b1", namespace="other"),  # another namespace
    ]
    state, index = spread_state(nodes, pods)
    assert index.counts == {"za": 2, "zb": 0}
    assert index.global_min() == 0


def test_spread_index_follows_placements_planned_nodes_and_rollbacks() -> None:
    state, index = spread_state([view("a1", zone="za"), view("b1", zone="zb")],
                                [pod("w1", labels={"app": "web"}, node_name="a1")])
    assert (index.counts, index.global_min()) == ({"za": 1, "zb": 0}, 0)
    mark = state.checkpoint()
    placed(state, pod("w2", labels={"app": "web"}), "b1")
    assert (index.counts, index.global_min()) == ({"za": 1, "zb": 1}, 1)
    state.add_node(view("c1", zone="zc"))  # a new domain with no pod: the minimum drops to 0
    assert (index.counts, index.global_min()) == ({"za": 1, "zb": 1, "zc": 0}, 0)
    state.rollback(mark)
    assert (index.counts, index.global_min()) == ({"za": 1, "zb": 0}, 0)
    assert index.eligible_nodes == {"a1", "b1"}


def test_spread_index_without_selector_counts_no_pod() -> None:
    state = PlacementState.from_cluster([view("a1", zone="za")], [pod("w1", labels={"app": "web"}, node_name="a1")])
    index = state.spread_index("none", spread(ZONE, None), "default", lambda v: True)
    placed(state, pod("w2", labels={"app": "web"}), "a1")
    assert index.counts == {"za": 0}


# --- The indexes stay equal to a fresh count -------------------------------------------------


ZONES = ("za", "zb", "zc")


def _indexes(state: PlacementState) -> tuple[object, ...]:
    """Every index, asked in a fixed order: term counts, all-terms counts, anti-affinity, spread counts and minimum."""
    by_zone = term_key(affinity(ZONE, sel(app="web")), "default")
    both = tuple(k for k in (by_zone, term_key(affinity(HOST, sel(tier="front")), "default")) if k is not None)
    assert by_zone is not None and len(both) == 2
    spread_index = state.spread_index(("web", ZONE), spread(ZONE, sel(app="web")), "default", lambda v: True)
    counts, total = state.term_counts(by_zone)
    return (dict(counts), total, dict(state.all_terms_counts(both)),
            {k: dict(v) for k, v in state.anti_affinity_terms().items()},
            dict(spread_index.counts), spread_index.global_min())


def _random_pod(rng: random.Random, i: int) -> Pod:
    labels = {k: v for k, v in (("app", rng.choice(["web", "db"])), ("tier", rng.choice(["front", "back"])))}
    anti = (affinity(HOST, sel(app="loner")),) if rng.random() < 0.3 else ()
    return pod(f"p{i}", cpu=0.1, mem=0.1, labels=labels, anti_affinity=anti,
               namespace=rng.choice(["default", "default", "other"]))


@pytest.mark.parametrize("seed", range(8))
def test_incremental_indexes_equal_a_fresh_count_after_any_sequence(seed: int) -> None:
    """Indexes built early and kept up to date through placements, planned nodes and rollbacks
    equal indexes built afresh over the same final placement."""
    rng = random.Random(seed)
    nodes = [view(f"n{i}", zone=ZONES[i % 3]) for i in range(4)]
    state = PlacementState.from_cluster(nodes, [])
    if rng.random() < 0.5:
        _indexes(state)  # built before any placement
    where: list[tuple[Pod, str]] = []
    checkpoints: list[tuple[int, int]] = []
    for i in range(40):
        action = rng.random()
        if action < 0.6:
            p = _random_pod(rng, i)
            target = rng.choice(list(state.nodes))
            placed(state, p, target)
            where.append((p, target))
        elif action < 0.7:
            name = f"planned{i}"
            state.add_node(view(name, zone=rng.choice(ZONES)))
        elif action < 0.8:
            checkpoints.append((state.checkpoint(), len(where)))
        elif action < 0.9 and checkpoints:
            mark, count = checkpoints.pop()
            state.rollback(mark)
            del where[count:]
        else:
            _indexes(state)  # built midway
    incremental = _indexes(state)
    fresh = PlacementState.from_cluster(state.nodes.values(), [])
    for p, target in where:
        placed(fresh, p, target)
    assert incremental == _indexes(fresh)
    for name in state.nodes:
        assert state.requested(name) == sum((pod_requests(p) for p in state.pods_on(name)), Resources())

