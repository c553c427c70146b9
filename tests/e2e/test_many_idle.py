"""Scale-down keeps pace with many idle nodes in several pools (issue 14, item 4), end to end.

`many-idle` itself (500 nodes) is for `make demo`; this is the same shape at 90 nodes, so it fits the
test budget: three pools of different ages, every node idle within minutes, MAX_SCALE_DOWN_PARALLELISM 10.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.invariants import INVARIANTS, Invariant, Promises, Run, groups, invariant_id, run_scenario

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
POOLS = {"pool-old": (40, "3h"), "pool-mid": (30, "1h"), "pool-new": (20, "0s")}
SLOTS, TICK_S = 10, 60  # MAX_SCALE_DOWN_PARALLELISM; the utilisation poll's schedule
NEWEST = "rg-sandbox-nodes/pool-new"

PROMISES = Promises(scale_up_for=())  # every node holds one Job at the start, then goes idle: nothing to add


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
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
    # The scenario keeps many-idle's expect_at_most (removal_lag_s.max <= 900, nothing evicted or killed),
    # which the `converged` invariant checks.
    return run_scenario(str(path), out, PROMISES, speed=10, wall_timeout=420)


@pytest.mark.parametrize("invariant", INVARIANTS, ids=invariant_id)
def test_many_idle_invariants(run: Run, invariant: Invariant) -> None:
    """Converged with every pool at its minimum and the expect_at_most bounds met, every idle node above the
    minimums deleted exactly once, nothing evicted or killed, no scale-up (tests/e2e/invariants.py)."""
    invariant(run)


def test_freed_slots_go_out_between_ticks(run: Run) -> None:
    """With one handout per tick, 84 nodes at 10 a tick would take the last one 8 ticks past due; rounds
    hand out the slots again as soon as deletes are committed."""
    lag = run.summary["removal_lag_s"]
    handouts = -(-lag["nodes"] // SLOTS)
    assert lag["max"] < (handouts - 1) * TICK_S * 0.75, lag


def test_no_pool_waits_behind_the_others(run: Run) -> None:
    """Slots go to the pools in turn: each pool's last node is as timely as the cluster's, not starved
    while an older pool's nodes take every slot (sorted oldest first, pool-new would wait for all 70)."""
    lag = run.summary["removal_lag_s"]
    by_group = run.summary["removal_lag_s_by_group"]
    assert set(by_group) == set(groups(run)), by_group
    newest, spec = by_group[NEWEST], groups(run)[NEWEST]
    assert newest["nodes"] == spec.initial - spec.min_size, newest  # every idle node of it went while empty
    # Oldest first across pools, pool-new's first node would wait for the other pools' 66.
    assert newest["p50"] < lag["max"] * 0.75, by_group
