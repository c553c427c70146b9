"""Gang jobs in the world: the `gang_jobs` section's checks, a job's pods created only once its ProvisioningRequest
is Provisioned, its work started by its last pod, a failed request retried after Kueue's backoff under a new name,
and the capacity held by a partial gang measured."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.domain import ATOMIC_SCALE_UP_CLASS, CHECK_CAPACITY_CLASS, CONSUME_PROVISIONING_REQUEST
from sandbox.model.gang_spec import RetrySpec
from sandbox.model.scenario import ScenarioError, scenario_from_dict
from sandbox.world import World
from sandbox.world.provisioning_requests import get_provisioning_request, replace_provisioning_request
from tests.sandbox.helpers import POOL, scenario

JOB: dict[str, Any] = {"name": "train", "at": "30s", "pods": 3, "duration": "10m", "class": "atomic",
                       "requests": {"cpu": "3", "memory": "4Gi"}}


def _world(*jobs: dict[str, Any], initial: int = 3, **extra: Any) -> World:
    doc = scenario(gang_jobs=[copy.deepcopy(job) for job in jobs], **extra)
    doc["node_groups"][0]["initial"] = initial
    return World(doc)


def set_condition(world: World, name: str, kind: str, status: str = "True", reason: str = "Test") -> None:
    """What an autoscaler writes: one condition on the request's status (others kept)."""
    obj = get_provisioning_request(world, "default", name)
    assert obj is not None, f"no request {name}"
    conditions = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] != kind]
    conditions.append({"type": kind, "status": status, "reason": reason, "message": "test",
                       "lastTransitionTime": world._ts()})
    with world.lock:
        replace_provisioning_request(world, "default", name, {"status": {"conditions": conditions}},
                                     subresource="status")
    world.advance_by(0)


def gang_pods(world: World) -> dict[str, Any]:
    return {p.name: p for p in world._live.values() if p.workload == "default/train"}


@pytest.mark.parametrize(("change", "path", "words"), [
    ({"class": "best-effort"}, "$.gang_jobs[0].class", "not a ProvisioningRequest class"),
    ({"pods": 0}, "$.gang_jobs[0].pods", "at least 1"),
    ({"duration": "0s"}, "$.gang_jobs[0].duration", "longer than zero"),
    ({"at": "3h"}, "$.gang_jobs[0].at", "within the scenario's duration"),
    ({"requests": {"cpu": "1"}}, "$.gang_jobs[0].requests.memory", "required"),
    ({"requests": {"cpu": "1", "memory": "1Gi", "gpu": 1}}, "$.gang_jobs[0].requests.gpu", "unknown resource"),
    ({"queue": "gpu"}, "$.gang_jobs[0].queue", "not a cluster queue"),
    ({"retry": {"backoff_base": "2m", "backoff_max": "1m"}}, "$.gang_jobs[0].retry.backoff_max", "shorter"),
    ({"tolerations": [{"operator": "Equal"}]}, "$.gang_jobs[0].tolerations[0].operator", "Exists when key"),
    ({"name": "Train"}, "$.gang_jobs[0].name", "not a job name"),
])
def test_a_bad_gang_job_is_refused_naming_its_field(change: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(scenario(gang_jobs=[{**JOB, **change}]))
    assert err.value.path == path and words in err.value.problem


def test_a_job_named_twice_and_a_quota_change_after_the_end_are_refused() -> None:
    with pytest.raises(ScenarioError, match=r"\$\.gang_jobs\[1\]\.name.*twice"):
        scenario_from_dict(scenario(gang_jobs=[JOB, JOB]))
    with pytest.raises(ScenarioError, match=r"\$\.quota_changes\[0\]\.at"):
        scenario_from_dict(scenario(quota_changes=[{"at": "3h", "quotas": {"cores": 8}}]))


@pytest.mark.parametrize("failures", range(1, 6))
def test_the_backoff_doubles_from_the_base_up_to_the_max_and_stops_after_the_count(failures: int) -> None:
    retry = RetrySpec(backoff_limit_count=3, backoff_base=60.0, backoff_max=200.0)
    delay = retry.delay(failures)
    if failures > retry.backoff_limit_count:
        assert delay is None
    else:
        assert delay is not None and retry.backoff_base <= delay <= retry.backoff_max
        previous = retry.delay(failures - 1) if failures > 1 else None
        assert previous is None or delay == min(2 * previous, retry.backoff_max)


@pytest.mark.parametrize(("kind", "class_name"), [("atomic", ATOMIC_SCALE_UP_CLASS),
                                                  ("check-capacity", CHECK_CAPACITY_CLASS)])
def test_pods_appear_only_after_the_request_is_provisioned(kind: str, class_name: str) -> None:
    world = _world({**JOB, "class": kind})
    world.advance_by(29)
    assert get_provisioning_request(world, "default", "train-1") is None  # not submitted yet
    world.advance_by(60)
    request = get_provisioning_request(world, "default", "train-1")
    assert request is not None and request["spec"]["provisioningClassName"] == class_name
    assert request["spec"]["podSets"] == [{"podTemplateRef": {"name": "train"}, "count": 3}]
    assert not gang_pods(world)
    set_condition(world, "train-1", "Provisioned", "False", "CapacityIsNotFound")
    world.advance_by(60)
    assert not gang_pods(world)  # Provisioned=False: it waits
    set_condition(world, "train-1", "Provisioned")
    pods = gang_pods(world)
    assert len(pods) == 3
    for pod in pods.values():
        meta = world._pod_obj(pod)["metadata"]
        assert meta["annotations"][CONSUME_PROVISIONING_REQUEST] == "train-1"
        assert meta["labels"]["scheduling.x-k8s.io/pod-group"] == "train"
    assert world.report()["gang_jobs"]["jobs"]["default/train"]["admitted"] == pytest.approx(world.t)


def test_the_work_starts_when_the_last_pod_runs_and_earlier_pods_held_their_nodes_meanwhile() -> None:
    gpu_job = {**JOB, "requests": {**JOB["requests"], "nvidia.com/gpu": 2}}
    doc = scenario(gang_jobs=[gpu_job])
    doc["node_groups"][0].update(initial=2, allocatable={"cpu": "4", "memory": "16Gi", "pods": 110,
                                                         "nvidia.com/gpu": 2})
    world = World(doc)  # room for 2 of the 3 pods (3 CPU on a 4-CPU node)
    world.advance_by(30)
    set_condition(world, "train-1", "Provisioned")
    admitted = world.t
    running = [p for p in gang_pods(world).values() if p.started is not None]
    assert len(running) == 2
    world.advance_by(20 * 60)  # longer than the job's work: nothing completes without the third pod
    assert not any(p.finished is not None for p in gang_pods(world).values())
    world.set_capacity(world.scale_set(world.subscription_id, "rg-test", POOL), 3)
    pods = gang_pods(world).values()
    for _ in range(60):  # the node boots (and a GPU node's device plugin reports), then the last pod starts
        if all(p.started is not None for p in pods):
            break
        world.advance_by(10)
    last = max(p.started for p in pods if p.started is not None)
    assert all(p.started is not None for p in pods) and last > admitted
    world.advance_by(10 * 60 + 1)
    assert all(p.finished == pytest.approx(last + 600) for p in pods)
    report = world.report()["gang_jobs"]
    job = report["jobs"]["default/train"]
    assert job["outcome"] == "succeeded" and job["all_running"] == pytest.approx(last)
    held = sum(job["held_seconds"].values())
    assert held == pytest.approx(report["partial_gang_pod_seconds"])
    assert held == pytest.approx(sum(last - p.started for p in pods if p.started is not None))
    assert held >= 2 * 20 * 60  # the two early pods held their nodes the whole wait
    assert report["partial_gang_gpu_seconds"] == pytest.approx(2 * held)  # two GPUs a pod


def test_a_failed_request_is_retried_after_the_backoff_with_a_new_name_until_the_job_is_given_up() -> None:
    world = _world({**JOB, "retry": {"backoff_limit_count": 2, "backoff_base": "60s"}})
    world.advance_by(30)
    expected_delays = [60.0, 120.0]
    for attempt, delay in enumerate(expected_delays, start=1):
        set_condition(world, f"train-{attempt}", "Failed", reason="QuotaExceeded")
        world.advance_by(delay - 1)
        assert get_provisioning_request(world, "default", f"train-{attempt + 1}") is None
        world.advance_by(1)
        assert get_provisioning_request(world, "default", f"train-{attempt + 1}") is not None
    set_condition(world, "train-3", "Failed", reason="QuotaExceeded")
    world.advance_by(3600)
    assert get_provisioning_request(world, "default", "train-4") is None
    job = world.report()["gang_jobs"]["jobs"]["default/train"]
    assert job["outcome"] == "given-up" and [a["outcome"] for a in job["attempts"]] == ["failed"] * 3
    assert world.state()["arrivals_due"] == 0  # the job no longer keeps the world busy


def test_a_lost_pod_ends_the_attempt_and_the_job_retries_with_a_new_request() -> None:
    world = _world(JOB)
    world.advance_by(30)
    set_condition(world, "train-1", "Provisioned")
    victim = next(iter(gang_pods(world).values()))
    with world.lock:
        world._kill_pods_on(victim.node)
    world.advance_by(0)
    assert not any(name.startswith("train-1-") for name in gang_pods(world))  # the rest of the gang deleted
    world.advance_by(61)
    assert get_provisioning_request(world, "default", "train-2") is not None
    attempt = world.report()["gang_jobs"]["jobs"]["default/train"]["attempts"][0]
    assert attempt["outcome"] == "pod-lost"


def test_a_booking_that_expires_before_any_pod_ran_ends_the_attempt() -> None:
    world = _world(JOB, initial=0)  # nowhere to run: the pods stay Pending
    world.advance_by(30)
    set_condition(world, "train-1", "Provisioned")
    assert len(gang_pods(world)) == 3
    set_condition(world, "train-1", "BookingExpired", reason="BookingExpired")
    assert not gang_pods(world)
    assert world.report()["gang_jobs"]["jobs"]["default/train"]["attempts"][0]["outcome"] == "booking-expired"


@pytest.mark.parametrize("expires", [False, True])
def test_pods_after_delays_the_pods_and_a_booking_expiring_meanwhile_ends_the_attempt(expires: bool) -> None:
    world = _world({**JOB, "pods_after": "5m", "retry": {"backoff_limit_count": 0}})
    world.advance_by(30)
    set_condition(world, "train-1", "Provisioned")
    world.advance_by(299)
    assert not gang_pods(world)  # provisioned, but the framework has not started its workers yet
    if expires:
        set_condition(world, "train-1", "BookingExpired", reason="BookingExpired")
    world.advance_by(2)
    job = world.report()["gang_jobs"]["jobs"]["default/train"]
    if expires:
        assert not gang_pods(world)
        assert job["attempts"][0]["outcome"] == "booking-expired" and job["outcome"] == "given-up"
    else:
        assert len(gang_pods(world)) == 3 and job["admitted"] is not None and job["admitted"] >= 30 + 300


def test_a_quota_change_applies_from_its_time() -> None:
    world = _world(JOB, quotas={"cores": 4}, quota_changes=[{"at": "10m", "quotas": {"cores": 64}}])
    group = world.scale_set(world.subscription_id, "rg-test", POOL)
    world.advance_by(60)
    with pytest.raises(Exception, match="quota|Quota"):
        world.set_capacity(group, 4)
    world.advance_by(10 * 60)
    world.set_capacity(group, 4)  # allowed now
    assert world.report()["gang_jobs"]["quota_changes"] == [{"t": 600.0, "quotas": {"cores": 64}}]


def test_a_world_without_gang_jobs_reports_none() -> None:
    world = World(scenario())
    world.advance_by(60)
    assert world.report()["gang_jobs"] is None
