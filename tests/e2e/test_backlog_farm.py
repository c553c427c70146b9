"""A DaemonSet render farm grown by its job backlog, read from a real Storage queue, end to end (`k3s-backlog-farm`).

The sandbox mirrors the render queue's backlog in the Azurite queue its env names as LOAD_BACKLOG_QUEUE, and the
autoscaler reads it through its own adapter (shared/adapters/backlog_queue.py). The farm starts at zero agents and
its busy agents stay below the group's CPU threshold, so only the backlog can grow it."""

from __future__ import annotations

from typing import Any

import pytest
from azure.storage.queue import QueueClient

from tests.e2e.invariants import (
    Invariant,
    Promises,
    Run,
    converged,
    idle_nodes_removed,
    instances_deleted_once,
    invariant_id,
    nothing_killed,
    run_scenario,
    scale_down_events,
)

pytestmark = pytest.mark.e2e

AGENTS = "rg-farm-k3s/agents"
# No pod pends in a render farm: the pod-driven invariants (scale-up events, waits, nodes the pods need) do not
# apply; what must hold is that it converged within its bounds, shrank back, deleted each agent once, killed nothing.
FARM_INVARIANTS: tuple[Invariant, ...] = (converged, idle_nodes_removed, nothing_killed, instances_deleted_once,
                                          scale_down_events)


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
    return run_scenario("k3s-backlog-farm", tmp_path_factory.mktemp("k3s-backlog-farm"), Promises(), speed=30,
                        wall_timeout=300)


def agents(sample: dict[str, Any]) -> dict[str, int]:
    return sample["groups"][AGENTS]


@pytest.mark.parametrize("invariant", FARM_INVARIANTS, ids=invariant_id)
def test_backlog_farm_invariants(farm: Run, invariant: Invariant) -> None:
    invariant(farm)


def test_cpu_alone_could_not_grow_the_farm(farm: Run) -> None:
    """By the scenario's own figures: a rendering agent measures below the group's CPU threshold, and the group
    starts at zero nodes, which have no CPU to measure."""
    (group,) = farm.scenario.node_groups
    queue = farm.scenario.render_queue
    assert queue is not None and queue.storage_queue
    others = sum(ds.requests.cpu_milli for ds in farm.scenario.daemonsets if ds.name != "renderer")
    busy = (queue.busy_cpu_milli + others) / group.capacity.cpu_milli
    assert busy < float(group.tags["autoscaler-load-cpu"]), busy
    assert group.initial == group.min_size == 0


def test_the_farm_grew_from_zero_while_the_backlog_was_long(farm: Run) -> None:
    timeline = farm.report["timeline"]
    (group,) = farm.scenario.node_groups
    per_node = int(group.tags["autoscaler-load-backlog-per-node"])
    first = next(s for s in timeline if agents(s)["target"] > 0)
    # Grown while it had no node at all: no CPU to measure, so the backlog asked for it.
    assert agents(first)["ready"] == 0 and first["frames_backlog"] > 0, first
    full = next(s for s in timeline if agents(s)["target"] == group.max_size)
    # Its max is what a backlog longer than (max - 1) nodes' worth asks for.
    assert full["frames_backlog"] > per_node * (group.max_size - 1), full
    assert max(s["frames_rendering"] for s in timeline) == group.max_size + 1  # every agent and the k3s server


def test_the_farm_shrank_only_after_the_backlog_was_empty(farm: Run) -> None:
    timeline = farm.report["timeline"]
    shrinking = [now for before, now in zip(timeline, timeline[1:], strict=False)
                 if agents(now)["target"] < agents(before)["target"]]
    assert shrinking, "the farm never shrank"
    assert all(s["frames_backlog"] == 0 for s in shrinking), [(s["t"], s["frames_backlog"]) for s in shrinking]
    assert agents(timeline[-1])["target"] == 0
    queue = farm.summary["render_queue"]
    assert queue["frames_done"] == queue["frames_total"] == farm.scenario.render_queue.frames_total  # type: ignore[union-attr]


def test_the_storage_queue_ends_as_the_worlds_backlog_empty(farm: Run, azurite: str) -> None:
    assert farm.summary["render_queue"]["storage_queue"] == "render-frames"
    with QueueClient.from_connection_string(azurite, "render-frames") as queue:
        assert queue.get_queue_properties().approximate_message_count == 0
