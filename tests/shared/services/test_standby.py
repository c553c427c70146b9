"""Warm standby in the services: idle nodes feed it in any SCALE_DOWN_MODE, the trim keeps it, a scale-up starts it
and says so; the target's reads (forecast, prices, windows) and what status and plan show."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from shared.domain import DemandHistory, GroupState
from shared.engine.forecast import note_demand
from shared.services.deallocated import enforce_deallocated_max, removal_verb, stopped_cap
from shared.services.standby import (
    NO_STANDBY, disk_price_hour, get_standby_target, may_keep_standby, standby_report, wants_more_standby,
)
from tests.shared.services.test_executor import GROUP, App, make_memory_app, scale_down, scale_up, walk

TAG = "autoscaler-standby"


def _instance(app: App, node: str) -> str:
    return app.provider_id(node).rsplit("/", 1)[-1]


def _group(app: App):  # type: ignore[no-untyped-def]
    group = app.context.ports.provider.get_node_group(GROUP)
    assert group is not None
    return group


@pytest.mark.parametrize(
    "case_id,settings,tags,expected",
    [
        ("nothing configured", {}, {}, False),
        ("a count", {"STANDBY_INSTANCES": "2"}, {}, True),
        ("auto", {"STANDBY_INSTANCES": "auto"}, {}, True),
        ("a tag, even 0", {}, {TAG: "0"}, True),
    ],
)
def test_may_keep_standby_reads_no_port(case_id, settings, tags, expected) -> None:  # type: ignore[no-untyped-def]
    app = make_memory_app(settings=settings, tags=tags)
    assert may_keep_standby(app.context.settings, _group(app)) is expected
    if not expected:
        assert get_standby_target(app.context.ports, app.context.settings, _group(app),
                                  now=app.clock.now()) is NO_STANDBY


def test_a_fixed_target_is_capped_by_max_minus_min() -> None:
    app = make_memory_app(settings={"STANDBY_INSTANCES": "9"})
    group = _group(app)
    target = get_standby_target(app.context.ports, app.context.settings, group, now=app.clock.now())
    assert target.count == group.max_size - group.min_size


def test_auto_follows_the_demand_history() -> None:
    app = make_memory_app(settings={"STANDBY_INSTANCES": "auto", "STANDBY_MAX": "3"})
    ports, now = app.context.ports, app.clock.now()
    history = DemandHistory(GROUP)
    for hours in range(6, 0, -1):  # a steady 2 nodes asked for in each of the last hours
        history = note_demand(history, 2, now=now - timedelta(hours=hours))
    ports.state.update_demand(history)
    settings = replace(app.context.settings)
    target = get_standby_target(ports, settings, _group(app), now=now)
    assert 1 <= target.count <= 2
    assert "auto" in target.why
    none = get_standby_target(ports, replace(settings, standby_max=0), _group(app), now=now)
    assert none.count == 0


def test_idle_nodes_feed_the_standby_in_delete_mode_until_it_is_full() -> None:
    app = make_memory_app(settings={"STANDBY_INSTANCES": "1"})
    _, (first, second) = app.busy_and_idle()
    one, two = _instance(app, first), _instance(app, second)
    ports, settings, group = app.context.ports, app.context.settings, _group(app)
    assert settings.scale_down_mode == "delete"
    assert removal_verb(settings, group, ports=ports, now=app.clock.now()) == "deallocate"
    assert removal_verb(settings, group) == "delete"  # without the standby's reads: the mode alone

    assert walk(app, scale_down(app, first), step_seconds=30)[-1] == "succeeded"
    state = ports.state.get_group(GROUP)
    assert state.stopped == frozenset({one})
    assert not wants_more_standby(ports, settings, _group(app), now=app.clock.now())

    app.clock.advance(600)
    assert walk(app, scale_down(app, second), step_seconds=30)[-1] == "succeeded"
    arm = app.arm()
    assert arm["instances_deallocated"] == {f"pool/{one}": 1}
    assert arm["instances_deleted"] == {f"pool/{two}": 1}
    assert ports.state.get_group(GROUP).stopped == frozenset({one})


def test_spot_with_delete_eviction_never_feeds_the_standby() -> None:
    app = make_memory_app(settings={"STANDBY_INSTANCES": "2"})
    spot = replace(_group(app), priority="Spot", eviction_policy="Delete")
    assert removal_verb(app.context.settings, spot, ports=app.context.ports, now=app.clock.now()) == "delete"


@pytest.mark.parametrize(
    "case_id,settings,expected",
    [
        ("delete mode, no standby: none kept", {}, 0),
        ("delete mode, standby 2", {"STANDBY_INSTANCES": "2"}, 2),
        ("deallocate mode: its cap", {"SCALE_DOWN_MODE": "deallocate", "SCALE_DOWN_DEALLOCATED_MAX": "3"}, 3),
        ("the larger of both", {"SCALE_DOWN_MODE": "deallocate", "SCALE_DOWN_DEALLOCATED_MAX": "1",
                                "STANDBY_INSTANCES": "2"}, 2),
    ],
)
def test_the_trim_cap_keeps_the_standby(case_id, settings, expected) -> None:  # type: ignore[no-untyped-def]
    app = make_memory_app(settings=settings)
    assert stopped_cap(app.context.ports, app.context.settings, _group(app), now=app.clock.now()) == expected


def test_the_trim_never_deletes_the_standby_target() -> None:
    app = make_memory_app(settings={"STANDBY_INSTANCES": "2"})
    _, (first, second) = app.busy_and_idle()
    oldest = _instance(app, first)
    for node in (first, second):
        assert walk(app, scale_down(app, node), step_seconds=30)[-1] == "succeeded"
        app.clock.advance(600)
    ports = app.context.ports
    assert len(ports.state.get_group(GROUP).stopped) == 2
    assert enforce_deallocated_max(ports, app.context.settings, GROUP) == ()
    assert not app.arm()["instances_deleted"]
    # The target drops to 1: the instance deallocated longest ago goes.
    assert enforce_deallocated_max(ports, replace(app.context.settings, standby_instances="1"), GROUP) == (oldest,)


def test_a_scale_up_starts_the_standby_and_says_so() -> None:
    app = make_memory_app(settings={"STANDBY_INSTANCES": "1", "STATUS_CONFIGMAP": "kube-system/cluster-autoscaler-status"})
    _, (idle, _other) = app.busy_and_idle()
    instance = _instance(app, idle)
    assert walk(app, scale_down(app, idle), step_seconds=30)[-1] == "succeeded"
    app.clock.advance(600)
    emitted: list[Any] = []
    ports = app.context.ports
    original = ports.events.emit
    ports.events.emit = lambda event: (emitted.append(event), original(event))  # type: ignore[method-assign]
    running = _group(app).capacity - 1
    walk(app, scale_up(app, running + 2), step_seconds=30)
    assert app.arm()["instances_started"] == {f"pool/{instance}": 1}
    assert [e.reason for e in emitted if e.reason == "StandbyUsed"] == ["StandbyUsed"]
    used = next(e for e in emitted if e.reason == "StandbyUsed")
    assert "started 1" in used.message and "created 1" in used.message


def test_status_and_plan_show_the_standby() -> None:
    app = make_memory_app(settings={"STANDBY_INSTANCES": "2"})
    ports, settings, group = app.context.ports, app.context.settings, _group(app)
    state = GroupState(GROUP, stopped=frozenset({"7"}))
    report = standby_report(ports, settings, group, state, now=app.clock.now())
    assert report is not None
    assert (report.target, report.stopped) == (2, 1)
    price = disk_price_hour(group)
    assert price is not None and price > 0
    assert report.disk_usd_per_hour == pytest.approx(price)
    doc = report.as_dict()
    assert {"target", "why", "stopped", "refilling"} <= set(doc)
    assert "1/2" in report.line(GROUP)
    # A group that keeps none and has none stopped shows nothing.
    quiet = make_memory_app()
    assert standby_report(quiet.context.ports, quiet.context.settings, _group(quiet), GroupState(GROUP),
                          now=quiet.clock.now()) is None


def test_the_status_configmap_and_plan_show_the_standby() -> None:
    from shared.engine.status import parse_previous
    from shared.services.pending import run_pending_poll
    from shared.engine.vm_sizes import table_capacity
    from shared.services.plan import plan_now, render_text

    app = make_memory_app(settings={"STANDBY_INSTANCES": "2",
                                    "STATUS_CONFIGMAP": "kube-system/cluster-autoscaler-status"})
    _, (idle, _other) = app.busy_and_idle()
    assert walk(app, scale_down(app, idle), step_seconds=30)[-1] == "succeeded"
    ports, settings = app.context.ports, app.context.settings
    run_pending_poll(ports, settings, now=app.clock.now())
    data = ports.cluster.get_config_map("kube-system", "cluster-autoscaler-status")
    assert data is not None
    doc = parse_previous(data["status"])
    assert doc is not None
    (entry,) = [g for g in doc["nodeGroups"] if g["name"] == "pool"]
    assert entry["standby"]["target"] == 2 and entry["standby"]["stopped"] == 1
    assert entry["standby"]["diskUsdPerHour"] > 0
    # The stopped instance's cores still count against quota: shown as its size's vCPUs per stopped instance.
    (group,) = [g for g in ports.provider.list_node_groups() if g.id.endswith("/pool")]
    vcpus = table_capacity(group.vm_size)
    assert vcpus is not None and entry["standby"]["quotaCores"] == vcpus.vcpus * entry["standby"]["stopped"]

    text = render_text(plan_now(ports, settings, now=app.clock.now(), state=ports.state))
    assert "standby 1 of 2 stopped" in text and "fixed 2" in text
    assert f"{vcpus.vcpus} cores of quota held" in text


@pytest.mark.parametrize(
    "case_id,settings,stopped,room",
    [
        ("no standby", {}, 0, False),
        ("standby short", {"STANDBY_INSTANCES": "2"}, 1, True),
        ("standby full", {"STANDBY_INSTANCES": "2"}, 2, False),
    ],
)
def test_a_standby_with_room_shortens_the_break_even_time_to_a_start(case_id, settings, stopped, room) -> None:  # type: ignore[no-untyped-def]
    from shared.engine.scale_down import group_rules
    from shared.options import scale_down_options
    from shared.services.standby import with_standby_room

    app = make_memory_app(settings={"SCALE_DOWN_IDLE_MODE": "break-even", **settings})
    ports, group = app.context.ports, _group(app)
    state = GroupState(GROUP, stopped=frozenset(str(100 + i) for i in range(stopped)), boots=(120, 120, 120))
    plain = scale_down_options(app.context.settings)
    options = with_standby_room(ports, app.context.settings, plain, [group], now=app.clock.now(),
                                states={GROUP: state})
    assert (GROUP in options.standby_room) is room
    before, after = group_rules(group, plain, state), group_rules(group, options, state)
    assert after.after_add == before.after_add  # the delay after a scale-up still waits one boot
    if room:
        assert after.unneeded_time * 2 == before.unneeded_time == timedelta(seconds=120)
    else:
        assert after == before


def test_the_report_counts_the_nodes_a_refill_is_parking() -> None:
    app = make_memory_app(settings={"STANDBY_INSTANCES": "3"})
    state = GroupState(GROUP, stopped=frozenset({"5", "6"}),
                       removing={"pool000005": "refill-standby:rg-exec/pool:20300107T090000Z", "pool000001": "down-1"})
    report = standby_report(app.context.ports, app.context.settings, _group(app), state, now=app.clock.now())
    assert report is not None
    assert (report.stopped, report.refilling, report.target) == (2, 1, 3)
    assert "1 refilling" in report.line(GROUP)


@pytest.mark.parametrize("holder,fits", [
    ("refill-standby:rg-exec/pool:20300107T090000Z", True),  # a refill's nodes: listed stopped already
    ("down-1", False),  # a removal's: on their way into the standby, counted beside the stopped ones
], ids=["refill parking", "removal"])
def test_a_refill_parking_its_nodes_is_counted_once(holder: str, fits: bool) -> None:
    from shared.services.standby import standby_count, with_standby_room
    from shared.options import scale_down_options

    app = make_memory_app(settings={"STANDBY_INSTANCES": "3"})
    ports, settings = app.context.ports, app.context.settings
    state = ports.state.get_group(GROUP)
    parking = {"pool000005": holder, "pool000006": holder}
    assert ports.state.update_group(replace(state, stopped=frozenset({"5", "6"}), removing=parking,
                                            committed=frozenset(parking)))
    stored = ports.state.get_group(GROUP)
    assert standby_count(stored) == (2 if fits else 4)
    # One more idle node fits a standby of 3 only when the refill's two are counted once.
    assert wants_more_standby(ports, settings, _group(app), now=app.clock.now()) is fits
    room = with_standby_room(ports, settings, scale_down_options(settings), [_group(app)], now=app.clock.now())
    assert (GROUP in room.standby_room) is fits


def test_the_standby_decision_reads_each_demand_row_once_an_hour() -> None:
    from shared.services.standby import with_standby_room
    from shared.options import scale_down_options

    app = make_memory_app(settings={"STANDBY_INSTANCES": "auto"})
    ports, settings, now = app.context.ports, app.context.settings, app.clock.now()
    history = DemandHistory(GROUP)
    for hours in range(6, 0, -1):
        history = note_demand(history, 2, now=now - timedelta(hours=hours))
    ports.state.update_demand(history)
    reads: list[str] = []
    store = ports.state
    original = store.get_demand
    store.get_demand = lambda group_id: (reads.append(group_id), original(group_id))[1]  # type: ignore[method-assign]
    first = get_standby_target(ports, settings, _group(app), now=now)
    assert first.count > 0 and reads == [GROUP]
    for _ in range(3):  # what a poll and the executor's checks ask, again and again: nothing read anew
        assert get_standby_target(ports, settings, _group(app), now=now) == first
        wants_more_standby(ports, settings, _group(app), now=now)
        with_standby_room(ports, settings, scale_down_options(settings), [_group(app)], now=now)
    assert reads == [GROUP]
    later = now + timedelta(hours=1)
    get_standby_target(ports, settings, _group(app), now=later)
    get_standby_target(ports, settings, _group(app), now=later)
    assert reads == [GROUP, GROUP]  # the next hour: read once more
