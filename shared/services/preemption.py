"""Azure's Preempt notice, delivered by Event Grid: act in the 30 seconds before a spot VM goes.

Azure publishes Scheduled Events, the spot `Preempt` notice included (at least 30 s ahead, best effort),
to the Event Grid system topic `Microsoft.Maintenance.ScheduledEvents` (preview). The Event Grid-triggered
function hands each event here. Nothing in an event is trusted that our own reads can tell us: the VM it
names must be an instance of one of our spot groups, and the node is found by our own node mapping.
Then, at once: the node is cordoned with our taint, its pods are evicted (no waiting for batch pods: they
die with the VM), the eviction is recorded, and the pending pods are planned again so the replacements'
capacity is asked for before the VM is gone.

The data schema of that topic's events is not published in a form we could verify; we read the IMDS
Scheduled Events fields (`EventType`, `Resources`, `NotBefore`) in `data`, case-insensitively, and the VM
from the event's `subject` when it is an ARM id. What an outside observer can and cannot see is in
docs/spot-and-quota.md.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.domain import ClusterSnapshot, InstanceRef
from shared.engine.drainability import is_batch
from shared.engine.spot import NOTICE, Eviction
from shared.ports import Ports
from shared.services.observe import observe
from shared.services.pending import run_pending_poll
from shared.services.spot import act_on_notice
from shared.settings import Settings

log = logging.getLogger(__name__)

_UNIFORM_VM = re.compile(
    r"/subscriptions/[^/]+/resourcegroups/(?P<rg>[^/]+)/providers/microsoft\.compute/virtualmachinescalesets/"
    r"(?P<vmss>[^/]+)/virtualmachines/(?P<id>[^/]+)$", re.IGNORECASE)
_PLAIN_VM = re.compile(
    r"/subscriptions/[^/]+/resourcegroups/(?P<rg>[^/]+)/providers/microsoft\.compute/virtualmachines/(?P<vm>[^/]+)$",
    re.IGNORECASE)
_IMDS_UNIFORM = re.compile(r"^(?P<vmss>.+)_(?P<id>\d+)$")  # IMDS names a Uniform instance `<vmss>_<id>`


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


def _matches(ref: InstanceRef, vm: str, snapshot: ClusterSnapshot) -> bool:
    """Whether an event's VM (ARM id or IMDS name) is the instance `ref` points at."""
    uniform = _UNIFORM_VM.search(vm)
    if uniform is not None:
        return (uniform["rg"].lower(), uniform["vmss"].lower(), uniform["id"].lower()) == (
            ref.resource_group.lower(), ref.scale_set.lower(), ref.instance_id.lower())
    plain = _PLAIN_VM.search(vm)
    if plain is not None:  # a Flexible member: its instance id is the VM name
        return (plain["rg"].lower(), plain["vm"].lower()) == (ref.resource_group.lower(), ref.instance_id.lower())
    imds = _IMDS_UNIFORM.match(vm)
    if imds is not None and (imds["vmss"].lower(), imds["id"]) == (ref.scale_set.lower(), ref.instance_id):
        return True
    return vm.lower() == ref.instance_id.lower()  # a Flexible member's IMDS name is its VM name


def handle_scheduled_event(ports: Ports, settings: Settings, event: Mapping[str, Any], *, now: datetime) -> NoticeResult:
    """Act on one Event Grid event (see the module docstring); anything but a Preempt of our spot VM is ignored."""
    kind, vms = named_vms(event)
    if kind.lower() != "preempt":
        return NoticeResult("ignored", f"event type {kind or '(none)'} is not Preempt")
    if not vms:
        return NoticeResult("ignored", "the Preempt event names no VM")
    snapshot = observe(ports, now=now, node_mapping=settings.node_mapping)
    spot = {g.id: g for g in snapshot.groups if g.is_spot}
    batch = {p.key for p in snapshot.pods if is_batch(p, settings.batch_pod_selector)}
    acted: list[str] = []
    for node in snapshot.nodes:
        ref = node.instance
        if ref is None or ref.group_id not in spot or not any(_matches(ref, vm, snapshot) for vm in vms):
            continue
        pods = [p for p in snapshot.pods_on(node.name) if not p.is_daemonset and not p.is_mirror]
        eviction = Eviction(node.name, ref.group_id, ref.instance_id, NOTICE, tuple(p.key for p in pods),
                            tuple(p.key for p in pods if p.key in batch))
        if settings.dry_run:
            log.info("dry run: Preempt notice for node %s; would cordon it and evict %d pod(s)", node.name, len(pods))
        else:
            act_on_notice(ports, settings, snapshot, eviction, now=now)
        acted.append(node.name)
    if not acted:
        log.info("Preempt notice for %s: no node of ours runs there; ignored", ", ".join(vms))
        return NoticeResult("ignored", f"no node of a spot group of ours runs on {', '.join(vms)}")
    # Replacements now: the poll sees the cordoned nodes as going and plans their pods elsewhere.
    result = run_pending_poll(ports, settings, now=now)
    return NoticeResult("acted", f"{len(acted)} node(s) cordoned and drained before eviction", tuple(acted),
                        result.enqueued)
