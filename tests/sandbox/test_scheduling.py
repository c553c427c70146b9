"""The sandbox's kube-scheduler stand-in, plugin by plugin: pods as API JSON, nodes as slots, no world."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from shared.domain import Taint
from sandbox.model.podspec import PodNeeds, SpecError, parse_pod, spec_amounts
from sandbox.model.resources import Amounts, parse_resource_list, resource_list
from sandbox.world.scheduling import ClusterView, NodeSlot, unschedulable_message

GI = 1 << 30
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def node(name: str, *, zone: str = "westeurope-1", labels: dict[str, str] | None = None, cpu: str = "4",
         memory: str = "16Gi", extra: dict[str, Any] | None = None, taints: tuple[Taint, ...] = (),
         ready: bool = True, unschedulable: bool = False) -> NodeSlot:
    return NodeSlot(
        name=name,
        labels={HOST: name, ZONE: zone, **(labels or {})},
        taints=taints,
        allocatable=parse_resource_list({"cpu": cpu, "memory": memory, "pods": "110", **(extra or {})}),
        used=Amounts(),
        ready=ready,
        unschedulable=unschedulable,
    )


def pod(*, labels: dict[str, str] | None = None, namespace: str = "default", cpu: str = "1", memory: str = "1Gi",
        requests: dict[str, Any] | None = None, ports: list[dict[str, Any]] | None = None, **spec: Any) -> PodNeeds:
    container: dict[str, Any] = {"name": "main", "resources": {"requests": {"cpu": cpu, "memory": memory, **(requests or {})}}}
    if ports:
        container["ports"] = ports
    return parse_pod({"metadata": {"name": "p", "namespace": namespace, "labels": labels or {}},
                      "spec": {"containers": [container], **spec}})


@dataclass
class Placed:
    needs: PodNeeds
    node: str | None
    terminating: bool = False


class Cluster:
    """A ClusterView plus the pod index the world would keep."""

    def __init__(self, *nodes: NodeSlot) -> None:
        self.placed: list[Placed] = []
        self.view = ClusterView(
            list(nodes), pods=lambda: self.placed,
            anti_affinity_pods=lambda: [p for p in self.placed if p.needs.anti_affinity],
            namespace_labels={"default": {"kubernetes.io/metadata.name": "default"},
                              "other": {"kubernetes.io/metadata.name": "other", "team": "b"}},
        )

    def put(self, needs: PodNeeds, node_name: str, terminating: bool = False) -> None:
        self.view.place(needs, self.view.by_name[node_name])
        self.placed.append(Placed(needs, node_name, terminating))

    def schedule(self, needs: PodNeeds) -> str | None:
        chosen, _ = self.view.choose(needs)
        if chosen is not None:
            self.put(needs, chosen.name)
        return chosen.name if chosen else None

    def reasons(self, needs: PodNeeds) -> Counter[str]:
        chosen, reasons = self.view.choose(needs)
        assert chosen is None
        return reasons

    def fits(self, needs: PodNeeds) -> list[str]:
        """Names of the nodes the pod may go on."""
        return [n.name for n in self.view.nodes if not self.view.filter_reasons(needs, n)]


def _affinity(*expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    term: dict[str, Any] = {"matchExpressions": list(expressions)}
    if fields:
        term["matchFields"] = fields
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


# ---------------------------------------------------------------------------- NodeAffinity


@pytest.mark.parametrize(
    ("expression", "fitting"),
    [
        ({"key": "tier", "operator": "In", "values": ["gold", "silver"]}, ["a", "b"]),
        ({"key": "tier", "operator": "NotIn", "values": ["gold"]}, ["b", "c"]),  # absent labels pass NotIn
        ({"key": "tier", "operator": "Exists"}, ["a", "b"]),
        ({"key": "tier", "operator": "DoesNotExist"}, ["c"]),
        ({"key": "gen", "operator": "Gt", "values": ["4"]}, ["a"]),
        ({"key": "gen", "operator": "Lt", "values": ["5"]}, ["b"]),  # c has no gen label: never matches Gt/Lt
    ],
)
def test_node_affinity_operators(expression: dict[str, Any], fitting: list[str]) -> None:
    cluster = Cluster(node("a", labels={"tier": "gold", "gen": "5"}), node("b", labels={"tier": "silver", "gen": "3"}),
                      node("c"))
    assert cluster.fits(pod(affinity=_affinity(expression))) == fitting


def test_node_affinity_terms_are_ored_and_combine_with_the_node_selector() -> None:
    cluster = Cluster(node("a", labels={"tier": "gold"}), node("b", labels={"tier": "silver"}), node("c"))
    either = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]},
    ]}}}
    assert cluster.fits(pod(affinity=either)) == ["a", "c"]
    assert cluster.fits(pod(affinity=either, nodeSelector={"tier": "gold"})) == ["a"]
    empty_term = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}
    assert cluster.fits(pod(affinity=empty_term)) == []  # an empty term selects nothing
    assert cluster.reasons(pod(affinity=empty_term)) == {"node(s) didn't match Pod's node affinity/selector": 3}


# ---------------------------------------------------------------------------- taints and node state

GPU_TAINT = Taint("nvidia.com/gpu", "true", "NoSchedule")


@pytest.mark.parametrize(
    ("slot", "tolerations", "fits", "reason"),
    [
        (node("n", taints=(GPU_TAINT,)), [], False, "node(s) had untolerated taint {nvidia.com/gpu: true}"),
        (node("n", taints=(GPU_TAINT,)), [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], True, None),
        (node("n", taints=(GPU_TAINT,)), [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "false"}], False, "untolerated"),
        (node("n", taints=(Taint("k", "v", "NoExecute"),)), [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}], False, "{k: v}"),
        (node("n", taints=(Taint("k", "v", "PreferNoSchedule"),)), [], True, None),
        (node("n", ready=False), [], False, "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"),
        (node("n", unschedulable=True), [], False, "node(s) were unschedulable"),
        (node("n", unschedulable=True), [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}], True, None),
    ],
)
def test_taints_tolerations_and_node_state(slot: NodeSlot, tolerations: list[dict[str, Any]], fits: bool,
                                           reason: str | None) -> None:
    cluster = Cluster(slot)
    needs = pod(tolerations=tolerations)
    assert bool(cluster.fits(needs)) is fits
    if reason:
        assert reason in next(iter(cluster.reasons(needs)))


# ---------------------------------------------------------------------------- resources


@pytest.mark.parametrize(
    ("requests", "reasons"),
    [
        ({"cpu": "3"}, []),
        ({"cpu": "4100m"}, ["Insufficient cpu"]),
        ({"memory": "17Gi"}, ["Insufficient memory"]),
        ({"ephemeral-storage": "50Gi"}, []),
        ({"ephemeral-storage": "101Gi"}, ["Insufficient ephemeral-storage"]),
        ({"nvidia.com/gpu": "1"}, []),
        ({"nvidia.com/gpu": "2"}, ["Insufficient nvidia.com/gpu"]),
        ({"example.com/fpga": "1"}, ["Insufficient example.com/fpga"]),  # a resource the node does not have
        ({"cpu": "5", "memory": "20Gi", "nvidia.com/gpu": "3"},
         ["Insufficient cpu", "Insufficient memory", "Insufficient nvidia.com/gpu"]),
    ],
)
def test_every_requested_resource_must_fit(requests: dict[str, str], reasons: list[str]) -> None:
    slot = node("n", extra={"ephemeral-storage": "100Gi", "nvidia.com/gpu": "1"})
    cluster = Cluster(slot)
    needs = pod(requests=requests)
    assert cluster.view.filter_reasons(needs, slot) == reasons


def test_what_placed_pods_use_is_not_free() -> None:
    cluster = Cluster(node("n", extra={"nvidia.com/gpu": "1"}))
    gpu_pod = pod(requests={"nvidia.com/gpu": "1"})
    assert cluster.schedule(gpu_pod) == "n"
    assert cluster.reasons(gpu_pod) == {"Insufficient nvidia.com/gpu": 1}
    assert cluster.schedule(pod()) == "n"  # cpu and memory are still free


def test_the_pod_count_is_a_resource_too() -> None:
    slot = node("n")
    slot.allocatable = Amounts(4000, 16 * GI, 1)
    cluster = Cluster(slot)
    assert cluster.schedule(pod(cpu="10m", memory="1Mi")) == "n"
    assert cluster.reasons(pod(cpu="10m", memory="1Mi")) == {"Too many pods": 1}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                         {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
         Amounts(1500, 2 * GI, 1)),
        # init containers run one at a time before the app containers: the larger of the two phases counts
        ({"initContainers": [{"resources": {"requests": {"cpu": "3"}}}],
          "containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
         Amounts(3000, GI, 1)),
        # a sidecar (restartPolicy Always) keeps running beside the app containers
        ({"initContainers": [{"restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}},
                             {"resources": {"requests": {"cpu": "1"}}}],
          "containers": [{"resources": {"requests": {"cpu": "500m"}}}]},
         Amounts(1200, 0, 1)),
        ({"containers": [{"resources": {"requests": {"cpu": "1"}}}], "overhead": {"cpu": "250m", "memory": "120Mi"}},
         Amounts(1250, 120 << 20, 1)),
        # limits stand in for missing requests (API defaulting), extended resources included
        ({"containers": [{"resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}}]},
         Amounts.of(2000, 0, 1, {"nvidia.com/gpu": 1})),
        ({"containers": [{"resources": {"requests": {"ephemeral-storage": "2Gi", "hugepages-2Mi": "4Mi"}}}]},
         Amounts.of(0, 0, 1, {"ephemeral-storage": 2 * GI, "hugepages-2Mi": 4 << 20})),
        # pod-level cpu, memory and hugepages (a limit standing in for the request) replace the aggregate;
        # an extended resource at pod level is ignored
        ({"containers": [{"resources": {"requests": {"cpu": "100m", "hugepages-2Mi": "4Mi", "nvidia.com/gpu": "1"}}}],
          "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "4"}, "limits": {"hugepages-2Mi": "1Gi"}}},
         Amounts.of(1000, 0, 1, {"hugepages-2Mi": GI, "nvidia.com/gpu": 1})),
    ],
)
def test_pod_requests_are_computed_as_kube_does(spec: dict[str, Any], expected: Amounts) -> None:
    assert spec_amounts(spec) == expected


def test_resource_lists_round_trip_with_extended_resources() -> None:
    quantities = {"cpu": "5800m", "memory": "100Gi", "ephemeral-storage": "111Gi", "nvidia.com/gpu": "1", "pods": "110"}
    assert resource_list(parse_resource_list(quantities)) == quantities


# ---------------------------------------------------------------------------- host ports


@pytest.mark.parametrize(
    ("taken", "wanted", "conflict"),
    [
        ({"containerPort": 80, "hostPort": 8080}, {"containerPort": 80, "hostPort": 8080}, True),
        ({"containerPort": 80, "hostPort": 8080}, {"containerPort": 80, "hostPort": 8081}, False),
        ({"containerPort": 53, "hostPort": 53, "protocol": "UDP"}, {"containerPort": 53, "hostPort": 53}, False),
        ({"containerPort": 80, "hostPort": 80, "hostIP": "10.0.0.1"}, {"containerPort": 80, "hostPort": 80, "hostIP": "10.0.0.2"}, False),
        ({"containerPort": 80, "hostPort": 80, "hostIP": "10.0.0.1"}, {"containerPort": 80, "hostPort": 80}, True),
        ({"containerPort": 80}, {"containerPort": 80}, False),  # no hostPort, nothing taken on the node
    ],
)
def test_host_ports(taken: dict[str, Any], wanted: dict[str, Any], conflict: bool) -> None:
    cluster = Cluster(node("n"))
    cluster.put(pod(ports=[taken]), "n")
    if conflict:
        assert cluster.reasons(pod(ports=[wanted])) == {"node(s) didn't have free ports for the requested pod ports": 1}
    else:
        assert cluster.schedule(pod(ports=[wanted])) == "n"


# ---------------------------------------------------------------------------- inter-pod affinity


def _pod_terms(kind: str, key: str, match: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": match}, "topologyKey": key, **extra}]}}


def _zones() -> Cluster:
    return Cluster(node("a1", zone="z1"), node("a2", zone="z1"), node("b1", zone="z2"))


def test_anti_affinity_on_hostname_spreads_replicas_over_nodes() -> None:
    cluster = _zones()
    replica = pod(labels={"app": "web"}, affinity=_pod_terms("podAntiAffinity", HOST, {"app": "web"}))
    placed = [cluster.schedule(replica) for _ in range(3)]
    assert sorted(placed) == ["a1", "a2", "b1"]  # type: ignore[type-var]
    # A fourth replica finds the replicas' own anti-affinity on every node, which kube reports first.
    assert cluster.reasons(replica) == {"node(s) didn't satisfy existing pods anti-affinity rules": 3}


def test_anti_affinity_on_zone_leaves_one_replica_per_zone() -> None:
    cluster = _zones()
    replica = pod(labels={"app": "db"}, affinity=_pod_terms("podAntiAffinity", ZONE, {"app": "db"}))
    first, second = cluster.schedule(replica), cluster.schedule(replica)
    assert {cluster.view.by_name[n].labels[ZONE] for n in (first, second) if n} == {"z1", "z2"}
    assert cluster.schedule(replica) is None


def test_existing_pods_anti_affinity_blocks_pods_without_any_affinity() -> None:
    cluster = _zones()
    cluster.put(pod(labels={"app": "loner"}, affinity=_pod_terms("podAntiAffinity", ZONE, {"app": "noisy"})), "a1")
    assert cluster.fits(pod(labels={"app": "noisy"})) == ["b1"]
    assert cluster.fits(pod(labels={"app": "quiet"})) == ["a1", "a2", "b1"]
    assert cluster.fits(pod(labels={"app": "noisy"}, namespace="other")) == ["a1", "a2", "b1"]  # other namespace


def test_the_pods_own_anti_affinity_is_reported_as_such() -> None:
    cluster = Cluster(node("a1"))
    cluster.put(pod(labels={"app": "noisy"}), "a1")
    needs = pod(labels={"app": "loner"}, affinity=_pod_terms("podAntiAffinity", HOST, {"app": "noisy"}))
    assert cluster.reasons(needs) == {"node(s) didn't match pod anti-affinity rules": 1}


def test_affinity_follows_the_matching_pods_domain() -> None:
    cluster = _zones()
    cache = pod(labels={"app": "cache"}, affinity=_pod_terms("podAffinity", ZONE, {"app": "api"}))
    assert cluster.reasons(cache) == {"node(s) didn't match pod affinity rules": 3}  # no api pod yet
    cluster.put(pod(labels={"app": "api"}), "b1")
    assert cluster.fits(cache) == ["b1"]
    same_node = pod(labels={"app": "sidecar"}, affinity=_pod_terms("podAffinity", HOST, {"app": "api"}))
    assert cluster.fits(same_node) == ["b1"]


def test_the_first_pod_of_a_self_affine_group_may_go_anywhere() -> None:
    cluster = _zones()
    member = pod(labels={"app": "gang"}, affinity=_pod_terms("podAffinity", ZONE, {"app": "gang"}))
    first = cluster.schedule(member)
    zone = cluster.view.by_name[first or ""].labels[ZONE]
    assert all(cluster.view.by_name[cluster.schedule(member) or ""].labels[ZONE] == zone for _ in range(3))


@pytest.mark.parametrize(
    ("term_extra", "blocked"),
    [
        ({}, False),  # the term covers the owner's own namespace only
        ({"namespaces": ["other"]}, True),
        ({"namespaceSelector": {"matchLabels": {"team": "b"}}}, True),
        ({"namespaceSelector": {}}, True),  # an empty namespace selector means every namespace
    ],
)
def test_affinity_terms_namespaces(term_extra: dict[str, Any], blocked: bool) -> None:
    cluster = Cluster(node("a1"))
    cluster.put(pod(labels={"app": "x"}, namespace="other"), "a1")
    needs = pod(labels={"app": "y"}, affinity=_pod_terms("podAntiAffinity", HOST, {"app": "x"}, **term_extra))
    assert (cluster.fits(needs) == []) is blocked


# ---------------------------------------------------------------------------- topology spread


def _spread(max_skew: int = 1, key: str = ZONE, **extra: Any) -> list[dict[str, Any]]:
    return [{"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "s"}}, **extra}]


def test_spread_keeps_zones_within_max_skew() -> None:
    cluster = Cluster(node("a", zone="z1", cpu="64"), node("b", zone="z2"), node("c", zone="z3"))
    member = pod(labels={"app": "s"}, topologySpreadConstraints=_spread())
    placed = Counter(cluster.view.by_name[cluster.schedule(member) or ""].labels[ZONE] for _ in range(6))
    assert placed == {"z1": 2, "z2": 2, "z3": 2}  # without it, most-allocated scoring packs z2 then z3


def test_spread_refuses_a_skew_beyond_max_and_says_so() -> None:
    cluster = Cluster(node("a", zone="z1"), node("b", zone="z2", cpu="1"))
    cluster.put(pod(labels={"app": "s"}), "a")
    cluster.put(pod(labels={"app": "s"}, cpu="1"), "b")
    cluster.put(pod(labels={"app": "s"}), "a")  # z1: 2, z2: 1 (and z2 is full)
    member = pod(labels={"app": "s"}, topologySpreadConstraints=_spread())
    assert cluster.reasons(member) == {"node(s) didn't match pod topology spread constraints": 1, "Insufficient cpu": 1}
    assert cluster.schedule(pod(labels={"app": "s"}, topologySpreadConstraints=_spread(max_skew=2))) == "a"


def test_spread_needs_the_topology_label_and_ignores_terminating_pods() -> None:
    unlabelled = node("x")
    unlabelled.labels = {HOST: "x"}
    cluster = Cluster(node("a", zone="z1"), node("b", zone="z2"), unlabelled)
    cluster.put(pod(labels={"app": "s"}), "a", terminating=True)
    member = pod(labels={"app": "s"}, topologySpreadConstraints=_spread())
    assert cluster.view.filter_reasons(member, unlabelled) == [
        "node(s) didn't match pod topology spread constraints (missing required label)"]
    assert cluster.fits(member) == ["a", "b"]


def test_spread_counts_only_domains_the_pod_could_use() -> None:
    # nodeAffinityPolicy Honor (the default): z2 is not eligible, so its emptiness does not hold z1 back.
    cluster = Cluster(node("a", zone="z1", labels={"pool": "p"}), node("b", zone="z2"))
    cluster.put(pod(labels={"app": "s"}), "a")
    honor = pod(labels={"app": "s"}, nodeSelector={"pool": "p"}, topologySpreadConstraints=_spread())
    assert cluster.fits(honor) == ["a"]
    ignore = pod(labels={"app": "s"}, nodeSelector={"pool": "p"},
                 topologySpreadConstraints=_spread(nodeAffinityPolicy="Ignore"))
    assert cluster.fits(ignore) == []


def test_min_domains_treats_missing_domains_as_empty() -> None:
    cluster = Cluster(node("a", zone="z1"), node("b", zone="z2"))
    cluster.put(pod(labels={"app": "s"}), "a")
    cluster.put(pod(labels={"app": "s"}), "b")
    assert cluster.fits(pod(labels={"app": "s"}, topologySpreadConstraints=_spread())) == ["a", "b"]
    assert cluster.fits(pod(labels={"app": "s"}, topologySpreadConstraints=_spread(minDomains=3))) == []


def test_schedule_anyway_constraints_do_not_filter() -> None:
    cluster = Cluster(node("a", zone="z1"), node("b", zone="z2", cpu="1"))
    for _ in range(3):
        cluster.put(pod(labels={"app": "s"}), "a")
    soft = pod(labels={"app": "s"}, topologySpreadConstraints=_spread(whenUnsatisfiable="ScheduleAnyway"))
    assert cluster.schedule(soft) == "a"


# ---------------------------------------------------------------------------- messages and validation


def test_the_message_lists_each_reason_with_its_node_count_sorted_as_kube_does() -> None:
    cluster = Cluster(node("a"), node("b"), node("g1", taints=(GPU_TAINT,)), node("g2", taints=(GPU_TAINT,)),
                      node("c", labels={"x": "y"}, cpu="2"))
    chosen, reasons = cluster.view.choose(pod(cpu="200"))
    assert chosen is None
    assert unschedulable_message(5, reasons) == (
        "0/5 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: true}, 3 Insufficient cpu. "
        "preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
    )
    assert unschedulable_message(0, Counter()) == "no nodes available to schedule pods"


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"affinity": _affinity({"key": "k", "operator": "Near", "values": ["x"]})},
         "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator"),
        ({"affinity": _affinity({"key": "k", "operator": "Gt", "values": ["x"]})},
         "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]"),
        ({"affinity": _affinity({"key": "k", "operator": "In"})},
         "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values"),
        ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}},
         "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey"),
        ({"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 101, "podAffinityTerm": {}}]}}},
         "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"),
        ({"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]},
         "spec.topologySpreadConstraints[0].maxSkew"),
        ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "Maybe"}]},
         "spec.topologySpreadConstraints[0].whenUnsatisfiable"),
        ({"tolerations": [{"operator": "Equal", "value": "x"}]}, "spec.tolerations[0].operator"),
        ({"containers": [{"name": "c", "ports": [{"containerPort": 1, "hostPort": 70000}]}]},
         "spec.containers[0].ports[0].hostPort"),
        ({"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "0.5"}}}]},
         "spec.containers[0].resources.requests.nvidia.com/gpu"),
    ],
)
def test_invalid_specs_name_the_field(spec: dict[str, Any], path: str) -> None:
    body = {"containers": [{"name": "c"}], **spec}
    with pytest.raises(SpecError) as caught:
        parse_pod({"metadata": {"name": "p", "namespace": "default"}, "spec": body})
    assert caught.value.path == path
