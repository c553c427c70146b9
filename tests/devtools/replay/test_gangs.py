"""The gang replay's workload, scenario, observer and targets, and the ca emulation's ProvisioningRequest pass."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from devtools.replay import gangs
from devtools.replay.gangs import GangJob, GangObserver, GangWorkload
from devtools.replay.harness import pool_of
from devtools.replay.policies.ca_provreq import BOOKING, CaProvisioningRequests
from devtools.replay.traces import MIB, Trace, TracePod
from shared.domain import (
    ATOMIC_SCALE_UP_CLASS, CONSUME_PROVISIONING_REQUEST, Condition, Pod, ProvisioningRequest, Resources,
)
from shared.engine import provisioning_conditions as pc

GIB = 1024 * MIB
T0 = datetime(2030, 1, 7, tzinfo=timezone.utc)


def _trace(*pods: TracePod) -> Trace:
    return Trace("t", "t.csv", tuple(pods), "a hand-made trace.")


@pytest.mark.parametrize("gpus", [2, 3, 4, 8])
def test_a_multi_gpu_pod_becomes_one_gang_that_keeps_its_gpus_and_requests(gpus: int) -> None:
    pod = TracePod(at=5.0, duration=600.0, cpu_milli=32_200, memory_bytes=132 * GIB, gpus=gpus)
    workload = gangs.gangs_of(_trace(pod))
    [job] = workload.jobs
    assert job.total_gpus == gpus and job.workers == gpus
    assert (job.at, job.duration) == (pod.at, pod.duration)
    # An even split, rounded up: never less than the pod asked for, at most one unit more per worker.
    assert pod.cpu_milli <= job.cpu_milli * job.workers < pod.cpu_milli + job.workers
    assert pod.memory_bytes <= job.memory_bytes * job.workers < pod.memory_bytes + job.workers * MIB
    assert pool_of(job.worker(), gangs.GANG_POOLS) is not None
    assert f"{len(workload.jobs)} gangs" in workload.note


def test_pods_under_the_gang_size_and_gangs_no_pool_holds_are_left_out_and_counted() -> None:
    pods = (TracePod(0.0, 10.0, 1000, GIB, gpus=0), TracePod(1.0, 10.0, 1000, GIB, gpus=1),
            TracePod(2.0, 10.0, 1000, GIB, gpus=2),
            TracePod(3.0, 10.0, 4_000_000, GIB, gpus=2))  # 2,000 cores a worker: no pool
    workload = gangs.gangs_of(_trace(*pods))
    assert [j.at for j in workload.jobs] == [2.0]
    assert "1 left out" in workload.note
    with pytest.raises(ValueError, match="gpus_per_worker"):
        gangs.gangs_of(_trace(*pods), gpus_per_worker=0)


def test_the_workload_from_the_trace_has_gangs_of_several_sizes_within_eight_hours() -> None:
    workload = gangs.load_gang_workload()
    assert len(workload.jobs) >= 20
    assert len({j.workers for j in workload.jobs}) >= 2 and min(j.workers for j in workload.jobs) >= 2
    assert max(j.at for j in workload.jobs) <= 8 * 3600
    assert "gangs of" in workload.note and "78x" in workload.note


def _job(name: str, at: float, duration: float, workers: int, gpus: int = 1) -> GangJob:
    return GangJob(name, at, duration, workers, 1000, GIB, gpus)


def test_the_family_quota_binds_at_the_peak_in_whole_nodes() -> None:
    jobs = [_job("a", 0, 100, 8), _job("b", 50, 100, 8), _job("c", 200, 100, 4)]
    peak = gangs.peak_gpus(jobs)
    assert max(j.total_gpus for j in jobs) <= peak <= sum(j.total_gpus for j in jobs)
    [(family, cores)] = gangs.family_quota(jobs).items()
    largest = max(gangs.GANG_POOLS, key=lambda p: p.gpus)
    node_cores = -(-largest.cpu_milli // 1000)
    assert cores % node_cores == 0 and cores >= node_cores
    assert cores / node_cores * largest.gpus < peak  # fewer GPUs than the peak needs: it binds
    assert "NCADS" in family


def test_the_scenario_has_one_gang_job_per_gang_and_the_sandbox_accepts_it() -> None:
    from sandbox.world import World

    workload = GangWorkload((_job("gang-000", 10.0, 300.0, 4), _job("gang-001", 60.0, 300.0, 2)), "note")
    scenario = gangs.gang_scenario(workload)
    assert [(g["name"], g["pods"]) for g in scenario["gang_jobs"]] == [("gang-000", 4), ("gang-001", 2)]
    assert {a["scale_set"] for a in scenario["allocation_failures"]} == {p.name for p in gangs.GANG_POOLS}
    World(scenario, seed=0)  # a refused scenario raises


def _pod(job: str, i: int, *, node: str | None, phase: str) -> dict:
    return {"metadata": {"name": f"{job}-{i}", "labels": {gangs.GANG_LABEL: job}},
            "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


def test_the_observer_charges_bound_gpus_only_while_a_gang_is_incomplete() -> None:
    jobs = (_job("g", 0.0, 100.0, 4, gpus=2), _job("h", 0.0, 100.0, 2))
    observer = GangObserver(jobs)
    partial = [_pod("g", 0, node="n1", phase="Running"), _pod("g", 1, node="n1", phase="Pending")]
    observer.look(10.0, partial)
    observer.look(110.0, partial)  # 2 of 4 bound, 2 GPUs each, until the look at 130 s finds it whole
    whole = [_pod("g", i, node="n1", phase="Running") for i in range(4)]
    observer.look(130.0, whole)
    observer.look(1000.0, whole[:1])  # after it was complete, one left bound is not a partial gang
    result = observer.result(2000.0)
    assert result["partial_gang_gpu_hours"] == pytest.approx(2 * 2 * 120 / 3600, abs=1e-3)
    assert result["gangs_held_partial"] == 1
    assert result["gangs_never_complete"] == 1  # h: its wait runs to the end
    assert result["gang_wait_s"]["max"] == pytest.approx(2000.0)
    assert result["gang_wait_s"]["p50"] == pytest.approx(130.0)


def test_requests_seen_failed_and_retried_are_counted() -> None:
    observer = GangObserver((_job("g", 0.0, 100.0, 2),))
    failed = {"metadata": {"namespace": "default", "name": "g-1"},
              "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    observer.look(1.0, [], [failed, {"metadata": {"namespace": "default", "name": "g-2"}}])
    result = observer.result(10.0)
    assert (result["requests"], result["requests_failed"], result["requests_retried"]) == (2, 1, 1)


@pytest.mark.parametrize("ours_held, ours_p95, killed, met", [
    (0.0, 100.0, 0, (True, True, True)), (1.5, 100.0, 0, (False, True, True)),
    (0.0, 900.0, 0, (True, True, False)), (0.0, 100.0, 2, (True, False, True)),
])
def test_targets_follow_the_figures(ours_held: float, ours_p95: float, killed: int, met: tuple) -> None:
    ca = {"partial_gang_gpu_hours": 3.0, "gang_wait_s": {"p95": 500.0}, "pods_killed": 0}
    ours = {"partial_gang_gpu_hours": ours_held, "gang_wait_s": {"p95": ours_p95}, "pods_killed": killed}
    targets = gangs.evaluate_gang_targets({"ours": ours, "ca": ca})
    assert tuple(t["met"] for t in targets) == met
    assert any("GPU" in line or "policy" in line for line in gangs.gang_table({"ours": {**ours, "cost": 1.0,
        "gangs_held_partial": 0, "gangs_never_complete": 0, "requests": 1, "requests_failed": 0,
        "gang_wait_s": {"p50": 1.0, "p95": ours_p95}}}))


def test_a_policy_that_is_not_compared_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown gang policy"):
        gangs.run_gangs("nap", GangWorkload((_job("g", 0.0, 1.0, 2),), ""))


# -- the ca emulation's ProvisioningRequest pass -----------------------------------------------------------------


def _request(name: str, provisioned_since: datetime | None) -> ProvisioningRequest:
    conditions = () if provisioned_since is None else (
        Condition(pc.PROVISIONED, "True", pc.CAPACITY_IS_PROVISIONED, "", provisioned_since, 0),)
    return ProvisioningRequest("default", name, ATOMIC_SCALE_UP_CLASS, conditions=conditions)


def _consumer(request: str) -> Pod:
    return Pod("default", f"{request}-0", Resources(1000, GIB, 1), T0,
               annotations={CONSUME_PROVISIONING_REQUEST: request})


def test_pods_consuming_a_booked_request_are_no_ordinary_pending_pods_until_the_booking_ends() -> None:
    requests = [_request("booked", T0), _request("open", None)]
    cluster = SimpleNamespace(list_provisioning_requests=lambda: requests)
    provreq = CaProvisioningRequests(SimpleNamespace(cluster=cluster))
    ca = SimpleNamespace(increase_in_flight=lambda token: False)
    pending = [_consumer("booked"), _consumer("open"), Pod("default", "plain", Resources(1000, GIB, 1), T0)]
    within = provreq.ordinary(ca, pending, T0 + BOOKING - timedelta(seconds=1))
    assert [p.name for p in within] == ["open-0", "plain"]
    after = provreq.ordinary(ca, pending, T0 + BOOKING)
    assert [p.name for p in after] == [p.name for p in pending]


def test_the_bench_report_prints_the_gang_section_with_its_targets() -> None:
    from devtools.bench_report import markdown_table

    ours = {"partial_gang_gpu_hours": 0.0, "gangs_held_partial": 0, "gang_wait_s": {"p50": 10.0, "p95": 900.0},
            "gangs_never_complete": 0, "requests": 3, "requests_failed": 1, "pods_killed": 0, "cost": 12.0}
    ca = {**ours, "partial_gang_gpu_hours": 2.5, "gang_wait_s": {"p50": 10.0, "p95": 400.0}}
    section = {"note": "the rule", "assumptions": ["a quota"], "results": {"ours": ours, "ca": ca},
               "targets": gangs.evaluate_gang_targets({"ours": ours, "ca": ca})}
    text = markdown_table({"gangs": section})
    assert "### Gangs" in text and "the rule" in text and "a quota" in text
    assert "**MISSED**: gang p95 wait" in text and "met: 0 GPU-hours held by partial gangs" in text
    unavailable = markdown_table({"gangs": {**section, "results": {"ours": {"error": "not played"}}, "targets": []}})
    assert "could not run: not played" in unavailable


def test_ca_provisions_an_atomic_request_on_the_put_and_holds_a_partial_gang_until_the_failed_instance_goes() -> None:
    # One gang of two 4-GPU nodes' workers; Azure leaves one of the two new instances Failed.
    workload = GangWorkload((_job("gang-000", 30.0, 600.0, 8),), "one gang")
    config = gangs.GangConfig(pools=(gangs.GANG_POOLS[1],), allocation_failures=1, quota_share=10.0)
    result = gangs.run_gangs("ca", workload, config)
    assert result["gangs_never_complete"] == 0 and result["pods_killed"] == 0
    assert result["partial_gang_gpu_hours"] > 0  # the node that came held its GPUs while the other never did
    # CA deletes the Failed instance only at --max-node-provision-time: the gang waits at least that long.
    assert result["gang_wait_s"]["max"] >= 15 * 60
    assert result["requests_failed"] == 0  # CA never writes Failed for an atomic request it asked for
