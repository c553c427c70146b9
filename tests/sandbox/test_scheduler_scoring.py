"""kube-scheduler's scoring in the sandbox: MostAllocated (weight 1), preferred node affinity (NodeAffinity,
weight 2) and PreferNoSchedule taints (TaintToleration, weight 3), each normalised over the feasible nodes."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.domain import Taint, Toleration
from sandbox.model.podspec import PodNeeds, SpecError, parse_pod
from sandbox.model.resources import Amounts, parse_resource_list
from sandbox.world import World
from sandbox.world.scheduling import ClusterView, NodeSlot, default_normalize, preferred_affinity_score
from tests.sandbox.helpers import RG, scenario

VIRTUAL_TAINT = Taint("virtual-kubelet.io/provider", "azure", "NoSchedule")
VIRTUAL_TOLERATION = {"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}
SPOT_TAINT = Taint("kubernetes.azure.com/scalesetpriority", "spot", "PreferNoSchedule")
NOT_VIRTUAL = {"matchExpressions": [{"key": "type", "operator": "NotIn", "values": ["virtual-kubelet"]}]}
GOLD = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}
ZONE_1 = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["1"]}]}
TIERED = [{"weight": 10, "preference": GOLD}, {"weight": 30, "preference": ZONE_1}]
PREFER_VMS = [{"weight": 100, "preference": NOT_VIRTUAL}]


def node(name: str, *, cpu: str = "4", used_cpu: int = 0, labels: dict[str, str] | None = None,
         taints: tuple[Taint, ...] = ()) -> NodeSlot:
    return NodeSlot(
        name=name, labels={"kubernetes.io/hostname": name, **(labels or {})}, taints=taints,
        allocatable=parse_resource_list({"cpu": cpu, "memory": "16Gi", "pods": "110"}),
        used=Amounts.of(used_cpu, 0, 0), ready=True, unschedulable=False,
    )


def virtual_node(used_cpu: int = 0) -> NodeSlot:
    """A virtual-kubelet node as ACI's connector registers it: huge, labelled and tainted."""
    return NodeSlot(
        name="virtual-node-aci-linux", labels={"type": "virtual-kubelet", "kubernetes.io/role": "agent"},
        taints=(VIRTUAL_TAINT,), allocatable=parse_resource_list({"cpu": "10k", "memory": "4Ti", "pods": "5k"}),
        used=Amounts.of(used_cpu, 0, 0), ready=True, unschedulable=False,
    )


def pod(*, preferred: list[dict[str, Any]] | None = None, tolerations: list[dict[str, Any]] | None = None,
        cpu: str = "1") -> PodNeeds:
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
                            "tolerations": tolerations or []}
    if preferred is not None:
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}
    return parse_pod({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})


def choose(nodes: list[NodeSlot], needs: PodNeeds) -> str | None:
    chosen, _ = ClusterView(nodes).choose(needs)
    return None if chosen is None else chosen.name


def fits(view: ClusterView, needs: PodNeeds, slot: NodeSlot) -> bool:
    return not view.filter_reasons(needs, slot)


# ---------------------------------------------------------------------------- the pieces


@pytest.mark.parametrize(
    ("raw", "reverse", "normalised"),
    [
        ([10, 30, 40, 0], False, [25, 75, 100, 0]),
        ([1, 3], False, [33, 100]),  # integer division, as in Go
        ([0, 0, 0], False, [0, 0, 0]),  # nothing matched: no node gains
        ([0, 1, 2], True, [100, 50, 0]),  # reversed: the fewest untolerated taints score highest
        ([0, 0], True, [100, 100]),
        ([], False, []),
    ],
)
def test_default_normalize_is_kubes(raw: list[int], reverse: bool, normalised: list[int]) -> None:
    assert default_normalize(raw, reverse=reverse) == normalised


@pytest.mark.parametrize(
    ("labels", "weight"),
    [
        ({}, 0),
        ({"tier": "gold"}, 10),
        ({"zone": "1"}, 30),
        ({"tier": "gold", "zone": "1"}, 40),  # every matching term adds its weight
        ({"tier": "silver", "zone": "2"}, 0),
    ],
)
def test_the_affinity_score_sums_the_weights_of_the_matching_terms(labels: dict[str, str], weight: int) -> None:
    needs = pod(preferred=[*TIERED, {"weight": 50, "preference": {}}])  # an empty preference matches no node
    assert preferred_affinity_score(needs, node("n", labels=labels)) == weight


# ---------------------------------------------------------------------------- choosing


@pytest.mark.parametrize(
    ("nodes", "needs", "chosen", "by_fit_alone"),
    [
        pytest.param(  # the VM is fuller anyway: MostAllocated and the preference agree
            [node("vm", used_cpu=3000), virtual_node()], pod(preferred=PREFER_VMS, tolerations=[VIRTUAL_TOLERATION]),
            "vm", "vm", id="preferred-vm-over-a-much-emptier-virtual-node",
        ),
        pytest.param(  # a nearly full virtual node would win on MostAllocated: the preference outweighs it
            [node("vm"), virtual_node(used_cpu=9_999_000)],
            pod(preferred=PREFER_VMS, tolerations=[VIRTUAL_TOLERATION]), "vm", "virtual-node-aci-linux",
            id="preferred-vm-over-a-fuller-virtual-node",
        ),
        pytest.param(
            [node("vm", used_cpu=3500), virtual_node()], pod(preferred=PREFER_VMS, tolerations=[VIRTUAL_TOLERATION]),
            "virtual-node-aci-linux", "virtual-node-aci-linux", id="overflow-when-the-vm-is-full",
        ),
        pytest.param(
            [node("vm"), virtual_node()], pod(preferred=PREFER_VMS), "vm", "vm",
            id="no-toleration-no-virtual-node",
        ),
        pytest.param(  # raw 10, 30, 40 and 0 normalise to 25, 75, 100 and 0: twice that outweighs the fullest node
            [node("a", labels={"tier": "gold"}), node("b", labels={"zone": "1"}),
             node("c", labels={"tier": "gold", "zone": "1"}), node("d", used_cpu=2900)],
            pod(preferred=TIERED),
            "c", "d", id="weights-sum-across-terms",
        ),
        pytest.param(  # c would win on affinity, but does not fit: the best of the rest
            [node("b", labels={"zone": "1"}), node("c", labels={"tier": "gold", "zone": "1"}, used_cpu=3500),
             node("d", used_cpu=2900)],
            pod(preferred=TIERED),
            "b", "d", id="only-feasible-nodes-are-scored",
        ),
        pytest.param(
            [node("a", used_cpu=2000), node("b", used_cpu=1000)],
            pod(preferred=[{"weight": 100, "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}}]),
            "a", "a", id="no-node-matches-any-term-falls-back-to-most-allocated",
        ),
        pytest.param(
            [node("spot", used_cpu=2000, taints=(SPOT_TAINT,)), node("regular")], pod(), "regular", "spot",
            id="prefer-no-schedule-avoided-when-another-node-fits",
        ),
        pytest.param(
            [node("spot", used_cpu=2000, taints=(SPOT_TAINT,)), node("regular", used_cpu=3500)], pod(), "spot", "spot",
            id="prefer-no-schedule-used-when-no-other-node-fits",
        ),
        pytest.param(
            [node("spot", used_cpu=2000, taints=(SPOT_TAINT,)), node("regular")],
            pod(tolerations=[{"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot",
                              "effect": "PreferNoSchedule"}]),
            "spot", "spot", id="a-tolerating-pod-is-not-penalised",
        ),
        pytest.param(
            [node("spot", used_cpu=2000, taints=(SPOT_TAINT,)), node("regular")], pod(tolerations=[{"operator": "Exists"}]),
            "spot", "spot", id="an-empty-effect-tolerates-prefer-no-schedule-too",
        ),
        pytest.param(  # 3 x 100 for the taint outweighs 2 x 100 for the preference
            [node("spot", used_cpu=1000, labels={"tier": "gold"}, taints=(SPOT_TAINT,)), node("regular")],
            pod(preferred=[{"weight": 100, "preference": GOLD}]),
            "regular", "spot", id="taint-toleration-outweighs-node-affinity",
        ),
    ],
)
def test_the_scheduler_picks_the_best_total_score(
    nodes: list[NodeSlot], needs: PodNeeds, chosen: str, by_fit_alone: str
) -> None:
    assert choose(nodes, needs) == chosen
    # What MostAllocated alone picks, the preferences taken away and every PreferNoSchedule taint tolerated:
    # where the two differ, the row shows the new scores deciding.
    bare = replace(needs, preferred_node_affinity=(),
                   tolerations=(*needs.tolerations, Toleration(operator="Exists", effect="PreferNoSchedule")))
    assert choose(nodes, bare) == by_fit_alone


def test_pods_overflow_to_the_virtual_node_exactly_when_no_vm_fits() -> None:
    """A virtual node that MostAllocated alone would fill first, two VMs and pods of mixed sizes."""
    vms = [node("vm-a", cpu="4"), node("vm-b", cpu="2")]
    virtual = virtual_node(used_cpu=9_990_000)
    view = ClusterView([*vms, virtual])
    placed_on_virtual = 0
    for cpu in ("1", "1500m", "1", "500m", "2", "1", "250m", "1", "1", "750m"):
        needs = pod(preferred=PREFER_VMS, tolerations=[VIRTUAL_TOLERATION], cpu=cpu)
        a_vm_fits = any(fits(view, needs, vm) for vm in vms)
        chosen, _ = view.choose(needs)
        assert chosen is not None
        assert (chosen is virtual) == (not a_vm_fits), f"{cpu} went to {chosen.name}"
        placed_on_virtual += chosen is virtual
        view.place(needs, chosen)
    assert placed_on_virtual > 0  # the run did overflow: both sides of the invariant were exercised
    assert all(vm.used.cpu_milli > vm.allocatable.cpu_milli - 250 for vm in vms)  # the VMs were filled first


def test_the_world_schedules_with_the_scores() -> None:
    """A ReplicaSet preferring VMs, on a VM, a smaller VM tainted PreferNoSchedule and a virtual node.

    MostAllocated alone would fill the small VM first. With the scores the plain VM fills first (its three
    free CPUs), then the virtual node: an untolerated PreferNoSchedule taint costs 3 x 100, more than the
    2 x 100 the preference is worth, so the tainted VM stays empty."""
    doc = scenario(workloads=[{
        "name": "web", "kind": "ReplicaSet", "count": 6, "requests": {"cpu": "1", "memory": "1Gi"},
        "tolerations": [VIRTUAL_TOLERATION],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": PREFER_VMS}},
    }])
    doc["node_groups"] += [
        {"resource_group": RG, "name": "virtual", "vm_size": "Standard_D4s_v5",
         "allocatable": {"cpu": "10000", "memory": "4Ti", "pods": 5000}, "min": 1, "max": 1, "initial": 1,
         "labels": {"type": "virtual-kubelet"}, "taints": [{"key": "virtual-kubelet.io/provider", "value": "azure"}]},
        {"resource_group": RG, "name": "small", "vm_size": "Standard_D2s_v5",
         "allocatable": {"cpu": "2", "memory": "8Gi"}, "min": 1, "max": 1, "initial": 1,
         "labels": {"pool": "small"}, "taints": [{"key": "example.com/avoid", "effect": "PreferNoSchedule"}]},
    ]
    world = World(doc, seed=0, start=datetime(2030, 1, 7, 9, 0, tzinfo=UTC))
    pools = {n["metadata"]["name"]: n["metadata"]["labels"].get("type") or n["metadata"]["labels"]["pool"]
             for n in world.k8s_list("nodes")}
    placed = Counter(pools[p["spec"]["nodeName"]] for p in world.k8s_list("pods", "default"))
    assert placed == {"a": 3, "virtual-kubelet": 3}


# ---------------------------------------------------------------------------- parsing


def test_preferred_terms_are_kept_with_their_weights() -> None:
    needs = pod(preferred=[*PREFER_VMS, {"weight": 1, "preference": {"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["vm"]}]}}])
    assert [w for w, _ in needs.preferred_node_affinity] == [100, 1]
    assert [term.matches("vm", {}) for _, term in needs.preferred_node_affinity] == [True, True]
    assert [term.matches("x", {"type": "virtual-kubelet"}) for _, term in needs.preferred_node_affinity] == [False, False]


PREF = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"


@pytest.mark.parametrize(
    ("preferred", "path", "problem"),
    [
        ([{"weight": 0, "preference": NOT_VIRTUAL}], f"{PREF}[0].weight", "must be at least 1"),
        ([{"weight": 101, "preference": NOT_VIRTUAL}], f"{PREF}[0].weight", "must be at most 100"),
        ([{"weight": "5", "preference": NOT_VIRTUAL}], f"{PREF}[0].weight", "must be a whole number"),
        ([{"preference": NOT_VIRTUAL}], f"{PREF}[0].weight", "must be a whole number"),
        ([*PREFER_VMS, {"weight": 5}], f"{PREF}[1].preference", "required field is missing"),
        ([{"weight": 5, "preference": {"matchExpressions": [{"key": "k", "operator": "Near", "values": ["x"]}]}}],
         f"{PREF}[0].preference.matchExpressions[0].operator", "must be one of"),
        ([{"weight": 5, "preference": {"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}]}}],
         f"{PREF}[0].preference.matchFields[0].key", "only metadata.name"),
        ({"weight": 5}, PREF, "must be a list"),
    ],
)
def test_bad_preferred_terms_name_the_field(preferred: Any, path: str, problem: str) -> None:
    with pytest.raises(SpecError) as caught:
        pod(preferred=preferred)
    assert caught.value.path == path
    assert problem in caught.value.problem
