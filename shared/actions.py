"""Scale action messages: the versioned JSON that travels on the `scale-actions` queue.

Pure module: encoding, decoding and validation only, no I/O and no side effects.
The schema is documented in docs/scale-actions.md; change both together.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, Literal, Self

from shared import json_text

# Version 3 names each node's instance (`instance`): nodes of k3s and kubeadm clusters are mapped by
# hostname or IP, and their providerID (`k3s://<name>`, or none) does not name it. Version 2 names the
# nodes of a scale-down as a list (empty nodes are removed in bulk); version 1 messages, with one `node`
# and `provider_id`, are still read, and so are version 2's (the instance is their providerID's last segment).
SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
_ROUND_VERSIONS = (2, 3)  # rounds came with version 2 and are the same in 3
MAX_NODES_PER_ACTION = 100  # within what one deleteInstances call is given in practice
# Azure Storage's limit on a queue message: anything longer never came from our own send.
MAX_MESSAGE_CHARS = 64 * 1024
# Upper bounds on what our own polls ever write. Ids and names become Table keys and columns
# (1 KiB keys; 32 K characters a column) and log lines, so a longer value is refused, not truncated.
MAX_LENGTHS = {
    "id": 256,  # scale-down:<node>+<n>:<time>, a node name being at most 253
    "group": 256,  # <resource group (90)>/<scale set (64)>, escaped
    "step": 16,
    "reason": 1024,
    "node": 253,  # a Kubernetes node name is a DNS subdomain
    "provider_id": 512,  # azure:///subscriptions/<id>/resourceGroups/<90>/providers/.../<64>/virtualMachines/<id>
    "instance": 64,
}
# Integers become Table columns, stored as Edm.Int32 (the SDK refuses a Python int of 2**31 or more), and ARM
# capacities: no count or attempt of ours comes near, so a larger one never came from our own send.
MAX_INTEGER = 2**31 - 1
# A scale action is three levels deep (the message, `nodes`, a node): anything much deeper is not one.
MAX_DEPTH = 8

# Steps of each action kind, in order. A message names the step to run next;
# a step that must wait re-enqueues the same action at the same or next step.
SCALE_UP_STEPS = ("resize", "confirm")
SCALE_DOWN_STEPS = ("cordon", "drain", "delete", "confirm")
BACKFILL_STEPS = ("evict",)
REFILL_STANDBY_STEPS = ("grow", "registered", "park")
# The rollback comes last so that an action's progress only moves forward whichever step hands over to it.
ATOMIC_SCALE_UP_STEPS = ("check", "resize", "confirm", "ready", "rollback")

Kind = Literal["scale_up", "scale_down", "backfill", "refill_standby", "atomic_scale_up"]
KINDS = ("scale_up", "scale_down", "backfill", "refill_standby", "atomic_scale_up")
# The id of a ProvisioningRequest's atomic scale-up: `provreq:<request uid>`, then `provreq:<request uid>:<n>` for
# its n-th attempt (a write Azure refused for quota ends an attempt without failing the request), so that a poll
# finding the attempt in the ledger (in flight or done) does not plan it again.
ATOMIC_ID_PREFIX = "provreq:"
_ATOMIC_ATTEMPT = re.compile(r":([2-9]|[1-9][0-9]+)")


def atomic_id(request_uid: str, attempt: int = 1) -> str:
    """`provreq:<uid>` for the first attempt, `provreq:<uid>:<attempt>` after."""
    if attempt < 1:
        raise ValueError(f"an attempt is counted from 1, got {attempt}")
    return f"{ATOMIC_ID_PREFIX}{request_uid}" + (f":{attempt}" if attempt > 1 else "")
# Not an action: a request to plan the scale-down again soon (`ScaleDownRound`).
ROUND_KIND = "scale_down_round"


class InvalidAction(ValueError):
    """A queue message that must never be executed; the message says why."""


@dataclass(frozen=True, slots=True)
class RemovalTarget:
    """One node of a scale-down: the providerID it had when the removal was decided ("" for a kubeadm
    node without one) and the instance node mapping found it on."""

    node: str
    provider_id: str
    # Messages of versions 1 and 2 carry none: their providerID's last segment names the Uniform instance.
    instance: str = ""

    def __post_init__(self) -> None:
        if not self.instance:
            object.__setattr__(self, "instance", self.provider_id.rsplit("/", 1)[-1] if self.provider_id else "")

    @property
    def instance_id(self) -> str:
        return self.instance


@dataclass(frozen=True, slots=True, kw_only=True)
class _Action:
    """What every action kind carries: identity, life, the step to run next and how often it waited."""

    id: str
    group: str
    created_at: datetime
    expires_at: datetime
    step: str
    reason: str = ""
    attempt: int = 0  # how many times this step has been re-enqueued to wait
    step_started_at: datetime | None = None  # when the current step first ran; bounds how long it may wait
    # The decision's W3C trace context (docs/observability.md): every step carries it forward unchanged,
    # so the poll that decided and every step of the action are one trace. Empty when nothing traced.
    traceparent: str = ""
    tracestate: str = ""

    STEPS: ClassVar[tuple[str, ...]] = ()

    @property
    def is_first_step(self) -> bool:
        return self.step == self.STEPS[0]

    @property
    def progress(self) -> tuple[int, int]:
        """(step index, attempt): strictly increases along an action's life, so stale deliveries are recognisable."""
        return (self.STEPS.index(self.step), self.attempt)

    def at_step(self, step: str, *, now: datetime) -> Self:
        return replace(self, step=step, attempt=0, step_started_at=now)

    def retried(self) -> Self:
        return replace(self, attempt=self.attempt + 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleUp(_Action):
    """Grow one group to `target_size` running instances (starting deallocated ones first)."""

    kind: ClassVar[Literal["scale_up"]] = "scale_up"
    STEPS: ClassVar[tuple[str, ...]] = SCALE_UP_STEPS

    target_size: int  # the running size to reach
    # Set by the resize step, carried by the confirm step: what a failure returns to.
    from_size: int | None = None  # the capacity before
    resized_to: int | None = None  # the capacity its PATCH asked for (deallocated instances included)
    starting: tuple[str, ...] = ()  # deallocated instances it started, stopped again if that fails


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleDown(_Action):
    """Remove these nodes of one group: one drained node, or several empty ones in bulk."""

    kind: ClassVar[Literal["scale_down"]] = "scale_down"
    STEPS: ClassVar[tuple[str, ...]] = SCALE_DOWN_STEPS

    targets: tuple[RemovalTarget, ...]  # the nodes still to remove
    removal_kind: str = ""  # the planner's kind of removal (empty, drain, batch, unready), for telemetry

    def keeping(self, nodes: Sequence[str]) -> ScaleDown:
        """The same action with only these of its nodes left (the others were given back)."""
        return replace(self, targets=tuple(t for t in self.targets if t.node in nodes))

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(t.node for t in self.targets)


@dataclass(frozen=True, slots=True, kw_only=True)
class Backfill(_Action):
    """Move one pod off a virtual node: evict it, so that the scheduler, preferring VMs, places its replacement
    on the VM room the poll found. `group` is the virtual node's name; `to` is informational (the executor
    checks VM room afresh before it evicts)."""

    kind: ClassVar[Literal["backfill"]] = "backfill"
    STEPS: ClassVar[tuple[str, ...]] = BACKFILL_STEPS

    namespace: str
    pod: str
    uid: str
    to: str = ""

    @property
    def pod_key(self) -> str:
        return f"{self.namespace}/{self.pod}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RefillStandby(_Action):
    """Add up to `count` instances to one group's warm standby: create them, let their nodes register, then
    cordon and deallocate them (listed in GroupState.stopped).

    `count` is only an upper bound: the executor recomputes the shortfall from the group and its state.
    Set by the grow step and carried on: the capacity it grew from and the instances it created.
    """

    kind: ClassVar[Literal["refill_standby"]] = "refill_standby"
    STEPS: ClassVar[tuple[str, ...]] = REFILL_STANDBY_STEPS

    count: int
    from_capacity: int | None = None
    instances: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AtomicScaleUp(_Action):
    """All the nodes a ProvisioningRequest of the atomic class needs, asked for at once, or none: every instance it
    added is deleted again when Azure grants only part (shared.services.atomic_steps).

    `group` is the first part's group. The message carries the decision only: what the resize added is recorded
    in the ledger entry (our state) before the resize, never read back from a message.
    """

    kind: ClassVar[Literal["atomic_scale_up"]] = "atomic_scale_up"
    STEPS: ClassVar[tuple[str, ...]] = ATOMIC_SCALE_UP_STEPS

    request: str  # namespace/name
    request_uid: str
    parts: tuple[tuple[str, int], ...]  # (group id, nodes to add): one part, or several where the request allows

    @property
    def nodes_asked(self) -> int:
        return sum(count for _, count in self.parts)


# A scale action is one of the kinds, told apart by type (and by `kind` on the wire).
ScaleAction = ScaleUp | ScaleDown | Backfill | RefillStandby | AtomicScaleUp


def new_scale_up(
    *, action_id: str, group: str, target_size: int, now: datetime, ttl: timedelta, reason: str = "",
    traceparent: str = "", tracestate: str = "",
) -> ScaleAction:
    return ScaleUp(
        id=action_id,
        group=group,
        created_at=now,
        expires_at=now + ttl,
        step=SCALE_UP_STEPS[0],
        reason=reason,
        target_size=target_size,
        traceparent=traceparent,
        tracestate=tracestate,
    )


_ID_TIME = "%Y%m%dT%H%M%SZ"


def new_backfill(*, node: str, namespace: str, pod: str, uid: str, to: str, now: datetime, ttl: timedelta,
                 reason: str = "", traceparent: str = "", tracestate: str = "") -> Backfill:
    return Backfill(
        id=f"backfill:{namespace}/{pod}:{now.astimezone(timezone.utc).strftime(_ID_TIME)}",
        group=node, created_at=now, expires_at=now + ttl, step=BACKFILL_STEPS[0], reason=reason,
        namespace=namespace, pod=pod, uid=uid, to=to, traceparent=traceparent, tracestate=tracestate,
    )


def new_refill_standby(*, group: str, count: int, now: datetime, ttl: timedelta, reason: str = "",
                       traceparent: str = "", tracestate: str = "") -> RefillStandby:
    """One refill of `group`'s standby; its id (group and decision time) makes a repeated decision one action."""
    if not 1 <= count <= MAX_NODES_PER_ACTION:
        raise ValueError(f"a standby refill adds 1 to {MAX_NODES_PER_ACTION} instances, not {count}")
    return RefillStandby(
        id=f"refill-standby:{group}:{now.astimezone(timezone.utc).strftime(_ID_TIME)}",
        group=group, created_at=now, expires_at=now + ttl, step=REFILL_STANDBY_STEPS[0], reason=reason,
        count=count, traceparent=traceparent, tracestate=tracestate,
    )


def new_atomic_scale_up(*, request: str, request_uid: str, parts: Sequence[tuple[str, int]], now: datetime,
                        ttl: timedelta, reason: str = "", traceparent: str = "", tracestate: str = "",
                        attempt: int = 1) -> AtomicScaleUp:
    """An attempt at a ProvisioningRequest's atomic scale-up; its id (`atomic_id`) makes every poll's decision for
    that attempt one action. Raises ValueError naming what is wrong with the request or its parts."""
    _check_atomic(request=request, request_uid=request_uid, parts=parts, error=ValueError)
    return AtomicScaleUp(
        id=atomic_id(request_uid, attempt), group=parts[0][0], created_at=now, expires_at=now + ttl,
        step=ATOMIC_SCALE_UP_STEPS[0], reason=reason, request=request, request_uid=request_uid,
        parts=tuple((group, count) for group, count in parts), traceparent=traceparent, tracestate=tracestate,
    )


def scale_up_id(group: str, target: int, *, now: datetime, why: str = "") -> str:
    """`scale-up:<group>:<target>:<time>`, with `:<why>` for a scale-up made for something other than pending
    pods (`replace`, `drift`): the poll time makes it unique per decision."""
    return f"scale-up:{group}:{target}:{now.astimezone(timezone.utc).strftime(_ID_TIME)}" + (f":{why}" if why else "")


def scale_down_id(nodes: Sequence[str], *, now: datetime) -> str:
    """`scale-down:<node>:<time>`, or `scale-down:<first node>+<n more>:<time>` for a bulk removal."""
    more = f"+{len(nodes) - 1}" if len(nodes) > 1 else ""
    return f"scale-down:{nodes[0]}{more}:{now.astimezone(timezone.utc).strftime(_ID_TIME)}"


def decided_at(action_id: str) -> datetime | None:
    """When the poll decided a scale-down, from its id (our own: read from our state, never a message)."""
    try:
        return datetime.strptime(action_id.rsplit(":", 1)[-1], _ID_TIME).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def new_scale_down(
    *,
    action_id: str,
    group: str,
    targets: Sequence[RemovalTarget],
    now: datetime,
    ttl: timedelta,
    reason: str = "",
    removal_kind: str = "",
    traceparent: str = "",
    tracestate: str = "",
) -> ScaleAction:
    if not targets:
        raise ValueError("a scale-down needs at least one node")
    return ScaleDown(
        id=action_id,
        group=group,
        created_at=now,
        expires_at=now + ttl,
        step=SCALE_DOWN_STEPS[0],
        reason=reason,
        targets=tuple(targets),
        removal_kind=removal_kind,
        traceparent=traceparent,
        tracestate=tracestate,
    )


@dataclass(frozen=True, slots=True)
class ScaleDownRound:
    """A request to run the utilisation poll again before its next scheduled time.

    The poll sends one while nodes wait for a MAX_SCALE_DOWN_PARALLELISM slot, so a slot freed
    by a committed delete is handed out within SCALE_DOWN_ROUND_INTERVAL, not at the next tick.
    It carries no decision: the round re-reads everything, and only the one our state names as
    pending runs (`shared.services.rounds`), so a forged or repeated one is dropped.
    """

    id: str
    created_at: datetime
    expires_at: datetime


def new_scale_down_round(*, now: datetime, ttl: timedelta) -> ScaleDownRound:
    return ScaleDownRound(id=f"{ROUND_KIND}:{now:%Y%m%dT%H%M%S.%fZ}", created_at=now, expires_at=now + ttl)


def encode_message(message: ScaleAction | ScaleDownRound) -> str:
    if isinstance(message, (ScaleUp, ScaleDown, Backfill, RefillStandby, AtomicScaleUp)):
        return encode_action(message)
    body = {"version": SCHEMA_VERSION, "kind": ROUND_KIND, "id": message.id,
            "created_at": _iso(message.created_at), "expires_at": _iso(message.expires_at)}
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def decode_message(text: str | bytes) -> ScaleAction | ScaleDownRound:
    """A scale action or a scale-down round; raises InvalidAction naming what is wrong."""
    body = _load(text)
    if body.get("kind") != ROUND_KIND:
        return _action_of(body)
    if body.get("version") not in _ROUND_VERSIONS or isinstance(body.get("version"), bool):
        raise InvalidAction(f"unknown schema version {body.get('version')!r} for a {ROUND_KIND} "
                            f"(this executor reads {', '.join(map(str, _ROUND_VERSIONS))})")
    extra = sorted(set(body) - {"version", "kind", "id", "created_at", "expires_at"})
    if extra:
        raise InvalidAction(f"a {ROUND_KIND} has no field(s) {', '.join(extra)}")
    if not isinstance(body.get("id"), str) or not body["id"]:
        raise InvalidAction("missing field(s): id")
    _check_length("id", body["id"], MAX_LENGTHS["id"])
    created_at, expires_at = _parse_time(body, "created_at"), _parse_time(body, "expires_at")
    if expires_at < created_at:
        raise InvalidAction("expires_at is before created_at")
    return ScaleDownRound(id=body["id"], created_at=created_at, expires_at=expires_at)


def encode_action(action: ScaleAction) -> str:
    body: dict[str, Any] = {
        "version": SCHEMA_VERSION,
        "id": action.id,
        "kind": action.kind,
        "group": action.group,
        "step": action.step,
        "created_at": _iso(action.created_at),
        "expires_at": _iso(action.expires_at),
        "reason": action.reason,
        "attempt": action.attempt,
    }
    if action.step_started_at is not None:
        body["step_started_at"] = _iso(action.step_started_at)
    if action.traceparent:
        body["traceparent"] = action.traceparent
        if action.tracestate:
            body["tracestate"] = action.tracestate
    if isinstance(action, AtomicScaleUp):
        body["request"] = {"name": action.request, "uid": action.request_uid}
        body["parts"] = [{"group": group, "count": count} for group, count in action.parts]
    elif isinstance(action, Backfill):
        body["pod"] = {"namespace": action.namespace, "name": action.pod, "uid": action.uid}
        if action.to:
            body["to"] = action.to
    elif isinstance(action, RefillStandby):
        body["count"] = action.count
        if action.from_capacity is not None:
            body["from_capacity"] = action.from_capacity
        if action.instances:
            body["instances"] = list(action.instances)
    elif isinstance(action, ScaleUp):
        body["target_size"] = action.target_size
        if action.from_size is not None:
            body["from_size"] = action.from_size
        if action.resized_to is not None:
            body["resized_to"] = action.resized_to
        if action.starting:
            body["start_instances"] = list(action.starting)
    else:
        body["nodes"] = [{"name": t.node, "instance": t.instance_id, "provider_id": t.provider_id}
                         for t in action.targets]
        if action.removal_kind:
            body["removal_kind"] = action.removal_kind
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def decode_action(text: str | bytes) -> ScaleAction:
    """Parse and validate one message. Raises InvalidAction naming what is wrong.

    Expiry is not checked here: whether an expired message may still run depends
    on whether the action already started (see the executor).
    """
    return _action_of(_load(text))


def _load(text: str | bytes) -> dict[str, Any]:
    if len(text) > MAX_MESSAGE_CHARS:
        raise InvalidAction(f"message is {len(text)} characters long; a queue message holds at most {MAX_MESSAGE_CHARS}")
    try:
        body = json_text.loads(text, max_depth=MAX_DEPTH)
    except json_text.TooDeep as exc:
        raise InvalidAction(f"message is nested too deeply to be an action: {exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidAction(f"message is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidAction("message is not a JSON object")
    _check_encodable(body, "")
    return body


def _check_encodable(value: Any, where: str) -> None:
    """Refuse text that is not valid Unicode (a lone surrogate, which JSON's `\\ud800` escape can carry).

    Ids and names become Table keys and Kubernetes API paths, and reasons ledger columns: the Table SDK and the
    kubernetes client fail on such text deep inside a step, with no ledger row. Refused here, the message gets one.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidAction(f"field {where or 'message'!r} is not valid Unicode text "
                                f"({exc.reason} at character {exc.start})") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_encodable(key, f"{where}.<key>" if where else "<key>")
            _check_encodable(item, f"{where}.{key}" if where else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_encodable(item, f"{where}[{index}]")


def _integer(body: dict[str, Any], name: str, *, minimum: int, default: int | None = None) -> int | None:
    """`body[name]` as a whole number from `minimum` to MAX_INTEGER (`default` when absent); InvalidAction otherwise."""
    value = body.get(name, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= MAX_INTEGER:
        what = "a positive integer" if minimum == 1 else "a non-negative integer" if minimum == 0 else f"at least {minimum}"
        raise InvalidAction(f"{name} must be {what} of at most {MAX_INTEGER}, got {repr(value)[:40]}")
    return value


def _action_of(body: dict[str, Any]) -> ScaleAction:
    version = body.get("version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise InvalidAction(f"unknown schema version {version!r} (this executor reads "
                            f"{', '.join(map(str, READABLE_VERSIONS))})")
    kind = body.get("kind")
    if kind not in KINDS:
        raise InvalidAction(f"unknown kind {kind!r} (expected one of {', '.join(map(repr, KINDS))})")
    if kind == "backfill":
        return _backfill_of(body)
    if kind == "refill_standby":
        return _refill_standby_of(body)
    if kind == "atomic_scale_up":
        return _atomic_scale_up_of(body)
    steps = SCALE_UP_STEPS if kind == "scale_up" else SCALE_DOWN_STEPS
    required = ["id", "group", "step", "created_at", "expires_at"]
    if kind == "scale_up":
        required.append("target_size")
    else:
        required += ["node", "provider_id"] if version == 1 else ["nodes"]
    missing = [name for name in required if body.get(name) in (None, "", [])]
    if missing:
        raise InvalidAction(f"missing field(s): {', '.join(missing)}")
    for name in ("id", "group", "step", "reason", "node", "provider_id"):
        if name in body and not isinstance(body[name], str):
            raise InvalidAction(f"field {name!r} must be a string")
        if name in body:
            _check_length(name, body[name], MAX_LENGTHS[name])
    targets: tuple[RemovalTarget, ...] = ()
    if kind == "scale_down":
        targets = ((RemovalTarget(body["node"], body["provider_id"]),) if version == 1
                   else _parse_targets(body["nodes"], version=version))
    if body["step"] not in steps:
        raise InvalidAction(f"unknown step {body['step']!r} for {kind} (expected one of {', '.join(steps)})")
    common = _common_fields(body)
    target_size = _integer(body, "target_size", minimum=1) if kind == "scale_up" else None
    from_size = _integer(body, "from_size", minimum=0)
    resized_to = _integer(body, "resized_to", minimum=1)
    starting = body.get("start_instances", [])
    if not isinstance(starting, list) or not all(isinstance(i, str) and i for i in starting):
        raise InvalidAction("start_instances must be a list of instance ids (strings)")
    if len(starting) > MAX_NODES_PER_ACTION:
        raise InvalidAction(f"start_instances names {len(starting)} instances; at most {MAX_NODES_PER_ACTION}")
    for index, instance in enumerate(starting):
        _check_length(f"start_instances[{index}]", instance, MAX_LENGTHS["instance"])
    if kind == "scale_down":
        return ScaleDown(targets=targets, removal_kind=_informational(body, "removal_kind", _REMOVAL_KIND), **common)
    assert target_size is not None
    return ScaleUp(target_size=target_size, from_size=from_size, resized_to=resized_to, starting=tuple(starting),
                   **common)


_BACKFILL_FIELDS = {"version", "kind", "id", "group", "step", "created_at", "expires_at", "reason", "attempt",
                    "step_started_at", "traceparent", "tracestate", "pod", "to"}
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _backfill_of(body: dict[str, Any]) -> Backfill:
    """A backfill message (version 3 only: the kind came with it)."""
    _check_v3_kind(body, "backfill", fields=_BACKFILL_FIELDS, required=("pod",), text=("to",))
    _check_length("id", body["id"], MAX_LENGTHS["id"])
    _check_length("group", body["group"], MAX_LENGTHS["node"])
    _check_length("reason", body.get("reason", ""), MAX_LENGTHS["reason"])
    _check_length("to", body.get("to", ""), MAX_LENGTHS["node"])
    _check_step(body, "backfill", BACKFILL_STEPS)
    pod = body["pod"]
    if not isinstance(pod, dict) or set(pod) != {"namespace", "name", "uid"}:
        raise InvalidAction("pod must be an object with exactly 'namespace', 'name' and 'uid'")
    if not all(isinstance(pod[k], str) and pod[k] for k in pod):
        raise InvalidAction("pod: 'namespace', 'name' and 'uid' must be non-empty strings")
    for part in ("namespace", "name"):
        if not _DNS_SUBDOMAIN.match(pod[part]):
            raise InvalidAction(f"pod.{part} {pod[part][:80]!r} is not a Kubernetes name")
    _check_length("pod.uid", pod["uid"], 64)
    return Backfill(namespace=pod["namespace"], pod=pod["name"], uid=pod["uid"], to=body.get("to", ""),
                    **_common_fields(body))


def _check_v3_kind(body: dict[str, Any], kind: str, *, fields: set[str], required: tuple[str, ...],
                   text: tuple[str, ...] = ()) -> None:
    """The envelope every kind after version 3 shares: the version, no unknown field, the common required fields
    and `required`, and text fields (the common ones and `text`) that are strings."""
    if body.get("version") != 3:
        raise InvalidAction(f"a {kind} is a version 3 message")
    extra = sorted(set(body) - fields)
    if extra:
        raise InvalidAction(f"a {kind} has no field(s) {', '.join(extra)}")
    missing = [name for name in ("id", "group", "step", "created_at", "expires_at", *required)
               if body.get(name) in (None, "")]
    if missing:
        raise InvalidAction(f"missing field(s): {', '.join(missing)}")
    for name in ("id", "group", "step", "reason", *text):
        if name in body and not isinstance(body[name], str):
            raise InvalidAction(f"field {name!r} must be a string")


def _check_step(body: dict[str, Any], kind: str, steps: Sequence[str]) -> None:
    if body["step"] not in steps:
        raise InvalidAction(f"unknown step {body['step']!r} for {kind} (expected one of {', '.join(steps)})")


_REFILL_FIELDS = {"version", "kind", "id", "group", "step", "created_at", "expires_at", "reason", "attempt",
                  "step_started_at", "traceparent", "tracestate", "count", "from_capacity", "instances"}


def _refill_standby_of(body: dict[str, Any]) -> RefillStandby:
    """A standby refill message (version 3 only: the kind came after it)."""
    _check_v3_kind(body, "refill_standby", fields=_REFILL_FIELDS, required=("count",))
    for name in ("id", "group", "step", "reason"):
        if name in body:
            _check_length(name, body[name], MAX_LENGTHS[name])
    _check_step(body, "refill_standby", REFILL_STANDBY_STEPS)
    count = _integer(body, "count", minimum=1)
    assert count is not None
    if count > MAX_NODES_PER_ACTION:
        raise InvalidAction(f"count is {count}; a refill adds at most {MAX_NODES_PER_ACTION} instances")
    from_capacity = _integer(body, "from_capacity", minimum=0)
    instances = body.get("instances", [])
    if not isinstance(instances, list) or not all(isinstance(i, str) and i for i in instances):
        raise InvalidAction("instances must be a list of instance ids (non-empty strings)")
    if len(instances) > count:
        raise InvalidAction(f"instances names {len(instances)} instances; the refill adds at most its count {count}")
    if len(set(instances)) != len(instances):
        raise InvalidAction("instances names an instance twice")
    for index, instance in enumerate(instances):
        _check_length(f"instances[{index}]", instance, MAX_LENGTHS["instance"])
    if instances and from_capacity is None:
        raise InvalidAction("instances without from_capacity: only the grow step names them, and it sets both")
    return RefillStandby(count=count, from_capacity=from_capacity, instances=tuple(instances), **_common_fields(body))


_ATOMIC_FIELDS = {"version", "kind", "id", "group", "step", "created_at", "expires_at", "reason", "attempt",
                  "step_started_at", "traceparent", "tracestate", "request", "parts"}
_REQUEST_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")  # a metadata.uid (a UUID in practice)


def _atomic_scale_up_of(body: dict[str, Any]) -> AtomicScaleUp:
    """An atomic scale-up message (version 3 only: the kind came after it)."""
    _check_v3_kind(body, "atomic_scale_up", fields=_ATOMIC_FIELDS, required=("request", "parts"))
    for name in ("id", "group", "step", "reason"):
        if name in body:
            _check_length(name, body[name], MAX_LENGTHS[name])
    _check_step(body, "atomic_scale_up", ATOMIC_SCALE_UP_STEPS)
    request = body["request"]
    if not isinstance(request, dict) or set(request) != {"name", "uid"}:
        raise InvalidAction("request must be an object with exactly 'name' (namespace/name) and 'uid'")
    raw_parts = body["parts"]
    if not isinstance(raw_parts, list) or not raw_parts:
        raise InvalidAction("parts must be a non-empty list of {'group', 'count'} objects")
    parts = []
    for index, part in enumerate(raw_parts):
        if not isinstance(part, dict) or set(part) != {"group", "count"}:
            raise InvalidAction(f"parts[{index}] must be an object with exactly 'group' and 'count'")
        if not isinstance(part["group"], str) or not part["group"]:
            raise InvalidAction(f"parts[{index}].group must be a non-empty string")
        _check_length(f"parts[{index}].group", part["group"], MAX_LENGTHS["group"])
        count = _integer(part, "count", minimum=1)
        assert count is not None
        parts.append((part["group"], count))
    _check_atomic(request=request["name"], request_uid=request["uid"], parts=parts, error=InvalidAction)
    base = f"{ATOMIC_ID_PREFIX}{request['uid']}"
    if not (body["id"] == base or (body["id"].startswith(base) and _ATOMIC_ATTEMPT.fullmatch(body["id"][len(base):]))):
        raise InvalidAction(f"id {body['id'][:80]!r} is not {ATOMIC_ID_PREFIX}<request uid>[:<attempt from 2>]")
    if body["group"] != parts[0][0]:
        raise InvalidAction(f"group {body['group'][:80]!r} is not the first part's group {parts[0][0][:80]!r}")
    return AtomicScaleUp(request=request["name"], request_uid=request["uid"], parts=tuple(parts),
                         **_common_fields(body))


def _check_atomic(*, request: object, request_uid: object, parts: Sequence[tuple[str, int]],
                  error: type[ValueError]) -> None:
    """What an atomic scale-up must be, for the constructor (ValueError) and the decoder (InvalidAction)."""
    if not isinstance(request, str) or request.count("/") != 1 or not all(
            _DNS_SUBDOMAIN.match(part) for part in request.split("/")):
        raise error(f"request {str(request)[:80]!r} is not <namespace>/<name> of Kubernetes names")
    if not isinstance(request_uid, str) or not _REQUEST_UID.match(request_uid):
        raise error(f"request uid {str(request_uid)[:80]!r} is not a Kubernetes uid")
    if not parts:
        raise error("an atomic scale-up needs at least one (group, count) part")
    groups = [group for group, _ in parts]
    if len(set(groups)) != len(groups):
        raise error("an atomic scale-up names a group twice in its parts")
    for group, count in parts:
        if not isinstance(group, str) or not group:
            raise error(f"a part's group must be a non-empty string, got {group!r}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise error(f"group {group!r}: a part adds at least one node, not {count!r}")
    total = sum(count for _, count in parts)
    if total > MAX_NODES_PER_ACTION:
        raise error(f"an atomic scale-up adds at most {MAX_NODES_PER_ACTION} nodes, not {total}")


def _common_fields(body: dict[str, Any]) -> dict[str, Any]:
    """What every action kind carries (`_Action`), validated: identity, life, step, attempt, trace context."""
    created_at = _parse_time(body, "created_at")
    expires_at = _parse_time(body, "expires_at")
    if expires_at < created_at:
        raise InvalidAction("expires_at is before created_at")
    attempt = _integer(body, "attempt", minimum=0, default=0)
    step_started_at = _parse_time(body, "step_started_at") if body.get("step_started_at") is not None else None
    return dict(id=body["id"], group=body["group"], created_at=created_at, expires_at=expires_at, step=body["step"],
                reason=body.get("reason", ""), attempt=attempt, step_started_at=step_started_at,
                **_trace_context(body))


# Informational fields (telemetry only) are never a reason to reject an action: malformed, they are dropped.
_REMOVAL_KIND = re.compile(r"^[a-z][a-z_-]{0,31}$")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
_MAX_TRACESTATE = 512  # W3C: at most 32 list members, 512 characters is what propagators must accept


def _informational(body: dict[str, Any], name: str, pattern: re.Pattern[str]) -> str:
    value = body.get(name)
    return value if isinstance(value, str) and pattern.match(value) else ""


def _trace_context(body: dict[str, Any]) -> dict[str, str]:
    traceparent = _informational(body, "traceparent", _TRACEPARENT)
    tracestate = body.get("tracestate")
    if not traceparent or not isinstance(tracestate, str) or len(tracestate) > _MAX_TRACESTATE:
        tracestate = ""
    return {"traceparent": traceparent, "tracestate": tracestate}


def _quoted_names(names: Sequence[str]) -> str:
    quoted = [f"'{n}'" for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"


def _parse_targets(raw: Any, *, version: int) -> tuple[RemovalTarget, ...]:
    if not isinstance(raw, list):
        raise InvalidAction("field 'nodes' must be a list")
    if len(raw) > MAX_NODES_PER_ACTION:
        raise InvalidAction(f"field 'nodes' names {len(raw)} nodes; at most {MAX_NODES_PER_ACTION} per action")
    # Version 3 adds the instance; a kubeadm node's providerID may be empty, never its name or instance.
    keys, required = (("name", "instance", "provider_id"), ("name", "instance")) if version >= 3 else (
        ("name", "provider_id"), ("name", "provider_id"))
    targets = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) != set(keys):
            raise InvalidAction(f"nodes[{index}] must be an object with exactly {_quoted_names(keys)}")
        if not all(isinstance(item[k], str) for k in keys) or not all(item[k] for k in required):
            raise InvalidAction(f"nodes[{index}]: {_quoted_names(keys)} must be strings, "
                                f"{_quoted_names(required)} non-empty")
        _check_length(f"nodes[{index}].name", item["name"], MAX_LENGTHS["node"])
        _check_length(f"nodes[{index}].provider_id", item["provider_id"], MAX_LENGTHS["provider_id"])
        if version >= 3:
            _check_length(f"nodes[{index}].instance", item["instance"], MAX_LENGTHS["instance"])
        targets.append(RemovalTarget(item["name"], item["provider_id"], item.get("instance", "")))
    names = [t.node for t in targets]
    if len(set(names)) != len(names):
        raise InvalidAction("field 'nodes' names a node twice")
    return tuple(targets)


def _check_length(name: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise InvalidAction(f"field {name!r} is {len(value)} characters long; at most {limit}")


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _parse_time(body: dict[str, Any], name: str) -> datetime:
    raw = body[name]
    if not isinstance(raw, str):
        raise InvalidAction(f"field {name!r} must be an ISO 8601 string")
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidAction(f"field {name!r} is not an ISO 8601 time: {raw!r}") from exc
    if moment.tzinfo is None:
        raise InvalidAction(f"field {name!r} has no time zone: {raw!r}")
    return moment
