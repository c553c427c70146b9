"""`make demo`'s convergence with a scenario's `expect_unschedulable`: exactly the named pods wait, each with a reason."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from devtools.demo import _converged

REASON = "pod didn't trigger scale-up: rg/pool: node(s) didn't match pod anti-affinity rules"


def _state(pending: int, expected: dict[str, Any] | None, *, unplaceable: int = 0) -> dict[str, Any]:
    group = {"ready": 1, "booting": 0, "deleting": 0, "target": 1, "min": 1, "idle": 0, "autoscaled": True}
    state = {"done": True, "pending": pending, "pending_unplaceable": unplaceable, "groups": {"rg/pool": group},
             "idle_nodes": {"rg/pool": []}}
    if expected is not None:
        state["expect_unschedulable"] = expected
    return state


def _solo(expected: int, *reasons: str | None) -> dict[str, Any]:
    return {"default/solo": {"expected": expected,
                             "pending": [{"pod": f"default/solo-{i}", "reason": r} for i, r in enumerate(reasons)]}}


@pytest.mark.parametrize(
    ("case_id", "state", "converged"),
    [
        ("the named pod waits, reported with its reason", _state(1, _solo(1, REASON)), True),
        ("not reported by the autoscaler (yet)", _state(1, _solo(1, None)), False),
        ("another pod waits too", _state(2, _solo(1, REASON)), False),
        ("another pod the sandbox calls unplaceable: not excused once pods are named",
         _state(2, _solo(1, REASON), unplaceable=1), False),
        ("the named pod ran after all", _state(0, _solo(1)), False),
        ("more of the workload wait than named", _state(2, _solo(1, REASON, REASON)), False),
        ("no field: unplaceable pods are excused as before", _state(1, None, unplaceable=1), True),
        ("no field: a pending pod holds it up", _state(1, None), False),
    ],
)
def test_converged_only_when_exactly_the_expected_pods_wait(case_id: str, state: dict[str, Any], converged: bool) -> None:
    view = SimpleNamespace(last_state=state)
    runner = SimpleNamespace(queue_is_idle=lambda: True)
    assert _converged(None, runner, view) is converged  # type: ignore[arg-type]
