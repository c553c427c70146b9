"""cluster-autoscaler's events on its status ConfigMap (issue 14, item 14): ScaledUpGroup before a group is grown,
FailedToScaleUpGroup when that fails, ScaleDownEmpty for each empty node removed; none with DRY_RUN or without a
status ConfigMap, as the ConfigMap itself is not written then. On both apps of test_executor.py."""

from __future__ import annotations

import json

import pytest

from tests.shared.services.test_executor import (  # noqa: F401 (make: fixture)
    GROUP, App, MakeApp, make, scale_down, scale_up, walk)

STATUS = ("kube-system", "cluster-autoscaler-status")


def _status_events(app: App) -> list[tuple[str, str, str]]:
    return [(e.reason, e.type, e.message) for e in app.events(STATUS[0])
            if e.kind == "ConfigMap" and e.name == STATUS[1]]


@pytest.fixture
def app(make: MakeApp) -> App:
    return make()


def test_a_scale_up_is_recorded_as_cluster_autoscaler_records_it(app: App) -> None:
    walk(app, scale_up(app, 5), step_seconds=300)
    assert _status_events(app) == [
        ("ScaledUpGroup", "Normal", f"Scale-up: setting group {GROUP} size to 5 instead of 3 (max: 5)")]


def test_a_failed_scale_up_is_recorded_as_a_warning(app: App) -> None:
    app.world.fail_next_scale_up("pool", code="QuotaExceeded")
    walk(app, scale_up(app, 5), step_seconds=30)
    reasons = [(reason, kind) for reason, kind, _ in _status_events(app)]
    assert reasons == [("ScaledUpGroup", "Normal"), ("FailedToScaleUpGroup", "Warning")]
    assert "QuotaExceeded" in _status_events(app)[1][2]


def test_each_empty_node_removed_is_recorded(app: App) -> None:
    _, idle = app.busy_and_idle()
    outcomes = walk(app, scale_down(app, *idle, removal_kind="empty"), step_seconds=30)
    assert outcomes[-1] == "succeeded", outcomes
    assert sorted(_status_events(app)) == sorted(
        ("ScaleDownEmpty", "Normal", f'Scale-down: removing empty node "{name}"') for name in idle)


def test_a_drained_node_is_not_called_empty(app: App) -> None:
    _, idle = app.busy_and_idle()
    walk(app, scale_down(app, idle[0], removal_kind="drain"), step_seconds=30)
    assert _status_events(app) == []


@pytest.mark.parametrize("settings", [{"DRY_RUN": "true"}, {"STATUS_CONFIGMAP": ""}])
def test_nothing_is_recorded_where_no_status_is_written(make: MakeApp, settings: dict[str, str]) -> None:
    app = make(settings=settings)
    walk(app, scale_up(app, 5), step_seconds=300)
    _, idle = app.busy_and_idle()
    walk(app, scale_down(app, idle[0], removal_kind="empty"), step_seconds=30)
    assert json.dumps(_status_events(app)) == "[]"
