"""ProvisioningRequests: their placeholder pods, booking and consumption, and the planner's decision for each.

Pure: no SDK, no I/O, `now` passed in. A request of ours (class check-capacity or best-effort-atomic-scale-up)
stands for `count` pods per podSet shaped like its PodTemplate; those pods exist only in the planner's memory,
named `provreq:<namespace>/<name>:<i>` (a colon: no real pod has one). They are placed on existing nodes' free
room by the scale-up simulation with no group allowed to grow (`place_on_existing`): a request whose pods all fit
is Provisioned, and while it is booked (Provisioned, not final, within the booking time) its pods not yet consumed
are bound where they fit, so scale-down keeps the room and the ordinary planner and other requests see it taken.
Booked requests are placed BEFORE real pending pods (CapacityBuffers come after them).

An atomic request that does not fit the room there is is planned as one scale-up (`plan_atomic`): the whole set in
one group (several only when the request's parameters say so), within every group's max, the cluster-wide limits
and the Compute quotas; when no group can hold all of it nothing is asked and the decision names the binding limit.
Conditions are written with engine.provisioning_conditions, so a request reads as cluster-autoscaler writes it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from shared.domain import (
    ATOMIC_SCALE_UP_CLASS,
    CHECK_CAPACITY_CLASS,
    BufferTemplate,
    ClusterSnapshot,
    Condition,
    NodeGroup,
    OwnerRef,
    Pod,
    ProvisioningRequest,
    consumed_request,
)
from shared.engine.limits import ClusterLimits
from shared.engine.node_counts import present_by_group
from shared.engine.provisioning_conditions import (
    ACCEPTED,
    ACCEPTED_REASON,
    CAPACITY_IS_FOUND,
    CAPACITY_IS_NOT_FOUND,
    FAILED,
    INVALID_REQUEST,
    NO_RETRY,
    PROVISIONED,
    QUOTA_EXCEEDED,
    SCALE_UP_IN_PROGRESS,
    BOOKING_EXPIRED,
    BOOKING_EXPIRED_REASON,
    EXPIRED_REASON,
    is_final,
    with_condition,
)
from shared.engine.scale_up import ScaleUpOptions, ScaleUpPlan, existing_placements, simulate_scale_up

PLACEHOLDER_PREFIX = "provreq:"
PLACEHOLDER_OWNER = "ProvisioningRequest"
# spec.parameters key (ours): "true" lets an atomic request's nodes come from several groups.
MULTI_GROUP = "autoscaler.azure.com/multi-group"
CLASSES = (CHECK_CAPACITY_CLASS, ATOMIC_SCALE_UP_CLASS)
# cluster-autoscaler fails a check-capacity request still not provisioned this long after its creation.
CHECK_CAPACITY_EXPIRY = timedelta(days=7)
_NOT_THIS_ONE = "not the group tried for this request"


def is_ours(request: ProvisioningRequest) -> bool:
    """A class we provision; other classes are someone else's and get no status from us."""
    return request.class_name in CLASSES


# status.provisioningClassDetails key (ours): which attempt at the request's atomic scale-up is the latest (1 when
# absent). An attempt that Azure refused for quota ends without failing the request, and the next is planned anew.
ATTEMPT_DETAIL = "autoscaler.azure.com/atomic-attempt"


# ... and when the poll last asked for it: ScaleUpInProgress keeps the transition time of an earlier
# Provisioned=False (a condition's time moves only with its status), so the decision's own time is kept here.
ASKED_AT_DETAIL = "autoscaler.azure.com/atomic-asked-at"


def attempt_of(request: ProvisioningRequest) -> int:
    text = request.details.get(ATTEMPT_DETAIL, "")
    return int(text) if text.isdigit() and int(text) >= 1 else 1



def placeholder_name(request: ProvisioningRequest, index: int) -> str:
    return f"{PLACEHOLDER_PREFIX}{request.namespace}/{request.name}:{index}"


def request_of(pod_key: str) -> str | None:
    """The request (namespace/name) whose placeholder this pod key is; None for a real pod."""
    _, _, name = pod_key.partition("/")
    if not name.startswith(PLACEHOLDER_PREFIX):
        return None
    request, _, _ = name[len(PLACEHOLDER_PREFIX):].rpartition(":")
    return request or None


@dataclass(frozen=True, slots=True)
class ResolvedRequest:
    """A request with its placeholder pods (in podSet order), or why it cannot be acted on."""

    request: ProvisioningRequest
    pods: tuple[Pod, ...] = ()
    problem: str = ""


def resolve(request: ProvisioningRequest, templates: Mapping[str, BufferTemplate | None]) -> ResolvedRequest:
    """The request's pods from its PodTemplates (`templates`: name -> the template read, None when missing)."""
    if request.problem:
        return ResolvedRequest(request, problem=request.problem)
    if not request.pod_sets:
        return ResolvedRequest(request, problem="spec.podSets is empty")
    pods: list[Pod] = []
    for index, pod_set in enumerate(request.pod_sets):
        if pod_set.count <= 0:
            return ResolvedRequest(request, problem=f"spec.podSets[{index}].count must be at least 1, "
                                   f"got {pod_set.count}")
        template = templates.get(pod_set.pod_template)
        if template is None:
            return ResolvedRequest(request, problem=f"PodTemplate {pod_set.pod_template} not found in namespace "
                                   f"{request.namespace}")
        for _ in range(pod_set.count):
            pods.append(replace(
                template.pod, namespace=request.namespace, name=placeholder_name(request, len(pods)), uid="",
                created_at=request.created_at, node_name=None, phase="Pending", unschedulable=True,
                terminating=False, deleted_at=None, started_at=None,
                owner=OwnerRef(PLACEHOLDER_OWNER, request.name),
            ))
    return ResolvedRequest(request, tuple(pods))


def consumers(pods: Iterable[Pod]) -> Counter[str]:
    """Request (namespace/name) -> its consuming pods that exist and have not finished."""
    counts: Counter[str] = Counter()
    for pod in pods:
        request = consumed_request(pod)
        if request is not None and not pod.is_finished:
            counts[request] += 1
    return counts


# status.provisioningClassDetails key (ours): the most consuming pods seen at once. Finished pods are not listed, so
# without it a request whose pods ran and finished would look unconsumed again and hold its room until it expires.
CONSUMED_DETAIL = "autoscaler.azure.com/consumed-pods"


def recorded_consumers(request: ProvisioningRequest) -> int:
    """The most consuming pods seen at once, as written in the request's details (0 when absent or unreadable)."""
    text = request.details.get(CONSUMED_DETAIL, "")
    return int(text) if text.isdigit() else 0


def unconsumed(resolved: ResolvedRequest, consumed: int) -> tuple[Pod, ...]:
    """The placeholders still holding room: the request's pods less those real pods that consume it took."""
    return resolved.pods[max(consumed, 0):]


def provisioned_since(request: ProvisioningRequest) -> datetime | None:
    condition = request.condition(PROVISIONED)
    return condition.since if condition is not None and condition.status == "True" else None


# What a request is this poll, before any simulation.
INVALID = "invalid"  # spec or PodTemplate unreadable: Failed, InvalidRequest
FINAL = "final"  # failed, expired or revoked: nothing more
EXPIRED = "expired"  # booked time over: BookingExpired now
BOOKED = "booked"  # Provisioned, within its booking: its unconsumed pods hold room
IN_FLIGHT = "in-flight"  # its atomic scale-up was asked for: the nodes on their way are its own
CHECK = "check"  # check-capacity, not provisioned: try the room there is
ATOMIC = "atomic"  # atomic, not provisioned, nothing asked yet: plan it


def phase(resolved: ResolvedRequest, *, now: datetime, booking: timedelta, asked: bool) -> str:
    """Which of the phases above the request is in. `asked`: its atomic scale-up has a ledger entry (in flight
    or done) or was enqueued within the action's lifetime; a request with an entry done that is not provisioned
    is left to the executor's outcome, never planned again."""
    request = resolved.request
    if is_final(request):
        return FINAL
    if resolved.problem:
        return INVALID
    since = provisioned_since(request)
    if since is not None:
        return EXPIRED if now >= since + booking else BOOKED
    if request.class_name == CHECK_CAPACITY_CLASS:
        return CHECK
    return IN_FLIGHT if asked else ATOMIC


def booking_ends(request: ProvisioningRequest, booking: timedelta) -> datetime | None:
    since = provisioned_since(request)
    return None if since is None else since + booking


# --- The simulations ---------------------------------------------------------------------------


# The simulations below see only a request's placeholders (never pending pods) with the options given minus `after`,
# `reclaimable` (draining nodes are not room to book) and `gangs` (a request is all-or-nothing by its own rules
# here: a template's gang label must not make its placeholders one gang of the planner's).


def _own(options: ScaleUpOptions, **more: object) -> ScaleUpOptions:
    return replace(options, after=frozenset(), reclaimable=frozenset(), gangs=False, **more)  # type: ignore[arg-type]


def without_pending(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot with no pending pod: room for the requests' pods is what the bound pods leave free."""
    return replace(snapshot, pods=tuple(p for p in snapshot.pods if p.node_name is not None))


def place_on_existing(snapshot: ClusterSnapshot, pods: Sequence[Pod], *, options: ScaleUpOptions
                      ) -> dict[str, str]:
    """Pod key -> the Ready node whose free room it takes, for those of `pods` that fit (first-fit decreasing,
    every scheduler filter). No group grows and nodes on their way are not used: only the room there is."""
    if not pods:
        return {}
    view = replace(without_pending(snapshot), groups=(), pods=(*without_pending(snapshot).pods, *pods))
    simulation = simulate_scale_up(view, options=_own(options))
    return {key: node for node, keys in existing_placements(simulation).items() for key in keys}


def place_on_upcoming(snapshot: ClusterSnapshot, pods: Sequence[Pod], *, options: ScaleUpOptions
                      ) -> dict[str, int]:
    """Per group, the nodes on their way (asked for, not Ready) that `pods` take, whole nodes counted: an atomic
    scale-up in flight brings them for its request only. No group grows. Call it with the pods that existing room
    did not take (`place_on_existing` first, and bound): the same simulation then takes none either."""
    if not pods:
        return {}
    base = without_pending(snapshot)
    view = replace(base, pods=(*base.pods, *pods))
    closed = {g.id: "holding nodes on their way" for g in snapshot.groups}
    simulation = simulate_scale_up(view, options=_own(options, unavailable=closed))
    taken = {step.node.name for step in simulation.steps if step.kind == "upcoming" and step.pod is not None}
    held: Counter[str] = Counter()
    for name in taken:
        group_id = name[len("upcoming/"):].rpartition("/")[0]
        held[group_id] += 1
    return dict(held)


def bind(snapshot: ClusterSnapshot, pods: Sequence[Pod], where: Mapping[str, str]) -> ClusterSnapshot:
    """The snapshot with those of `pods` placed in `where` bound there as running pods (load no one else takes)."""
    bound = tuple(replace(p, node_name=where[p.key], phase="Running", unschedulable=False)
                  for p in pods if p.key in where)
    return replace(snapshot, pods=(*snapshot.pods, *bound)) if bound else snapshot


def hold_nodes(snapshot: ClusterSnapshot, held: Mapping[str, int]) -> ClusterSnapshot:
    """The snapshot with `held` nodes per group taken out of both its size and its max: nodes on their way (or
    asked for) for a request, which no other pod may be planned onto, while the group's room to grow is kept.
    Held nodes are part of the group's size: more than it has is an error."""
    if not held:
        return snapshot
    groups = []
    for group in snapshot.groups:
        n = held.get(group.id, 0)
        if n <= 0:
            groups.append(group)
            continue
        if n > group.capacity:
            raise ValueError(f"group {group.id}: {n} node(s) held for requests, but its size is {group.capacity}")
        max_size = max(group.max_size - n, 0)
        groups.append(replace(group, capacity=group.capacity - n, max_size=max_size,
                              min_size=min(group.min_size, max_size)))
    return replace(snapshot, groups=tuple(groups))


def restore_targets(plan: ScaleUpPlan, held: Mapping[str, int]) -> ScaleUpPlan:
    """A plan made on `hold_nodes(snapshot, held)` in the real group's terms: its targets are absolute, so each
    increase of a group with held nodes gets them back (the nodes stay the request's; the increase is on top)."""
    if not held or not any(held.get(i.group_id, 0) for i in plan.increases):
        return plan
    return replace(plan, increases=tuple(
        replace(i, current_target=i.current_target + held.get(i.group_id, 0),
                new_target=i.new_target + held.get(i.group_id, 0)) for i in plan.increases))


def upcoming_by_group(snapshot: ClusterSnapshot) -> dict[str, int]:
    """Per group, the nodes asked for that have not registered Ready: an atomic request never counts on them
    (they are another scale-up's)."""
    present = present_by_group(snapshot.nodes)
    return {g.id: g.running_target - present.get(g.id, 0) for g in snapshot.groups
            if g.running_target - present.get(g.id, 0) > 0}


@dataclass(frozen=True, slots=True)
class AtomicPlan:
    """An atomic request's decision: `parts` (group id, nodes to add) to ask for at once; else `refused` (Failed)
    or `waiting` (Provisioned=False, tried again) with `reason` and `message` naming what binds."""

    parts: tuple[tuple[str, int], ...] = ()
    reason: str = ""
    message: str = ""
    refused: bool = False

    @property
    def waiting(self) -> bool:
        return not self.parts and not self.refused


def _simulate(snapshot: ClusterSnapshot, pods: Sequence[Pod], options: ScaleUpOptions) -> ScaleUpPlan:
    view = replace(snapshot, pods=(*snapshot.pods, *pods))
    return simulate_scale_up(view, options=_own(options)).plan


def _complete(plan: ScaleUpPlan, pods: Sequence[Pod]) -> bool:
    return not plan.unplaceable and not plan.ignored and (
        len(plan.absorbed) + sum(len(i.pods) for i in plan.increases) >= len(pods))


def _why(plan: ScaleUpPlan, group_id: str) -> str:
    """The planner's reason for `group_id` among an unplaceable pod's per-group reasons."""
    for why in plan.unplaceable.values():
        for part in why.split("; "):
            if part.startswith(f"{group_id}: "):
                return part[len(group_id) + 2:]
    return "no room left in this plan"


def _lifted(group: NodeGroup, pods: int) -> NodeGroup:
    return replace(group, max_size=max(group.max_size, group.running_target + pods))


def plan_atomic(snapshot: ClusterSnapshot, resolved: ResolvedRequest, *, options: ScaleUpOptions) -> AtomicPlan:
    """The whole set of the request's pods as one scale-up. `snapshot`: pending pods removed, booked pods bound,
    nodes on their way held (`hold_nodes(..., upcoming_by_group(...))`); `options`: the poll's (unavailable
    groups, quota, limits, expander).

    Each group is tried alone (or all together with MULTI_GROUP): a group qualifies when it holds every pod
    within its max, MAX_NODES_PER_SCALE_UP, the cluster-wide limits and its quota; the expander picks among those.
    When none qualifies, the groups are tried again with those limits lifted: a group that could then hold the
    set makes it a limit (QuotaExceeded, the limit named), or, if that group is only unavailable for now
    (backoff, a refused offering), a wait; no group at all makes it a shape no group has (CapacityIsNotFound).
    """
    pods = resolved.pods
    groups = sorted(snapshot.groups, key=lambda g: g.id)
    available = [g for g in groups if g.id not in options.unavailable]
    multi = resolved.request.parameters.get(MULTI_GROUP, "").lower() == "true"

    def alone(group_ids: Iterable[str]) -> dict[str, str]:
        keep = set(group_ids)
        return {**options.unavailable, **{g.id: _NOT_THIS_ONE for g in groups if g.id not in keep}}

    if multi:
        plan = _simulate(snapshot, pods, replace(options, unavailable=alone(g.id for g in available)))
        if _complete(plan, pods):
            return _chosen(plan)
    else:
        fits = [g.id for g in available
                if _complete(_simulate(snapshot, pods, replace(options, unavailable=alone([g.id]))), pods)]
        if fits:
            plan = _simulate(snapshot, pods, replace(options, unavailable=alone(fits)))
            if len(plan.increases) > 1 or not _complete(plan, pods):
                plan = _simulate(snapshot, pods, replace(options, unavailable=alone(fits[:1])))
            return _chosen(plan)
    # Nothing qualifies: which limit binds, or is it the shape?
    lifted_snapshot = replace(snapshot, groups=tuple(_lifted(g, len(pods)) for g in snapshot.groups))
    lifted_options = replace(options, quota=None, limits=ClusterLimits(), max_nodes_per_scale_up=max(len(pods), 1),
                             unavailable={})
    limited: list[str] = []  # no capacity freed would let the group hold the set: its max, its quota's limit
    busy: list[str] = []  # it could, once nodes in use (of any group in the same quotas) go
    blocked: list[str] = []
    for group in groups:
        lifted = _simulate(lifted_snapshot, pods, replace(lifted_options, unavailable={
            g.id: _NOT_THIS_ONE for g in groups if g.id != group.id}))
        if not _complete(lifted, pods):
            continue
        if group.id in options.unavailable:
            blocked.append(f"{group.id}: {options.unavailable[group.id]}")
            continue
        bound = _simulate(snapshot, pods, replace(options, unavailable=alone([group.id])))
        held = len(bound.absorbed) + sum(len(i.pods) for i in bound.increases)
        why = f"{group.id}: {_why(bound, group.id)} ({held} of {len(pods)} pod(s) fit)"
        (busy if _could_ever_hold(snapshot, group, pods, options) else limited).append(why)
    total = f"{len(pods)} pod(s)"
    if busy:
        # The limits could hold the set once capacity in use is freed: wait, as cluster-autoscaler does
        # (Provisioned=False is no failure to Kueue, which would otherwise retry and give the job up).
        return AtomicPlan(reason=CAPACITY_IS_NOT_FOUND,
                          message=f"the {total} do not fit what the limits leave now; tried again: " + "; ".join(busy))
    if limited:
        what = "no node group can hold" if not multi else "the node groups together cannot hold"
        return AtomicPlan(refused=True, reason=QUOTA_EXCEEDED,
                          message=f"{what} all {total}, even with none of their capacity in use; nothing was asked "
                                  "for: " + "; ".join(limited))
    if blocked:
        return AtomicPlan(reason=CAPACITY_IS_NOT_FOUND,
                          message=f"only unavailable groups can hold the {total}; tried again: " + "; ".join(blocked))
    return AtomicPlan(refused=True, reason=CAPACITY_IS_NOT_FOUND,
                      message=f"no node group's nodes can hold the {total} (their shape)")


def _could_ever_hold(snapshot: ClusterSnapshot, group: NodeGroup, pods: Sequence[Pod],
                     options: ScaleUpOptions) -> bool:
    """Whether `group`, empty in an empty cluster, could hold every pod within its max, MAX_NODES_PER_SCALE_UP,
    the cluster-wide limits and its quotas' limits (a quota whose limit the view lacks: what is left now plus what
    the snapshot's groups use of it): then the limit binds only through capacity in use, which scale-down or
    finished work gives back."""
    quota = options.quota
    if quota is not None:
        in_use: dict[tuple[str, str], int] = {}
        for g in snapshot.groups:
            for name in quota.pools(g):
                key = (g.location.strip().lower(), name)
                in_use[key] = in_use.get(key, 0) + g.capacity * quota.vcpus(g)
        quota = replace(quota, remaining={k: quota.limits.get(k, v + in_use.get(k, 0))
                                          for k, v in quota.remaining.items()})
    empty = replace(group, capacity=0, stopped=0, written_off=0, instances=())
    alone = replace(snapshot, nodes=(), pods=(), groups=(empty,))
    return _complete(_simulate(alone, pods, replace(options, quota=quota, unavailable={})), pods)


def _chosen(plan: ScaleUpPlan) -> AtomicPlan:
    parts = tuple((i.group_id, i.delta) for i in plan.increases if i.delta > 0)
    return AtomicPlan(parts=parts, reason=SCALE_UP_IN_PROGRESS,
                      message="scale-up of " + ", ".join(f"{g} +{n}" for g, n in parts) + " asked for at once")


# --- Conditions ----------------------------------------------------------------------------------


def _set(request: ProvisioningRequest, type_: str, status: str, reason: str, message: str, *,
         now: datetime) -> tuple[Condition, ...]:
    return with_condition(request.conditions, type_, status, reason, message, now=now,
                          generation=request.generation)


def accepted(request: ProvisioningRequest, *, now: datetime) -> ProvisioningRequest:
    """The request with Accepted=True, as cluster-autoscaler marks every request of its classes it processes."""
    return replace(request, conditions=_set(request, ACCEPTED, "True", ACCEPTED_REASON,
                                            "ProvisioningRequest is accepted by ClusterAutoscaler", now=now))


def invalid(request: ProvisioningRequest, problem: str, *, now: datetime) -> tuple[Condition, ...]:
    return _set(request, FAILED, "True", INVALID_REQUEST, problem, now=now)


def capacity_found(request: ProvisioningRequest, *, now: datetime, booking: timedelta) -> tuple[Condition, ...]:
    return _set(request, PROVISIONED, "True", CAPACITY_IS_FOUND,
                f"Capacity is found in the cluster (booked for {booking})", now=now)


def capacity_not_found(request: ProvisioningRequest, fit: int, total: int, *, now: datetime
                       ) -> tuple[Condition, ...]:
    """Provisioned=False, tried again next poll; Failed with noRetry ("true"), or once a check-capacity request
    has waited CHECK_CAPACITY_EXPIRY since its creation (CA's Expired)."""
    fits = f"{fit} of {total} pod(s) fit the nodes there are"
    if request.parameters.get(NO_RETRY, "").lower() == "true":
        return _set(request, FAILED, "True", CAPACITY_IS_NOT_FOUND, f"CA could not find requested capacity ({fits})",
                    now=now)
    if (request.class_name == CHECK_CAPACITY_CLASS and request.created_at is not None
            and now > request.created_at + CHECK_CAPACITY_EXPIRY):
        return _set(request, FAILED, "True", EXPIRED_REASON, "ProvisioningRequest is expired", now=now)
    return _set(request, PROVISIONED, "False", CAPACITY_IS_NOT_FOUND,
                f"Capacity is not found, CA will try to find it later ({fits})", now=now)


def atomic_decided(request: ProvisioningRequest, plan: AtomicPlan, *, now: datetime) -> tuple[Condition, ...]:
    """ScaleUpInProgress (asked), Failed (refused: nothing asked) or Provisioned=False (waiting)."""
    if plan.refused:
        return _set(request, FAILED, "True", plan.reason, plan.message, now=now)
    return _set(request, PROVISIONED, "False", plan.reason, plan.message, now=now)


def booking_expired(request: ProvisioningRequest, left: int, *, now: datetime) -> tuple[Condition, ...]:
    # As cluster-autoscaler: the booking ends when its time is over, whether or not every pod came.
    message = ("Capacity reservation time is expired" + (f"; {left} pod(s) never consumed it, their room is "
                                                          "released" if left else ""))
    return _set(request, BOOKING_EXPIRED, "True", BOOKING_EXPIRED_REASON, message, now=now)


def in_progress_since(request: ProvisioningRequest) -> datetime | None:
    """When this planner wrote ScaleUpInProgress, if that is the request's Provisioned condition (the time it
    wrote in the details, else the condition's transition time)."""
    condition = request.condition(PROVISIONED)
    if condition is None or condition.status != "False" or condition.reason != SCALE_UP_IN_PROGRESS:
        return None
    try:
        asked = datetime.fromisoformat(request.details.get(ASKED_AT_DETAIL, ""))
    except ValueError:
        return condition.since
    return asked if asked.tzinfo is not None else condition.since


def state_of(request: ProvisioningRequest) -> str:
    """One word for a request's state (the gauge, status lines): failed, expired, revoked, provisioned,
    in-progress, pending."""
    if request.is_true(FAILED):
        return "failed"
    if request.is_true(BOOKING_EXPIRED):
        return "expired"
    if is_final(request):
        return "revoked"
    if provisioned_since(request) is not None:
        return "provisioned"
    if in_progress_since(request) is not None:
        return "in-progress"
    return "pending"
