"""The app on in-memory ports: the real services and executor, with no HTTP, no SDK and no Azurite.

`memory_app(scenario, settings=...)` builds what shared.context builds in Azure, from the parts
tests/contract holds to the real adapters' contract:

- the cluster and its scale sets: an in-process `sandbox.world.World` on a manual clock, served by the
  replay's `WorldCluster` and `WorldCompute` (the latter behind a `ProviderRouter`, as in shared.context);
- state and queue: `MemoryStateStore` and the replay's `MemoryQueue` (host.json's dequeue count);
- events: an `EventRecorder` over a sink that keeps what was emitted;
- settings: `shared.settings.load_settings`, as devtools/replay/policies/ours.py's `replay_settings` does,
  with no measured-usage source (`USAGE_SOURCE=none`: the sandbox's Log Analytics double is HTTP only).

The clock moves the world with it: `app.clock.advance(s)` runs the world's events up to the new time, as
the sandbox server advances its world to its clock before each request. The world never runs past the
scenario's `duration` (60 minutes by default), in memory as over HTTP.

What the ports leave out and tests need (peek at the queue, its poison messages, the events written) is
the small interface `MemoryApp` offers; tests/shared/services/test_executor.py's `App` offers the same
over Azurite and the sandbox server.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from devtools.replay.memory import MemoryQueue
from devtools.replay.world_ports import WorldCluster, WorldCompute, WorldQuota
from devtools.runner import HostQueueConfig
from sandbox.clock import ManualClock
from sandbox.model import aci
from sandbox.model.scenario import Scenario, load_scenario
from sandbox.world import World
from shared.ports import ClusterEvent, Ports
from shared.services.events import EventRecorder
from shared.services.memory_state import MemoryStateStore
from shared.services.providers import ProviderRouter
from shared.settings import Settings, load_settings

# The sandbox fixtures' start (tests/fixtures/sandbox.py SANDBOX_START), so both apps see the same times.
from tests.fixtures.sandbox import SANDBOX_START


class WorldClock(ManualClock):
    """A ManualClock that runs the world up to each new time it is moved to."""

    def __init__(self, world: World) -> None:
        super().__init__(world.now)
        self._world = world

    def advance(self, seconds: float) -> datetime:
        now = super().advance(seconds)
        self._world.advance(now)
        return now


class InspectableQueue(MemoryQueue):
    """The replay's MemoryQueue, plus the reads a test needs that the port leaves out (as StorageActionQueue has)."""

    def peek(self) -> list[str]:
        """The texts visible now, in the order they would be taken, without taking them."""
        now = self._clock.now()  # type: ignore[attr-defined]
        return [message.text for visible_at, _, message in sorted(self._heap) if visible_at <= now]

    def take_visible(self) -> list[str]:
        """The texts visible now, taken off the queue (received and deleted)."""
        taken = []
        while (message := self.take_due(self._clock.now())) is not None:  # type: ignore[attr-defined]
            taken.append(message.text)
        return taken

    def clear(self) -> None:
        """Delete every message, delayed ones included (as a storage queue's Clear Messages does)."""
        self._heap.clear()


class RecordingSink:
    """An EventSink that keeps every event it is handed, in order."""

    def __init__(self) -> None:
        self.events: list[ClusterEvent] = []

    def emit(self, event: ClusterEvent) -> None:
        self.events.append(event)


@dataclass
class MemoryApp:
    """The services' ports over one in-process world, and what a test reads besides the ports."""

    world: World
    clock: WorldClock
    settings: Settings
    ports: Ports
    queue: InspectableQueue
    sink: RecordingSink = field(repr=False)

    def queued(self) -> list[str]:
        """The texts of the messages visible now, left on the queue."""
        return self.queue.peek()

    def take_queued(self) -> list[str]:
        return self.queue.take_visible()

    def clear_queue(self) -> None:
        self.queue.clear()

    def poison(self) -> list[str]:
        return list(self.queue.poison)

    def events(self) -> list[ClusterEvent]:
        """The Kubernetes Events the app wrote, in order."""
        return list(self.sink.events)

    def run_actions(self, *, rounds: int = 40, step: float = 5) -> list[Any]:
        """Every queued action run to its end, as the host would: what is visible now, then `step` seconds later
        what those deliveries queued, for at most `rounds` rounds; the executor's results, in order."""
        from shared.services.executor import Executor

        executor, results = Executor(self.ports, self.settings), []
        for _ in range(rounds):
            queued = self.take_queued()
            if not queued:
                break
            results += [executor.execute(text, now=self.clock.now()) for text in queued]
            self.clock.advance(step)
        return results

    def tick(self, seconds: float) -> None:
        """`seconds` later: both polls run, then every action they queued, as the host would run them."""
        from shared.services.executor import Executor
        from shared.services.pending import run_pending_poll
        from shared.services.utilization import run_utilization_poll

        self.clock.advance(seconds)
        run_pending_poll(self.ports, self.settings, now=self.clock.now())
        run_utilization_poll(self.ports, self.settings, now=self.clock.now())
        executor = Executor(self.ports, self.settings)
        for text in self.take_queued():
            executor.execute(text, now=self.clock.now())


def memory_settings(scenario: Scenario, world: World, overrides: Mapping[str, str] | None = None) -> Settings:
    """The app settings for this world (as ours.py's `replay_settings`), then the test's overrides."""
    return load_settings({
        "CLUSTER_NAME": scenario.cluster_name,
        "AZURE_SUBSCRIPTION_ID": world.subscription_id,
        "NODE_RESOURCE_GROUPS": ",".join(scenario.resource_groups),
        "KUBECONFIG_PATH": "in-process",
        "AZURE_CREDENTIAL": "sandbox",
        "USAGE_SOURCE": "none",
        **aci.app_settings(scenario.virtual_node),
        **(overrides or {}),
    })


def memory_app(scenario: Mapping[str, Any] | Scenario | str, *, settings: Mapping[str, str] | None = None,
               seed: int = 0, start: datetime = SANDBOX_START) -> MemoryApp:
    """The app on in-memory ports over a new world of `scenario` (a dict, a name or a path), at `start`."""
    spec = load_scenario(scenario)
    world = World(spec, seed=seed, start=start)
    clock = WorldClock(world)
    app_settings = memory_settings(spec, world, settings)
    logging.getLogger("shared").setLevel(app_settings.log_level.upper())  # as shared.context.build_context
    host = HostQueueConfig.from_host_json()
    queue = InspectableQueue(clock, max_dequeue_count=host.max_dequeue_count, visibility_timeout=host.visibility_timeout)
    sink = RecordingSink()
    provider = WorldCompute(world, cluster_name=spec.cluster_name, resource_groups=spec.resource_groups)
    ports = Ports(
        cluster=WorldCluster(world),
        provider=ProviderRouter([provider]),
        state=MemoryStateStore(),
        queue=queue,
        clock=clock,
        events=EventRecorder(sink),
        quota=WorldQuota(world) if app_settings.quota_aware else None,
    )
    return MemoryApp(world, clock, app_settings, ports, queue, sink)
