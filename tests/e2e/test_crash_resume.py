"""The runner is SIGKILLed mid-drain and started again: the drain completes and no instance is deleted twice.

The runner runs as a child process (devtools/crash.py), so the kill takes everything it held in
memory; the new process has only Table storage and the queue in Azurite to go on.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from devtools.demo import SCENARIO_OPTIONS, run_scenario

pytestmark = pytest.mark.e2e

JOBS = 6 + 3  # warmup and tail pods; the web ReplicaSet's pods run for good


@pytest.fixture(scope="module")
def crash(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> dict[str, Any]:
    # Depending on `azurite` makes run_scenario reuse the suite's shared Azurite instead of owning one.
    return run_scenario("crash-resume", out_dir=tmp_path_factory.mktemp("crash-resume"), speed=90, live=False,
                        wall_timeout=150, kill_runner_during="drain",
                        extra_settings={"SCALE_ACTIONS_QUEUE": f"e2e-crash-{uuid.uuid4().hex[:12]}"})


def test_the_demo_kills_the_runner_during_a_drain_for_this_scenario() -> None:
    assert SCENARIO_OPTIONS["crash-resume"]["kill_runner_during"] == "drain"


def test_converges_back_to_the_minimum(crash: dict[str, Any]) -> None:
    assert crash["converged"], crash
    assert crash["nodes_by_group_at_end"] == {"rg-sandbox-nodes/pool-d4": 1}
    assert crash["actions"]["scale_down"] == 2 and crash["actions"]["failed"] == 0


def test_the_runner_was_killed_once_while_a_drain_was_under_way(crash: dict[str, Any]) -> None:
    (restart,) = crash["runner_restarts"]
    assert restart["signal"] == "SIGKILL" and restart["step"] == "drain"
    assert restart["in_flight"] and all(a["step"] == "drain" for a in restart["in_flight"])
    assert [p["end"] for p in crash["runner_processes"]] == ["killed", "stopped"]


def test_every_drain_the_kill_interrupted_completed(crash: dict[str, Any]) -> None:
    (restart,) = crash["runner_restarts"]
    for action in restart["in_flight"]:
        assert action["outcome_at_end"].startswith("succeeded"), action
    assert crash["crash_check"]["problems"] == []


def test_each_instance_is_deleted_exactly_once(crash: dict[str, Any]) -> None:
    deletes = crash["deletes_by_instance"]
    assert len(deletes) == 2 and set(deletes.values()) == {1}, deletes
    assert crash["api_breakdown"]["arm"]["instance_deletes_refused"] == {}


def test_no_job_pod_is_evicted_and_every_job_completes(crash: dict[str, Any]) -> None:
    # The web pods on the first node drained are evicted (and replaced); Job pods are waited for.
    assert set(crash["running_pods_evicted_by_workload"]) <= {"default/web"}
    assert crash["pods_killed"] == 0
    assert crash["pods_completed"] == JOBS
    assert crash["pods_unschedulable_at_end"] == 0
