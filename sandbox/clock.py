"""Simulated time.

The world never reads the wall clock: whoever drives it passes the time in.
`SimClock` maps wall time onto sim time at a fixed speed (the live server), and stands still while
the local runner holds it (it has due work it has not finished); `ManualClock` only moves when told
to (tests and replays).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

DEFAULT_HOLD_LEASE = 10.0  # wall seconds a hold lasts unless renewed
# The hold a sandbox started with `wait_for_runner` keeps until the local runner takes the clock over (and ends it).
START_HOLDER = "sandbox-start"


class Clock(Protocol):
    """What the server needs from a clock: sim 'now' and how fast sim time runs against wall time."""

    @property
    def speed(self) -> float: ...

    def now(self) -> datetime: ...


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("clock start must be timezone-aware")
    return moment.astimezone(UTC)


class SimClock:
    """now() = start + (monotonic wall seconds elapsed) * speed, except while a hold stops it.

    Whoever does work in sim time against this clock (the local functions runner) may hold it: a hold
    `until` a sim time lets the clock run up to that time and no further, for `lease` wall seconds unless
    renewed. Wall time spent held is not sim time: when the last hold ends, the clock runs on from where it
    stood. So a runner starved of CPU does not see sim time run on without it (a busy machine would
    otherwise multiply each of its stalls by the speed), and a runner that dies holding the clock (SIGKILL)
    stops holding it when its lease runs out.
    """

    def __init__(self, start: datetime, speed: float = 1.0, *, held_by: str | None = None,
                 lease: float = DEFAULT_HOLD_LEASE) -> None:
        """`held_by`: the clock starts held at 0 by that holder, for `lease` wall seconds."""
        if speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self._start = _utc(start)
        self._speed = float(speed)
        self._lock = threading.Lock()
        # Sim seconds at the wall instant `_base_wall`; monotonic: immune to wall-clock jumps (NTP, DST).
        self._base_sim = 0.0
        self._base_wall = time.monotonic()
        self._holds: dict[str, _Hold] = {}
        if held_by is not None:
            self._holds[held_by] = _Hold(0.0, self._base_wall + lease)

    @property
    def speed(self) -> float:
        return self._speed

    @property
    def start(self) -> datetime:
        return self._start

    def now(self) -> datetime:
        with self._lock:
            return self._start + timedelta(seconds=self._settle(time.monotonic()))

    def sim_seconds(self) -> float:
        with self._lock:
            return self._settle(time.monotonic())

    def hold(self, holder: str, *, until: float | None = None, lease: float = DEFAULT_HOLD_LEASE) -> float:
        """Let sim time run no further than `until` sim seconds (None: stop it where it is now) for `lease` wall
        seconds, replacing `holder`'s previous hold; returns the sim seconds now. A bound already passed stops
        the clock where it is (time never runs back)."""
        if not holder:
            raise ValueError("a hold needs a holder name")
        if not (lease > 0 and math.isfinite(lease)):
            raise ValueError(f"a hold's lease must be a positive number of wall seconds, got {lease}")
        if until is not None and not math.isfinite(until):
            raise ValueError(f"a hold's bound must be a finite number of sim seconds, got {until}")
        with self._lock:
            wall = time.monotonic()
            current = self._settle(wall)
            self._holds[holder] = _Hold(current if until is None else until, wall + lease)
            return current

    def release(self, holder: str) -> float:
        """End `holder`'s hold (none: nothing to do); returns the sim seconds now."""
        with self._lock:
            current = self._settle(time.monotonic())
            self._holds.pop(holder, None)
            return current

    def bound(self) -> float | None:
        """The sim seconds the live holds let the clock reach (None: nothing holds it)."""
        with self._lock:
            self._settle(time.monotonic())
            return min((h.until for h in self._holds.values()), default=None)

    def _settle(self, wall: float) -> float:
        """Bring the base to `wall`: holds whose lease ran out end at their expiry, in order; the time the clock
        stood at a bound is dropped. Call with the lock held."""
        for holder, hold in sorted(self._holds.items(), key=lambda item: item[1].expires):
            if hold.expires > wall:
                break
            self._advance_to(hold.expires)
            del self._holds[holder]
        return self._advance_to(wall)

    def _advance_to(self, wall: float) -> float:
        running = self._base_sim + max(0.0, wall - self._base_wall) * self._speed
        bound = min((h.until for h in self._holds.values()), default=math.inf)
        self._base_sim = max(self._base_sim, min(running, bound))
        self._base_wall = max(self._base_wall, wall)
        return self._base_sim


@dataclass(frozen=True)
class _Hold:
    until: float  # sim seconds the clock may reach
    expires: float  # monotonic wall seconds


class ManualClock:
    """A clock that stands still until `advance` is called; speed is 1 for Retry-After conversions."""

    def __init__(self, start: datetime) -> None:
        self._start = _utc(start)
        self._now = self._start
        self._lock = threading.Lock()  # tests advance it while the server's ticker reads it

    @property
    def speed(self) -> float:
        return 1.0

    @property
    def start(self) -> datetime:
        return self._start

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        if seconds < 0:
            raise ValueError("time only moves forward")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now
