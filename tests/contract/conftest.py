"""One parametrized fixture per port, yielding each implementation over the same starting world.

- `cluster` (Cluster) and `provider` (NodeGroupProvider): `real` is KubernetesCluster / VmssCompute talking
  HTTPS to a SandboxServer on a ManualClock; `memory` is the replay's WorldCluster / WorldCompute over an
  in-process World. Both worlds come from the same scenario (tests/contract/worlds.py), seed and start, so
  they hold the same nodes, pods, scale sets and instances. See tests/contract/sides.py.
- `cluster_view` and `provider_view`: the same, module-scoped and shared by the tests that only read
  (writes and `advance` fail the test on them).
- `twins`: both at once, (real, memory), to compare whole answers.
- `store` (StateStore): `real` is TableStateStore on a fresh Azurite table, `memory` MemoryStateStore, and
  `overlay` a MemoryStateStore over another (the `plan` command's read-through overlay).
- `queue` (ActionQueue): `real` is StorageActionQueue on a fresh Azurite queue, `memory` the replay's MemoryQueue.

The others are function-scoped: a sandbox world costs about 0.15 s (most of it stopping its server), an
in-process one 2 ms, an Azurite table or queue a few ms. Azurite starts only for the `real` store and queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from shared.ports import Cluster, NodeGroupProvider, StateStore
from shared.services.memory_state import MemoryStateStore
from tests.contract import worlds
from tests.contract.sides import (
    MEMORY,
    OVERLAY,
    QUEUE_IMPLEMENTATIONS,
    REAL,
    STORE_IMPLEMENTATIONS,
    WORLD_IMPLEMENTATIONS,
    Opened,
    QueueSide,
    Worlds,
    WorldSide,
    join_stopped,
    memory_queue,
    read_only,
    real_queue,
)


@pytest.fixture(scope="package", autouse=True)
def _servers_stopped() -> Iterator[None]:
    """Sandbox servers stop in the background as each test ends; all of them have stopped when the suite ends."""
    yield
    join_stopped()


@pytest.fixture(params=WORLD_IMPLEMENTATIONS)
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorldSide[Cluster]]:
    with ExitStack() as stack:
        yield Worlds(request.param, tmp_path, stack).side(worlds.SCENARIO, lambda opened: opened.cluster)


@pytest.fixture(params=WORLD_IMPLEMENTATIONS)
def provider(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorldSide[NodeGroupProvider]]:
    with ExitStack() as stack:
        yield Worlds(request.param, tmp_path, stack).side(worlds.SCENARIO, lambda opened: opened.provider)


@pytest.fixture(scope="module", params=WORLD_IMPLEMENTATIONS)
def cluster_view(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorldSide[Cluster]]:
    with ExitStack() as stack:
        side = Worlds(request.param, tmp_path_factory.mktemp("cluster-view"), stack).side(
            worlds.SCENARIO, lambda opened: opened.cluster)
        yield read_only(side)


@pytest.fixture(scope="module", params=WORLD_IMPLEMENTATIONS)
def provider_view(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorldSide[NodeGroupProvider]]:
    with ExitStack() as stack:
        side = Worlds(request.param, tmp_path_factory.mktemp("provider-view"), stack).side(
            worlds.SCENARIO, lambda opened: opened.provider)
        yield read_only(side)


@pytest.fixture
def twins(tmp_path: Path) -> Iterator[tuple[Opened, Opened]]:
    with ExitStack() as stack:
        yield (Worlds(REAL, tmp_path, stack).open(worlds.SCENARIO),
               Worlds(MEMORY, tmp_path, stack).open(worlds.SCENARIO))


@pytest.fixture(params=STORE_IMPLEMENTATIONS)
def store(request: pytest.FixtureRequest) -> StateStore:
    if request.param == REAL:
        return request.getfixturevalue("state_store")  # tests/fixtures/azurite.py: a fresh table
    if request.param == OVERLAY:
        return MemoryStateStore(base=MemoryStateStore())
    return MemoryStateStore()


@pytest.fixture(params=QUEUE_IMPLEMENTATIONS)
def queue(request: pytest.FixtureRequest) -> QueueSide:
    if request.param == REAL:
        return real_queue(request.getfixturevalue("action_queue"))  # tests/fixtures/azurite.py: a fresh queue
    return memory_queue()
