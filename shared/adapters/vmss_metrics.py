"""The `NodeUsageSource` port over the scale sets' `Percentage CPU` platform metric, with azure-mgmt-monitor.

Adapter module: `get_node_cpu_usage` reads Azure Monitor metrics through ARM
(`GET {scale set id}/providers/Microsoft.Insights/metrics`), one call per scale set
holding asked-about nodes, split per instance by the `VMName` dimension. No agent is
needed: the host measures it. It is the VM's whole CPU (the kubelet, the OS and
everything else too), as a percentage of its cores.

Which node a `VMName` is: the dimension names the scale set instance
(`<scale set>_<instance id>` in Uniform orchestration), which the node's providerID
gives us. Where the value is instead the VM's computer name, it is matched against
the node name, lower-cased: on self-managed clusters the kubelet registers the node
under its hostname, which is the computer name (`<prefix><instance id in base 36>`).
A node whose providerID names no scale set is not asked about.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError
from azure.mgmt.monitor import MonitorManagementClient

from shared.adapters.compute import arm_client_options, compute_error
from shared.domain import InstanceRef, Node
from shared.ports import UsageUnavailable
from shared.settings import Settings

__all__ = ["VmssMetricUsage", "METRIC", "MAX_SERIES"]

log = logging.getLogger(__name__)

METRIC: Final = "Percentage CPU"
DIMENSION: Final = "VMName"
# Series per call: the API returns 10 unless told otherwise; a Uniform scale set holds at most 1,000.
MAX_SERIES: Final = 1000


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _text(value: Any) -> str:
    return "" if value is None else str(getattr(value, "value", value))


def _scale_set_uri(ref: InstanceRef) -> str:
    # No leading slash: the SDK's URL template already starts with one.
    return (
        f"subscriptions/{ref.subscription_id}/resourceGroups/{ref.resource_group}"
        f"/providers/Microsoft.Compute/virtualMachineScaleSets/{ref.scale_set}"
    )


class VmssMetricUsage:
    """Node CPU usage from each scale set's `Percentage CPU` metric, per instance."""

    name: Final = "vmss-metric"

    def __init__(self, client: MonitorManagementClient, *, subscription_id: str = "") -> None:
        self._client = client
        self._subscription_id = subscription_id

    @classmethod
    def from_settings(cls, settings: Settings, *, credential: TokenCredential | None = None) -> VmssMetricUsage:
        """A client for `settings.arm_endpoint`, with the Compute adapter's retry and timeout rules."""
        if credential is None:
            from shared.adapters.credentials import make_azure_credential

            credential = make_azure_credential(settings)
        client = MonitorManagementClient(
            credential, settings.subscription_id, **arm_client_options(settings, retry_total=1, retry_backoff_max=2, timeout=60)
        )
        return cls(client, subscription_id=settings.subscription_id)

    def close(self) -> None:
        """Release the HTTP session."""
        self._client.close()

    def get_node_cpu_usage(self, nodes: Sequence[Node], *, window: timedelta, now: datetime) -> Mapping[str, float]:
        by_scale_set: dict[tuple[str, str, str], tuple[InstanceRef, dict[str, str]]] = {}
        for node in nodes:
            ref = node.instance
            if ref is None:
                continue
            if not ref.subscription_id:  # mapped by hostname or IP: the app's own subscription
                ref = replace(ref, subscription_id=self._subscription_id)
            key = (ref.subscription_id.lower(), ref.resource_group.lower(), ref.scale_set.lower())
            _, names = by_scale_set.setdefault(key, (ref, {}))
            # The metric's VMName: `<scale set>_<id>` for Uniform; a Flexible member's id is its VM name already.
            vm_name = ref.instance_id if ref.instance_id.startswith(f"{ref.scale_set}_") else (
                f"{ref.scale_set}_{ref.instance_id}")
            names[vm_name.lower()] = node.name
            names.setdefault(node.name.lower(), node.name)
        found: dict[str, float] = {}
        failures: list[UsageUnavailable] = []
        for ref, names in by_scale_set.values():
            try:
                found.update(self._scale_set_usage(ref, names, window=window, now=now))
            except UsageUnavailable as exc:
                failures.append(exc)
        if failures and len(failures) == len(by_scale_set):
            raise failures[0]
        for failure in failures:
            # The other scale sets answered: their nodes are measured, these are decided by requests.
            log.warning("%s; its nodes go unmeasured this time", failure)
        return found

    def _scale_set_usage(
        self, ref: InstanceRef, names: Mapping[str, str], *, window: timedelta, now: datetime
    ) -> dict[str, float]:
        what = f"{METRIC} of scale set {ref.resource_group}/{ref.scale_set}"
        try:
            response = self._client.metrics.list(
                _scale_set_uri(ref),
                timespan=f"{_iso(now - window)}/{_iso(now)}",
                interval="PT1M",
                metricnames=METRIC,
                aggregation="Average",
                filter=f"{DIMENSION} eq '*'",
                top=MAX_SERIES,
            )
        except AzureError as exc:
            raise UsageUnavailable(str(compute_error(what, exc))) from exc
        found: dict[str, float] = {}
        for metric in response.value or []:
            if _text(metric.name).lower() != METRIC.lower():
                continue
            for series in metric.timeseries or []:
                vm_name = next(
                    (_text(m.value) for m in series.metadatavalues or [] if _text(m.name).lower() == DIMENSION.lower()),
                    "",
                )
                node = names.get(vm_name.lower())
                averages = [p.average for p in series.data or [] if p.average is not None]
                if node is None or not averages:
                    continue  # another instance of the scale set, or no sample in the window yet
                found[node] = min(1.0, max(0.0, sum(averages) / len(averages) / 100.0))
        return found
