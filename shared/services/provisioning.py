"""ProvisioningRequests in the polls: read them, decide each one (engine.provisioning), hold their room, write status.

The pending poll reads every request and the PodTemplates they name (each once per poll), then, before any real
pending pod is planned: booked requests' unconsumed pods take their room on Ready nodes; atomic requests whose
scale-up is in flight take the nodes on their way; check-capacity requests are tried on the room left (oldest
first); atomic requests not asked for yet are planned as one scale-up each (`AtomicScaleUp`, id provreq:<uid>)
or refused without booting anything. The ordinary planner then sees that room taken, those nodes held, and no
pending pod that consumes a live request. The utilisation poll keeps the same room (`hold_room`).

A cluster without the CRD (the list answers None) has the feature off, logged once per process;
PROVISIONING_REQUESTS=false reads nothing. A status is written only when it changed, never in DRY_RUN; a failed
read or write is logged and never stops the poll.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from shared import telemetry
from shared.actions import AtomicScaleUp, atomic_id, new_atomic_scale_up
from shared.domain import BufferTemplate, ClusterSnapshot, Condition, Pod, ProvisioningRequest, consumed_request
from shared.engine import provisioning as engine
from shared.engine.provisioning import ResolvedRequest
from shared.engine.provisioning_conditions import conditions_changed, is_final
from shared.engine.quota import Quota
from shared.engine.scale_up import ScaleUpOptions
from shared.ports import ClusterError, ClusterEvent, Ports
from shared.services import offerings
from shared.services.optional_crds import OptionalCrd
from shared.settings import Settings

log = logging.getLogger(__name__)

_CRD = OptionalCrd("provisioningrequests.autoscaling.x-k8s.io", "provisioning requests")
# Ledger outcomes of an attempt that ended with nothing granted and the request not final (Azure refused it for
# quota, a limit was taken since the poll, it expired on the queue): the next attempt may be planned.
_ENDED_WITH_NOTHING = ("failed", "rejected")


@dataclass(frozen=True, slots=True)
class Requests:
    """This poll's requests of ours, resolved, with each one's phase and its consuming pods."""

    resolved: tuple[ResolvedRequest, ...] = ()
    phases: Mapping[str, str] = field(default_factory=dict)  # namespace/name -> engine phase
    # namespace/name -> its pods consumed: the most consuming pods seen at once (alive now, or recorded in its details)
    consumed: Mapping[str, int] = field(default_factory=dict)
    seen: Mapping[str, int] = field(default_factory=dict)  # namespace/name -> consuming pods alive now
    attempts: Mapping[str, int] = field(default_factory=dict)  # namespace/name -> the atomic attempt to plan next

    @property
    def live(self) -> frozenset[str]:
        """Requests a pod may consume: ours, not final (an invalid one is about to be Failed)."""
        return frozenset(key for key, p in self.phases.items() if p not in (engine.FINAL, engine.INVALID))

    def held_pods(self) -> tuple[Pod, ...]:
        """Placeholders that hold room: booked requests' unconsumed pods and in-flight atomic requests' pods."""
        return tuple(pod for one in self.resolved if self.phases.get(one.request.key) in (engine.BOOKED,
                                                                                           engine.IN_FLIGHT)
                     for pod in engine.unconsumed(one, self.consumed.get(one.request.key, 0)))


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """What the pending poll decided for the requests, and the snapshot the ordinary planner plans on."""

    snapshot: ClusterSnapshot
    conditions: Mapping[str, tuple[Condition, ...]] = field(default_factory=dict)  # the statuses to have
    actions: tuple[AtomicScaleUp, ...] = ()
    quota: Quota | None = None  # the quotas left once the atomic scale-ups are counted
    # Nodes on their way held for in-flight requests, by group: taken out of `snapshot`'s sizes, so the ordinary
    # plan's targets are given them back (`engine.restore_targets`) before they are sent.
    held: Mapping[str, int] = field(default_factory=dict)
    lines: Mapping[str, Mapping[str, object]] = field(default_factory=dict)  # status ConfigMap / plan view
    # provisioningClassDetails to write (only where more consuming pods were seen than recorded)
    details: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def read_requests(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, *, now: datetime) -> Requests:
    """Every request of ours, resolved, and its phase (one ledger read per atomic request not provisioned)."""
    if not settings.provisioning_requests:
        return Requests()
    listed = _CRD.read(ports.cluster.list_provisioning_requests)
    if listed is None:
        return Requests()
    ours = sorted((r for r in listed if engine.is_ours(r)),
                  key=lambda r: (r.created_at or now, r.key))
    templates: dict[tuple[str, str], BufferTemplate | None] = {}
    resolved = tuple(one for one in (_resolve(ports, request, templates) for request in ours) if one is not None)
    consumed = engine.consumers(snapshot.pods)
    asked = {one.request.key: _asked(ports, settings, one.request, now=now) for one in resolved}
    phases = {one.request.key: engine.phase(one, now=now, booking=settings.provisioning_request_booking,
                                            asked=asked[one.request.key][0])
              for one in resolved}
    most = {one.request.key: max(consumed[one.request.key], engine.recorded_consumers(one.request))
            for one in resolved}
    return Requests(resolved, phases, {key: n for key, n in most.items() if n},
                    {key: consumed[key] for key in phases if consumed[key]},
                    {key: attempt for key, (_, attempt) in asked.items()})


def _resolve(ports: Ports, request: ProvisioningRequest,
             cache: dict[tuple[str, str], BufferTemplate | None]) -> ResolvedRequest | None:
    """The request with its pods; None when a PodTemplate could not be read for now (an API server 5xx, 429 or
    timeout): the request sits this poll out rather than fail for the API server's trouble."""
    if request.problem:
        return engine.resolve(request, {})
    found: dict[str, BufferTemplate | None] = {}
    try:
        for pod_set in request.pod_sets:
            key = (request.namespace, pod_set.pod_template)
            if key not in cache:
                cache[key] = ports.cluster.get_pod_template(request.namespace, pod_set.pod_template)
            found[pod_set.pod_template] = cache[key]
    except ClusterError as exc:
        if exc.transient:
            log.warning("provisioning request %s: PodTemplate not read (%s); left alone this poll", request.key, exc)
            return None
        return engine.resolve(replace(request, problem=f"PodTemplate not read: {exc}"), {})
    except ValueError as exc:
        return engine.resolve(replace(request, problem=f"PodTemplate not read: {exc}"), {})
    return engine.resolve(request, found)


def _asked(ports: Ports, settings: Settings, request: ProvisioningRequest, *, now: datetime) -> tuple[bool, int]:
    """Whether the request's atomic scale-up was asked for, and the attempt to ask for next otherwise.

    Asked: our ScaleUpInProgress written within the action's lifetime (the message may not be claimed yet), or a
    ledger entry under the latest attempt's id that is in flight, or done otherwise than by failing or being
    rejected (a dry run's outcome). An attempt that failed or was rejected with the request neither final nor
    Provisioned (checked before this is called) ended with nothing granted: the next attempt is planned, as for a
    request that never fit."""
    attempt = engine.attempt_of(request)
    if (request.class_name != engine.ATOMIC_SCALE_UP_CLASS or engine.provisioned_since(request) is not None
            or is_final(request)):
        return False, attempt  # nothing to ask: no ledger read (failed requests stay listed until deleted)
    since = engine.in_progress_since(request)
    if since is not None and now < since + settings.action_ttl:
        return True, attempt
    try:
        entry = ports.state.get_ledger_entry(atomic_id(request.uid, attempt))
    except Exception as exc:  # noqa: BLE001 - an unreadable row must not stop the poll; not asking again is safe
        log.warning("provisioning request %s: ledger entry not read (%s); not planned this poll", request.key, exc)
        return True, attempt
    if entry is None:
        return False, attempt
    if not entry.outcome:
        return True, attempt  # in flight
    if not entry.outcome.startswith(_ENDED_WITH_NOTHING):
        return True, attempt  # e.g. a dry run's outcome: asking again every poll would only repeat it
    return False, attempt + 1


def without_consumers(snapshot: ClusterSnapshot, requests: Requests) -> ClusterSnapshot:
    """The snapshot without the pending pods that consume a live request: they take its booked room, never a
    new node. A pod naming a missing or final request stays an ordinary pod."""
    live = requests.live
    if not live:
        return snapshot
    kept = tuple(p for p in snapshot.pods
                 if p.node_name is not None or p.is_finished or consumed_request(p) not in live)
    return replace(snapshot, pods=kept) if len(kept) != len(snapshot.pods) else snapshot


def hold(snapshot: ClusterSnapshot, pods: Sequence[Pod], *, options: ScaleUpOptions
         ) -> tuple[ClusterSnapshot, dict[str, int]]:
    """`pods` (placeholders) placed on existing nodes' free room first and bound there, those left over on the
    nodes on their way (whose whole nodes are then held out of their group's size and max); and those held nodes
    by group."""
    if not pods:
        return snapshot, {}
    where = engine.place_on_existing(snapshot, pods, options=options)
    snapshot = engine.bind(snapshot, pods, where)
    left = [p for p in pods if p.key not in where]
    held = engine.place_on_upcoming(snapshot, left, options=options) if left else {}
    return engine.hold_nodes(snapshot, held), held


def plan_requests(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, requests: Requests, *,
                  options: ScaleUpOptions, now: datetime) -> RequestPlan:
    """Each request's decision this poll, in order (booked, in flight, check-capacity, atomic); `snapshot`: the
    pending poll's planning view; `options`: its scale-up options (unavailable groups, quota, limits)."""
    if not requests.resolved:
        return RequestPlan(snapshot, quota=options.quota)
    booking = settings.provisioning_request_booking
    planning = without_consumers(snapshot, requests)
    planning, held = hold(planning, requests.held_pods(), options=options)
    conditions: dict[str, tuple[Condition, ...]] = {}
    actions: list[AtomicScaleUp] = []
    quota = options.quota
    asked_nodes: dict[str, int] = {}
    attempts_written: dict[str, int] = {}
    for one in requests.resolved:
        key, phase = one.request.key, requests.phases[one.request.key]
        consumed = requests.consumed.get(key, 0)
        if phase == engine.FINAL:
            continue
        request = engine.accepted(one.request, now=now) if phase != engine.INVALID else one.request
        conditions[key] = request.conditions
        if phase == engine.INVALID:
            conditions[key] = engine.invalid(request, one.problem, now=now)
        elif phase == engine.EXPIRED:
            conditions[key] = engine.booking_expired(request, len(engine.unconsumed(one, consumed)), now=now)
        elif phase in (engine.CHECK, engine.ATOMIC):
            fit_view = engine.without_pending(planning)
            where = engine.place_on_existing(fit_view, one.pods, options=options)
            if len(where) == len(one.pods):
                conditions[key] = engine.capacity_found(request, now=now, booking=booking)
                planning = engine.bind(planning, engine.unconsumed(one, consumed), where)
            elif phase == engine.CHECK:
                conditions[key] = engine.capacity_not_found(request, len(where), len(one.pods), now=now)
            else:
                atomic_view = engine.hold_nodes(fit_view, engine.upcoming_by_group(fit_view))
                decided = engine.plan_atomic(atomic_view, one, options=replace(options, quota=quota))
                conditions[key] = engine.atomic_decided(request, decided, now=now)
                if decided.parts:
                    attempt = requests.attempts.get(key, 1)
                    actions.append(new_atomic_scale_up(
                        request=key, request_uid=request.uid, parts=decided.parts, now=now,
                        ttl=settings.action_ttl, reason=f"provisioning request {key}: {len(one.pods)} pod(s)",
                        attempt=attempt, **telemetry.trace_fields()))
                    attempts_written[key] = attempt
                    groups = {g.id: g for g in planning.groups}
                    for group_id, nodes in decided.parts:
                        asked_nodes[group_id] = asked_nodes.get(group_id, 0) + nodes
                        if quota is not None and group_id in groups:
                            quota = quota.consume(groups[group_id], nodes)
    if asked_nodes:
        # The nodes just asked for are the request's: the ordinary planner may not plan them again up to max.
        planning = replace(planning, groups=tuple(
            replace(g, max_size=max(g.max_size - asked_nodes.get(g.id, 0), 0)) for g in planning.groups))
    lines = status_lines(requests, conditions, now=now, booking=booking)
    details: dict[str, dict[str, str]] = {}
    for one in requests.resolved:
        key = one.request.key
        if requests.phases[key] == engine.FINAL:
            continue
        if requests.seen.get(key, 0) > engine.recorded_consumers(one.request):
            details.setdefault(key, dict(one.request.details))[engine.CONSUMED_DETAIL] = str(requests.seen[key])
        if key in attempts_written:
            mine = details.setdefault(key, dict(one.request.details))
            mine[engine.ATTEMPT_DETAIL] = str(attempts_written[key])
            mine[engine.ASKED_AT_DETAIL] = now.isoformat()
    return RequestPlan(planning, conditions, tuple(actions), quota=quota, held=held, lines=lines, details=details)


def act(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, requests: Requests, plan: RequestPlan,
        quota: Quota | None, *, now: datetime) -> tuple[str, ...]:
    """Enqueue the atomic scale-ups, write the statuses that changed (not in DRY_RUN), one Event per transition;
    the action ids enqueued."""
    groups = {g.id: g for g in snapshot.groups}
    sent = []
    for action in plan.actions:
        for group_id, nodes in action.parts:
            if group_id in groups:
                # Until the executor asks Azure (and reads the quotas afresh), later polls count these as used.
                offerings.note_requested(ports, quota, groups[group_id], nodes)
        ports.queue.send(action)
        sent.append(action.id)
        log.info("atomic scale-up decided: request=%s parts=%s action=%s", action.request,
                 ",".join(f"{g}+{n}" for g, n in action.parts), action.id)
    by_key = {one.request.key: one.request for one in requests.resolved}
    for key, new in plan.conditions.items():
        request = by_key[key]
        details = plan.details.get(key)
        if not conditions_changed(request.conditions, new) and details is None:
            continue
        changed = [c for c in new if not any(o.type == c.type and o.status == c.status and o.reason == c.reason
                                             for o in request.conditions)]
        for condition in changed:
            log.info("provisioning request %s: %s=%s (%s) %s", key, condition.type, condition.status,
                     condition.reason, condition.message)
        if settings.dry_run:
            continue
        try:
            ports.cluster.update_provisioning_request_status(request.namespace, request.name, conditions=new,
                                                             details=details)
        except ClusterError as exc:
            log.warning("provisioning request %s: status not written (%s); the next poll tries again", key, exc)
            continue
        for condition in changed:
            warning = condition.type == engine.FAILED and condition.status == "True"
            ports.events.emit(ClusterEvent(request.namespace, "ProvisioningRequest", request.name, request.uid,
                                           condition.reason, condition.message, now,
                                           "Warning" if warning else "Normal"))
    telemetry.record_provisioning_requests(Counter(
        engine.state_of(replace(by_key[key], conditions=plan.conditions.get(key, by_key[key].conditions)))
        for key in by_key))
    return tuple(sent)


def status_lines(requests: Requests, conditions: Mapping[str, tuple[Condition, ...]], *, now: datetime,
                 booking: object) -> dict[str, dict[str, object]]:
    """The status ConfigMap's and `plan`'s view: per request, class, pods, consumed, booked until, conditions."""
    lines: dict[str, dict[str, object]] = {}
    for one in requests.resolved:
        request = one.request
        current = replace(request, conditions=conditions.get(request.key, request.conditions))
        ends = engine.booking_ends(current, booking)  # type: ignore[arg-type]
        line: dict[str, object] = {
            "class": "check-capacity" if request.class_name == engine.CHECK_CAPACITY_CLASS else "atomic-scale-up",
            "state": engine.state_of(current), "pods": len(one.pods),
            "consumed": requests.consumed.get(request.key, 0),
            "conditions": {c.type: f"{c.status} ({c.reason})" for c in current.conditions},
        }
        if ends is not None and engine.state_of(current) == "provisioned":
            line["bookedUntil"] = ends.isoformat()
        lines[request.key] = line
    return lines


def hold_room(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, *, options: ScaleUpOptions,
              now: datetime) -> ClusterSnapshot:
    """The utilisation poll's view: booked and in-flight requests' placeholders bound to the nodes whose room they
    hold, load that scale-down keeps and moves no pod into. The snapshot as it is without such requests."""
    requests = read_requests(ports, settings, snapshot, now=now)
    pods = requests.held_pods()
    if not pods:
        return snapshot
    return engine.bind(snapshot, pods, engine.place_on_existing(snapshot, pods, options=options))
