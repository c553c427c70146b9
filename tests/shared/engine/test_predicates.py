"""Each kube-scheduler filter, table-driven: the cases and the scheduler's own wording of each failure."""

from __future__ import annotations

import pytest

from shared.domain import HostPort, LabelSelector, Pod, Resources, Taint, Toleration
from shared.engine.placement import NodeView, PlacementState
from shared.engine.predicates import (
    AFFINITY_RULES,
    ANTI_AFFINITY_RULES,
    EXISTING_ANTI_AFFINITY_RULES,
    NODE_AFFINITY,
    PORTS,
    SPREAD,
    SPREAD_MISSING_LABEL,
    UNSCHEDULABLE,
    check,
    existing_anti_affinity_conflict,
    host_port_conflict,
    insufficient,
    insufficient_resources,
    inter_pod_affinity_mismatch,
    node_affinity_mismatch,
    node_unschedulable,
    pod_affinity_mismatch,
    pod_anti_affinity_conflict,
    pod_requests,
    static_mismatch,
    topology_spread_mismatch,
    unsupported_construct,
    untolerated_taint,
)
from tests.builders import GIB, affinity, pod, req, res, sel, spread, term

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def view(name: str, zone: str | None = "z1", *, alloc: Resources | None = None, taints: tuple[Taint, ...] = (),
         labels: dict[str, str] | None = None, unschedulable: bool = False,
         reserved_ports: tuple[HostPort, ...] = ()) -> NodeView:
    all_labels = {HOST: name, **({ZONE: zone} if zone else {}), **(labels or {})}
    return NodeView(name, all_labels, taints, alloc or res(4, 16, 110), unschedulable, reserved_ports)


def state_of(nodes: list[NodeView], placed: list[tuple[Pod, str]] = ()) -> PlacementState:  # type: ignore[assignment]
    state = PlacementState.from_cluster(nodes, [])
    for placed_pod, node_name in placed:
        state.place(placed_pod, node_name, pod_requests(placed_pod))
    return state


def running(name: str, labels: dict[str, str], namespace: str = "default", **kw: object) -> Pod:
    return pod(name, labels=labels, namespace=namespace, cpu=0.1, mem=0.1, **kw)  # type: ignore[arg-type]


# --- NodeResourcesFit -----------------------------------------------------------------

MIB = 1024 * 1024
INSUFFICIENT = [
    ("fits exactly", res(4, 16, 1), res(4, 16, 1), None),
    ("a zero request fits an over-committed node", Resources(0, 0, 1), Resources(-500, -GIB, 5), None),
    ("pod count first, as the scheduler", res(8, 64, 1), res(4, 16, 0), "Too many pods"),
    ("cpu", res(5, 1, 1), res(4, 16, 10), "Insufficient cpu"),
    ("memory", res(1, 17, 1), res(4, 16, 10), "Insufficient memory"),
    ("ephemeral storage", res(1, 1, 1, eph_gib=20), res(4, 16, 10, eph_gib=10), "Insufficient ephemeral-storage"),
    ("a GPU a node does not have at all", res(1, 1, 1, gpu=1), res(4, 16, 10), "Insufficient nvidia.com/gpu"),
    ("more GPUs than the node has", res(1, 1, 1, gpu=2), res(4, 16, 10, gpu=1), "Insufficient nvidia.com/gpu"),
    ("GPUs that fit", res(1, 1, 1, gpu=2), res(4, 16, 10, gpu=4), None),
    ("any vendor resource", res(1, 1, 1, ext={"example.com/fpga": 1}), res(4, 16, 10, gpu=1), "Insufficient example.com/fpga"),
    # hugepages rows after noderesources/fit_test.go (TestEnoughRequests, "hugepages resource
    # capacity enforced" / "allocatable enforced"): allocatable 5, 2 already used, so 3 free.
    ("hugepages over what is free", res(0, 0, 1, ext={"hugepages-2Mi": 10 * MIB}), res(4, 16, 10, ext={"hugepages-2Mi": 3 * MIB}),
     "Insufficient hugepages-2Mi"),
    ("hugepages that fit", res(0, 0, 1, ext={"hugepages-2Mi": 3 * MIB}), res(4, 16, 10, ext={"hugepages-2Mi": 3 * MIB}), None),
    ("1Gi hugepages on a node with only 2Mi pages", res(0, 0, 1, ext={"hugepages-1Gi": GIB}),
     res(4, 16, 10, ext={"hugepages-2Mi": 4 * GIB}), "Insufficient hugepages-1Gi"),
]


@pytest.mark.parametrize(("requests", "free", "reason"), [c[1:] for c in INSUFFICIENT], ids=[c[0] for c in INSUFFICIENT])
def test_insufficient(requests: Resources, free: Resources, reason: str | None) -> None:
    assert insufficient(requests, free) == reason
    assert requests.fits_in(free) is (reason is None)


def test_insufficient_resources_counts_what_is_placed() -> None:
    node = view("n1", alloc=res(4, 16, 3, gpu=1))
    state = state_of([node], [(pod("a", cpu=3), "n1"), (pod("b", requests=res(0, 0, gpu=1)), "n1")])
    assert insufficient_resources(pod_requests(pod("c", cpu=1)), node, state) is None
    assert insufficient_resources(pod_requests(pod("c", cpu=1.5)), node, state) == "Insufficient cpu"
    assert insufficient_resources(pod_requests(pod("g", requests=res(0, 0, gpu=1))), node, state) == (
        "Insufficient nvidia.com/gpu")
    state.place(pod("d", cpu=0.1), "n1", pod_requests(pod("d", cpu=0.1)))
    assert insufficient_resources(pod_requests(pod("e", cpu=0.1)), node, state) == "Too many pods"


# --- TaintToleration --------------------------------------------------------------------

TAINTS = [
    ("no taints", (), (), None),
    ("NoSchedule blocks", (Taint("gpu", "true"),), (), "node(s) had untolerated taint {gpu: true}"),
    ("NoExecute blocks", (Taint("gpu", "", "NoExecute"),), (), "node(s) had untolerated taint {gpu: }"),
    ("PreferNoSchedule does not block", (Taint("gpu", "true", "PreferNoSchedule"),), (), None),
    ("Equal with the value tolerates", (Taint("gpu", "true"),), (Toleration("gpu", "Equal", "true"),), None),
    ("Equal with another value does not", (Taint("gpu", "true"),), (Toleration("gpu", "Equal", "false"),),
     "node(s) had untolerated taint {gpu: true}"),
    ("Exists on the key tolerates any value", (Taint("gpu", "x"),), (Toleration("gpu", "Exists"),), None),
    ("an alpha Gt toleration is never taken to tolerate", (Taint("sla", "950"),), (Toleration("sla", "Gt", "950"),),
     "node(s) had untolerated taint {sla: 950}"),
    ("Exists without a key tolerates everything", (Taint("a"), Taint("b", "", "NoExecute")), (Toleration("", "Exists"),),
     None),
    ("a toleration for another effect does not", (Taint("gpu", "true"),),
     (Toleration("gpu", "Exists", effect="NoExecute"),), "node(s) had untolerated taint {gpu: true}"),
    ("the first untolerated taint is named", (Taint("a"), Taint("b", "1")), (Toleration("a", "Exists"),),
     "node(s) had untolerated taint {b: 1}"),
]


@pytest.mark.parametrize(("taints", "tolerations", "reason"), [c[1:] for c in TAINTS], ids=[c[0] for c in TAINTS])
def test_untolerated_taint(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...], reason: str | None) -> None:
    assert untolerated_taint(pod("p", tolerations=tolerations), taints) == reason


# --- NodeAffinity (nodeSelector and required node affinity) -----------------------------

LABELS = {"pool": "gpu", "gen": "5", HOST: "n1"}
NODE_AFFINITY_CASES = [
    ("nothing asked", {}, (), True),
    ("nodeSelector matches", {"pool": "gpu"}, (), True),
    ("nodeSelector value differs", {"pool": "cpu"}, (), False),
    ("nodeSelector key absent", {"disk": "ssd"}, (), False),
    ("In", {}, (term(req("pool", "In", "cpu", "gpu")),), True),
    ("In, absent key", {}, (term(req("disk", "In", "ssd")),), False),
    ("NotIn", {}, (term(req("pool", "NotIn", "cpu")),), True),
    ("NotIn excludes", {}, (term(req("pool", "NotIn", "gpu")),), False),
    ("NotIn matches an absent key", {}, (term(req("disk", "NotIn", "ssd")),), True),
    ("Exists", {}, (term(req("pool", "Exists")),), True),
    ("DoesNotExist", {}, (term(req("pool", "DoesNotExist")),), False),
    ("DoesNotExist, absent key", {}, (term(req("disk", "DoesNotExist")),), True),
    ("Gt", {}, (term(req("gen", "Gt", "4")),), True),
    ("Gt, equal is not greater", {}, (term(req("gen", "Gt", "5")),), False),
    ("Lt", {}, (term(req("gen", "Lt", "6")),), True),
    ("Gt on a value that is not a number", {}, (term(req("pool", "Gt", "1")),), False),
    ("a term's expressions are ANDed", {}, (term(req("pool", "In", "gpu"), req("gen", "In", "4")),), False),
    ("terms are ORed", {}, (term(req("pool", "In", "cpu")), term(req("gen", "In", "5"))), True),
    ("an empty term matches nothing", {}, (term(),), False),
    ("matchFields on metadata.name", {}, (term(fields=(req("metadata.name", "In", "n1"),)),), True),
    ("matchFields on another node's name", {}, (term(fields=(req("metadata.name", "In", "n2"),)),), False),
    ("nodeSelector and affinity must both hold", {"pool": "cpu"}, (term(req("gen", "In", "5")),), False),
    # Requirements the scheduler cannot parse make their term match no node (and never every
    # node). Rows after kubernetes pkg/scheduler/framework/plugins/nodeaffinity/node_affinity_test.go
    # ("Pod with an invalid value in Affinity term won't be scheduled onto the node") and
    # component-helpers scheduling/corev1/nodeaffinity/nodeaffinity_test.go (invalid key, empty
    # values, Gt/Lt needing one integer).
    ("an invalid value in a NotIn term matches nothing", {},
     (term(req("pool", "NotIn", "invalid value: ___@#$%^")),), False),
    ("an invalid label key matches nothing", {}, (term(req("invalid key", "DoesNotExist")),), False),
    ("NotIn with no values matches nothing", {}, (term(req("pool", "NotIn")),), False),
    ("In with no values matches nothing", {}, (term(req("pool", "In")),), False),
    ("Exists with values matches nothing", {}, (term(req("pool", "Exists", "gpu")),), False),
    ("DoesNotExist with values matches nothing", {}, (term(req("disk", "DoesNotExist", "ssd")),), False),
    ("Gt with a value that is not an integer matches nothing", {}, (term(req("gen", "Gt", "4a")),), False),
    ("Lt with two values matches nothing", {}, (term(req("gen", "Lt", "6", "7")),), False),
    ("Gt with an underscore in the number matches nothing (Go's ParseInt)", {}, (term(req("gen", "Gt", "1_0")),), False),
    ("Gt with a leading zero label value, as upstream's kernel-version row", {}, (term(req("gen", "Gt", "0004")),), True),
    ("an unknown operator matches nothing", {}, (term(req("pool", "Like", "gpu")),), False),
    ("matchFields with two values matches nothing", {}, (term(fields=(req("metadata.name", "In", "n1", "n2"),)),),
     False),
    ("an invalid term does not stop a valid one from matching", {},
     (term(req("pool", "NotIn")), term(req("pool", "In", "gpu"))), True),
    ("a prefixed key is valid", {}, (term(req("example.com/pool", "DoesNotExist")),), True),
]


@pytest.mark.parametrize(("selector", "terms", "matches"), [c[1:] for c in NODE_AFFINITY_CASES],
                         ids=[c[0] for c in NODE_AFFINITY_CASES])
def test_node_affinity(selector: dict[str, str], terms: tuple, matches: bool) -> None:
    candidate = pod("p", selector=selector, node_affinity=terms)
    assert node_affinity_mismatch(candidate, LABELS, "n1") == (None if matches else NODE_AFFINITY)


def test_static_mismatch_reports_taints_before_affinity_as_the_scheduler_orders_its_filters() -> None:
    candidate = pod("p", selector={"pool": "cpu"})
    assert static_mismatch(candidate, LABELS, (Taint("gpu", "true"),)) == "node(s) had untolerated taint {gpu: true}"


# --- NodeUnschedulable, unsupported constructs --------------------------------------------

UNSCHEDULABLE_CASES = [
    ("schedulable", False, (), None),
    ("cordoned", True, (), UNSCHEDULABLE),
    ("cordoned, but the pod tolerates it", True,
     (Toleration("node.kubernetes.io/unschedulable", "Exists", effect="NoSchedule"),), None),
]


@pytest.mark.parametrize(("cordoned", "tolerations", "reason"), [c[1:] for c in UNSCHEDULABLE_CASES],
                         ids=[c[0] for c in UNSCHEDULABLE_CASES])
def test_node_unschedulable(cordoned: bool, tolerations: tuple[Toleration, ...], reason: str | None) -> None:
    assert node_unschedulable(pod("p", tolerations=tolerations), view("n1", unschedulable=cordoned)) == reason


def test_unsupported_constructs_fit_nowhere_and_say_why() -> None:
    odd = pod("p", unsupported=("volume topology of persistentVolumeClaim data", "podAffinity namespaceSelector"))
    reason = "unsupported: volume topology of persistentVolumeClaim data, podAffinity namespaceSelector"
    assert unsupported_construct(odd) == reason
    node = view("n1")
    assert check(odd, node, state_of([node])) == reason
    assert unsupported_construct(pod("q")) is None


# --- NodePorts ----------------------------------------------------------------------------

PORT_CASES = [
    ("no ports asked", (), (), None),
    ("a free port", (HostPort(8080),), (HostPort(9090),), None),
    ("the same port and protocol", (HostPort(8080),), (HostPort(8080),), PORTS),
    ("the same port, another protocol", (HostPort(53, "UDP"),), (HostPort(53, "TCP"),), None),
    ("two specific addresses", (HostPort(80, host_ip="10.0.0.1"),), (HostPort(80, host_ip="10.0.0.2"),), None),
    ("the same specific address", (HostPort(80, host_ip="10.0.0.1"),), (HostPort(80, host_ip="10.0.0.1"),), PORTS),
    ("a wildcard against a specific address", (HostPort(80),), (HostPort(80, host_ip="10.0.0.1"),), PORTS),
    ("a specific address against a wildcard", (HostPort(80, host_ip="10.0.0.1"),), (HostPort(80),), PORTS),
]


@pytest.mark.parametrize(("wanted", "used", "reason"), [c[1:] for c in PORT_CASES], ids=[c[0] for c in PORT_CASES])
def test_host_port_conflict(wanted: tuple[HostPort, ...], used: tuple[HostPort, ...], reason: str | None) -> None:
    node = view("n1")
    state = state_of([node], [(pod("other", ports=used), "n1")])
    assert host_port_conflict(pod("p", ports=wanted), node, state) == reason
    # A planned node's DaemonSet ports are taken just the same.
    reserved = view("n2", reserved_ports=used)
    assert host_port_conflict(pod("p", ports=wanted), reserved, state_of([reserved])) == reason


# --- InterPodAffinity ----------------------------------------------------------------------

NODES = [view("a1", "z1"), view("a2", "z1"), view("b1", "z2"), view("c1", None)]
WEB = {"app": "web"}

AFFINITY_CASES = [
    # (id, incoming pod, placed [(pod, node)], node to check, reason)
    ("affinity to a pod on the same host", pod("p", pod_affinity=(affinity(HOST, sel(app="web")),)),
     [(running("w", WEB), "a1")], "a1", None),
    ("affinity: the pod is on another host", pod("p", pod_affinity=(affinity(HOST, sel(app="web")),)),
     [(running("w", WEB), "a1")], "a2", AFFINITY_RULES),
    ("affinity by zone: another host in the zone will do", pod("p", pod_affinity=(affinity(ZONE, sel(app="web")),)),
     [(running("w", WEB), "a1")], "a2", None),
    ("affinity by zone: not in that zone", pod("p", pod_affinity=(affinity(ZONE, sel(app="web")),)),
     [(running("w", WEB), "a1")], "b1", AFFINITY_RULES),
    ("affinity: a node without the topology key never satisfies it",
     pod("p", labels=WEB, pod_affinity=(affinity(ZONE, sel(app="web")),)), [], "c1", AFFINITY_RULES),
    ("affinity: the first of a self-affine group goes anywhere",
     pod("p", labels=WEB, pod_affinity=(affinity(ZONE, sel(app="web")),)), [], "b1", None),
    ("affinity: no match anywhere and not self-affine", pod("p", pod_affinity=(affinity(ZONE, sel(app="web")),)),
     [], "b1", AFFINITY_RULES),
    ("affinity looks in the pod's own namespace by default", pod("p", pod_affinity=(affinity(HOST, sel(app="web")),)),
     [(running("w", WEB, namespace="other"), "a1")], "a1", AFFINITY_RULES),
    ("affinity in listed namespaces", pod("p", pod_affinity=(affinity(HOST, sel(app="web"), "other"),)),
     [(running("w", WEB, namespace="other"), "a1")], "a1", None),
    ("affinity in every namespace (an empty namespaceSelector)",
     pod("p", pod_affinity=(affinity(HOST, sel(app="web"), all_namespaces=True),)),
     [(running("w", WEB, namespace="other"), "a1")], "a1", None),
    ("anti-affinity: a matching pod on the host", pod("p", anti_affinity=(affinity(HOST, sel(app="web")),)),
     [(running("w", WEB), "a1")], "a1", ANTI_AFFINITY_RULES),
    ("anti-affinity: another host is fine", pod("p", anti_affinity=(affinity(HOST, sel(app="web")),)),
     [(running("w", WEB), "a1")], "a2", None),
    ("anti-affinity by zone", pod("p", anti_affinity=(affinity(ZONE, sel(app="web")),)),
     [(running("w", WEB), "a1")], "a2", ANTI_AFFINITY_RULES),
    ("anti-affinity by zone, another zone", pod("p", anti_affinity=(affinity(ZONE, sel(app="web")),)),
     [(running("w", WEB), "a1")], "b1", None),
    ("anti-affinity: a node without the topology key cannot violate it",
     pod("p", anti_affinity=(affinity(ZONE, sel(app="web")),)), [(running("w", WEB), "c1")], "c1", None),
    ("anti-affinity: pods of other namespaces do not count", pod("p", anti_affinity=(affinity(HOST, sel(app="web")),)),
     [(running("w", WEB, namespace="other"), "a1")], "a1", None),
    ("existing pods' anti-affinity keeps the pod out of their zone", pod("p", labels=WEB),
     [(running("w", {}, anti_affinity=(affinity(ZONE, sel(app="web")),)), "a1")], "a2", EXISTING_ANTI_AFFINITY_RULES),
    ("existing pods' anti-affinity: another zone is fine", pod("p", labels=WEB),
     [(running("w", {}, anti_affinity=(affinity(ZONE, sel(app="web")),)), "a1")], "b1", None),
    ("existing pods' anti-affinity: it does not select this pod", pod("p", labels={"app": "db"}),
     [(running("w", {}, anti_affinity=(affinity(ZONE, sel(app="web")),)), "a1")], "a1", None),
    ("existing pods' anti-affinity: only in its own namespace", pod("p", labels=WEB, namespace="other"),
     [(running("w", {}, anti_affinity=(affinity(HOST, sel(app="web")),)), "a1")], "a1", None),
    ("affinity is checked before anti-affinity",
     pod("p", pod_affinity=(affinity(HOST, sel(app="db")),), anti_affinity=(affinity(HOST, sel(app="web")),)),
     [(running("w", WEB), "a1"), (running("d", {"app": "db"}), "a2")], "a1", AFFINITY_RULES),
]


@pytest.mark.parametrize(("incoming", "placed", "node_name", "reason"), [c[1:] for c in AFFINITY_CASES],
                         ids=[c[0] for c in AFFINITY_CASES])
def test_inter_pod_affinity(incoming: Pod, placed: list[tuple[Pod, str]], node_name: str, reason: str | None) -> None:
    state = state_of(NODES, placed)
    node = state.node(node_name)
    assert inter_pod_affinity_mismatch(incoming, node, state) == reason
    # Each of the three parts answers alone for its own rule.
    parts = (pod_affinity_mismatch(incoming, node, state), pod_anti_affinity_conflict(incoming, node, state),
             existing_anti_affinity_conflict(incoming, node, state))
    assert reason in parts


def test_anti_affinity_indexes_follow_later_placements_and_rollbacks() -> None:
    state = state_of(NODES)
    incoming = pod("p", labels=WEB, anti_affinity=(affinity(HOST, sel(app="web")),))
    assert pod_anti_affinity_conflict(incoming, state.node("a1"), state) is None  # builds the index
    checkpoint = state.checkpoint()
    state.place(running("w", WEB), "a1", Resources(pods=1))
    assert pod_anti_affinity_conflict(incoming, state.node("a1"), state) == ANTI_AFFINITY_RULES
    state.rollback(checkpoint)
    assert pod_anti_affinity_conflict(incoming, state.node("a1"), state) is None


# --- PodTopologySpread -----------------------------------------------------------------------

SPREAD_NODES = [view("a1", "z1"), view("a2", "z1"), view("b1", "z2"), view("c1", "z3", labels={"pool": "other"})]
WEB_IN_A = [(running("w1", WEB), "a1"), (running("w2", WEB), "a2")]

SPREAD_CASES = [
    # (id, incoming pod, placed, node to check, reason)
    ("the emptiest zone is fine", pod("p", labels=WEB, spread=(spread(ZONE, sel(app="web")),)), WEB_IN_A, "b1", None),
    ("the fullest zone exceeds maxSkew", pod("p", labels=WEB, spread=(spread(ZONE, sel(app="web")),)), WEB_IN_A, "a1",
     SPREAD),
    ("a larger maxSkew allows it", pod("p", labels=WEB, spread=(spread(ZONE, sel(app="web"), 3),)), WEB_IN_A, "a1", None),
    ("a node without the key", pod("p", labels=WEB, spread=(spread("rack", sel(app="web")),)), [], "a1",
     SPREAD_MISSING_LABEL),
    ("ScheduleAnyway is not a filter",
     pod("p", labels=WEB, spread=(spread(ZONE, sel(app="web"), when_unsatisfiable="ScheduleAnyway"),)), WEB_IN_A, "a1",
     None),
    ("a pod its selector does not match adds nothing to the skew",
     pod("p", labels={"app": "db"}, spread=(spread(ZONE, sel(app="web"), 2),)), WEB_IN_A, "a1", None),
    ("hostname spread", pod("p", labels=WEB, spread=(spread(HOST, sel(app="web")),)), [(running("w1", WEB), "a1")], "a1",
     SPREAD),
    ("domains outside the pod's node selector do not count (nodeAffinityPolicy Honor)",
     pod("p", labels=WEB, selector={"pool": "other"}, spread=(spread(ZONE, sel(app="web")),)),
     [(running("w1", WEB), "c1")], "c1", None),
    ("nodeAffinityPolicy Ignore counts every domain",
     pod("p", labels=WEB, selector={"pool": "other"}, spread=(spread(ZONE, sel(app="web"), node_affinity_policy="Ignore"),)),
     [(running("w1", WEB), "c1")], "c1", SPREAD),
    ("minDomains above the domains there are: the minimum counts as 0",
     pod("p", labels=WEB, spread=(spread(ZONE, sel(app="web"), 2, min_domains=5),)),
     [*WEB_IN_A, (running("w3", WEB), "b1"), (running("w4", WEB), "c1")], "a1", SPREAD),
    ("terminating pods do not count", pod("p", labels=WEB, spread=(spread(ZONE, sel(app="web")),)),
     [(running("w1", WEB, terminating=True), "a1"), (running("w2", WEB, terminating=True), "a2")], "a1", None),
    ("pods of other namespaces do not count", pod("p", labels=WEB, spread=(spread(ZONE, sel(app="web")),)),
     [(running("w1", WEB, namespace="x"), "a1"), (running("w2", WEB, namespace="x"), "a2")], "a1", None),
]


@pytest.mark.parametrize(("incoming", "placed", "node_name", "reason"), [c[1:] for c in SPREAD_CASES],
                         ids=[c[0] for c in SPREAD_CASES])
def test_topology_spread(incoming: Pod, placed: list[tuple[Pod, str]], node_name: str, reason: str | None) -> None:
    state = state_of(SPREAD_NODES, placed)
    assert topology_spread_mismatch(incoming, state.node(node_name), state) == reason


def test_spread_taints_policy_honor_leaves_out_tainted_domains() -> None:
    tainted = view("t1", "z4", taints=(Taint("dedicated", "x"),))
    nodes = [*SPREAD_NODES, tainted]
    honor = pod("p", labels=WEB, spread=(spread(ZONE, sel(app="web"), node_taints_policy="Honor"),))
    ignore = pod("q", labels=WEB, spread=(spread(ZONE, sel(app="web")),))
    placed = [(running("w1", WEB), "a1"), (running("w2", WEB), "b1"), (running("w3", WEB), "c1")]
    state = state_of(nodes, placed)
    # Honor: z4 (tainted, untolerated) is no domain, so the minimum is 1 and z1 may take one more.
    assert topology_spread_mismatch(honor, state.node("a2"), state) is None
    # Ignore (the default): empty z4 holds the minimum at 0.
    assert topology_spread_mismatch(ignore, state.node("a2"), state) == SPREAD


def test_spread_minimum_follows_new_domains_and_rollback() -> None:
    state = state_of(SPREAD_NODES[:3], [(running("w1", WEB), "a1"), (running("w2", WEB), "b1")])
    incoming = pod("p", labels=WEB, spread=(spread(ZONE, sel(app="web")),))
    assert topology_spread_mismatch(incoming, state.node("a2"), state) is None  # z1 1, z2 1: min 1
    checkpoint = state.checkpoint()
    state.add_node(view("n3", "z3"))  # an empty zone drops the minimum to 0
    assert topology_spread_mismatch(incoming, state.node("a2"), state) == SPREAD
    assert topology_spread_mismatch(incoming, state.node("n3"), state) is None
    state.rollback(checkpoint)
    assert not state.has_node("n3")
    assert topology_spread_mismatch(incoming, state.node("a2"), state) is None


# --- All filters --------------------------------------------------------------------------------

def test_check_runs_every_filter_in_the_schedulers_order() -> None:
    node = view("n1", alloc=res(2, 8, 110), taints=(Taint("gpu", "true"),), labels={"pool": "gpu"})
    state = state_of([node], [(running("w", WEB, ports=(HostPort(80),)), "n1")])
    tolerant = (Toleration("gpu", "Exists"),)
    assert check(pod("a", cpu=1, selector={"pool": "cpu"}), node, state) == "node(s) had untolerated taint {gpu: true}"
    assert check(pod("b", cpu=1, selector={"pool": "cpu"}, tolerations=tolerant), node, state) == NODE_AFFINITY
    assert check(pod("c", cpu=4, tolerations=tolerant, ports=(HostPort(80),)), node, state) == PORTS
    assert check(pod("d", cpu=4, tolerations=tolerant), node, state) == "Insufficient cpu"
    assert check(pod("e", cpu=1, tolerations=tolerant, anti_affinity=(affinity(HOST, sel(app="web")),)), node,
                 state) == ANTI_AFFINITY_RULES
    assert check(pod("f", cpu=1, tolerations=tolerant), node, state) is None


# --- Required pod affinity with several terms: kube-scheduler's semantics ----------------
# Rows from kubernetes pkg/scheduler/framework/plugins/interpodaffinity/filtering_test.go
# (TestRequiredAffinitySingleNode, TestRequiredAffinityMultipleNodes): one node "machine1"
# in region r1 / zone z11; the incoming pod carries {security: S1} unless the row says.
# An existing pod counts only when it matches *every* term of the incoming pod.

def _sel(*requirements: object) -> LabelSelector:
    return LabelSelector((), tuple(requirements))  # type: ignore[arg-type]


SCAN = {"service": "securityscan"}
S1 = {"security": "S1"}
R1 = {"region": "r1", "zone": "z11"}

MULTI_TERM = [
    ("one term, In matches the existing pod",
     S1, [affinity("region", _sel(req("service", "In", "securityscan", "value2")))], [SCAN], None),
    ("one term, NotIn matches the existing pod",
     S1, [affinity("region", _sel(req("service", "NotIn", "securityscan3", "value3")))], [SCAN], None),
    ("two terms, both matched by the same pod (different operators)",
     S1, [affinity("region", _sel(req("service", "Exists"), req("wrongkey", "DoesNotExist"))),
          affinity("region", _sel(req("service", "In", "securityscan"), req("service", "NotIn", "WrongValue")))],
     [SCAN], None),
    ("two terms, the existing pod fails one requirement of the second",
     S1, [affinity("region", _sel(req("service", "Exists"), req("wrongkey", "DoesNotExist"))),
          affinity("region", _sel(req("service", "In", "securityscan2"), req("service", "NotIn", "WrongValue")))],
     [SCAN], AFFINITY_RULES),
    ("two terms, each matched by a different pod: not satisfied",
     SCAN, [affinity("region", _sel(req("service", "Exists"))), affinity("region", _sel(req("security", "Exists")))],
     [SCAN, S1], AFFINITY_RULES),
    ("two terms, one pod matching both",
     SCAN, [affinity("region", _sel(req("service", "Exists"))), affinity("region", _sel(req("security", "Exists")))],
     [{**SCAN, **S1}], None),
    ("no pod matches all terms, but the pod matches its own terms: the first of its group may go",
     {**SCAN, **S1},
     [affinity("region", _sel(req("service", "Exists"))), affinity("region", _sel(req("security", "Exists")))],
     [SCAN], None),
    ("no pod anywhere, the pod matches only one of its own two terms",
     SCAN, [affinity("region", _sel(req("service", "Exists"))), affinity("region", _sel(req("security", "Exists")))],
     [], AFFINITY_RULES),
    ("terms on two topology keys, one pod matching both",
     S1, [affinity("region", _sel(req("service", "In", "securityscan"))),
          affinity("zone", _sel(req("service", "Exists")))], [SCAN], None),
    ("a term on a key the node lacks is never satisfied",
     S1, [affinity("region", _sel(req("service", "Exists"))), affinity("rack", _sel(req("service", "Exists")))],
     [SCAN], AFFINITY_RULES),
]


@pytest.mark.parametrize(("case", "labels", "terms", "existing", "expected"), MULTI_TERM,
                         ids=[row[0] for row in MULTI_TERM])
def test_pod_affinity_terms_must_all_be_matched_by_one_pod(
    case: str, labels: dict[str, str], terms: list, existing: list[dict[str, str]], expected: str | None
) -> None:
    node = NodeView("machine1", {HOST: "machine1", **R1}, (), res(4, 16, 110))
    placed = [(running(f"e{i}", pod_labels), "machine1") for i, pod_labels in enumerate(existing)]
    state = state_of([node], placed)
    candidate = pod("p", labels=labels, pod_affinity=tuple(terms))
    assert pod_affinity_mismatch(candidate, node, state) == expected


def test_pod_affinity_index_follows_placements_and_rollback() -> None:
    """The all-terms index is kept as the estimator places and undoes pods."""
    node = NodeView("machine1", {HOST: "machine1", **R1}, (), res(4, 16, 110))
    state = state_of([node])
    terms = (affinity("region", _sel(req("service", "Exists"))), affinity("region", _sel(req("security", "Exists"))))
    candidate = pod("p", labels={"app": "x"}, pod_affinity=terms)
    assert pod_affinity_mismatch(candidate, node, state) == AFFINITY_RULES
    mark = state.checkpoint()
    both = running("both", {**SCAN, **S1})
    state.place(both, "machine1", pod_requests(both))
    assert pod_affinity_mismatch(candidate, node, state) is None
    state.rollback(mark)
    assert pod_affinity_mismatch(candidate, node, state) == AFFINITY_RULES
