"""Observe against the sandbox: the resource SKUs API is read only for groups that need a VM-size template."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared.adapters.compute import VmssCompute
from shared.adapters.kubernetes import KubernetesCluster
from shared.domain import ClusterSnapshot, VmSizeCapacity
from shared.engine.vm_sizes import allocatable_for_capacity
from shared.services.observe import observe
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory
from tests.shared.adapters import sandbox_world

GIB = 1024**3
EMPTY = "rg-two/pool-b"  # starts with no instance and carries no resource tags


def _world(*, pool_b_nodes: int = 0, **changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(sandbox_world.scenario(**changes))
    next(g for g in doc["node_groups"] if g["name"] == "pool-b")["initial"] = pool_b_nodes
    return doc


class Observer:
    def __init__(self, server: SandboxServer) -> None:
        settings = sandbox_world.settings_for(server)
        self.server = server
        self.compute = VmssCompute.from_settings(settings)
        self.cluster = KubernetesCluster.from_settings(settings)
        self.ports: Any = SimpleNamespace(provider=self.compute, cluster=self.cluster)

    def observe(self) -> ClusterSnapshot:
        return observe(self.ports, now=self.server.clock.now())

    def sku_calls(self) -> int:
        return int(self.server.world.report()["api_calls"]["breakdown"]["arm"].get("LIST skus", 0))

    def close(self) -> None:
        self.compute.close()
        self.cluster.close()


@pytest.fixture
def observer_for(sandbox_factory: SandboxFactory) -> Iterator[Any]:
    made: list[Observer] = []

    def make(doc: dict[str, Any]) -> Observer:
        made.append(Observer(sandbox_factory(doc, clock=ManualClock(SANDBOX_START))))
        return made[-1]

    yield make
    for observer in made:
        observer.close()


def test_a_cluster_whose_groups_all_have_nodes_makes_no_sku_call(observer_for: Any) -> None:
    observer = observer_for(_world(pool_b_nodes=1))
    for _ in range(2):
        snapshot = observer.observe()
        assert {t.source for t in snapshot.templates.values()} == {"live-node"}
        assert snapshot.vm_sizes == {}
    assert observer.sku_calls() == 0


def test_an_empty_group_is_sized_from_the_skus_api_listed_once(observer_for: Any) -> None:
    observer = observer_for(_world())
    snapshot = observer.observe()
    template = snapshot.templates[EMPTY]
    assert template.source == "vm-size:skus-api"
    # The sandbox describes Standard_D2s_v5 by what its nodes report: 2 vCPUs, 6 GiB.
    assert snapshot.vm_sizes == {"standard_d2s_v5": VmSizeCapacity("Standard_D2s_v5", 2, 6 * GIB, family="standardDSv5Family")}
    assert template.allocatable == allocatable_for_capacity(snapshot.vm_sizes["standard_d2s_v5"])
    assert snapshot.templates["rg-it/pool-a"].source == "live-node"
    observer.observe()
    assert observer.sku_calls() == 1  # cached by the adapter


def test_a_failing_skus_api_falls_back_to_the_table(observer_for: Any, caplog: pytest.LogCaptureFixture) -> None:
    observer = observer_for(_world())
    observer.server.world.inject_fault(("arm", "GET", "skus"), status=503, count=5, code="ServiceUnavailable")
    with caplog.at_level(logging.WARNING):
        snapshot = observer.observe()
    assert snapshot.templates[EMPTY].source == "vm-size:table"
    assert snapshot.vm_sizes == {}
    assert "ServiceUnavailable" in caplog.text


def test_a_restricted_size_is_reported(observer_for: Any, caplog: pytest.LogCaptureFixture) -> None:
    observer = observer_for(_world(restricted_vm_sizes=["Standard_D2s_v5"]))
    with caplog.at_level(logging.WARNING, logger="shared.services.observe"):
        snapshot = observer.observe()
    assert snapshot.templates[EMPTY].source == "vm-size:skus-api"
    assert f"scale set {EMPTY}: VM size Standard_D2s_v5 is not available" in caplog.text
    assert "NotAvailableForSubscription" in caplog.text


def test_the_snapshot_carries_the_daemonset_objects(observer_for: Any) -> None:
    doc = _world(daemonsets=[
        {"name": "kube-proxy", "requests": {"cpu": "100m", "memory": "128Mi"}},
        {"name": "b-agent", "requests": {"cpu": "1", "memory": "1Gi"}, "node_selector": {"agentpool": "pool-b"}},
    ])
    snapshot = observer_for(doc).observe()
    assert {d.key: dict(d.node_selector) for d in snapshot.daemonsets} == {
        "kube-system/kube-proxy": {}, "kube-system/b-agent": {"agentpool": "pool-b"},
    }


def test_scale_from_zero_sizes_reads_every_lanes_size_once_per_location() -> None:
    """A multi-size set's lanes without a live node are each sized by their own size, the set's resource tags
    notwithstanding; the SKUs are listed once for the location."""
    from shared.domain import NodeGroup
    from shared.services.observe import scale_from_zero_sizes

    tags = {"k8s.io_cluster-autoscaler_node-template_resources_cpu": "4",
            "k8s.io_cluster-autoscaler_node-template_resources_memory": "16Gi"}
    sizes = ("Standard_D2s_v5", "Standard_D8s_v5", "Standard_D32s_v5")
    lanes = [NodeGroup("rg", "mix", 0, 10, 0, s, tags=tags, location="westeurope", lane=s, lanes=sizes) for s in sizes]
    listed = [VmSizeCapacity(s, int(s.split("_")[1][1:-1]), 4 * int(s.split("_")[1][1:-1]) * 1024**3) for s in sizes]
    calls: list[str] = []

    class Skus:
        def list_vm_sizes(self, location: str) -> list[VmSizeCapacity]:
            calls.append(location)
            return listed

    found = scale_from_zero_sizes(Skus(), lanes, [])  # type: ignore[arg-type]
    assert calls == ["westeurope"]
    assert set(found) == {s.lower() for s in sizes}
