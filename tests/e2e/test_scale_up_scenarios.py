"""Scale-up that places every pod right, end to end: many node groups, scale from zero, fast fallback."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.demo import run_scenario

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def multi_pool(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> dict[str, Any]:
    return run_scenario("multi-pool", out_dir=tmp_path_factory.mktemp("multi-pool"), speed=40, live=False,
                        wall_timeout=240)


@pytest.fixture(scope="module")
def quota_fallback(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> dict[str, Any]:
    return run_scenario("quota-fallback", out_dir=tmp_path_factory.mktemp("quota-fallback"), speed=30, live=False,
                        wall_timeout=240)


def test_multi_pool_places_every_pod_on_a_group_that_can_hold_it(multi_pool: dict[str, Any]) -> None:
    assert multi_pool["converged"], multi_pool
    placements = multi_pool["placements"]
    assert placements.get("rg-sandbox-nodes/pool-gpu") == 2  # the two training pods, scaled from zero
    assert placements.get("rg-sandbox-nodes/pool-memory", 0) >= 4  # the analytics pods need its memory
    assert multi_pool["pods_unschedulable_at_end"] == 1  # the 200-CPU pod fits nowhere
    assert multi_pool["events"].get("NotTriggerScaleUp", 0) >= 1
    assert multi_pool["events"].get("TriggeredScaleUp", 0) >= 1
    assert multi_pool["running_pods_evicted"] == 0


def test_multi_pool_shrinks_back_once_the_jobs_are_done(multi_pool: dict[str, Any]) -> None:
    # Converged means no group holds an idle node above its minimum; the web service's replicas
    # (which run for good) may keep a node of the untainted memory pool, so only the GPU pool is exact.
    assert multi_pool["converged"]
    assert multi_pool["nodes_by_group_at_end"]["rg-sandbox-nodes/pool-gpu"] == 0


def test_quota_failure_falls_back_well_before_the_provision_timeout(quota_fallback: dict[str, Any]) -> None:
    assert quota_fallback["converged"], quota_fallback
    assert quota_fallback["actions"]["failed"] >= 1  # the preferred group's QuotaExceeded
    assert quota_fallback["placements"] == {"rg-sandbox-nodes/pool-f8": quota_fallback["pods_total"]}
    # CA on Azure waits MAX_NODE_PROVISION_TIME (15 min) before trying another group.
    assert quota_fallback["pending_wait_s"]["max"] < 15 * 60 / 2
    assert quota_fallback["pods_completed"] == quota_fallback["pods_total"]
