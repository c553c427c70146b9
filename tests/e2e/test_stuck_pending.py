"""A pod that can never run keeps no idle node (stuck-pending): the burst's nodes go on the normal timetable,
the stuck replica is reported with its reason, and the run converges with it listed as expected-unschedulable."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from tests.e2e.test_scale_down_scenarios import _run

pytestmark = pytest.mark.e2e

GROUP = "rg-sandbox-nodes/pool-d4"
UNNEEDED = 600.0  # SCALE_DOWN_UNNEEDED_TIME
AFTER_ADD = 600.0  # SCALE_DOWN_DELAY_AFTER_ADD
# From due to cordoned: a utilisation poll (60 s) to see it due, one more if the first ran just before, and
# the ARM delete budget spread over the 18 nodes' batches.
SLACK = 240.0


@pytest.fixture(scope="module")
def stuck(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return _run("stuck-pending", tmp_path_factory.mktemp("stuck-pending"), speed=60, wall_timeout=150)


def test_converges_with_the_stuck_replica_listed_and_nothing_disrupted(stuck: tuple[dict[str, Any], dict[str, Any]]) -> None:
    summary, report = stuck
    assert summary["converged"], summary
    (listed,) = summary["expected_unschedulable"]
    assert listed["workload"] == "default/solo"
    assert listed["reason"] == ("pod didn't trigger scale-up: rg-sandbox-nodes/pool-d4: "
                                "node(s) didn't match pod anti-affinity rules"), listed
    (pod,) = [p for p in report["pods"] if f"{p['namespace']}/{p['name']}" == listed["pod"]]
    assert pod["bound"] is None and pod["phase"] == "Pending"  # never ran, so never got a node of its own
    assert summary["pods_completed"] == 40 and summary["pods_total"] == 42
    assert summary["running_pods_evicted"] == 0 and summary["pods_killed"] == 0
    assert summary["nodes_by_group_at_end"] == {GROUP: 1}  # its minimum
    assert summary["events"].get("NotTriggerScaleUp", 0) >= 1


def test_idle_nodes_are_removed_on_the_normal_timetable(stuck: tuple[dict[str, Any], dict[str, Any]]) -> None:
    summary, report = stuck
    order = summary["scale_down_order"]
    assert len(order) == summary["nodes_max"] - 1 and summary["nodes_max"] > 5, order  # every burst node went
    start = datetime.fromisoformat(report["start"])
    last_up = (datetime.fromisoformat(summary["state"]["groups"][GROUP]["last_scale_up"]) - start).total_seconds()
    for entry in order:
        created = entry["cordoned_at"] - entry["age_seconds"]
        ends = [p["stopped"] or p["finished"] for p in report["pods"] if p["node"] == entry["node"]]
        idle_since = max([created, *(t for t in ends if t is not None)])
        due = max(idle_since + UNNEEDED, last_up + AFTER_ADD)
        assert entry["cordoned_at"] <= due + SLACK, (entry, idle_since, due)
    # No node is kept for the stuck replica: the latest poll keeps only the one its sibling runs on.
    assert all("PendingPodsCouldUse" not in why for why in summary["kept_nodes"].values()), summary["kept_nodes"]
