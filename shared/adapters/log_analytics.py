"""The `NodeUsageSource` port over Container Insights data in Log Analytics, with azure-monitor-query.

Adapter module: `get_node_cpu_usage` runs a KQL query against the workspace.

Container Insights writes, per node and once a minute, `Perf` rows with
`ObjectName == "K8SNode"`, `Computer` = the node name, and the counters
`cpuUsageNanoCores` (CPU in use) and `cpuCapacityNanoCores` (the node's cores).
The query averages usage over the window and divides by capacity; Log Analytics
restricts every table to the request's timespan, so the query names no times.
Ingestion lags by a few minutes, so the newest minutes of a window are often
missing: averages are over the samples that arrived.

The query carries the marker comment `QUERY_MARKER` on its first line; the
sandbox's Log Analytics double recognises the query by it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError, HttpResponseError
from azure.monitor.query import LogsQueryClient, LogsQueryPartialResult, LogsQueryStatus, LogsTable

from shared.adapters.compute import ThrottleAwareRetryPolicy
from shared.domain import Node
from shared.ports import UsageUnavailable
from shared.settings import Settings

__all__ = ["LogAnalyticsUsage", "QUERY_MARKER", "node_cpu_query"]

log = logging.getLogger(__name__)

QUERY_MARKER: Final = "// vmss-autoscaler: node-cpu-usage"
MAX_NODES_PER_QUERY: Final = 500  # keeps one query's text well inside the API's limits
SERVER_TIMEOUT: Final = 30  # seconds the service may spend on one query (its default is 3 minutes)

# A Kubernetes node name (a DNS subdomain). Names are checked before they go into the
# query text, so nothing but a plain string literal can ever reach KQL.
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_COLUMNS: Final = ("Computer", "UsageNanoCores", "CapacityNanoCores")


def node_cpu_query(node_names: Sequence[str]) -> str:
    """The KQL for the named nodes: one row per node with data, `Computer, UsageNanoCores, CapacityNanoCores`."""
    # JSON string literals are KQL string literals for these names (checked: no quotes, no backslashes).
    names = json.dumps(list(node_names))
    return f"""{QUERY_MARKER}
let nodes = dynamic({names});
let usage = Perf
    | where ObjectName == "K8SNode" and CounterName == "cpuUsageNanoCores" and Computer in~ (nodes)
    | summarize UsageNanoCores = avg(CounterValue) by Computer;
let capacity = Perf
    | where ObjectName == "K8SNode" and CounterName == "cpuCapacityNanoCores" and Computer in~ (nodes)
    | summarize CapacityNanoCores = max(CounterValue) by Computer;
usage
| join kind=inner capacity on Computer
| project Computer, UsageNanoCores, CapacityNanoCores"""


def _describe(exc: AzureError) -> str:
    if isinstance(exc, HttpResponseError):
        error = getattr(exc, "error", None)
        code = getattr(error, "code", None) or ""
        message = getattr(error, "message", None) or exc.message or exc.reason or ""
        return f"HTTP {exc.status_code} {code}: {message}".replace("  ", " ").strip()
    return f"{type(exc).__name__}: {exc}"


def _fractions(tables: Iterable[LogsTable], wanted: Mapping[str, str]) -> dict[str, float]:
    """Rows to {node name: usage / capacity}, clamped to 0..1 (samples jitter past capacity)."""
    found: dict[str, float] = {}
    for table in tables:
        index = {name: i for i, name in enumerate(table.columns)}
        if any(column not in index for column in _COLUMNS):
            raise UsageUnavailable(f"Log Analytics answered columns {table.columns}, not {list(_COLUMNS)}")
        for row in table.rows:
            computer, usage, capacity = (row[index[column]] for column in _COLUMNS)
            node = wanted.get(str(computer).lower())
            if node is None or not isinstance(usage, int | float) or not isinstance(capacity, int | float):
                continue
            if capacity <= 0:
                continue  # a node reporting no cores has no meaningful share
            found[node] = min(1.0, max(0.0, float(usage) / float(capacity)))
    return found


class LogAnalyticsUsage:
    """Node CPU usage from Container Insights `Perf` rows in one Log Analytics workspace."""

    name: Final = "log-analytics"

    def __init__(self, client: LogsQueryClient, *, workspace_id: str) -> None:
        self._client = client
        self._workspace_id = workspace_id

    @classmethod
    def from_settings(cls, settings: Settings, *, credential: TokenCredential | None = None) -> LogAnalyticsUsage:
        """A client for `settings.log_analytics_endpoint` with few, short retries and bounded timeouts."""
        if credential is None:
            from shared.adapters.credentials import make_azure_credential

            credential = make_azure_credential(settings)
        # The SDK drops the whole path of an endpoint ending in /v1 (it reads it as the API version),
        # which would lose the sandbox's /loganalytics prefix: pass the root and the version apart.
        endpoint = settings.log_analytics_endpoint.rstrip("/").removesuffix("/v1")
        client = LogsQueryClient(
            credential,
            endpoint=endpoint,
            api_version="v1",
            connection_verify=settings.arm_ca_bundle or True,
            connection_timeout=5,
            read_timeout=SERVER_TIMEOUT + 10,
            retry_policy=ThrottleAwareRetryPolicy(retry_total=1, retry_backoff_factor=0.5, retry_backoff_max=2, timeout=60),
        )
        return cls(client, workspace_id=settings.log_analytics_workspace_id)

    def close(self) -> None:
        """Release the HTTP session."""
        self._client.close()

    def get_node_cpu_usage(self, nodes: Sequence[Node], *, window: timedelta, now: datetime) -> Mapping[str, float]:
        wanted: dict[str, str] = {}  # lower-cased name -> node name: `in~` matches regardless of case
        for node in nodes:
            if _NODE_NAME.fullmatch(node.name) and len(node.name) <= 253:
                wanted[node.name.lower()] = node.name
            else:
                log.warning("node name %r is not a Kubernetes node name; not asking Log Analytics about it", node.name)
        names = sorted(wanted)
        found: dict[str, float] = {}
        for start in range(0, len(names), MAX_NODES_PER_QUERY):
            chunk = names[start : start + MAX_NODES_PER_QUERY]
            found.update(_fractions(self._query(node_cpu_query(chunk), window=window, now=now), wanted))
        return found

    def _query(self, query: str, *, window: timedelta, now: datetime) -> list[LogsTable]:
        what = f"Log Analytics query of workspace {self._workspace_id}"
        try:
            result: Any = self._client.query_workspace(
                self._workspace_id, query, timespan=(now - window, now), server_timeout=SERVER_TIMEOUT
            )
        except AzureError as exc:
            raise UsageUnavailable(f"{what}: {_describe(exc)}") from exc
        if result.status == LogsQueryStatus.PARTIAL and isinstance(result, LogsQueryPartialResult):
            # Limits or a timeout cut the scan short: what did come back is still measured, and
            # nodes left out are simply unmeasured, so use it rather than throw it away.
            error = result.partial_error
            log.warning("%s returned partial data: %s", what, getattr(error, "message", error))
            return list(result.partial_data or [])
        if result.status != LogsQueryStatus.SUCCESS:  # pragma: no cover - the SDK has no third status today
            raise UsageUnavailable(f"{what}: status {result.status}")
        return list(result.tables or [])
