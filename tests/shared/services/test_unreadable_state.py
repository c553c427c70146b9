"""Stored rows written badly by someone else (on Azurite, where a column can really hold anything): one bad group
row stops neither the poll nor the other groups' scale-ups; an action always ends with a ledger outcome that names
the row; nothing is written over the bad row, and nothing in the cluster is touched on its account."""

from __future__ import annotations

import json
from typing import Any

import pytest
from azure.data.tables import UpdateMode

from shared.adapters.table_state import encode_key
from shared.domain import GroupState
from shared.services.pending import run_pending_poll
from tests.shared.services.test_executor import REAL, App
from tests.shared.services.test_limit_reservations import POOL, SPARE, _running, _scale_up, two_group_app

# Each group-row column the adapter parses, with a value that is not what it holds.
BAD_GROUP_COLUMNS = [
    ("Deleting", "{not json"),
    ("Committed", '{"a": 1}'),
    ("Stopped", "[[]]"),
    ("StoppedAt", '{"0": "yesterday"}'),
    ("Reclaim", '{"node": 5}'),
    ("Preempted", "[]"),
    ("Boots", '["fast"]'),
    ("BootRequests", '[["2026-01-01T00:00:00+00:00", 1]]'),
    ("BackoffFailures", "many"),
    ("LastScaleUp", "not a time"),
]
BURST = {"name": "burst", "kind": "Job", "count": 2, "requests": {"cpu": "3", "memory": "1Gi"}}


@pytest.fixture
def app(request: pytest.FixtureRequest) -> App:
    return two_group_app(request, REAL)


def _corrupt(app: App, partition: str, row: str, **columns: Any) -> dict[str, Any]:
    """Merge raw `columns` into the stored row, as another tool could; the row as it is afterwards."""
    table: Any = app.context.ports.state._table  # type: ignore[attr-defined] # the store's own TableClient
    table.upsert_entity({"PartitionKey": partition, "RowKey": encode_key(row), **columns}, mode=UpdateMode.MERGE)
    return _row(app, partition, row)


def _row(app: App, partition: str, row: str) -> dict[str, Any]:
    table: Any = app.context.ports.state._table  # type: ignore[attr-defined]
    return dict(table.get_entity(partition, encode_key(row)))


def _bad_group_row(app: App, group: str, column: str, value: str) -> dict[str, Any]:
    assert app.context.ports.state.update_group(GroupState(group))
    return _corrupt(app, "group", group, **{column: value})


@pytest.mark.parametrize(("column", "value"), BAD_GROUP_COLUMNS)
def test_one_unreadable_group_row_stops_no_other_group_from_scaling(app: App, column: str, value: str) -> None:
    before = _bad_group_row(app, SPARE, column, value)

    grow = app.run(_scale_up(app, "up-pool", POOL, 2))

    assert grow.outcome == "waiting", grow.detail  # the limits check read every group's row, the bad one too
    assert _running(app) == 2
    assert _row(app, "group", SPARE) == before  # reported, never written over


@pytest.mark.parametrize(("column", "value"), BAD_GROUP_COLUMNS[:3])
def test_the_pending_poll_plans_onto_the_other_groups_past_an_unreadable_row(
        request: pytest.FixtureRequest, column: str, value: str) -> None:
    app = two_group_app(request, REAL, workloads=(BURST,))
    before = _bad_group_row(app, SPARE, column, value)

    result = run_pending_poll(app.context.ports, app.context.settings, now=app.clock.now())

    assert [json.loads(t)["group"] for t in app.take_queued()] == [POOL] * len(result.enqueued) != []
    assert _row(app, "group", SPARE) == before


@pytest.mark.parametrize(("column", "value"), BAD_GROUP_COLUMNS[:4])
def test_a_scale_up_of_the_group_whose_row_is_unreadable_ends_with_an_outcome_naming_it(
        app: App, column: str, value: str) -> None:
    before = _bad_group_row(app, POOL, column, value)

    result = app.run(_scale_up(app, "up-pool", POOL, 3))

    assert result.outcome == "failed"
    entry = app.context.ports.state.get_ledger_entry("up-pool")
    assert entry is not None and entry.outcome.startswith("failed: stored state cannot be read")
    assert encode_key(POOL) in entry.outcome and repr(column) in entry.outcome
    assert _running(app) == 1 and app.arm_calls("PATCH virtualMachineScaleSets") == 0
    assert _row(app, "group", POOL) == before
    assert app.context.ports.state.get_limit_reservations().reservations == {}  # given back with the outcome


@pytest.mark.parametrize(("column", "value"), [("ProgressStep", "confirm"), ("ProgressAttempt", "x"),
                                               ("Status", "finished"), ("UpdatedAt", "noon")])
def test_an_unreadable_ledger_row_gets_an_outcome_instead_of_a_loop(app: App, column: str, value: str) -> None:
    assert app.run(_scale_up(app, "up-pool", POOL, 2)).outcome == "waiting"
    [confirm] = app.take_queued()
    before = _corrupt(app, "ledger", "up-pool", **{column: value})
    patches = app.arm_calls("PATCH virtualMachineScaleSets")

    result = app.run(confirm)

    assert result.outcome == "rejected" and repr(column) in result.detail
    recorded = app.context.ports.state.get_ledger_entry("up-pool#unreadable")
    assert recorded is not None and "cannot be read" in recorded.outcome and "RowKey='up-pool'" in recorded.outcome
    assert app.poison() != []  # for an operator, with the row left as it was
    assert _row(app, "ledger", "up-pool") == before
    assert app.arm_calls("PATCH virtualMachineScaleSets") == patches
    # Every other action goes on.
    assert app.run(_scale_up(app, "up-spare", SPARE, 1)).outcome == "waiting"


def test_an_unreadable_limits_row_refuses_growth_with_an_outcome_naming_it(app: App) -> None:
    """Without the limits row the reservations in flight are unknown: no capacity is written past it."""
    assert app.context.ports.state.update_limit_reservations(app.context.ports.state.get_limit_reservations())
    before = _corrupt(app, "limits", "cluster", Reservations="{oops")

    result = app.run(_scale_up(app, "up-pool", POOL, 2))

    assert result.outcome == "failed"
    entry = app.context.ports.state.get_ledger_entry("up-pool")
    assert entry is not None and "'Reservations'" in entry.outcome and "RowKey='cluster'" in entry.outcome
    assert _running(app) == 1
    assert _row(app, "limits", "cluster") == before
