"""The local runner feeds the queue trigger as the Functions host does (host.json: base64, maxDequeueCount).

Against Azurite: a message that is not base64 never reaches our code and is poisoned; the dequeue count
reaches the function; a storage outage is logged and waited out, never the end of the runner.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.functions as func

from devtools.runner import HostQueueConfig, LocalRunner
from shared.adapters.action_queue import StorageActionQueue
from shared.adapters.storage_connection import StorageError


class _FixedClock:
    def now(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC)


def _app(calls: list[tuple[bytes, int | None]], *, fail: bool = False) -> func.FunctionApp:
    app = func.FunctionApp()

    @app.queue_trigger(arg_name="message", queue_name="%SCALE_ACTIONS_QUEUE%", connection="AzureWebJobsStorage")
    def on_message(message: func.QueueMessage) -> None:
        calls.append((message.get_body(), message.dequeue_count))
        if fail:
            raise RuntimeError("the function failed")

    return app


def _runner(app: func.FunctionApp, queue: Any, *, max_dequeue_count: int = 5) -> LocalRunner:
    host = HostQueueConfig(max_dequeue_count=max_dequeue_count, visibility_timeout=timedelta(seconds=1), batch_size=4)
    return LocalRunner(app, env={"SCALE_ACTIONS_QUEUE": queue.name}, clock=_FixedClock(), queue=queue, host=host)


def test_a_message_that_is_not_base64_never_reaches_the_function_and_is_poisoned(
    action_queue: StorageActionQueue,
) -> None:
    calls: list[tuple[bytes, int | None]] = []
    runner = _runner(_app(calls), action_queue, max_dequeue_count=1)
    action_queue.send_raw('{"version": 2}', base64_encode=False)

    runner.process_queue()

    assert calls == []
    assert runner.stats.poisoned == 1 and runner.stats.failures == 1
    assert action_queue.poison().peek() == ['{"version": 2}']
    assert action_queue.count() == 0


def test_the_function_is_told_the_dequeue_count(action_queue: StorageActionQueue) -> None:
    calls: list[tuple[bytes, int | None]] = []
    runner = _runner(_app(calls), action_queue)
    action_queue.send_raw("hello")

    runner.process_queue()

    assert calls == [(b"hello", 1)]
    assert action_queue.count() == 0


class _FlakyQueue:
    """A queue whose storage fails `failures` times, then answers (empty) as Azurite would."""

    name = "flaky"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.receives = 0

    def receive(self, max_messages: int, *, visibility_timeout: timedelta) -> list[Any]:
        self.receives += 1
        if self.receives <= self.failures:
            raise StorageError("receive messages failed at http://127.0.0.1:10001: timed out")
        return []


def test_a_storage_outage_is_waited_out_not_the_end_of_the_runner() -> None:
    queue = _FlakyQueue(failures=3)
    runner = _runner(_app([]), queue)

    finished = runner.run(until=lambda: queue.receives > queue.failures, wall_timeout=30, tick_seconds=0.01)

    assert finished
    assert queue.receives == queue.failures + 1


def test_a_long_invocation_does_not_hold_back_the_queue(action_queue: StorageActionQueue) -> None:
    """The host fetches again once newBatchThreshold or fewer of its messages run: a message sent while a long
    invocation runs is executed before that invocation ends (one batch at a time would wait for it)."""
    seen: list[str] = []
    fast_ran = threading.Event()
    app = func.FunctionApp()

    @app.queue_trigger(arg_name="message", queue_name="%SCALE_ACTIONS_QUEUE%", connection="AzureWebJobsStorage")
    def on_message(message: func.QueueMessage) -> None:
        body = message.get_body().decode()
        seen.append(body)
        if body == "slow":
            action_queue.send_raw("fast")
            seen.append(f"slow saw fast: {fast_ran.wait(timeout=15)}")
        else:
            fast_ran.set()

    runner = _runner(app, action_queue)
    action_queue.send_raw("slow")

    finished = runner.run(until=lambda: len(seen) == 3, wall_timeout=30, tick_seconds=0.01)

    assert finished
    assert seen == ["slow", "fast", "slow saw fast: True"]
    assert action_queue.count() == 0
