"""The whole path, as a user runs it: sandbox cluster, Azurite, the local runner, our three functions.

Every queue message is delivered twice, so the run also proves that no action executes twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devtools.demo import run_scenario

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def burst(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> dict[str, Any]:
    # Depending on `azurite` makes run_scenario reuse the suite's shared Azurite instead of owning one.
    out = tmp_path_factory.mktemp("burst")
    summary = run_scenario("burst", out_dir=out, speed=30, duplicate_delivery=True, live=False, wall_timeout=240,
                           extra_settings=_keep_state_for_inspection())
    summary["_out"] = out
    return summary


def _keep_state_for_inspection() -> dict[str, str]:
    return {"STATE_TABLE": "e2eburststate", "SCALE_ACTIONS_QUEUE": "e2e-burst-actions"}


def test_every_pod_runs_and_completes(burst: dict[str, Any]) -> None:
    assert burst["converged"], burst
    assert burst["pods_total"] >= 90
    assert burst["pods_completed"] == burst["pods_total"]
    assert burst["pods_unschedulable_at_end"] == 0


def test_scales_up_to_fit_then_back_to_minimum(burst: dict[str, Any]) -> None:
    assert burst["nodes_max"] > 10  # about 100 pods of 1-2 CPU cannot run on one 4-CPU node
    assert burst["nodes_by_group_at_end"] == {"rg-sandbox-nodes/pool-d4": 1}
    assert burst["actions"]["scale_up"] >= 1
    assert len(burst["api_breakdown"]["arm"]["instances_deleted"]) >= 10


def test_no_running_work_is_killed(burst: dict[str, Any]) -> None:
    assert burst["running_pods_evicted"] == 0
    assert burst["pods_killed"] == 0


def test_no_action_executes_twice_under_duplicate_delivery(burst: dict[str, Any]) -> None:
    assert burst["actions"]["duplicates_suppressed"] >= burst["actions"]["scale_up"] + burst["actions"]["scale_down"]
    deleted = burst["api_breakdown"]["arm"]["instances_deleted"]
    assert deleted and all(count == 1 for count in deleted.values()), deleted
    # Empty nodes go in bulk: one action, and one delete call, per group per poll.
    assert len(deleted) >= burst["actions"]["scale_down"]
    assert burst["api_breakdown"]["arm"]["POST delete"] < len(deleted)
    assert burst["runner"]["poisoned"] == 0


def test_state_table_holds_cooldown_rows(burst: dict[str, Any]) -> None:
    row = burst["state"]["groups"]["rg-sandbox-nodes/pool-d4"]
    assert row["last_scale_up"] is not None
    assert row["last_scale_down"] is not None
    assert row["last_scale_down"] > row["last_scale_up"]
    assert row["deleting"] == []
