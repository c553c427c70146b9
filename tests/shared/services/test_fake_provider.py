"""Adding a backend means implementing NodeGroupProvider: the `burst` scenario's decisions, run by the real
services and executor on in-memory ports, with its scale set served by a provider of another kind (`fake`).

The provider is the replay's WorldCompute (an in-process simulated backend) registered under kind `fake`:
the engine sees only the groups, instances and operations it returns, and the router sends every call for
those groups to it. Nothing here goes over HTTP or to Azurite, so a whole scenario runs in seconds.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from devtools.replay.harness import Replay, ReplayConfig
from devtools.replay.policies.ours import Ours
from devtools.replay.world_ports import WorldCompute
from sandbox.model.scenario import load_scenario
from sandbox.world import World
from shared.domain import NodeGroup
from shared.services.providers import ProviderRouter

SCENARIO = Path(__file__).resolve().parents[3] / "sandbox" / "scenarios" / "burst.json"


class Counting:
    """Passes every call through to the provider it wraps, counting them by method."""

    def __init__(self, inner: WorldCompute) -> None:
        self._inner = inner
        self.kind = inner.kind
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return method(*args, **kwargs)

        return counted


@pytest.fixture(scope="module")
def burst() -> tuple[dict[str, Any], Counting, list[NodeGroup]]:
    scenario = load_scenario(SCENARIO)
    world = World(scenario, seed=1)
    replay = Replay(world, ReplayConfig(seed=1))
    groups = tuple(dict.fromkeys(g.resource_group for g in scenario.node_groups))
    fake = Counting(WorldCompute(world, cluster_name=scenario.cluster_name, resource_groups=groups, kind="fake"))
    replay.compute = ProviderRouter([fake])  # type: ignore[assignment,list-item]
    policy = Ours(replay, settings={"CLUSTER_NAME": scenario.cluster_name, "NODE_RESOURCE_GROUPS": ",".join(groups)})
    replay.run(policy)
    return world.report(), fake, replay.compute.list_node_groups()


def test_every_group_comes_from_the_fake_provider(burst: tuple[dict[str, Any], Counting, list[NodeGroup]]) -> None:
    _, _, groups = burst
    assert groups and {g.provider for g in groups} == {"fake"}


def test_the_scenario_grows_and_shrinks_through_the_fake_provider(
        burst: tuple[dict[str, Any], Counting, list[NodeGroup]]) -> None:
    report, fake, _ = burst
    assert fake.calls["begin_resize"] >= 1  # grown for the burst
    assert fake.calls["begin_delete_instances"] >= 1  # and shrunk back
    assert report["nodes_max"] > 1


def test_every_pod_ran_and_nothing_was_killed_or_evicted(burst: tuple[dict[str, Any], Counting, list[NodeGroup]]) -> None:
    report, _, _ = burst
    assert report["pods_total"] == report["pods_completed"] > 0
    assert report["pods_pending"] == 0
    assert report["pods_killed"] == 0 and report["running_pods_evicted"] == 0


def test_the_pool_is_back_at_its_minimum_once_the_burst_is_over(
        burst: tuple[dict[str, Any], Counting, list[NodeGroup]]) -> None:
    report, _, groups = burst
    assert all(g.capacity == g.min_size for g in groups)
    counts = report["nodes_by_group"].values()
    assert sum(c["ready"] + c["booting"] + c["deleting"] for c in counts) == sum(g.min_size for g in groups)
