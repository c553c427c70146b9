"""SCALE_DOWN_DEALLOCATED_MAX, on both apps of test_executor.py: beyond the cap, the oldest stopped instances are deleted."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from shared.ports import ComputeError
from shared.services.deallocated import enforce_deallocated_max
from tests.shared.services.test_executor import (  # noqa: F401 (make: fixture)
    GROUP, App, MakeApp, make, scale_down, walk)

TAG = "k8s.io_cluster-autoscaler_node-template_autoscaling-options_scaledowndeallocatedmax"


def _instance(app: App, node: str) -> str:
    return app.provider_id(node).rsplit("/", 1)[-1]


def _arm(app: App) -> dict[str, Any]:
    return app.arm()


def test_beyond_the_cap_the_instance_deallocated_longest_ago_is_deleted(make: MakeApp) -> None:
    app = make(settings={"SCALE_DOWN_MODE": "deallocate", "SCALE_DOWN_DEALLOCATED_MAX": "1"})
    _, (first, second) = app.busy_and_idle()
    old, new = _instance(app, first), _instance(app, second)
    assert walk(app, scale_down(app, first), step_seconds=30)[-1] == "succeeded"
    state = app.context.ports.state.get_group(GROUP)
    assert state.stopped == frozenset({old}) and set(state.stopped_at) == {old}  # at the cap: kept
    assert "POST delete" not in _arm(app)

    app.clock.advance(600)  # past the scale-down delay after a delete
    message = scale_down(app, second)
    assert walk(app, message, step_seconds=30)[-1] == "succeeded"
    arm = _arm(app)
    assert arm["instances_deallocated"] == {f"pool/{old}": 1, f"pool/{new}": 1}
    assert arm["instances_deleted"] == {f"pool/{old}": 1}  # the older one, once
    state = app.context.ports.state.get_group(GROUP)
    assert state.stopped == frozenset({new}) and set(state.stopped_at) == {new}
    app.clock.advance(60)  # the delete completes: the group holds the busy node and one stopped instance
    group = app.context.ports.provider.get_node_group(GROUP)
    assert group is not None and group.capacity == 2

    # A redelivery of the finished step changes nothing: no second delete, the row as it was.
    assert app.run(message).outcome == "duplicate"
    assert _arm(app)["instances_deleted"] == {f"pool/{old}": 1}


def test_a_cap_of_zero_on_the_scale_set_makes_its_scale_down_delete(make: MakeApp) -> None:
    app = make(settings={"SCALE_DOWN_MODE": "deallocate"}, tags={TAG: "0"})
    _, idle = app.busy_and_idle()
    instance = _instance(app, idle[0])
    assert walk(app, scale_down(app, idle[0]), step_seconds=30)[-1] == "succeeded"
    arm = _arm(app)
    assert arm["instances_deleted"] == {f"pool/{instance}": 1} and "POST deallocate" not in arm
    assert app.context.ports.state.get_group(GROUP).stopped == frozenset()


def test_a_crash_after_the_delete_call_is_repaired_without_a_second_delete(make: MakeApp) -> None:
    """The row still lists an instance whose delete ARM accepted: the step crashed before forgetting it."""
    app = make(settings={"SCALE_DOWN_MODE": "deallocate", "SCALE_DOWN_DEALLOCATED_MAX": "2"})
    _, (first, second) = app.busy_and_idle()
    old, new = _instance(app, first), _instance(app, second)
    assert walk(app, scale_down(app, first), step_seconds=30)[-1] == "succeeded"
    app.clock.advance(600)
    assert walk(app, scale_down(app, second), step_seconds=30)[-1] == "succeeded"
    ports, group = app.context.ports, app.context.ports.provider.get_node_group(GROUP)
    assert group is not None and ports.state.get_group(GROUP).stopped == frozenset({old, new})
    capped = replace(app.context.settings, scale_down_deallocated_max=1)
    ports.provider.begin_delete_instances(group, [old])  # what the trim asked for before the crash

    # The redelivered step trims again: it forgets the instance being deleted and deletes nothing.
    for _ in range(2):
        assert enforce_deallocated_max(ports, capped, GROUP) == ()
    assert ports.state.get_group(GROUP).stopped == frozenset({new})
    assert _arm(app)["instances_deleted"] == {f"pool/{old}": 1}


def test_a_delete_arm_refuses_leaves_the_removal_succeeded_and_the_list_as_it_was(
    make: MakeApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make(settings={"SCALE_DOWN_MODE": "deallocate", "SCALE_DOWN_DEALLOCATED_MAX": "1"})
    _, (first, second) = app.busy_and_idle()
    old, new = _instance(app, first), _instance(app, second)
    assert walk(app, scale_down(app, first), step_seconds=30)[-1] == "succeeded"
    app.clock.advance(600)
    compute = app.context.ports.provider

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ComputeError("conflict", code="Conflict")

    monkeypatch.setattr(compute, "begin_delete_instances", refuse)
    assert walk(app, scale_down(app, second), step_seconds=30)[-1] == "succeeded"
    assert app.context.ports.state.get_group(GROUP).stopped == frozenset({old, new})  # nothing forgotten
    monkeypatch.undo()

    # The next trim (after the group's next deallocation) deletes it.
    assert enforce_deallocated_max(app.context.ports, app.context.settings, GROUP) == (old,)
    assert app.context.ports.state.get_group(GROUP).stopped == frozenset({new})
