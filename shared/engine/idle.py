"""Idle time that pays for itself: how long an unneeded node is kept, from its group's measured boots.

Pure module, no side effects.

A node kept idle costs its price every second; a node removed too early costs a new boot (billed
from the VM's creation until it is Ready) when the demand comes back, and the pods wait for it. That
is the rent-or-buy (ski-rental) problem: keeping an idle node for as long as one boot costs, then
removing it, spends at most twice what a clairvoyant choice would on every idle gap (a gap shorter
than a boot is kept, as the clairvoyant would; a longer one costs the boot kept idle plus the boot
paid again, against the clairvoyant's one boot), and no deterministic rule does better.

`SCALE_DOWN_IDLE_MODE=break-even` (or the scale-set tag `..._autoscaling-options_scaledownidlemode`)
applies it: the group's unneeded time and its scale-down delay after a scale-up are its boot estimate
(`boot_estimate`: the median of the last `BOOT_WINDOW` measured boots, `DEFAULT_BOOT` before the
first). `fixed` keeps SCALE_DOWN_UNNEEDED_TIME and SCALE_DOWN_DELAY_AFTER_ADD, as cluster-autoscaler.
`auto` (the app's default) is break-even on a group of plain VMs and fixed on a group of GPU (or
FPGA) VMs (`resolve_idle_mode`): in the replays break-even nearly halved the batch trace's cost at the
same p95 wait, but lengthened the GPU trace's p95 wait by 12-14 s on every seed (its long jobs come
back after the node is gone and wait for a boot), and a GPU size given back may not be allocatable
again when it is wanted.

Boots are measured by the pending poll (`measure_boots`): each scale-up notes the new instances it
asked for (`note_boot_request`), and each new Ready node of the group takes the oldest request still
waiting for a node; its boot is from that request to the node's registration (`Node.created_at`).
Each request gives one boot, its median node's: the nodes of one request register fastest first, so
keeping every boot of a 60-node scale-up would fill the window with its slowest 20.

Starts of stopped (standby or deallocated) instances are measured the same way (`measure_starts`), one per
scale-up that started some: each such scale-up notes the instances it started (`note_start_request`), and
each of them is Ready again when its node is: a deallocated instance registers a fresh Node (its
`created_at`), a hibernated one keeps its Node and turns Ready again (the Node carries no transition time
here, so the first poll that sees it Ready). The start is from the request to the median instance's Ready.
Started instances are matched by instance id, so their fresh nodes are never taken for a boot.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from shared.domain import GroupState

FIXED = "fixed"
BREAK_EVEN = "break-even"
AUTO = "auto"
IDLE_MODES = (AUTO, FIXED, BREAK_EVEN)
# Azure's GPU and FPGA sizes are its N family (NC, ND, NG, NV, NCC, NP): `Standard_N...`.
_ACCELERATED_SIZE_PREFIX = "standard_n"

# The measured boots a group keeps (one per scale-up): enough for a stable median, few enough that a
# change of VM size or image shows within a day of scale-ups, and a small Table column (about 100 bytes).
BOOT_WINDOW = 20
# Scale-up requests still waiting for nodes that a group keeps; older ones beyond it are forgotten.
REQUEST_WINDOW = 50
# Start requests a group keeps (each lists its instance ids, so fewer than boot requests: a small Table column).
START_REQUEST_WINDOW = 10
# The estimate before a group's first measured boot. On Azure, AKS adds 1 node in 53 s (P50) and 50
# nodes in 76 s (P50, P99 250 s) (Azure/AKS-Performance-and-Scale, Oct 2024); users report 1-5 minutes
# per CPU node; a realistic model is a median of 90-120 s to Ready and a p95 of 4-5 minutes. 180 s sits
# between that median and p95: an unmeasured group is kept idle a little longer rather than shorter.
DEFAULT_BOOT = timedelta(seconds=180)
# The break-even time is one boot estimate: the classic rule's optimum (factor 1 is what makes it
# 2-competitive; a factor f gives max(1 + 1/f, 1 + f)). Factor 2 cost more in the replays without
# shortening the wait enough to matter; docs/architecture.md ("Idle time") has the figures.
BREAK_EVEN_FACTOR = 1.0


def parse_idle_mode(text: str) -> str:
    """`auto`, `fixed` or `break-even` (any case, surrounding blanks ignored); ValueError naming the choices
    otherwise."""
    value = text.strip().lower()
    if value not in IDLE_MODES:
        raise ValueError(f"must be one of {', '.join(IDLE_MODES)}, got {text!r}")
    return value


def accelerated_size(vm_size: str) -> bool:
    """Whether VMs of this size carry GPUs or FPGAs (Azure's N family)."""
    return vm_size.strip().lower().startswith(_ACCELERATED_SIZE_PREFIX)


def resolve_idle_mode(mode: str, *, vm_size: str) -> str:
    """`fixed` or `break-even` for a group of `vm_size` VMs: `auto` is fixed on accelerated sizes, else break-even."""
    if mode != AUTO:
        return mode
    return FIXED if accelerated_size(vm_size) else BREAK_EVEN


def boot_estimate(boots: Sequence[float], *, default: timedelta = DEFAULT_BOOT) -> timedelta:
    """The group's boot time as the break-even rule uses it: the median of `boots` (seconds), `default` with none.

    The median, not the mean: one boot stuck for 15 minutes (an allocation retried, an image pulled
    again) must not keep every idle node of the group for 15 minutes, nor one lucky boot remove them early.
    """
    if not boots:
        return default
    return timedelta(seconds=statistics.median(boots))


def break_even_time(boots: Sequence[float], *, default: timedelta = DEFAULT_BOOT) -> timedelta:
    """How long an unneeded node of the group is kept in break-even mode: its boot estimate times the factor."""
    return boot_estimate(boots, default=default) * BREAK_EVEN_FACTOR


def note_boot_request(state: GroupState, count: int, *, now: datetime) -> GroupState:
    """The state once the group was asked for `count` new instances at `now` (none: unchanged)."""
    if count <= 0:
        return state
    requests = (*state.boot_requests, (now, count, count))
    return replace(state, boot_requests=requests[-REQUEST_WINDOW:])


def measure_boots(state: GroupState, registered: Iterable[datetime], *, now: datetime,
                  give_up: timedelta, not_yet: Iterable[datetime] = (), usable_at: datetime | None = None
                  ) -> GroupState:
    """The state with the boots of the group's newly registered nodes measured.

    `registered`: when each of the group's Ready nodes registered (`Node.created_at`), all of them;
    those already counted (at or before `boots_counted_until`) or older than every waiting request
    are skipped. Each new one, oldest first, takes the oldest request still waiting for a node that
    was made before it registered; the request's median node (the ceil(n/2)-th of n to register) gives
    the request's one boot. Requests older than `give_up` (MAX_NODE_PROVISION_TIME) are dropped with
    their missing nodes: those are a ProvisionTimeout, not a boot, and a later node taking them would
    be measured from a request it did not answer. Returns `state` itself when nothing changed.

    Nodes that become capacity later than they register (a GPU node, once its GPUs are allocatable:
    engine.gpu_readiness) pass `usable_at` (this poll: each boot then runs to it, not to the registration) and
    `not_yet`, when the group's nodes not usable yet registered: no node registered after one of those is
    counted before it is, so counting stays in registration order whatever order the nodes become usable in.
    """
    waiting = [[at, asked, left] for at, asked, left in state.boot_requests if now - at <= give_up and left > 0]
    counted = state.boots_counted_until
    boots = list(state.boots)
    if waiting:
        oldest = waiting[0][0]
        blocked = min((t for t in not_yet if t >= oldest), default=None)
        for at in sorted(t for t in registered if t >= oldest and (counted is None or t > counted)
                         and (blocked is None or t < blocked)):
            request = next((r for r in waiting if r[0] <= at and r[2] > 0), None)
            if request is None:
                continue
            request[2] -= 1
            counted = at
            if _median_reached(request[1], request[2]):
                boots.append(round(((usable_at or at) - request[0]).total_seconds()))
    changed = replace(state, boots=tuple(boots[-BOOT_WINDOW:]),
                      boot_requests=tuple((at, asked, left) for at, asked, left in waiting if left > 0),
                      boots_counted_until=counted)
    return state if changed == state else changed


def note_start_request(state: GroupState, instance_ids: Iterable[str], *, now: datetime) -> GroupState:
    """The state once the group's stopped instances `instance_ids` were started at `now` (none: unchanged)."""
    started = tuple(dict.fromkeys(instance_ids))
    if not started:
        return state
    requests = (*state.start_requests, (now, started, started))
    return replace(state, start_requests=requests[-START_REQUEST_WINDOW:])


def starting_instances(state: GroupState) -> frozenset[str]:
    """The instances of the group's start requests still kept: their nodes are starts, not boots."""
    return frozenset(i for _, started, _ in state.start_requests for i in started)


def measure_starts(state: GroupState, ready: Mapping[str, datetime], *, now: datetime,
                   give_up: timedelta) -> GroupState:
    """The state with the starts of the group's started instances that are Ready again measured.

    `ready`: the group's Ready nodes, instance id -> the node's registration (`Node.created_at`). A started
    instance is Ready at its node's registration when that is at or after its request (a fresh Node: it was
    deallocated), else now (a kept Node, a hibernated instance: this poll is the first to see it Ready). The
    request's median instance (the ceil(n/2)-th of n to be Ready) gives its one start. A request is kept until
    `give_up` after it even once answered (`starting_instances`); its instances not Ready by then are a
    ProvisionTimeout, not a start. Returns `state` itself when nothing changed.
    """
    starts = list(state.starts)
    kept = []
    for at, started, left in state.start_requests:
        if now - at > give_up:
            continue
        answered = sorted((_ready_at(ready[i], at, now), i) for i in left if i in ready)
        remaining = len(left)
        for when, _ in answered:
            remaining -= 1
            if _median_reached(len(started), remaining):
                starts.append(round((when - at).total_seconds()))
        done = {i for _, i in answered}
        kept.append((at, started, tuple(i for i in left if i not in done)))
    changed = replace(state, starts=tuple(starts[-BOOT_WINDOW:]), start_requests=tuple(kept))
    return state if changed == state else changed


def _ready_at(registered: datetime, requested: datetime, now: datetime) -> datetime:
    return registered if registered >= requested else now


def _median_reached(asked: int, left: int) -> bool:
    """Whether the node just answered is a request's median: the ceil(n/2)-th of its n nodes."""
    return asked - left == (asked + 1) // 2
