"""The runner holds the sandbox's running clock while it has due work in hand (devtools/sandbox_clock.py).

The attack is a starved runner: a timer function that takes wall time (here by sleeping, as a busy machine
would make it take). Without the hold every wall second of it is `speed` sim seconds in which the world runs on
and the next polls come late; with it, the function takes no sim time and every timer fires when it is due.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import azure.functions as func
import pytest

from devtools.runner import LocalRunner
from devtools.sandbox_clock import SandboxClock
from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory

SPEED = 60.0
STARVED_WALL_S = 0.4  # what each poll takes in wall time: 24 sim seconds at SPEED without the hold
EVERY_S = 10  # the poll's schedule


class _EmptyQueue:
    name = "unused"

    def receive(self, max_messages: int, *, visibility_timeout: timedelta) -> list[Any]:
        return []

    def count(self) -> int:
        return 0


def _app(server: SandboxServer, seen: list[tuple[float, float]]) -> func.FunctionApp:
    app = func.FunctionApp()

    @app.timer_trigger(arg_name="timer", schedule=f"*/{EVERY_S} * * * * *", run_on_startup=False, use_monitor=False)
    def starved_poll(timer: func.TimerRequest) -> None:
        began = (server.clock.now() - SANDBOX_START).total_seconds()
        time.sleep(STARVED_WALL_S)
        seen.append((began, (server.clock.now() - SANDBOX_START).total_seconds()))

    @app.queue_trigger(arg_name="message", queue_name="unused", connection="AzureWebJobsStorage")
    def on_message(message: func.QueueMessage) -> None:
        raise AssertionError("no message is sent")

    return app


def _run(server: SandboxServer, clock: Any, seen: list[tuple[float, float]], *, wall_s: float) -> LocalRunner:
    runner = LocalRunner(_app(server, seen), env={}, clock=clock, queue=_EmptyQueue())
    runner.run(until=lambda: False, wall_timeout=wall_s)
    return runner


def test_a_starved_timer_takes_no_sim_time_and_every_poll_fires_when_due(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory("burst", speed=SPEED, start=SANDBOX_START)
    clock = SandboxClock.connect(server.url, ca_path=str(server.ca_path))
    seen: list[tuple[float, float]] = []

    _run(server, clock, seen, wall_s=3.0)

    assert len(seen) >= 3, seen  # the clock still runs between polls
    for began, ended in seen:
        assert began % EVERY_S < 1.0, seen  # fired at its due time, not later
        assert ended - began < 1.0, seen  # held while it ran: not STARVED_WALL_S * SPEED = 24 sim seconds
    starts = [began for began, _ in seen]
    assert all(later - earlier == pytest.approx(EVERY_S, abs=1.0) for earlier, later in zip(starts, starts[1:])), seen
    assert server.clock.bound() is None  # released when the runner stopped  # type: ignore[attr-defined]


def test_a_manual_clock_is_not_held_and_the_runner_still_runs(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory("burst", clock=ManualClock(SANDBOX_START))
    clock = SandboxClock.connect(server.url, ca_path=str(server.ca_path))
    seen: list[tuple[float, float]] = []

    runner = _run(server, clock, seen, wall_s=0.5)

    assert runner.stats.failures == 0
    assert server.clock.now() == SANDBOX_START  # nothing moved it


def test_a_runner_on_the_system_clock_holds_nothing(sandbox_factory: SandboxFactory) -> None:
    from shared.context import SystemClock

    server = sandbox_factory("burst", speed=SPEED, start=SANDBOX_START)
    runner = LocalRunner(_app(server, []), env={}, clock=SystemClock(), queue=_EmptyQueue())
    assert runner._hold_clock() is None  # noqa: SLF001 - real Azure: no sandbox to hold


def test_a_sandbox_that_waits_for_its_runner_stands_at_zero_until_the_runner_holds_it(tmp_path: Any) -> None:
    # A runner slow to start (a busy machine) must not find the scenario's first arrivals already waiting.
    with SandboxServer("burst", speed=SPEED, workdir=tmp_path, start=SANDBOX_START, wait_for_runner=60) as server:
        clock = SandboxClock.connect(server.url, ca_path=str(server.ca_path))
        time.sleep(0.5)  # 30 sim seconds at SPEED, if the clock ran: a runner importing its functions
        assert server.clock.now() == SANDBOX_START
        assert clock.now() == SANDBOX_START  # the runner's reading stands still with it
        seen: list[tuple[float, float]] = []
        _run(server, clock, seen, wall_s=1.5)
        assert seen and seen[0][0] == pytest.approx(EVERY_S, abs=1.0)  # the first poll at its first due time
        assert server.clock.bound() is None  # type: ignore[attr-defined]  # the start hold ended with the runner's



class _RecordingClock:
    """A SandboxClock stand-in that records what the holder asks of the sandbox."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def hold(self, holder: str, *, until: Any = None) -> None:
        self.calls.append("hold")

    def release(self, holder: str) -> None:
        self.calls.append("release")

    def at(self, moment: Any) -> float:
        return 0.0


def test_a_hold_that_never_changes_is_let_go_so_a_waiting_runner_never_hangs_a_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from devtools import sandbox_clock

    monkeypatch.setattr(sandbox_clock, "MAX_UNCHANGED_HOLD_SECONDS", 0.2)
    clock = _RecordingClock()
    holder = sandbox_clock.ClockHolder(clock, busy=lambda: True, next_due=lambda: None)  # type: ignore[arg-type]
    holder._update()
    assert clock.calls == ["hold"]
    time.sleep(0.25)
    holder._update()
    assert clock.calls[-1] == "release" and holder.overruns == 1
    holder._update()  # still the same hold asked for: it stays let go, and is said once
    assert clock.calls.count("release") == 1 and holder.overruns == 1


def test_a_queue_invocation_running_does_not_hold_the_clock(sandbox_factory: SandboxFactory) -> None:
    """A step may wait in-process for ARM's long-running operation, which only sim time can finish."""
    server = sandbox_factory("burst", clock=ManualClock(SANDBOX_START))
    runner = LocalRunner(_app(server, []), env={}, clock=server.clock, queue=_EmptyQueue())
    runner._ended_since_poll = False
    # an invocation in hand, as a step waiting on ARM is: nothing marks it
    assert runner.next_due() is None or server.clock.now() < runner.next_due()
    assert runner.busy() is False
    runner._ended()
    assert runner.busy() is True  # what it may have sent waits for the next queue poll
