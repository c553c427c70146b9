"""Telemetry for Application Insights: metrics, custom events and traces, through the OpenTelemetry API only.

Nothing here configures OpenTelemetry, and nothing else in the code base may. In Azure the Functions
Python worker does it: host.json `"telemetryMode": "OpenTelemetry"` and the app setting
`PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY=true` make it call `configure_azure_monitor` once, before
our code is loaded. Tests install in-memory SDK providers. With no provider every call here is a cheap
no-op: the API hands out proxy meters and tracers that forward to a provider set later, or to nothing.
Telemetry never fails an invocation: recording functions swallow (and log at debug) their own errors.

What is emitted (docs/observability.md; the names are a contract with alert rules and the workbook):

* Metrics named as cluster-autoscaler's Prometheus metrics (`METRICS`), so an operator coming from it
  recognises them; they land in Application Insights' `customMetrics`.
* One custom event per action that reaches an outcome (`EVENTS`): a log record carrying
  `microsoft.custom_event.name`, which the Azure Monitor exporter turns into a `customEvents` row; every
  other `extra` key becomes a custom dimension, so they are flat primitives (the logging bridge would
  turn a dict into one unreadable string).
* One trace per decision: a poll's span context travels in the queue message (W3C `traceparent` and
  `tracestate`), and each step of the action runs in a span whose parent is the poll's, so the poll, the
  steps and their ARM calls (azure-core's spans, enabled by the distro) are one operation.

An adapter-like module: services and adapters call it; the pure engine never does (.importlinter).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

from opentelemetry import metrics, trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from shared.actions import AtomicScaleUp, ScaleAction, ScaleDown, ScaleUp
from shared.domain import ClusterSnapshot, GroupState
from shared.engine.status import group_counts, nodes_by_group

__all__ = [
    "METRICS", "EVENTS", "LOG_DIMENSIONS", "EVENT_LOGGER", "MetricSpec", "poll", "timed", "action_span", "trace_fields",
    "record_pending_poll", "record_utilization_poll", "provision_timeout", "record_eviction", "action_ended",
    "message_rejected", "record_arm_request", "scale_down_reason",
]

log = logging.getLogger(__name__)

METER_NAME = "vmss_autoscaler"
TRACER_NAME = "vmss_autoscaler"

# -- the registry: every metric and event the code emits ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    kind: Literal["counter", "gauge", "histogram"]
    attributes: tuple[str, ...]
    unit: str
    description: str


_CA = "cluster_autoscaler_"
# Metrics cluster-autoscaler has no counterpart for, or where ours differ from CA's in meaning or label
# values, live under our own prefix: a dashboard built for CA must never read a look-alike.
_OURS = "vmss_autoscaler_"
# CA's FailedScaleUpReason values: every ARM refusal or failed operation is a cloud provider error, nodes
# that never became Ready a timeout. The ARM error code itself is in our own failed_scale_ups_by_code_total.
CA_CLOUD_PROVIDER_ERROR = "cloudProviderError"
CA_TIMEOUT = "timeout"
METRICS: Mapping[str, MetricSpec] = {spec.name: spec for spec in (
    # -- cluster-autoscaler's names: CA's meaning, type and label values. Where we add a `node_group`
    # dimension, summing it away gives CA's series.
    MetricSpec(_CA + "unschedulable_pods_count", "gauge", ("type",), "{pod}",
               "Pending pods the scheduler gave up on (PodScheduled=False, Unschedulable), as of the last pending poll; "
               "`type` is always `unschedulable` (we do not see pods the scheduler has not processed)."),
    MetricSpec(_CA + "nodes_count", "gauge", ("node_group", "state"), "{node}",
               "Registered nodes per group and state: ready, unready, or notStarted (not Ready yet and younger than "
               "MAX_NODE_PROVISION_TIME)."),
    MetricSpec(_CA + "node_group_target_count", "gauge", ("node_group",), "{node}",
               "The scale set's capacity, deallocated instances left out."),
    MetricSpec(_CA + "node_group_min_count", "gauge", ("node_group",), "{node}", "The group's `min` tag."),
    MetricSpec(_CA + "node_group_max_count", "gauge", ("node_group",), "{node}", "The group's `max` tag."),
    MetricSpec(_CA + "node_group_backoff_status", "gauge", ("node_group", "reason"), "1",
               "1 while the group is in scale-up backoff for `reason` (the ARM error code, or ProvisionTimeout); 0 after."),
    MetricSpec(_CA + "scaled_up_nodes_total", "counter", ("node_group",), "{node}",
               "Nodes added by scale-ups that succeeded (deallocated instances started included)."),
    MetricSpec(_CA + "scaled_down_nodes_total", "counter", ("node_group", "reason"), "{node}",
               "Nodes removed, by why: empty, underutilized or unready."),
    MetricSpec(_CA + "failed_scale_ups_total", "counter", ("node_group", "reason"), "{scale-up}",
               "Scale-ups that failed, by CA's reason: cloudProviderError (ARM refused or failed the change) or timeout "
               "(nodes not Ready within MAX_NODE_PROVISION_TIME)."),
    MetricSpec(_CA + "evicted_pods_total", "counter", ("eviction_result",), "{pod}",
               "Evictions asked of the Eviction API while draining: succeeded, or failed (refused by a budget)."),
    MetricSpec(_CA + "unneeded_nodes_count", "gauge", (), "{node}",
               "Nodes unneeded (idle) as of the last utilisation poll."),
    MetricSpec(_CA + "last_activity", "gauge", ("activity",), "s",
               "Unix time a part of the logic last ran, as CA's: main (a poll observed and decided), scaleUp (the "
               "pending poll planned scale-ups), scaleDown (the utilisation poll planned removals)."),
    # -- ours.
    MetricSpec(_OURS + "failed_scale_ups_by_code_total", "counter", ("node_group", "error_code"), "{scale-up}",
               "Scale-ups that failed, by ARM error code (QuotaExceeded, AllocationFailed, ...) or ProvisionTimeout."),
    MetricSpec(_OURS + "nodes_in_drain_count", "gauge", (), "{node}",
               "Nodes with a removal in flight (reserved, cordoned, draining or being deleted)."),
    MetricSpec(_OURS + "nodes_by_mapping_count", "gauge", ("method",), "{node}",
               "Nodes by how they were matched to an instance (provider-id, hostname, ip), and those left alone "
               "(unmanaged: no instance of a discovered group; ambiguous: more than one)."),
    MetricSpec(_OURS + "aci_pods", "gauge", (), "{pod}",
               "Pods holding an Azure Container Instances container group on the virtual nodes, as of the last pending poll."),
    MetricSpec(_OURS + "aci_cores", "gauge", (), "{core}", "ACI cores those pods request."),
    MetricSpec(_OURS + "aci_core_quota", "gauge", (), "{core}", "ACI_QUOTA_CORES: the regional core quota gated on."),
    MetricSpec(_OURS + "aci_refused_pods", "gauge", (), "{pod}",
               "Pods ACI refused (status reason ProviderFailed) still bound to a virtual node."),
    MetricSpec(_OURS + "virtual_node_closed", "gauge", (), "1",
               "1 while the virtual nodes carry our quota taint (ACI nearly full), 0 otherwise."),
    MetricSpec(_OURS + "aci_core_seconds_total", "counter", (), "{core}.s",
               "ACI core-seconds, reckoned from the cores in use at each pending poll times the time since the last."),
    MetricSpec(_OURS + "aci_estimated_cost_usd_total", "counter", (), "USD",
               "Estimated ACI cost from the same reckoning, at ACI_PRICE_VCPU_SECOND and ACI_PRICE_GB_SECOND."),
    MetricSpec(_OURS + "backfilled_pods_total", "counter", ("refused_by_aci",), "{pod}",
               "Pods moved off virtual nodes onto VM room (`refused_by_aci`: true for pods ACI had refused)."),
    MetricSpec(_OURS + "offering_refusals_total", "counter", ("node_group", "kind", "error_code"), "{refusal}",
               "Scale-ups refused for capacity or quota that marked offerings unavailable, by failure kind "
               "(spot-capacity, zonal-allocation, family-quota, ...)."),
    MetricSpec(_OURS + "unavailable_offerings", "gauge", ("kind",), "{offering}",
               "Offerings (VM size, family or all spot, per zone and priority) marked unavailable now, by failure kind."),
    MetricSpec(_OURS + "quota_capped_groups", "gauge", (), "{group}",
               "Node groups whose increase a Compute quota capped in the last pending poll."),
    MetricSpec(_OURS + "provisioning_requests", "gauge", ("state",), "{request}",
               "ProvisioningRequests of ours by state as the last pending poll left them: pending, in-progress "
               "(atomic scale-up asked for), provisioned (booked), failed, expired, revoked."),
    MetricSpec(_OURS + "gpu_not_ready_nodes", "gauge", (), "{node}",
               "GPU nodes Ready longer than MAX_NODE_PROVISION_TIME since creation without allocatable GPUs, as of "
               "the last utilisation poll (GPU_READINESS): removed as unready nodes."),
    MetricSpec(_OURS + "spot_evictions_total", "counter", ("node_group", "how"), "{node}",
               "Spot nodes lost to Azure evictions, by how we learnt it: notice (Preempt via Event Grid), signal "
               "(an in-cluster agent's taint or condition), deleted or deallocated (seen from the scale set)."),
    MetricSpec(_OURS + "spot_evicted_pods_total", "counter", ("batch",), "{pod}",
               "Pods on spot nodes when they were evicted (`batch`: Job or BATCH_POD_SELECTOR pods, whose work is lost)."),
    MetricSpec(_OURS + "spot_lost_work_seconds_total", "counter", (), "s",
               "Run time batch pods had done when their spot node was evicted: work to do again."),
    MetricSpec(_OURS + "spot_kept_off_pods", "gauge", (), "{pod}",
               "Pending pods the last pending poll planned off spot: expected to run longer than SPOT_MAX_RUNTIME "
               "(or annotated autoscaler.azure.com/spot: avoid)."),
    MetricSpec(_OURS + "spot_expected_lost_work_seconds", "gauge", (), "s",
               "The work the pending pods planned spot-first with an expected run time are expected to lose to "
               "evictions (rate x T^2 / 2 each, SPOT_EVICTION_RATE): compare with spot_lost_work_seconds_total."),
    MetricSpec(_OURS + "standby_instances", "gauge", ("node_group",), "{instance}",
               "Instances of the group kept deallocated as warm standby (or by SCALE_DOWN_MODE=deallocate), per poll."),
    MetricSpec(_OURS + "standby_target", "gauge", ("node_group",), "{instance}",
               "The group's warm standby target (STANDBY_INSTANCES, its tag, auto or a scheduled window), per poll."),
    MetricSpec(_OURS + "standby_disk_cost_usd_per_hour", "gauge", ("node_group",), "USD/h",
               "What the group's stopped instances' OS disks bill per hour (estimated from the size's default OS disk)."),
    MetricSpec(_OURS + "standby_hits_total", "counter", ("node_group",), "{instance}",
               "Instances a scale-up started from the group's stopped instances instead of creating them."),
    MetricSpec(_OURS + "standby_misses_total", "counter", ("node_group",), "{instance}",
               "Instances a scale-up created in a group that keeps standby: its standby was empty or too small."),
    MetricSpec(_OURS + "last_success", "gauge", ("activity",), "s",
               "Unix time of the last scale-up (scaleUp) and scale-down (scaleDown) action that succeeded."),
    MetricSpec(_OURS + "function_duration_seconds", "histogram", ("function",), "s",
               "Wall time of one invocation of poll_pending_pods, poll_utilization, execute_scale_action or sweep_state."),
    MetricSpec(_OURS + "arm_requests_total", "counter", ("operation", "status_code"), "{request}",
               "HTTP requests to Azure Resource Manager (each attempt, retries included), by operation and status."),
    MetricSpec(_OURS + "arm_throttled_requests_total", "counter", ("operation",), "{request}",
               "ARM requests answered 429 (throttled)."),
    MetricSpec(_OURS + "replacement_savings_per_hour", "gauge", (), "USD/h",
               "What the replacements under way (consolidation onto cheaper nodes) save per hour once done, each "
               "replacement counted once, as of the last utilisation poll."),
    MetricSpec(_OURS + "disruptions_total", "counter", ("reason",), "{node}",
               "Voluntary disruptions decided, by reason: Empty and Underutilized (removals), Replace (a node replaced "
               "by a cheaper one) and Drifted (a drifted node replaced), counted when the removal or replacement is "
               "enqueued. Summed over a day: disruptions per day."),
    MetricSpec(_OURS + "drifted_nodes", "gauge", (), "{node}",
               "Nodes that drifted (not on the scale set's latest model, an older node image, or past NODE_MAX_AGE), "
               "replaced or waiting, as of the last utilisation poll."),
    MetricSpec(_OURS + "demand_forecast_nodes", "gauge", ("node_group",), "{node}",
               "The group's forecast peak of nodes asked for and not yet there over the next hour (engine.forecast), "
               "as of the last pending poll."),
    MetricSpec(_OURS + "demand_forecast_error", "gauge", ("node_group",), "1",
               "The MAPE of the group's one-hour-ahead demand forecasts over the last week's hours with demand, a "
               "fraction (0.25 is 25 %); not set while no hour had demand."),
)}

# Dimensions of the ScaleUp and ScaleDown events, and of ScaleActionRejected (an undecodable message).
ACTION_DIMENSIONS = (
    "action_id", "kind", "step", "group", "old_size", "new_size", "node", "reason", "removal_reason", "outcome",
    "detail", "error_code", "poison", "dry_run", "decided_at", "seconds_since_decided",
)
REJECTED_DIMENSIONS = ("action_id", "reason", "outcome", "detail", "error_code", "poison", "dry_run")
EVENTS: Mapping[str, tuple[str, ...]] = {
    "ScaleUp": ACTION_DIMENSIONS,
    "ScaleDown": ACTION_DIMENSIONS,
    "Backfill": ACTION_DIMENSIONS,  # a pod moved off a virtual node (`group` is the virtual node)
    "RefillStandby": ACTION_DIMENSIONS,  # instances created and deallocated into a group's warm standby
    # A ProvisioningRequest's nodes asked for at once (`group` its first group, `new_size` the nodes asked for):
    # failed means every instance it added was deleted again.
    "AtomicScaleUp": ACTION_DIMENSIONS,
    "ScaleActionRejected": REJECTED_DIMENSIONS,
    # A spot node evicted (or about to be): how we learnt it, its pods, and the batch work lost.
    "SpotEviction": ("node", "group", "how", "pods", "batch_pods", "lost_seconds", "replacements"),
}
# Flat dimensions some log records carry (the `traces` table): a kept node and its reason code, the usage source.
LOG_DIMENSIONS = ("node", "kept_reason", "usage_source", "usage_available")
CUSTOM_EVENT_KEY = "microsoft.custom_event.name"  # the Azure Monitor exporter's marker of a custom event

# The events' logger: always at INFO, so LOG_LEVEL=warning quiets the logs but never the events alerts read.
EVENT_LOGGER = "shared.telemetry.events"
_events = logging.getLogger(EVENT_LOGGER)
_events.setLevel(logging.INFO)

# The removal kinds of the scale-down planner (shared.engine.scale_down.Removal.kind) as cluster-autoscaler's reasons.
_SCALE_DOWN_REASONS = {"empty": "empty", "unready": "unready", "drain": "underutilized", "batch": "underutilized"}

_PROPAGATOR = TraceContextTextMapPropagator()
_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

F = TypeVar("F", bound=Callable[..., Any])


def _never_raises(func: F) -> F:
    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Exception:  # telemetry must never fail the work it observes
            log.debug("telemetry: %s failed", func.__name__, exc_info=True)
            return None

    return guarded  # type: ignore[return-value]


# -- instruments, made on first use from the global (proxy) meter ---------------------------------------------

_instruments: dict[str, Any] = {}


def _instrument(name: str) -> Any:
    instrument = _instruments.get(name)
    if instrument is None:
        spec = METRICS[name]
        meter = metrics.get_meter(METER_NAME)
        if spec.kind == "counter":
            instrument = meter.create_counter(name, unit=spec.unit, description=spec.description)
        elif spec.kind == "gauge":
            instrument = meter.create_gauge(name, unit=spec.unit, description=spec.description)
        else:
            instrument = meter.create_histogram(name, unit=spec.unit, description=spec.description,
                                                explicit_bucket_boundaries_advisory=_DURATION_BUCKETS)
        _instruments[name] = instrument
    return instrument


def _add(name: str, amount: float, **attributes: str) -> None:
    _instrument(name).add(amount, attributes)


def _set(name: str, value: float, **attributes: str) -> None:
    _instrument(name).set(value, attributes)


def _tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


# -- invocations and traces -------------------------------------------------------------------------------------


@contextmanager
def timed(function: str) -> Iterator[None]:
    """Record the wall time of the block as `function_duration_seconds{function}`, whether it raises or not."""
    started = time.perf_counter()
    try:
        yield
    finally:
        _record_duration(function, time.perf_counter() - started)


@_never_raises
def _record_duration(function: str, seconds: float) -> None:
    _instrument(_OURS + "function_duration_seconds").record(seconds, {"function": function})


@contextmanager
def poll(function: str) -> Iterator[None]:
    """One poll: a span named `function` (child of the invocation's context the worker set), timed."""
    with timed(function), _tracer().start_as_current_span(function, kind=trace.SpanKind.INTERNAL):
        yield


def trace_fields() -> dict[str, str]:
    """The current span context as a queue message's `traceparent` (and `tracestate`); {} when there is none."""
    carrier: dict[str, str] = {}
    try:
        _PROPAGATOR.inject(carrier)
    except Exception:
        log.debug("telemetry: could not capture the trace context", exc_info=True)
        return {}
    return {key: carrier[key] for key in ("traceparent", "tracestate") if carrier.get(key)}


@contextmanager
def action_span(action: ScaleAction) -> Iterator[trace.Span]:
    """The span of one step of an action, `execute_scale_action <kind>/<step>`, a child of the decision's span.

    The parent comes from the message's `traceparent`/`tracestate` (every step carries the poll's), so
    the poll, each step and its ARM calls share one trace. The invocation's own context (the host's
    queue-trigger request) is linked. A message without a traceparent runs under the invocation's context.
    """
    current = trace.get_current_span().get_span_context()
    parent = None
    links: list[trace.Link] = []
    if action.traceparent:
        carrier = {"traceparent": action.traceparent}
        if action.tracestate:
            carrier["tracestate"] = action.tracestate
        parent = _PROPAGATOR.extract(carrier)
        if current.is_valid:
            links.append(trace.Link(current))
    attributes = {
        "autoscaler.action_id": action.id, "autoscaler.kind": action.kind, "autoscaler.step": action.step,
        "autoscaler.group": action.group, "autoscaler.attempt": action.attempt,
    }
    with _tracer().start_as_current_span(f"execute_scale_action {action.kind}/{action.step}", context=parent,
                                         kind=trace.SpanKind.CONSUMER, links=links, attributes=attributes) as span:
        yield span


# -- what the polls saw -------------------------------------------------------------------------------------------


@_never_raises
def record_pending_poll(snapshot: ClusterSnapshot, states: Mapping[str, GroupState], backed_off: Iterable[str], *,
                        pending: int, now: datetime, provision_time: timedelta) -> None:
    """Gauges at the end of a pending poll that observed and decided: pods, nodes, groups, backoff; `main` activity.

    `snapshot` is as observed with deallocated instances left out of the sizes (before backoff adjusts
    what the planner sees); `backed_off` names the groups in backoff now.
    """
    _set(_CA + "unschedulable_pods_count", pending, type="unschedulable")
    by_group = nodes_by_group(snapshot)
    in_backoff = set(backed_off)
    for group in snapshot.groups:
        group_state = states.get(group.id) or GroupState(group.id)
        # The status ConfigMap's classification, so both say the same about a node.
        counts = group_counts(group, by_group.get(group.id, []), group_state, now=now, max_node_provision_time=provision_time)
        for state, count in (("ready", counts.ready), ("unready", counts.unready), ("notStarted", counts.not_started)):
            _set(_CA + "nodes_count", count, node_group=group.id, state=state)
        _set(_CA + "node_group_target_count", group.capacity, node_group=group.id)
        _set(_CA + "node_group_min_count", group.min_size, node_group=group.id)
        _set(_CA + "node_group_max_count", group.max_size, node_group=group.id)
        reason = group_state.backoff_reason or "unknown"
        _set_backoff(group.id, reason if group.id in in_backoff else None, last_reason=reason)
    _set(_CA + "last_activity", now.timestamp(), activity="main")
    _set(_CA + "last_activity", now.timestamp(), activity="scaleUp")
    by_method = {"provider-id": 0, "hostname": 0, "ip": 0, "unmanaged": 0, "ambiguous": 0}
    for method in snapshot.mapped_by.values():
        by_method[method] = by_method.get(method, 0) + 1
    by_method["ambiguous"] = len(snapshot.ambiguous)
    by_method["unmanaged"] = len(snapshot.unmapped) - len(snapshot.ambiguous)
    for method, count in by_method.items():
        _set(_OURS + "nodes_by_mapping_count", count, method=method)


# Per group, the backoff reasons this process has reported, so a reason no longer current is set back to 0.
_backoff_reported: dict[str, set[str]] = {}


def _set_backoff(group: str, reason: str | None, *, last_reason: str) -> None:
    reported = _backoff_reported.setdefault(group, set())
    for old in reported - {reason}:
        _set(_CA + "node_group_backoff_status", 0, node_group=group, reason=old)
    if reason is not None:
        _set(_CA + "node_group_backoff_status", 1, node_group=group, reason=reason)
        reported.add(reason)
    elif not reported:
        _set(_CA + "node_group_backoff_status", 0, node_group=group, reason=last_reason)


@_never_raises
def record_forecast(group: str, *, nodes: float, mape: float | None) -> None:
    """A group's demand forecast for the next hour and the error of such forecasts (services.demand)."""
    _set(_OURS + "demand_forecast_nodes", nodes, node_group=group)
    if mape is not None:
        _set(_OURS + "demand_forecast_error", mape, node_group=group)


@_never_raises
def record_utilization_poll(unneeded: int, states: Mapping[str, GroupState], *, now: datetime) -> None:
    """Gauges at the end of a utilisation poll that observed and decided; `main` activity."""
    _set(_CA + "unneeded_nodes_count", unneeded)
    _set(_OURS + "nodes_in_drain_count", sum(len(state.removing) for state in states.values()))
    _set(_CA + "last_activity", now.timestamp(), activity="main")
    _set(_CA + "last_activity", now.timestamp(), activity="scaleDown")


@_never_raises
def provision_timeout(group: str, *, present: int, target: int, now: datetime) -> None:
    """A group's requested nodes did not become Ready within MAX_NODE_PROVISION_TIME: a failed scale-up."""
    _add(_CA + "failed_scale_ups_total", 1, node_group=group, reason=CA_TIMEOUT)
    _add(_OURS + "failed_scale_ups_by_code_total", 1, node_group=group, error_code="ProvisionTimeout")
    _event("ScaleUp", f"ScaleUp {group}: {target - present} node(s) not Ready in time: failed (ProvisionTimeout)", {
        "action_id": "", "kind": "scale_up", "step": "", "group": group, "old_size": present, "new_size": target,
        "node": "", "reason": "nodes not Ready within MAX_NODE_PROVISION_TIME", "removal_reason": "", "outcome": "failed",
        "detail": f"{target - present} of {target} node(s) missing", "error_code": "ProvisionTimeout",
        "poison": "false", "dry_run": "false", "decided_at": "", "seconds_since_decided": "",
    })


# -- what the executor did ------------------------------------------------------------------------------------------


@_never_raises
def record_eviction(outcome: str) -> None:
    """One Eviction API call's outcome: evicted counts as succeeded, blocked (a budget refused) as failed."""
    result = {"evicted": "succeeded", "blocked": "failed"}.get(outcome)
    if result is not None:
        _add(_CA + "evicted_pods_total", 1, eviction_result=result)


def scale_down_reason(action: ScaleDown) -> str:
    """cluster-autoscaler's scale-down reason (empty, underutilized, unready) of a scale-down action."""
    if action.removal_kind in _SCALE_DOWN_REASONS:
        return _SCALE_DOWN_REASONS[action.removal_kind]
    # Messages from before removal_kind: the planner's reason text says it.
    text = action.reason.lower()
    if text.startswith("unready"):
        return "unready"
    if text.startswith("empty") or " empty nodes" in text:
        return "empty"
    return "underutilized"


def _nodes_added(action: ScaleUp) -> int:
    grown = action.resized_to - action.from_size if action.resized_to is not None and action.from_size is not None else 0
    return max(0, grown) + len(action.starting)


@_never_raises
def action_ended(action: ScaleAction, outcome: str, *, detail: str, now: datetime, error_code: str = "",
                 poison: bool = False, dry_run: bool = False, old_size: int | None = None) -> None:
    """An action reached an outcome (succeeded, failed, skipped, dry-run, rejected, expired): its event and counters."""
    scale_up = isinstance(action, ScaleUp)
    if old_size is None and isinstance(action, ScaleUp):
        old_size = action.from_size
    dimensions: dict[str, Any] = {
        "action_id": action.id, "kind": action.kind, "step": action.step, "group": action.group,
        "old_size": old_size if old_size is not None else "",
        "new_size": action.target_size if isinstance(action, ScaleUp) else "",
        "node": ",".join(action.nodes) if isinstance(action, ScaleDown) else "", "reason": action.reason,
        "removal_reason": scale_down_reason(action) if isinstance(action, ScaleDown) else "",
        "outcome": outcome, "detail": detail[:1000], "error_code": error_code,
        "poison": "true" if poison else "false", "dry_run": "true" if dry_run else "false",
        "decided_at": action.created_at.isoformat(),
        "seconds_since_decided": round((now - action.created_at).total_seconds(), 3),
    }
    atomic = isinstance(action, AtomicScaleUp)
    if atomic:
        dimensions["new_size"] = action.nodes_asked
    name = "ScaleUp" if scale_up else "ScaleDown" if isinstance(action, ScaleDown) else (
        "Backfill" if action.kind == "backfill" else "AtomicScaleUp" if atomic else "RefillStandby")
    target = f"{action.group} {dimensions['old_size']} -> {dimensions['new_size']}" if scale_up else (
        f"{action.group} node(s) {dimensions['node']}" if isinstance(action, ScaleDown) else
        f"{action.nodes_asked} node(s) for {action.request}" if atomic else
        f"standby of {action.group}" if action.kind == "refill_standby" else
        f"pod {getattr(action, 'pod_key', '')} off {action.group}")
    _event(name, f"{name} {target}: {outcome}{f' ({error_code})' if error_code else ''}", dimensions)
    trace.get_current_span().set_attribute("autoscaler.outcome", outcome)
    if isinstance(action, ScaleUp) and outcome == "succeeded":
        added = _nodes_added(action)
        if added:
            _add(_CA + "scaled_up_nodes_total", added, node_group=action.group)
        _set(_OURS + "last_success", now.timestamp(), activity="scaleUp")
    elif atomic and outcome == "succeeded":
        for group, count in action.parts:
            _add(_CA + "scaled_up_nodes_total", count, node_group=group)
        _set(_OURS + "last_success", now.timestamp(), activity="scaleUp")
    elif (scale_up or atomic) and outcome == "failed":
        _add(_CA + "failed_scale_ups_total", 1, node_group=action.group, reason=CA_CLOUD_PROVIDER_ERROR)
        _add(_OURS + "failed_scale_ups_by_code_total", 1, node_group=action.group, error_code=error_code or "Failed")
    elif isinstance(action, ScaleDown) and outcome == "succeeded":
        _add(_CA + "scaled_down_nodes_total", len(action.nodes), node_group=action.group,
             reason=scale_down_reason(action))
        _set(_OURS + "last_success", now.timestamp(), activity="scaleDown")


@_never_raises
def pod_backfilled(*, failed: bool) -> None:
    """A pod was moved off a virtual node (`failed`: one ACI had refused)."""
    _add(_OURS + "backfilled_pods_total", 1, refused_by_aci="true" if failed else "false")


@_never_raises
def note_virtual_node_decisions(*, backfill: int, stays: int, failed: int, admitted: int, closed: bool,
                                why: str) -> None:
    """The pending poll's virtual-node decisions, as attributes of its span (the poll's trace)."""
    span = trace.get_current_span()
    span.set_attribute("autoscaler.virtual_nodes.backfill", backfill)
    span.set_attribute("autoscaler.virtual_nodes.stays", stays)
    span.set_attribute("autoscaler.virtual_nodes.refused_by_aci", failed)
    span.set_attribute("autoscaler.virtual_nodes.admitted", admitted)
    span.set_attribute("autoscaler.virtual_nodes.closed", closed)
    span.set_attribute("autoscaler.virtual_nodes.gate", why[:256])


@_never_raises
def record_virtual_nodes(*, pods: int, cores: float, quota: int, failed: int, closed: bool, core_seconds: float,
                         cost_usd: float) -> None:
    """One pending poll's view of the virtual nodes: ACI pods and cores (gauges), and the core-seconds and
    estimated cost of ACI since the previous poll (counters)."""
    _set(_OURS + "aci_pods", pods)
    _set(_OURS + "aci_cores", cores)
    _set(_OURS + "aci_core_quota", quota)
    _set(_OURS + "aci_refused_pods", failed)
    _set(_OURS + "virtual_node_closed", 1 if closed else 0)
    if core_seconds > 0:
        _add(_OURS + "aci_core_seconds_total", core_seconds)
    if cost_usd > 0:
        _add(_OURS + "aci_estimated_cost_usd_total", cost_usd)


@_never_raises
def message_rejected(action_id: str, reason: str, *, dry_run: bool = False) -> None:
    """A message that could not be decoded went to the poison queue."""
    _event("ScaleActionRejected", f"ScaleActionRejected {action_id}: {reason}", {
        "action_id": action_id, "reason": reason[:1000], "outcome": "rejected", "detail": reason[:1000],
        "error_code": "InvalidMessage", "poison": "true", "dry_run": "true" if dry_run else "false",
    })


def offering_unavailable(group: str, *, kind: str, code: str, marks: int) -> None:
    """A refusal marked `marks` offerings unavailable."""
    _add(_OURS + "offering_refusals_total", 1, node_group=group, kind=kind, error_code=code)


_offering_kinds_reported: set[str] = set()


def record_offerings(marks_by_kind: Mapping[str, int], *, quota_capped: int) -> None:
    """One pending poll's view: live unavailable offerings per kind (kinds gone report 0), groups capped by quota."""
    for kind in _offering_kinds_reported - set(marks_by_kind):
        _set(_OURS + "unavailable_offerings", 0, kind=kind)
    for kind, count in marks_by_kind.items():
        _set(_OURS + "unavailable_offerings", count, kind=kind)
    _offering_kinds_reported.clear()
    _offering_kinds_reported.update(marks_by_kind)
    _set(_OURS + "quota_capped_groups", quota_capped)


@_never_raises
def record_disruptions(reason_counts: Mapping[str, int]) -> None:
    """Disruptions just enqueued, by reason (engine.disruption_budgets.removal_reason or a replacement's reason)."""
    for reason, count in reason_counts.items():
        if reason and count > 0:
            _add(_OURS + "disruptions_total", count, reason=reason)


@_never_raises
def record_replacements(*, savings_per_hour: float, drifted: int) -> None:
    """One utilisation poll's view of replacements: their saving per hour once done, and the drifted nodes."""
    _set(_OURS + "replacement_savings_per_hour", savings_per_hour)
    _set(_OURS + "drifted_nodes", drifted)


@_never_raises
def record_spot_by_work(*, kept_off: int, expected_loss_s: float) -> None:
    """One pending poll's spot-by-work view (engine.spot_work): pods kept off spot, expected loss of the others."""
    _set(_OURS + "spot_kept_off_pods", kept_off)
    _set(_OURS + "spot_expected_lost_work_seconds", expected_loss_s)


@_never_raises
def record_gpu_not_ready(nodes: int) -> None:
    """GPU nodes whose GPUs are overdue (services.gpu_readiness), per utilisation poll."""
    _set(_OURS + "gpu_not_ready_nodes", nodes)


_request_states_reported: set[str] = set()


@_never_raises
def record_provisioning_requests(by_state: Mapping[str, int]) -> None:
    """One pending poll's ProvisioningRequests by state (states gone report 0)."""
    for state in _request_states_reported - set(by_state):
        _set(_OURS + "provisioning_requests", 0, state=state)
    for state, count in by_state.items():
        _set(_OURS + "provisioning_requests", count, state=state)
    _request_states_reported.clear()
    _request_states_reported.update(by_state)


def spot_eviction(node: str, *, group: str, how: str, pods: int, batch_pods: int, lost_seconds: float,
                  replacements: int) -> None:
    _add(_OURS + "spot_evictions_total", 1, node_group=group, how=how)
    if pods - batch_pods > 0:
        _add(_OURS + "spot_evicted_pods_total", pods - batch_pods, batch="false")
    if batch_pods > 0:
        _add(_OURS + "spot_evicted_pods_total", batch_pods, batch="true")
    if lost_seconds > 0:
        _add(_OURS + "spot_lost_work_seconds_total", lost_seconds)
    _event("SpotEviction", f"SpotEviction {node} ({how}): {pods} pod(s), {batch_pods} batch, "
           f"{lost_seconds:.0f} s of batch work lost", {
               "node": node, "group": group, "how": how, "pods": pods, "batch_pods": batch_pods,
               "lost_seconds": round(lost_seconds, 1), "replacements": replacements})


def spot_work_lost(seconds: float) -> None:
    """Batch work that died with a spot VM after its notice was recorded (pods left to finish that did not)."""
    if seconds > 0:
        _add(_OURS + "spot_lost_work_seconds_total", seconds)


@_never_raises
def record_standby(group: str, *, stopped: int, target: int, disk_usd_per_hour: float) -> None:
    """A poll's view of one group's warm standby."""
    _set(_OURS + "standby_instances", stopped, node_group=group)
    _set(_OURS + "standby_target", target, node_group=group)
    _set(_OURS + "standby_disk_cost_usd_per_hour", disk_usd_per_hour, node_group=group)


@_never_raises
def standby_used(group: str, *, hits: int, misses: int) -> None:
    """A scale-up of the group: instances started from standby (hits) and created for want of it (misses)."""
    if hits:
        _add(_OURS + "standby_hits_total", hits, node_group=group)
    if misses:
        _add(_OURS + "standby_misses_total", misses, node_group=group)


def _event(name: str, message: str, dimensions: Mapping[str, Any]) -> None:
    _events.info(message, extra={CUSTOM_EVENT_KEY: name, **dimensions})


# -- ARM --------------------------------------------------------------------------------------------------------------


@_never_raises
def record_arm_request(operation: str, status_code: int | str) -> None:
    """One HTTP attempt at Azure Resource Manager (shared.adapters.arm_telemetry's pipeline policy)."""
    _add(_OURS + "arm_requests_total", 1, operation=operation, status_code=str(status_code))
    if str(status_code) == "429":
        _add(_OURS + "arm_throttled_requests_total", 1, operation=operation)
