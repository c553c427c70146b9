"""One scale-down plan at a time: a lease named in one ledger row, taken and given back by compare-and-swap.

The timer's utilisation poll and a scale-down round (rounds.py) can run at the same moment on two
queue or timer workers. Each would read the same free MAX_SCALE_DOWN_PARALLELISM slots and hand them
out to different nodes, so twice the parallelism would be in flight (seen in the many-idle scenario).
A plan therefore runs only while it holds this lease; a poll that finds it held skips, as
cluster-autoscaler runs one loop at a time. The one holding it asks for the next round if nodes still
wait, so nothing waits for the next tick. A lease whose holder died counts no longer than LEASE_TIME.
A lease row that cannot be read (`UnreadableRow`) is held by nobody knows whom: no plan runs (the error names
the row) until an operator repairs or deletes it, and it is never written over.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta

from shared.ports import LedgerEntry, Ports, UnreadableRow

log = logging.getLogger(__name__)

LEASE_ROW = "scale-down-plan"
LEASE_KIND = "scale_down_plan"
# host.json's functionTimeout: no invocation holding the lease lives longer.
LEASE_TIME = timedelta(minutes=5)


@contextmanager
def plan_lease(ports: Ports, *, now: datetime) -> Iterator[bool]:
    """Hold the lease for the block: yields True, or False (holding nothing) when another plan holds it."""
    holder = uuid.uuid4().hex
    taken = _take(ports, holder, now=now)
    try:
        yield taken
    finally:
        if taken:
            _give_back(ports, holder)


def _take(ports: Ports, holder: str, *, now: datetime) -> bool:
    try:
        entry = ports.state.get_ledger_entry(LEASE_ROW)
    except UnreadableRow as exc:
        log.error("the scale-down plan lease cannot be read: %s; no scale-down is planned until the row is "
                  "repaired or deleted", exc)
        return False
    if entry is None:
        return ports.state.create_ledger_entry(LedgerEntry(
            LEASE_ROW, kind=LEASE_KIND, group="", progress=(0, 0), status="done", updated_at=now,
            outcome="lease", operation=holder))
    if entry.operation and now - entry.updated_at < LEASE_TIME:
        log.info("another scale-down plan is running (since %s): this poll skips", entry.updated_at.isoformat())
        return False
    if entry.operation:
        log.warning("the scale-down plan lease taken at %s was never given back: taken over",
                    entry.updated_at.isoformat())
    # Of two polls racing for a free lease, one wins the swap.
    return ports.state.update_ledger_entry(replace(entry, operation=holder, updated_at=now))


def _give_back(ports: Ports, holder: str) -> None:
    entry = ports.state.get_ledger_entry(LEASE_ROW)
    if entry is None or entry.operation != holder:
        return  # taken over after LEASE_TIME: no longer ours to give back
    if not ports.state.update_ledger_entry(replace(entry, operation="")):
        log.info("the scale-down plan lease changed hands while it was given back")
