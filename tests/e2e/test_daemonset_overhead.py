"""Scale-up sized with the DaemonSets that select each pool, end to end (`daemonset-overhead`)."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.demo import run_scenario

pytestmark = pytest.mark.e2e

SMALL, BIG = "rg-sandbox-nodes/pool-small", "rg-sandbox-nodes/pool-big"
POLL_S, BOOT_S = 30, 120  # the pending poll's schedule; the scenario's fixed boot delay
REPEAT_S = 300  # events.REPEAT_INTERVAL: the same event about the same pod at most once per 5 minutes


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> dict[str, Any]:
    return run_scenario("daemonset-overhead", out_dir=tmp_path_factory.mktemp("daemonset-overhead"), speed=40,
                        live=False, wall_timeout=240)


def test_the_pod_that_fits_after_the_exact_overhead_runs_on_a_node_from_zero(summary: dict[str, Any]) -> None:
    wait = summary["pod_wait_s_by_workload"]["default/fits"]
    # One poll, then the boot; the scale-up action's queue steps and the runner's wall-time jitter (one wall
    # second is 40 sandbox seconds here) get up to two more polls' worth. Seen: 137-173 s on a loaded machine.
    assert wait is not None and wait <= 3 * POLL_S + BOOT_S, summary
    events = summary["events_by_workload"]["default/fits"]
    assert events.get("TriggeredScaleUp", 0) >= 1 and "NotTriggerScaleUp" not in events
    assert summary["placements"] == {BIG: 1}
    assert summary["instances_created_by_group"] == {SMALL: 0, BIG: 1}  # one big node; the small pool never grew


def test_the_pod_that_fits_nowhere_with_the_overhead_triggers_nothing(summary: dict[str, Any]) -> None:
    assert summary["pod_wait_s_by_workload"]["default/too-big"] is None  # never ran
    events = summary["events_by_workload"]["default/too-big"]
    assert "TriggeredScaleUp" not in events
    # Reported, and then repeated at most once per interval for each reason it gives (the reason changes
    # once, when the big node is up and says why it cannot take the pod).
    assert 1 <= events.get("NotTriggerScaleUp", 0) <= 2 * (summary["sim_seconds"] // REPEAT_S + 1)
    assert summary["pods_unschedulable_at_end"] == 1


def test_the_big_pool_returns_to_zero_once_the_job_is_done(summary: dict[str, Any]) -> None:
    assert summary["converged"], summary
    assert summary["nodes_by_group_at_end"] == {SMALL: 1, BIG: 0}
