"""The pending poll with a virtual node: ACI's pods are demand, the gate closes and opens with ACI's use, pods
on ACI carry a low deletion cost, and placed pods are moved back by backfill actions the executor carries out.
In-memory ports over a real world (the sandbox's virtual node and scheduler)."""

from __future__ import annotations

from typing import Any

from shared.actions import Backfill, decode_message
from shared.engine.virtual_nodes import CLOSED_TAINT_KEY, DELETION_COST_ANNOTATION, VIRTUAL_NODE_DELETION_COST
from shared.services.pending import run_pending_poll
from tests.memory_app import MemoryApp, memory_app
from tests.shared.services.telemetry_capture import Telemetry, telemetry  # noqa: F401  (the fixture)

VN = "virtual-node-aci-linux"
TOLERATE = [{"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}]
PREFER_VMS = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
    "matchExpressions": [{"key": "type", "operator": "NotIn", "values": ["virtual-kubelet"]}]}}]}}


def _app(*workloads: dict[str, Any], quota: int = 100, boot: str = "60s", admission: str = "polled") -> MemoryApp:
    return memory_app({
        "name": "vn", "cluster_name": "vn", "arm_throttling": False, "boot_delay": boot, "delete_delay": "20s",
        "virtual_node": {"quota_cores": quota, "start_latency": "20s"},
        "node_groups": [{"resource_group": "rg-vn", "name": "pool", "vm_size": "Standard_D4s_v5",
                         "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110},
                         "min": 1, "max": 10, "initial": 1}],
        "workloads": [{"tolerations": TOLERATE, "affinity": PREFER_VMS, **workload} for workload in workloads],
    }, settings={"ARM_OPERATION_WAIT": "0s", "STEP_RETRY_DELAY": "0s", "VIRTUAL_NODE_ADMISSION": admission})


def _on(app: MemoryApp, node: str) -> list[Any]:
    return [p for p in app.ports.cluster.list_pods() if p.node_name == node and p.owner is not None]


def test_a_deployment_bursts_onto_aci_grows_the_scale_set_and_moves_back() -> None:
    app = _app({"name": "web", "kind": "ReplicaSet", "count": 12, "at": "5s", "spread": "0s",
                "requests": {"cpu": "1", "memory": "2Gi"}})
    app.clock.advance(40)
    on_aci = _on(app, VN)
    assert len(on_aci) >= 9  # the one VM takes three; the rest overflow to the virtual node
    first = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    (increase,) = first.plan.increases
    assert set(increase.pods) == {p.key for p in on_aci}  # demand hiding on ACI grows the scale set
    assert first.virtual.count("backfill") == len(on_aci)
    assert all(p.annotations.get(DELETION_COST_ANNOTATION) == VIRTUAL_NODE_DELETION_COST for p in _on(app, VN))
    assert sum(1 for e in app.events() if e.reason == "BurstToVirtualNode") == len(on_aci)
    app.run_actions()  # the scale-up
    app.clock.advance(90)  # the new VMs boot and are Ready
    moved: list[str] = []
    for _ in range(6):
        result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
        assert not result.plan.increases  # nothing asked twice: the VMs on their way are counted
        outcomes = app.run_actions()
        moved += [o.action_id for o in outcomes if o.outcome == "succeeded" and o.action_id.startswith("backfill:")]
        app.clock.advance(30)
    assert _on(app, VN) == []  # every replica runs on a VM now
    assert len(moved) == len(on_aci)
    assert sum(1 for e in app.events() if e.reason == "Backfill") == len(on_aci)


def test_jobs_on_aci_are_not_demand_and_never_moved() -> None:
    app = _app({"name": "render", "kind": "Job", "count": 10, "at": "5s", "spread": "0s",
                "requests": {"cpu": "1", "memory": "1Gi"}, "duration": "10m"})
    app.clock.advance(40)
    assert len(_on(app, VN)) >= 7
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert result.plan.increases == ()
    assert {d.verdict for d in result.virtual.decisions} == {"stays"}
    assert [decode_message(t) for t in app.take_queued()] == []


def test_the_gate_closes_near_the_quota_so_overflow_pends_and_grows_the_scale_set() -> None:
    job = {"kind": "Job", "spread": "0s", "requests": {"cpu": "1", "memory": "1Gi"}, "duration": "20m"}
    app = _app({"name": "first", "count": 6, "at": "5s", **job}, {"name": "second", "count": 2, "at": "60s", **job},
               quota=3)
    app.clock.advance(40)
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert result.virtual.gate.closed and "cores 3 of 3" in result.virtual.gate.why
    node = app.ports.cluster.get_node(VN)
    assert node is not None and any(t.key == CLOSED_TAINT_KEY for t in node.taints)
    assert [e.reason for e in app.events() if e.kind == "Node"] == ["VirtualNodeClosed"]
    # The second wave finds the virtual node closed (not refused by ACI): it pends and grows the scale set.
    app.clock.advance(30)
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert result.pending == 2 and result.plan.increases
    assert app.world.report()["virtual_node"]["pods_refused"]["quota"] == 0


def test_the_gate_opens_again_when_aci_has_room() -> None:
    app = _app({"name": "render", "kind": "Job", "count": 6, "at": "5s", "spread": "0s",
                "requests": {"cpu": "1", "memory": "1Gi"}, "duration": "2m"}, quota=3, admission="open")
    app.clock.advance(40)
    assert run_pending_poll(app.ports, app.settings, now=app.clock.now()).virtual.gate.closed
    app.clock.advance(200)  # the Jobs on ACI finished: their container groups are gone
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert not result.virtual.gate.closed
    node = app.ports.cluster.get_node(VN)
    assert node is not None and not any(t.key == CLOSED_TAINT_KEY for t in node.taints)
    assert [e.reason for e in app.events() if e.kind == "Node"] == ["VirtualNodeClosed", "VirtualNodeOpened"]


def _vm_ready_for_six_on_aci() -> MemoryApp:
    """Six replicas, three overflowed onto ACI; the scale-up they caused has a Ready VM now (the virtual node
    left open)."""
    app = _app({"name": "web", "kind": "ReplicaSet", "count": 6, "at": "5s", "spread": "0s",
                "requests": {"cpu": "1", "memory": "2Gi"}}, boot="30s", admission="open")
    app.clock.advance(40)
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    app.run_actions()
    app.clock.advance(60)
    return app


def test_backfill_actions_decode_as_the_kind_they_are() -> None:
    app = _vm_ready_for_six_on_aci()
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    sent = [decode_message(t) for t in app.take_queued()]
    assert sent and all(isinstance(a, Backfill) and a.group == VN for a in sent)


def test_plan_shows_the_virtual_node_its_pods_decisions_and_the_moves() -> None:
    from shared.services.plan import plan_now, render_text

    app = _vm_ready_for_six_on_aci()  # the plan would move pods back
    report = plan_now(app.ports, app.settings, now=app.clock.now(), state=None)
    data = report.as_dict()
    assert {"group": VN, "backend": "virtual-node", "vm_size": "ACI", "min": 0, "max": 0, "capacity": 0} in data["groups"]
    assert data["virtual_nodes"]["pods"] == len(_on(app, VN)) and not data["virtual_nodes"]["closed"]
    assert all(d.startswith("backfill: ") for d in data["virtual_nodes"]["decisions"].values())
    moves = [a for a in data["actions"] if a["kind"] == "backfill"]
    assert moves and all(a["group"] == VN and a["to"] for a in moves)
    text = render_text(report)
    assert f"virtual nodes {VN}:" in text and "move back onto VMs:" in text
    assert _on(app, VN) and app.take_queued() == []  # a plan moves nothing


def test_polled_admission_lets_a_burst_that_fits_in_after_one_poll_and_keeps_a_larger_one_out() -> None:
    job = {"kind": "Job", "spread": "0s", "requests": {"cpu": "1", "memory": "1Gi"}, "duration": "20m"}
    app = memory_app({
        "name": "vn", "cluster_name": "vn", "arm_throttling": False, "boot_delay": "60s",
        "virtual_node": {"quota_cores": 10, "start_latency": "20s"},
        "node_groups": [{"resource_group": "rg-vn", "name": "pool", "vm_size": "Standard_D4s_v5",
                         "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110},
                         "min": 1, "max": 10, "initial": 1}],
        "workloads": [{"tolerations": TOLERATE, "affinity": PREFER_VMS, **w} for w in (
            {"name": "small", "count": 9, "at": "40s", **job}, {"name": "large", "count": 20, "at": "100s", **job})],
    }, settings={"VIRTUAL_NODE_ADMISSION": "polled"})
    app.clock.advance(30)
    assert run_pending_poll(app.ports, app.settings, now=app.clock.now()).virtual.gate.closed  # nothing waits yet
    node = app.ports.cluster.get_node(VN)
    assert node is not None and [(t.key, t.value) for t in node.taints if t.key == CLOSED_TAINT_KEY] == [
        (CLOSED_TAINT_KEY, "admission")]  # closed between admissions: the taint's value says so
    assert not [e for e in app.events() if e.kind == "Node"]  # routine: no event
    app.clock.advance(30)  # the small burst arrived while closed: the VM took three, six wait
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert not result.virtual.gate.closed and "room for the 6 pod(s)" in result.virtual.gate.why
    app.clock.advance(30)
    assert len(_on(app, VN)) == 6  # admitted at once when the taint was lifted
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert result.virtual.gate.closed  # admitted: closed again before the large burst
    app.clock.advance(30)  # the large burst (20 cores) arrives: 6 + 20 would not fit 10 cores
    result = run_pending_poll(app.ports, app.settings, now=app.clock.now())
    assert result.virtual.gate.closed and result.pending == 20 and result.plan.increases
    assert app.world.report()["virtual_node"]["pods_refused"] == {"quota": 0, "rate": 0, "unsupported": 0}


def test_the_polls_trace_and_metrics_carry_the_virtual_node_decisions(telemetry: Telemetry) -> None:
    app = _app({"name": "web", "kind": "ReplicaSet", "count": 8, "at": "5s", "spread": "0s",
                "requests": {"cpu": "1", "memory": "2Gi"}}, admission="open")
    app.clock.advance(40)
    on_aci = len(_on(app, VN))
    run_pending_poll(app.ports, app.settings, now=app.clock.now())
    (span,) = telemetry.spans_named("poll_pending_pods")
    attributes = dict(span.attributes or {})
    assert attributes["autoscaler.virtual_nodes.backfill"] == on_aci
    assert attributes["autoscaler.virtual_nodes.closed"] is False
    assert "ACI has room" in attributes["autoscaler.virtual_nodes.gate"]
    assert telemetry.last("vmss_autoscaler_aci_pods") == on_aci
    assert telemetry.last("vmss_autoscaler_aci_cores") == on_aci  # 1 CPU each
    assert telemetry.last("vmss_autoscaler_aci_core_quota") == 100
