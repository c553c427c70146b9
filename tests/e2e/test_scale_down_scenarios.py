"""Batch-safe scale-down, end to end: idle nodes go first and running work is never disrupted (render-farm);
protected pods and nodes stay, each with its reason reported (protected)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devtools import demo

pytestmark = pytest.mark.e2e

GENERAL = "rg-sandbox-nodes/pool-general"
PINNED = "rg-sandbox-nodes/pool-pinned"
PROTECTIONS = {
    "default/ledger": "NotEnoughPdb",
    "default/cache": "LocalStorageRequested",
    "default/session": "NotSafeToEvictAnnotation",
}


def _run(name: str, out: Path, *, speed: float, wall_timeout: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """The summary, and the sandbox's final report it was built from (for per-pod facts the summary leaves out)."""
    reports: list[dict[str, Any]] = []
    build_summary = demo.build_summary

    def capture(scenario: str, report: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        reports.append(report)
        return build_summary(scenario, report, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(demo, "build_summary", capture)
        summary = demo.run_scenario(name, out_dir=out, speed=speed, live=False, wall_timeout=wall_timeout)
    return summary, reports[-1]


@pytest.fixture(scope="module")
def render_farm(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> tuple[dict[str, Any], dict[str, Any]]:
    # Depending on `azurite` makes run_scenario reuse the suite's shared Azurite instead of owning one.
    return _run("render-farm", tmp_path_factory.mktemp("render-farm"), speed=90, wall_timeout=150)


@pytest.fixture(scope="module")
def protected(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return _run("protected", tmp_path_factory.mktemp("protected"), speed=90, wall_timeout=90)


def _created(entry: dict[str, Any]) -> float:
    """When a removed node was created, in sim seconds (negative for the nodes there before the start)."""
    return entry["cordoned_at"] - entry["age_seconds"]


def test_render_farm_completes_every_job_without_disruption(render_farm: tuple[dict[str, Any], dict[str, Any]]) -> None:
    summary, _ = render_farm
    assert summary["converged"], summary
    assert summary["running_pods_evicted"] == 0
    assert summary["pods_killed"] == 0
    assert summary["pods_completed"] == summary["pods_total"] == 12
    assert summary["nodes_by_group_at_end"] == {"rg-sandbox-nodes/pool-render": 1}  # its minimum
    assert summary["actions"]["scale_up"] >= 1  # the long Jobs needed new nodes


def test_render_farm_removes_the_old_idle_nodes_first(render_farm: tuple[dict[str, Any], dict[str, Any]]) -> None:
    summary, report = render_farm
    order = summary["scale_down_order"]
    long_jobs = [p for p in report["pods"] if p["workload"] == "default/final-render"]
    assert len(long_jobs) == 4 and all(p["finished"] is not None for p in long_jobs)
    first_long_end = min(p["finished"] for p in long_jobs)
    last_long_end = max(p["finished"] for p in long_jobs)

    old = [e for e in order if _created(e) < 0]  # the four nodes of the start, an hour old
    assert [e["node"] for e in order[: len(old)]] == [e["node"] for e in old] and len(old) == 4, order
    # ... all removed while every long Job was still running, on the newest nodes ...
    assert all(e["cordoned_at"] < first_long_end for e in old), (order, first_long_end)
    # ... and older than every node whose removal started later while any long Job was running.
    later = [e for e in order[len(old):] if e["cordoned_at"] < last_long_end]
    assert all(_created(e) > max(_created(o) for o in old) for e in later), order
    # The newest nodes were left alone until their Job had ended.
    marked = {e["node"]: e["cordoned_at"] for e in order}
    for job in long_jobs:
        assert marked.get(job["node"], float("inf")) >= job["finished"], (job, order)
    assert all(e["pods"] == 0 for e in order[len(old):])


def test_protected_pods_stay_where_they_run(protected: tuple[dict[str, Any], dict[str, Any]]) -> None:
    summary, report = protected
    assert summary["converged"], summary
    assert summary["running_pods_evicted"] == 0
    assert summary["pods_killed"] == 0
    for workload in PROTECTIONS:
        (pod,) = [p for p in report["pods"] if p["workload"] == workload]  # never replaced
        assert (pod["phase"], pod["outcome"]) == ("Running", "running"), pod
        assert pod["node"] is not None and pod["group"] == GENERAL


def test_protected_nodes_are_kept_with_their_reasons(protected: tuple[dict[str, Any], dict[str, Any]]) -> None:
    summary, report = protected
    assert set(summary["kept_reasons"]) >= {*PROTECTIONS.values(), "ScaleDownDisabledAnnotation"}
    nodes = {p["workload"]: p["node"] for p in report["pods"] if p["workload"] in PROTECTIONS}
    assert len(set(nodes.values())) == 3  # one protection per node
    kept = summary["kept_nodes"]
    for workload, code in PROTECTIONS.items():
        assert kept[nodes[workload]].startswith(f"{code}: "), kept
    assert kept["pool-pinned000000"].startswith("ScaleDownDisabledAnnotation: "), kept
    removed = [e["node"] for e in summary["scale_down_order"]]
    assert sorted(removed) == ["pool-general000003", "pool-general000004"]  # the idle ones, around them
    assert not set(removed) & {*nodes.values(), "pool-pinned000000"}
    assert summary["nodes_by_group_at_end"] == {GENERAL: 3, PINNED: 1}
