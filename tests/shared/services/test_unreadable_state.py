"""Stored rows written badly by someone else (on Azurite, where a column can really hold anything): one bad group
row stops neither the poll nor the other groups' scale-ups; an action always ends with a ledger outcome that names
the row; nothing is written over the bad row, and nothing in the cluster is touched on its account."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

import pytest
import yaml
from azure.data.tables import UpdateMode

from shared.actions import RemovalTarget, encode_action, new_scale_down
from shared.adapters.table_state import encode_key
from shared.domain import DELETION_CANDIDATE_TAINT, TO_BE_DELETED_TAINT, GroupState
from shared.services.pending import run_pending_poll
from shared.services.plan import plan_now, render_text
from shared.services.plan_lease import LEASE_ROW
from shared.services.reconcile import orphan_after
from shared.services.rounds import ROUND_ROW, request_round, take_round
from shared.services.utilization import run_utilization_poll
from tests.shared.services.decided import as_the_poll_decided
from tests.shared.services.test_executor import BASE_SETTINGS, REAL, App, deliver, real_app_of
from tests.shared.services.test_limit_reservations import (
    POOL,
    SPARE,
    TWO_GROUPS,
    _running,
    _scale_up,
    two_group_app,
)

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
    # Named where the utilisation poll names it too, so the entry does not come and go between the polls.
    [refused] = [g for g in _status(app)[0]["clusterWide"]["refusedNodeGroups"] if g["name"] == SPARE]
    assert repr(column) in refused["reason"]


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


# -- the utilisation poll and its reconcile --------------------------------------------------------------------

IDLE_GROUPS: dict[str, Any] = {
    **TWO_GROUPS,
    "node_groups": [
        {**TWO_GROUPS["node_groups"][0], "initial": 3},  # the web node and two idle ones
        {**TWO_GROUPS["node_groups"][1], "initial": 2},  # two idle nodes
    ],
}


def _idle_app(request: pytest.FixtureRequest) -> App:
    """The real app (sandbox server over HTTPS, Azurite) on two groups that both have idle nodes."""
    storage = (request.getfixturevalue(name) for name in ("sandbox_factory", "azurite", "table_name", "queue_name"))
    return real_app_of(*storage, IDLE_GROUPS, settings=BASE_SETTINGS)


def _nodes_of(app: App, group: str) -> list[str]:
    return sorted(n.name for n in app.context.ports.cluster.list_nodes()
                  if n.instance is not None and n.instance.group_id == group)


def _untouched(app: App, names: list[str]) -> bool:
    """Every node still there, schedulable and without any taint of ours."""
    ours = {TO_BE_DELETED_TAINT, DELETION_CANDIDATE_TAINT}
    nodes = [app.context.ports.cluster.get_node(name) for name in names]
    return all(n is not None and not n.unschedulable and not ours & {t.key for t in n.taints} for n in nodes)


def _status(app: App) -> tuple[dict[str, Any], dict[str, str]]:
    """The status ConfigMap's document and annotations as written."""
    assert app.context.settings.status_configmap is not None
    namespace, name = app.context.settings.status_configmap
    found = app.world.k8s_list("configmaps")
    [cm] = [c for c in found if c["metadata"]["name"] == name and c["metadata"]["namespace"] == namespace]
    return yaml.safe_load(cm["data"]["status"]), cm["metadata"].get("annotations") or {}


def _poll(app: App) -> Any:
    return run_utilization_poll(app.context.ports, app.context.settings, now=app.clock.now())


@pytest.mark.parametrize(("column", "value"), BAD_GROUP_COLUMNS[:3] + BAD_GROUP_COLUMNS[8:])
def test_the_utilisation_poll_removes_the_other_groups_idle_nodes_past_an_unreadable_row(
        request: pytest.FixtureRequest, column: str, value: str) -> None:
    app = _idle_app(request)
    before = _bad_group_row(app, SPARE, column, value)
    spare_nodes, pool_idle = _nodes_of(app, SPARE), [n for n in _nodes_of(app, POOL) if n != app.busy_and_idle()[0]]
    assert len(spare_nodes) == 2 and len(pool_idle) == 2

    _poll(app)
    app.clock.advance(app.context.settings.scale_down_unneeded_time.total_seconds() + 60)
    result = _poll(app)

    assert list(result.unreadable_groups) == [SPARE]
    assert repr(column) in result.unreadable_groups[SPARE] and encode_key(SPARE) in result.unreadable_groups[SPARE]
    assert {r.group_id for r in result.plan.removals} == {POOL} and len(result.enqueued) == 1
    doc, annotations = _status(app)  # written, naming the row where refused groups are reported
    [refused] = [g for g in doc["clusterWide"]["refusedNodeGroups"] if g["name"] == SPARE]
    assert repr(column) in refused["reason"]
    assert annotations["cluster-autoscaler.kubernetes.io/last-updated"].startswith(f"{app.clock.now():%Y-%m-%d %H:%M}")
    results = deliver(app, step_seconds=30)
    assert results and results[-1].outcome == "succeeded", results
    app.clock.advance(60)  # the instances' delete completes
    assert not set(pool_idle) & set(app.node_names())  # the good group's idle nodes are gone
    assert _untouched(app, spare_nodes) and not set(spare_nodes) & set(app.context.ports.state.list_unneeded())
    assert _row(app, "group", SPARE) == before  # reported, never written over


def test_a_removal_in_flight_in_a_group_whose_row_went_bad_is_neither_given_back_nor_finished(
        request: pytest.FixtureRequest) -> None:
    """Its reservation is in the row that cannot be read: the poll cannot tell a lost action from a live one."""
    app = _idle_app(request)
    ports = app.context.ports
    spare = _nodes_of(app, SPARE)
    action = new_scale_down(action_id="down-spare", group=SPARE, now=app.clock.now(), ttl=timedelta(minutes=5),
                            targets=[RemovalTarget(spare[0], app.provider_id(spare[0]))])
    as_the_poll_decided(ports, SPARE, [spare[0]], action.id, now=app.clock.now())
    assert app.run(encode_action(action)).outcome == "waiting"  # cordoned; then the message is lost
    app.clear_queue()
    before = _corrupt(app, "group", SPARE, Committed="{oops")
    deletes = app.arm_calls("POST delete")

    app.clock.advance(orphan_after(app.context.settings).total_seconds() + 60)
    result = _poll(app)

    assert SPARE in result.unreadable_groups
    node = ports.cluster.get_node(spare[0])
    assert node is not None and node.unschedulable and node.is_being_deleted  # as the action left it
    assert _untouched(app, spare[1:]) and app.arm_calls("POST delete") == deletes
    assert _row(app, "group", SPARE) == before
    assert [e.reason for e in app.events() if e.name == spare[0] and e.reason == "ScaleDownFailed"] == []


@pytest.mark.parametrize(("column", "value"), [("ProgressStep", "confirm"), ("Status", "finished"),
                                               ("UpdatedAt", "noon"), ("ProgressAttempt", "x")])
def test_reconcile_leaves_a_node_whose_removal_ledger_row_cannot_be_read_as_it_is(
        request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture, column: str, value: str) -> None:
    app = _idle_app(request)
    ports = app.context.ports
    busy, _ = app.busy_and_idle()
    first, second = [n for n in _nodes_of(app, POOL) if n != busy]
    action = new_scale_down(action_id=f"down-{first}", group=POOL, now=app.clock.now(), ttl=timedelta(minutes=5),
                            targets=[RemovalTarget(first, app.provider_id(first))])
    as_the_poll_decided(ports, POOL, [first], action.id, now=app.clock.now())
    assert app.run(encode_action(action)).outcome == "waiting"  # cordoned and tainted; then the message is lost
    app.clear_queue()
    ledger_before = _corrupt(app, "ledger", action.id, **{column: value})
    deletes = app.arm_calls("POST delete")
    _poll(app)  # `second` becomes unneeded
    app.clock.advance(orphan_after(app.context.settings).total_seconds() + 60)

    with caplog.at_level(logging.ERROR):
        result = _poll(app)

    why = result.unreadable_removals[first]
    assert repr(column) in why and f"RowKey={encode_key(action.id)!r}" in why
    assert any(first in r.getMessage() and repr(column) in r.getMessage() for r in caplog.records)
    node = ports.cluster.get_node(first)
    assert node is not None and node.unschedulable and node.is_being_deleted  # neither given back nor finished
    assert ports.state.get_group(POOL).removing.get(first) == action.id
    assert app.arm_calls("POST delete") == deletes
    assert _row(app, "ledger", action.id) == ledger_before
    # The others go on: the other idle nodes are decided, and the status is written.
    removed = [r.node for r in result.plan.removals]
    assert second in removed and first not in removed
    _, annotations = _status(app)
    assert annotations["cluster-autoscaler.kubernetes.io/last-updated"].startswith(f"{app.clock.now():%Y-%m-%d %H:%M}")
    # An operator deletes the row: the next poll sees a lost action and gives the node back.
    table: Any = ports.state._table  # type: ignore[attr-defined]
    table.delete_entity("ledger", encode_key(action.id))
    assert first not in _poll(app).unreadable_removals
    assert ports.state.get_group(POOL).removing.get(first) != action.id
    node = ports.cluster.get_node(first)
    assert node is not None and not node.unschedulable and not node.is_being_deleted


def test_an_unreadable_plan_lease_row_plans_no_scale_down_and_is_not_written_over(
        request: pytest.FixtureRequest) -> None:
    """The lease keeps two plans from handing out the same slots; held by nobody knows whom, no plan runs."""
    app = _idle_app(request)
    _poll(app)  # creates the lease row
    before = _corrupt(app, "ledger", LEASE_ROW, ProgressStep="x")
    app.clock.advance(app.context.settings.scale_down_unneeded_time.total_seconds() + 60)

    result = _poll(app)

    assert result.enqueued == () and app.take_queued() == []
    nodes = [app.context.ports.cluster.get_node(name) for name in _nodes_of(app, POOL) + _nodes_of(app, SPARE)]
    assert len(nodes) == 5 and all(n is not None and not n.unschedulable and not n.is_being_deleted for n in nodes)
    assert _row(app, "ledger", LEASE_ROW) == before


def test_an_unreadable_round_row_asks_for_no_round_and_takes_none(request: pytest.FixtureRequest) -> None:
    app = _idle_app(request)
    ports, settings = app.context.ports, app.context.settings
    asked = request_round(ports, settings, now=app.clock.now())
    assert asked is not None
    app.clear_queue()
    before = _corrupt(app, "ledger", ROUND_ROW, UpdatedAt="noon")
    app.clock.advance(settings.scale_down_round_interval.total_seconds() + settings.action_ttl.total_seconds() + 1)

    assert request_round(ports, settings, now=app.clock.now()) is None
    assert take_round(ports, settings, asked, now=app.clock.now()) is False
    assert app.take_queued() == []
    assert _row(app, "ledger", ROUND_ROW) == before


def test_the_plan_names_a_group_whose_row_cannot_be_read(request: pytest.FixtureRequest) -> None:
    app = _idle_app(request)
    _bad_group_row(app, SPARE, "Deleting", "{not json")

    report = plan_now(app.context.ports, app.context.settings, now=app.clock.now(), state=app.context.ports.state)

    data = report.as_dict()
    [refused] = [g for g in data["groups"] if g["group"] == SPARE]
    assert "'Deleting'" in refused["refused"] and "'Deleting'" in data["unreadable_rows"][SPARE]
    assert "'Deleting'" in render_text(report)
    assert all(r["group"] == POOL for r in data["scale_down"])


def test_a_removal_step_meeting_its_groups_unreadable_row_ends_with_an_outcome_and_leaves_the_node(
        request: pytest.FixtureRequest) -> None:
    """A removal under way whose group row goes bad: its next step records an outcome naming the row, and the node
    stays as it was (no eviction, no delete, not given back half-way); the poll after it leaves it so too."""
    app = _idle_app(request)
    ports = app.context.ports
    busy, _ = app.busy_and_idle()
    first = next(n for n in _nodes_of(app, POOL) if n != busy)
    action = new_scale_down(action_id=f"down-{first}", group=POOL, now=app.clock.now(), ttl=timedelta(minutes=5),
                            targets=[RemovalTarget(first, app.provider_id(first))], removal_kind="drain")
    as_the_poll_decided(ports, POOL, [first], action.id, now=app.clock.now())
    assert app.run(encode_action(action)).outcome == "waiting"
    [following] = app.take_queued()
    before = _corrupt(app, "group", POOL, Deleting="{oops")
    deletes, evicted = app.arm_calls("POST delete"), app.world.report()["running_pods_evicted"]

    result = app.run(following)

    assert result.outcome == "failed"
    entry = ports.state.get_ledger_entry(action.id)
    assert entry is not None and "stored state cannot be read" in entry.outcome and "'Deleting'" in entry.outcome
    app.clock.advance(orphan_after(app.context.settings).total_seconds() + 60)
    assert POOL in _poll(app).unreadable_groups
    node = ports.cluster.get_node(first)
    assert node is not None and node.unschedulable and node.is_being_deleted
    assert app.arm_calls("POST delete") == deletes and app.world.report()["running_pods_evicted"] == evicted
    assert _row(app, "group", POOL) == before
