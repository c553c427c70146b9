"""Azure's Preempt notice, delivered by Event Grid: act in the 30 seconds before a spot VM goes.

Azure publishes Scheduled Events, the spot `Preempt` notice included (at least 30 s ahead, best effort),
to the Event Grid system topic `Microsoft.Maintenance.ScheduledEvents` (preview). The Event Grid-triggered
function hands each event here. Nothing in an event is trusted that our own reads can tell us: the VM it
names must be an instance of one of our spot groups, and the node is found by our own node mapping.
Then, at once: the notice is held in the group's state (a node not registered yet is drained when it
comes), the group's spot offering is marked unavailable for a short while (Azure is taking that capacity back:
a replacement asked of it would likely be refused, and a refusal that comes as a failed operation comes too late),
the node is cordoned with our taint, its pods are evicted (batch pods per SPOT_NOTICE_BATCH_PODS), the eviction
is recorded, and the pending pods are planned again so the replacements' capacity is asked for, of the next
option, before the VM is gone.

The data schema of that topic's events is not published in a form we could verify; we read the IMDS
Scheduled Events fields (`EventType`, `Resources`, `NotBefore`) in `data`, case-insensitively, and the VM
from the event's `subject` when it is an ARM id. What an outside observer can and cannot see is in
docs/spot-and-quota.md.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from shared.domain import FLEXIBLE_SCALE_SET, NodeGroup
from shared.engine.drainability import is_batch
from shared.engine.spot import NOTICE, Eviction
from shared.ports import Ports
from shared.services import offerings
from shared.services.observe import observe
from shared.services.pending import run_pending_poll
from shared.services.spot import act_on_notice, record_notice
from shared.settings import Settings

log = logging.getLogger(__name__)

_UNIFORM_VM = re.compile(
    r"/subscriptions/[^/]+/resourcegroups/(?P<rg>[^/]+)/providers/microsoft\.compute/virtualmachinescalesets/"
    r"(?P<vmss>[^/]+)/virtualmachines/(?P<id>[^/]+)$", re.IGNORECASE)
_PLAIN_VM = re.compile(
    r"/subscriptions/[^/]+/resourcegroups/(?P<rg>[^/]+)/providers/microsoft\.compute/virtualmachines/(?P<vm>[^/]+)$",
    re.IGNORECASE)
_IMDS_UNIFORM = re.compile(r"^(?P<vmss>.+)_(?P<id>\d+)$")  # IMDS names a Uniform instance `<vmss>_<id>`
MINIMUM_NOTICE = timedelta(seconds=30)  # a Preempt notice comes at least this long before the eviction


@dataclass(frozen=True, slots=True)
class NoticeResult:
    outcome: str  # acted | ignored
    detail: str
    nodes: tuple[str, ...] = ()
    enqueued: tuple[str, ...] = ()


def _field(data: Mapping[str, Any], name: str) -> Any:
    for key, value in data.items():
        if key.lower() == name.lower():
            return value
    return None


def named_vms(event: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The Scheduled Event's type and the VMs it names (ARM ids and IMDS names) from an Event Grid event."""
    data = event.get("data") or {}
    if not isinstance(data, Mapping):
        return "", []
    kind = str(_field(data, "EventType") or "")
    names = [str(r) for r in (_field(data, "Resources") or []) if isinstance(r, str)]
    subject = str(event.get("subject") or "")
    if subject.startswith("/subscriptions/"):
        names.append(subject)
    return kind, names


def not_before(event: Mapping[str, Any], *, now: datetime) -> datetime:
    """When Azure will evict: the notice's `NotBefore` (RFC 1123), else 30 s from now (the minimum notice)."""
    data = event.get("data") or {}
    text = _field(data, "NotBefore") if isinstance(data, Mapping) else None
    if isinstance(text, str) and text.strip():
        try:
            when = parsedate_to_datetime(text)
            return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
        except (TypeError, ValueError):
            log.warning("Preempt notice with an unreadable NotBefore %r; taking 30 s from now", text)
    return now + MINIMUM_NOTICE


def _instances_named(ports: Ports, groups: Sequence[NodeGroup], vms: Sequence[str]) -> list[tuple[NodeGroup, str]]:
    """(group, instance id) of our spot groups' instances the event names, whether or not a node runs there."""
    found: list[tuple[NodeGroup, str]] = []
    for vm in vms:
        uniform, imds, plain = _UNIFORM_VM.search(vm), _IMDS_UNIFORM.match(vm), _PLAIN_VM.search(vm)
        for group in groups:
            flexible = group.provider == FLEXIBLE_SCALE_SET
            if flexible and (plain is not None or "/" not in vm):
                # A Flexible member: its instance id is its VM name (IMDS names it so too); only a listing says
                # whose member it is.
                if plain is not None and plain["rg"].lower() != group.resource_group.lower():
                    continue
                instance = plain["vm"] if plain is not None else vm
                hit = any(i.instance_id.lower() == instance.lower() for i in ports.provider.list_instances(group))
            elif uniform is not None:
                hit = (uniform["rg"].lower(), uniform["vmss"].lower()) == (group.resource_group.lower(), group.name.lower())
                instance = uniform["id"]
            elif imds is not None and not flexible:
                hit, instance = imds["vmss"].lower() == group.name.lower(), imds["id"]
            else:
                continue
            if hit and (group, instance) not in found:
                found.append((group, instance))
    return found


def handle_scheduled_event(ports: Ports, settings: Settings, event: Mapping[str, Any], *, now: datetime) -> NoticeResult:
    """Act on one Event Grid event (see the module docstring); anything but a Preempt of our spot VM is ignored."""
    kind, vms = named_vms(event)
    if kind.lower() != "preempt":
        return NoticeResult("ignored", f"event type {kind or '(none)'} is not Preempt")
    if not vms:
        return NoticeResult("ignored", "the Preempt event names no VM")
    snapshot = observe(ports, now=now, node_mapping=settings.node_mapping, gpu_readiness=settings.gpu_readiness)
    spot = {g.id: g for g in snapshot.groups if g.is_spot}
    named = _instances_named(ports, list(spot.values()), vms)
    if not named:
        log.info("Preempt notice for %s: no instance of a spot group of ours; ignored", ", ".join(vms))
        return NoticeResult("ignored", f"no instance of a spot group of ours is {', '.join(vms)}")
    due = not_before(event, now=now)
    if not settings.dry_run:
        # Held until the eviction is seen: a node that registers meanwhile is drained the moment a poll sees it.
        for group, instance in named:
            record_notice(ports, group.id, instance, not_before=due)
        # The replacements go elsewhere in this very poll: spot of this size is what Azure is short of.
        for group, instance in {g.id: (g, i) for g, i in named}.values():
            offerings.record_preemption(ports, settings, group, instance=instance, now=now)
    batch = {p.key for p in snapshot.pods if is_batch(p, settings.batch_pod_selector)}
    going = {(group.id, instance.lower()) for group, instance in named}
    acted: list[str] = []
    for node in snapshot.nodes:
        ref = node.instance
        if ref is None or (ref.group_id, ref.instance_id.lower()) not in going:
            continue
        pods = [p for p in snapshot.pods_on(node.name) if not p.is_daemonset and not p.is_mirror]
        eviction = Eviction(node.name, ref.group_id, ref.instance_id, NOTICE, tuple(p.key for p in pods),
                            tuple(p.key for p in pods if p.key in batch))
        if settings.dry_run:
            log.info("dry run: Preempt notice for node %s; would cordon it and evict %d pod(s)", node.name, len(pods))
        else:
            act_on_notice(ports, settings, snapshot, eviction, now=now)
        acted.append(node.name)
    # Replacements now: the poll sees the nodes (and instances not yet nodes) as going and plans their pods elsewhere.
    result = run_pending_poll(ports, settings, now=now)
    return NoticeResult("acted", f"{len(named)} instance(s) under notice, {len(acted)} node(s) cordoned and drained "
                        "before eviction", tuple(acted), result.enqueued)
