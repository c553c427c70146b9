"""The Kueue double: queued gang jobs get their quota reserved in FIFO order, a ProvisioningRequest only with a
reservation, their pods only once it is Provisioned; a failed request releases the quota to the next job."""

from __future__ import annotations

from typing import Any

import pytest

from shared.domain import CHECK_CAPACITY_CLASS
from sandbox.model.scenario import ScenarioError, scenario_from_dict
from sandbox.world import World
from sandbox.world.provisioning_requests import get_provisioning_request
from tests.sandbox.helpers import scenario
from tests.sandbox.test_gang_jobs import set_condition

POD = {"cpu": "3", "memory": "4Gi"}


def _job(name: str, at: str, pods: int = 2, duration: str = "5m") -> dict[str, Any]:
    return {"name": name, "at": at, "pods": pods, "duration": duration, "queue": "batch", "requests": POD}


def _world(jobs: list[dict[str, Any]], *, cpu: str = "6", strategy: str = "BestEffortFIFO",
           retry: dict[str, Any] | None = None) -> World:
    queue = {"name": "batch", "nominal_quota": {"cpu": cpu}, "queueing_strategy": strategy,
             "admission_check": {"class": "check-capacity", "retry": retry or {}}}
    doc = scenario(gang_jobs=jobs, kueue={"cluster_queues": [queue]})
    doc["node_groups"][0]["initial"] = 6
    return World(doc)


def _request(world: World, job: str, attempt: int = 1) -> dict[str, Any] | None:
    return get_provisioning_request(world, "default", f"{job}-{attempt}")


def _pods(world: World, job: str) -> list[Any]:
    return [p for p in world._live.values() if p.workload == f"default/{job}"]


def test_three_queued_jobs_are_admitted_in_order_as_each_request_is_provisioned() -> None:
    names = ["a", "b", "c"]
    world = _world([_job(name, f"{10 * i}s") for i, name in enumerate(names)])  # quota: one job at a time
    world.advance_by(30)
    admitted = []
    for i, name in enumerate(names):
        assert _request(world, name) is not None
        assert _request(world, name)["spec"]["provisioningClassName"] == CHECK_CAPACITY_CLASS  # type: ignore[index]
        for later in names[i + 1:]:
            assert _request(world, later) is None and not _pods(world, later)  # no reservation, no request
        assert not _pods(world, name)
        world.advance_by(30)
        set_condition(world, f"{name}-1", "Provisioned")
        assert len(_pods(world, name)) == 2
        admitted.append(world.t)
        world.advance_by(5 * 60 + 1)  # the job's work: its quota goes back to the queue
    report = world.report()["gang_jobs"]
    assert report["kueue"]["reservation_order"] == [f"default/{name}" for name in names]
    assert [report["jobs"][f"default/{n}"]["admitted"] for n in names] == pytest.approx(admitted)
    assert admitted == sorted(admitted) and report["completed"] == 3


def test_with_room_for_all_a_job_is_admitted_when_its_own_request_is_provisioned() -> None:
    world = _world([_job(name, "0s") for name in ("a", "b", "c")], cpu="18")
    world.advance_by(10)
    assert all(_request(world, name) is not None for name in ("a", "b", "c"))
    set_condition(world, "c-1", "Provisioned")
    assert _pods(world, "c") and not _pods(world, "a") and not _pods(world, "b")


@pytest.mark.parametrize(("strategy", "small_admitted"), [("StrictFIFO", False), ("BestEffortFIFO", True)])
def test_a_head_job_the_quota_cannot_hold_blocks_only_a_strict_queue(strategy: str, small_admitted: bool) -> None:
    world = _world([_job("big", "0s", pods=3), _job("small", "10s", pods=1)], cpu="6", strategy=strategy)
    world.advance_by(30)
    assert _request(world, "big") is None  # 9 CPU asked of a 6-CPU quota: never reserved
    assert (_request(world, "small") is not None) is small_admitted


def test_a_failed_request_releases_the_quota_and_the_job_comes_back_after_its_backoff() -> None:
    world = _world([_job("a", "0s"), _job("b", "10s")], retry={"backoff_base": "60s"})
    world.advance_by(20)
    set_condition(world, "a-1", "Failed", reason="CapacityIsNotFound")
    assert _request(world, "b") is not None  # a's quota went to b at once
    world.advance_by(70)
    assert _request(world, "a", 2) is None  # a's backoff is over, but b holds the quota
    set_condition(world, "b-1", "Provisioned")
    world.advance_by(5 * 60 + 1)
    assert _request(world, "a", 2) is not None
    report = world.report()["gang_jobs"]
    assert report["kueue"]["reservation_order"] == ["default/a", "default/b", "default/a"]


@pytest.mark.parametrize(("change", "path"), [
    ({"class": "atomic"}, "$.gang_jobs[0].class"),
    ({"retry": {}}, "$.gang_jobs[0].retry"),
])
def test_a_queued_job_takes_class_and_retry_from_its_queue(change: dict[str, Any], path: str) -> None:
    queue = {"name": "batch", "nominal_quota": {"cpu": "6"}, "admission_check": {"class": "atomic"}}
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(scenario(gang_jobs=[{**_job("a", "0s"), **change}], kueue={"cluster_queues": [queue]}))
    assert err.value.path == path and "admission check" in err.value.problem


def test_a_cluster_queue_needs_a_known_strategy_and_class() -> None:
    bad = {"name": "batch", "nominal_quota": {"cpu": "6"}, "queueing_strategy": "LIFO",
           "admission_check": {"class": "atomic"}}
    with pytest.raises(ScenarioError, match=r"queueing_strategy.*not a queueing strategy"):
        scenario_from_dict(scenario(kueue={"cluster_queues": [bad]}))
