"""Voluntary disruptions: a policy's removals of nodes that ran workload pods, per simulated day, by its reasons."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.replay.disruptions import DAY_S, UNATTRIBUTED, disruptions_section


def _pod(node: str, *, killed: bool = False, evicted: bool = False) -> dict[str, Any]:
    return {"node": node, "killed": killed, "evicted_while_running": evicted}


PODS = [
    _pod("a", evicted=True), _pod("a", evicted=True), _pod("a"),  # drained: two running pods evicted
    _pod("b", killed=True),  # deleted under its pod
    _pod("c", killed=True),  # a spot VM Azure evicted: not a removal of the policy's
    _pod("d"),  # removed empty (its pod had finished): nothing disrupted
    _pod("", evicted=True),  # never bound: no node to blame
]


@pytest.mark.parametrize(("removed", "nodes", "pods", "by_reason"), [
    ({"a": "drain", "b": "scale-in", "d": "empty"}, 2, 3,
     {"drain": {"nodes": 1, "pods": 2}, "scale-in": {"nodes": 1, "pods": 1}}),
    ({"a": "replace"}, 1, 2, {"replace": {"nodes": 1, "pods": 2}}),
    ({}, 0, 0, {}),
    (None, 3, 4, {UNATTRIBUTED: {"nodes": 3, "pods": 4}}),  # no record: every running pod stopped counts
])
def test_only_the_policys_removals_of_busy_nodes_count(removed: dict[str, str] | None, nodes: int, pods: int,
                                                       by_reason: dict[str, dict[str, int]]) -> None:
    found = disruptions_section(PODS, sim_seconds=DAY_S / 2, removed=removed)
    assert (found["nodes"], found["pods"], found["by_reason"]) == (nodes, pods, by_reason)
    assert sum(r["nodes"] for r in found["by_reason"].values()) == found["nodes"]
    assert sum(r["pods"] for r in found["by_reason"].values()) == found["pods"]
    # Half a simulated day: twice as many per day.
    assert found["nodes_per_day"] == pytest.approx(2 * nodes) and found["pods_per_day"] == pytest.approx(2 * pods)
    assert found["days"] == 0.5


def test_a_run_of_no_length_is_refused() -> None:
    with pytest.raises(ValueError, match="sim_seconds"):
        disruptions_section(PODS, sim_seconds=0.0, removed={})
