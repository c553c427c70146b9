"""summary.json's replacement figures: the new capacity before each old node's drain, no Job node cordoned early."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.demo import replacement_outcome


def _removal(node: str, cordoned_at: float) -> dict[str, Any]:
    return {"node": node, "group": "rg/pool", "cordoned_at": cordoned_at, "pods": 1}


def _job_pod(node: str, started: float, finished: float | None) -> dict[str, Any]:
    return {"workload": "default/render", "node": node, "started": started, "finished": finished, "stopped": None}


def _report(removals: list[dict[str, Any]], registered: dict[str, float], pods: list[dict[str, Any]]) -> dict[str, Any]:
    return {"scale_down_order": removals, "pods": pods, "workload_kinds": {"default/render": "Job"},
            "node_registration": {"nodes": [{"node": n, "registered": t} for n, t in registered.items()]}}


@pytest.mark.parametrize(("removals", "registered", "lead"), [
    ([_removal("old-1", 450.0), _removal("old-2", 460.0)], {"new-1": 432.0}, 18.0),
    ([_removal("old-1", 400.0)], {"new-1": 432.0, "new-2": 500.0}, -32.0),  # drained before any new node: negative
    ([_removal("old-1", 400.0)], {}, None),  # no new node at all
    ([_removal("new-1", 900.0)], {"new-1": 432.0}, None),  # only a new node removed: no old node to judge
])
def test_the_drain_lead_is_from_the_first_new_node_to_each_old_nodes_cordon(removals, registered, lead) -> None:
    out = replacement_outcome(_report(removals, registered, []))
    assert out["drain_lead_s_min"] == (None if lead is None else pytest.approx(lead))


@pytest.mark.parametrize(("cordoned_at", "finished", "early"), [
    (2000.0, 1800.0, 0),
    (1000.0, 1800.0, 1),
    (1000.0, None, 1),  # still running at the end
])
def test_a_job_node_cordoned_before_its_job_ended_is_counted(cordoned_at, finished, early) -> None:
    report = _report([_removal("batch", cordoned_at)], {}, [_job_pod("batch", 0.0, finished)])
    assert replacement_outcome(report)["job_nodes_cordoned_early"] == early
