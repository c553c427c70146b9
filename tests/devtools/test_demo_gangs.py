"""summary.json's gang figures: attempts by outcome and reason, capacity added around the first quota change."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.demo import capacity_added, gang_outcome


def _attempt(outcome: str, reason: str) -> dict[str, Any]:
    return {"request": "x", "outcome": outcome, "reason": reason}


def _increase(t: float, from_: int, to: int, outcome: str = "ok") -> dict[str, Any]:
    return {"t": t, "scale_set": "pool", "kind": "capacity", "from": from_, "to": to, "outcome": outcome}


def test_attempts_are_counted_by_outcome_and_reason_over_every_job() -> None:
    jobs = {"a/x": {"attempts": [_attempt("failed", "QuotaExceeded"), _attempt("failed", "QuotaExceeded"),
                                 _attempt("succeeded", "")]},
            "a/y": {"attempts": [_attempt("booking-expired", "BookingExpired"), _attempt("", "")]}}
    out = gang_outcome({"gang_jobs": {"jobs": jobs}})
    assert out is not None
    total = sum(len(j["attempts"]) for j in jobs.values())
    open_attempts = sum(1 for j in jobs.values() for a in j["attempts"] if not a["outcome"])
    assert sum(out["attempts_by_outcome"].values()) == total - open_attempts
    assert out["attempts_by_reason"] == {"BookingExpired": 1, "QuotaExceeded": 2}
    assert gang_outcome({"gang_jobs": None}) is None


@pytest.mark.parametrize(("increases", "before", "after"), [
    ([], 0, 0),
    ([_increase(30, 0, 3), _increase(200, 3, 4)], 3, 1),
    ([_increase(30, 0, 4, "OperationNotAllowed"), _increase(200, 0, 4)], 0, 4),  # refused: nothing added
    ([_increase(150, 4, 2), _increase(100, 0, 4)], 0, 4),  # a decrease adds nothing
])
def test_capacity_is_split_at_the_first_quota_change(increases: list[dict[str, Any]], before: int, after: int) -> None:
    report = {"gang_jobs": {"quota_changes": [{"t": 300.0, "quotas": {}}, {"t": 90.0, "quotas": {}}]},
              "spot": {"capacity_increases": increases}}
    assert capacity_added(report) == {"before_first_quota_change": before, "after_first_quota_change": after}


def test_no_quota_change_gives_none() -> None:
    assert capacity_added({"gang_jobs": {"quota_changes": []}, "spot": {"capacity_increases": []}}) is None
    assert capacity_added({"gang_jobs": None}) is None
