"""The backfill action's evict step: it moves a pod off a virtual node only when the pod, its node, our settings
and the VM room all still say so when it runs; a PodDisruptionBudget's 429 leaves the pod where it is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from shared.actions import Backfill, encode_action, new_backfill
from shared.domain import Node, NodeGroup, Pod
from shared.ports import ClusterEvent, EvictionOutcome, Ports
from shared.services.executor import Executor
from shared.services.memory_state import MemoryStateStore
from shared.settings import load_settings
from tests.builders import T0, group, node, pod
from tests.shared.engine.test_virtual_nodes import VN, on_vn, virtual_node
from devtools.replay.memory import MemoryQueue

SETTINGS = {"CLUSTER_NAME": "c1", "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000",
            "NODE_RESOURCE_GROUPS": "rg", "KUBECONFIG_PATH": "/tmp/kubeconfig"}


class _Clock:
    def now(self):  # type: ignore[no-untyped-def]
        return T0


class _Events:
    def __init__(self) -> None:
        self.events: list[ClusterEvent] = []

    def emit(self, event: ClusterEvent) -> None:
        self.events.append(event)


class _Cluster:
    """Nodes and pods as listed, and the Eviction API's answer."""

    def __init__(self, nodes: list[Node], pods: list[Pod], *, eviction: EvictionOutcome = "evicted") -> None:
        self.nodes, self.pods, self.eviction = nodes, pods, eviction
        self.evicted: list[str] = []

    def list_nodes(self) -> list[Node]:
        return list(self.nodes)

    def list_pods(self) -> list[Pod]:
        return list(self.pods)

    def get_node(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.name == name), None)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return next((p for p in self.pods if (p.namespace, p.name) == (namespace, name)), None)

    def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> EvictionOutcome:
        self.evicted.append(f"{namespace}/{name}")
        return self.eviction

    def annotate_pod(self, namespace: str, name: str, *, annotations: Mapping[str, str | None]) -> None:
        raise AssertionError("the evict step annotates nothing")

    def list_daemonsets(self) -> list[Any]:
        return []

    def list_capacity_buffers(self) -> None:
        return None  # no CapacityBuffer CRD

    def get_pod_template(self, namespace: str, name: str, **_: Any) -> None:
        return None

    def get_scale(self, namespace: str, name: str, **_: Any) -> None:
        return None

    def list_event_times(self, reason: str) -> list[Any]:
        return []


class _Provider:
    """The one scale set `rg/pool` (ROOMY is its node) and its node's price per hour, as the pending poll reads them."""

    def __init__(self, price: float | None) -> None:
        self.price = price
        self.prices_read = 0

    def list_node_groups(self) -> list[NodeGroup]:
        return [group("pool", target=1)]

    def list_prices(self, groups: Any) -> dict[str, float]:
        self.prices_read += 1
        return {} if self.price is None else {"rg/pool": self.price}

    def list_vm_sizes(self, location: str) -> list[Any]:
        return []


def _run(cluster: _Cluster, action: Backfill, *, price: float | None = 0.192, **settings: str) -> tuple[Any, _Events]:
    events = _Events()
    ports = Ports(cluster=cluster, provider=_Provider(price), state=MemoryStateStore(),  # type: ignore[arg-type]
                  queue=MemoryQueue(_Clock()), clock=_Clock(), events=events)
    result = Executor(ports, load_settings({**SETTINGS, **settings})).execute(encode_action(action), now=T0)
    return result, events


def _action(target: Pod, *, to: str = "pool-0") -> Backfill:
    return new_backfill(node=target.node_name or VN, namespace=target.namespace, pod=target.name, uid=target.uid,
                        to=to, now=T0 - timedelta(seconds=5), ttl=timedelta(minutes=5), reason="test")


WEB = replace(on_vn("web-0"), uid="uid-web-0")
ROOMY = node("pool-0")


@pytest.mark.parametrize("nodes,pods,eviction,outcome,detail,evicted", [
    # Room on a Ready VM: evicted, its replacement goes there.
    ([virtual_node(), ROOMY], [WEB], "evicted", "succeeded", "evicted from virtual-node-aci-linux", True),
    # A PodDisruptionBudget allows nothing now: the Eviction API's 429 leaves it for a later poll.
    ([virtual_node(), ROOMY], [WEB], "blocked", "skipped", "PodDisruptionBudget allows no eviction", True),
    # The pod went away between the poll and the step.
    ([virtual_node(), ROOMY], [], "evicted", "skipped", "is gone", False),
    # The pod was re-created under the same name: not the one decided on.
    ([virtual_node(), ROOMY], [replace(WEB, uid="other")], "evicted", "skipped", "was replaced", False),
    # VM room gone before the eviction (another pod took it): nothing evicted.
    ([virtual_node(), ROOMY], [WEB, pod("taker", cpu=4, node_name="pool-0")], "evicted", "skipped",
     "no VM room", False),
    # The only VM is cordoned now.
    ([virtual_node(), replace(ROOMY, unschedulable=True)], [WEB], "evicted", "skipped", "no VM room", False),
    # Already on its way out.
    ([virtual_node(), ROOMY], [replace(WEB, terminating=True)], "evicted", "skipped", "already ending", False),
    # Scheduled elsewhere since (a VM): no longer on the virtual node.
    ([virtual_node(), ROOMY], [replace(WEB, node_name="pool-0")], "evicted", "skipped", "no longer on", False),
])
def test_the_evict_step_rechecks_the_world_before_it_evicts(nodes: list[Node], pods: list[Pod],
                                                           eviction: EvictionOutcome, outcome: str, detail: str,
                                                           evicted: bool) -> None:
    cluster = _Cluster(nodes, pods, eviction=eviction)
    result, events = _run(cluster, _action(WEB))
    assert result.outcome == outcome and detail in result.detail, result
    assert cluster.evicted == (["default/web-0"] if evicted else [])
    backfill_events = [e for e in events.events if e.reason == "Backfill"]
    assert len(backfill_events) == (1 if outcome == "succeeded" else 0)


@pytest.mark.parametrize("target,settings,why", [
    (replace(on_vn("job-0", owner="Job"), uid="u1"), {}, "batch work"),
    (replace(on_vn("render-0", labels={"workload": "render"}), uid="u2"), {"BATCH_POD_SELECTOR": "workload=render"},
     "batch work"),
    (replace(on_vn("web-1"), uid="u3"), {"VIRTUAL_NODE_BACKFILL": "false"}, "VIRTUAL_NODE_BACKFILL=false"),
    (replace(on_vn("web-2", namespace="team-a"), uid="u4"), {"VIRTUAL_NODE_BACKFILL_NAMESPACES": "team-b"},
     "not in VIRTUAL_NODE_BACKFILL_NAMESPACES"),
])
def test_our_settings_not_the_message_decide_what_may_move(target: Pod, settings: dict[str, str], why: str) -> None:
    cluster = _Cluster([virtual_node(), ROOMY], [target])
    result, _ = _run(cluster, _action(target), **settings)
    assert result.outcome == "skipped" and why in result.detail
    assert cluster.evicted == []


def test_a_message_naming_a_vm_node_is_refused_to_the_poison_queue() -> None:
    on_vm = replace(pod("web-9", node_name="pool-0"), uid="u9")
    cluster = _Cluster([virtual_node(), ROOMY], [on_vm])
    result, _ = _run(cluster, _action(on_vm))
    assert result.outcome == "rejected" and "not a virtual node" in result.detail
    assert cluster.evicted == []


def test_a_pod_aci_refused_is_moved_whatever_its_kind() -> None:
    refused = replace(on_vn("job-1", owner="Job"), uid="u10", status_reason="ProviderFailed", phase="Pending")
    cluster = _Cluster([virtual_node(), ROOMY], [refused])
    result, events = _run(cluster, _action(refused))
    assert result.outcome == "succeeded" and cluster.evicted == ["default/job-1"]
    assert "ACI had refused it" in events.events[0].message


def test_dry_run_evicts_nothing() -> None:
    cluster = _Cluster([virtual_node(), ROOMY], [WEB])
    result, _ = _run(cluster, _action(WEB), DRY_RUN="true")
    assert result.outcome == "dry-run" and cluster.evicted == []


# -- forged backfills: the poll's decision taken again ---------------------------------------------------------

COREDNS = replace(on_vn("coredns-7d9f", namespace="kube-system", owner_name="coredns-7d9f"), uid="u-dns")


@pytest.mark.parametrize("target,settings,why", [
    # The probe's attack: the cluster DNS moved off the virtual node the pending poll had decided it stays on.
    (COREDNS, {}, "a kube-system pod is never moved"),
    # Even when ACI refused it: the cluster's own add-ons are left to their operator.
    (replace(COREDNS, status_reason="ProviderFailed", phase="Pending"), {}, "a kube-system pod is never moved"),
    # Protected from scale-down by our drainability settings: protected from backfill too.
    (replace(on_vn("keep-0", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}), uid="u20"),
     {}, "safe-to-evict=false"),
    (replace(on_vn("keep-1", annotations={"karpenter.sh/do-not-disrupt": "true"}), uid="u21"), {}, "do-not-disrupt"),
    (replace(on_vn("keep-2", local_volumes=("scratch",)), uid="u22"), {}, "local storage"),
    (replace(on_vn("keep-3", owner="Workflow"), uid="u23"), {}, "SKIP_NODES_WITH_CUSTOM_CONTROLLER_PODS"),
])
def test_a_forged_backfill_of_a_protected_pod_evicts_nothing(target: Pod, settings: dict[str, str],
                                                             why: str) -> None:
    cluster = _Cluster([virtual_node(), ROOMY], [WEB, target])
    result, events = _run(cluster, _action(target), **settings)
    assert result.outcome == "skipped" and "refused" in result.detail and why in result.detail, result
    assert cluster.evicted == []
    assert [e for e in events.events if e.reason == "Backfill"] == []


@pytest.mark.parametrize("price,outcome,evicted", [
    # A VM costs more than the pod's share of ACI: the poll would leave it, so a forged backfill is refused.
    (5.0, "skipped", []),
    # A VM is cheaper: the poll would move it, and so the step does.
    (0.192, "succeeded", ["default/web-0"]),
])
def test_a_backfill_the_poll_would_not_decide_by_price_is_refused(price: float, outcome: str,
                                                                  evicted: list[str]) -> None:
    cluster = _Cluster([virtual_node(), ROOMY], [WEB])
    result, _ = _run(cluster, _action(WEB), price=price)
    assert result.outcome == outcome, result
    if outcome == "skipped":
        assert "refused" in result.detail and "ACI is as cheap" in result.detail
    assert cluster.evicted == evicted
