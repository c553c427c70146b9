"""Scheduled capacity end to end (scheduled-prewarm): a window from the scale set's tag grows the pool before the
work with no pod pending, the work waits no boot, and the window's nodes are kept until it closes and go after."""

from __future__ import annotations

import pytest

from tests.e2e.invariants import (
    INVARIANTS,
    POLL_PENDING_S,
    POLL_UTILIZATION_S,
    Invariant,
    Promises,
    Run,
    invariant_id,
    node_count_bounds,
    run_scenario,
)

pytestmark = pytest.mark.e2e

GROUP = "rg-sandbox-nodes/pool-ci"
# The scenario's clock starts at 07:50 Berlin time; its tag's window is 07:52-08:15, the Jobs come at 08:00.
OPENS_S, CLOSES_S, JOBS_S = 120.0, 1500.0, 600.0
WINDOW_MIN = 6
# No pod asks for a node: the Jobs land on the window's nodes, so no TriggeredScaleUp and waits under one poll.
PROMISES = Promises()
# Every invariant but the node count's: with no scale-up promised it wants no instance created, and the
# window creates some on purpose (checked below against the window's minimum instead).
CHECKS = tuple(check for check in INVARIANTS if check is not node_count_bounds)


@pytest.fixture(scope="module")
def prewarm(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
    return run_scenario("scheduled-prewarm", tmp_path_factory.mktemp("scheduled-prewarm"), PROMISES, speed=60,
                        wall_timeout=120)


@pytest.mark.parametrize("invariant", CHECKS, ids=invariant_id)
def test_scheduled_prewarm_invariants(prewarm: Run, invariant: Invariant) -> None:
    """Converged with every Job complete and the scenario's bounds met, back at the minimum, nothing killed, no
    TriggeredScaleUp and no pod waiting a poll, every instance deleted once (tests/e2e/invariants.py)."""
    invariant(prewarm)


def test_the_pool_grows_to_the_windows_minimum_from_its_start_and_not_before(prewarm: Run) -> None:
    s = prewarm.summary
    requested = [row["requested"] for row in s["node_registrations"] if row["group"] == GROUP]
    assert len(requested) == WINDOW_MIN - 1 == s["instances_created_by_group"][GROUP], s["node_registrations"]
    # Asked for by the first pending poll after the window opened (plus the action's queue hops), none before.
    assert all(OPENS_S <= t <= OPENS_S + 2 * POLL_PENDING_S for t in requested), requested
    assert s["nodes_max"] == WINDOW_MIN, s["nodes_max"]  # the 18 Jobs of 1 CPU fit the 6 nodes, 3 each


def test_the_window_nodes_are_ready_before_the_first_job(prewarm: Run) -> None:
    s = prewarm.summary
    assert s["ready_at_first_pod_by_group"][GROUP] == WINDOW_MIN, s["ready_at_first_pod_by_group"]
    registered = [row["registered"] for row in s["node_registrations"] if row["group"] == GROUP]
    assert registered and max(registered) < JOBS_S, registered


def test_the_window_nodes_are_kept_until_it_closes_and_released_after(prewarm: Run) -> None:
    s = prewarm.summary
    cordoned = [entry["cordoned_at"] for entry in s["scale_down_order"] if entry["group"] == GROUP]
    # Every node above the pool's own minimum goes, none before the close: the Jobs ended well before it.
    assert len(cordoned) == WINDOW_MIN - 1, s["scale_down_order"]
    assert min(cordoned) >= CLOSES_S, cordoned
    last_job_end = max(p["finished"] for p in prewarm.report["pods"] if p.get("finished") is not None)
    assert last_job_end < CLOSES_S, last_job_end
    # Idle since before the close, so due at once: the first utilisation polls after it, plus the removal budget.
    assert min(cordoned) <= CLOSES_S + 2 * POLL_UTILIZATION_S, cordoned
