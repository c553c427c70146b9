"""`ours`: the autoscaler itself — its real services and executor — on in-memory state and queue.

The two timers fire on their NCRONTAB schedules from the settings; the queue trigger runs each
message when it becomes visible, and a delivery that raises comes back after host.json's
visibility timeout, going to poison after its maxDequeueCount, as the Functions host does.

With spot scale sets in the world, the Event Grid trigger (`on_scheduled_event`) runs too: each
Scheduled Event the world publishes (a spot VM's Preempt notice, 30 s before its eviction) is handed
to `handle_scheduled_event` `EVENT_GRID_DELIVERY` after its publication (the world says when the next
one may come), first in that wake-up, so the actions it enqueues run in the same wake-up. A handler that raises is not retried (Event Grid
would retry for up to a day; a notice retried after the VM is gone is worth nothing).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from sandbox.model import aci
from shared.schedules import Schedule, parse_ncrontab
from devtools.replay.harness import CLUSTER_NAME, RESOURCE_GROUP, Replay, clock_of
from devtools.replay.memory import MemoryQueue, MemoryStateStore
from devtools.replay.world_ports import WorldQuota
from devtools.runner import HostQueueConfig
from shared.actions import ScaleAction, ScaleDown, ScaleDownRound
from shared.ports import ClusterEvent, Ports
from shared.services.events import EventRecorder
from shared.services.executor import Executor
from shared.services.pending import run_pending_poll
from shared.services.preemption import handle_scheduled_event
from shared.services.utilization import run_utilization_poll
from shared.settings import Settings, load_settings

log = logging.getLogger(__name__)

# From a Scheduled Event's publication to the function's invocation: Event Grid pushes within seconds (best effort).
EVENT_GRID_DELIVERY = timedelta(seconds=1)


class _CountingSink:
    def __init__(self) -> None:
        self.events = 0

    def emit(self, event: ClusterEvent) -> None:
        self.events += 1


class _RecordingQueue(MemoryQueue):
    """The replay's queue, noting each node a ScaleDown names with its removal kind (`empty`, `drain`, `batch`,
    `unready`, `replace`, `drift`, ...): what the replay counts ours' voluntary disruptions by. A node given back
    before its drain disrupts nothing, so noting every decision, carried out or not, counts nothing extra."""

    def __init__(self, clock: object, *, removed: dict[str, str], **options: object) -> None:
        super().__init__(clock, **options)  # type: ignore[arg-type]
        self._removed = removed

    def send(self, action: ScaleAction | ScaleDownRound, *, delay: timedelta = timedelta(0)) -> None:
        if isinstance(action, ScaleDown):
            for node in action.nodes:
                self._removed[node] = action.removal_kind or "drain"
        super().send(action, delay=delay)


def replay_settings(replay: Replay, overrides: Mapping[str, str]) -> Settings:
    """Our app settings for the replayed cluster: defaults, plus whatever the user overrides."""
    env = {
        "CLUSTER_NAME": CLUSTER_NAME,
        "AZURE_SUBSCRIPTION_ID": replay.world.subscription_id,
        "NODE_RESOURCE_GROUPS": RESOURCE_GROUP,
        "KUBECONFIG_PATH": "in-process",
        "AZURE_CREDENTIAL": "sandbox",
        "LOG_LEVEL": "warning",
        # The virtual-node tier's ACI limits and prices, as an operator sets them.
        **aci.app_settings(replay.world.scenario.virtual_node),
        **overrides,
    }
    return load_settings(env)


class Ours:
    name = "ours"

    def __init__(self, replay: Replay, *, settings: Mapping[str, str] | None = None) -> None:
        self.settings = replay_settings(replay, settings or replay.config.settings)
        host = HostQueueConfig.from_host_json()
        clock = clock_of(replay)
        self.state = MemoryStateStore()
        # Every node a ScaleDown named, with its removal kind (devtools.replay.disruptions).
        self.removed_nodes: dict[str, str] = {}
        self.queue = _RecordingQueue(clock, removed=self.removed_nodes, max_dequeue_count=host.max_dequeue_count,
                                     visibility_timeout=host.visibility_timeout)
        self.ports = Ports(
            cluster=replay.cluster, provider=replay.compute, state=self.state, queue=self.queue, clock=clock,
            events=EventRecorder(_CountingSink()),
            quota=WorldQuota(replay.world) if self.settings.quota_aware else None,
        )
        self.executor = Executor(self.ports, self.settings)
        start = replay.world.now
        # (function name as function_app.py names it, its schedule, what it runs, when it is next due)
        self._timers: list[tuple[str, Schedule, Callable[..., Any], datetime]] = []
        for function, expression, run in (
                ("poll_pending_pods", self.settings.pending_poll_schedule, run_pending_poll),
                ("poll_utilization", self.settings.utilization_poll_schedule, run_utilization_poll)):
            schedule = parse_ncrontab(expression)
            self._timers.append((function, schedule, run, schedule.next_after(start)))
        self.errors = 0
        # Function executions the replay ran, by function name, failed ones included (Flex Consumption bills
        # every execution): what devtools.replay.reaction prices per day.
        self.executions: Counter[str] = Counter()
        self._world = replay.world
        # The Event Grid subscription to Scheduled Events exists where there are spot groups (enableScheduledEvents).
        self._event_grid = any(g.priority == "Spot" for g in replay.world.scenario.node_groups)
        self._events_seen = 0  # the last Event Grid sequence number handed to the function
        self.notices: list[tuple[datetime, str, str]] = []  # (when handled, event id, outcome), for tests and reports

    def next_wakeup(self, now: datetime) -> datetime | None:
        times = [due for _, _, _, due in self._timers]
        visible = self.queue.next_visible()
        if visible is not None:
            times.append(visible)
        if self._event_grid:
            published = self._world.next_notice_at()
            if published is not None:
                times.append(self._world.start + timedelta(seconds=published) + EVENT_GRID_DELIVERY)
        return min(times)

    def _deliver_events(self, now: datetime) -> None:
        """Every Scheduled Event published since the last delivery, to the Event Grid-triggered function."""
        for entry in self._world.eventgrid_events(self._events_seen):
            self._events_seen = entry["seq"]
            event = entry["event"]
            self.executions["on_scheduled_event"] += 1
            try:
                result = handle_scheduled_event(self.ports, self.settings, event, now=now)
            except Exception:
                self.errors += 1
                log.warning("on_scheduled_event failed at %s", now, exc_info=True)
                self.notices.append((now, str(event.get("id")), "failed"))
                continue
            self.notices.append((now, str(event.get("id")), result.outcome))

    def wake(self, now: datetime) -> None:
        if self._event_grid:
            self._deliver_events(now)
        for index, (function, schedule, run, due) in enumerate(self._timers):
            if due <= now:
                self._timers[index] = (function, schedule, run, schedule.next_after(now))
                self.executions[function] += 1
                try:
                    run(self.ports, self.settings, now=now)
                except Exception:  # the host logs a failed timer run and fires it again next time
                    self.errors += 1
                    log.warning("%s failed at %s", run.__name__, now, exc_info=True)
        for _ in range(1000):  # everything visible now, including what these deliveries enqueue without delay
            message = self.queue.take_due(now)
            if message is None:
                break
            self.executions["execute_scale_action"] += 1
            try:
                self.executor.execute(message.text, now=now)
            except Exception:  # the host makes the message visible again, or poisons it
                self.errors += 1
                log.info("delivery failed at %s", now, exc_info=True)
                self.queue.failed(message, now)

    def scale_actions(self) -> int:
        return sum(1 for entry in self.state.list_ledger() if entry.outcome.startswith("succeeded"))
