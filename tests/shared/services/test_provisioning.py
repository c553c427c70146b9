"""ProvisioningRequests through the real polls on the in-process world: check-capacity books the room there is (kept
from scale-down and from ordinary pods, released when it expires), an atomic request is asked for whole once or
refused without booting anything, consuming pods are not planned, statuses are written only when they change."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.world import capacity_buffers as templates
from sandbox.world import provisioning_requests as store
from dataclasses import replace

from shared.actions import AtomicScaleUp, decode_action
from shared.domain import (
    ATOMIC_SCALE_UP_CLASS,
    CHECK_CAPACITY_CLASS,
    CONSUME_PROVISIONING_REQUEST,
    BufferTemplate,
    PodSet,
    ProvisioningRequest,
)
from shared.engine import provisioning as engine
from shared.engine.provisioning_conditions import BOOKING_EXPIRED_REASON
from shared.engine.scale_up import ScaleUpOptions, plan_scale_up
from shared.services.provisioning import Requests, plan_requests
from shared import yaml_text
from shared.ports import ClusterError
from shared.services.executor import Executor
from shared.services.pending import run_pending_poll
from shared.services.plan import plan_now, render_text
from shared.services.utilization import run_utilization_poll
from tests.builders import T0, group, node, pod, snapshot
from tests.memory_app import MemoryApp, memory_app
from tests.shared.services.telemetry_capture import Telemetry, telemetry  # noqa: F401  (the fixture)

WORKER_CPU = "3"  # one per D4 (3860m allocatable, 150m of DaemonSets), never two


def _scenario(*, initial: int, max_size: int) -> dict[str, Any]:
    return {
        "name": "provreq-unit", "cluster_name": "sandbox", "duration": "60m",
        "boot_delay": {"median": "60s", "p95": "90s", "min": "45s", "max": "120s"},
        "node_groups": [{
            "resource_group": "rg-sandbox-nodes", "name": "pool-d4", "vm_size": "Standard_D4s_v5",
            "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110},
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": 110}, "min": 0, "max": max_size, "initial": initial,
        }],
        "daemonsets": [{"name": "kube-proxy", "namespace": "kube-system",
                        "requests": {"cpu": "150m", "memory": "128Mi"}}],
        "workloads": [],
    }


def _app(*, klass: str, count: int, initial: int = 2, max_size: int = 10, settings: dict[str, str] | None = None,
         parameters: dict[str, str] | None = None) -> MemoryApp:
    app = memory_app(_scenario(initial=initial, max_size=max_size),
                     settings={"SCALE_DOWN_IDLE_MODE": "fixed", **(settings or {})})
    templates.create_pod_template(app.world, "default", {"metadata": {"name": "worker"}, "template": {"spec": {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": WORKER_CPU, "memory": "1Gi"}}}]}}})
    spec: dict[str, Any] = {"provisioningClassName": klass,
                            "podSets": [{"podTemplateRef": {"name": "worker"}, "count": count}]}
    if parameters:
        spec["parameters"] = parameters
    store.create_provisioning_request(app.world, "default", {"metadata": {"name": "gang"}, "spec": spec})
    return app


def _request(app: MemoryApp) -> dict[str, Any]:
    found = store.get_provisioning_request(app.world, "default", "gang")
    assert found is not None
    return found


def _conditions(app: MemoryApp) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in (_request(app).get("status") or {}).get("conditions", ())}


def _poll(app: MemoryApp, seconds: float = 10) -> Any:
    app.clock.advance(seconds)
    return run_pending_poll(app.ports, app.settings, now=app.clock.now())


def _atomic_actions(app: MemoryApp) -> list[AtomicScaleUp]:
    return [action for action in map(decode_action, app.queued()) if isinstance(action, AtomicScaleUp)]


def _add_pod(app: MemoryApp, name: str, *, annotations: dict[str, str] | None = None) -> None:
    app.world.k8s_create("pods", "default", {"metadata": {"name": name, "annotations": annotations or {}}, "spec": {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": WORKER_CPU, "memory": "1Gi"}}}]}})


def test_check_capacity_that_fits_is_booked_kept_from_scale_down_and_released_when_it_expires() -> None:
    app = _app(klass=CHECK_CAPACITY_CLASS, count=2)
    result = _poll(app)
    assert _conditions(app)["Provisioned"] == ("True", "CapacityIsFound")
    assert _conditions(app)["Accepted"] == ("True", "Accepted")
    assert not result.plan.increases and not app.queued()
    assert result.provisioning_requests["default/gang"]["state"] == "provisioned"
    # Booked: both nodes hold its pods, so neither is unneeded.
    down = run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert not down.plan.unneeded
    app.clock.advance(600)
    _poll(app, 0)
    assert _conditions(app)["BookingExpired"] == ("True", BOOKING_EXPIRED_REASON)
    down = run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert len(down.plan.unneeded) == 2


def test_a_booking_whose_pods_ran_and_finished_holds_no_room_again() -> None:
    # Finished pods are not listed: the request's details remember how many consumed it.
    app = _app(klass=CHECK_CAPACITY_CLASS, count=2)
    _poll(app)
    assert _conditions(app)["Provisioned"] == ("True", "CapacityIsFound")
    consume = {CONSUME_PROVISIONING_REQUEST: "gang"}
    for name in ("w-0", "w-1"):
        _add_pod(app, name, annotations=consume)
    _poll(app)
    details = (_request(app).get("status") or {}).get("provisioningClassDetails") or {}
    assert details.get(engine.CONSUMED_DETAIL) == "2"
    for name in ("w-0", "w-1"):
        app.world.k8s_delete("pods", "default", name)
    _poll(app)
    # Still within its booking, yet no placeholder holds the nodes: both are unneeded.
    assert "BookingExpired" not in _conditions(app)
    down = run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert len(down.plan.unneeded) == 2


@pytest.mark.parametrize("phase", [engine.BOOKED, engine.IN_FLIGHT])
def test_an_ordinary_pending_pod_is_not_planned_onto_booked_room(phase: str) -> None:
    # The planner's view only: the scheduler does not know the booking (as with cluster-autoscaler).
    settings = _app(klass=CHECK_CAPACITY_CLASS, count=1).settings
    shape = BufferTemplate(replace(pod("shape", cpu=3, mem=1), namespace="", name=""), "worker")
    booked = ProvisioningRequest("default", "gang", CHECK_CAPACITY_CLASS, (PodSet("worker", 1),), T0, uid="u")
    world = snapshot(nodes=[node("n0")], pods=[pod("waiting", cpu=3, pending=True)], groups=[group(target=1)])
    requests = Requests((engine.resolve(booked, {"worker": shape}),), {booked.key: phase})
    options = ScaleUpOptions()
    assert not plan_scale_up(world, options=options).increases  # without the request: the free room takes it
    decided = plan_requests(None, settings, world, requests, options=options, now=T0)  # type: ignore[arg-type]
    plan = plan_scale_up(decided.snapshot, options=options)
    assert [(i.delta, i.pods) for i in plan.increases] == [(1, ("default/waiting",))]


@pytest.mark.parametrize(("no_retry", "condition"), [(False, ("Provisioned", "False")), (True, ("Failed", "True"))])
def test_check_capacity_that_does_not_fit_asks_for_nothing(no_retry: bool, condition: tuple[str, str]) -> None:
    app = _app(klass=CHECK_CAPACITY_CLASS, count=3, parameters={"noRetry": "true"} if no_retry else None)
    result = _poll(app)
    assert not result.plan.increases and not app.queued()
    type_, status = condition
    assert _conditions(app)[type_] == (status, "CapacityIsNotFound")


def test_an_atomic_request_is_asked_for_whole_once() -> None:
    app = _app(klass=ATOMIC_SCALE_UP_CLASS, count=5, initial=2)
    result = _poll(app)
    actions = _atomic_actions(app)
    assert len(actions) == 1 and not result.plan.increases
    parts = actions[0].parts
    assert sum(n for _, n in parts) == 3 and len(parts) == 1  # two pods take the two nodes there are
    assert _conditions(app)["Provisioned"] == ("False", "ScaleUpInProgress")
    app.clear_queue()
    again = _poll(app)
    assert not _atomic_actions(app) and not again.plan.increases


def test_an_attempt_azure_refused_for_quota_is_followed_by_the_next_attempt_not_a_failure() -> None:
    # The poll does not read quotas here (QUOTA_AWARE=false); Azure's family quota (8 vCPUs) refuses 3 D4s whole.
    app = _app(klass=ATOMIC_SCALE_UP_CLASS, count=3, initial=0, settings={"QUOTA_AWARE": "false"})
    app.world._quota_limits["standarddsv5family"] = ("standardDSv5Family", 8)  # noqa: SLF001 - the scenario's quota
    executor = Executor(app.ports, app.settings)
    _poll(app)
    (first,) = _atomic_actions(app)
    for text in app.take_queued():
        executor.execute(text, now=app.clock.now())
    for _ in range(3):  # check, then resize (refused): the attempt ends
        app.clock.advance(10)
        for text in app.take_queued():
            executor.execute(text, now=app.clock.now())
    assert _conditions(app)["Provisioned"] == ("False", "CapacityIsNotFound") and "Failed" not in _conditions(app)
    app.clock.advance(11 * 60)  # past the family's refusal mark
    _poll(app, 0)
    (second,) = _atomic_actions(app)
    assert second.id == f"{first.id}:2" and second.request_uid == first.request_uid
    details = (_request(app).get("status") or {}).get("provisioningClassDetails") or {}
    assert details.get(engine.ATTEMPT_DETAIL) == "2"
    assert _conditions(app)["Provisioned"] == ("False", "ScaleUpInProgress")
    app.take_queued()
    _poll(app)
    assert not _atomic_actions(app)  # asked: not planned a third time while it is in flight


def test_a_dry_run_asks_for_an_atomic_request_once_and_never_plans_another_attempt() -> None:
    app = _app(klass=ATOMIC_SCALE_UP_CLASS, count=3, initial=0, settings={"DRY_RUN": "true"})
    executor = Executor(app.ports, app.settings)
    sent: list[str] = []
    for _ in range(6):
        _poll(app)
        for text in app.take_queued():
            sent.append(decode_action(text).id)
            executor.execute(text, now=app.clock.now())
    assert len(set(sent)) == 1 and not sent[0].endswith(":2")
    assert not (_request(app).get("status") or {}).get("conditions")  # a dry run writes no status


def test_an_atomic_request_beyond_max_is_refused_and_boots_nothing() -> None:
    app = _app(klass=ATOMIC_SCALE_UP_CLASS, count=4, initial=0, max_size=3)
    result = _poll(app)
    assert not app.queued() and not result.plan.increases
    status, reason = _conditions(app)["Failed"]
    assert (status, reason) == ("True", "QuotaExceeded")
    message = next(c["message"] for c in _request(app)["status"]["conditions"] if c["type"] == "Failed")
    assert "max size" in message and "3 of 4" in message


def test_pods_consuming_a_live_request_are_not_planned_but_a_missing_request_is_ordinary() -> None:
    app = _app(klass=CHECK_CAPACITY_CLASS, count=3, initial=0)
    _poll(app)
    _add_pod(app, "consumer", annotations={CONSUME_PROVISIONING_REQUEST: "gang"})
    _add_pod(app, "stray", annotations={CONSUME_PROVISIONING_REQUEST: "no-such-request"})
    app.clock.advance(5)
    result = _poll(app)
    planned = {key for i in result.plan.increases for key in i.pods}
    assert "default/stray" in planned and "default/consumer" not in planned


@pytest.mark.parametrize("settings", [{"DRY_RUN": "true"}, {"PROVISIONING_REQUESTS": "false"}])
def test_nothing_is_written_in_dry_run_or_when_off(settings: dict[str, str]) -> None:
    app = _app(klass=CHECK_CAPACITY_CLASS, count=1, settings=settings)
    _poll(app)
    assert not (_request(app).get("status") or {}).get("conditions")


def test_a_status_is_written_only_when_it_changes() -> None:
    app = _app(klass=CHECK_CAPACITY_CLASS, count=3)
    _poll(app)
    version = _request(app)["metadata"]["resourceVersion"]
    for _ in range(3):
        _poll(app)
    assert _request(app)["metadata"]["resourceVersion"] == version


def test_status_configmap_and_plan_show_the_request_and_its_atomic_scale_up() -> None:
    app = _app(klass=ATOMIC_SCALE_UP_CLASS, count=4, initial=1)
    app.clock.advance(10)
    report = plan_now(app.ports, app.settings, now=app.clock.now(), state=None)
    data = report.as_dict()
    line = data["provisioning_requests"]["default/gang"]
    assert line["class"] == "atomic-scale-up" and line["pods"] == 4 and line["state"] == "in-progress"
    atomic = [a for a in data["actions"] if "parts" in a]
    assert [a["request"] for a in atomic] == ["default/gang"] and sum(n for _, n in atomic[0]["parts"]) == 3
    text = render_text(report)
    assert "default/gang: atomic-scale-up" in text and "+3" in text
    assert not (_request(app).get("status") or {}).get("conditions")  # plan writes nothing
    _poll(app, 0)
    namespace, name = app.settings.status_configmap or ("", "")
    doc = yaml_text.safe_load(app.world.k8s_get("configmaps", namespace, name)["data"]["status"])
    shown = doc["clusterWide"]["provisioningRequests"]["default/gang"]
    assert shown["conditions"] == {c: f"{s} ({r})" for c, (s, r) in _conditions(app).items()}


def test_nodes_on_their_way_for_an_in_flight_request_are_its_own_and_targets_stay_absolute() -> None:
    settings = _app(klass=ATOMIC_SCALE_UP_CLASS, count=1).settings
    shape = BufferTemplate(replace(pod("shape", cpu=3, mem=1), namespace="", name=""), "worker")
    gang = ProvisioningRequest("default", "gang", ATOMIC_SCALE_UP_CLASS, (PodSet("worker", 2),), T0, uid="u")
    full = pod("busy", cpu=3.5, node_name="n0")
    world = snapshot(nodes=[node("n0")], pods=[full, pod("waiting", cpu=3, pending=True)],
                     groups=[group(target=3, max_size=10)])  # two nodes on their way
    options = ScaleUpOptions()
    assert not plan_scale_up(world, options=options).increases  # alone, the pod takes a node on its way
    requests = Requests((engine.resolve(gang, {"worker": shape}),), {gang.key: engine.IN_FLIGHT})
    decided = plan_requests(None, settings, world, requests, options=options, now=T0)  # type: ignore[arg-type]
    assert decided.held == {"rg/pool": 2}
    plan = engine.restore_targets(plan_scale_up(decided.snapshot, options=options), decided.held)
    assert [(i.current_target, i.new_target, i.pods) for i in plan.increases] == [(3, 4, ("default/waiting",))]


def test_the_gauge_counts_requests_by_state(telemetry: Telemetry) -> None:  # noqa: F811
    app = _app(klass=ATOMIC_SCALE_UP_CLASS, count=4, initial=0, max_size=3)
    _poll(app)
    assert telemetry.last("vmss_autoscaler_provisioning_requests", state="failed") == 1
    store.create_provisioning_request(app.world, "default", {"metadata": {"name": "probe"}, "spec": {
        "provisioningClassName": CHECK_CAPACITY_CLASS, "podSets": [{"podTemplateRef": {"name": "worker"}, "count": 1}]}})
    _poll(app)
    assert telemetry.last("vmss_autoscaler_provisioning_requests", state="pending") == 1
    assert telemetry.last("vmss_autoscaler_provisioning_requests", state="failed") == 1


@pytest.mark.parametrize(("transient", "failed"), [(True, False), (False, True)])
def test_a_template_read_that_fails_for_now_leaves_the_request_alone_and_one_that_cannot_fails_it(
        monkeypatch: pytest.MonkeyPatch, transient: bool, failed: bool) -> None:
    app = _app(klass=CHECK_CAPACITY_CLASS, count=1)

    def refuse(*args: object, **kwargs: object) -> None:
        raise ClusterError("GET podtemplates default/worker: 503" if transient else "forbidden", transient=transient)

    monkeypatch.setattr(app.ports.cluster, "get_pod_template", refuse)
    _poll(app)
    assert ("Failed" in _conditions(app)) is failed and "Provisioned" not in _conditions(app)
    if failed:
        assert _conditions(app)["Failed"] == ("True", "InvalidRequest")
