"""Scale-down keeps pace with many idle nodes in several pools (issue 14, item 4), end to end.

`many-idle` itself (500 nodes) is for `make demo`; this is the same shape at 90 nodes, so it fits the
test budget: three pools of different ages, every node idle within minutes, MAX_SCALE_DOWN_PARALLELISM 10.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devtools.demo import run_scenario

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
POOLS = {"pool-old": (40, "3h"), "pool-mid": (30, "1h"), "pool-new": (20, "0s")}
SLOTS, TICK_S = 10, 60  # MAX_SCALE_DOWN_PARALLELISM; the utilisation poll's schedule


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> dict[str, Any]:
    scenario = json.loads((ROOT / "sandbox" / "scenarios" / "many-idle.json").read_text())
    template = scenario["node_groups"][0]
    scenario["name"] = "many-idle-90"
    scenario["duration"] = "45m"
    scenario["node_groups"] = [{**template, "name": name, "initial": count, "initial_age": age}
                               for name, (count, age) in POOLS.items()]
    scenario["workloads"][0]["count"] = sum(count for count, _ in POOLS.values())
    out = tmp_path_factory.mktemp("many-idle")
    path = out / "many-idle-90.json"
    path.write_text(json.dumps(scenario))
    return run_scenario(str(path), out_dir=out, speed=10, live=False, wall_timeout=420)


def test_every_idle_node_goes_once_and_every_pool_ends_at_its_minimum(summary: dict[str, Any]) -> None:
    assert summary["converged"], summary["nodes_by_group_at_end"]
    assert set(summary["nodes_by_group_at_end"].values()) == {2}
    assert summary["running_pods_evicted"] == 0
    deletes = summary["deletes_by_instance"]
    assert len(deletes) == sum(count for count, _ in POOLS.values()) - 2 * len(POOLS)
    assert set(deletes.values()) == {1}  # never deleted twice


def test_freed_slots_go_out_between_ticks(summary: dict[str, Any]) -> None:
    """With one handout per tick, 84 nodes at 10 a tick would take the last one 8 ticks past due; rounds
    hand out the slots again as soon as deletes are committed."""
    lag = summary["removal_lag_s"]
    handouts = -(-lag["nodes"] // SLOTS)
    assert lag["max"] < (handouts - 1) * TICK_S * 0.75, lag


def test_no_pool_waits_behind_the_others(summary: dict[str, Any]) -> None:
    """Slots go to the pools in turn: each pool's last node is as timely as the cluster's, not starved
    while an older pool's nodes take every slot (sorted oldest first, pool-new would wait for all 70)."""
    lag = summary["removal_lag_s"]
    by_group = summary["removal_lag_s_by_group"]
    assert set(by_group) == {f"rg-sandbox-nodes/{pool}" for pool in POOLS}
    newest = by_group["rg-sandbox-nodes/pool-new"]
    assert newest["nodes"] == POOLS["pool-new"][0] - 2
    # Oldest first across pools, pool-new's first node would wait for the other pools' 66.
    assert newest["p50"] < lag["max"] * 0.75, by_group
