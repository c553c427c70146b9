"""summary.json's figures for capacity kept ahead of demand: each group's Ready nodes when the first workload pod
arrived, and when its first removal started."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.demo import check_expectations, first_removal_s, ready_at_first_pod

A, B = "rg/pool-a", "rg/pool-b"


def sample(t: float, ready_a: int, ready_b: int) -> dict[str, Any]:
    return {"t": t, "groups": {A: {"ready": ready_a, "booting": 0}, B: {"ready": ready_b, "booting": 0}}}


TIMELINE = [sample(0.0, 1, 0), sample(10.0, 3, 0), sample(20.0, 6, 2), sample(30.0, 6, 4)]


@pytest.mark.parametrize(("created", "expected"), [
    ([25.0, 40.0], {A: 6, B: 2}),   # the latest sample at or before the first pod
    ([40.0, 20.0], {A: 6, B: 2}),   # the first pod by time, not by listing order
    ([10.0], {A: 3, B: 0}),         # a sample at the very moment counts
    ([5.0, None], {A: 1, B: 0}),    # a pod never created (None) is left out
    ([], {}),                       # no workload pod: nothing to be ahead of
])
def test_ready_nodes_are_read_when_the_first_pod_was_created(created: list[float | None],
                                                             expected: dict[str, int]) -> None:
    report = {"pods": [{"created": c} for c in created], "timeline": TIMELINE}
    found = ready_at_first_pod(report)
    assert found == expected
    # Never more than the timeline ever showed, and never from a sample after the first pod.
    assert all(found[g] <= max(s["groups"][g]["ready"] for s in TIMELINE) for g in found)


def test_a_pod_before_the_first_sample_has_no_figure() -> None:
    assert ready_at_first_pod({"pods": [{"created": 5.0}], "timeline": TIMELINE[1:]}) == {}


def test_the_first_removal_is_the_earliest_cordon_per_group() -> None:
    order = [{"group": A, "cordoned_at": 3100.0}, {"group": B, "cordoned_at": 900.0},
             {"group": A, "cordoned_at": 3050.0}, {"group": A, "cordoned_at": 3200.0}]
    found = first_removal_s({"scale_down_order": order})
    assert found == {A: 3050.0, B: 900.0}
    assert all(found[e["group"]] <= e["cordoned_at"] for e in order)


def test_a_group_that_removed_nothing_fails_a_lower_bound_on_its_first_removal() -> None:
    """A window's capacity never released leaves no figure, so `expect_at_least` on it is not met."""
    summary = {"first_removal_s_by_group": first_removal_s({"scale_down_order": []})}
    (row,) = check_expectations(summary, [(f"first_removal_s_by_group.{A}", 3000.0)], at_least=True)
    assert row["met"] is False and "no number" in row["problem"]
