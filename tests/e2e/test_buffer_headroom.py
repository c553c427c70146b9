"""A CapacityBuffer end to end (buffer-headroom): the buffer's placeholders grow the pool before any pod asks, a new
Deployment's pods land on that room without waiting for a node, the buffer refills, and /scale to 0 releases it."""

from __future__ import annotations

import pytest

from tests.e2e.invariants import (
    INVARIANTS,
    POLL_PENDING_S,
    Invariant,
    Promises,
    Run,
    invariant_id,
    node_count_bounds,
    run_scenario,
    scale_up_events,
)

pytestmark = pytest.mark.e2e

GROUP = "rg-sandbox-nodes/pool-web"
BUFFER, DEPLOYMENT = "web/web-headroom", "web/web"
# No pod asks for a node (the web pods land on the buffer's room) and the pool ends holding the web pods' node.
PROMISES = Promises(ends_at={GROUP: 1})
# Every invariant but the two that tie scale-ups to pods: here the buffer asks for nodes no pod needs (on purpose,
# checked below), so node counts above the pods' packing and TriggeredScaleUp without a pod are the point.
CHECKS = tuple(check for check in INVARIANTS if check not in (node_count_bounds, scale_up_events))


@pytest.fixture(scope="module")
def headroom(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
    return run_scenario("buffer-headroom", tmp_path_factory.mktemp("buffer-headroom"), PROMISES, speed=40,
                        wall_timeout=200)


def _times(run: Run) -> tuple[float, float, float]:
    """When the buffer is created, the Deployment arrives and the buffer is scaled (sim seconds)."""
    create, scale = run.scenario.capacity_buffers
    deployment = next(w for w in run.scenario.workloads if f"{w.namespace}/{w.name}" == DEPLOYMENT)
    return create.at, deployment.at, scale.at


@pytest.mark.parametrize("invariant", CHECKS, ids=invariant_id)
def test_buffer_headroom_invariants(headroom: Run, invariant: Invariant) -> None:
    """Converged with the scenario's bounds met, the pool ending at the web pods' node, nothing killed, no pod
    waiting a poll, every instance deleted once, ScaleDown events (tests/e2e/invariants.py)."""
    invariant(headroom)


def test_the_buffer_grows_the_pool_before_any_pod_and_refills_after_the_deployment(headroom: Run) -> None:
    s = headroom.summary
    created_at, arrives_at, scaled_at = _times(headroom)
    rows = sorted((r for r in s["node_registrations"] if r["group"] == GROUP), key=lambda r: r["requested"])
    assert len(rows) == 2 == s["instances_created_by_group"][GROUP], rows
    first, refill = rows
    # The buffer's node: asked for by a pending poll after the buffer exists, Ready before the Deployment.
    assert created_at <= first["requested"] <= created_at + 2 * POLL_PENDING_S, first
    assert first["registered"] < arrives_at, first
    # The refill: asked for once the web pods took the room, Ready before the buffer is scaled to 0.
    assert arrives_at <= refill["requested"] <= arrives_at + 2 * POLL_PENDING_S, refill
    assert refill["registered"] < scaled_at, refill
    assert s["ready_at_first_pod_by_group"][GROUP] == 1


def test_the_buffer_not_the_pods_triggers_the_scale_ups(headroom: Run) -> None:
    by_object = headroom.summary["events_by_workload"]
    assert by_object[BUFFER].get("TriggeredScaleUp") == 2, by_object[BUFFER]
    assert "TriggeredScaleUp" not in by_object.get(DEPLOYMENT, {}), by_object.get(DEPLOYMENT)
    assert headroom.summary["pod_wait_s_by_workload"][DEPLOYMENT] < POLL_PENDING_S


def test_scaling_the_buffer_to_zero_releases_only_the_refill_node(headroom: Run) -> None:
    s = headroom.summary
    _, _, scaled_at = _times(headroom)
    refill = max((r for r in s["node_registrations"] if r["group"] == GROUP), key=lambda r: r["requested"])
    removed = s["scale_down_order"]
    assert [entry["node"] for entry in removed] == [refill["node"]], removed
    assert removed[0]["pods"] == 0 and removed[0]["cordoned_at"] > scaled_at, removed
    # The autoscaler saw the /scale: the buffer's status it wrote last says 0 chunks, none ready.
    assert s["capacity_buffers"][BUFFER]["spec_replicas"] == 0, s["capacity_buffers"]
    assert s["capacity_buffers"][BUFFER]["replicas"] == s["capacity_buffers"][BUFFER]["ready_replicas"] == 0
    web_nodes = {p["node"] for p in headroom.report["pods"] if p.get("workload") == DEPLOYMENT}
    assert refill["node"] not in web_nodes, web_nodes
