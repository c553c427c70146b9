"""The runner's action queue against the sandbox: the app's delays land at their due sim time (devtools.sim_time_queue)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from devtools import sim_time_queue
from devtools.sim_time_queue import EARLY_TOLERANCE, SimTimeQueue

START = datetime(2030, 1, 7, tzinfo=timezone.utc)


@dataclass
class _Clock:
    speed: float = 30.0
    t: datetime = START

    def now(self) -> datetime:
        return self.t


@dataclass
class _Message:
    id: str
    body_text: str
    pop_receipt: str = "r"
    dequeue_count: int = 1
    well_encoded: bool = True


@dataclass
class _Queue:
    """Storage's queue as far as the wrapper uses it: what was sent (with its wall delay), deleted, visible."""

    sent: list[tuple[str, str, timedelta]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    visible: list[_Message] = field(default_factory=list)
    ids: Any = field(default_factory=lambda: (f"m{i}" for i in itertools.count()))

    def send(self, action: Any, *, delay: timedelta = timedelta(0)) -> str:
        return self.send_raw(str(action), delay=delay)

    def send_raw(self, text: str, *, delay: timedelta = timedelta(0)) -> str:
        message_id = next(self.ids)
        self.sent.append((message_id, text, delay))
        return message_id

    def receive(self, max_messages: int, *, visibility_timeout: timedelta) -> list[_Message]:
        taken, self.visible = self.visible[:max_messages], self.visible[max_messages:]
        return taken

    def delete(self, message: _Message) -> None:
        self.deleted.append(message.id)

    def count(self) -> int:
        return len(self.visible)


def _show(queue: _Queue, message_id: str) -> None:
    """Storage makes a sent message visible (its wall delay ran out)."""
    text = next(text for sent_id, text, _ in queue.sent if sent_id == message_id)
    queue.visible.append(_Message(message_id, text))


@pytest.mark.parametrize(("speed", "delay_s"), [(30.0, 60.0), (30.0, 10.0), (5.0, 30.0), (1.0, 7.0)])
def test_a_delay_is_sim_time_hidden_for_its_wall_share_and_bounds_the_clock(speed: float, delay_s: float) -> None:
    clock, inner = _Clock(speed), _Queue()
    queue = SimTimeQueue(inner, clock)  # type: ignore[arg-type]
    message_id = queue.send("step", delay=timedelta(seconds=delay_s))
    assert inner.sent == [(message_id, "step", timedelta(seconds=delay_s / speed))]
    assert queue.next_due() == START + timedelta(seconds=delay_s)


def test_a_message_without_delay_is_not_tracked() -> None:
    clock, inner = _Clock(), _Queue()
    queue = SimTimeQueue(inner, clock)  # type: ignore[arg-type]
    queue.send("step")
    assert queue.next_due() is None
    assert inner.sent[0][2] == timedelta(0)


def test_a_message_received_at_its_due_time_runs_and_stops_bounding_the_clock() -> None:
    clock, inner = _Clock(), _Queue()
    queue = SimTimeQueue(inner, clock)  # type: ignore[arg-type]
    message_id = queue.send("step", delay=timedelta(seconds=60))
    clock.t = START + timedelta(seconds=60) - EARLY_TOLERANCE  # within the tolerance: due
    _show(inner, message_id)
    assert [m.id for m in queue.receive(16, visibility_timeout=timedelta(seconds=30))] == [message_id]
    assert queue.next_due() is None
    assert inner.deleted == []  # the runner deletes it after the invocation, not the wrapper


def test_a_message_received_early_goes_back_for_what_remains_and_keeps_its_due_time() -> None:
    clock, inner = _Clock(speed=30.0), _Queue()
    queue = SimTimeQueue(inner, clock)  # type: ignore[arg-type]
    due = START + timedelta(seconds=60)
    message_id = queue.send("step", delay=timedelta(seconds=60))
    clock.t = START + timedelta(seconds=15)  # the clock was held while the wall delay ran
    _show(inner, message_id)
    assert queue.receive(16, visibility_timeout=timedelta(seconds=30)) == []
    (_, _, _), (copy_id, text, wall) = inner.sent
    assert (text, wall) == ("step", timedelta(seconds=45 / 30))
    assert inner.deleted == [message_id]  # the early copy, after its replacement was sent
    assert queue.next_due() == due and queue.resent == 1
    clock.t = due
    _show(inner, copy_id)
    assert [m.body_text for m in queue.receive(16, visibility_timeout=timedelta(seconds=30))] == ["step"]
    assert queue.next_due() is None


def test_a_message_that_never_shows_up_stops_bounding_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    wall = [1000.0]
    monkeypatch.setattr(sim_time_queue.time, "monotonic", lambda: wall[0])
    queue = SimTimeQueue(_Queue(), _Clock(speed=30.0))  # type: ignore[arg-type]
    queue.send("step", delay=timedelta(seconds=30))  # one wall second
    wall[0] += 1.0 + sim_time_queue.LAPSE_WALL_SECONDS
    assert queue.next_due() is not None
    wall[0] += 0.1
    assert queue.next_due() is None


def test_everything_else_passes_through() -> None:
    inner = _Queue(visible=[_Message("x", "t")])
    queue = SimTimeQueue(inner, _Clock())  # type: ignore[arg-type]
    assert queue.count() == 1
    queue.delete(_Message("x", "t"))
    assert inner.deleted == ["x"]


def test_the_runner_lets_the_clock_run_to_a_due_message_only_while_it_can_take_it() -> None:
    """Held back by newBatchThreshold, the host would take a due message late too: the clock must not wait."""
    import azure.functions as func

    from devtools.runner import HostQueueConfig, LocalRunner

    app = func.FunctionApp()

    @app.timer_trigger(arg_name="timer", schedule="0 */5 * * * *", run_on_startup=False, use_monitor=False)
    def poll(timer: func.TimerRequest) -> None:
        pass

    @app.queue_trigger(arg_name="message", queue_name="q", connection="AzureWebJobsStorage")
    def on_message(message: func.QueueMessage) -> None:
        pass

    clock, inner = _Clock(), _Queue()
    queue = SimTimeQueue(inner, clock)  # type: ignore[arg-type]
    runner = LocalRunner(app, env={}, clock=clock, queue=queue,
                         host=HostQueueConfig(batch_size=1, new_batch_threshold=0))
    assert runner.clock_bound() == runner.next_due() == START + timedelta(minutes=5)
    queue.send("step", delay=timedelta(seconds=40))
    assert runner.clock_bound() == START + timedelta(seconds=40)
    runner.pump({object()})  # type: ignore[arg-type]  # one invocation in flight, over the threshold
    assert runner.clock_bound() == START + timedelta(minutes=5)
    runner.pump(set())
    assert runner.clock_bound() == START + timedelta(seconds=40)
