"""Scale-up that places every pod right, end to end: many node groups, scale from zero, fast fallback."""

from __future__ import annotations

import pytest

from tests.e2e.invariants import INVARIANTS, Invariant, Promises, Run, invariant_id, run_scenario

pytestmark = pytest.mark.e2e

GENERAL, MEMORY, GPU = "rg-sandbox-nodes/pool-general", "rg-sandbox-nodes/pool-memory", "rg-sandbox-nodes/pool-gpu"
D4, F8 = "rg-sandbox-nodes/pool-d4", "rg-sandbox-nodes/pool-f8"
MAX_NODE_PROVISION_TIME_S = 15 * 60  # how long cluster-autoscaler on Azure waits before trying another group

MULTI_POOL = Promises(
    # The web replicas need two more hostnames than the one general node, the analytics Jobs the memory pool
    # and the training Jobs the GPU pool, both at zero. Not the batch Jobs: they need more CPU than the one
    # node has, but arriving at 30 s they may fit the room of nodes already on their way for web and
    # analytics (absorbed, no TriggeredScaleUp of their own), depending on which poll sees them first.
    scale_up_for=("default/web", "default/analytics", "default/training"),
    never_run={"default/oversized": 1},  # 200 CPUs: no pool can hold it
    # The web service's replicas (which run for good) may keep general nodes or untainted memory nodes, so
    # those two end wherever the replicas run (still with no idle node above the minimum); the GPU pool at zero.
    ends_at={GENERAL: None, MEMORY: None},
    # The work arrives over 30-45 s: two pending polls each pack their own pods, one part-filled node each.
    node_slack=2,
    # In the default idle mode (auto: break-even on these plain-VM pools, about one boot) a general or memory
    # node left with one web replica may be drained while the scenario still runs: the replica moves to a node
    # that has none (its anti-affinity checked by the simulation), as cluster-autoscaler would after 10 minutes.
    may_evict=frozenset({"default/web"}),
)
QUOTA_FALLBACK = Promises(
    scale_up_for=("default/render",),
    # The 12 Jobs arrive over 30 s, planned in one or two pending polls: one part-filled node at most.
    node_slack=1,
)


@pytest.fixture(scope="module")
def multi_pool(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
    return run_scenario("multi-pool", tmp_path_factory.mktemp("multi-pool"), MULTI_POOL, speed=40, wall_timeout=240)


@pytest.fixture(scope="module")
def quota_fallback(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
    return run_scenario("quota-fallback", tmp_path_factory.mktemp("quota-fallback"), QUOTA_FALLBACK, speed=30,
                        wall_timeout=240)


@pytest.mark.parametrize("scenario", ["multi_pool", "quota_fallback"])
@pytest.mark.parametrize("invariant", INVARIANTS, ids=invariant_id)
def test_scale_up_invariants(request: pytest.FixtureRequest, scenario: str, invariant: Invariant) -> None:
    """Converged with every Job complete (multi-pool: the oversized pod left Pending, NotTriggerScaleUp and no
    scale-up for it), back at the minimums, nothing evicted or killed, nodes within what the pods need and
    waits within a boot, TriggeredScaleUp for the work that needed nodes (tests/e2e/invariants.py)."""
    invariant(request.getfixturevalue(scenario))


def test_multi_pool_places_every_pod_on_a_group_that_can_hold_it(multi_pool: Run) -> None:
    pods = [p for p in multi_pool.report["pods"] if p["group"]]
    by_workload: dict[str, set[str]] = {}
    for pod in pods:
        by_workload.setdefault(pod["workload"], set()).add(pod["group"])
    assert by_workload["default/training"] == {GPU}, by_workload  # the GPU pods, on nodes scaled from zero
    assert by_workload["default/analytics"] == {MEMORY}, by_workload  # they need its memory
    # Only the GPU pods tolerate the GPU nodes' taint.
    assert all(p["workload"] == "default/training" for p in pods if p["group"] == GPU), by_workload


def test_quota_failure_falls_back_well_before_the_provision_timeout(quota_fallback: Run) -> None:
    summary = quota_fallback.summary
    # The preferred group's QuotaExceeded: a failed action, reported as cluster-autoscaler does.
    assert summary["actions"]["failed"] >= 1, summary["actions"]
    assert "FailedToScaleUpGroup" in summary["events"], summary["events"]
    assert summary["instances_created_by_group"][D4] == 0, summary["instances_created_by_group"]
    assert set(summary["placements"]) == {F8}, summary["placements"]  # every pod ran on the fallback
    # CA on Azure waits MAX_NODE_PROVISION_TIME (15 min) before trying another group; we re-plan at once.
    assert summary["pending_wait_s"]["max"] < MAX_NODE_PROVISION_TIME_S / 2, summary["pending_wait_s"]
