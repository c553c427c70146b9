"""The sandbox's clock as the local runner reads and holds it.

The sandbox's sim time runs at a fixed speed against wall time, so every wall second the runner spends
behind (starved of CPU by a busy machine, or just doing its work) would be `speed` sim seconds in which
the world moves on without it: polls fire late, steps land late, and a scenario's figures would measure
the machine instead of the autoscaler. So the runner holds the sandbox's clock (POST /sandbox/clock/hold)
while it has due work in hand, and lets it run only up to its next timer while it has none
(`ClockHolder`); `SandboxClock` reads that clock, synced from every answer and extrapolated between them,
never past the bound the runner itself set.
"""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from sandbox.clock import START_HOLDER

log = logging.getLogger("devtools.sandbox_clock")

HOLD_LEASE_SECONDS = 10.0  # wall seconds a hold outlives its last renewal: a killed runner's hold ends by itself
RENEW_SECONDS = 1.0  # wall seconds between renewals of an unchanged hold
# Wall seconds one unchanged hold may last before the runner lets the clock run anyway. A hold that stands this
# long is a runner waiting on something the clock itself must bring (a many-idle run stood still at its first
# scale-down rounds): sim time then runs on, as without a hold, rather than the run hanging.
MAX_UNCHANGED_HOLD_SECONDS = 60.0


class ClockUnavailable(Exception):
    """The sandbox's clock cannot be held (a manual clock, or a sandbox without the endpoint)."""


class SandboxClockClient:
    """The sandbox's clock endpoints over one kept-alive HTTPS connection (thread-safe)."""

    def __init__(self, url: str, *, ca_path: str, timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError(f"the sandbox's URL must be https://host:port, got {url!r}")
        self._host, self._port = parts.hostname, parts.port or 443
        self._context = ssl.create_default_context(cafile=ca_path or None)
        self._timeout = timeout
        self._lock = threading.Lock()
        self._connection: http.client.HTTPSConnection | None = None

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        with self._lock:
            for attempt in (1, 2):  # a kept-alive connection the server closed meanwhile is opened again once
                if self._connection is None:
                    self._connection = http.client.HTTPSConnection(self._host, self._port, context=self._context,
                                                                   timeout=self._timeout)
                try:
                    self._connection.request(method, path, body=payload, headers=headers)
                    response = self._connection.getresponse()
                    return response.status, json.loads(response.read() or b"{}")
                except (OSError, http.client.HTTPException):
                    self._connection.close()
                    self._connection = None
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


class SandboxClock:
    """The sandbox's clock: synced from its answers, extrapolated at its speed in between, and never past
    the bound its holds set (the sandbox stops there too)."""

    def __init__(self, start: datetime, speed: float, *, client: SandboxClockClient | None = None,
                 sim_seconds: float = 0.0) -> None:
        self._origin = start - timedelta(seconds=sim_seconds)  # the sandbox's sim second 0
        self._speed = speed
        self._client = client
        self._lock = threading.Lock()
        self._synced_sim = sim_seconds
        self._synced_wall = time.monotonic()
        self._bound: float | None = None  # sim seconds the sandbox's holds (ours and any other) let it reach
        self._last = sim_seconds

    @classmethod
    def connect(cls, url: str, *, ca_path: str) -> SandboxClock:
        client = SandboxClockClient(url, ca_path=ca_path)
        status, body = client.request("GET", "/sandbox/clock")
        if status != 200:
            raise ClockUnavailable(f"{url}/sandbox/clock answered {status}: {body}")
        now = datetime.fromisoformat(body["now"].replace("Z", "+00:00"))
        clock = cls(now, float(body["speed"]), client=client, sim_seconds=float(body["sim_seconds"]))
        clock._bound = body.get("bound")  # a sandbox waiting for its runner stands still until the runner holds it
        return clock

    @property
    def speed(self) -> float:
        return self._speed

    def sim_seconds(self) -> float:
        with self._lock:
            running = self._synced_sim + (time.monotonic() - self._synced_wall) * self._speed
            if self._bound is not None:
                running = min(running, self._bound)
            self._last = max(self._last, running)  # never back, even when a sync lands a little behind
            return self._last

    def now(self) -> datetime:
        return self._origin + timedelta(seconds=self.sim_seconds())

    def at(self, moment: datetime) -> float:
        """A moment as the sandbox's sim seconds."""
        return (moment - self._origin).total_seconds()

    def hold(self, holder: str, *, until: float | None, lease: float = HOLD_LEASE_SECONDS) -> None:
        """Hold the sandbox's clock at `until` sim seconds (None: where it is now); raises ClockUnavailable when
        it cannot be held."""
        self._call("/sandbox/clock/hold", {"holder": holder, "until": until, "lease_seconds": lease})

    def release(self, holder: str) -> None:
        self._call("/sandbox/clock/release", {"holder": holder})

    def _call(self, path: str, body: dict[str, Any]) -> None:
        if self._client is None:
            raise ClockUnavailable("this clock is not connected to a sandbox")
        status, answer = self._client.request("POST", path, body)
        if status in (404, 409):
            raise ClockUnavailable(f"the sandbox cannot hold its clock ({status}: {answer.get('error')})")
        if status != 200:
            raise OSError(f"the sandbox answered {status} to {path}: {answer}")
        with self._lock:
            # The sandbox's bound is the lowest of every hold on it, ours included.
            self._synced_sim, self._synced_wall = float(answer["sim_seconds"]), time.monotonic()
            self._bound = answer.get("bound")


class ClockHolder:
    """Keeps the sandbox's clock from running ahead of the runner, on a thread of its own.

    Every `interval` wall seconds it asks `busy()` (the runner has due work it has not finished: a timer due or
    running, an invocation in hand, messages an invocation left that no queue poll has taken yet) and `next_due()`
    (the next timer's time). Busy: the clock is held where it is. Otherwise: it may run up to the next timer,
    where the sandbox stops it until the runner has fired that timer. The hold is renewed while it lasts and
    released at `stop()`; if the runner dies, its lease runs out on the sandbox's side.
    """

    def __init__(self, clock: SandboxClock, *, busy: Callable[[], bool], next_due: Callable[[], datetime | None],
                 interval: float = 0.02) -> None:
        self._clock = clock
        self._busy = busy
        self._next_due = next_due
        self._interval = interval
        self._holder = f"runner-{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sent: tuple[Any, ...] | None = None  # the last hold the sandbox accepted, and when (wall)
        self._sent_at = 0.0
        self.enabled = True  # False once the sandbox refused a hold (a manual clock): the runner runs unheld
        self._target: tuple[Any, ...] | None = None  # the hold the runner's state asks for, and since when (wall)
        self._target_since = 0.0
        self.overruns = 0  # holds let go after MAX_UNCHANGED_HOLD_SECONDS

    def start(self) -> ClockHolder:
        self._update()  # the first bound is in place before the runner does anything
        if self.enabled:
            try:  # a sandbox that waited for a runner (wait_for_runner) runs from here, under our hold
                self._clock.release(START_HOLDER)
            except (OSError, ClockUnavailable):
                log.warning("could not end the sandbox's start hold; it ends with its lease")
            self._thread = threading.Thread(target=self._loop, name="runner-clock-hold", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.enabled:
            try:
                self._clock.release(self._holder)
            except (OSError, ClockUnavailable):
                log.warning("could not release the sandbox clock; its hold ends with its lease")

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._update()

    def _update(self) -> None:
        if not self.enabled:
            return
        if self._busy():
            target: tuple[Any, ...] = ("hold",)
            until = None
        else:
            due = self._next_due()
            until = None if due is None else self._clock.at(due)
            target = ("until", until)
        now = time.monotonic()
        if target != self._target:
            self._target, self._target_since = target, now
        elif target != ("until", None) and now - self._target_since >= MAX_UNCHANGED_HOLD_SECONDS:
            if self._sent != ("until", None):
                self.overruns += 1
                log.warning("the runner held the sandbox's clock unchanged for %.0f wall seconds (%s); letting it run",
                            MAX_UNCHANGED_HOLD_SECONDS, target)
            target = ("until", None)
        if target == self._sent and now - self._sent_at < RENEW_SECONDS:
            return
        try:
            if target == ("until", None):
                self._clock.release(self._holder)
            else:
                self._clock.hold(self._holder, until=until)
        except ClockUnavailable as exc:
            log.warning("%s: sim time runs on while the runner is busy", exc)
            self.enabled = False
            return
        except OSError as exc:  # a slow or restarting sandbox: try again on the next round
            log.warning("could not hold the sandbox clock (%s); trying again", exc)
            return
        self._sent, self._sent_at = target, time.monotonic()
