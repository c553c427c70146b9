"""Keeps each Flexible group's VMSS Standby Pool at the group's standby target, once per utilisation poll.

A pool holds `maxReadyCapacity - instanceCount` VMs, never fewer than `minReadyCapacity` (docs/standby-pools.md).
Writing both as the same count N keeps N VMs in the pool whatever the set's size, so the pool's size follows
the standby decision alone and the write is needed only when that decision changes, not at every scale-out.

The count: the group's standby target (engine.standby: STANDBY_INSTANCES or the tag `autoscaler-standby`, a
count or `auto`), capped by the room the group has left below its `max` (a pool VM the set can never take is
paid for nothing) and by Azure's 1,000 VMs of set and pool together. A group with neither the tag nor a
STANDBY_INSTANCES other than 0 leaves its pool as its owner configured it.

A group whose set has a pool (`pooled_group_ids`) keeps no standby of its own (services.standby, standby_refill):
the pool is its standby. The utilisation poll lists the pools once (`list_pools`; the adapter caches the list)
and hands them and the set of pooled groups on; with STANDBY_POOLS=false (no port) nothing is read and no group
is pooled.

A pool whose listing or update fails is logged and left; the poll goes on (the pool is a help, never needed).
A listing that fails leaves no group pooled for that poll: in-set standby may refill meanwhile, which costs
disks for a while but never a pod's wait.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from shared.discovery_tags import tag
from shared.domain import FLEXIBLE_SCALE_SET, NodeGroup
from shared.engine.standby import START_FRACTION, STANDBY_TAG, StandbyTarget, standby_target
from shared.ports import ComputeError, Ports, StandbyPool
from shared.settings import Settings

log = logging.getLogger(__name__)

# A boot estimate for standby_target when the poll gives no decision: only `auto`'s break-even reads it, and
# without a forecast `auto` keeps none whatever it is.
_BOOT = timedelta(seconds=100)
MAX_POOL_AND_SET = 1000  # a Standby Pool and its scale set together hold at most 1,000 VMs


@dataclass(frozen=True, slots=True)
class PoolWrite:
    """One pool set to `ready` VMs (maxReadyCapacity = minReadyCapacity), and why."""

    group_id: str
    pool: str
    before: tuple[int, int]  # (maxReadyCapacity, minReadyCapacity) as read
    ready: int
    why: str


def group_target(group: NodeGroup, settings: Settings,
                 targets: Mapping[str, StandbyTarget] | None = None) -> StandbyTarget | None:
    """The group's standby target, or None when its pool is to be left as its owner configured it (no
    `autoscaler-standby` tag and STANDBY_INSTANCES at its default 0, or a malformed tag, which is logged).

    `targets`: the standby decisions the poll made already (engine.standby with the forecast); without one for
    the group, `standby_target` is asked here without a forecast (a fixed count is kept, `auto` keeps none)."""
    if tag(group.tags, STANDBY_TAG) is None and settings.standby_instances.strip() == "0":
        return None
    if targets is not None and group.id in targets:
        return targets[group.id]
    try:
        return standby_target(group, configured=settings.standby_instances, max_auto=settings.standby_max,
                              forecast=None, boot=_BOOT, start=_BOOT * START_FRACTION, disk_price_hour=None,
                              node_price_hour=None)
    except ValueError as exc:
        log.warning("standby pool of %s left as it is: %s", group.id, exc)
        return None


def pool_ready_count(group: NodeGroup, wanted: int) -> int:
    """`wanted` capped by the group's room below max and by the 1,000 VMs of set and pool together."""
    room = max(0, group.max_size - group.capacity)
    return max(0, min(wanted, room, MAX_POOL_AND_SET - group.capacity))


def pool_of(group: NodeGroup, pools: Sequence[StandbyPool]) -> StandbyPool | None:
    """The pool attached to the group's scale set (Azure allows one per set), matched case-insensitively."""
    return next((p for p in pools if p.scale_set_resource_group.lower() == group.resource_group.lower()
                 and p.scale_set_name.lower() == group.name.lower()), None)


def plan_pool_writes(groups: Sequence[NodeGroup], pools: Sequence[StandbyPool], settings: Settings,
                     targets: Mapping[str, StandbyTarget] | None = None) -> list[tuple[StandbyPool, PoolWrite]]:
    """The writes that bring each Flexible group's pool to its target (pure: no call is made here)."""
    writes = []
    for group in groups:
        if group.provider != FLEXIBLE_SCALE_SET:
            continue
        pool = pool_of(group, pools)
        if pool is None:
            continue
        target = group_target(group, settings, targets)
        if target is None:
            continue
        wanted, why = target.count, target.why
        ready = pool_ready_count(group, wanted)
        if ready != wanted:
            why = f"{why}, capped at {ready} (room below max {group.max_size}: {max(0, group.max_size - group.capacity)})"
        if (pool.max_ready, pool.min_ready) != (ready, ready):
            writes.append((pool, PoolWrite(group.id, f"{pool.resource_group}/{pool.name}",
                                           (pool.max_ready, pool.min_ready), ready, why)))
    return writes


def list_pools(ports: Ports, groups: Sequence[NodeGroup]) -> tuple[StandbyPool, ...]:
    """The Standby Pools of the node resource groups (the adapter's cached list); none without the port
    (STANDBY_POOLS=false), without a Flexible group (no call), or when the listing fails (logged)."""
    source = ports.standby_pools
    if source is None or not any(g.provider == FLEXIBLE_SCALE_SET for g in groups):
        return ()
    try:
        return tuple(source.list_standby_pools())
    except ComputeError as exc:
        log.warning("standby pools not read, left as they are, no group served by one this time: %s", exc)
        return ()


def pooled_ids(groups: Sequence[NodeGroup], pools: Sequence[StandbyPool]) -> frozenset[str]:
    """The Flexible groups among `groups` whose scale set has a pool in `pools` (pure)."""
    return frozenset(g.id for g in groups if g.provider == FLEXIBLE_SCALE_SET and pool_of(g, pools) is not None)


def pooled_group_ids(ports: Ports, groups: Sequence[NodeGroup]) -> frozenset[str]:
    """The groups served by a Standby Pool (`list_pools`, then `pooled_ids`); none with STANDBY_POOLS=false."""
    return pooled_ids(groups, list_pools(ports, groups))


def adjust_standby_pools(ports: Ports, settings: Settings, groups: Sequence[NodeGroup],
                         targets: Mapping[str, StandbyTarget] | None = None, *,
                         pools: Sequence[StandbyPool] | None = None) -> list[PoolWrite]:
    """Writes the pools whose target changed; the writes made. `targets`: the poll's standby decisions (with
    the forecast, so `auto` sizes pools too); `pools`: the poll's `list_pools` (None: listed here)."""
    source = ports.standby_pools
    if source is None:
        return []
    if pools is None:
        pools = list_pools(ports, groups)
    if not pools:
        return []
    done = []
    for pool, write in plan_pool_writes(groups, pools, settings, targets):
        if settings.dry_run:
            log.info("standby pool %s would be set to %d ready VMs (%s)", write.pool, write.ready, write.why)
            continue
        try:
            source.update_standby_pool(pool, max_ready=write.ready, min_ready=write.ready)
        except ComputeError as exc:
            log.warning("standby pool %s not updated to %d ready VMs: %s", write.pool, write.ready, exc)
            continue
        log.info("standby pool %s set to %d ready VMs (was max %d, min %d): %s", write.pool, write.ready,
                 *write.before, write.why, extra={"group": write.group_id, "standby_pool": write.pool})
        done.append(write)
    return done
