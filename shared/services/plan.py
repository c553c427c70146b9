"""What the autoscaler would do now, without doing any of it: the `plan` command's service.

Both polls run as they do in Azure, on ports that keep every change to themselves:
state writes land in memory over the real store's reads (or over nothing), actions are
collected instead of enqueued, events are dropped, and DRY_RUN is forced so the polls
neither taint nodes nor write the status ConfigMap. What is read is real: the cluster,
the scale sets, measured usage and, when there is one, the state table (which is
what makes "unneeded for 10 minutes" answerable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from shared.actions import AtomicScaleUp, Backfill, ScaleAction, ScaleDown, ScaleDownRound, ScaleUp
from shared.domain import DISRUPTION_REASONS, VIRTUAL_NODE, NodeGroup
from shared.engine.buffers import buffer_of
from shared.engine.status import disruption_doc
from shared.engine.offerings import describe
from shared.engine.scale_down import group_rules
from shared.options import scale_down_options
from shared.ports import ClusterEvent, Ports, StateStore
from shared.services.memory_state import MemoryStateStore
from shared.services.buffers import status_lines
from shared.services.pending import PendingPollResult, run_pending_poll
from shared.services.standby_pools import pooled_group_ids
from shared.services.standby import StandbyReport, standby_report, with_standby_room
from shared.services.status import disruption_report
from shared.services.utilization import UtilizationPollResult, run_utilization_poll
from shared.settings import Settings


class CollectingQueue:
    def __init__(self) -> None:
        self.actions: list[ScaleAction] = []

    def send(self, action: ScaleAction | ScaleDownRound, *, delay: timedelta = timedelta(0)) -> None:
        if isinstance(action, ScaleAction):  # a plan is one pass: a round asked for is not part of it
            self.actions.append(action)

    def send_poison(self, text: str) -> None:  # the polls never poison; present for the protocol
        raise AssertionError("a poll tried to poison a message")


class DroppedEvents:
    def emit(self, event: ClusterEvent) -> None:
        """Events describe decisions acted on; a plan acts on none."""


@dataclass(frozen=True, slots=True)
class PlanReport:
    at: datetime
    with_state: bool
    pending: PendingPollResult
    utilization: UtilizationPollResult
    actions: tuple[ScaleAction, ...]
    previous_unneeded: Mapping[str, datetime]
    unneeded_time: timedelta  # SCALE_DOWN_UNNEEDED_TIME: for a node whose group's own time is not known
    # Per node, its group's unneeded time: the tags' and, in break-even idle mode, the group's measured boots.
    unneeded_times: Mapping[str, timedelta] = field(default_factory=dict)
    # Per group that keeps warm standby (or has instances stopped): target, why, stopped (services.standby).
    standby: Mapping[str, StandbyReport] = field(default_factory=dict)
    # Disruption budgets and their allowance now, nodes being replaced, drifted nodes and consolidation candidates,
    # as the status ConfigMap's `clusterWide.disruption` shows them (engine.status.disruption_doc).
    disruption: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data: what `plan --json` prints."""
        up, down = self.pending.plan, self.utilization.plan
        return {
            "at": self.at.isoformat(),
            "state": "read from the state table" if self.with_state else "none (unneeded times start now)",
            "pending_pods": self.pending.pending,
            "scale_up": [{"group": i.group_id, "from": i.current_target, "to": i.new_target, "pods": list(i.pods)}
                         for i in up.increases],
            "absorbed_pods": list(up.absorbed),
            "unplaceable_pods": dict(up.unplaceable),
            "ignored_pods": dict(up.ignored),
            "reclaimed_nodes": {node: list(pods) for node, pods in up.reclaimed.items()},
            "scale_down": [{"node": r.node, "group": r.group_id, "kind": r.kind, "utilization": round(r.utilization, 3),
                            "unneeded_since": r.unneeded_since.isoformat(), "evict": list(r.move),
                            "wait_for": list(r.wait)} for r in down.removals],
            "unneeded": {node: {"since": since.isoformat(),
                                "removable_from": (since + self.unneeded_times.get(node, self.unneeded_time)).isoformat()}
                         for node, since in sorted(down.unneeded.items())},
            "kept": {node: {"code": reason.code, "why": str(reason)} for node, reason in sorted(down.kept.items())},
            "groups": self._groups(),
            "nodes": self._nodes(),
            "virtual_nodes": self._virtual(),
            "unavailable_offerings": [describe(m) for m in self.pending.limits.marks],
            "quota_left": {f"{location}/{self.pending.limits.quota.names.get(name, name)}": left
                           for (location, name), left in sorted(self.pending.limits.quota.remaining.items())}
            if self.pending.limits.quota is not None else {},
            "spot_evictions": {e.node: e.how for e in self.pending.evictions},
            # CapacityBuffers: replicas, ready and conditions as this plan leaves them (services.buffers).
            "capacity_buffers": status_lines(self.pending.buffers),
            # ProvisioningRequests: class, state, pods, consumed, booked until, conditions (services.provisioning).
            "provisioning_requests": {key: dict(line) for key, line in self.pending.provisioning_requests.items()},
            # Stored rows that cannot be read, named: groups left out of both polls, removals left as they are.
            "unreadable_rows": {**self.utilization.unreadable_groups, **self.utilization.unreadable_removals},
            "disruption": dict(self.disruption),
            "actions": [{"id": a.id, "kind": a.kind, "group": a.group,
                         "target_size": a.target_size if isinstance(a, ScaleUp) else None,
                         "nodes": [t.node for t in a.targets] if isinstance(a, ScaleDown) else [],
                         **({"pod": a.pod_key, "to": a.to} if isinstance(a, Backfill) else {}),
                         **({"request": a.request, "parts": [[g, n] for g, n in a.parts]}
                            if isinstance(a, AtomicScaleUp) else {}), "reason": a.reason}
                        for a in self.actions],
        }

    def _virtual(self) -> dict[str, Any]:
        """The virtual nodes: ACI's use of its limits, whether closed, and each pod's decision."""
        plan = self.pending.virtual
        if not plan.nodes:
            return {}
        usage = plan.usage
        return {"nodes": list(plan.nodes), "pods": usage.pods, "cores": usage.cores, "refused_by_aci": usage.failed,
                "closed": plan.gate.closed, "gate": plan.gate.why,
                "decisions": {d.pod.key: f"{d.verdict}: {d.why}" for d in sorted(plan.decisions, key=lambda d: d.pod.key)}}


    def _groups(self) -> list[dict[str, Any]]:
        """Each node group with its backend, sizes and, for one marked but refused, why."""
        seen = self.pending.observed
        if seen is None:
            return []
        groups: list[dict[str, Any]] = [
            {"group": g.id, "backend": g.provider, "vm_size": g.vm_size, "min": g.min_size, "max": g.max_size,
             "capacity": g.capacity} for g in sorted(seen.groups, key=lambda g: g.id)]
        for entry in groups:  # where its new nodes' shape comes from: live-node, tags, vm-size:skus-api, vm-size:table
            if entry["group"] in seen.templates:
                entry["template"] = seen.templates[entry["group"]].source
        for entry in groups:  # a SCHEDULED_CAPACITY window active now
            if entry["group"] in self.pending.windows:
                entry["scheduled"] = self.pending.windows[entry["group"]].describe()
            if entry["group"] in self.standby:  # warm standby
                entry["standby"] = self.standby[entry["group"]].as_dict()
        refused = {**self.utilization.unreadable_groups, **seen.refused}
        groups += [{"group": gid, "refused": why} for gid, why in sorted(refused.items())]
        groups += [{"group": name, "backend": VIRTUAL_NODE, "vm_size": "ACI", "min": 0, "max": 0, "capacity": 0}
                   for name in self.pending.virtual.nodes]
        return groups

    def _nodes(self) -> dict[str, dict[str, str]]:
        """Each node: its group and instance with the mapping method that found them, or why none matched."""
        seen = self.pending.observed
        if seen is None:
            return {}
        nodes: dict[str, dict[str, str]] = {}
        for node in sorted(seen.nodes, key=lambda n: n.name):
            ref = node.instance
            if ref is not None:
                nodes[node.name] = {"group": ref.group_id, "instance": ref.instance_id,
                                    "mapping": seen.mapped_by.get(node.name, "provider-id")}
            else:
                nodes[node.name] = {"mapping": "none", "why": seen.unmapped.get(node.name, "not mapped")}
        return nodes


def plan_now(ports: Ports, settings: Settings, *, now: datetime, state: StateStore | None) -> PlanReport:
    """Run both polls on `ports` with `state` (read, never written; None: no state) and report.

    `ports.state`, `ports.queue` and `ports.events` are replaced by the overlay, a collecting
    queue and a sink that drops events, so nothing the polls decide leaves this call.
    """
    overlay = MemoryStateStore(base=state)
    queue = CollectingQueue()
    quiet = replace(ports, state=overlay, queue=queue, events=DroppedEvents())
    dry = replace(settings, dry_run=True)
    previous = overlay.list_unneeded()
    pending = run_pending_poll(quiet, dry, now=now)
    utilization = run_utilization_poll(quiet, dry, now=now)
    return PlanReport(at=now, with_state=state is not None, pending=pending, utilization=utilization,
                      actions=tuple(queue.actions), previous_unneeded=previous,
                      unneeded_time=settings.scale_down_unneeded_time,
                      unneeded_times=_unneeded_times(pending, settings, overlay, ports=quiet, now=now),
                      standby=_standby(quiet, dry, pending, now=now),
                      disruption=_disruption(quiet, dry, pending, utilization, now=now))


def _disruption(ports: Ports, settings: Settings, pending: PendingPollResult, utilization: UtilizationPollResult, *,
                now: datetime) -> dict[str, Any]:
    """Budgets, replacements, drift and consolidation after both polls (their state writes included)."""
    if pending.observed is None:
        return {}
    states = {g.id: ports.state.get_group(g.id) for g in pending.observed.groups
              if g.id not in utilization.unreadable_groups}
    return disruption_doc(pending.observed, states, disruption_report(utilization.replacements),
                          settings.disruption_budgets, now=now)


def _standby(ports: Ports, settings: Settings, pending: PendingPollResult, *, now: datetime) -> dict[str, StandbyReport]:
    """Each observed group's warm standby after both polls (their state writes included)."""
    if pending.observed is None:
        return {}
    reports = {}
    pooled = pooled_group_ids(ports, pending.observed.groups)  # one pool list for every group
    for group in pending.observed.groups:
        report = standby_report(ports, settings, group, ports.state.get_group(group.id), now=now,
                                active=pending.windows, pooled=pooled)
        if report is not None:
            reports[group.id] = report
    return reports


def _standby_text(standby: Mapping[str, Any]) -> str:
    refill = f", {standby['refilling']} refilling" if standby.get("refilling") else ""
    disks = f", disks ${standby['diskUsdPerHour']:.3f}/h" if "diskUsdPerHour" in standby else ""
    disks += f", {standby['quotaCores']} cores of quota held" if standby.get("quotaCores") else ""
    if standby.get("standbyPool"):
        return f"standby held by its Standby Pool, ready capacity set to {standby['target']} ({standby['why']})"
    state = "hibernated" if standby.get("hibernated") else "stopped"
    return f"standby {standby['stopped']} of {standby['target']} {state}{refill}{disks} ({standby['why']})"


def _disruption_lines(doc: Mapping[str, Any]) -> list[str]:
    """Disruption budgets (what each allows now), replacements under way, drifted nodes, consolidation verdicts."""
    if not doc:
        return []
    allowance = doc.get("allowance", {})
    unlimited = [reason for reason in DISRUPTION_REASONS if reason not in allowance]
    lines = ["disruption budgets (cluster-wide, allowed now: "
             + ", ".join([f"{reason} {count}" for reason, count in allowance.items()]
                         + ([f"{', '.join(unlimited)} unlimited"] if unlimited else [])) + "):"]
    for budget in doc.get("budgets", []):
        where = "DISRUPTION_BUDGETS" if budget["scope"] == "cluster" else f"tag of {budget['scope']}"
        state = (", ".join(f"{reason} {count}" for reason, count in budget["allowed"].items()) + " allowed now"
                 if budget["active"] else "outside its schedule now")
        lines.append(f"  {budget['budget']} ({where}, {budget['nodes']} node(s)): {state}")
    lines += [f"  tag of {p['group']} not read, its disruptions wait: {p['reason']}" for p in doc.get("budgetProblems", [])]
    if doc.get("replacing"):
        saving = doc.get("savingPerHour", 0.0)
        lines.append("replacing" + (f" (saving ${saving:.2f}/h once done)" if saving else "") + ":")
        lines += [f"  {r['node']} ({r['group']}): {r['reason']}, new capacity asked of {r['toGroup']} at {r['since']}"
                  + (f", saves ${r['savingPerHour']:.2f}/h" if r["savingPerHour"] else "")
                  + (f" ({r['detail']})" if r.get("detail") else "") for r in doc["replacing"]]
    if doc.get("drifted"):
        drifted = doc["drifted"]
        lines.append(f"drifted nodes ({drifted['count']}):")
        lines += [f"  {d['node']}: " + (f"waits: {d['waiting']}" if "waiting" in d else "being replaced")
                  for d in drifted["nodes"]]
        if drifted["count"] > len(drifted["nodes"]):
            lines.append(f"  ... and {drifted['count'] - len(drifted['nodes'])} more")
    if doc.get("consolidation"):
        found = doc["consolidation"]
        lines.append(f"consolidation candidates ({found['count']}):")
        lines += [f"  {c['node']}: {c['verdict']}" for c in found["candidates"]]
        if found["count"] > len(found["candidates"]):
            lines.append(f"  ... and {found['count'] - len(found['candidates'])} more")
    return lines


def _what_asks(pods: list[str]) -> str:
    """A scale-up's reasons in words: its pending pods and its CapacityBuffers' chunks (placeholders, no pods)."""
    chunks = sum(1 for key in pods if buffer_of(key) is not None)
    parts = ([f"{len(pods) - chunks} pending pod(s)"] if len(pods) > chunks else []) + (
        [f"{chunks} capacity buffer chunk(s)"] if chunks else [])
    return " and ".join(parts) or "0 pending pod(s)"


def _unneeded_times(pending: PendingPollResult, settings: Settings, state: StateStore, *, ports: Ports,
                    now: datetime) -> dict[str, timedelta]:
    """Each mapped node's unneeded time as the planner applies it to its group (`scale_down.group_rules`)."""
    seen = pending.observed
    if seen is None:
        return {}
    by_group = unneeded_times_by_group(seen.groups, settings, state, ports=ports, now=now)
    return {node.name: by_group[node.instance.group_id] for node in seen.nodes
            if node.instance is not None and node.instance.group_id in by_group}


def unneeded_times_by_group(groups: Iterable[NodeGroup], settings: Settings, state: StateStore, *,
                            ports: Ports | None = None, now: datetime | None = None) -> dict[str, timedelta]:
    """Each group's unneeded time as the planner applies it now (`scale_down.group_rules`: its tags and, in
    break-even idle mode, its measured boots). A group with a malformed tag or a state row that cannot be read
    (UnreadableRow is a ValueError) is left out: the utilization poll reports it."""
    options = scale_down_options(settings)
    if ports is not None and now is not None:  # a standby with room shortens the break-even time (services.standby)
        groups = tuple(groups)
        options = with_standby_room(ports, settings, options, groups, now=now)
    times: dict[str, timedelta] = {}
    for group in groups:
        try:
            times[group.id] = group_rules(group, options, state.get_group(group.id)).unneeded_time
        except ValueError:
            continue
    return times


def render_text(report: PlanReport) -> str:
    """The report for a terminal: decisions first, then what waits and why."""
    data = report.as_dict()
    lines = [f"plan at {data['at']} (state: {data['state']}); nothing below has been done", ""]
    if data["unreadable_rows"]:
        lines.append("stored rows that cannot be read (left as they are, nothing of theirs decided):")
        lines += [f"  {what}: {why}" for what, why in data["unreadable_rows"].items()]
    lines.append(f"pending pods: {data['pending_pods']}")
    if data["scale_up"]:
        lines.append("scale up:")
        scheduled = {g["group"]: g["scheduled"] for g in data["groups"] if "scheduled" in g}
        shaped = {g["group"]: g["template"] for g in data["groups"] if "template" in g}
        lines += [f"  {u['group']}: {u['from']} -> {u['to']} for {_what_asks(u['pods'])}"
                  + (f" and scheduled capacity ({scheduled[u['group']]})" if u["group"] in scheduled else "")
                  + (f" (template: {shaped[u['group']]})" if u["group"] in shaped else "")
                  for u in data["scale_up"]]
    else:
        lines.append("scale up: none")
    if data["capacity_buffers"]:
        lines.append("capacity buffers (room kept for pods not yet created):")
        lines += [f"  {key}: {b['ready']} of {b['replicas']} ready"
                  + "".join(f"; {kind}={value}" for kind, value in b["conditions"].items())
                  for key, b in data["capacity_buffers"].items()]
    if data["provisioning_requests"]:
        lines.append("provisioning requests (capacity asked for ahead of their pods):")
        lines += [f"  {key}: {r['class']}, {r['state']}, {r['consumed']} of {r['pods']} pod(s) consumed"
                  + (f", booked until {r['bookedUntil']}" if "bookedUntil" in r else "")
                  + "".join(f"; {kind}={value}" for kind, value in r["conditions"].items())
                  for key, r in data["provisioning_requests"].items()]
    for node, pods in data["reclaimed_nodes"].items():
        lines.append(f"  take back draining node {node} for {len(pods)} pod(s)")
    for pod, why in data["unplaceable_pods"].items():
        lines.append(f"  no group can take {pod}: {why}")
    if data["scale_down"]:
        lines.append("scale down:")
        lines += [f"  remove {r['node']} ({r['group']}, {r['kind']}, utilization {r['utilization']:.2f})"
                  + (f", evicting {len(r['evict'])} pod(s)" if r["evict"] else "")
                  + (f", after {len(r['wait_for'])} batch pod(s) finish" if r["wait_for"] else "")
                  for r in data["scale_down"]]
    else:
        lines.append("scale down: none now")
    removing = {r["node"] for r in data["scale_down"]}
    waiting = {n: u for n, u in data["unneeded"].items() if n not in removing}
    if waiting:
        lines.append("unneeded, removable later if still unneeded:")
        lines += [f"  {node}: unneeded since {u['since']}, removable from {u['removable_from']}"
                  for node, u in waiting.items()]
    if data["kept"]:
        lines.append("kept:")
        lines += [f"  {node}: {k['why']}" for node, k in data["kept"].items()]
    lines += _disruption_lines(data["disruption"])
    if data["groups"]:
        lines.append("node groups:")
        lines += [f"  {g['group']}: refused: {g['refused']}" if "refused" in g else
                  f"  {g['group']} ({g['backend']}): never scaled or drained" if g["backend"] == VIRTUAL_NODE else
                  f"  {g['group']} ({g['backend']}, {g['vm_size']}): {g['capacity']} of {g['min']}..{g['max']}"
                  + (f"; template: {g['template']}" if "template" in g else "")
                  + (f"; scheduled capacity: {g['scheduled']}" if "scheduled" in g else "")
                  + (f"; {_standby_text(g['standby'])}" if "standby" in g else "")
                  for g in data["groups"]]
    virtual = data["virtual_nodes"]
    if virtual:
        lines.append(f"virtual nodes {', '.join(virtual['nodes'])}: {virtual['pods']} pod(s) on ACI, "
                     f"{virtual['cores']:g} cores, {virtual['refused_by_aci']} refused; "
                     f"{'closed' if virtual['closed'] else 'open'} ({virtual['gate']})")
        lines += [f"  {pod}: {decision}" for pod, decision in virtual["decisions"].items()]
    atomic = [a for a in data["actions"] if "parts" in a]
    if atomic:
        lines.append("atomic scale-ups (all of a provisioning request's nodes at once):")
        lines += [f"  {a['request']}: " + ", ".join(f"{g} +{n}" for g, n in a["parts"]) for a in atomic]
    backfills = [a for a in data["actions"] if a["kind"] == "backfill"]
    if backfills:
        lines.append("move back onto VMs:")
        lines += [f"  {a['pod']} off {a['group']} (room on {a['to']})" for a in backfills]
    if data["nodes"]:
        lines.append("nodes:")
        lines += [f"  {name}: {n['group']} instance {n['instance']} (by {n['mapping']})" if n["mapping"] != "none"
                  else f"  {name}: not managed: {n['why']}" for name, n in data["nodes"].items()]
    return "\n".join(lines) + "\n"
