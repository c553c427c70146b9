"""Step tables (shared/services/execution.py): each action kind's steps are its action class's STEPS, a step
hands the action only to the steps it names, and the executor has exactly one table per action kind."""

from __future__ import annotations

import typing
from datetime import UTC, datetime, timedelta

import pytest

from shared.actions import RemovalTarget, ScaleAction, ScaleDown, ScaleUp, new_scale_down
from shared.ports import LedgerEntry
from shared.services import scale_down_steps, scale_up_steps
from shared.services.execution import ExecutionResult, Run, Step, StepTable
from shared.services.executor import TABLES

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _never(*_: object) -> ExecutionResult:
    raise AssertionError("not called")


def test_there_is_one_table_per_action_kind_and_each_follows_its_action_s_steps() -> None:
    assert set(TABLES) == set(typing.get_args(ScaleAction))
    for action, table in TABLES.items():
        assert table.action is action and tuple(table.steps) == action.STEPS
    assert TABLES[ScaleUp] is scale_up_steps.TABLE and TABLES[ScaleDown] is scale_down_steps.TABLE


@pytest.mark.parametrize("table", list(TABLES.values()), ids=lambda t: t.action.__name__)
def test_every_step_may_hand_the_action_to_itself_and_only_forward(table: StepTable[ScaleAction]) -> None:
    order = list(table.steps)
    for name, step in table.steps.items():
        assert name in step.next  # waiting, throttling and passing faults retry the same step
        assert all(order.index(n) >= order.index(name) for n in step.next)  # progress only moves forward


@pytest.mark.parametrize("steps, error", [
    ({"cordon": Step(_never)}, r"steps \('cordon',\) are not its STEPS"),
    ({name: Step(_never, next=("undo",)) for name in ScaleDown.STEPS}, r"hands over to unknown step\(s\) \['undo'\]"),
])
def test_a_table_that_does_not_match_its_action_is_refused(steps: dict[str, Step[ScaleDown]], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        StepTable(action=ScaleDown, steps=steps, succeeded=_never, failed=_never, fail=_never)


class _Queue:
    def __init__(self) -> None:
        self.sent: list[ScaleAction] = []

    def send(self, action: ScaleAction, *, delay: timedelta = timedelta(0)) -> None:
        self.sent.append(action)


class _Ports:
    def __init__(self) -> None:
        self.queue = _Queue()


def test_continuing_to_a_step_the_table_does_not_name_is_a_bug_caught_before_anything_is_sent() -> None:
    ports = _Ports()
    run = Run(ports, None, scale_down_steps.TABLE, "drain")  # type: ignore[arg-type]
    action = new_scale_down(action_id="a", group="rg/pool", targets=[RemovalTarget("n1", "azure:///x/1")],
                            now=NOW, ttl=timedelta(minutes=5)).at_step("drain", now=NOW)
    entry = LedgerEntry("a", "scale_down", "rg/pool", (1, 0), "started", NOW)
    with pytest.raises(AssertionError, match="step drain of ScaleDown may hand over to drain, delete, not cordon"):
        run.continue_(action.at_step("cordon", now=NOW), entry, delay=timedelta(0), now=NOW)
    assert ports.queue.sent == []
