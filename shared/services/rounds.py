"""Scale-down rounds: the utilisation poll again, from the queue, while due nodes wait for a slot.

The timer plans the scale-down once a minute. With MAX_SCALE_DOWN_PARALLELISM nodes being
drained and more due, a slot freed by a committed delete would sit unused until the next tick:
on a 500-node cluster that alone makes the last idle node wait most of an hour. So a poll that
kept nodes for want of a slot asks for a round SCALE_DOWN_ROUND_INTERVAL later, a message on the
action queue that runs the same poll (`Executor` hands it here).

One round is pending at a time, named in one ledger row (`ROUND_ROW`, written by compare-and-swap):
a poll asks for a round only when none is pending, and a round runs only if it is the one the row
names. A duplicate delivery, a round from before a restart or a forged message is dropped, so
rounds never multiply and never run more often than the interval. A pending round whose message
was lost stops counting after ACTION_TTL, and the next poll asks again. A round row that cannot be read
(`UnreadableRow`) is never written over: no round is asked for or taken (the timer's poll still plans) until an
operator repairs or deletes it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from shared.actions import ROUND_KIND, ScaleDownRound, new_scale_down_round
from shared.ports import LedgerEntry, Ports, UnreadableRow
from shared.settings import Settings

log = logging.getLogger(__name__)

ROUND_ROW = "scale-down-round"  # the ledger row naming the pending round


def request_round(ports: Ports, settings: Settings, *, now: datetime) -> ScaleDownRound | None:
    """Send a round SCALE_DOWN_ROUND_INTERVAL from now, unless one is pending or rounds are off."""
    interval = settings.scale_down_round_interval
    if interval <= timedelta(0):
        return None
    try:
        entry = ports.state.get_ledger_entry(ROUND_ROW)
    except UnreadableRow as exc:
        log.error("no scale-down round asked for: %s; the timer's poll plans instead", exc)
        return None
    if entry is not None and entry.operation and now - entry.updated_at < interval + settings.action_ttl:
        return None  # one is on its way
    round_ = new_scale_down_round(now=now, ttl=interval + settings.action_ttl)
    # Sent before it is recorded: a crash in between leaves a message no row names (dropped when it
    # arrives), never a row naming a message that does not exist.
    ports.queue.send(round_, delay=interval)
    if entry is None:
        recorded = ports.state.create_ledger_entry(LedgerEntry(
            ROUND_ROW, kind=ROUND_KIND, group="", progress=(0, 0), status="done", updated_at=now,
            outcome="round", operation=round_.id))
    else:
        recorded = ports.state.update_ledger_entry(replace(entry, operation=round_.id, updated_at=now))
    if not recorded:
        log.info("another poll asked for a scale-down round meanwhile; %s will be dropped", round_.id)
        return None
    log.info("due nodes wait for a scale-down slot: planning again in %ss (%s)", interval.total_seconds(), round_.id)
    return round_


def take_round(ports: Ports, settings: Settings, round_: ScaleDownRound, *, now: datetime) -> bool:
    """Whether this round is the pending one and still fresh; if so it is no longer pending.

    Only the id comes from the message; when it was asked for comes from our own row.
    """
    try:
        entry = ports.state.get_ledger_entry(ROUND_ROW)
    except UnreadableRow as exc:
        log.error("scale-down round %s dropped: %s", round_.id, exc)
        return False
    if entry is None or entry.operation != round_.id:
        log.info("scale-down round %s dropped: not the pending round", round_.id)
        return False
    stale = now - entry.updated_at > settings.scale_down_round_interval + settings.action_ttl
    # Either way it is no longer pending; of two deliveries racing for it, one wins the swap.
    if not ports.state.update_ledger_entry(replace(entry, operation="", updated_at=now)):
        log.info("scale-down round %s dropped: another delivery took it", round_.id)
        return False
    if stale:
        log.info("scale-down round %s dropped: asked for at %s, too long ago", round_.id, entry.updated_at.isoformat())
    return not stale
