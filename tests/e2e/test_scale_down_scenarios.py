"""Batch-safe scale-down, end to end: idle nodes go first and running work is never disrupted (render-farm);
protected pods and nodes stay, each with its reason reported (protected)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.invariants import (
    INVARIANTS,
    POLL_UTILIZATION_S,
    Invariant,
    Promises,
    Run,
    groups,
    initial_nodes,
    invariant_id,
    run_scenario,
)

pytestmark = pytest.mark.e2e

RENDER = "rg-sandbox-nodes/pool-render"
LONG_JOBS = "default/final-render"
GENERAL = "rg-sandbox-nodes/pool-general"
PINNED = "rg-sandbox-nodes/pool-pinned"
PROTECTIONS = {
    "default/ledger": "NotEnoughPdb",
    "default/cache": "LocalStorageRequested",
    "default/session": "NotSafeToEvictAnnotation",
}
UNNEEDED_S = 600.0  # SCALE_DOWN_UNNEEDED_TIME

RENDER_FARM = Promises(
    scale_up_for=(LONG_JOBS,),  # the long Jobs fit beside no frame on the old nodes
    # The frames fill the four old nodes at t=0 and the long Jobs come at 2 minutes, when no old node has room:
    # each takes a new node, where a packing of all twelve pods at once may pair one with a frame.
    node_slack=1,
)
PROTECTED = Promises(
    scale_up_for=(),  # five general nodes hold the six pods
    # One general node per protected service stays (above the minimum of 1), and the pinned node
    # (scale-down-disabled) stays above its minimum of 0.
    ends_at={GENERAL: len(PROTECTIONS), PINNED: 1},
)


@pytest.fixture(scope="module")
def render_farm(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
    # Depending on `azurite` makes run_scenario reuse the suite's shared Azurite instead of owning one.
    return run_scenario("render-farm", tmp_path_factory.mktemp("render-farm"), RENDER_FARM, speed=90,
                        wall_timeout=150)


@pytest.fixture(scope="module")
def protected(tmp_path_factory: pytest.TempPathFactory, azurite: str) -> Run:
    return run_scenario("protected", tmp_path_factory.mktemp("protected"), PROTECTED, speed=90, wall_timeout=90)


@pytest.mark.parametrize("scenario", ["render_farm", "protected"])
@pytest.mark.parametrize("invariant", INVARIANTS, ids=invariant_id)
def test_scale_down_invariants(request: pytest.FixtureRequest, scenario: str, invariant: Invariant) -> None:
    """render-farm: every Job completes, none evicted or killed, the pool back at its minimum, at most the
    nodes the Jobs need. protected: converged with the protected and pinned nodes kept, no scale-up, nothing
    evicted. Both: every removed instance deleted once, ScaleDown on each removed node (tests/e2e/invariants.py)."""
    invariant(request.getfixturevalue(scenario))


def _created(entry: dict[str, Any]) -> float:
    """When a removed node was created, in sim seconds (negative for the nodes there before the start)."""
    return entry["cordoned_at"] - entry["age_seconds"]


def test_render_farm_adds_one_node_per_long_job_at_most(render_farm: Run) -> None:
    # Each long Job takes over half a node: one new node each is all they need, and the frames need none.
    (spec,) = [w for w in render_farm.scenario.workloads if f"{w.namespace}/{w.name}" == LONG_JOBS]
    created = render_farm.summary["instances_created_by_group"]
    assert 1 <= created[RENDER] <= spec.count, created


def test_render_farm_removes_the_old_idle_nodes_first(render_farm: Run) -> None:
    summary, report = render_farm.summary, render_farm.report
    order = summary["scale_down_order"]
    (spec,) = [w for w in render_farm.scenario.workloads if f"{w.namespace}/{w.name}" == LONG_JOBS]
    long_jobs = [p for p in report["pods"] if p["workload"] == LONG_JOBS]
    assert len(long_jobs) == spec.count and all(p["finished"] is not None for p in long_jobs), long_jobs
    first_long_end = min(p["finished"] for p in long_jobs)
    last_long_end = max(p["finished"] for p in long_jobs)

    old = [e for e in order if _created(e) < 0]  # the nodes of the start, an hour old
    assert [e["node"] for e in order[: len(old)]] == [e["node"] for e in old], order
    assert len(old) == groups(render_farm)[RENDER].initial, order  # every old node went ...
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


def test_protected_pods_stay_where_they_run(protected: Run) -> None:
    for workload in PROTECTIONS:
        (pod,) = [p for p in protected.report["pods"] if p["workload"] == workload]  # never replaced
        assert (pod["phase"], pod["outcome"]) == ("Running", "running"), pod
        assert pod["node"] is not None and pod["group"] == GENERAL


def test_protected_nodes_are_kept_with_their_reasons(protected: Run) -> None:
    summary, report = protected.summary, protected.report
    # kept_reasons and kept_nodes come from the utilisation poll's records' structured `kept_reason` and `node`
    # attributes (devtools/demo.py _KeptLog): `<code>: <message>`, of which only the code is checked.
    assert set(summary["kept_reasons"]) >= {*PROTECTIONS.values(), "ScaleDownDisabledAnnotation"}
    nodes = {p["workload"]: p["node"] for p in report["pods"] if p["workload"] in PROTECTIONS}
    assert len(set(nodes.values())) == len(PROTECTIONS)  # one protection per node
    kept = {node: why.split(":", 1)[0] for node, why in summary["kept_nodes"].items()}
    for workload, code in PROTECTIONS.items():
        assert kept.get(nodes[workload]) == code, summary["kept_nodes"]
    (pinned,) = initial_nodes(groups(protected)[PINNED])
    assert kept.get(pinned) == "ScaleDownDisabledAnnotation", summary["kept_nodes"]
    # The general nodes no pod ever ran on, and only those, were removed.
    used = {p["node"] for p in report["pods"] if p["node"]}
    idle_from_start = set(initial_nodes(groups(protected)[GENERAL])) - used
    removed = [e["node"] for e in summary["scale_down_order"]]
    assert idle_from_start and sorted(removed) == sorted(idle_from_start), (removed, used)
    assert not set(removed) & {*nodes.values(), pinned}


def test_protected_idle_nodes_go_after_the_unneeded_time(protected: Run) -> None:
    # Idle from the start: never before SCALE_DOWN_UNNEEDED_TIME; at most a few utilisation polls after it
    # (one to see it due, one more if the first ran just before, and the runner's wall-time jitter: one wall
    # second is 90 sandbox seconds here). Seen 655-781 s.
    for entry in protected.summary["scale_down_order"]:
        assert UNNEEDED_S <= entry["cordoned_at"] <= UNNEEDED_S + 5 * POLL_UTILIZATION_S, entry
