"""The virtual-node tiers: each states every ACI limit in force, which it raises above ACI's defaults, and the
assumptions its figures rest on; and the scenario the suite builds from a tier holds exactly those limits."""

from __future__ import annotations

import json

import pytest

from devtools.replay.vn_tiers import DEFAULT_LIMITS, VN_QUOTAS, VN_TIER_STATEMENTS, VN_TIERS, tier_statement
from sandbox.model import aci
from sandbox.model.scenario import load_scenario

_GROUP = {"resource_group": "rg", "name": "pool", "vm_size": "Standard_D4s_v5", "allocatable": {"cpu": "3", "memory": "12Gi"},
          "capacity": {"cpu": "4", "memory": "16Gi"}, "min": 0, "max": 3, "initial": 0}


@pytest.mark.parametrize("cores", VN_QUOTAS)
def test_a_tier_states_every_limit_and_lists_each_one_above_the_default_as_raised(cores: int) -> None:
    statement = tier_statement(cores)
    assert set(statement["limits"]) == set(DEFAULT_LIMITS)
    assert statement["limits"]["quota_cores"] == cores  # the tier's key is its core quota
    raised = {row["limit"]: row for row in statement["raised"]}
    assert set(raised) == {key for key, value in statement["limits"].items() if value != DEFAULT_LIMITS[key]}
    for key, row in raised.items():
        assert (row["default"], row["raised_to"]) == (DEFAULT_LIMITS[key], statement["limits"][key])
        assert row["factor"] == pytest.approx(row["raised_to"] / row["default"], rel=0.01)
    assert statement["assumptions"] and json.loads(json.dumps(statement)) == statement  # results.json can hold it
    assert VN_TIER_STATEMENTS[cores] == statement


def test_the_default_tier_raises_nothing_and_the_raised_tier_raises_every_limit_with_the_cores() -> None:
    assert tier_statement(min(VN_QUOTAS))["raised"] == []
    top = tier_statement(max(VN_QUOTAS))
    # Raising cores alone would leave the container-group count and the creation rate binding first.
    assert {row["limit"] for row in top["raised"]} == set(DEFAULT_LIMITS)
    assert top["limits"]["max_container_groups"] >= top["limits"]["quota_cores"] > DEFAULT_LIMITS["quota_cores"]


@pytest.mark.parametrize("cores", VN_QUOTAS)
def test_the_scenario_built_from_a_tier_holds_the_limits_it_states(cores: int) -> None:
    spec = load_scenario({"node_groups": [_GROUP], "virtual_node": dict(VN_TIERS[cores])}).virtual_node
    assert spec is not None
    limits = tier_statement(cores)["limits"]
    assert {key: getattr(spec, key) for key in limits} == limits
    statement = tier_statement(cores)
    assert (spec.price_vcpu_second, spec.price_gb_second, spec.bill_start_latency) == (
        statement["price_vcpu_second"], statement["price_gb_second"], statement["bill_start_latency"])
    assert spec.price_vcpu_second == aci.VCPU_METER.per_second


def test_an_unknown_tier_has_no_statement() -> None:
    with pytest.raises(KeyError):
        tier_statement(max(VN_QUOTAS) + 1)


def test_a_failed_jobs_pods_that_never_ran_are_tasks_never_run_not_waits() -> None:
    """A Job failed by its backoffLimit makes no more pods: its never-started pods must not count as waits to the
    end of the replay (which would make a run that did nothing look slow rather than incomplete)."""
    from types import SimpleNamespace

    from devtools.replay.metrics import run_result
    from devtools.replay.pools import DEFAULT_POOLS

    def pod(workload: str, started: float | None) -> dict[str, object]:
        return {"workload": workload, "outcome": "completed" if started is not None else "pending", "started": started,
                "stopped": None, "waiting_since": 0.0, "killed": False, "evicted_while_running": False}

    jobs = {"failed": 1, "failed_names": ["default/job-b"], "tasks_never_run": 1, "tasks_never_created": 3}
    report = {
        "sim_seconds": 10_000.0, "node_seconds": 0.0, "node_seconds_by_group": {}, "pods_completed": 1, "nodes_max": 0,
        "api_calls": {"arm_reads": 0, "arm_writes": 0, "arm_throttled": 0},
        "pods": [pod("default/job-a", 30.0), pod("default/job-a", None), pod("default/job-b", None)],
        "virtual_node": {"cost_usd": 1.5, "peak_container_groups": 100, "peak_cores": 61.0,
                         "pods_refused": {"quota": 7}, "pods_refused_by_quota": {"ContainerGroups": 7},
                         "bill_start_latency": True, "jobs": jobs},
    }
    result = run_result(SimpleNamespace(report=lambda: report), DEFAULT_POOLS[:1],  # type: ignore[arg-type]
                        scale_actions=0, oracle_cost=1.0)
    assert result["pending_wait_s"]["max"] == 10_000.0  # job-a's pod never ran and its Job did not fail: it waited
    # two waits, 30 s and 10,000 s (nearest rank: p50 is the first); job-b's pod would have made p50 10,000 s
    assert result["pending_wait_s"]["p50"] == 30.0
    assert result["virtual_node"]["tasks_never_run"] == 1 and result["virtual_node"]["jobs_failed"] == 1
    assert result["virtual_node"]["peak_container_groups"] == 100 and result["cost"] == 1.5
