"""Event Grid delivery for the local runner, as Event Grid and the Functions host do it.

Each Event Grid-triggered function is a subscription of its own: every event goes to every function,
one invocation per event, the payload bound by the Python worker's own converter (an Event Grid schema
event becomes a `func.EventGridEvent`). Delivery is at-least-once: an invocation that raises is retried
after 10 s, 30 s, 1 min and 5 min of the runner's clock (the sandbox's time when it has one), Event
Grid's schedule cut to 5 attempts; after the fifth failure the event is dropped and logged as
dead-lettered. A failed event does not hold back the ones after it.

Where the events come from is a callable, `fetch(after) -> [{"seq": int, "event": {...}}, ...]`: the
sandbox's `GET /sandbox/eventgrid/events?after=<seq>` (devtools.runner.sandbox_events_source) or a test's
list. It raises `EventsSourceMissing` when there is no such source (the sandbox answers 404): logged once
at debug, asked again now and then, never an error.

Invocations run on the runner's thread pool, as its queue messages do, so a slow function never holds
back the timers or the queue. Each function takes its events one at a time in `seq` order (Event Grid
promises no order; keeping one makes runs reproducible), and the next poll resumes a function whose
previous invocations are still running.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shared.ports import Clock

log = logging.getLogger("devtools.runner")

# Event Grid's retry schedule (10 s, 30 s, 1 min, 5 min, ...), cut to MAX_ATTEMPTS deliveries.
RETRY_DELAYS = (timedelta(seconds=10), timedelta(seconds=30), timedelta(minutes=1), timedelta(minutes=5))
MAX_ATTEMPTS = 5
ABSENT_RECHECK_SECONDS = 30.0  # wall seconds before a missing events source is asked again

EventsFetch = Callable[[int], Sequence[Mapping[str, Any]]]


class EventsSourceMissing(Exception):
    """There is no events source to ask (the sandbox has no /sandbox/eventgrid/events)."""


@dataclass(frozen=True)
class EventGridFunction:
    name: str
    call: Callable[..., Any]
    arg_name: str


def to_event_grid_event(event: Mapping[str, Any]) -> Any:
    """The event as the Python worker binds it: the worker's own converter (`eventTime` parsed to a UTC
    datetime; a CloudEvents v1.0 payload, with `specversion`, becomes a func.CloudEvent)."""
    from azure.functions import meta
    from azure.functions.eventgrid import EventGridEventInConverter

    return EventGridEventInConverter.decode(meta.Datum(json.dumps(event), "json"), trigger_metadata={})


@dataclass
class _Pending:
    seq: int
    event: Mapping[str, Any]
    attempts: int = 0
    not_before: datetime | None = None


class EventGridDelivery:
    """Polls the events source and delivers each new event to every Event Grid function."""

    def __init__(
        self,
        functions: Sequence[EventGridFunction],
        fetch: EventsFetch | None,
        *,
        clock: Clock,
        pool: Executor,
        count: Callable[[str], None] = lambda kind: None,  # "invocation", "failure", "dead_lettered"
        after: int = 0,
    ) -> None:
        self.functions = list(functions)
        self._fetch = fetch
        self._clock = clock
        self._pool = pool
        self._count = count
        self.after = after  # the highest seq taken from the source
        self._lanes: dict[str, list[_Pending]] = {f.name: [] for f in self.functions}
        self._busy: dict[str, Future[None]] = {}
        self._lock = threading.Lock()
        self._absent_until = 0.0
        self._absent_logged = False
        self._failing = False

    @property
    def active(self) -> bool:
        return bool(self.functions) and self._fetch is not None

    def poll(self) -> list[Future[None]]:
        """Take the new events from the source and start every function that has an event due; the
        started deliveries are returned (the runner waits for them before it stops)."""
        if not self.active:
            return []
        self._take_new_events()
        return self._start_due()

    def in_flight(self) -> list[Future[None]]:
        with self._lock:
            return [future for future in self._busy.values() if not future.done()]

    def pending(self) -> int:
        """Deliveries not yet done: due now, waiting for a retry, or running."""
        with self._lock:
            return sum(len(lane) for lane in self._lanes.values())

    # -- plumbing ------------------------------------------------------------------------

    def _take_new_events(self) -> None:
        if time.monotonic() < self._absent_until:
            return
        assert self._fetch is not None
        try:
            entries = self._fetch(self.after)
        except EventsSourceMissing as exc:
            self._absent_until = time.monotonic() + ABSENT_RECHECK_SECONDS
            if not self._absent_logged:
                self._absent_logged = True
                log.debug("no Event Grid events source (%s); Event Grid functions get no events", exc)
            return
        except Exception as exc:  # the sandbox restarting, a timeout: ask again next tick
            if not self._failing:
                self._failing = True
                log.warning("cannot read Event Grid events (%s); asking again", exc)
            return
        if self._failing:
            self._failing = False
            log.info("Event Grid events readable again")
        fresh = sorted((e for e in entries if int(e["seq"]) > self.after), key=lambda e: int(e["seq"]))
        if not fresh:
            return
        with self._lock:
            for entry in fresh:
                seq = int(entry["seq"])
                if seq <= self.after:  # the same seq twice in one answer
                    continue
                self.after = seq
                for lane in self._lanes.values():
                    lane.append(_Pending(seq, entry["event"]))

    def _start_due(self) -> list[Future[None]]:
        started = []
        now = self._clock.now()
        with self._lock:
            for function in self.functions:
                busy = self._busy.get(function.name)
                if busy is not None and not busy.done():
                    continue
                if any(self._due(p, now) for p in self._lanes[function.name]):
                    future = self._pool.submit(self._run_lane, function)
                    self._busy[function.name] = future
                    started.append(future)
        return started

    @staticmethod
    def _due(pending: _Pending, now: datetime) -> bool:
        return pending.not_before is None or pending.not_before <= now

    def _run_lane(self, function: EventGridFunction) -> None:
        """Deliver the function's due events in seq order until none is due."""
        while True:
            now = self._clock.now()
            with self._lock:
                pending = next((p for p in self._lanes[function.name] if self._due(p, now)), None)
            if pending is None:
                return
            ok = self._invoke(function, pending)
            with self._lock:
                pending.attempts += 1
                if ok or pending.attempts >= MAX_ATTEMPTS:
                    self._lanes[function.name].remove(pending)
                else:
                    pending.not_before = self._clock.now() + RETRY_DELAYS[min(pending.attempts, len(RETRY_DELAYS)) - 1]
            if not ok and pending.attempts >= MAX_ATTEMPTS:
                self._count("dead_lettered")
                log.error("Event Grid event %s (seq %d) failed %d deliveries to %s: dropped (dead-lettered)",
                          pending.event.get("id"), pending.seq, pending.attempts, function.name)

    def _invoke(self, function: EventGridFunction, pending: _Pending) -> bool:
        self._count("invocation")
        try:
            function.call(**{function.arg_name: to_event_grid_event(pending.event)})
            return True
        except Exception:
            self._count("failure")
            log.exception("Event Grid function %s failed on event %s (seq %d, attempt %d of %d)", function.name,
                          pending.event.get("id"), pending.seq, pending.attempts + 1, MAX_ATTEMPTS)
            return False
