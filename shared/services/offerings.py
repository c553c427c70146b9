"""Unavailable offerings and quotas, as the polls and the executor read and record them.

- `record_refusal`: a scale-up refused for capacity or quota marks the offerings it covers in the state
  table (engine.offerings), and a quota refusal reads the quota again at once;
- `record_preemption`: a Preempt notice marks the spot offering it shows short (engine.spot.preempted_offerings);
- `planning_limits`: what the pending poll plans against: the groups a live mark blocks (with why) and
  the vCPUs each quota has left (engine.quota), or None where quotas are not read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from shared import telemetry
from shared.domain import NodeGroup, UnavailableOffering, VmSizeCapacity
from shared.engine.offerings import SPOT_PREEMPTED, Classified, classify, marks_for, merge, unavailable_groups
from shared.engine.spot import preempted_offerings
from shared.engine.quota import Quota, quota_view
from shared.ports import Ports, QuotaUnavailable
from shared.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PlanningLimits:
    blocked: dict[str, str] = field(default_factory=dict)  # group id -> the live mark that blocks it, in words
    quota: Quota | None = None
    marks: tuple[UnavailableOffering, ...] = ()  # live marks, for status and telemetry


def _sizes(ports: Ports, groups: Sequence[NodeGroup]) -> list[VmSizeCapacity]:
    sizes: list[VmSizeCapacity] = []
    for location in sorted({g.location.lower() for g in groups if g.location}):
        sizes += ports.provider.list_vm_sizes(location)  # cached for hours by the provider
    return sizes


def live_marks(ports: Ports, *, now: datetime) -> list[UnavailableOffering]:
    return [m for m in ports.state.list_offerings() if m.live(now)]


def planning_limits(ports: Ports, settings: Settings, groups: Sequence[NodeGroup], *, now: datetime,
                    fresh: bool = False) -> PlanningLimits:
    """What to plan against now; `fresh` reads the quotas again rather than from the cache (the executor's
    last check before it asks Azure: what was decided since the cached read is in Azure's figures by then)."""
    marks = live_marks(ports, now=now)
    quota_on = ports.quota is not None and settings.quota_aware
    sizes = _sizes(ports, groups) if (marks or quota_on) and groups else []
    families = {s.name.lower(): s.family.lower() for s in sizes if s.family}
    blocked = unavailable_groups(groups, marks, now=now, families=families)
    quota = None
    if quota_on and ports.quota is not None:
        usages = {}
        for location in sorted({g.location.lower() for g in groups if g.location}):
            try:
                usages[location] = ports.quota.list_usages(location, refresh=fresh)
            except QuotaUnavailable as exc:
                _warn_once(location, f"Compute quotas of {location} could not be read ({exc}); its scale-ups are "
                                     "not capped before asking")
        quota = quota_view(usages, sizes) if usages else None
    return PlanningLimits(blocked, quota, tuple(marks))


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    """A quota read that fails keeps failing (a missing right): said once per process, then at debug."""
    if key in _warned:
        log.debug("%s", message)
    else:
        _warned.add(key)
        log.warning("%s", message)


def record_refusal(ports: Ports, settings: Settings, group: NodeGroup, *, code: str, message: str,
                   now: datetime) -> Classified:
    """Mark what the refusal shows unavailable (keeping a longer-lived mark of the same key); a quota refusal
    reads the group's quotas again. Returns what the refusal was."""
    sizes = {s.name.lower(): s for s in ports.provider.list_vm_sizes(group.location)} if group.location else {}
    family = sizes[group.vm_size.lower()].family if group.vm_size.lower() in sizes else ""
    classified = classify(code, message, group=group, family=family)
    marks = marks_for(classified, group=group, code=code, message=message, now=now,
                      lifetimes=settings.unavailable_offering_ttl)
    if marks:
        _put(ports, marks, now=now)
        log.warning("scale-up of %s refused (%s, %s): %s unavailable until %s", group.id, code, classified.kind,
                    ", ".join(m.key.text for m in marks), marks[0].until.isoformat())
        telemetry.offering_unavailable(group.id, kind=classified.kind, code=code, marks=len(marks))
    if classified.quota and ports.quota is not None and group.location:
        try:
            ports.quota.list_usages(group.location, refresh=True)
        except QuotaUnavailable as exc:
            log.warning("Compute quotas of %s could not be read again after a quota refusal: %s", group.location, exc)
    return classified


def record_preemption(ports: Ports, settings: Settings, group: NodeGroup, *, instance: str,
                      now: datetime) -> list[UnavailableOffering]:
    """Mark the spot offering a Preempt notice for `instance` of the spot `group` shows short (engine.spot), for the
    `spot-preempted` lifetime (keeping a longer-lived mark of the same key); the marks written."""
    classified = Classified(SPOT_PREEMPTED, preempted_offerings(group))
    marks = marks_for(classified, group=group, code="Preempt", now=now, lifetimes=settings.unavailable_offering_ttl,
                      message=f"Preempt notice for instance {instance} of {group.id}")
    _put(ports, marks, now=now)
    log.warning("Preempt notice for %s instance %s: %s unavailable until %s; its replacements go elsewhere",
                group.id, instance, ", ".join(m.key.text for m in marks), marks[0].until.isoformat())
    return marks


def _put(ports: Ports, marks: Sequence[UnavailableOffering], *, now: datetime) -> None:
    """Write the marks, each unless a live mark of its key lasts longer already."""
    existing = {m.key.text: m for m in live_marks(ports, now=now)}
    for mark in marks:
        kept = merge(existing.get(mark.key.text), mark)
        if kept is mark:
            ports.state.put_offering(mark)


def note_requested(ports: Ports, quota: Quota | None, group: NodeGroup, nodes: int) -> None:
    """Tell the quota reader what a granted request of `nodes` new nodes takes, until its next read."""
    if ports.quota is None or quota is None or nodes <= 0 or not group.location:
        return
    ports.quota.note_requested(group.location, quota.pools(group), nodes * quota.vcpus(group))


def forget_expired(ports: Ports, *, now: datetime) -> int:
    """Delete marks that have expired (the state sweep); returns how many."""
    gone = 0
    for mark in ports.state.list_offerings():
        if not mark.live(now):
            ports.state.delete_offering(mark.key.text)
            gone += 1
    return gone
