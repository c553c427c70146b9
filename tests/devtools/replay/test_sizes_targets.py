"""ours+sizes' targets: cheaper than ca's best frontier point at no worse wait, no dearer than nap killing fewer pods,
no batch pod killed, disruptions reported; each with its figures, met or not."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.replay.sizes_targets import POLICY, SAVING_VS_CA, evaluate_sizes_targets
from devtools.replay.suite import with_sizes_targets


def _run(cost: float, p95: float, killed: int = 0, per_day: float | None = 0.0) -> dict[str, Any]:
    run: dict[str, Any] = {"cost": cost, "pending_wait_s": {"p95": p95}, "pods_killed": killed}
    if per_day is not None:
        run["disruptions_per_day"] = per_day
        run["disruptions"] = {"pods_per_day": per_day * 2}
    return run


def _point(label: str, cost: float, p95: float) -> dict[str, Any]:
    return {"label": label, "cost": cost, "p95_wait_s": p95, "pods_killed": 0}


def _versus_ca(targets: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [t for t in targets if "ca point" in t["name"]]
    return found


@pytest.mark.parametrize(("mine", "points", "met"), [
    (_run(89.0, 100.0), [_point("10m/10m", 100.0, 120.0)], True),  # 11 % cheaper, waits less
    (_run(91.0, 100.0), [_point("10m/10m", 100.0, 120.0)], False),  # only 9 % cheaper
    # The cheap point waits less than ours+sizes: it is not a point ours+sizes is no worse than; the dearer one is.
    (_run(89.0, 100.0), [_point("1m/1m", 80.0, 90.0), _point("10m/10m", 100.0, 120.0)], True),
    (_run(89.0, 100.0), [_point("1m/1m", 80.0, 90.0)], False),  # every ca point waits less
    (_run(89.0, 100.0), [_point("a", 100.0, 100.0)], True),  # an equal wait is no worse
])
def test_ca_target_takes_the_cheapest_ca_point_waiting_at_least_as_long(mine: dict[str, Any],
                                                                        points: list[dict[str, Any]], met: bool) -> None:
    found = _versus_ca(evaluate_sizes_targets({POLICY: mine, "ca": _run(1.0, 1.0)}, points))
    assert found["met"] is met and f"${mine['cost']:,.2f}" in found["detail"]
    if met:
        assert found["detail"].count("%") >= 1


def test_without_a_frontier_cas_default_run_is_the_point() -> None:
    cheap = _versus_ca(evaluate_sizes_targets({POLICY: _run(80.0, 100.0), "ca": _run(100.0, 150.0)}))
    dear = _versus_ca(evaluate_sizes_targets({POLICY: _run(95.0, 100.0), "ca": _run(100.0, 150.0)}))
    assert cheap["met"] and not dear["met"] and 1 - 95.0 / 100.0 < SAVING_VS_CA
    assert not _versus_ca(evaluate_sizes_targets({POLICY: _run(80.0, 100.0)}))["met"]  # nothing to compare with


@pytest.mark.parametrize(("mine", "nap", "met"), [
    (_run(90.0, 100.0, killed=0), _run(95.0, 90.0, killed=12), True),
    (_run(96.0, 100.0, killed=0), _run(95.0, 90.0, killed=12), False),  # dearer
    (_run(90.0, 100.0, killed=0), _run(95.0, 90.0, killed=0), False),  # kills no fewer
])
def test_nap_target_wants_no_more_cost_and_fewer_kills(mine: dict[str, Any], nap: dict[str, Any], met: bool) -> None:
    (found,) = [t for t in evaluate_sizes_targets({POLICY: mine, "nap": nap}) if "nap's" in t["name"]]
    assert found["met"] is met


def test_batch_kills_and_disruptions_are_judged_for_ours_and_reported_for_every_peer() -> None:
    runs = {"ours": _run(100.0, 100.0, per_day=0.0), POLICY: _run(90.0, 100.0, killed=1, per_day=0.5),
            "ca": _run(100.0, 100.0, per_day=3.0), "nap": _run(100.0, 100.0, killed=20, per_day=40.0)}
    targets = evaluate_sizes_targets(runs)
    kills = {t["name"]: t["met"] for t in targets if "batch pod" in t["name"]}
    assert kills == {"ours: no batch pod killed": True, f"{POLICY}: no batch pod killed": False}
    (reported,) = [t for t in targets if t["name"].startswith("disruptions per day")]
    assert reported["met"] and all(f"{p} " in reported["detail"] for p in runs)
    assert "40 nodes/day (80 pods/day)" in reported["detail"]
    del runs["nap"]["disruptions_per_day"]
    (reported,) = [t for t in evaluate_sizes_targets(runs) if t["name"].startswith("disruptions per day")]
    assert not reported["met"] and "nap not measured" in reported["detail"]


def test_no_targets_without_the_policy_and_the_frontier_judgement_replaces_the_default_one() -> None:
    assert evaluate_sizes_targets({"ours": _run(1.0, 1.0), "ca": _run(1.0, 1.0)}) == []
    runs = {POLICY: _run(89.0, 100.0), "ca": _run(100.0, 120.0), "ours": _run(95.0, 90.0)}
    other = {"name": "something else", "met": True, "detail": ""}
    first = [other, *evaluate_sizes_targets(runs)]
    again = with_sizes_targets(first, runs, [_point("1m/1m", 90.0, 130.0)])
    assert again[0] == other and len(again) == len(first)
    assert not _versus_ca(list(again))["met"]  # 1.1 % cheaper than the frontier's cheaper point
