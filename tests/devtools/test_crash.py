"""The crash-resume harness's judgement: when a step counts as in flight, and what makes a run fail its check."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from devtools.crash import crash_resume_problems, steps_in_flight
from shared.ports import LedgerEntry

NOW = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)


def entry(action: str, progress: tuple[int, int], status: str, outcome: str = "", kind: str = "scale_down") -> LedgerEntry:
    return LedgerEntry(action, kind, "rg/pool", progress, status, NOW, outcome=outcome, node=action.split(":")[1])  # type: ignore[arg-type]


def test_a_scale_down_at_the_step_running_or_waiting_there_is_in_flight() -> None:
    ledger = [
        entry("scale-down:n1:t", (1, 0), "started"),  # the drain step running now
        entry("scale-down:n2:t", (1, 4), "done"),  # waiting for its batch pods: next check queued
        entry("scale-down:n3:t", (1, 2), "released"),  # given back after an error: the retry will claim it
        entry("scale-down:n4:t", (1, 0), "done", outcome="skipped: aborted: ..."),  # over
        entry("scale-down:n5:t", (0, 0), "done"),  # cordoned, the drain not yet claimed
        entry("scale-up:n6:t", (1, 0), "done", kind="scale_up"),  # a scale-up's confirm step
    ]
    assert steps_in_flight(ledger, "drain") == [
        {"action": "scale-down:n1:t", "node": "n1", "step": "drain", "attempt": 0, "ledger_status": "started"},
        {"action": "scale-down:n2:t", "node": "n2", "step": "drain", "attempt": 4, "ledger_status": "done"},
    ]
    assert [a["node"] for a in steps_in_flight(ledger, "cordon")] == ["n5"]
    with pytest.raises(ValueError):
        steps_in_flight(ledger, "resize")


GOOD: dict[str, Any] = {
    "converged": True,
    "runner_restarts": [{"sim_seconds": 1124.0, "step": "drain", "in_flight": [
        {"action": "scale-down:n2:t", "node": "n2", "step": "drain", "attempt": 3, "ledger_status": "done",
         "outcome_at_end": "succeeded: removed node(s) n2"}]}],
    "deletes_by_instance": {"pool/0": 1, "pool/2": 1},
    "api_breakdown": {"arm": {"POST delete": 2, "instance_deletes_refused": {}}},
}


def changed(path: list[Any], value: Any) -> dict[str, Any]:
    summary = copy.deepcopy(GOOD)
    target = summary
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return summary


def test_a_clean_recovery_has_no_problems() -> None:
    assert crash_resume_problems(GOOD) == []


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        (["converged"], False, "did not converge"),
        (["runner_restarts"], [], "never killed"),
        (["runner_restarts", 0, "in_flight", 0, "outcome_at_end"], "", "ended 'unfinished'"),
        (["runner_restarts", 0, "in_flight", 0, "outcome_at_end"], "failed: aborted: x", "ended 'failed: aborted: x'"),
        (["deletes_by_instance"], {}, "no instance was deleted"),
        (["deletes_by_instance", "pool/2"], 2, "instance pool/2 was deleted 2 times"),
        (["api_breakdown", "arm", "instance_deletes_refused"], {"pool/2": 1}, "pool/2 was named in 1 refused"),
    ],
)
def test_each_failure_is_named(path: list[Any], value: Any, problem: str) -> None:
    problems = crash_resume_problems(changed(path, value))
    assert len(problems) == 1 and problem in problems[0], problems
