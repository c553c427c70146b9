"""Retention: state that no decision reads any more is swept, a bounded amount per run.

The ledger gains a row per action and per refused message, and nothing else ever removes them;
the unneeded partition keeps a row per node that was idle, and a node removed while no
utilisation poll ran (scale-down off, polls failing) leaves its row behind. Both would grow for
ever. Swept here, on the `sweep_state` timer:

- ledger rows of finished actions (an outcome recorded) last updated more than STATE_RETENTION
  ago. A row without an outcome is an action still in flight, or one `reconcile` is yet to give
  back: it is left alone, and one older than the retention is logged.
- unneeded rows older than STATE_RETENTION of nodes that are no longer in the cluster. A live
  node's row is its unneeded clock, which the utilisation poll owns.

Group rows are live state (cooldowns, backoff, reservations) and are never swept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from shared import telemetry
from shared.services.offerings import forget_expired
from shared.ports import Ports
from shared.settings import Settings

log = logging.getLogger(__name__)

# Rows deleted per run at most: one Table delete each, so a run stays well inside the function's timeout
# even after a long outage left a backlog; the next runs take the rest.
MAX_SWEPT_PER_RUN = 1000


@dataclass(frozen=True, slots=True)
class SweepResult:
    ledger_deleted: int
    unneeded_deleted: int
    more_left: bool  # the run stopped at MAX_SWEPT_PER_RUN; the next one goes on


def run_state_sweep(ports: Ports, settings: Settings, *, now: datetime, limit: int = MAX_SWEPT_PER_RUN) -> SweepResult:
    with telemetry.poll("sweep_state"):
        return _sweep(ports, settings, now=now, limit=limit)


def _sweep(ports: Ports, settings: Settings, *, now: datetime, limit: int) -> SweepResult:
    cutoff = now - settings.state_retention
    finished = ports.state.list_finished_ledger(updated_before=cutoff, limit=limit)
    ledger_deleted = sum(1 for entry in finished if ports.state.delete_ledger_entry(entry))
    budget = limit - len(finished)
    unneeded_deleted = 0
    stale = {node: since for node, since in ports.state.list_unneeded().items() if since < cutoff}
    if stale and budget > 0:
        present = {node.name for node in ports.cluster.list_nodes()}
        for node in sorted(n for n in stale if n not in present)[:budget]:
            ports.state.clear_unneeded(node)
            unneeded_deleted += 1
    more_left = len(finished) >= limit or unneeded_deleted >= budget > 0
    # Unavailable offerings mean nothing once expired (the planner ignores them): their rows go at once.
    offerings_deleted = forget_expired(ports, now=now)
    log.info("state sweep: %d ledger row(s) and %d unneeded row(s) older than %s removed, %d expired offering "
             "mark(s)%s", ledger_deleted, unneeded_deleted, cutoff.isoformat(), offerings_deleted,
             "; more left for the next run" if more_left else "")
    return SweepResult(ledger_deleted, unneeded_deleted, more_left)
