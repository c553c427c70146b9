"""cluster-autoscaler's status document, built from one poll's view of the cluster.

Pure module: no I/O, no clock (the poll passes `now`). `build_status` returns the
document as plain dicts and lists in the layout cluster-autoscaler 1.30+ writes to
`kube-system/cluster-autoscaler-status` (key `status`, YAML), so dashboards and
scripts that read CA's status read ours unchanged. `render_status` turns it into
that YAML text; `parse_previous` reads back the last one we wrote, because a
condition's `lastTransitionTime` is only known by comparing with it.

Counting follows CA's cluster state registry:
- registered: nodes of the group that exist in the API; ready, unready (NotReady
  for longer than the provision time), notStarted (NotReady and younger than it),
  beingDeleted (carrying the ToBeDeleted taint);
- unregistered: instances the scale set's target asks for that have no node yet;
  longUnregistered: those still missing after `max_node_provision_time`;
- Health is Unhealthy when more than 3 registered nodes, and more than 45% of
  them, are unready (CA's --ok-total-unready-count and --max-total-unready-percentage
  defaults).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from shared import yaml_text

from shared.engine.disruption_budgets import NodeBudget, budget_status, cluster_allowance, tag_problems
from shared.engine.scheduled_capacity import CapacityWindow, active_windows
from shared.engine.virtual_nodes import VirtualNodeStatus
from shared.domain import ClusterSnapshot, GroupState, Node, NodeGroup, Replacement

OK_TOTAL_UNREADY_COUNT = 3
MAX_TOTAL_UNREADY_PERCENTAGE = 45.0
_NEVER = "0001-01-01T00:00:00Z"


@dataclass(frozen=True, slots=True)
class DisruptionReport:
    """What the utilisation poll's replacement round found, for `clusterWide.disruption` and `plan`.

    `drifted`: each drifted node -> why it waits ("" once its replacement is admitted or under way);
    `candidates`: each consolidation candidate -> its verdict; `allowance`: reason -> the disruptions the
    cluster-wide budgets allowed as the round admitted proposals (None: unlimited). An empty `allowance` is
    computed from the budgets and the states here.
    """

    drifted: Mapping[str, str] = field(default_factory=dict)
    candidates: Mapping[str, str] = field(default_factory=dict)
    allowance: Mapping[str, int | None] = field(default_factory=dict)
    retry_at: Mapping[str, datetime] = field(default_factory=dict)  # given-up node -> when it may be proposed again


@dataclass(frozen=True, slots=True)
class StatusInputs:
    """What a poll knows beyond the snapshot."""

    group_states: Mapping[str, GroupState]  # by group id
    # node -> unneeded since; None when this poll did not plan scale-down (the pending poll), so the
    # utilization poll's scale-down conditions stand as it last wrote them.
    unneeded: Mapping[str, datetime] | None
    backoff: Mapping[str, str] = field(default_factory=dict)  # group id -> why (groups in backoff now)
    # Groups a scale-up was just decided for; None when this poll did not plan scale-ups (the
    # utilization poll), so that a Needed written by the pending poll stands until it decides again.
    scale_up_needed: frozenset[str] | None = frozenset()
    unschedulable_pods: int = 0
    max_node_provision_time: timedelta = timedelta(minutes=15)
    # Group id -> nodes due for removal but kept for want of a MAX_SCALE_DOWN_PARALLELISM slot; None (the
    # pending poll) keeps what the utilisation poll wrote.
    waiting_for_slots: Mapping[str, int] | None = None
    # The virtual nodes as the pending poll saw them; None (the utilisation poll, or none there) keeps what
    # was last written.
    virtual_nodes: VirtualNodeStatus | None = None
    # Offerings Azure refused lately, in words (engine.offerings.describe), and spot nodes lost this poll
    # (node -> how); None (the utilisation poll) keeps what the pending poll last wrote.
    unavailable_offerings: tuple[str, ...] | None = None
    spot_evictions: Mapping[str, str] | None = None
    # SCHEDULED_CAPACITY: a group in an active window shows it (`scheduledCapacity`, not in CA's layout).
    scheduled_windows: tuple[CapacityWindow, ...] = ()
    # Warm standby by group id (services.standby.StandbyReport.as_dict: target, why, stopped, refilling, disk
    # cost): shown as the group's `standby` (not in CA's layout). None keeps what was last written.
    standby: Mapping[str, Mapping[str, Any]] | None = None
    # CapacityBuffers by namespace/name (services.buffers.status_lines: replicas, ready, conditions), as the pending
    # poll last computed them: shown as `clusterWide.capacityBuffers` (not in CA's layout). None keeps what was written.
    capacity_buffers: Mapping[str, Mapping[str, Any]] | None = None
    # ProvisioningRequests of ours by namespace/name (services.provisioning.status_lines: class, state, pods,
    # consumed, bookedUntil, conditions): `clusterWide.provisioningRequests` (not in CA's layout). None keeps it.
    provisioning_requests: Mapping[str, Mapping[str, Any]] | None = None
    # The utilisation poll's replacement round (drift, consolidation), shown with the budgets' allowances and the
    # nodes being replaced as `clusterWide.disruption` (not in CA's layout). None (the pending poll) keeps it.
    disruption: DisruptionReport | None = None
    disruption_budgets: tuple[NodeBudget, ...] = ()  # DISRUPTION_BUDGETS, cluster-wide


@dataclass(frozen=True, slots=True)
class NodeCounts:
    total: int = 0
    ready: int = 0
    unready: int = 0
    not_started: int = 0
    being_deleted: int = 0
    unregistered: int = 0
    long_unregistered: int = 0

    def plus(self, other: NodeCounts) -> NodeCounts:
        return NodeCounts(*(a + b for a, b in zip(_astuple(self), _astuple(other), strict=True)))

    def as_doc(self) -> dict[str, Any]:
        return {
            "registered": {
                "total": self.total,
                "ready": self.ready,
                "notStarted": self.not_started,
                "unready": {"total": self.unready, "resourceUnready": 0},
                "beingDeleted": self.being_deleted,
            },
            "longUnregistered": self.long_unregistered,
            "unregistered": self.unregistered,
        }

    @property
    def healthy(self) -> bool:
        # CA: unhealthy only when both limits are exceeded, so one sick node in a small cluster is not an alarm.
        if self.unready <= OK_TOTAL_UNREADY_COUNT:
            return True
        return self.total == 0 or 100.0 * self.unready / self.total <= MAX_TOTAL_UNREADY_PERCENTAGE


def _astuple(counts: NodeCounts) -> tuple[int, ...]:
    return (counts.total, counts.ready, counts.unready, counts.not_started, counts.being_deleted,
            counts.unregistered, counts.long_unregistered)


def go_time(at: datetime) -> str:
    """Go's time.Time.String() in UTC, the form of CA's top-level `time` field."""
    at = at.astimezone(timezone.utc)
    return at.strftime("%Y-%m-%d %H:%M:%S.") + f"{at.microsecond:06d}000 +0000 UTC"


def rfc3339(at: datetime | None) -> str:
    if at is None:
        return _NEVER
    return at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def nodes_by_group(snapshot: ClusterSnapshot) -> dict[str, list[Node]]:
    """The snapshot's nodes by the id of the group their providerID names (other nodes left out)."""
    grouped: dict[str, list[Node]] = {}
    for node in snapshot.nodes:
        ref = node.instance
        if ref is not None:
            grouped.setdefault(ref.group_id, []).append(node)
    return grouped


def group_counts(group: NodeGroup, nodes: list[Node], state: GroupState, *, now: datetime,
                 max_node_provision_time: timedelta) -> NodeCounts:
    # A stopped (hibernated) instance's kept Node is neither unready nor registered capacity (services.hibernation).
    nodes = [n for n in nodes if n.instance is None or n.instance.instance_id not in state.stopped
             or n.name in state.removing]
    ready = sum(1 for n in nodes if n.ready)
    young = sum(1 for n in nodes if not n.ready and now - n.created_at < max_node_provision_time)
    unready = len(nodes) - ready - young
    # Deallocated instances stay in the scale set's capacity but are not meant to have nodes (the state says
    # which: the snapshot's `stopped` count may or may not have been filled in).
    expected = max(0, group.capacity - len(state.stopped))
    unregistered = max(0, expected - len(nodes))
    overdue = state.last_scale_up is None or now - state.last_scale_up > max_node_provision_time
    return NodeCounts(
        total=len(nodes), ready=ready, unready=unready, not_started=young,
        being_deleted=sum(1 for n in nodes if n.is_being_deleted),
        unregistered=unregistered, long_unregistered=unregistered if overdue else 0,
    )


def _condition(status: str, previous: Mapping[str, Any] | None, *, now: datetime, **extra: Any) -> dict[str, Any]:
    """A condition whose lastTransitionTime moves only when its status changes."""
    since = rfc3339(now)
    if previous and previous.get("status") == status and previous.get("lastTransitionTime"):
        since = str(previous["lastTransitionTime"])
    return {"status": status, **extra, "lastProbeTime": rfc3339(now), "lastTransitionTime": since}


def _scale_up_status(group_id: str, counts: NodeCounts, inputs: StatusInputs, before: Mapping[str, Any]) -> str:
    if group_id in inputs.backoff:
        return "Backoff"
    if counts.unregistered > 0 or counts.not_started > 0:
        return "InProgress"
    if inputs.scale_up_needed is None:
        needed = (before.get("scaleUp") or {}).get("status") == "Needed"
    else:
        needed = group_id in inputs.scale_up_needed
    return "Needed" if needed else "NoActivity"


def build_status(snapshot: ClusterSnapshot, inputs: StatusInputs, *, now: datetime,
                 previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The status document for this poll; `previous` (parse_previous) keeps transition times."""
    previous = previous or {}
    prev_wide = previous.get("clusterWide") or {}
    prev_groups = {g.get("name"): g for g in previous.get("nodeGroups") or [] if isinstance(g, dict)}
    by_group = nodes_by_group(snapshot)
    unneeded_by_group: dict[str, int] | None = None
    if inputs.unneeded is not None:
        unneeded_by_group = {gid: sum(1 for n in nodes if n.name in inputs.unneeded) for gid, nodes in by_group.items()}

    total = NodeCounts()
    groups: list[dict[str, Any]] = []
    scale_ups: list[str] = []
    windows = active_windows(snapshot.groups, inputs.scheduled_windows, now=now)
    for group in sorted(snapshot.groups, key=lambda g: g.name):
        state = inputs.group_states.get(group.id) or GroupState(group.id)
        counts = group_counts(group, by_group.get(group.id, []), state, now=now,
                              max_node_provision_time=inputs.max_node_provision_time)
        total = total.plus(counts)
        before = prev_groups.get(group.name) or {}
        up = _scale_up_status(group.id, counts, inputs, before)
        scale_ups.append(up)
        up_extra: dict[str, Any] = {}
        if up == "Backoff":
            up_extra["backoffInfo"] = {"errorCode": state.backoff_reason or "ScaleUpFailed",
                                       "errorMessage": inputs.backoff[group.id]}
        entry: dict[str, Any] = {
            "name": group.name,
            "health": _condition(
                "Healthy" if counts.healthy else "Unhealthy", before.get("health"), now=now,
                nodeCounts=counts.as_doc(), cloudProviderTarget=group.capacity,
                minSize=group.min_size, maxSize=group.max_size,
            ),
            "scaleUp": _condition(up, before.get("scaleUp"), now=now, **up_extra),
            "scaleDown": _scale_down(unneeded_by_group, group.id, before.get("scaleDown"), now=now,
                                     waiting=inputs.waiting_for_slots),
        }
        if group.id in windows:
            window = windows[group.id]
            entry["scheduledCapacity"] = {"minSize": window.min_size, "effectiveMinSize": window.effective_min,
                                          "until": window.until.isoformat(), "timeZone": window.zone}
            if window.standby is not None and window.standby_until is not None:  # a window's warm standby count
                entry["scheduledCapacity"].update(standby=window.standby, standbyUntil=window.standby_until.isoformat())
        standby = inputs.standby.get(group.id) if inputs.standby is not None else before.get("standby")
        if standby:
            entry["standby"] = dict(standby)
        groups.append(entry)

    if "InProgress" in scale_ups:
        wide_up = "InProgress"
    elif "Needed" in scale_ups:
        wide_up = "Needed"
    elif inputs.unschedulable_pods and "Backoff" in scale_ups:
        wide_up = "Backoff"
    else:
        wide_up = "NoActivity"
    wide: dict[str, Any] = {
        "health": _condition("Healthy" if total.healthy else "Unhealthy", prev_wide.get("health"), now=now,
                             nodeCounts=total.as_doc()),
        "scaleUp": _condition(wide_up, prev_wide.get("scaleUp"), now=now),
        "scaleDown": _scale_down(unneeded_by_group, None, prev_wide.get("scaleDown"), now=now,
                                 waiting=inputs.waiting_for_slots),
    }
    if snapshot.mapped_by or snapshot.unmapped:
        wide["nodeMapping"] = node_mapping_doc(snapshot)
    if inputs.virtual_nodes is not None:
        wide["virtualNodes"] = virtual_nodes_doc(inputs.virtual_nodes, now=now)
    elif prev_wide.get("virtualNodes") and inputs.scale_up_needed is None:
        wide["virtualNodes"] = prev_wide["virtualNodes"]  # the pending poll's, as it last wrote it
    if inputs.unavailable_offerings is not None:
        if inputs.unavailable_offerings:
            wide["unavailableOfferings"] = list(inputs.unavailable_offerings)
        if inputs.spot_evictions:
            wide["spotEvictions"] = [{"node": node, "how": how} for node, how in sorted(inputs.spot_evictions.items())]
    else:
        for key in ("unavailableOfferings", "spotEvictions"):  # the pending poll's, as it last wrote them
            if prev_wide.get(key):
                wide[key] = prev_wide[key]
    if inputs.capacity_buffers is not None:
        if inputs.capacity_buffers:
            wide["capacityBuffers"] = {key: dict(lines) for key, lines in sorted(inputs.capacity_buffers.items())}
    elif prev_wide.get("capacityBuffers"):
        wide["capacityBuffers"] = prev_wide["capacityBuffers"]  # the pending poll's, as it last wrote them
    if inputs.provisioning_requests is not None:
        if inputs.provisioning_requests:
            wide["provisioningRequests"] = {key: dict(lines)
                                            for key, lines in sorted(inputs.provisioning_requests.items())}
    elif prev_wide.get("provisioningRequests"):
        wide["provisioningRequests"] = prev_wide["provisioningRequests"]  # the pending poll's, as last written
    if inputs.disruption is not None:
        wide["disruption"] = disruption_doc(snapshot, inputs.group_states, inputs.disruption,
                                            inputs.disruption_budgets, now=now)
    elif prev_wide.get("disruption"):
        wide["disruption"] = prev_wide["disruption"]  # the utilisation poll's, as it last wrote it
    if snapshot.refused:  # marked for us, never acted on (e.g. an AKS pool autoscaled by AKS): say why
        wide["refusedNodeGroups"] = [{"name": gid, "reason": why} for gid, why in sorted(snapshot.refused.items())]
    return {"time": go_time(now), "autoscalerStatus": "Running", "clusterWide": wide, "nodeGroups": groups}


# The status lists this many drifted nodes and consolidation candidates each; the counts cover them all.
MAX_LISTED_DISRUPTION = 20


def replacements(states: Mapping[str, GroupState], *, given_up: bool = False) -> list[tuple[str, Replacement]]:
    """(group id, entry) of every node being replaced (`given_up`: of every given-up replacement's tombstone),
    by node name."""
    found = [(gid, entry) for gid, state in states.items() for entry in state.replacing.values()
             if (entry.given_up_at is not None) == given_up]
    return sorted(found, key=lambda item: item[1].node)


def replacement_savings(states: Mapping[str, GroupState]) -> float:
    """USD per hour the replacements under way save once done: each replacement's saving counted once, though
    every node it replaces carries it (nodes replaced together share one entry's figures)."""
    seen: dict[tuple[str, str, datetime, tuple[str, ...]], float] = {}
    for _, entry in replacements(states):
        together = tuple(sorted(entry.together or (entry.node,)))
        seen[(entry.action_id, entry.to_group, entry.since, together)] = entry.saving_per_hour
    return sum(seen.values())


def disruption_doc(snapshot: ClusterSnapshot, states: Mapping[str, GroupState], report: DisruptionReport,
                   cluster_budgets: tuple[NodeBudget, ...], *, now: datetime) -> dict[str, Any]:
    """`clusterWide.disruption`: budgets and what they allow now, nodes being replaced, drift, consolidation.

    Not in CA's layout (CA has no disruption budgets); readers of CA's status ignore it. A reason missing from
    `allowance` is not limited cluster-wide; group budgets are listed with their own allowances.
    """
    allowed = dict(report.allowance) or cluster_allowance(snapshot, states, cluster_budgets, now)
    doc: dict[str, Any] = {
        "allowance": {reason: value for reason, value in allowed.items() if value is not None},
        "budgets": [{"scope": line.scope, "budget": line.text, "active": line.active, "nodes": line.nodes,
                     "allowed": dict(line.allowed)}
                    for line in budget_status(snapshot, states, cluster_budgets, now)],
    }
    problems = tag_problems(snapshot.groups)
    if problems:
        doc["budgetProblems"] = [{"group": gid, "reason": why} for gid, why in sorted(problems.items())]
    replacing = replacements(states)
    if replacing:
        doc["replacing"] = [{"node": entry.node, "group": gid, "reason": entry.reason, "toGroup": entry.to_group,
                             "since": rfc3339(entry.since), "savingPerHour": round(entry.saving_per_hour, 4),
                             **({"detail": entry.detail} if entry.detail else {})} for gid, entry in replacing]
        doc["savingPerHour"] = round(replacement_savings(states), 4)
    tombstones = replacements(states, given_up=True)
    if tombstones:  # the node stays; it is not proposed again before retryAfter (when the poll reported it)
        doc["givenUp"] = [{"node": entry.node, "group": gid, "reason": entry.reason, "toGroup": entry.to_group,
                           "givenUpAt": rfc3339(entry.given_up_at or entry.since),
                           **({"retryAfter": rfc3339(report.retry_at[entry.node])}
                              if entry.node in report.retry_at else {})} for gid, entry in tombstones]
    if report.drifted:
        doc["drifted"] = {"count": len(report.drifted), "nodes": [
            {"node": name, "waiting": why} if why else {"node": name, "replacing": True}
            for name, why in sorted(report.drifted.items())[:MAX_LISTED_DISRUPTION]]}
    if report.candidates:
        doc["consolidation"] = {"count": len(report.candidates), "candidates": [
            {"node": name, "verdict": verdict}
            for name, verdict in sorted(report.candidates.items())[:MAX_LISTED_DISRUPTION]]}
    return doc


def virtual_nodes_doc(status: VirtualNodeStatus, *, now: datetime) -> dict[str, Any]:
    """The virtual nodes: ACI pods and cores of quota, whether closed and why, and a few pods' decisions.

    Not in CA's layout (CA leaves virtual nodes out); readers of CA's status ignore it.
    """
    return {
        "nodes": list(status.nodes), "pods": status.pods, "coresInUse": round(status.cores, 3),
        "coreQuota": status.quota_cores, "refusedByACI": status.failed, "toBackfill": status.backfill,
        "staying": status.stays, "state": "Closed" if status.closed else "Open", "reason": status.why,
        "decisions": [{"pod": key, "decision": why} for key, why in status.decisions.items()],
        "lastProbeTime": go_time(now),
    }


# The status lists this many unmanaged nodes by name; the count covers them all.
MAX_LISTED_UNMANAGED = 20


def node_mapping_doc(snapshot: ClusterSnapshot) -> dict[str, Any]:
    """How the poll mapped nodes to instances: nodes per method, and the nodes left alone with why.

    Not in CA's layout (CA maps by providerID only); readers of CA's status ignore it.
    """
    methods: dict[str, int] = {}
    for method in snapshot.mapped_by.values():
        methods[method] = methods.get(method, 0) + 1
    ambiguous = len(snapshot.ambiguous)
    doc: dict[str, Any] = {"mapped": dict(sorted(methods.items())),
                           "unmanaged": len(snapshot.unmapped) - ambiguous, "ambiguous": ambiguous}
    if snapshot.unmapped:
        # Ambiguous nodes first: they are errors to fix; an unmanaged node may be meant to be (a k3s server).
        order = sorted(snapshot.unmapped, key=lambda n: (n not in snapshot.ambiguous, n))
        doc["notManaged"] = [{"node": name, "reason": snapshot.unmapped[name]} for name in order[:MAX_LISTED_UNMANAGED]]
    return doc


def _scale_down(unneeded_by_group: Mapping[str, int] | None, group_id: str | None, previous: Mapping[str, Any] | None,
                *, now: datetime, waiting: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The scale-down condition of a group (or, for None, the cluster); kept as written when not known this poll.

    CA's condition says only whether there are candidates. Ours also says, in `maxParallelismReached`, how
    many candidates are due but wait for a MAX_SCALE_DOWN_PARALLELISM slot (present only when some do), so
    a scale-down that lags behind a large cluster is visible where operators look first. A reader of CA's
    layout ignores the extra field.
    """
    if unneeded_by_group is None:
        if previous and previous.get("status"):
            return dict(previous)
        return _condition("NoCandidates", None, now=now, candidates=0)
    candidates = sum(unneeded_by_group.values()) if group_id is None else unneeded_by_group.get(group_id, 0)
    extra: dict[str, Any] = {}
    blocked = sum((waiting or {}).values()) if group_id is None else (waiting or {}).get(group_id, 0)
    if blocked:
        extra["maxParallelismReached"] = blocked
    return _condition("CandidatesPresent" if candidates else "NoCandidates", previous, now=now, candidates=candidates,
                      **extra)


def render_status(doc: Mapping[str, Any]) -> str:
    """YAML in CA's key order (its Go structs' field order), block style like CA's output.

    yaml_text.block_dump writes safe_dump(doc, sort_keys=False, default_flow_style=False, width=1_000_000)'s
    text, several times faster: the document is written every poll.
    """
    return yaml_text.block_dump(dict(doc))


def parse_previous(text: str | None) -> dict[str, Any] | None:
    """The document last written, or None when absent or not ours to read (e.g. CA's legacy text format)."""
    if not text:
        return None
    try:
        doc = yaml_text.safe_load(text)
    except yaml_text.YAMLError:
        return None
    return doc if isinstance(doc, dict) else None


def last_activity(states: Mapping[str, GroupState]) -> dict[str, datetime]:
    """Latest scale-up, scale-down and failure across groups, for the ConfigMap's annotations."""
    found: dict[str, datetime] = {}
    for state in states.values():
        for key, at in (("scale-up", state.last_scale_up), ("scale-down", state.last_scale_down),
                        ("failure", state.last_failure)):
            if at is not None and (key not in found or at > found[key]):
                found[key] = at
    return found
