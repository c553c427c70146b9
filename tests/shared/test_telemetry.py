"""shared.telemetry: the registry of what is emitted, the queries that read it, and how it is (not) configured.

What the polls and the executor emit against the sandbox is in tests/shared/services/test_telemetry_sandbox.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from shared.actions import RemovalTarget, new_scale_down
from shared.telemetry import EVENTS, LOG_DIMENSIONS, METRICS, scale_down_reason
from tests.builders import T0

ROOT = Path(__file__).resolve().parents[2]

# The contract other parts of the project rely on (alert rules, the workbook, docs): renaming one breaks them.
CONTRACT = {
    "cluster_autoscaler_unschedulable_pods_count": ("gauge", ("type",)),
    "cluster_autoscaler_nodes_count": ("gauge", ("node_group", "state")),
    "cluster_autoscaler_node_group_target_count": ("gauge", ("node_group",)),
    "cluster_autoscaler_node_group_min_count": ("gauge", ("node_group",)),
    "cluster_autoscaler_node_group_max_count": ("gauge", ("node_group",)),
    "cluster_autoscaler_node_group_backoff_status": ("gauge", ("node_group", "reason")),
    "cluster_autoscaler_scaled_up_nodes_total": ("counter", ("node_group",)),
    "cluster_autoscaler_scaled_down_nodes_total": ("counter", ("node_group", "reason")),
    "cluster_autoscaler_failed_scale_ups_total": ("counter", ("node_group", "reason")),
    "cluster_autoscaler_evicted_pods_total": ("counter", ("eviction_result",)),
    "cluster_autoscaler_unneeded_nodes_count": ("gauge", ()),
    "vmss_autoscaler_nodes_in_drain_count": ("gauge", ()),
    "vmss_autoscaler_nodes_by_mapping_count": ("gauge", ("method",)),
    "vmss_autoscaler_aci_pods": ("gauge", ()),
    "vmss_autoscaler_aci_cores": ("gauge", ()),
    "vmss_autoscaler_aci_core_quota": ("gauge", ()),
    "vmss_autoscaler_aci_refused_pods": ("gauge", ()),
    "vmss_autoscaler_virtual_node_closed": ("gauge", ()),
    "vmss_autoscaler_aci_core_seconds_total": ("counter", ()),
    "vmss_autoscaler_aci_estimated_cost_usd_total": ("counter", ()),
    "vmss_autoscaler_backfilled_pods_total": ("counter", ("refused_by_aci",)),
    "vmss_autoscaler_function_duration_seconds": ("histogram", ("function",)),
    "cluster_autoscaler_last_activity": ("gauge", ("activity",)),
    "vmss_autoscaler_arm_requests_total": ("counter", ("operation", "status_code")),
    "vmss_autoscaler_arm_throttled_requests_total": ("counter", ("operation",)),
    "vmss_autoscaler_failed_scale_ups_by_code_total": ("counter", ("node_group", "error_code")),
    "vmss_autoscaler_standby_instances": ("gauge", ("node_group",)),
    "vmss_autoscaler_standby_target": ("gauge", ("node_group",)),
    "vmss_autoscaler_standby_disk_cost_usd_per_hour": ("gauge", ("node_group",)),
    "vmss_autoscaler_standby_hits_total": ("counter", ("node_group",)),
    "vmss_autoscaler_standby_misses_total": ("counter", ("node_group",)),
    "vmss_autoscaler_demand_forecast_nodes": ("gauge", ("node_group",)),
    "vmss_autoscaler_demand_forecast_error": ("gauge", ("node_group",)),
    "vmss_autoscaler_last_success": ("gauge", ("activity",)),
    "vmss_autoscaler_offering_refusals_total": ("counter", ("node_group", "kind", "error_code")),
    "vmss_autoscaler_unavailable_offerings": ("gauge", ("kind",)),
    "vmss_autoscaler_quota_capped_groups": ("gauge", ()),
    "vmss_autoscaler_provisioning_requests": ("gauge", ("state",)),
    "vmss_autoscaler_gpu_not_ready_nodes": ("gauge", ()),
    "vmss_autoscaler_spot_evictions_total": ("counter", ("node_group", "how")),
    "vmss_autoscaler_spot_evicted_pods_total": ("counter", ("batch",)),
    "vmss_autoscaler_spot_lost_work_seconds_total": ("counter", ()),
    "vmss_autoscaler_spot_kept_off_pods": ("gauge", ()),
    "vmss_autoscaler_spot_expected_lost_work_seconds": ("gauge", ()),
    "vmss_autoscaler_replacement_savings_per_hour": ("gauge", ()),
    "vmss_autoscaler_disruptions_total": ("counter", ("reason",)),
    "vmss_autoscaler_drifted_nodes": ("gauge", ()),
}

# cluster-autoscaler's metrics as its metrics.go declares them (name: label names); ours under its prefix
# must be among these, with these labels (a `node_group` dimension may be added: summing it away gives CA's).
CA_METRICS = {
    "unschedulable_pods_count": {"type"}, "nodes_count": {"state"}, "node_group_target_count": {"node_group"},
    "node_group_min_count": {"node_group"}, "node_group_max_count": {"node_group"},
    "node_group_backoff_status": {"node_group", "reason"}, "scaled_up_nodes_total": {"gpu_resource_name", "gpu_name"},
    "scaled_down_nodes_total": {"reason", "gpu_resource_name", "gpu_name"},
    "failed_scale_ups_total": {"reason", "gpu_resource_name", "gpu_name"}, "evicted_pods_total": {"eviction_result"},
    "unneeded_nodes_count": set(), "last_activity": {"activity"}, "function_duration_seconds": {"function"},
    "pending_node_deletions": set(), "errors_total": {"type"},
}


def test_no_metric_of_ours_sits_under_a_name_cluster_autoscaler_does_not_have_or_with_other_labels() -> None:
    for name, spec in METRICS.items():
        if not name.startswith("cluster_autoscaler_"):
            assert name.startswith("vmss_autoscaler_"), name
            continue
        short = name.removeprefix("cluster_autoscaler_")
        assert short in CA_METRICS, f"{name} is not cluster-autoscaler's"
        assert set(spec.attributes) - {"node_group"} <= CA_METRICS[short], name
    # function_duration_seconds' `function` values are CA's loop phases (main, scaleUp...), not our functions.
    assert "cluster_autoscaler_function_duration_seconds" not in METRICS


def test_the_metric_contract_holds() -> None:
    assert {name: (spec.kind, spec.attributes) for name, spec in METRICS.items()} == CONTRACT


def test_events_carry_the_documented_dimensions() -> None:
    assert set(EVENTS) == {"ScaleUp", "ScaleDown", "Backfill", "RefillStandby", "AtomicScaleUp", "ScaleActionRejected",
                           "SpotEviction"}
    assert {"node", "group", "how", "pods", "batch_pods", "lost_seconds"} <= set(EVENTS["SpotEviction"])
    for name in ("ScaleUp", "ScaleDown", "Backfill", "RefillStandby", "AtomicScaleUp"):
        assert {"action_id", "group", "old_size", "new_size", "node", "reason", "outcome", "error_code", "poison",
                "dry_run", "decided_at"} <= set(EVENTS[name])
    assert {"action_id", "reason", "outcome", "poison"} <= set(EVENTS["ScaleActionRejected"])


# -- every query in the docs and the workbook reads only what the code emits ------------------------------------

_FENCE = re.compile(r"```kusto\n(.*?)```", re.DOTALL)
_INLINE = re.compile(r"`([^`\n]*\b(?:customEvents|customMetrics|traces)\b[^`\n]*)`")
_METRIC = re.compile(r"\b(?:cluster|vmss)_autoscaler_\w+")
_NAME_IS = re.compile(r"\bname\s*==\s*\"([^\"]+)\"")
_NAME_IN = re.compile(r"\bname\s+in\s*\(([^)]*)\)")
_DIMENSION = re.compile(r"customDimensions(?:\.(\w+)|\[\"(\w+)\"\])")


def _doc_queries() -> list[str]:
    text = (ROOT / "docs" / "observability.md").read_text()
    return _FENCE.findall(text) + [q.replace("\\|", "|") for q in _INLINE.findall(text)]


def _workbook_queries() -> list[str]:
    workbook = json.loads((ROOT / "infra" / "workbook.json").read_text())
    assert workbook["version"] == "Notebook/1.0"
    return [item["content"]["query"] for item in workbook["items"] if item["type"] == 3]


def _names(query: str) -> set[str]:
    names = set(_NAME_IS.findall(query))
    for listed in _NAME_IN.findall(query):
        names |= set(re.findall(r"\"([^\"]+)\"", listed))
    return names


@pytest.mark.parametrize("source", ["docs/observability.md", "infra/workbook.json"])
def test_queries_reference_only_emitted_metrics_events_and_dimensions(source: str) -> None:
    queries = _doc_queries() if source.startswith("docs") else _workbook_queries()
    assert len(queries) >= 8, "the queries were not found"
    dimensions = ({d for dims in EVENTS.values() for d in dims} | {a for spec in METRICS.values() for a in spec.attributes}
                  | set(LOG_DIMENSIONS))
    unknown: list[str] = []
    for query in queries:
        unknown += [f"metric {m}" for m in _METRIC.findall(query) if m not in METRICS]
        unknown += [f"name {n}" for n in _names(query) if n not in METRICS and n not in EVENTS]
        unknown += [f"dimension {a or b}" for a, b in _DIMENSION.findall(query) if (a or b) not in dimensions]
    assert unknown == [], unknown


def test_the_queries_cover_what_operators_ask() -> None:
    text = "\n".join(_doc_queries() + _workbook_queries())
    for wanted in ('"ScaleUp"', "cluster_autoscaler_unschedulable_pods_count", "error_code", "seconds_since_decided",
                   "cluster_autoscaler_nodes_count", "vmss_autoscaler_arm_throttled_requests_total",
                   "MaxDequeueCount", 'activity) == "main"'):
        assert wanted in text, wanted


# -- configuration ------------------------------------------------------------------------------------------------


def test_the_worker_configures_telemetry_and_nothing_of_ours_does() -> None:
    host = json.loads((ROOT / "host.json").read_text())
    assert host["telemetryMode"] == "OpenTelemetry"
    requirements = (ROOT / "requirements.txt").read_text()
    for pin in ("azure-monitor-opentelemetry==1.8.11", "opentelemetry-api==1.45.1", "opentelemetry-sdk==1.45.1"):
        assert pin in requirements
    configuring = re.compile(r"\b(?:configure_azure_monitor|set_(?:tracer|meter|logger)_provider)\(")
    offenders = [str(p.relative_to(ROOT)) for p in [ROOT / "function_app.py", *(ROOT / "shared").rglob("*.py")]
                 if configuring.search(p.read_text())]
    assert offenders == []


def test_without_a_provider_everything_is_a_silent_no_op() -> None:
    """A fresh process with no OpenTelemetry provider: no trace context to carry, nothing raised."""
    code = """
import logging
from datetime import datetime, timedelta, timezone
from opentelemetry import trace
from shared import telemetry
from shared.actions import new_scale_up
from shared.domain import ClusterSnapshot
now = datetime(2030, 1, 1, tzinfo=timezone.utc)
with telemetry.poll("poll_pending_pods"):
    assert telemetry.trace_fields() == {}, telemetry.trace_fields()
    telemetry.record_pending_poll(ClusterSnapshot(now, (), (), ()), {}, (), pending=0, now=now,
                                  provision_time=timedelta(minutes=15))
action = new_scale_up(action_id="a", group="rg/g", target_size=2, now=now, ttl=timedelta(minutes=5),
                      traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
with telemetry.timed("execute_scale_action"), telemetry.action_span(action) as span:
    assert not span.is_recording()
    telemetry.action_ended(action, "succeeded", detail="", now=now)
telemetry.message_rejected("invalid-x", "not JSON")
telemetry.record_arm_request("PATCH virtualMachineScaleSets", 429)
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_recording_never_raises_into_the_caller() -> None:
    from shared import telemetry

    telemetry.record_pending_poll(None, {}, (), pending=0, now=T0, provision_time=timedelta(0))  # type: ignore[arg-type]
    telemetry.record_utilization_poll(0, None, now=T0)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "reason", "expected"), [
    ("empty", "", "empty"),
    ("unready", "", "unready"),
    ("drain", "", "underutilized"),
    ("batch", "", "underutilized"),
    # Messages decided before removal_kind existed: the planner's reason text says it.
    ("", "2 empty nodes, unneeded since 2026-11-21T12:19:00+00:00", "empty"),
    ("", "empty since 2026-11-21T12:19:00+00:00", "empty"),
    ("", "unready since 2026-11-21T12:19:00+00:00", "unready"),
    ("", "unneeded since 2026-11-21T12:19:00+00:00; 3 pod(s) to move", "underutilized"),
])
def test_scale_down_reasons_are_cluster_autoscalers(kind: str, reason: str, expected: str) -> None:
    action = new_scale_down(action_id="d", group="rg/g", targets=[RemovalTarget("n0", "azure:///x/0")], now=T0,
                            ttl=timedelta(minutes=5), reason=reason, removal_kind=kind)
    assert scale_down_reason(action) == expected
