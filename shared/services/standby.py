"""Warm standby in the polls and the executor: each group's target, what idle nodes feed it, what users see.

The decision is engine.standby's (`standby_target`); this module gathers what it reads, per group:

- the setting STANDBY_INSTANCES, or the group's tag `autoscaler-standby`, and STANDBY_MAX;
- the next hour's forecast (engine.forecast, from the demand history in the state store) for `auto`;
- the boot estimate (engine.idle: the median of the group's measured boots) and the start estimate, which is
  not measured: START_FRACTION of the boot estimate (engine.standby says why half);
- the node's price (the provider's retail prices, cached) and its OS disk's (engine.standby.os_disk_price_hour
  from the size's vCPUs), for the break-even cap of `auto`;
- an active scheduled window's standby count (engine.scheduled_capacity).

Reads are made only for a group that may keep standby at all (`may_keep_standby`): with STANDBY_INSTANCES=0,
no tag and no window, nothing here costs a call. The forecast comes from services.demand's rows kept in memory
(a row is read again once an hour at most), so a poll that changes nothing reads no demand row.

A Flexible group served by a VMSS Standby Pool (STANDBY_POOLS, services.standby_pools) keeps no standby of its
own: the pool is its standby, so its idle nodes are removed as SCALE_DOWN_MODE says and it gets no refill. A read that fails (demand row, prices) degrades the target
(no forecast: 0 for `auto`; no price: no break-even cap) and is logged, never raised: a removal or a scale-up
must not fail on a forecast.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from shared import telemetry
from shared.discovery_tags import tag
from shared.domain import GroupState, NodeGroup
from shared.engine.idle import boot_estimate
from shared.engine.scale_down import ScaleDownOptions
from shared.engine.scheduled_capacity import TAG_SCHEDULED_CAPACITY, ActiveWindow, active_windows
from shared.engine.standby import (
    STANDBY_TAG,
    StandbyTarget,
    os_disk_price_hour,
    parse_standby,
    standby_target,
    start_estimate,
)
from shared.engine.vm_sizes import table_capacity
from shared.options import standby_options
from shared.ports import Ports
from shared.services import demand
from shared.services.events import status_event
from shared.services.hibernation import hibernates
from shared.services.standby_pools import pooled_group_ids
from shared.settings import Settings

log = logging.getLogger(__name__)

NO_STANDBY = StandbyTarget(0, "none configured")
REFILL_PREFIX = "refill-standby:"  # the ids of RefillStandby actions (shared.actions.new_refill_standby)


@dataclass(frozen=True, slots=True)
class StandbyReport:
    """One group's standby as the status ConfigMap and `plan` show it."""

    target: int
    why: str
    stopped: int  # instances the group's row lists as stopped, a refill's instances included from its creation on
    refilling: int = 0  # of those, the ones whose nodes a refill is parking (registered, being stopped)
    disk_usd_per_hour: float | None = None  # what the stopped instances' OS disks bill, when the size is known
    hibernated: bool = False  # the group's instances are stopped hibernated (services.hibernation), not deallocated
    pooled: bool = False  # a VMSS Standby Pool is the group's standby: the target is the pool's, not ours to refill
    quota_cores: int | None = None  # vCPUs the stopped instances hold against quota, when the size is known

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"target": self.target, "why": self.why, "stopped": self.stopped,
                                  "refilling": self.refilling}
        if self.disk_usd_per_hour is not None:
            out["diskUsdPerHour"] = round(self.disk_usd_per_hour, 4)
        if self.hibernated:
            out["hibernated"] = True
        if self.pooled:
            out["standbyPool"] = True
        if self.quota_cores is not None:
            out["quotaCores"] = self.quota_cores
        return out

    def line(self, group_id: str) -> str:
        disks = f", disks ${self.disk_usd_per_hour:.3f}/h" if self.disk_usd_per_hour is not None else ""
        disks += f", {self.quota_cores} cores of quota held" if self.quota_cores else ""
        refill = f", {self.refilling} refilling" if self.refilling else ""
        if self.pooled:
            return f"standby {group_id}: held by its Standby Pool, ready capacity set to {self.target} ({self.why})"
        state = "hibernated" if self.hibernated else "stopped"
        return f"standby {group_id}: {self.stopped}/{self.target} {state}{refill}{disks} ({self.why})"


def may_keep_standby(settings: Settings, group: NodeGroup) -> bool:
    """Whether the group could have a standby target above 0, from the settings and its tags alone (no reads)."""
    if tag(group.tags, STANDBY_TAG) is not None:
        return True
    if parse_standby(standby_options(settings).configured) != 0:
        return True
    windows = getattr(settings, "scheduled_capacity", ())
    return TAG_SCHEDULED_CAPACITY in group.tags or any(
        w.group_id == group.id and getattr(w, "standby", None) for w in windows)


def get_standby_target(ports: Ports, settings: Settings, group: NodeGroup, *, state: GroupState | None = None,
                       now: datetime, active: Mapping[str, ActiveWindow] | None = None) -> StandbyTarget:
    """The group's standby target now (engine.standby.standby_target, with what it reads gathered here).

    `state`: the group's row, read when not given; `active`: the active scheduled windows by group, computed
    for this group when not given. Raises ValueError on a malformed `autoscaler-standby` tag, naming it.
    """
    if not may_keep_standby(settings, group):
        return NO_STANDBY
    if state is None:
        state = ports.state.get_group(group.id)
    if active is None:
        active = active_windows((group,), settings.scheduled_capacity, now=now)
    window = active.get(group.id)
    boot = boot_estimate(state.boots)
    options = standby_options(settings)
    return standby_target(
        group, configured=options.configured, max_auto=options.max_auto,
        forecast=_forecast(ports, group, now=now), boot=boot, start=start_estimate(boot, state.starts),
        disk_price_hour=disk_price_hour(group), node_price_hour=_node_price(ports, group),
        window_standby=getattr(window, "standby", None) if window is not None else None,
        starts_measured=len(state.starts))


def wants_more_standby(ports: Ports, settings: Settings, group: NodeGroup, *, now: datetime,
                       nodes: Collection[str] = (), pooled: Collection[str] | None = None) -> bool:
    """Whether the group's idle nodes `nodes` (one removal; none: one node) removed now go into its standby.

    The standby counted is the stopped instances plus the group's other committed removals (being deallocated
    or deleted: both counted, so parallel removals do not overfill it; a delete counted so is made up by a
    refill), each instance once (`standby_count`). A removal of several nodes goes to the standby only when all
    of them fit. A group served by a Standby Pool (`pooled`: the poll's set; None: looked up through the
    cached pool list) never: the pool is its standby. A malformed tag or a failed read: False (the node is
    removed as SCALE_DOWN_MODE says).
    """
    if not may_keep_standby(settings, group):
        return False
    if group.id in (pooled if pooled is not None else pooled_group_ids(ports, (group,))):
        return False
    try:
        state = ports.state.get_group(group.id)
        target = get_standby_target(ports, settings, group, state=state, now=now)
    except ValueError as exc:
        log.warning("%s: standby not fed by this removal", exc)
        return False
    return standby_count(state, leaving_out=nodes) + max(len(nodes), 1) <= target.count


def standby_count(state: GroupState, *, leaving_out: Collection[str] = ()) -> int:
    """The group's standby as removals feed it: its stopped instances plus its committed removals but
    `leaving_out`, each instance once. A refill's nodes are committed while it parks them and listed stopped
    from its grow step on, so committed removals held by a refill (`REFILL_PREFIX`) are not counted again."""
    others = {node for node in state.committed - set(leaving_out)
              if not state.removing.get(node, "").startswith(REFILL_PREFIX)}
    return len(state.stopped) + len(others)


def with_standby_room(ports: Ports, settings: Settings, options: ScaleDownOptions, groups: Iterable[NodeGroup], *,
                      now: datetime, states: Mapping[str, GroupState] | None = None,
                      pooled: Collection[str] | None = None,
                      targets: Mapping[str, StandbyTarget] | None = None) -> ScaleDownOptions:
    """`options` with `standby_room`: the groups whose standby takes their next idle node (`standby_count`
    below its target), whose break-even unneeded time is then a start's (engine.standby).

    The whole group gets the shorter time while its standby has room for one more: idle nodes beyond the room
    are deleted after a start's worth of idle time rather than a boot's (an approximation the next refill
    makes up for). Groups whose target cannot be read keep the boot's, and so do groups served by a Standby
    Pool (`pooled`, as in `wants_more_standby`): their idle nodes are deleted, not kept stopped. `targets`: the
    poll's `standby_targets`, when it computed them (a group missing from them has no readable target).
    """
    groups = [group for group in groups if may_keep_standby(settings, group)]
    if not groups:
        return options
    if pooled is None:
        pooled = pooled_group_ids(ports, groups)
    room = set()
    for group in groups:
        if group.id in pooled:
            continue
        try:
            state = (states or {}).get(group.id) or ports.state.get_group(group.id)
            target = (targets.get(group.id) if targets is not None
                      else get_standby_target(ports, settings, group, state=state, now=now))
        except ValueError:
            continue  # the poll reports a malformed tag or row; the group keeps the boot's idle time
        if target is None:
            continue  # the poll found no readable target for it
        if standby_count(state) < target.count:
            room.add(group.id)
    return replace(options, standby_room=frozenset(room)) if room else options


def standby_targets(ports: Ports, settings: Settings, groups: Iterable[NodeGroup], *,
                    states: Mapping[str, GroupState], now: datetime) -> dict[str, StandbyTarget]:
    """Each group's standby target this poll (`get_standby_target`), for the groups that may keep standby and
    whose row was read; a malformed tag leaves its group out (logged)."""
    targets = {}
    for group in groups:
        if group.id not in states or not may_keep_standby(settings, group):
            continue
        try:
            targets[group.id] = get_standby_target(ports, settings, group, state=states[group.id], now=now)
        except ValueError as exc:
            log.warning("%s: no standby target this poll", exc)
    return targets


def disk_price_hour(group: NodeGroup) -> float | None:
    """USD per hour one stopped instance of the group bills for its OS disk; None for a size we do not know."""
    capacity = table_capacity(group.vm_size)
    return os_disk_price_hour(capacity.vcpus) if capacity is not None else None


def standby_report(ports: Ports, settings: Settings, group: NodeGroup, state: GroupState, *, now: datetime,
                   active: Mapping[str, ActiveWindow] | None = None,
                   pooled: Collection[str] | None = None) -> StandbyReport | None:
    """The group's standby for status and plan; None for a group that keeps none and has none stopped.
    `pooled`: the groups a Standby Pool serves, when the caller listed them for all its groups (None: looked up)."""
    if not may_keep_standby(settings, group) and not state.stopped:
        return None
    refilling = sum(1 for holder in state.removing.values() if holder.startswith(REFILL_PREFIX))
    try:
        target = get_standby_target(ports, settings, group, state=state, now=now, active=active)
    except ValueError as exc:
        target = StandbyTarget(0, str(exc))
    price = disk_price_hour(group)
    stopped = len(state.stopped)
    # The pool list is cached (services.standby_pools): no read per group; none with STANDBY_POOLS=false.
    if pooled is None:
        pooled = pooled_group_ids(ports, (group,))
    # A deallocated VM keeps counting against its quota (regular or spot): a scale-up elsewhere cannot use them.
    capacity = table_capacity(group.vm_size)
    return StandbyReport(target.count, target.why, stopped, refilling,
                         price * stopped if price is not None else None, hibernated=hibernates(settings, group),
                         pooled=group.id in pooled, quota_cores=capacity.vcpus * stopped if capacity is not None else None)


def record_standby(reports: Mapping[str, StandbyReport]) -> None:
    """App Insights gauges from a poll's standby reports: instances stopped and target per group, disk cost."""
    for group_id, report in reports.items():
        telemetry.record_standby(group_id, stopped=report.stopped, target=report.target,
                                 disk_usd_per_hour=report.disk_usd_per_hour or 0.0)


def note_standby_used(ports: Ports, settings: Settings, group: NodeGroup, *, started: int, created: int,
                      now: datetime) -> None:
    """A scale-up of the group starts `started` standby instances and creates `created`: the StandbyUsed event
    (on the status ConfigMap, as CA's scale-up events) and the hits and misses. A creation counts as a miss
    only in a group that keeps standby (otherwise there was nothing to hit). Never raises."""
    keeps = may_keep_standby(settings, group)
    misses = created if keeps else 0
    try:
        telemetry.standby_used(group.id, hits=started, misses=misses)
        if started:
            event = status_event(settings, "StandbyUsed", f"Scale-up of {group.id}: started {started} standby "
                                 f"instance(s), created {created}", now=now)
            if event is not None:
                ports.events.emit(event)
    except Exception:  # noqa: BLE001 - telemetry and events are best effort
        log.exception("could not record the standby use of %s", group.id)


def _forecast(ports: Ports, group: NodeGroup, *, now: datetime):  # type: ignore[no-untyped-def]
    try:
        # Kept in memory by services.demand (shared with the pending poll's notes): read once an hour at most.
        return demand.get_forecasts(ports.state, (group.id,), now=now).get(group.id)
    except Exception as exc:  # noqa: BLE001 - a forecast that cannot be read leaves auto at 0
        log.warning("group %s: no demand forecast (%s); auto standby keeps none", group.id, exc)
        return None


def _node_price(ports: Ports, group: NodeGroup) -> float | None:
    try:
        return ports.provider.list_prices([group]).get(group.id)
    except Exception as exc:  # noqa: BLE001 - list_prices should never raise; a double might
        log.warning("group %s: no price (%s); auto standby has no break-even cap", group.id, exc)
        return None


__all__ = ["NO_STANDBY", "REFILL_PREFIX", "StandbyReport", "disk_price_hour", "get_standby_target",
           "may_keep_standby", "note_standby_used", "record_standby", "standby_count", "standby_report",
           "standby_targets", "wants_more_standby", "with_standby_room"]
