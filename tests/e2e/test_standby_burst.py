"""Warm standby end to end (standby-burst): the pool refills its standby while quiet, a burst is served by started
standby instances (the pods wait a start, not a create and boot), and the standby is refilled afterwards."""

from __future__ import annotations

import pytest

from tests.e2e.invariants import (
    INVARIANTS,
    POLL_PENDING_S,
    SCALE_UP_JITTER_S,
    Invariant,
    Promises,
    Run,
    boot_quantile,
    groups,
    instances_deleted_once,
    invariant_id,
    node_count_bounds,
    run_scenario,
)

pytestmark = pytest.mark.e2e

GROUP = "rg-sandbox-nodes/pool-d4"
STANDBY = 6
BURST_S = 480.0  # the Jobs arrive at 8m
PROMISES = Promises(scale_up_for=("default/render",))
# Every invariant but two the standby changes on purpose, checked below in their standby form: the node count
# (the standby's instances register once before they are parked) and the books of instances (deallocated
# instances stay in the scale set).
CHECKS = tuple(check for check in INVARIANTS if check not in (node_count_bounds, instances_deleted_once))


@pytest.fixture(scope="module")
def burst(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
    return run_scenario("standby-burst", tmp_path_factory.mktemp("standby-burst"), PROMISES, speed=40,
                        wall_timeout=200)


@pytest.mark.parametrize("invariant", CHECKS, ids=invariant_id)
def test_standby_burst_invariants(burst: Run, invariant: Invariant) -> None:
    """Converged with the scenario's bounds met, every Job complete, back at the minimum, nothing killed, waits
    within a boot's bound, TriggeredScaleUp on the burst, ScaleDown on every node removed."""
    invariant(burst)


def test_the_standby_is_refilled_before_the_burst(burst: Run) -> None:
    requested = sorted(row["requested"] for row in burst.summary["node_registrations"] if row["group"] == GROUP)
    before = [t for t in requested if t < BURST_S]
    assert len(before) == STANDBY, requested  # one refill of the whole target, while the cluster was quiet


def test_the_burst_waits_a_start_not_a_boot(burst: Run) -> None:
    s = burst.summary
    assert s["standby"]["instances_started"] >= 1, s["standby"]
    start_bound = POLL_PENDING_S + boot_quantile(burst.scenario.start_delay, worst=False) + SCALE_UP_JITTER_S
    assert s["pending_wait_s"]["p95"] <= start_bound, (s["pending_wait_s"], start_bound)
    # No pod waited for a new instance: every one the burst asked for was a standby start.
    assert not [row for row in s["node_registrations"] if BURST_S <= row["requested"] < BURST_S + POLL_PENDING_S]


def test_the_standby_is_refilled_after_the_burst_and_the_books_balance(burst: Run) -> None:
    s = burst.summary
    end = s["groups_at_end"][GROUP]
    assert end["deallocated"] == s["standby"]["deallocated_at_end"][GROUP] == STANDBY, end
    spec = groups(burst)[GROUP]
    deleted = sum(1 for key in s["deletes_by_instance"] if key.split("/")[0] == spec.name)
    assert set(s["deletes_by_instance"].values()) <= {1}, s["deletes_by_instance"]
    assert spec.initial + s["instances_created_by_group"][GROUP] - deleted == end["ready"] + end["deallocated"]
    # Never more nodes registered at once than the group's max, the standby's included.
    assert s["nodes_max"] <= spec.max_size, s["nodes_max"]
