"""Gangs end to end: ProvisioningRequests of both classes and a Kueue-like queue against the sandbox.

gang-atomic: a 4-node gang against a quota for 3 is refused without asking Azure, then gets all 4 nodes in one
increase once the quota is raised. gang-check-capacity: bookings keep idle nodes from scale-down until their pods
use them or the booking expires. kueue-admission: three queued jobs admitted one after another."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.invariants import (
    INVARIANTS,
    POLL_PENDING_S,
    Invariant,
    Promises,
    Run,
    invariant_id,
    node_count_bounds,
    run_scenario,
    workloads_complete,
)

pytestmark = pytest.mark.e2e

A100_4 = "rg-sandbox-nodes/pool-a100"
D16 = "rg-sandbox-nodes/pool-d16"
# The gangs are no `workloads` (their pods come from gang_jobs), so the checks that count workload pods do not apply;
# scale_up_events stays: no ordinary pod may trigger a scale-up, the requests' pods take the room asked for them.
CHECKS = tuple(check for check in INVARIANTS if check not in (workloads_complete, node_count_bounds))
SPEED = 40
BOOKING_S = 600.0  # PROVISIONING_REQUEST_BOOKING's default, which the demo keeps


def _run(name: str, tmp: pytest.TempPathFactory) -> Run:
    return run_scenario(name, tmp.mktemp(name), Promises(), speed=SPEED, wall_timeout=200)


@pytest.fixture(scope="module")
def atomic(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
    return _run("gang-atomic", tmp_path_factory)


@pytest.fixture(scope="module")
def check_capacity(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
    return _run("gang-check-capacity", tmp_path_factory)


@pytest.fixture(scope="module")
def kueue(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
    return _run("kueue-admission", tmp_path_factory)


def _job(run: Run, key: str) -> dict[str, Any]:
    return run.summary["gang_jobs"]["jobs"][key]


def _pods_of(run: Run, key: str) -> list[dict[str, Any]]:
    return [p for p in run.report["pods"] if p.get("workload") == key]


def _increases(run: Run) -> list[dict[str, Any]]:
    return run.summary["spot"]["capacity_increases"]


@pytest.mark.parametrize("invariant", CHECKS, ids=invariant_id)
@pytest.mark.parametrize("name", ["atomic", "check_capacity", "kueue"])
def test_gang_scenario_invariants(name: str, invariant: Invariant, request: pytest.FixtureRequest) -> None:
    """Converged with the scenario's bounds met, nothing killed, pods never waiting a poll for a node, every
    instance deleted once, ScaleDown events, no TriggeredScaleUp for a request's pods (tests/e2e/invariants.py)."""
    invariant(request.getfixturevalue(name))


# -- gang-atomic --------------------------------------------------------------------------------------------


def test_a_request_the_quota_cannot_hold_whole_asks_for_nothing_and_fails(atomic: Run) -> None:
    raised = min(change["t"] for change in atomic.summary["gang_jobs"]["quota_changes"])
    attempts = _job(atomic, "default/train")["attempts"]
    before = [a for a in attempts if a["created"] < raised]
    assert before and all((a["outcome"], a["reason"]) == ("failed", "QuotaExceeded") for a in before), attempts
    assert all(a["provisioned"] is None for a in before), before
    # Nothing asked of Azure before the raise, and no increase refused at all: the quota was checked before asking.
    assert [e for e in _increases(atomic) if e["t"] < raised] == [], _increases(atomic)
    assert {e["outcome"] for e in _increases(atomic)} == {"ok"}, _increases(atomic)
    assert atomic.summary["quota"]["refused_requests"] == 0


def test_after_the_raise_all_nodes_come_in_one_increase_and_the_gang_starts_together(atomic: Run) -> None:
    job = _job(atomic, "default/train")
    spec = next(j for j in atomic.scenario.gangs.jobs if j.key == "default/train")
    grown = [e for e in _increases(atomic) if e["to"] > e["from"]]
    assert len(grown) == 1 and grown[0]["to"] - grown[0]["from"] == spec.pods, grown
    last = job["attempts"][-1]
    assert last["outcome"] == "succeeded" and job["outcome"] == "succeeded", job
    # Provisioned once every node the request added was there (registered; usable: its GPUs allocatable).
    registered = [r["registered"] for r in atomic.summary["node_registrations"] if r["group"] == A100_4]
    assert len(registered) == spec.pods and last["provisioned"] >= max(registered), (last, registered)
    pods = _pods_of(atomic, "default/train")
    assert len({p["node"] for p in pods}) == spec.pods == len(pods), pods
    assert max(p["started"] for p in pods) - min(p["started"] for p in pods) < POLL_PENDING_S, pods
    assert atomic.summary["gang_jobs"]["partial_gang_gpu_seconds"] == 0


def test_the_gang_nodes_go_only_after_the_job(atomic: Run) -> None:
    done = _job(atomic, "default/train")["done"]
    removed = [e for e in atomic.summary["scale_down_order"] if e["group"] == A100_4]
    assert len(removed) == 4 and all(e["cordoned_at"] >= done for e in removed), (done, removed)


# -- gang-check-capacity ----------------------------------------------------------------------------------


def test_check_capacity_books_the_room_there_is_and_never_scales_up(check_capacity: Run) -> None:
    s = check_capacity.summary
    assert s["instances_created_by_group"].get(D16, 0) == 0 and _increases(check_capacity) == []
    assert s["events"].get("CapacityIsFound") == 2, s["events"]
    eval_pods = _pods_of(check_capacity, "default/eval")
    assert len(eval_pods) == 2 and all(p["started"] - p["created"] < POLL_PENDING_S for p in eval_pods), eval_pods


def test_booked_nodes_outlive_the_unneeded_time_until_used_or_expired(check_capacity: Run) -> None:
    s = check_capacity.summary
    probe = _job(check_capacity, "default/probe")["attempts"][0]
    assert probe["outcome"] == "booking-expired" and probe["provisioned"] is None, probe
    eval_job = _job(check_capacity, "default/eval")
    eval_nodes = {p["node"] for p in _pods_of(check_capacity, "default/eval")}
    removed = sorted(s["scale_down_order"], key=lambda e: e["cordoned_at"])
    # Only the node nobody booked went before the eval pods came, although the booked ones were as idle and
    # as old (idle from the start, longer than the pool's unneeded time by then).
    early = [e for e in removed if e["cordoned_at"] < eval_job["admitted"]]
    assert len(early) == 1 and early[0]["node"] not in eval_nodes, (early, eval_nodes)
    # The rest went only once the booking had ended (probe's expiry) and eval had completed.
    late = [e for e in removed if e not in early]
    assert len(late) == 3 and all(e["cordoned_at"] >= max(probe["ended"], eval_job["done"]) for e in late), late
    assert probe["ended"] >= probe["created"] + BOOKING_S, probe  # the booking ran its course


# -- kueue-admission --------------------------------------------------------------------------------------


def test_queued_jobs_are_admitted_one_after_another(kueue: Run) -> None:
    order = ["default/first", "default/second", "default/third"]
    jobs = [_job(kueue, key) for key in order]
    assert [j["outcome"] for j in jobs] == ["succeeded"] * 3, jobs
    for before, after in zip(jobs, jobs[1:]):
        # The queue's quota holds one job: the next is reserved only once the one before has completed, and
        # admitted (its pods created) only once its own request is Provisioned.
        assert after["quota_reserved"] >= before["done"], (before, after)
        assert after["admitted"] >= after["quota_reserved"], after
    for job in jobs:
        assert job["all_running"] - job["admitted"] < POLL_PENDING_S, job  # the gang starts at once
    assert kueue.summary["gang_jobs"]["partial_gang_gpu_seconds"] == 0


def test_later_jobs_reuse_the_nodes_the_first_one_leaves(kueue: Run) -> None:
    grown = [e for e in _increases(kueue) if e["to"] > e["from"]]
    assert len(grown) == 1 and grown[0]["to"] == 2, grown
    assert kueue.summary["gang_outcome"]["attempts_by_outcome"] == {"succeeded": 3}
