"""What an operator sees in Application Insights, captured in memory while the real polls and executor run
against the sandbox (Kubernetes and ARM doubles) and Azurite: metrics, custom events and one trace per decision.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.services.pending import run_pending_poll
from shared.services.utilization import run_utilization_poll
from shared.telemetry import ACTION_DIMENSIONS, REJECTED_DIMENSIONS
from tests.shared.services.telemetry_capture import Telemetry, telemetry  # noqa: F401  (the fixture)
from tests.shared.services.test_executor import GROUP, TTL, App, make_app, scale_up, walk

CA = "cluster_autoscaler_"
OURS = "vmss_autoscaler_"
# Pods that need new nodes, arriving early enough for their nodes to boot within the scenario's hour.
WAVE = {"name": "wave", "kind": "Job", "count": 4, "at": "2m", "duration": "10m", "requests": {"cpu": "2", "memory": "1Gi"}}


@pytest.fixture
def app(sandbox_factory: Any, azurite: str, table_name: str, queue_name: str) -> App:
    return make_app(sandbox_factory, azurite, table_name, queue_name,
                    settings={"SCALE_DOWN_UNNEEDED_TIME": "0s", "SCALE_DOWN_DELAY_AFTER_ADD": "0s"})


def _take_one(app: App) -> dict[str, Any]:
    [message] = app.queued()
    app.context.ports.queue.clear()  # type: ignore[attr-defined]
    return message


def test_a_scale_up_is_measured_evented_and_one_trace_from_poll_to_arm(
    sandbox_factory: Any, azurite: str, table_name: str, queue_name: str, telemetry: Telemetry
) -> None:
    app = make_app(sandbox_factory, azurite, table_name, queue_name, workloads=(WAVE,))
    app.clock.advance(120)  # the wave arrives
    decided_at = app.clock.now()
    result = run_pending_poll(app.context.ports, app.context.settings, now=decided_at)
    [increase] = result.plan.increases
    added = increase.new_target - increase.current_target

    # The poll's gauges, named and labelled as cluster-autoscaler's.
    assert result.pending > 0
    assert telemetry.last(CA + "unschedulable_pods_count", type="unschedulable") == result.pending
    assert telemetry.last(CA + "nodes_count", node_group=GROUP, state="ready") == 3
    assert telemetry.last(CA + "nodes_count", node_group=GROUP, state="unready") == 0
    assert telemetry.last(CA + "nodes_count", node_group=GROUP, state="notStarted") == 0
    assert telemetry.last(CA + "node_group_target_count", node_group=GROUP) == 3
    assert telemetry.last(CA + "node_group_min_count", node_group=GROUP) == 1
    assert telemetry.last(CA + "node_group_max_count", node_group=GROUP) == 5
    backoff = telemetry.points(CA + "node_group_backoff_status", node_group=GROUP)
    assert backoff and all(p.value == 0 for p in backoff)  # a reason this process reported before is set back to 0
    assert telemetry.last(CA + "last_activity", activity="main") == decided_at.timestamp()
    assert telemetry.last(CA + "last_activity", activity="scaleUp") == decided_at.timestamp()  # planned, as CA's
    # Every node of the group by its providerID, none left alone.
    assert telemetry.last(OURS + "nodes_by_mapping_count", method="provider-id") == 3
    assert telemetry.last(OURS + "nodes_by_mapping_count", method="unmanaged") == 0

    # The message carries the poll's span context.
    [poll] = telemetry.spans_named("poll_pending_pods")
    message = _take_one(app)
    version, trace_id, parent_id, flags = message["traceparent"].split("-")
    assert (int(trace_id, 16), int(parent_id, 16)) == (poll.context.trace_id, poll.context.span_id)

    outcomes = walk(app, json.dumps(message), step_seconds=300, limit=20)
    assert len(outcomes) == 2 and outcomes[-1] == "succeeded", outcomes

    # Counters and the ScaleUp event.
    assert telemetry.total(CA + "scaled_up_nodes_total", node_group=GROUP) == added
    assert telemetry.last(OURS + "last_success", activity="scaleUp") == app.clock.now().timestamp()
    assert telemetry.total(CA + "failed_scale_ups_total") == 0
    [event] = telemetry.events("ScaleUp")
    assert set(event.dimensions) == set(ACTION_DIMENSIONS)
    assert {k: event.dimensions[k] for k in ("action_id", "group", "old_size", "new_size", "outcome", "error_code",
                                             "poison", "dry_run", "step", "node")} == {
        "action_id": message["id"], "group": GROUP, "old_size": 3, "new_size": increase.new_target,
        "outcome": "succeeded", "error_code": "", "poison": "false", "dry_run": "false", "step": "confirm", "node": ""}
    assert event.dimensions["decided_at"] == decided_at.isoformat()
    assert event.dimensions["seconds_since_decided"] == 300
    assert event.dimensions["reason"].endswith("pending pod(s)")

    # Durations of both triggers' work.
    assert telemetry.total(OURS + "function_duration_seconds", function="poll_pending_pods") == 1
    assert telemetry.total(OURS + "function_duration_seconds", function="execute_scale_action") == 2

    # ARM requests by operation: the resize, polls of its operation, never an id in a name.
    assert telemetry.total(OURS + "arm_requests_total", operation="PATCH virtualMachineScaleSets", status_code="200") == 1
    assert telemetry.total(OURS + "arm_requests_total", operation="GET locations/operations") >= 1
    operations = {p.attributes["operation"] for p in telemetry.points(OURS + "arm_requests_total")}
    assert all("pool" not in op and "rg-exec" not in op for op in operations), operations
    assert telemetry.total(OURS + "arm_throttled_requests_total") == 0

    # One trace: each step's span is a child of the poll's span, the ARM calls children of the step's.
    resize, confirm = (telemetry.spans_named(f"execute_scale_action scale_up/{step}") for step in ("resize", "confirm"))
    for [span] in (resize, confirm):
        assert span.context.trace_id == poll.context.trace_id
        assert span.parent is not None and span.parent.span_id == poll.context.span_id
    patch = [s for s in telemetry.spans if s.name == "PATCH" and s.kind.name == "CLIENT"]
    assert len(patch) == 1 and resize[0] in telemetry.ancestors(patch[0])
    assert event.trace_id == poll.context.trace_id  # the event is logged inside the step's span


def test_a_scale_down_is_evented_with_cluster_autoscalers_reason(app: App, telemetry: Telemetry) -> None:
    decided_at = app.clock.now()
    result = run_utilization_poll(app.context.ports, app.context.settings, now=decided_at)
    [action_id] = result.enqueued  # the two idle (empty) nodes, in one bulk removal
    removed = sorted(r.node for r in result.plan.removals)
    assert len(removed) == 2
    assert telemetry.last(CA + "unneeded_nodes_count") == len(result.plan.unneeded) >= 2
    assert telemetry.last(OURS + "nodes_in_drain_count") == 0
    assert telemetry.last(CA + "last_activity", activity="main") == decided_at.timestamp()
    assert telemetry.last(CA + "last_activity", activity="scaleDown") == decided_at.timestamp()

    message = _take_one(app)
    assert message["removal_kind"] == "empty"
    outcomes = walk(app, json.dumps(message), step_seconds=30)
    assert outcomes[-1] == "succeeded", outcomes

    assert telemetry.total(CA + "scaled_down_nodes_total", node_group=GROUP, reason="empty") == 2
    assert telemetry.last(OURS + "last_success", activity="scaleDown") == app.clock.now().timestamp()
    [event] = telemetry.events("ScaleDown")
    assert {k: event.dimensions[k] for k in ("action_id", "group", "outcome", "removal_reason", "poison", "new_size")} == {
        "action_id": action_id, "group": GROUP, "outcome": "succeeded", "removal_reason": "empty", "poison": "false",
        "new_size": ""}
    assert sorted(event.dimensions["node"].split(",")) == removed
    [poll] = telemetry.spans_named("poll_utilization")
    steps = [s for s in telemetry.spans if s.name.startswith("execute_scale_action scale_down/")]
    # Empty nodes still empty once tainted are deleted by the cordon step itself (no drain, no delete hop).
    assert {s.name.rsplit("/", 1)[1] for s in steps} == {"cordon", "confirm"}
    assert all(s.parent is not None and s.parent.span_id == poll.context.span_id for s in steps)


def test_kept_nodes_are_logged_with_flat_dimensions(
    sandbox_factory: Any, azurite: str, table_name: str, queue_name: str, telemetry: Telemetry
) -> None:
    app = make_app(sandbox_factory, azurite, table_name, queue_name, min=3,
                   settings={"SCALE_DOWN_UNNEEDED_TIME": "0s", "SCALE_DOWN_DELAY_AFTER_ADD": "0s"})
    result = run_utilization_poll(app.context.ports, app.context.settings, now=app.clock.now())
    assert result.enqueued == () and len(result.plan.kept) == 2  # the idle nodes, kept by the group's minimum
    # Flat keys survive the logging bridge as custom dimensions (a dict would arrive as one string).
    kept = [a for a in telemetry.log_attributes("shared.services.utilization") if "kept_reason" in a]
    assert sorted(a["node"] for a in kept) == sorted(result.plan.kept)
    assert {a["kept_reason"] for a in kept} == {"NodeGroupMinSizeReached"}


def test_evictions_are_counted_and_a_scale_down_without_a_kind_is_underutilized(
    sandbox_factory: Any, azurite: str, table_name: str, queue_name: str, telemetry: Telemetry
) -> None:
    from tests.shared.services.test_executor import _node_of, _render, scale_down

    app = make_app(sandbox_factory, azurite, table_name, queue_name, workloads=(_render("2h"),),
                   settings={"BATCH_PROTECTION": "false"})
    node = _node_of(app, "render")
    outcomes = walk(app, scale_down(app, node), step_seconds=30)
    assert outcomes[-1] == "succeeded", outcomes
    assert telemetry.total(CA + "evicted_pods_total", eviction_result="succeeded") == 1
    assert telemetry.total(CA + "evicted_pods_total", eviction_result="failed") == 0
    assert telemetry.total(CA + "scaled_down_nodes_total", node_group=GROUP, reason="underutilized") == 1
    [event] = telemetry.events("ScaleDown")
    assert (event.dimensions["node"], event.dimensions["removal_reason"]) == (node, "underutilized")
    # A message with no traceparent runs in a trace of its own, without failing.
    assert all(s.parent is None for s in telemetry.spans if s.name.startswith("execute_scale_action"))


def test_a_failed_scale_up_counts_its_arm_error_code_and_reports_the_group_blocked(app: App, telemetry: Telemetry) -> None:
    app.server.world.fail_next_scale_up("pool", code="QuotaExceeded")
    outcomes = walk(app, scale_up(app, 5), step_seconds=30)
    assert outcomes[-1] == "failed"
    assert telemetry.total(CA + "failed_scale_ups_total", node_group=GROUP, reason="cloudProviderError") == 1
    assert telemetry.total(OURS + "failed_scale_ups_by_code_total", node_group=GROUP, error_code="QuotaExceeded") == 1
    assert telemetry.total(CA + "scaled_up_nodes_total") == 0
    [event] = telemetry.events("ScaleUp")
    assert (event.dimensions["outcome"], event.dimensions["error_code"], event.dimensions["poison"]) == (
        "failed", "QuotaExceeded", "false")
    assert telemetry.total(OURS + "offering_refusals_total", node_group=GROUP, kind="family-quota",
                           error_code="QuotaExceeded") == 1
    run_pending_poll(app.context.ports, app.context.settings, now=app.clock.now())
    # The family's offering is marked: the group is reported in backoff, as CA reports a group it skips.
    assert telemetry.last(CA + "node_group_backoff_status", node_group=GROUP, reason="QuotaExceeded") == 1
    assert telemetry.last(OURS + "unavailable_offerings", kind="family-quota") == 1


def test_nodes_that_never_become_ready_are_a_failed_scale_up(app: App, telemetry: Telemetry) -> None:
    from dataclasses import replace
    from datetime import timedelta

    app.clock.advance(3600)
    state = app.context.ports.state.get_group(GROUP)
    assert app.context.ports.state.update_group(replace(state, last_scale_up=app.clock.now() - timedelta(minutes=20)))
    group = app.context.ports.provider.get_node_group(GROUP)
    assert group is not None
    app.context.ports.provider.begin_resize(group, 5)  # the manual clock stands still: the new instances never boot
    run_pending_poll(app.context.ports, app.context.settings, now=app.clock.now())
    assert telemetry.total(CA + "failed_scale_ups_total", node_group=GROUP, reason="timeout") == 1
    assert telemetry.total(OURS + "failed_scale_ups_by_code_total", node_group=GROUP, error_code="ProvisionTimeout") == 1
    [event] = telemetry.events("ScaleUp")
    assert (event.dimensions["outcome"], event.dimensions["error_code"]) == ("failed", "ProvisionTimeout")
    assert (event.dimensions["old_size"], event.dimensions["new_size"]) == (3, 5)
    assert telemetry.last(CA + "node_group_backoff_status", node_group=GROUP, reason="ProvisionTimeout") == 1
    assert telemetry.last(CA + "node_group_target_count", node_group=GROUP) == 5


def test_rejected_messages_are_evented_poison_or_not(app: App, telemetry: Telemetry) -> None:
    assert app.run("{definitely not json").outcome == "rejected"
    [rejected] = telemetry.events("ScaleActionRejected")
    assert set(rejected.dimensions) == set(REJECTED_DIMENSIONS)
    assert (rejected.dimensions["poison"], rejected.dimensions["outcome"]) == ("true", "rejected")
    assert rejected.dimensions["action_id"].startswith("invalid-") and "not JSON" in rejected.dimensions["reason"]

    assert app.run(scale_up(app, 6)).outcome == "rejected"  # above the group's max: poison
    stale = scale_up(app, 4, id="up-stale")
    app.clock.advance(TTL.total_seconds() + 1)
    assert app.run(stale).outcome == "rejected"  # expired before it started: dropped, not poison
    above, expired = telemetry.events("ScaleUp")
    assert (above.dimensions["outcome"], above.dimensions["poison"], above.dimensions["new_size"]) == ("rejected", "true", 6)
    assert "outside the group's limits" in above.dimensions["detail"]
    assert (expired.dimensions["outcome"], expired.dimensions["poison"]) == ("expired", "false")
    assert len(app.poison()) == 2


def test_arm_throttling_is_counted_per_operation(app: App, telemetry: Telemetry) -> None:
    app.server.world.inject_fault(("arm", "PATCH", "pool"), status=429, retry_after=5)
    result = app.run(scale_up(app, 4))
    assert result.outcome == "waiting" and "throttled" in result.detail
    assert telemetry.total(OURS + "arm_throttled_requests_total", operation="PATCH virtualMachineScaleSets") == 1
    assert telemetry.total(OURS + "arm_requests_total", operation="PATCH virtualMachineScaleSets", status_code="429") == 1
    assert telemetry.total(OURS + "arm_requests_total", operation="GET virtualMachineScaleSets", status_code="200") >= 1
    assert telemetry.events("ScaleUp") == []  # throttling is no outcome: the step waits and goes again
