"""Scheduled capacity in the polls (in-memory ports, a real world): the pending poll grows a group to its window's
minimum with no pod pending, and the utilisation poll keeps it there until the window ends."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

import pytest

from shared.engine.scheduled_capacity import TAG_SCHEDULED_CAPACITY
from shared.services.executor import Executor
from shared.services.pending import run_pending_poll
from shared.services.utilization import run_utilization_poll
from tests.memory_app import SANDBOX_START, MemoryApp, memory_app

GROUP = "rg-sched/batch"
SCENARIO: dict[str, Any] = {
    "name": "scheduled",
    "cluster_name": "scheduled",
    "flavour": "k3s",
    "arm_throttling": False,
    "node_groups": [
        {"resource_group": "rg-sched", "name": "batch", "vm_size": "Standard_D4s_v5",
         "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}, "min": 1, "max": 10, "initial": 1},
    ],
}
OPENS = SANDBOX_START + timedelta(minutes=10)
WINDOW_MIN = 4


def app_with_window(duration: str = "1h", minimum: int = WINDOW_MIN) -> MemoryApp:
    window = {"group": GROUP, "start": f"{OPENS:%S %M %H} * * *", "duration": duration, "min": minimum,
              "timezone": "UTC"}
    return memory_app(SCENARIO, settings={"SCHEDULED_CAPACITY": json.dumps([window]),
                                          "SCALE_DOWN_UNNEEDED_TIME": "1m", "SCALE_DOWN_DELAY_AFTER_ADD": "0s"})


def capacity(app: MemoryApp) -> int:
    (group,) = app.ports.provider.list_node_groups()
    return group.capacity


def test_the_pending_poll_grows_the_group_to_the_windows_minimum_from_its_start_only() -> None:
    app = app_with_window()
    app.clock.advance((OPENS - SANDBOX_START).total_seconds() - 1)
    before = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert before.enqueued == () and before.windows == {}
    app.clock.advance(1)
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    (action,) = [json.loads(text) for text in app.take_queued()]
    assert result.pending == 0 and set(result.windows) == {GROUP}
    assert action["group"] == GROUP and action["target_size"] == WINDOW_MIN
    assert action["reason"].startswith("scheduled capacity: min 4 until")


def test_the_group_is_kept_at_the_windows_minimum_while_it_lasts_and_shrinks_after() -> None:
    app = app_with_window(duration="30m")
    app.clock.advance((OPENS - SANDBOX_START).total_seconds())
    for _ in range(20):  # about ten minutes: the nodes boot and stand empty well past the unneeded time
        app.tick(30)
    assert capacity(app) == WINDOW_MIN
    during = run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert during.plan.removals == () and during.enqueued == ()
    app.clock.advance((OPENS + timedelta(minutes=30) - app.clock.now()).total_seconds())
    for _ in range(20):
        app.tick(30)
    assert capacity(app) < WINDOW_MIN  # the window over, its empty nodes go (the group's own min is 1)


def test_the_windows_minimum_is_capped_by_the_groups_max() -> None:
    app = app_with_window(minimum=50)
    app.clock.advance((OPENS - SANDBOX_START).total_seconds())
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    (action,) = [json.loads(text) for text in app.take_queued()]
    assert action["target_size"] == 10


def test_the_status_configmap_and_plan_show_the_active_window() -> None:
    from shared.engine.status import parse_previous
    from shared.services.plan import plan_now, render_text

    app = app_with_window()
    app.clock.advance((OPENS - SANDBOX_START).total_seconds() + 60)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    data = app.ports.cluster.get_config_map("kube-system", "cluster-autoscaler-status")
    assert data is not None
    doc = parse_previous(data["status"])
    assert doc is not None
    (entry,) = doc["nodeGroups"]
    shown = entry["scheduledCapacity"]
    assert shown["minSize"] == shown["effectiveMinSize"] == WINDOW_MIN and shown["timeZone"] == "UTC"
    assert shown["until"].startswith(f"{OPENS + timedelta(hours=1):%Y-%m-%dT%H:%M}")
    assert entry["health"]["minSize"] == 1  # the group's own minimum, as CA shows it

    report = plan_now(app.ports, app.settings, now=app.clock.now(), state=None)
    text = render_text(report)
    assert f"scheduled capacity: min {WINDOW_MIN} until {OPENS + timedelta(hours=1):%Y-%m-%d %H:%M} UTC" in text
    assert f"{GROUP}: 1 -> {WINDOW_MIN} for 0 pending pod(s) and scheduled capacity" in text


def test_outside_a_window_the_status_shows_none() -> None:
    from shared.engine.status import parse_previous

    app = app_with_window()
    app.clock.advance(60)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    data = app.ports.cluster.get_config_map("kube-system", "cluster-autoscaler-status")
    assert data is not None
    doc = parse_previous(data["status"])
    assert doc is not None and "scheduledCapacity" not in doc["nodeGroups"][0]


def app_with_tag(tag: str, *, settings: dict[str, str] | None = None) -> MemoryApp:
    (pool,) = SCENARIO["node_groups"]
    scenario = {**SCENARIO, "node_groups": [{**pool, "tags": {TAG_SCHEDULED_CAPACITY: tag}}]}
    return memory_app(scenario, settings=settings or {})


def test_the_scale_sets_tag_opens_a_window_as_the_setting_does() -> None:
    app = app_with_tag(f"{OPENS:%S %M %H} * * *|1h|min=3|UTC")
    app.clock.advance((OPENS - SANDBOX_START).total_seconds())
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    (action,) = [json.loads(text) for text in app.take_queued()]
    assert set(result.windows) == {GROUP} and action["target_size"] == 3
    assert action["reason"].startswith("scheduled capacity: min 3 until")


def test_the_tag_and_the_setting_merge_taking_the_larger_minimum() -> None:
    window = {"group": GROUP, "start": f"{OPENS:%S %M %H} * * *", "duration": "1h", "min": WINDOW_MIN}
    for tag_min in (WINDOW_MIN - 2, WINDOW_MIN + 2):
        app = app_with_tag(f"{OPENS:%S %M %H} * * *|1h|min={tag_min}",
                           settings={"SCHEDULED_CAPACITY": json.dumps([window])})
        app.clock.advance((OPENS - SANDBOX_START).total_seconds())
        run_pending_poll(app.ports, app.settings, now=app.clock.now())
        (action,) = [json.loads(text) for text in app.take_queued()]
        assert action["target_size"] == max(tag_min, WINDOW_MIN)


def test_a_malformed_tag_is_logged_naming_the_group_and_tag_and_the_group_still_scales(
        caplog: pytest.LogCaptureFixture) -> None:
    app = app_with_tag(f"{OPENS:%S %M %H} * * *|1h|min=three")
    app.clock.advance((OPENS - SANDBOX_START).total_seconds())
    with caplog.at_level(logging.ERROR):
        result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert result.windows == {} and app.take_queued() == []
    assert any(f"group {GROUP}: tag {TAG_SCHEDULED_CAPACITY} window 1: field 'min'" in r.getMessage()
               for r in caplog.records)


def test_a_standby_window_shows_in_the_status_and_grows_no_running_node() -> None:
    from shared.engine.status import parse_previous

    app = app_with_tag(f"{OPENS:%S %M %H} * * *|1h|standby=2|UTC")
    app.clock.advance((OPENS - SANDBOX_START).total_seconds() + 60)
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert result.windows[GROUP].standby == 2 and result.windows[GROUP].min_size is None
    assert app.take_queued() == []  # standby instances are the standby target's to keep, not running nodes
    data = app.ports.cluster.get_config_map("kube-system", "cluster-autoscaler-status")
    assert data is not None
    doc = parse_previous(data["status"])
    assert doc is not None
    shown = doc["nodeGroups"][0]["scheduledCapacity"]
    assert shown["standby"] == 2 and shown["minSize"] is None and shown["effectiveMinSize"] == 1
    assert shown["standbyUntil"].startswith(f"{OPENS + timedelta(hours=1):%Y-%m-%dT%H:%M}")

    from shared.services.plan import plan_now, render_text

    text = render_text(plan_now(app.ports, app.settings, now=app.clock.now(), state=None))
    assert f"scheduled capacity: standby 2 until {OPENS + timedelta(hours=1):%Y-%m-%d %H:%M} UTC" in text
    assert "min " not in text.split("scheduled capacity: ", 1)[1].split("\n", 1)[0]
