"""Simulated time.

The world never reads the wall clock: whoever drives it passes the time in.
`SimClock` maps wall time onto sim time at a fixed speed (the live server);
`ManualClock` only moves when told to (tests and replays).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


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
    """now() = start + (monotonic wall seconds elapsed) * speed."""

    def __init__(self, start: datetime, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self._start = _utc(start)
        self._speed = float(speed)
        self._t0 = time.monotonic()  # monotonic: immune to wall-clock jumps (NTP, DST)

    @property
    def speed(self) -> float:
        return self._speed

    @property
    def start(self) -> datetime:
        return self._start

    def now(self) -> datetime:
        return self._start + timedelta(seconds=(time.monotonic() - self._t0) * self._speed)


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
