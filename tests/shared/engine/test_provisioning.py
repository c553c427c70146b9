"""engine.provisioning: placeholders never collide with real pods, booking and consumption, existing room only for
check-capacity, and an atomic request planned whole in one group or refused with the binding limit named."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import (
    ATOMIC_SCALE_UP_CLASS,
    CHECK_CAPACITY_CLASS,
    CONSUME_PROVISIONING_REQUEST,
    BufferTemplate,
    Condition,
    PodSet,
    ProvisioningRequest,
)
from shared.engine import provisioning as engine
from shared.engine.limits import ClusterLimits
from shared.engine.provisioning_conditions import (
    BOOKING_EXPIRED,
    BOOKING_EXPIRED_REASON,
    EXPIRED_REASON,
    CAPACITY_IS_NOT_FOUND,
    FAILED,
    PROVISIONED,
    QUOTA_EXCEEDED,
    SCALE_UP_IN_PROGRESS,
)
from shared.engine.quota import REGIONAL, Quota
from shared.engine.scale_up import ScaleUpOptions, plan_scale_up
from tests.builders import T0, group, node, pod, res, snapshot, template

BOOKING = timedelta(minutes=10)
GPU_NODE = res(32, 200, 110, gpu=4)
WORKER = BufferTemplate(replace(pod("shape", cpu=8, mem=32, requests=res(8, 32, gpu=4)), namespace="", name=""),
                        "worker")
SMALL = BufferTemplate(replace(pod("shape", cpu=1, mem=1), namespace="", name=""), "small")


def request(name: str = "train", *, klass: str = ATOMIC_SCALE_UP_CLASS, count: int = 4, template_name: str = "worker",
            conditions: tuple[Condition, ...] = (), parameters: dict[str, str] | None = None,
            problem: str = "") -> ProvisioningRequest:
    return ProvisioningRequest("ml", name, klass, (PodSet(template_name, count),), T0 - timedelta(minutes=1),
                               uid=f"uid-{name}", generation=1, parameters=parameters or {}, conditions=conditions,
                               problem=problem)


def resolved(req: ProvisioningRequest) -> engine.ResolvedRequest:
    return engine.resolve(req, {"worker": WORKER, "small": SMALL})


def gpu_world(*, max_size: int = 10, nodes: int = 0, location: str = "westeurope"):
    g = group("gpu", target=nodes, max_size=max_size, vm_size="Standard_NC24ads_A100_v4", location=location)
    return snapshot(nodes=[node(f"gpu-{i}", group_name="gpu", instance=i, alloc=GPU_NODE) for i in range(nodes)],
                    groups=[g], templates={g.id: template(GPU_NODE)})


@pytest.mark.parametrize("name", ["train", "a.b-c", "x"])
@pytest.mark.parametrize("index", [0, 3, 127])
def test_a_placeholder_key_names_its_request_and_no_real_pod_key_does(name: str, index: int) -> None:
    req = request(name)
    key = f"ml/{engine.placeholder_name(req, index)}"
    assert engine.request_of(key) == req.key
    assert engine.request_of(f"ml/{name}-{index}") is None


def test_resolve_makes_count_pods_per_pod_set_in_order_and_names_what_is_missing() -> None:
    req = replace(request(count=2), pod_sets=(PodSet("worker", 2), PodSet("small", 3)))
    one = resolved(req)
    assert not one.problem and len(one.pods) == 5
    assert len({p.key for p in one.pods}) == 5 and all(engine.request_of(p.key) == req.key for p in one.pods)
    assert [p.requests for p in one.pods] == [WORKER.pod.requests] * 2 + [SMALL.pod.requests] * 3
    assert all(p.unschedulable and p.node_name is None for p in one.pods)
    assert "missing" in resolved(request(template_name="missing")).problem
    assert "count" in resolved(request(count=0)).problem
    assert resolved(request(problem="spec.podSets: bad")).problem == "spec.podSets: bad"


@pytest.mark.parametrize(("phases", "alive"), [
    (["Running", "Pending", "Succeeded"], 2), (["Failed", "Succeeded"], 0), (["Running"] * 5, 5), ([], 0),
])
def test_consumers_count_pods_that_exist_and_have_not_finished(phases: list[str], alive: int) -> None:
    pods = [replace(pod(f"p{i}", node_name="n" if p == "Running" else None, phase=p, namespace="ml"),
                    annotations={CONSUME_PROVISIONING_REQUEST: "train"}) for i, p in enumerate(phases)]
    counts = engine.consumers([*pods, pod("plain", namespace="ml")])
    assert counts.get("ml/train", 0) == alive and sum(counts.values()) == alive
    one = resolved(request(count=4))
    left = engine.unconsumed(one, alive)
    assert len(left) == max(4 - alive, 0) and {p.key for p in left} <= {p.key for p in one.pods}


def _provisioned(minutes_ago: float) -> tuple[Condition, ...]:
    return (Condition(PROVISIONED, "True", "CapacityIsFound", "", T0 - timedelta(minutes=minutes_ago), 1),)


@pytest.mark.parametrize(("req", "asked", "phase"), [
    (request(problem="bad"), False, engine.INVALID),
    (request(conditions=(Condition(FAILED, "True", QUOTA_EXCEEDED, "", T0, 1),)), False, engine.FINAL),
    (request(conditions=_provisioned(3)), False, engine.BOOKED),
    (request(conditions=_provisioned(10)), False, engine.EXPIRED),
    (request(klass=CHECK_CAPACITY_CLASS, conditions=_provisioned(11)), False, engine.EXPIRED),
    (request(klass=CHECK_CAPACITY_CLASS), True, engine.CHECK),
    (request(), True, engine.IN_FLIGHT),
    (request(), False, engine.ATOMIC),
])
def test_phase(req: ProvisioningRequest, asked: bool, phase: str) -> None:
    assert engine.phase(resolved(req), now=T0, booking=BOOKING, asked=asked) == phase


@pytest.mark.parametrize(("free_nodes", "count"), [(0, 4), (2, 4), (4, 4), (5, 3)])
def test_existing_room_only_never_a_new_node_and_pending_pods_do_not_take_it(free_nodes: int, count: int) -> None:
    world = gpu_world(nodes=free_nodes)
    world = replace(world, pods=tuple(pod(f"waiting-{i}", requests=WORKER.pod.requests, pending=True)
                                      for i in range(3)))
    one = resolved(request(count=count))
    where = engine.place_on_existing(world, one.pods, options=ScaleUpOptions())
    assert len(where) == min(free_nodes, count)  # one 4-GPU pod per node
    assert set(where.values()) <= {n.name for n in world.nodes}
    # Bound, the room is taken: the same pods again find only what is left.
    again = engine.place_on_existing(engine.bind(world, one.pods, where), resolved(request("other", count=count)).pods,
                                     options=ScaleUpOptions())
    assert len(again) == min(max(free_nodes - len(where), 0), count)


def test_hold_nodes_takes_them_from_size_and_max_alike() -> None:
    world = gpu_world(max_size=6, nodes=2)
    g = world.groups[0]
    held = engine.hold_nodes(replace(world, groups=(replace(g, capacity=5),)), {g.id: 3}).groups[0]
    assert held.capacity == 2 and held.max_size == 3
    assert held.max_size - held.running_target == 6 - 5
    with pytest.raises(ValueError, match="rg/gpu"):
        engine.hold_nodes(world, {g.id: 3})


@pytest.mark.parametrize("count", [1, 3, 4])
def test_an_atomic_request_that_one_group_holds_is_one_part_for_every_pod(count: int) -> None:
    plan = engine.plan_atomic(gpu_world(), resolved(request(count=count)), options=ScaleUpOptions())
    assert plan.parts == (("rg/gpu", count),) and not plan.refused and plan.reason == SCALE_UP_IN_PROGRESS


@pytest.mark.parametrize(("max_size", "quota_nodes", "cores_max", "what"), [
    (3, None, 0, "max size"),
    (10, 3, 0, "quota"),
    (10, None, 96, "cores"),  # 32 cores a node
])
def test_a_limit_that_holds_only_part_refuses_it_whole_and_is_named(max_size: int, quota_nodes: int | None,
                                                                     cores_max: int, what: str) -> None:
    world = gpu_world(max_size=max_size)
    quota = None if quota_nodes is None else Quota(
        remaining={("westeurope", REGIONAL): 24 * quota_nodes}, sizes={"standard_nc24ads_a100_v4": ("", 24)})
    limits = ClusterLimits(cores_total=(0, cores_max)) if cores_max else ClusterLimits()
    plan = engine.plan_atomic(world, resolved(request(count=4)), options=ScaleUpOptions(quota=quota, limits=limits))
    assert plan.refused and not plan.parts and plan.reason == QUOTA_EXCEEDED
    assert what in plan.message and "3 of 4" in plan.message


@pytest.mark.parametrize(("max_size", "quota_nodes", "cores_max", "what"), [
    (4, None, 0, "max size"),
    (10, 2, 0, "quota"),  # 2 nodes' vCPUs left, 2 more in use by the group's busy nodes
    (10, None, 128, "cores"),
])
def test_a_limit_that_binds_only_through_busy_nodes_waits_instead_of_failing(max_size: int, quota_nodes: int | None,
                                                                              cores_max: int, what: str) -> None:
    # Two nodes of the group run work; the limits could hold the whole set once they are free: Provisioned=False
    # and tried again (Kueue retries a Failed request a few times, then gives the job up).
    world = gpu_world(max_size=max_size, nodes=2)
    world = replace(world, pods=tuple(pod(f"busy-{i}", node_name=f"gpu-{i}", requests=res(8, 32, gpu=4))
                                      for i in range(2)))
    quota = None if quota_nodes is None else Quota(
        remaining={("westeurope", REGIONAL): 24 * quota_nodes}, sizes={"standard_nc24ads_a100_v4": ("", 24)})
    limits = ClusterLimits(cores_total=(0, cores_max)) if cores_max else ClusterLimits()
    plan = engine.plan_atomic(world, resolved(request(count=4)), options=ScaleUpOptions(quota=quota, limits=limits))
    assert plan.waiting and not plan.refused and not plan.parts, (what, plan)
    assert plan.reason == CAPACITY_IS_NOT_FOUND and "2 of 4" in plan.message


@pytest.mark.parametrize(("limit_nodes", "waits"), [(4, True), (10, True), (3, False)])
def test_a_quota_limit_decides_between_waiting_and_failing(limit_nodes: int, waits: bool) -> None:
    # 2 nodes' vCPUs left now (the rest used outside our groups): the quota's limit says whether it could ever fit.
    key = ("westeurope", REGIONAL)
    quota = Quota(remaining={key: 24 * 2}, sizes={"standard_nc24ads_a100_v4": ("", 24)}, limits={key: 24 * limit_nodes})
    plan = engine.plan_atomic(gpu_world(), resolved(request(count=4)), options=ScaleUpOptions(quota=quota))
    assert not plan.parts and plan.waiting == waits and plan.refused == (not waits)
    assert plan.reason == (CAPACITY_IS_NOT_FOUND if waits else QUOTA_EXCEEDED) and "2 of 4" in plan.message


def test_a_shape_no_group_has_is_capacity_not_found() -> None:
    cpu_only = group("cpu", target=0)
    world = snapshot(groups=[cpu_only])
    plan = engine.plan_atomic(world, resolved(request(count=2)), options=ScaleUpOptions())
    assert plan.refused and plan.reason == CAPACITY_IS_NOT_FOUND


def test_a_group_only_unavailable_for_now_makes_it_wait_not_fail() -> None:
    world = gpu_world()
    plan = engine.plan_atomic(world, resolved(request(count=2)),
                              options=ScaleUpOptions(unavailable={"rg/gpu": "backoff: AllocationFailed"}))
    assert plan.waiting and not plan.refused and "AllocationFailed" in plan.message


def test_several_groups_only_when_the_request_allows_it() -> None:
    a = group("gpu-a", target=0, max_size=2)
    b = group("gpu-b", target=0, max_size=2)
    world = snapshot(groups=[a, b], templates={a.id: template(GPU_NODE), b.id: template(GPU_NODE)})
    single = engine.plan_atomic(world, resolved(request(count=4)), options=ScaleUpOptions())
    assert single.refused and not single.parts
    multi = engine.plan_atomic(world, resolved(request(count=4, parameters={engine.MULTI_GROUP: "true"})),
                               options=ScaleUpOptions())
    assert sum(n for _, n in multi.parts) == 4 and {g for g, _ in multi.parts} == {a.id, b.id}


def test_existing_room_is_used_before_new_nodes() -> None:
    plan = engine.plan_atomic(gpu_world(nodes=1), resolved(request(count=3)), options=ScaleUpOptions())
    assert plan.parts == (("rg/gpu", 2),)


@pytest.mark.parametrize(("no_retry", "type_"), [("true", FAILED), ("", PROVISIONED), ("false", PROVISIONED)])
def test_a_check_capacity_miss_is_retried_unless_no_retry(no_retry: str, type_: str) -> None:
    req = request(klass=CHECK_CAPACITY_CLASS, parameters={"noRetry": no_retry} if no_retry else {})
    conditions = engine.capacity_not_found(req, 1, 4, now=T0)
    changed = [c for c in conditions if c.type == type_]
    assert len(changed) == 1 and changed[0].reason == CAPACITY_IS_NOT_FOUND and "1 of 4" in changed[0].message
    assert changed[0].status == ("True" if type_ == FAILED else "False")


def test_an_unprovisioned_check_capacity_request_fails_expired_after_a_week() -> None:
    young = request(klass=CHECK_CAPACITY_CLASS)
    old = replace(young, created_at=T0 - engine.CHECK_CAPACITY_EXPIRY - timedelta(seconds=1))
    assert replace(young, conditions=engine.capacity_not_found(young, 0, 4, now=T0)).is_true(FAILED) is False
    failed = replace(old, conditions=engine.capacity_not_found(old, 0, 4, now=T0))
    assert failed.is_true(FAILED) and failed.condition(FAILED).reason == EXPIRED_REASON  # type: ignore[union-attr]


def test_booking_expired_keeps_provisioned_and_is_final() -> None:
    req = request(conditions=_provisioned(12))
    conditions = engine.booking_expired(req, 2, now=T0)
    after = replace(req, conditions=conditions)
    assert after.is_true(BOOKING_EXPIRED) and after.is_true(PROVISIONED)
    assert after.condition(BOOKING_EXPIRED).reason == BOOKING_EXPIRED_REASON  # type: ignore[union-attr]
    assert engine.phase(resolved(after), now=T0, booking=BOOKING, asked=False) == engine.FINAL
    assert engine.state_of(after) == "expired"


@pytest.mark.parametrize("held", [{}, {"rg/gpu": 2}, {"rg/other": 3}])
def test_restored_targets_are_the_real_groups_and_the_increase_unchanged(held: dict[str, int]) -> None:
    one = gpu_world(nodes=1)
    world = replace(one, groups=(replace(one.groups[0], capacity=3),))  # two nodes on their way
    pending = replace(engine.hold_nodes(world, held), pods=tuple(
        pod(f"w{i}", requests=WORKER.pod.requests, pending=True) for i in range(2)))
    made = plan_scale_up(pending, options=ScaleUpOptions())
    restored = engine.restore_targets(made, held)
    real = {g.id: g.running_target for g in world.groups}
    for before, after in zip(made.increases, restored.increases, strict=True):
        assert after.delta == before.delta and after.current_target == real[after.group_id]
