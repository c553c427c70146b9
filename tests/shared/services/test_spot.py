"""Spot and quota through the services: the fallback within the same poll, partial scale-ups within quota,
evictions seen from the scale set, and the Preempt notice. In-memory ports over the sandbox's world."""

from __future__ import annotations

from typing import Any

import pytest

from shared.actions import ScaleUp, decode_message
from shared.engine.spot import DELETED, NOTICE
from shared.services.executor import Executor
from shared.services.pending import run_pending_poll
from shared.services.preemption import handle_scheduled_event
from shared.services.spot import PREEMPTED_TAINT
from tests.memory_app import MemoryApp, memory_app

SETTINGS = {"ARM_OPERATION_WAIT": "0s", "STEP_RETRY_DELAY": "0s"}


def _scale_ups(texts: list[str]) -> dict[str, int]:
    """Group name -> target of the scale-up actions among the texts."""
    actions = [decode_message(t) for t in texts]
    return {a.group.rsplit("/", 1)[-1]: a.target_size for a in actions if isinstance(a, ScaleUp)}


def _execute_all(app: MemoryApp, *, rounds: int = 30) -> list[str]:
    """Run every action to its end; the texts of the scale-ups sent meanwhile (re-plans included)."""
    executor, sent = Executor(app.ports, app.settings), []
    for _ in range(rounds):
        texts = app.take_queued()
        if not texts:
            break
        sent += texts
        for text in texts:
            executor.execute(text, now=app.clock.now())
        app.clock.advance(5)
    return sent


def test_a_spot_refusal_falls_back_to_on_demand_before_the_next_poll() -> None:
    app = memory_app("spot-fallback", settings=SETTINGS)
    app.clock.advance(65)  # every Job is pending; the next scheduled poll is 30 s away
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    first = app.take_queued()
    assert _scale_ups(first) == {"pool-spot": 6}  # spot first for pods that tolerate it
    started = app.clock.now()
    executor = Executor(app.ports, app.settings)
    for text in first:
        executor.execute(text, now=app.clock.now())  # Azure refuses: SkuNotAvailable, and the executor re-plans
    fallback = app.take_queued()
    assert _scale_ups(fallback) == {"pool-od": 6}  # the same pods, on demand, without waiting for a poll
    assert app.clock.now() == started  # in the same invocation: no poll in between
    [mark] = app.ports.state.list_offerings()
    assert (mark.key.scope, mark.key.priority, mark.kind) == ("size", "Spot", "spot-capacity")
    # While the mark lives, later polls never ask the spot group again.
    _execute_all(app)
    app.clock.advance(30)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert "pool-spot" not in _scale_ups(app.queued())


def test_a_partial_scale_up_takes_what_the_quota_allows_and_the_rest_goes_elsewhere() -> None:
    app = memory_app("quota-partial", settings=SETTINGS)
    app.clock.advance(60)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert _scale_ups(app.queued()) == {"pool-d4": 3, "pool-e4": 7}
    _execute_all(app)
    report = app.world.report()["quota"]
    assert report["refused_requests"] == 0 and report["peak_usage"]["standardDSv5Family"] <= 14


def _spot_app(**settings: str) -> MemoryApp:
    app = memory_app("spot-eviction", settings={**SETTINGS, **settings})
    app.clock.advance(60)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    _execute_all(app)
    app.clock.advance(300)  # the nodes are up, the Jobs run
    return app


def _spot_nodes(app: MemoryApp) -> dict[str, Any]:
    return {n.name: n for n in app.ports.cluster.list_nodes() if n.name.startswith("pool-spot")}


def test_an_eviction_without_notice_is_seen_within_a_poll_and_replaced_at_once() -> None:
    app = _spot_app()
    before = _spot_nodes(app)
    app.clock.advance(13 * 60 - 360 + 1)  # the scenario's second eviction (13 min) has happened; the first too
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    gone = {e.node for e in result.evictions if e.how == DELETED}
    assert gone and gone <= set(before)
    assert not gone & set(_spot_nodes(app))  # the Node objects left behind are deleted in the same poll
    assert sum(_scale_ups(app.queued()).values()) >= 1  # replacements asked for in the same poll


@pytest.mark.parametrize("batch_pods", ["keep", "evict"])
def test_a_preempt_notice_cordons_evicts_and_asks_for_the_replacement_before_the_vm_goes(batch_pods: str) -> None:
    app = _spot_app(SPOT_NOTICE_BATCH_PODS=batch_pods)
    node = sorted(_spot_nodes(app))[-1]
    group = app.world.scale_set(app.world.subscription_id, "rg-sandbox-nodes", "pool-spot")
    instance_id = node.removeprefix("pool-spot").lstrip("0") or "0"
    vm = (f"/subscriptions/{app.world.subscription_id}/resourceGroups/rg-sandbox-nodes/providers/"
          f"Microsoft.Compute/virtualMachineScaleSets/pool-spot/virtualMachines/{instance_id}")
    capacity = group.capacity
    event = {"id": "e1", "subject": vm, "eventType": "Microsoft.Maintenance.ScheduledEventCreated",
             "data": {"EventType": "Preempt", "Resources": [f"pool-spot_{instance_id}"]}}
    result = handle_scheduled_event(app.ports, app.settings, event, now=app.clock.now())
    assert result.outcome == "acted" and result.nodes == (node,)
    cordoned = app.ports.cluster.get_node(node)
    assert cordoned is not None and cordoned.unschedulable
    assert any(t.key == PREEMPTED_TAINT.key for t in cordoned.taints)
    # The node's pods are Jobs: left to finish (`keep`, the default) or evicted with the rest (`evict`).
    pods = [p for p in app.ports.cluster.list_pods_on_node(node) if not p.is_daemonset]
    jobs = [p for p in pods if p.owner is not None and p.owner.kind == "Job"]
    assert jobs and all(p.terminating == (batch_pods == "evict") for p in jobs)
    assert all(p.terminating for p in pods if p not in jobs)  # the web pod goes at once either way
    # The replacement's capacity is asked for now, on demand: Azure is taking this size's spot capacity back, so the
    # notice marks that offering for a while (a spot request would likely be refused, maybe after the VM is gone).
    assert _scale_ups(app.queued()) == {"pool-od": 1}
    assert [(m.kind, m.key.name, m.key.priority) for m in app.ports.state.list_offerings()] == [
        ("spot-preempted", "standard_d4s_v5", "Spot")]
    assert group.capacity == capacity  # the spot group was not asked for more
    # A poll before the VM goes sees the node as going and asks for nothing more.
    app.take_queued()
    again = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert {e.how for e in again.evictions} == {NOTICE}
    assert "pool-spot" not in _scale_ups(app.queued()) and _scale_ups(app.queued()).get("pool-od", 1) <= 1


def test_a_notice_for_a_vm_that_is_not_ours_is_ignored() -> None:
    app = _spot_app()
    event = {"id": "e2", "subject": "/subscriptions/x/resourceGroups/other/providers/Microsoft.Compute/"
             "virtualMachines/someone-elses", "data": {"EventType": "Preempt", "Resources": ["someone-elses"]}}
    assert handle_scheduled_event(app.ports, app.settings, event, now=app.clock.now()).outcome == "ignored"
    assert not any(n.unschedulable for n in _spot_nodes(app).values())
    freeze = {"id": "e3", "subject": "", "data": {"EventType": "Freeze", "Resources": ["pool-spot_0"]}}
    assert handle_scheduled_event(app.ports, app.settings, freeze, now=app.clock.now()).outcome == "ignored"


def test_an_agents_signal_is_handled_as_a_notice_and_a_dry_run_touches_nothing() -> None:
    from shared.domain import Taint

    for dry_run in ("true", "false"):
        app = memory_app("spot-eviction", settings={**SETTINGS, "SPOT_EVICTION_SIGNAL": "taint:example.com/evicting",
                                                    "DRY_RUN": dry_run})
        app.clock.advance(60)
        if dry_run == "true":
            # Dry run plans but never acts: grow the set by hand so there are nodes to signal.
            group = app.world.scale_set(app.world.subscription_id, "rg-sandbox-nodes", "pool-spot")
            app.world.set_capacity(group, 2)
        else:
            run_pending_poll(app.ports, app.settings, now=app.clock.now())
            _execute_all(app)
        app.clock.advance(300)
        node = sorted(_spot_nodes(app))[0]
        app.ports.cluster.add_taint(node, taint=Taint("example.com/evicting"))
        result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
        assert {e.node: e.how for e in result.evictions} == {node: "signal"}
        seen = app.ports.cluster.get_node(node)
        assert seen is not None
        if dry_run == "true":
            assert not seen.unschedulable and not any(p.terminating for p in app.ports.cluster.list_pods_on_node(node))
        else:
            assert seen.unschedulable and any(t.key == PREEMPTED_TAINT.key for t in seen.taints)
            # Its replacement goes to the spot group: a node under a signal is no template for its group.
            assert "pool-spot" in _scale_ups(app.queued())


def test_a_notice_before_the_node_registers_is_held_until_the_node_comes_and_the_vm_goes() -> None:
    app = memory_app("spot-eviction", settings=SETTINGS)
    app.clock.advance(60)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    _execute_all(app, rounds=2)  # the set is grown; its VMs boot for 90-150 s
    assert not _spot_nodes(app)
    group_id = "rg-sandbox-nodes/pool-spot"
    event = {"id": "e4", "subject": "", "data": {"EventType": "Preempt", "Resources": ["pool-spot_5"],
                                                  "NotBefore": "Mon, 07 Jan 2030 09:30:00 GMT"}}
    result = handle_scheduled_event(app.ports, app.settings, event, now=app.clock.now())
    assert result.outcome == "acted" and result.nodes == ()
    assert set(app.ports.state.get_group(group_id).preempted) == {"5"}
    # Its replacement, before the node even exists: on demand, the size's spot capacity being what Azure takes back.
    asked = _scale_ups(app.take_queued())  # with the confirm step of the set's own growth to 6, still running
    assert asked.get("pool-od") == 1 and asked.get("pool-spot", 6) == 6
    app.clock.advance(240)  # the node registers: the next poll drains it
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    noticed = next(n for n in _spot_nodes(app).values() if n.name == "pool-spot000005")
    assert noticed.unschedulable and any(t.key == PREEMPTED_TAINT.key for t in noticed.taints)
    # Once the VM is gone the notice is forgotten.
    group = app.world.scale_set(app.world.subscription_id, "rg-sandbox-nodes", "pool-spot")
    app.world.delete_instances(group, ["5"])
    app.clock.advance(120)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert app.ports.state.get_group(group_id).preempted == {}


@pytest.mark.parametrize("event,kind,vms", [
    ({"subject": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/p/virtualMachines/3",
      "data": {"EventType": "Preempt", "Resources": ["p_3"]}}, "Preempt",
     ["p_3", "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/p/virtualMachines/3"]),
    ({"subject": "", "data": {"eventtype": "Preempt", "resources": ["vm1", 7]}}, "Preempt", ["vm1"]),  # any case
    ({"subject": "x", "data": "not an object"}, "", []),
    ({"data": {"EventType": "Reboot"}}, "Reboot", []),
])
def test_what_a_scheduled_event_names(event: dict[str, Any], kind: str, vms: list[str]) -> None:
    from shared.services.preemption import named_vms

    assert named_vms(event) == (kind, vms)


def test_the_notice_time_is_its_not_before_or_thirty_seconds() -> None:
    from datetime import UTC, datetime, timedelta

    from shared.services.preemption import not_before

    now = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
    assert not_before({"data": {"NotBefore": "Mon, 07 Jan 2030 09:00:45 GMT"}}, now=now) == now + timedelta(seconds=45)
    assert not_before({"data": {"NotBefore": "soon"}}, now=now) == now + timedelta(seconds=30)
    assert not_before({"data": {}}, now=now) == now + timedelta(seconds=30)
