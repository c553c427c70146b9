"""The pending poll measures the starts of standby instances (engine.idle.measure_starts) on the in-memory world: a
scale-up that starts a deallocated instance gives one start, from the sandbox's own start delay, never a boot; the
auto target then says its start is measured."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from shared.domain import DemandHistory, GroupState
from shared.engine.forecast import note_demand
from shared.services.pending import run_pending_poll
from shared.services.standby import get_standby_target
from tests.shared.services.test_executor import GROUP, SCENARIO, App, make_memory_app, scale_down, scale_up, walk

BOOT_S = float(SCENARIO["boot_delay"].rstrip("s"))  # the scenario's create-and-boot delay, fixed
POLL_S = 30


def _stopped_one(settings: dict[str, str]) -> tuple[App, str]:
    """The app with one idle node deallocated into the standby, ten minutes ago; its instance id."""
    app = make_memory_app(settings={"STANDBY_INSTANCES": "1", **settings})
    _, (idle, _other) = app.busy_and_idle()
    assert walk(app, scale_down(app, idle), step_seconds=POLL_S)[-1] == "succeeded"
    app.clock.advance(600)
    stopped = app.context.ports.state.get_group(GROUP).stopped
    assert len(stopped) == 1
    return app, next(iter(stopped))


def _grow_and_poll(app: App, more: int) -> tuple[datetime, GroupState]:
    """Scale the group up by `more` nodes, then run the pending poll every 30 s for ten minutes; the request's time
    and the group's row."""
    ports, settings = app.context.ports, app.context.settings
    group = ports.provider.get_node_group(GROUP)
    assert group is not None
    running = group.capacity - len(ports.state.get_group(GROUP).stopped)
    requested = app.clock.now()
    walk(app, scale_up(app, running + more), step_seconds=5)
    for _ in range(20):
        app.clock.advance(POLL_S)
        run_pending_poll(ports, settings, now=app.clock.now())
    return requested, ports.state.get_group(GROUP)


def _ready_since(app: App, instance: str) -> float:
    """Seconds since its registration of the Ready node the instance runs."""
    node = next(n for n in app.context.ports.cluster.list_nodes()
                if n.instance is not None and n.instance.instance_id == instance)
    assert node.ready
    return (app.clock.now() - node.created_at).total_seconds()


def test_a_started_standby_instance_is_measured_as_a_start_within_the_sandbox_s_start_delay() -> None:
    app, instance = _stopped_one({})
    requested, state = _grow_and_poll(app, 1)
    assert app.arm()["instances_started"]  # served by the standby, nothing created
    assert len(state.starts) == 1 and state.boots == ()
    (start,) = state.starts
    delay = app.world.scenario.start_delay
    assert delay.low <= start <= delay.high
    # From the request to the fresh node's registration, as the sandbox drew it.
    registered = (app.clock.now() - requested).total_seconds() - _ready_since(app, instance)
    assert abs(start - registered) <= 1
    assert all(left == () for _, _, left in state.start_requests)


def test_a_scale_up_that_starts_one_and_creates_one_measures_each_apart() -> None:
    app, instance = _stopped_one({})
    requested, state = _grow_and_poll(app, 2)
    assert len(state.starts) == 1 and len(state.boots) == 1
    # The boot is the created instance's, never the started one's fresh node (a start is drawn from its own delay).
    assert abs(state.boots[0] - BOOT_S) <= 1
    registered = (app.clock.now() - requested).total_seconds() - _ready_since(app, instance)
    assert abs(state.starts[0] - registered) <= 1


def test_the_auto_target_says_its_start_is_measured_once_one_is() -> None:
    app, _ = _stopped_one({})
    ports, now = app.context.ports, app.clock.now()
    history = DemandHistory(GROUP)
    for hours in range(6, 0, -1):  # 2 nodes asked for in each of the last hours: auto has a forecast
        history = note_demand(history, 2, now=now - timedelta(hours=hours))
    ports.state.update_demand(history)
    settings = replace(app.context.settings, standby_instances="auto")
    group = ports.provider.get_node_group(GROUP)
    assert group is not None
    before = get_standby_target(ports, settings, group, now=now)
    assert "assumed" in before.why and "measured" not in before.why
    _, state = _grow_and_poll(app, 1)
    after = get_standby_target(ports, settings, group, state=state, now=app.clock.now())
    assert state.starts and "measured" in after.why and f"{state.starts[0]} s" in after.why
