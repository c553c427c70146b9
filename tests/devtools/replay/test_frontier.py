"""The frontier's pure parts: which settings the sweep runs, and the dominance of ours' points over each peer point."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.replay.frontier import (
    IDLE_MINUTES,
    best_ours,
    dominance,
    dominance_table,
    frontier_rows,
    missing_peers,
    point_of,
    sweep_points,
)


def _p(label: str, cost: float, p95: float, killed: int = 0, lost: float = 0.0) -> dict[str, Any]:
    return {"label": label, "settings": {}, "cost": cost, "p95_wait_s": p95, "pods_killed": killed,
            "work_lost_s": lost, "pods_completed": 10, "pods": 10}


# -- the sweep ------------------------------------------------------------------------------------


@pytest.mark.parametrize("ca_grid", [True, False])
def test_the_sweep_runs_each_policy_at_each_idle_time_with_its_default_once(ca_grid: bool) -> None:
    points = sweep_points(("ours", "ca", "nap", "vmss-cpu"), ca_grid=ca_grid)
    by_policy: dict[str, list] = {}
    for point in points:
        by_policy.setdefault(point.key, []).append(point)
    assert set(by_policy) == {"ours", "ca", "nap", "ours+buffer"}  # the others have no idle time to sweep
    by_policy.pop("ours+buffer")  # its sizes: test_buffer_points_*
    for policy, runs in by_policy.items():
        assert sum(p.default for p in runs) == 1, policy  # the main table's run, reused
        assert len({p.label for p in runs}) == len(runs), policy
        assert len({tuple(sorted(p.settings.items())) for p in runs}) == len(runs), policy  # no run twice
    assert len(by_policy["ours"]) == 1 + len(IDLE_MINUTES)
    assert len(by_policy["ca"]) == len(IDLE_MINUTES) ** (2 if ca_grid else 1)
    assert len(by_policy["nap"]) == 1 + len(IDLE_MINUTES)
    # ca's default is the point at its flags' defaults, 10m and 10m.
    [ca_default] = [p for p in by_policy["ca"] if p.default]
    assert ca_default.settings == {"SCALE_DOWN_UNNEEDED_TIME": "10m", "SCALE_DOWN_DELAY_AFTER_ADD": "10m"}


def test_ours_points_are_app_settings_the_peers_points_their_emulations() -> None:
    for point in sweep_points(("ours", "ca", "nap")):
        changes = point.config_changes()
        # A buffer is a world change, not a setting: only its points carry one, and only when it has a size.
        assert changes.pop("buffer_nodes", 0) == point.buffer_nodes
        assert list(changes) == (["settings"] if point.policy == "ours" else ["peer_settings"])
        if point.key == "ours" and not point.default:
            # A fixed idle time means both times and the fixed mode (ours' auto would ignore them).
            assert changes["settings"]["SCALE_DOWN_IDLE_MODE"] == "fixed"
            assert changes["settings"]["SCALE_DOWN_UNNEEDED_TIME"] == changes["settings"]["SCALE_DOWN_DELAY_AFTER_ADD"]


def test_a_peer_the_checkout_lacks_is_named_and_left_out() -> None:
    assert missing_peers(("ours", "ca")) == ["nap"]
    assert missing_peers(("ours", "ca", "nap")) == []
    assert {p.policy for p in sweep_points(("ours", "ca"))} == {"ours", "ca"}


def test_a_point_takes_its_figures_from_the_run_result() -> None:
    [point] = [p for p in sweep_points(("ours",)) if p.label == "fixed 5m"]
    result = {"cost": 12.5, "pending_wait_s": {"p50": 1.0, "p95": 42.0}, "pods_killed": 3, "work_lost_s": 60.0,
              "pods_completed": 7, "pods": 9, "arm_reads": 100}
    assert point_of(point, result) == {
        "label": "fixed 5m", "settings": dict(point.settings), "cost": 12.5, "p95_wait_s": 42.0, "pods_killed": 3,
        "work_lost_s": 60.0, "pods_completed": 7, "pods": 9}
    assert point_of(point, result | {"cpu_s": 3.5})["cpu_s"] == 3.5  # what the sweep's run cost, when it ran it


# -- dominance ------------------------------------------------------------------------------------

OURS = [_p("auto", 100.0, 60.0), _p("fixed 1m", 80.0, 90.0), _p("fixed 10m", 120.0, 40.0, killed=0)]


@pytest.mark.parametrize(("peer", "best", "met"), [
    (_p("a", 100.0, 58.0), "auto", True),  # same cost allowed (1.0x); 2 s slower is within 5 s
    (_p("b", 100.0, 54.0), "auto", False),  # 6 s slower: missed
    (_p("c", 99.99, 30.0), "fixed 1m", False),  # only the cheapest is at most its cost, and it is far slower
    (_p("d", 79.0, 30.0), None, False),  # nothing of ours is that cheap
    (_p("e", 200.0, 10.0), "fixed 10m", False),  # everything qualifies: the fastest is chosen, still 30 s slower
    (_p("f", 200.0, 45.0), "fixed 10m", True),
])
def test_the_best_ours_point_is_the_fastest_no_dearer(peer: dict, best: str | None, met: bool) -> None:
    chosen = best_ours(OURS, peer)
    assert (chosen["label"] if chosen else None) == best
    if chosen is not None:  # the invariants of the choice
        assert chosen["cost"] <= peer["cost"] and chosen["pods_killed"] <= peer["pods_killed"]
        assert all(p["p95_wait_s"] >= chosen["p95_wait_s"] for p in OURS
                   if p["cost"] <= peer["cost"] and p["pods_killed"] <= peer["pods_killed"])
    [row] = dominance({"ours": OURS, "ca": [peer]})["rows"]
    assert row["met"] is met and row["ours"] == best


def test_an_ours_point_that_kills_more_pods_is_not_eligible() -> None:
    ours = [_p("cheap but kills", 50.0, 10.0, killed=2), _p("gentle", 90.0, 70.0)]
    peer = _p("ca", 100.0, 60.0, killed=1)
    assert best_ours(ours, peer)["label"] == "gentle"
    assert best_ours(ours, _p("ca", 100.0, 60.0, killed=2))["label"] == "cheap but kills"


def test_cost_ties_go_to_the_cheaper_then_the_gentler() -> None:
    ours = [_p("dear", 100.0, 50.0), _p("cheap", 90.0, 50.0), _p("cheap, kills", 90.0, 50.0, killed=1)]
    assert best_ours(ours, _p("ca", 100.0, 50.0, killed=5))["label"] == "cheap"


def test_a_looser_cost_ratio_admits_dearer_ours_points() -> None:
    peer = _p("ca", 100.0, 40.0)
    assert best_ours(OURS, peer)["label"] == "auto"
    assert best_ours(OURS, peer, cost_ratio=1.2)["label"] == "fixed 10m"


def test_the_summary_counts_every_peer_point_of_every_peer() -> None:
    frontier = {"ours": OURS, "ca": [_p("1m", 100.0, 58.0), _p("2m", 79.0, 30.0)], "nap": [_p("default", 150.0, 45.0)]}
    result = dominance(frontier)
    summary = result["summary"]
    assert summary["peer_points"] == 3 == len(result["rows"])
    assert summary["dominated"] == sum(r["met"] for r in result["rows"]) == 2
    assert summary["missed"] == ["ca 2m"] and summary["met"] is False and summary["peers"] == ["ca", "nap"]
    # The miss without any eligible ours point names ours' cheapest, and what it costs against the peer point.
    missed = result["rows"][1]
    assert missed["cheapest_ours"]["label"] == "fixed 1m"
    assert missed["cheapest_ours"]["cost_ratio"] == round(80.0 / 79.0, 4) > 1.0
    assert dominance({"ours": OURS, "ca": [_p("1m", 100.0, 58.0)]})["summary"]["met"] is True


@pytest.mark.parametrize("frontier", [
    {"ours": OURS},  # no peer points: nothing is dominated, so the target is not met
    {"ca": [_p("1m", 100.0, 58.0)]},  # no ours points
])
def test_dominance_without_one_side_is_never_met(frontier: dict) -> None:
    assert dominance(frontier)["summary"]["met"] is False


def test_the_tables_show_every_point_and_every_peer_point() -> None:
    frontier = {"ours": OURS, "ca": [_p("1m", 100.0, 58.0), _p("2m", 79.0, 30.0)]}
    assert [row[:2] for row in frontier_rows(frontier)] == [
        ("ours", "auto"), ("ours", "fixed 1m"), ("ours", "fixed 10m"), ("ca", "1m"), ("ca", "2m")]
    lines = dominance_table(dominance(frontier))
    rows = [line for line in lines if line.startswith("| ca ")]
    assert len(rows) == 2
    assert rows[0].endswith("| auto | 100.00 | 60 | 0 | +2 | met |")
    assert "none (cheapest ours, fixed 1m: 1.01x the cost, 0 killed)" in rows[1] and rows[1].endswith("**MISSED** |")
    assert lines[-1].startswith("- **MISSED**: ours dominates every peer point") and "1 of 2; missed: ca 2m" in lines[-1]
