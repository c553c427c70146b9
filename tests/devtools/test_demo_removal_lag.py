"""summary.json's removal_lag_s: how long after a node became removable its delete started (issue 14, item 4)."""

from __future__ import annotations

from devtools.demo import removal_lag


def _removed(node: str, *, cordoned: float, age: float, delete: float | None, pods: int = 0) -> dict[str, object]:
    return {"node": node, "cordoned_at": cordoned, "age_seconds": age, "delete_started_at": delete, "pods": pods}


def test_lag_counts_from_the_last_pod_gone_plus_the_unneeded_time() -> None:
    report = {
        "pods": [
            {"node": "a", "finished": 100.0}, {"node": "a", "finished": 300.0},  # a empty from 300: removable at 900
            {"node": "b", "stopped": 200.0},  # b removable at 800
            {"node": "c", "finished": None, "stopped": 950.0},  # evicted by the drain, after c was cordoned
            {"node": "d", "stopped": None},
        ],
        "scale_down_order": [
            _removed("a", cordoned=930.0, age=900.0, delete=960.0),  # 60 s late
            _removed("b", cordoned=1700.0, age=1700.0, delete=1710.0),  # 910 s late
            _removed("c", cordoned=900.0, age=800.0, delete=1000.0),  # never had a pod before: from creation (100)
            _removed("d", cordoned=900.0, age=800.0, delete=1000.0, pods=1),  # drained: left out
            _removed("e", cordoned=900.0, age=800.0, delete=None),  # its delete never started: left out
            _removed("f", cordoned=500.0, age=490.0, delete=560.0),  # deleted before it was due: 0, not negative
        ],
    }
    lag = removal_lag(report, unneeded_time_s=600.0)
    assert lag == {"nodes": 4, "p50": 60.0, "p95": 910.0, "max": 910.0}


def test_no_removal_is_no_lag() -> None:
    assert removal_lag({"pods": [], "scale_down_order": []}, unneeded_time_s=600.0) == {
        "nodes": 0, "p50": 0.0, "p95": 0.0, "max": 0}


def test_each_group_is_read_against_its_own_unneeded_time() -> None:
    """In break-even idle mode groups keep idle nodes for different times: each removal is late against its own."""
    report = {
        "pods": [{"node": "a", "finished": 100.0}, {"node": "b", "finished": 100.0}],
        "scale_down_order": [
            {**_removed("a", cordoned=300.0, age=300.0, delete=330.0), "group": "rg/cpu"},  # due at 100 + 180
            {**_removed("b", cordoned=700.0, age=700.0, delete=720.0), "group": "rg/gpu"},  # due at 100 + 600
            {**_removed("c", cordoned=50.0, age=40.0, delete=70.0), "group": "rg/other"},  # no time: from empty (10)
        ],
    }
    times = {"rg/cpu": 180.0, "rg/gpu": 600.0}
    assert removal_lag(report, unneeded_time_s=times, group="rg/cpu") == {"nodes": 1, "p50": 50.0, "p95": 50.0,
                                                                          "max": 50.0}
    assert removal_lag(report, unneeded_time_s=times, group="rg/gpu")["max"] == 20.0
    assert removal_lag(report, unneeded_time_s=times)["max"] == 60.0
