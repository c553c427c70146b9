"""What the contract fixtures hand a test: one implementation of a port (a side), and `diverges`.

`WorldSide` is a Cluster or NodeGroupProvider over a world; `QueueSide` is an ActionQueue with the
reads the port leaves out. `Worlds` opens worlds of one implementation: `real` serves the scenario from
a SandboxServer over HTTPS to the SDK adapters, `memory` from an in-process World to the replay's ports.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

from devtools.replay.memory import MemoryQueue
from devtools.replay.world_ports import WorldCluster, WorldCompute
from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from sandbox.model.scenario import load_scenario
from sandbox.world import World
from shared.adapters.action_queue import StorageActionQueue
from shared.adapters.compute import VmssCompute
from shared.adapters.kubernetes import KubernetesCluster
from shared.ports import ActionQueue, Cluster, NodeGroupProvider
from shared.settings import load_settings
from tests.contract import worlds

REAL, MEMORY, OVERLAY = "real", "memory", "overlay"
WORLD_IMPLEMENTATIONS = (REAL, MEMORY)
STORE_IMPLEMENTATIONS = (REAL, MEMORY, OVERLAY)
QUEUE_IMPLEMENTATIONS = (REAL, MEMORY)
_IMPLEMENTATIONS = {"cluster": WORLD_IMPLEMENTATIONS, "provider": WORLD_IMPLEMENTATIONS,
                    "store": STORE_IMPLEMENTATIONS, "queue": QUEUE_IMPLEMENTATIONS}

P = TypeVar("P")


def diverges(fixture: str, reason: str, *, where: tuple[str, ...] = (MEMORY,)) -> pytest.MarkDecorator:
    """Run the test on every implementation of `fixture`'s port, strictly expecting it to fail on those `where`.

    A known divergence between implementations: the test states the behaviour the port means (usually the
    real adapter's); fixing the odd one out turns its strict xfail into an XPASS, a failure, until the mark goes.
    """
    params = [pytest.param(kind, marks=pytest.mark.xfail(strict=True, reason=reason)) if kind in where else kind
              for kind in _IMPLEMENTATIONS[fixture]]
    return pytest.mark.parametrize(fixture, params, indirect=True)


# --- Cluster and NodeGroupProvider: one world, served over HTTPS or in process ----------------------------


@dataclass
class Opened:
    """Both world ports of one implementation over one world."""

    kind: str
    world: World
    advance: Callable[[float], None]  # sim seconds
    cluster: Cluster
    provider: NodeGroupProvider


@dataclass
class WorldSide(Generic[P]):
    """One implementation of a port over one world."""

    kind: str
    port: P
    world: World  # to arrange what no port call can (an allocation failure); never to read the outcome
    advance: Callable[[float], None]  # sim seconds
    variant: Callable[[Mapping[str, Any]], WorldSide[P]]  # the same implementation over another scenario


_STOPPING: list[threading.Thread] = []


def stop_in_background(server: SandboxServer) -> None:
    """Stop a server without waiting for it (its serving loop polls every 0.1 s); `join_stopped` waits for all."""
    thread = threading.Thread(target=server.stop, name="contract-sandbox-stop", daemon=True)
    thread.start()
    _STOPPING.append(thread)


def join_stopped() -> None:
    while _STOPPING:
        _STOPPING.pop().join(timeout=10)


class Worlds:
    """Opens worlds of one implementation; everything opened is closed with `stack`."""

    def __init__(self, kind: str, tmp_path: Path, stack: ExitStack) -> None:
        self.kind = kind
        self._tmp_path = tmp_path
        self._stack = stack
        self._count = 0

    def open(self, scenario: Mapping[str, Any]) -> Opened:
        self._count += 1
        if self.kind == REAL:
            return self._open_real(scenario, self._tmp_path / f"sandbox-{self.kind}-{self._count}")
        world = World(scenario, seed=worlds.SEED, start=worlds.START)
        spec = load_scenario(scenario)
        provider = WorldCompute(world, cluster_name=spec.cluster_name, resource_groups=spec.resource_groups)
        return Opened(MEMORY, world, world.advance_by, WorldCluster(world), provider)

    def _open_real(self, scenario: Mapping[str, Any], workdir: Path) -> Opened:
        clock = ManualClock(worlds.START)
        server = SandboxServer(scenario, seed=worlds.SEED, workdir=workdir, start=worlds.START, clock=clock).start()
        self._stack.callback(stop_in_background, server)
        # ARM_OPERATION_WAIT=0: a change comes back at once, still InProgress, and finishes through its token.
        settings = load_settings({**server.env(), "ARM_OPERATION_WAIT": "0s", "USAGE_SOURCE": "none"})
        cluster = KubernetesCluster.from_settings(settings)
        self._stack.callback(cluster.close)
        provider = VmssCompute.from_settings(settings)
        self._stack.callback(provider.close)

        def advance(seconds: float) -> None:
            clock.advance(seconds)  # the server advances its world to the clock on every request

        return Opened(REAL, server.world, advance, cluster, provider)

    def side(self, scenario: Mapping[str, Any], pick: Callable[[Opened], P]) -> WorldSide[P]:
        opened = self.open(scenario)
        return WorldSide(self.kind, pick(opened), opened.world, opened.advance, lambda other: self.side(other, pick))


_WRITES = frozenset({
    # Cluster
    "cordon", "uncordon", "add_taint", "remove_taint", "evict", "delete_node", "write_config_map",
    # NodeGroupProvider
    "begin_resize", "begin_delete_instances", "begin_deallocate_instances", "begin_start_instances",
})


class ReadOnly:
    """A port whose writes fail the test: what the module-scoped views hand out, so no test changes them for another."""

    def __init__(self, port: object) -> None:
        self._port = port

    def __getattr__(self, name: str) -> Any:
        if name in _WRITES:
            raise AssertionError(f"{name}() on a shared, read-only view: take the function-scoped fixture instead")
        return getattr(self._port, name)


def read_only(side: WorldSide[P]) -> WorldSide[P]:
    def frozen(seconds: float) -> None:
        raise AssertionError("advance() on a shared, read-only view: take the function-scoped fixture instead")

    return WorldSide(side.kind, ReadOnly(side.port), side.world, frozen, side.variant)  # type: ignore[arg-type]


# --- ActionQueue ---------------------------------------------------------------------------------------


@dataclass
class QueueSide:
    """An ActionQueue with the reads the port leaves out, as each implementation offers them."""

    kind: str
    port: ActionQueue
    take_visible: Callable[[], list[str]]  # the texts visible now, taken off the queue
    poison: Callable[[], list[str]]  # the texts on the poison queue
    wait: Callable[[timedelta], None]  # let this much time pass
    settle: float = 0.0  # wall seconds a delayed message may take beyond its delay to show (Azurite)

    def take_eventually(self, count: int, *, after: timedelta) -> list[str]:
        """Let `after` pass, then take visible texts until `count` came or `settle` more seconds passed."""
        self.wait(after)
        taken = self.take_visible()
        deadline = time.monotonic() + self.settle
        while len(taken) < count and time.monotonic() < deadline:
            time.sleep(0.1)
            taken += self.take_visible()
        return taken


def real_queue(queue: StorageActionQueue) -> QueueSide:
    def take_visible() -> list[str]:
        taken = []
        while batch := queue.receive(visibility_timeout=timedelta(seconds=30)):
            for message in batch:
                taken.append(message.body_text)
                queue.delete(message)
        return taken

    def poison() -> list[str]:
        with queue.poison() as reader:
            return reader.peek()

    return QueueSide(REAL, queue, take_visible, poison, lambda delay: time.sleep(delay.total_seconds()), settle=3.0)


def memory_queue() -> QueueSide:
    clock = ManualClock(worlds.START)
    queue = MemoryQueue(clock)

    def take_visible() -> list[str]:
        taken = []
        while (message := queue.take_due(clock.now())) is not None:
            taken.append(message.text)
        return taken

    def wait(delay: timedelta) -> None:
        clock.advance(delay.total_seconds())

    return QueueSide(MEMORY, queue, take_visible, lambda: list(queue.poison), wait)
