"""VmssMetricUsage: node CPU from each scale set's Percentage CPU, through azure-mgmt-monitor against the sandbox's ARM."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.mgmt.monitor.models import Response as MetricsResponse

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared.adapters.vmss_metrics import MAX_SERIES, VmssMetricUsage
from shared.context import build_context
from shared.domain import Node, Resources
from shared.ports import UsageUnavailable
from shared.settings import Settings, load_settings
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory
from tests.shared.adapters.usage_world import B0, EXPECTED, N1, RG, WINDOW, usage_nodes, usage_scenario

def settings_for(server: SandboxServer, **env: str) -> Settings:
    return load_settings({**server.env(), "USAGE_SOURCE": "vmss-metric", **env})


@pytest.fixture
def server(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(usage_scenario(), clock=ManualClock(SANDBOX_START))


@pytest.fixture
def nodes(server: SandboxServer) -> list[Node]:
    return usage_nodes(server)


@pytest.fixture
def source(server: SandboxServer) -> Iterator[VmssMetricUsage]:
    usage = VmssMetricUsage.from_settings(settings_for(server))
    yield usage
    usage.close()


def metric_calls(server: SandboxServer) -> int:
    return int(server.world.report()["api_calls"]["breakdown"]["arm"].get("GET metrics", 0))


def test_usage_per_node_is_its_instances_percentage_cpu(
    server: SandboxServer, nodes: list[Node], source: VmssMetricUsage
) -> None:
    usage = source.get_node_cpu_usage(nodes, window=WINDOW, now=server.clock.now())
    assert usage == pytest.approx(EXPECTED)
    assert source.name == "vmss-metric"
    assert metric_calls(server) == 2  # one call per scale set holding asked-about nodes


def test_only_the_asked_scale_sets_are_read_and_nodes_without_a_scale_set_are_skipped(
    server: SandboxServer, nodes: list[Node], source: VmssMetricUsage
) -> None:
    bare = Node(name="on-prem-1", allocatable=Resources(), created_at=SANDBOX_START, provider_id="kind://docker/x")
    asked = [n for n in nodes if n.name == N1] + [bare]
    assert source.get_node_cpu_usage(asked, window=WINDOW, now=server.clock.now()).keys() == {N1}
    assert metric_calls(server) == 1
    assert source.get_node_cpu_usage([bare], window=WINDOW, now=server.clock.now()) == {}
    assert metric_calls(server) == 1


def test_more_instances_than_the_apis_default_top_are_all_read(sandbox_factory: SandboxFactory) -> None:
    doc = usage_scenario()
    doc["node_groups"][0]["initial"] = 12
    server = sandbox_factory(doc, clock=ManualClock(SANDBOX_START))
    nodes = usage_nodes(server)
    usage = VmssMetricUsage.from_settings(settings_for(server)).get_node_cpu_usage(nodes, window=WINDOW, now=server.clock.now())
    assert len(usage) == 13


def test_a_new_node_is_measured_once_it_is_up(server: SandboxServer, source: VmssMetricUsage) -> None:
    world = server.world
    world.set_capacity(world.scale_set(world.subscription_id, RG, "pool-b"), 2)
    server.clock.advance(1)  # type: ignore[attr-defined]
    booting = world.instances(world.scale_set(world.subscription_id, RG, "pool-b"))[-1]
    ref = "azure:///subscriptions/{}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachineScaleSets/pool-b" \
          "/virtualMachines/{}".format(world.subscription_id, RG, booting.instance_id)
    node = Node(name=booting.computer_name, allocatable=Resources(), created_at=SANDBOX_START, provider_id=ref)
    assert source.get_node_cpu_usage([node], window=WINDOW, now=server.clock.now()) == {}  # no VM running yet
    server.clock.advance(900)  # type: ignore[attr-defined]  # the longest boot of the default distribution
    usage = source.get_node_cpu_usage([node], window=WINDOW, now=server.clock.now())
    assert usage == pytest.approx({booting.computer_name: 100 / 4000})


def test_one_failing_scale_set_leaves_the_others_measured(
    server: SandboxServer, nodes: list[Node], source: VmssMetricUsage, caplog: pytest.LogCaptureFixture
) -> None:
    server.world.inject_fault(["arm", "GET", "metrics"], status=429, retry_after=60)
    with caplog.at_level(logging.WARNING, logger="shared.adapters.vmss_metrics"):
        usage = source.get_node_cpu_usage(nodes, window=WINDOW, now=server.clock.now())
    assert usage.keys() in ({B0}, EXPECTED.keys() - {B0})  # whichever scale set was asked first was throttled
    assert "throttled by ARM, retry after 60s" in caplog.text and "go unmeasured" in caplog.text


def test_every_scale_set_failing_is_usage_unavailable(
    server: SandboxServer, nodes: list[Node], source: VmssMetricUsage
) -> None:
    server.world.inject_fault(["arm", "GET", "metrics"], status=500, count=4)  # two calls, each retried once
    with pytest.raises(UsageUnavailable, match="Percentage CPU of scale set rg-it/pool-.: HTTP 500") as raised:
        source.get_node_cpu_usage(nodes, window=WINDOW, now=server.clock.now())
    assert isinstance(raised.value.__cause__, HttpResponseError)


def test_the_composition_root_builds_it(server: SandboxServer) -> None:
    env = {**server.env(), "AzureWebJobsStorage": "UseDevelopmentStorage=true", "USAGE_SOURCE": "vmss-metric"}
    assert isinstance(build_context(env).ports.usage, VmssMetricUsage)


# --- without a server ---------------------------------------------------------------------------------


class FakeMetrics:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def list(self, resource_uri: str, **kwargs: Any) -> MetricsResponse:
        self.calls.append((resource_uri, kwargs))
        return MetricsResponse.deserialize(self.body)


class FakeClient:
    def __init__(self, body: dict[str, Any]) -> None:
        self.metrics = FakeMetrics(body)


def series(vm_name: str, *averages: float | None) -> dict[str, Any]:
    return {"metadatavalues": [{"name": {"value": "vmname"}, "value": vm_name}],
            "data": [{"timeStamp": "2030-01-07T09:00:00Z", **({} if a is None else {"average": a})} for a in averages]}


def vmss_node(name: str, instance: int) -> Node:
    provider = ("azure:///subscriptions/s/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/"
                f"Pool/virtualMachines/{instance}")
    return Node(name=name, allocatable=Resources(), created_at=SANDBOX_START, provider_id=provider)


def test_vm_names_match_the_instance_or_the_computer_name_and_averages_skip_empty_minutes() -> None:
    body = {"timespan": "x", "value": [{"name": {"value": "Percentage CPU"}, "unit": "Percent", "timeseries": [
        series("Pool_3", 10.0, None, 30.0),  # the instance name (Uniform: <scale set>_<instance id>)
        series("POOL000004", 80.0),  # the computer name, which self-managed nodes are named after
        series("Pool_5", None),  # no sample in the window yet
        series("Pool_9", 99.0),  # an instance nobody asked about
    ]}]}
    client = FakeClient(body)
    usage = VmssMetricUsage(client)  # type: ignore[arg-type]
    nodes = [vmss_node("pool000003", 3), vmss_node("pool000004", 4), vmss_node("pool000005", 5)]
    now = SANDBOX_START
    assert usage.get_node_cpu_usage(nodes, window=WINDOW, now=now) == pytest.approx({"pool000003": 0.2, "pool000004": 0.8})
    ((uri, kwargs),) = client.metrics.calls
    assert uri == "subscriptions/s/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/Pool"
    assert kwargs == {"timespan": "2030-01-07T08:50:00Z/2030-01-07T09:00:00Z", "interval": "PT1M",
                      "metricnames": "Percentage CPU", "aggregation": "Average", "filter": "VMName eq '*'",
                      "top": MAX_SERIES}


def test_nodes_mapped_by_hostname_or_ip_read_their_instance_in_the_app_s_subscription(
    server: SandboxServer, nodes: list[Node], source: VmssMetricUsage
) -> None:
    """A k3s or kubeadm node's instance carries no subscription (its providerID names none): the app's is used."""
    from dataclasses import replace as with_

    from shared.domain import parse_provider_id

    mapped = []
    for node in nodes:
        ref = node.instance
        assert ref is not None
        mapped.append(with_(node, provider_id="", mapped=True, mapped_to=with_(ref, subscription_id="")))
    assert all(parse_provider_id(n.provider_id) is None for n in mapped)
    assert source.get_node_cpu_usage(mapped, window=WINDOW, now=server.clock.now()) == pytest.approx(EXPECTED)
