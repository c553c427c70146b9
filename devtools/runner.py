"""A local stand-in for the Azure Functions host (Core Tools cannot be installed here).

It indexes the decorated functions of function_app.py exactly as declared, fires
the timer triggers on their NCRONTAB schedules in the clock's time (the sandbox's
accelerated clock, or real time), and feeds the queue trigger from the Azurite
queue with the host's semantics: base64 messages, a failed invocation leaves the
message for a retry after host.json's visibilityTimeout, and a message that has
failed maxDequeueCount times moves to `<queue>-poison`. Event Grid triggers get
the sandbox's events (GET /sandbox/eventgrid/events) with Event Grid's
at-least-once delivery and retries (devtools.eventgrid_delivery).

Run `python -m devtools.runner --help`; users with Core Tools run `func start`
with the same settings instead (see docs/local-development.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from devtools.eventgrid_delivery import EventGridDelivery, EventGridFunction, EventsFetch, EventsSourceMissing
from devtools.sandbox_clock import ClockHolder, SandboxClock
from devtools.sim_time_queue import SimTimeQueue
from shared.schedules import Schedule, parse_ncrontab
from shared.ports import Clock
from shared.adapters.storage_connection import StorageError
from shared.settings import SPECS

log = logging.getLogger("devtools.runner")
MAX_STORAGE_BACKOFF = 30.0  # seconds between queue polls while storage keeps failing
ROOT = Path(__file__).resolve().parents[1]


EVENTS_POLL_SECONDS = 0.5  # wall seconds between two asks of the sandbox's Event Grid events


@dataclass(frozen=True)
class TimerFunction:
    name: str
    expression: str
    schedule: Schedule
    call: Callable[..., Any]
    arg_name: str


@dataclass(frozen=True)
class QueueFunction:
    name: str
    queue_name: str
    connection: str
    call: Callable[..., Any]
    arg_name: str


@dataclass(frozen=True)
class HostQueueConfig:
    """The host.json `extensions.queues` values the runner honours."""

    max_dequeue_count: int = 5
    visibility_timeout: timedelta = timedelta(0)
    batch_size: int = 16
    # The host fetches the next batch once this few of its messages are still running (default batchSize / 2).
    new_batch_threshold: int = 8

    @classmethod
    def from_host_json(cls, path: Path = ROOT / "host.json") -> HostQueueConfig:
        queues = json.loads(path.read_text()).get("extensions", {}).get("queues", {})
        hours, minutes, seconds = (int(x) for x in queues.get("visibilityTimeout", "00:00:00").split(":"))
        return cls(
            max_dequeue_count=int(queues.get("maxDequeueCount", 5)),
            visibility_timeout=timedelta(hours=hours, minutes=minutes, seconds=seconds),
            batch_size=int(queues.get("batchSize", 16)),
            new_batch_threshold=int(queues.get("newBatchThreshold", int(queues.get("batchSize", 16)) // 2)),
        )


def resolve_expression(text: str, env: Mapping[str, str]) -> str:
    """`%NAME%` binding expressions, as the host resolves them from app settings (our defaults otherwise)."""
    if not (text.startswith("%") and text.endswith("%")):
        return text
    name = text.strip("%")
    if env.get(name):
        return env[name]
    default = next((spec.default for spec in SPECS if spec.name == name), None)
    if default is None:
        raise KeyError(f"binding expression {text} names app setting {name}, which is not set")
    return default


# By the app object, weakly: keyed by id(), an app collected and a new one at the same address got the old one's
# functions (seen as test apps' events delivered to an earlier test's function).
_INDEXED: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()


def app_functions(app: Any) -> list[Any]:
    """The app's indexed functions. The host indexes once; a second get_functions() raises, so keep the first."""
    functions = _INDEXED.get(app)
    if functions is None:
        functions = _INDEXED[app] = app.get_functions()
    return functions


@dataclass(frozen=True)
class IndexedFunctions:
    timers: list[TimerFunction]
    queues: list[QueueFunction]
    event_grid: list[EventGridFunction]


def index_app(app: Any, env: Mapping[str, str]) -> tuple[list[TimerFunction], list[QueueFunction]]:
    """The timer and queue functions (`index_functions` has the Event Grid functions too)."""
    indexed = index_functions(app, env)
    return indexed.timers, indexed.queues


def index_functions(app: Any, env: Mapping[str, str]) -> IndexedFunctions:
    timers: list[TimerFunction] = []
    queues: list[QueueFunction] = []
    event_grid: list[EventGridFunction] = []
    for function in app_functions(app):
        trigger = function.get_trigger()
        binding = trigger.get_dict_repr()
        if binding["type"] == "timerTrigger":
            expression = resolve_expression(binding["schedule"], env)
            timers.append(
                TimerFunction(function.get_function_name(), expression, parse_ncrontab(expression),
                              function.get_user_function(), binding["name"])
            )
        elif binding["type"] == "queueTrigger":
            queues.append(
                QueueFunction(function.get_function_name(), resolve_expression(binding["queueName"], env),
                              binding["connection"], function.get_user_function(), binding["name"])
            )
        elif binding["type"] == "eventGridTrigger":
            event_grid.append(EventGridFunction(function.get_function_name(), function.get_user_function(), binding["name"]))
        else:
            raise ValueError(f"the local runner does not support {binding['type']} ({function.get_function_name()})")
    return IndexedFunctions(timers, queues, event_grid)


class _TrackedPool(Executor):
    """The runner's thread pool as Event Grid delivery sees it: what it runs counts as work in hand."""

    def __init__(self, pool: Executor, runner: LocalRunner) -> None:
        super().__init__()
        self._pool = pool
        self._runner = runner

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        def tracked() -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                self._runner._ended()  # noqa: SLF001 - the runner's own bookkeeping

        return self._pool.submit(tracked)


class _TimerInfo:
    """What the host passes to a timer function (func.TimerRequest's interface)."""

    def __init__(self, past_due: bool) -> None:
        self._past_due = past_due

    @property
    def past_due(self) -> bool:
        return self._past_due


@dataclass
class RunnerStats:
    timer_invocations: dict[str, int] = field(default_factory=dict)
    queue_invocations: int = 0
    failures: int = 0
    poisoned: int = 0
    event_invocations: int = 0
    dead_lettered: int = 0


class LocalRunner:
    def __init__(
        self,
        app: Any,
        *,
        env: Mapping[str, str],
        clock: Clock,
        queue: Any,  # shared.adapters.action_queue.StorageActionQueue: receive/delete/poison
        host: HostQueueConfig | None = None,
        duplicate_delivery: bool = False,
        events: EventsFetch | None = None,  # the Event Grid events source; None: Event Grid functions get no events
    ) -> None:
        indexed = index_functions(app, env)
        self.timers, queue_functions = indexed.timers, indexed.queues
        if len(queue_functions) != 1:
            raise ValueError(f"expected one queue-triggered function, found {len(queue_functions)}")
        self.queue_function = queue_functions[0]
        self._clock = clock
        self._queue = queue
        self._host = host or HostQueueConfig.from_host_json()
        self._duplicate = duplicate_delivery
        start = clock.now()
        self._next_fire = {t.name: t.schedule.next_after(start) for t in self.timers}
        self.stats = RunnerStats()
        self._stats_lock = threading.Lock()
        # The Python worker runs synchronous invocations on a thread pool of PYTHON_THREADPOOL_THREAD_COUNT
        # threads (Python 3.9+: unset means the standard library's default size); so do we.
        threads = int(env.get("PYTHON_THREADPOOL_THREAD_COUNT") or 0) or min(32, (os.cpu_count() or 1) + 4)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="runner-queue")
        self._pool_dup = ThreadPoolExecutor(max_workers=max(2, self._host.batch_size), thread_name_prefix="runner-dup")
        # What the runner has in hand, for holding the sandbox's clock (`busy`): a timer running, and whether an
        # invocation ended after the last queue poll began (its messages are waiting to be taken).
        self._timer_running = False
        self._ended_since_poll = True
        self._can_take = True  # the last queue poll was not held back by newBatchThreshold
        # Event Grid invocations share the worker's thread pool with the queue's, as in the host.
        self.events = EventGridDelivery(indexed.event_grid, events, clock=clock, pool=_TrackedPool(self._pool, self),
                                        count=self._count_event)

    # -- what the runner has in hand (for the sandbox clock's hold) ---------------------------------------

    def _ended(self) -> None:
        """An invocation ended: what it sent waits for the next queue poll."""
        with self._stats_lock:
            self._ended_since_poll = True

    def next_due(self) -> datetime | None:
        """When the next timer is due (None without timers)."""
        return min(self._next_fire.values(), default=None)

    def clock_bound(self) -> datetime | None:
        """How far the sandbox's clock may run while the runner is not busy: to the next timer, or to the due
        time of a delayed message it sent and can take (devtools.sim_time_queue), whichever is first."""
        bounds = [self.next_due()]
        queue_due = getattr(self._queue, "next_due", None)
        if queue_due is not None and self._can_take:
            bounds.append(queue_due())
        return min((b for b in bounds if b is not None), default=None)

    def busy(self) -> bool:
        """Due work not finished: a timer due or running, or messages an ended invocation may have sent that no
        queue poll has taken yet.

        A queue invocation running does not hold the clock: a step may wait in-process for ARM's long-running
        operation (ARM_OPERATION_WAIT), which only sim time can finish, so holding the clock for it stood a
        many-idle run still at its first removals."""
        due = self.next_due()
        if self._timer_running or (due is not None and self._clock.now() >= due):
            return True
        with self._stats_lock:
            return self._ended_since_poll

    @property
    def event_grid_functions(self) -> list[EventGridFunction]:
        return self.events.functions

    def _count_event(self, kind: str) -> None:
        with self._stats_lock:
            if kind == "invocation":
                self.stats.event_invocations += 1
            elif kind == "failure":
                self.stats.failures += 1
            elif kind == "dead_lettered":
                self.stats.dead_lettered += 1

    def poll_events(self) -> list[Future[None]]:
        """Take new Event Grid events and start the due deliveries (retries included) on the thread pool;
        returns the deliveries started. Called on every timer tick; never raises."""
        try:
            return self.events.poll()
        except Exception:
            log.exception("Event Grid delivery failed to poll")
            return []

    def drain_events(self, *, timeout: float | None = None) -> None:
        """Wait for the running Event Grid deliveries (not for retries still to come)."""
        for future in self.events.in_flight():
            try:
                future.result(timeout=timeout)
            except Exception:
                log.exception("Event Grid delivery failed")

    def fire_due_timers(self) -> None:
        now = self._clock.now()
        for timer in self.timers:
            due = self._next_fire[timer.name]
            if now < due:
                continue
            # Running before the next fire time moves on, so the clock's holder never sees neither.
            self._timer_running = True
            try:
                self._next_fire[timer.name] = timer.schedule.next_after(now)
                self.fire_timer(timer, past_due=now - due > timedelta(seconds=60))
            finally:
                self._timer_running = False

    def fire_timer(self, timer: TimerFunction, *, past_due: bool = False) -> None:
        with self._stats_lock:
            self.stats.timer_invocations[timer.name] = self.stats.timer_invocations.get(timer.name, 0) + 1
        try:
            timer.call(**{timer.arg_name: _TimerInfo(past_due)})
        except Exception:
            # The host logs a failed timer run and fires again on schedule; so do we.
            with self._stats_lock:
                self.stats.failures += 1
            log.exception("timer function %s failed", timer.name)
        finally:
            self._ended()

    def process_queue(self) -> int:
        """Run one batch to its end (twice per message with duplicate delivery): run-once mode and tests.
        `run` feeds the queue continuously instead (`pump`)."""
        in_flight: set[Future[None]] = set()
        fetched = self.pump(in_flight)
        for future in in_flight:
            future.result()
        return fetched

    def pump(self, in_flight: set[Future[None]]) -> int:
        """The host's queue listener: fetch a batch whenever no more than newBatchThreshold of the messages
        it fetched are still running, without waiting for the slowest of them (so a long invocation never
        holds back the queue). Started invocations join `in_flight`; returns how many were fetched."""
        # A message due while the host is held back waits, as in Azure: the clock must not wait for it.
        self._can_take = len(in_flight) <= self._host.new_batch_threshold
        if not self._can_take:
            return 0
        lease = max(self._host.visibility_timeout, timedelta(seconds=30))
        with self._stats_lock:
            self._ended_since_poll = False  # what ends from here on may send messages this poll does not see
        messages = self._queue.receive(self._host.batch_size, visibility_timeout=lease)
        in_flight.update(self._pool.submit(self._deliver, message) for message in messages)
        return len(messages)

    def _deliver(self, message: Any) -> None:
        try:
            self._deliver_one(message)
        finally:
            self._ended()

    def _deliver_one(self, message: Any) -> None:
        import azure.functions.queue as queue_binding

        def invoke() -> bool:
            if not message.well_encoded:
                # The host cannot bind a message that is not base64 (host.json messageEncoding): the
                # invocation fails before our code runs, and after maxDequeueCount it is poisoned.
                with self._stats_lock:
                    self.stats.failures += 1
                log.error("message %s is not base64 text; the host cannot bind it (dequeue %d)",
                          message.id, message.dequeue_count)
                return False
            with self._stats_lock:
                self.stats.queue_invocations += 1
            try:
                self.queue_function.call(**{
                    # The worker hands functions this subclass, which carries the host's metadata.
                    self.queue_function.arg_name: queue_binding.QueueMessage(
                        id=message.id, body=message.body_text.encode(), pop_receipt=message.pop_receipt,
                        dequeue_count=message.dequeue_count,
                    )
                })
                return True
            except Exception:
                with self._stats_lock:
                    self.stats.failures += 1
                log.exception("queue function failed on message %s (dequeue %d)", message.id, message.dequeue_count)
                return False

        if self._duplicate:
            # Both deliveries at once: the harshest form of at-least-once delivery.
            first, second = self._pool_dup.submit(invoke), self._pool_dup.submit(invoke)
            ok = first.result() and second.result()
        else:
            ok = invoke()
        if ok:
            self._delete(message)
        elif message.dequeue_count >= self._host.max_dequeue_count:
            self._queue.poison().send_raw(message.body_text)
            self._queue.delete(message)
            with self._stats_lock:
                self.stats.poisoned += 1
            log.error("message %s failed %d times: moved to poison queue", message.id, message.dequeue_count)

    def _delete(self, message: Any) -> None:
        """Delete after success; a message that reappeared meanwhile (its visibility ran out under a slow
        invocation, and another delivery took it) can no longer be deleted with this receipt: the host logs
        that and moves on, and the other delivery's ledger check makes the work happen once."""
        try:
            self._queue.delete(message)
        except StorageError as exc:
            if "MessageNotFound" not in str(exc) and "PopReceiptMismatch" not in str(exc):
                raise
            log.warning("message %s was redelivered before it could be deleted: %s", message.id, exc)

    def queue_is_idle(self) -> bool:
        """No message waiting, in flight or delayed (the count includes invisible ones)."""
        return self._queue.count() == 0

    def run(self, *, until: Callable[[], bool], wall_timeout: float, on_tick: Callable[[], None] | None = None,
            tick_seconds: float = 0.05) -> bool:
        """Run until `until()` holds (True) or the wall-clock timeout passes (False).

        Timers fire on their own thread, as the host fires them independently of queue work.
        """
        stop = threading.Event()

        def timers() -> None:
            next_events = 0.0
            while not stop.is_set():
                self.fire_due_timers()
                # Event Grid pushes within about a second; asking the sandbox every tick would only load it.
                if time.monotonic() >= next_events:
                    next_events = time.monotonic() + EVENTS_POLL_SECONDS
                    self.poll_events()
                stop.wait(tick_seconds)

        holder = self._hold_clock()
        timer_thread = threading.Thread(target=timers, name="runner-timers", daemon=True)
        timer_thread.start()
        deadline = time.monotonic() + wall_timeout
        backoff = 0.0
        in_flight: set[Future[None]] = set()
        checked = 0.0
        try:
            while time.monotonic() < deadline:
                try:
                    fetched = self.pump(in_flight)
                    backoff = 0.0
                except StorageError as exc:
                    # The host's queue listener logs a storage outage and polls again, backing off; so do we.
                    backoff = min(max(backoff * 2, 0.5), MAX_STORAGE_BACKOFF)
                    log.warning("queue storage failed (%s); polling again in %.1fs", exc, backoff)
                    fetched = 0
                # An empty queue is polled again after a tick (the backoff while storage fails); a busy one as
                # soon as an invocation ends. A queue that never runs dry must not keep us past the deadline.
                pause = 0.0 if fetched else (backoff or tick_seconds)
                done, in_flight = wait(in_flight, timeout=min(pause, max(0.0, deadline - time.monotonic())),
                                       return_when=FIRST_COMPLETED) if in_flight else (set(), in_flight)
                if not in_flight and not fetched:
                    time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                for future in done:
                    self._settle(future)
                if time.monotonic() - checked >= (1.0 if fetched or in_flight else 0.0):
                    checked = time.monotonic()
                    if on_tick is not None:
                        on_tick()
                    if until():
                        return True
            return False
        finally:
            stop.set()
            # As the host drains before it stops: the invocations in hand finish, none is abandoned mid-step.
            for future in in_flight:
                self._settle(future, timeout=60)
            timer_thread.join(timeout=60)
            self.drain_events(timeout=60)
            if holder is not None:
                holder.stop()

    def _hold_clock(self) -> ClockHolder | None:
        """With the sandbox's clock, keep it from running ahead of this runner (devtools.sandbox_clock)."""
        if not isinstance(self._clock, SandboxClock):
            return None
        return ClockHolder(self._clock, busy=self.busy, next_due=self.clock_bound).start()

    def _settle(self, future: Future[None], *, timeout: float | None = None) -> None:
        """An invocation's end: a storage failure while deleting or poisoning its message is logged (the
        message reappears after its lease and is delivered again), never the end of the runner."""
        try:
            future.result(timeout=timeout)
        except StorageError as exc:
            log.warning("queue storage failed after an invocation (%s); the message will be delivered again", exc)

    def run_once(self, *, settle_seconds: float = 0.0) -> None:
        """Run-once mode: fire every timer now, deliver the Event Grid events there are (once: a failed one is
        not retried), then drain the queue (waiting `settle_seconds` for delayed steps)."""
        for timer in self.timers:
            self.fire_timer(timer)
        self.poll_events()
        self.drain_events()
        quiet_since = time.monotonic()
        while True:
            if self.process_queue():
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= settle_seconds:
                return
            else:
                time.sleep(0.1)


def load_settings_file(path: Path) -> dict[str, str]:
    """local.settings.json as Core Tools reads it: the `Values` object."""
    try:
        values = json.loads(path.read_text())["Values"]
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"cannot read settings file {path}: {exc}") from exc
    return {str(k): str(v) for k, v in values.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.runner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", type=Path, default=ROOT / "local.settings.json",
                        help="local.settings.json (Core Tools format); the process environment overrides it")
    parser.add_argument("--sandbox-clock", metavar="URL", help="use this sandbox's accelerated clock (its base URL)")
    parser.add_argument("--once", action="store_true", help="fire each timer once, drain the queue, exit")
    parser.add_argument("--dry-run", action="store_true", help="set DRY_RUN=true: record actions, change nothing")
    parser.add_argument("--duration", type=float, default=3600.0, help="wall seconds to run (default 3600)")
    parser.add_argument("--stats", type=Path, metavar="FILE",
                        help="on a clean exit (the duration ran out, SIGTERM or SIGINT), write invocation counts here as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)  # the SDKs log every HTTP request and response at INFO

    env = {**load_settings_file(args.settings), **os.environ}
    if args.dry_run:
        env["DRY_RUN"] = "true"
    runner = build_runner(env, sandbox_url=args.sandbox_clock)
    if args.once:
        runner.run_once(settle_seconds=2.0)
    else:
        # SIGTERM and SIGINT stop after the batch in hand, as the host drains before it shuts down.
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        runner.run(until=stop.is_set, wall_timeout=args.duration)
    if args.stats is not None:
        args.stats.write_text(json.dumps(asdict(runner.stats)) + "\n")
    return 0


def build_runner(env: Mapping[str, str], *, sandbox_url: str | None = None, duplicate_delivery: bool = False) -> LocalRunner:
    """Validate settings (exit 2 naming each problem), install the context, index function_app."""
    from shared.context import SystemClock, build_context, install_context
    from shared.settings import SettingsError

    ca_path = env.get("ARM_CA_BUNDLE", "")
    clock: Clock = SandboxClock.connect(sandbox_url, ca_path=ca_path) if sandbox_url else SystemClock()
    try:
        context = build_context(env, clock=clock)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    if isinstance(clock, SandboxClock):  # the app's delays in the sandbox's time, as they are real time in Azure
        context = replace(context, ports=replace(context.ports, queue=SimTimeQueue(context.ports.queue, clock)))
    install_context(context)
    import function_app

    return LocalRunner(function_app.app, env=env, clock=clock, queue=context.ports.queue,
                       duplicate_delivery=duplicate_delivery,
                       events=sandbox_events_source(sandbox_url, ca_path=ca_path) if sandbox_url else None)


def sandbox_get_json(url: str, path: str, *, ca_path: str, timeout: float = 10.0) -> Any:
    """GET one of the sandbox's endpoints (HTTPS, its CA) and parse the JSON answer; urllib's errors propagate."""
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=ca_path or None)
    with urllib.request.urlopen(f"{url.rstrip('/')}{path}", context=context, timeout=timeout) as response:
        return json.loads(response.read())


def sandbox_events_source(url: str, *, ca_path: str) -> EventsFetch:
    """The sandbox's Event Grid events after a seq (GET /sandbox/eventgrid/events?after=<seq>); a 404 (a sandbox
    without the endpoint) raises EventsSourceMissing."""
    import urllib.error

    def fetch(after: int) -> list[Mapping[str, Any]]:
        try:
            body = sandbox_get_json(url, f"/sandbox/eventgrid/events?after={int(after)}", ca_path=ca_path, timeout=5.0)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise EventsSourceMissing(f"{url} answers 404 to /sandbox/eventgrid/events") from exc
            raise
        return list(body.get("events", []))

    return fetch


if __name__ == "__main__":
    raise SystemExit(main())
