"""`make demo` checks a scenario's `expect_at_most` bounds against summary.json, and fails the run when one is not met."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.demo import check_expectations
from sandbox.model.scenario import load_scenario

SUMMARY = {"removal_lag_s": {"nodes": 494, "max": 660.3}, "pods_killed": 0, "converged": True}


@pytest.mark.parametrize(("path", "bound", "met", "problem"), [
    ("removal_lag_s.max", 900, True, None),
    ("removal_lag_s.max", 600, False, "removal_lag_s.max is 660.3, more than 600"),
    ("pods_killed", 0, True, None),  # at most: equal is met
    ("removal_lag_s.p99", 900, False, "summary.json has no number at removal_lag_s.p99"),
    ("converged", 1, False, "summary.json has no number at converged"),  # a flag is not a figure
    ("removal_lag_s", 900, False, "summary.json has no number at removal_lag_s"),
])
def test_each_bound_is_checked_against_the_summary(path: str, bound: float, met: bool, problem: str | None) -> None:
    [row] = check_expectations(SUMMARY, [(path, bound)])
    assert row["met"] is met and row.get("problem") == problem
    assert row["path"] == path and row["at_most"] == bound


def test_many_idle_expects_its_fifteen_minute_target() -> None:
    bounds: dict[str, Any] = dict(load_scenario("many-idle").expect_at_most)
    assert bounds == {"removal_lag_s.max": 900, "running_pods_evicted": 0, "pods_killed": 0}
