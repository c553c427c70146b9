"""The allocation-failure scenario end to end: a capacity increase whose operation succeeds leaves its instances
Failed (ZonalAllocationFailed); the next pending poll deletes them, marks the offering and grows the other pool in
that poll, and every pod runs there, long before cluster-autoscaler's 15-minute provision timeout."""

from __future__ import annotations

import pytest

from tests.e2e.invariants import INVARIANTS, Invariant, Promises, Run, invariant_id, run_scenario

pytestmark = pytest.mark.e2e

D4, E4 = "rg-sandbox-nodes/pool-d4", "rg-sandbox-nodes/pool-e4"
POLL_S = 10  # PENDING_POLL_SCHEDULE's interval
MAX_NODE_PROVISION_TIME_S = 15 * 60  # how long cluster-autoscaler on Azure waits by default before another group

ALLOCATION_FAILURE = Promises(
    scale_up_for=("default/render",),
    # The Jobs arrive over 30 s, and the failed instances are found in one or two polls (they fail at their own
    # provisioning times): each poll that re-plans packs its own pods, one part-filled node each (2). And the
    # first increase's instances, left Failed, stay billed until their delete lands (20-40 s) while their
    # replacements are created: up to 12 pods / 2 a node of them (6).
    node_slack=2 + 6,
)


@pytest.fixture(scope="module")
def allocation_failure(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
    return run_scenario("allocation-failure", tmp_path_factory.mktemp("allocation-failure"), ALLOCATION_FAILURE,
                        speed=30, wall_timeout=240)


@pytest.mark.parametrize("invariant", INVARIANTS, ids=invariant_id)
def test_allocation_failure_invariants(allocation_failure: Run, invariant: Invariant) -> None:
    """Converged with every Job complete, back at the minimums, nothing evicted or killed, nodes within what the
    pods need, TriggeredScaleUp for the work (tests/e2e/invariants.py)."""
    invariant(allocation_failure)


def test_failed_instances_are_deleted_and_the_pods_run_elsewhere_within_a_poll(allocation_failure: Run) -> None:
    summary, allocation = allocation_failure.summary, allocation_failure.summary["allocation"]
    # Azure left instances Failed although the operation succeeded: no action failed, the poll found them.
    assert allocation["failed_instances"].get("ZonalAllocationFailed", 0) >= 1, allocation
    assert summary["actions"]["failed"] == 0, summary["actions"]
    # Every one deleted (they bill and hold quota), each found within a poll (plus a poll's own time).
    assert allocation["deleted"] == allocation["failed_total"] and allocation["failed_at_end"] == 0, allocation
    assert allocation["detect_lag_s_max"] <= 3 * POLL_S, allocation
    # The other pool grown in the poll that found them, and the pods meant for them ran there (pods of a later,
    # ordinary increase of pool-d4, asked for before the failure showed, may run on pool-d4).
    assert allocation["fallback_lag_s_max"] <= 3 * POLL_S, allocation
    assert summary["placements"].get(E4, 0) >= 1, summary["placements"]
    assert summary["pods_completed"] == summary["pods_total"], summary["pods_completed"]
    # Reported as cluster-autoscaler reports an OutOfResources instance error (clusterstate's ScaleUpFailed).
    assert summary["events"].get("ScaleUpFailed", 0) >= 1, summary["events"]
    assert summary["pending_wait_s"]["max"] < MAX_NODE_PROVISION_TIME_S / 2, summary["pending_wait_s"]
