"""Warm standby: how many deallocated instances a group keeps ready, and how many it has.

Pure module: no SDK, no I/O.

A standby instance is one of the group's instances kept deallocated (listed in `GroupState.stopped`, the
list SCALE_DOWN_MODE=deallocate keeps): a scale-up starts it before creating any instance, so the pods wait
for a VM start instead of a create, boot and join. While stopped it is never counted as capacity for pods;
it bills its disks and (a regular VM) keeps holding its cores against the subscription's quota.

How many: the setting STANDBY_INSTANCES, overridden per group by the scale-set tag `autoscaler-standby`;
either a whole number or `auto`.

- A count is kept as given.
- `auto` is the forecast of the next hour's peak scale-up of the group (nodes, rounded up), at most
  STANDBY_MAX; no forecast yet: none. Then the break-even cap (`break_even_cap`).
- An active scheduled window's `standby` raises the target to at least its count.
- Every target is capped by the group's max minus its min: a group never runs fewer than min nodes, so
  more standby than max - min could never all be started.
- A spot group whose eviction policy is Delete keeps none: its instances cannot be deallocated.
- An AKS agent pool keeps none: AKS deallocates and starts its nodes itself (the pool's `scaleDownMode:
  Deallocate`), and changing its scale sets directly is unsupported. Uniform and Flexible scale sets keep it.

Why a standby instance pays (the break-even cap of `auto`). Its disk bills `disk_price_hour` every hour
it is stopped. Each time one is used it saves, against a group without standby, three spans of
`boot - start` (the boot estimate less the start estimate), each priced at the node's price:
1. the instance is billed from its start to Ready instead of from its creation to Ready;
2. the idle time: an idle node whose return costs a start is kept idle a start's worth of time before it
   is deallocated into standby (the break-even rule of engine.idle with a start as the cost of coming
   back), instead of a boot's worth before it is deleted;
3. the pods' wait: they wait a start instead of a boot. It is priced at the node's price for that time,
   the same weight the break-even idle rule gives a boot (an assumption: the worth of a wait is the
   user's to judge; a fixed count is the way to buy more of it).
The cap keeps the standby's disk cost over the hour within what the forecast's starts save in it: at
most floor(forecast x saving / disk price) instances, each of the forecast nodes counted once. With
prices unknown there is no cap (the reason says so); with a start no shorter than a boot standby saves
nothing, and auto keeps none.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, Protocol

from shared.discovery_tags import tag
from shared.domain import FLEXIBLE_SCALE_SET, UNIFORM_SCALE_SET, GroupState, NodeGroup, instance_order

STANDBY_TAG: Final = "autoscaler-standby"
# The backends whose instances we deallocate and start ourselves.
STANDBY_BACKENDS: Final = frozenset({UNIFORM_SCALE_SET, FLEXIBLE_SCALE_SET})
AUTO: Final = "auto"
# The spans of boot - start one use of a standby instance saves (the module docstring lists them).
SAVED_SPANS_PER_USE: Final = 3
# The start estimate without a measured start: half the boot estimate. No primary source gives how long a
# deallocated VM takes to start and rejoin against a create (shared/facts/capacity-ahead-gangs-sizes.md,
# "Azure": unverified); half is the fastest the replays assume (a start median of 50 s against a
# create-and-boot median of 100 s), so the saving is never taken from an optimistic guess.
START_FRACTION: Final = 0.5
# A stopped instance's OS disk, as the app estimates its bill: the Premium SSD LRS tier AKS gives a VM size
# by its vCPUs (azure-aks-docs concepts-storage.md, "Managed OS disks"), at its list price, East US, USD per
# disk-month (Azure Retail Prices, 2026-11; the sandbox bills the same figures, sandbox/model/os_disks.py).
# (least vCPUs, USD per month), largest first. A month is Azure's 730 hours. Data disks are not counted.
OS_DISK_PRICES: Final = ((64, 135.17), (16, 73.22), (8, 38.01), (1, 19.71))
HOURS_PER_MONTH: Final = 730.0
_HOUR = timedelta(hours=1)


class ForecastLike(Protocol):
    """What `auto` reads of a forecast (engine.forecast.Forecast): the next hour's peak scale-up, in nodes."""

    @property
    def nodes(self) -> float: ...


@dataclass(frozen=True, slots=True)
class StandbyOptions:
    """The app's standby settings (shared.options.standby_options): STANDBY_INSTANCES and STANDBY_MAX."""

    configured: str = "0"  # a whole number or auto; a group's `autoscaler-standby` tag wins over it
    max_auto: int = 10

    def __post_init__(self) -> None:
        parse_standby(self.configured)
        if self.max_auto < 0:
            raise ValueError(f"STANDBY_MAX must not be negative, got {self.max_auto}")


@dataclass(frozen=True, slots=True)
class StandbyTarget:
    """How many deallocated instances the group is to keep ready, and why that many (for status and plan)."""

    count: int
    why: str

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"a standby target cannot be negative, got {self.count}")


@dataclass(frozen=True, slots=True)
class StandbyView:
    """The group's standby now: its listed stopped instances that exist (`present`), and the listed ones gone."""

    stopped: tuple[str, ...] = ()  # listed in GroupState.stopped and present, by instance id
    gone: frozenset[str] = frozenset()  # listed, but gone or being deleted

    @property
    def count(self) -> int:
        return len(self.stopped)


def parse_standby(text: str) -> int | str:
    """A standby setting or tag: a whole number (0 or more) or `auto` (any case, blanks ignored); ValueError else."""
    value = text.strip().lower()
    if value == AUTO:
        return AUTO
    try:
        count = int(value)
    except ValueError:
        raise ValueError(f"must be a whole number or {AUTO}, got {text!r}") from None
    if count < 0:
        raise ValueError(f"must not be negative, got {text!r}")
    return count


def configured_standby(group: NodeGroup, setting: str) -> int | str:
    """The group's standby setting: its `autoscaler-standby` tag (any case of the key) if set, else `setting`.

    A malformed tag raises ValueError naming the group and the tag: the poll reports it, as other tags.
    """
    value = tag(group.tags, STANDBY_TAG)
    if value is None:
        return parse_standby(setting)
    try:
        return parse_standby(value)
    except ValueError as exc:
        raise ValueError(f"scale set {group.id}: tag {STANDBY_TAG}: {exc}") from exc


def saving_per_use(*, boot: timedelta, start: timedelta, node_price_hour: float) -> float:
    """USD one use of a standby instance saves (the module docstring's three spans of boot - start)."""
    return SAVED_SPANS_PER_USE * max(boot - start, timedelta()) / _HOUR * node_price_hour


def break_even_cap(forecast_nodes: float, *, boot: timedelta, start: timedelta, disk_price_hour: float,
                   node_price_hour: float) -> int:
    """The most standby instances whose disks, over the next hour, cost no more than the forecast's starts save."""
    if forecast_nodes <= 0 or boot <= start:
        return 0
    if disk_price_hour <= 0:
        return math.ceil(forecast_nodes)
    saved = forecast_nodes * saving_per_use(boot=boot, start=start, node_price_hour=node_price_hour)
    # A tiny epsilon so that an exact break-even (a round product in floats) counts as paying.
    return math.floor(saved / disk_price_hour + 1e-9)


def standby_target(group: NodeGroup, *, configured: str, max_auto: int, forecast: ForecastLike | None,
                   boot: timedelta, start: timedelta, disk_price_hour: float | None,
                   node_price_hour: float | None, window_standby: int | None = None,
                   starts_measured: int = 0) -> StandbyTarget:
    """How many deallocated instances `group` keeps ready (see the module docstring for the rule).

    `configured`: STANDBY_INSTANCES (the group's `autoscaler-standby` tag wins over it); `max_auto`:
    STANDBY_MAX; `forecast`: the next hour's peak scale-up of the group, None before there is one;
    `boot`/`start`: the group's boot and start estimates; prices in USD per hour, None when unknown;
    `window_standby`: an active scheduled window's standby count, None outside windows; `starts_measured`: how
    many measured starts `start` is the median of (0: assumed, half the boot), which `auto`'s why says.
    Raises ValueError on a malformed tag or setting, naming it.
    """
    if max_auto < 0:
        raise ValueError(f"STANDBY_MAX must not be negative, got {max_auto}")
    if window_standby is not None and window_standby < 0:
        raise ValueError(f"a scheduled window's standby must not be negative, got {window_standby}")
    setting = configured_standby(group, configured)
    if group.is_spot and group.eviction_policy.lower() != "deallocate":
        return StandbyTarget(0, "spot with eviction policy Delete: its instances cannot be deallocated")
    if group.provider not in STANDBY_BACKENDS:
        return StandbyTarget(0, f"{group.provider}: standby instances are kept on scale sets only (an AKS pool "
                                "deallocates through its own scaleDownMode)")
    room = max(group.max_size - group.min_size, 0)
    if setting == AUTO:
        count, why = _auto(max_auto=max_auto, forecast=forecast, boot=boot, start=start,
                           disk_price_hour=disk_price_hour, node_price_hour=node_price_hour)
        if forecast is not None:
            why = f"{why}; {_start_phrase(start, starts_measured)}"
    else:
        assert isinstance(setting, int)
        count, why = setting, f"fixed {setting}"
    if window_standby is not None and window_standby > count:
        count, why = window_standby, f"scheduled window: {window_standby} (above {why})"
    if count > room:
        count, why = room, f"{why}; capped at max - min = {room}"
    return StandbyTarget(count, why)


def _auto(*, max_auto: int, forecast: ForecastLike | None, boot: timedelta, start: timedelta,
          disk_price_hour: float | None, node_price_hour: float | None) -> tuple[int, str]:
    if forecast is None:
        return 0, "auto: no forecast yet"
    nodes = max(float(forecast.nodes), 0.0)
    count = math.ceil(nodes - 1e-9)
    why = f"auto: forecast {nodes:.1f} node(s) next hour"
    if count > max_auto:
        count, why = max_auto, f"{why}, at most STANDBY_MAX {max_auto}"
    if boot <= start:
        return 0, f"{why}; a start ({start.total_seconds():.0f} s) saves nothing on a boot " \
                  f"({boot.total_seconds():.0f} s)"
    if disk_price_hour is None or node_price_hour is None:
        return count, f"{why}; prices unknown: no break-even cap"
    cap = break_even_cap(nodes, boot=boot, start=start, disk_price_hour=disk_price_hour,
                         node_price_hour=node_price_hour)
    if cap < count:
        return cap, (f"{why}; break-even: disks ${disk_price_hour:.4f}/h each against "
                     f"${saving_per_use(boot=boot, start=start, node_price_hour=node_price_hour):.4f} saved per start")
    return count, why


def start_estimate(boot: timedelta, starts: Sequence[float] = ()) -> timedelta:
    """How long a standby instance takes from its start request to Ready again: the median of the group's measured
    `starts` (seconds, engine.idle.measure_starts), START_FRACTION of its boot estimate before the first."""
    if starts:
        return timedelta(seconds=statistics.median(starts))
    return boot * START_FRACTION


def _start_phrase(start: timedelta, measured: int) -> str:
    seconds = start.total_seconds()
    if measured:
        return f"start {seconds:.0f} s measured (median of {measured})"
    return f"start {seconds:.0f} s assumed (half the boot: no start seen yet)"


def os_disk_price_hour(vcpus: int) -> float:
    """USD per hour a stopped instance of `vcpus` vCPUs bills for its OS disk (OS_DISK_PRICES)."""
    if vcpus < 1:
        raise ValueError(f"a VM size has at least 1 vCPU, got {vcpus}")
    monthly = next(price for least, price in OS_DISK_PRICES if vcpus >= least)
    return monthly / HOURS_PER_MONTH


def standby_view(state: GroupState, present: Collection[str]) -> StandbyView:
    """The group's standby now: which of the instances its row lists as stopped exist (`present`: a fresh list
    of its instances that exist and are not being deleted), by instance id, and which are gone."""
    live = tuple(sorted((i for i in state.stopped if i in present), key=instance_order))
    return StandbyView(stopped=live, gone=frozenset(state.stopped - set(live)))


def refill_count(target: StandbyTarget, view: StandbyView, group: NodeGroup) -> int:
    """How many standby instances to create now: what the target lacks, within what the group could still start
    (its max less the nodes it runs): an instance that could not be started at once would only bill its disk."""
    startable = max(group.max_size - group.running_target, 0)
    return max(min(target.count, startable) - view.count, 0)
