"""What the replay adds to the world: pods arriving from a trace, and finished Job pods deleted after their TTL."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sandbox.model.resources import Amounts
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world import World
from tests.sandbox.helpers import job, scenario


def _names(world: World) -> list[str]:
    return [p["metadata"]["name"] for p in world.k8s_list("pods") if p["metadata"]["namespace"] == "default"]


def test_finished_job_pods_go_after_their_ttl_and_others_stay() -> None:
    world = World(scenario(workloads=[job("kept", duration="60s"), job("ttl", duration="60s", ttl_after_finished="30s")]))
    world.advance_by(61)
    assert sorted(n.rsplit("-", 1)[0] for n in _names(world)) == ["kept", "ttl"]  # both Succeeded, both listed
    world.advance_by(30)
    assert [n.rsplit("-", 1)[0] for n in _names(world)] == ["kept"]
    assert world.report()["pods_completed"] == 2  # deleted after finishing is still a completion


def test_ttl_is_for_jobs_only() -> None:
    doc = scenario(workloads=[{**job("web", duration=None), "kind": "ReplicaSet", "ttl_after_finished": "1m"}])
    with pytest.raises(ScenarioError, match=r"ttl_after_finished: only Jobs have ttlSecondsAfterFinished"):
        load_scenario(doc)


def test_add_arrival_creates_pods_of_one_owner_at_their_times() -> None:
    world = World(scenario(workloads=[]))
    spec = replace(load_scenario(scenario(workloads=[job("trace-job")])).workloads[0], count=0)
    world.add_arrival(10.0, spec, Amounts.of(500, 1 << 30, 1), 30.0)
    world.add_arrival(20.0, spec, Amounts.of(500, 1 << 30, 1), 30.0)
    assert world.done() == (False, None)
    world.advance_by(15)
    assert len(_names(world)) == 1
    world.advance_by(10)
    pods = [p for p in world.k8s_list("pods") if p["metadata"]["namespace"] == "default"]
    assert len(pods) == 2
    assert len({p["metadata"]["ownerReferences"][0]["uid"] for p in pods}) == 1
    with pytest.raises(ValueError, match="before the world's time"):
        world.add_arrival(1.0, spec, Amounts.of(500, 1 << 30, 1), 30.0)
    world.advance_by(60)
    assert world.done() == (True, "workload-complete")
