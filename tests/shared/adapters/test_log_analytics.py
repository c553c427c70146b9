"""LogAnalyticsUsage: node CPU from Container Insights through LogsQueryClient, over TLS against the sandbox's double."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError, ServiceRequestError
from azure.monitor.query import LogsQueryPartialResult, LogsQueryResult, LogsTable

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared.adapters import log_analytics
from shared.adapters.credentials import StaticTokenCredential
from shared.adapters.log_analytics import QUERY_MARKER, LogAnalyticsUsage, node_cpu_query
from shared.context import build_context
from shared.domain import Node, Resources
from shared.ports import UsageUnavailable
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory
from tests.shared.adapters.sandbox_world import settings_for
from tests.shared.adapters.usage_world import B0, EXPECTED, N0, N1, WINDOW, usage_nodes, usage_scenario

@pytest.fixture
def server(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(usage_scenario(), clock=ManualClock(SANDBOX_START))


@pytest.fixture
def nodes(server: SandboxServer) -> list[Node]:
    return usage_nodes(server)


@pytest.fixture
def source(server: SandboxServer) -> Iterator[LogAnalyticsUsage]:
    usage = LogAnalyticsUsage.from_settings(settings_for(server))
    yield usage
    usage.close()


def queries(server: SandboxServer) -> int:
    return int(server.world.report()["api_calls"]["loganalytics_queries"])


def test_usage_per_node_is_what_the_pods_on_it_use_over_its_capacity(
    server: SandboxServer, nodes: list[Node], source: LogAnalyticsUsage
) -> None:
    usage = source.get_node_cpu_usage(nodes, window=WINDOW, now=server.clock.now())
    assert usage == pytest.approx(EXPECTED)
    expected = {name: cpu.fraction for name, cpu in server.world.node_cpu().items()}
    assert usage == pytest.approx(expected)
    assert source.name == "log-analytics" and queries(server) == 1


def test_only_the_nodes_asked_about_and_measured_are_answered(
    server: SandboxServer, nodes: list[Node], source: LogAnalyticsUsage
) -> None:
    stranger = Node(name="not-in-this-cluster", allocatable=Resources(), created_at=SANDBOX_START)
    (n1,) = [n for n in nodes if n.name == N1]
    assert source.get_node_cpu_usage([n1, stranger], window=WINDOW, now=server.clock.now()).keys() == {N1}
    assert source.get_node_cpu_usage([], window=WINDOW, now=server.clock.now()) == {}
    assert queries(server) == 1  # nothing to ask, nothing asked


def test_a_name_that_is_no_node_name_never_reaches_the_query(
    server: SandboxServer, nodes: list[Node], source: LogAnalyticsUsage, caplog: pytest.LogCaptureFixture
) -> None:
    injection = Node(name='x"]); Perf | take 1 //', allocatable=Resources(), created_at=SANDBOX_START)
    with caplog.at_level(logging.WARNING, logger="shared.adapters.log_analytics"):
        usage = source.get_node_cpu_usage([*nodes, injection], window=WINDOW, now=server.clock.now())
    assert set(usage) == {N0, N1, B0}
    assert "is not a Kubernetes node name" in caplog.text


def test_many_nodes_are_asked_about_in_several_queries(
    server: SandboxServer, nodes: list[Node], source: LogAnalyticsUsage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_analytics, "MAX_NODES_PER_QUERY", 2)
    usage = source.get_node_cpu_usage(nodes, window=WINDOW, now=server.clock.now())
    assert set(usage) == {N0, N1, B0} and queries(server) == 2


def test_a_lasting_failure_is_usage_unavailable_naming_the_workspace(
    server: SandboxServer, nodes: list[Node], source: LogAnalyticsUsage
) -> None:
    server.world.inject_fault(["loganalytics", "POST", "query"], status=500, count=2)  # the retry fails too
    with pytest.raises(UsageUnavailable) as raised:
        source.get_node_cpu_usage(nodes, window=WINDOW, now=server.clock.now())
    assert f"workspace {server.world.workspace_id}" in str(raised.value) and "HTTP 500" in str(raised.value)
    assert isinstance(raised.value.__cause__, HttpResponseError)
    assert queries(server) == 2


def test_a_transient_failure_is_retried(server: SandboxServer, nodes: list[Node], source: LogAnalyticsUsage) -> None:
    server.world.inject_fault(["loganalytics", "POST", "query"], status=503)
    assert len(source.get_node_cpu_usage(nodes, window=WINDOW, now=server.clock.now())) == 3


def test_throttling_is_not_waited_out(server: SandboxServer, nodes: list[Node], source: LogAnalyticsUsage) -> None:
    server.world.inject_fault(["loganalytics", "POST", "query"], status=429, retry_after=120)
    with pytest.raises(UsageUnavailable, match="HTTP 429"):
        source.get_node_cpu_usage(nodes, window=WINDOW, now=server.clock.now())
    assert queries(server) == 1


@pytest.mark.parametrize(("change", "message"), [
    ({"log_analytics_workspace_id": "00000000-0000-0000-0000-000000000000"}, "WorkspaceNotFoundError"),
    ({"log_analytics_endpoint": "https://127.0.0.1:1"}, "ServiceRequestError"),
], ids=["unknown workspace", "unreachable"])
def test_a_misconfigured_source_is_usage_unavailable(
    server: SandboxServer, nodes: list[Node], change: dict[str, str], message: str
) -> None:
    usage = LogAnalyticsUsage.from_settings(dataclasses.replace(settings_for(server), **change))
    with pytest.raises(UsageUnavailable, match=message):
        usage.get_node_cpu_usage(nodes, window=WINDOW, now=server.clock.now())


def test_a_refused_token_is_usage_unavailable(server: SandboxServer, nodes: list[Node]) -> None:
    usage = LogAnalyticsUsage.from_settings(settings_for(server), credential=StaticTokenCredential("not-the-token"))
    with pytest.raises(UsageUnavailable, match="HTTP 401"):
        usage.get_node_cpu_usage(nodes, window=WINDOW, now=server.clock.now())


def test_an_endpoint_given_with_its_api_version_keeps_its_path(server: SandboxServer, nodes: list[Node]) -> None:
    settings = settings_for(server, LOG_ANALYTICS_ENDPOINT=f"{server.url}/loganalytics/v1/")
    usage = LogAnalyticsUsage.from_settings(settings).get_node_cpu_usage(nodes, window=WINDOW, now=server.clock.now())
    assert set(usage) == {N0, N1, B0}


def test_the_composition_root_builds_the_source_the_setting_names(server: SandboxServer) -> None:
    env = {**server.env(), "AzureWebJobsStorage": "UseDevelopmentStorage=true"}
    assert isinstance(build_context(env).ports.usage, LogAnalyticsUsage)
    assert build_context({**env, "USAGE_SOURCE": "none"}).ports.usage is None


# --- without a server ---------------------------------------------------------------------------------


def test_the_query_reads_container_insights_node_counters() -> None:
    text = node_cpu_query(["aks-a-1", "aks-a-2"])
    assert text.splitlines()[0] == QUERY_MARKER
    assert 'let nodes = dynamic(["aks-a-1", "aks-a-2"]);' in text
    for part in ('ObjectName == "K8SNode"', 'CounterName == "cpuUsageNanoCores"', 'CounterName == "cpuCapacityNanoCores"',
                 "Computer in~ (nodes)", "avg(CounterValue)", "project Computer, UsageNanoCores, CapacityNanoCores"):
        assert part in text


class FakeClient:
    def __init__(self, result: Any) -> None:
        self.result = result
        self.calls: list[tuple[str, str, Any]] = []

    def query_workspace(self, workspace_id: str, query: str, *, timespan: Any, **kwargs: Any) -> Any:
        self.calls.append((workspace_id, query, timespan))
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def table(*rows: list[Any], columns: tuple[str, ...] = ("Computer", "UsageNanoCores", "CapacityNanoCores")) -> LogsTable:
    return LogsTable(name="PrimaryResult", columns=list(columns), columns_types=["string", "real", "real"], rows=list(rows))


def node(name: str) -> Node:
    return Node(name=name, allocatable=Resources(), created_at=SANDBOX_START)


def test_rows_become_clamped_fractions_by_node_name_and_the_timespan_is_the_window() -> None:
    rows = [["AKS-A-1", 2e9, 4e9], ["aks-a-2", 4.4e9, 4e9], ["aks-a-3", 1e9, 0], ["someone-else", 1e9, 4e9]]
    client = FakeClient(LogsQueryResult(tables=[table(*rows)]))
    now = datetime(2030, 1, 7, 9, 0, tzinfo=SANDBOX_START.tzinfo)
    usage = LogAnalyticsUsage(client, workspace_id="w")  # type: ignore[arg-type]
    answer = usage.get_node_cpu_usage([node("aks-a-1"), node("aks-a-2"), node("aks-a-3")], window=WINDOW, now=now)
    assert answer == {"aks-a-1": 0.5, "aks-a-2": 1.0}  # no capacity, no share; others' nodes ignored
    assert client.calls[0][2] == (now - WINDOW, now)


def test_partial_results_are_used_and_said_so(caplog: pytest.LogCaptureFixture) -> None:
    partial = LogsQueryPartialResult(partial_data=[table(["aks-a-1", 1e9, 4e9])],
                                     partial_error=HttpResponseError(message="query limits exceeded"))
    usage = LogAnalyticsUsage(FakeClient(partial), workspace_id="w")  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="shared.adapters.log_analytics"):
        assert usage.get_node_cpu_usage([node("aks-a-1")], window=WINDOW, now=SANDBOX_START) == {"aks-a-1": 0.25}
    assert "partial data" in caplog.text


def test_an_unexpected_answer_or_a_connection_error_is_usage_unavailable() -> None:
    odd = LogsQueryResult(tables=[table(["aks-a-1", 1.0], columns=("Computer", "Value"))])
    with pytest.raises(UsageUnavailable, match="columns"):
        LogAnalyticsUsage(FakeClient(odd), workspace_id="w").get_node_cpu_usage(  # type: ignore[arg-type]
            [node("aks-a-1")], window=WINDOW, now=SANDBOX_START)
    with pytest.raises(UsageUnavailable, match="ServiceRequestError: down") as raised:
        LogAnalyticsUsage(FakeClient(ServiceRequestError("down")), workspace_id="w").get_node_cpu_usage(  # type: ignore[arg-type]
            [node("aks-a-1")], window=WINDOW, now=SANDBOX_START)
    assert isinstance(raised.value.__cause__, ServiceRequestError)
