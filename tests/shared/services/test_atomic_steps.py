"""The atomic scale-up's steps against the sandbox's world: all of a ProvisioningRequest's nodes or none of them.

In-memory ports over one D4s_v5 group at zero (tests/memory_app.py); the cluster's ProvisioningRequests are held by
a small double in front of the world's cluster, so the executor's steps are tested apart from how requests are
served. Every case asserts the invariant that matters: the request ends Provisioned with every asked node usable,
or Failed with no instance it added left behind and the group's capacity as it was.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from shared.actions import AtomicScaleUp, decode_message, encode_action, new_atomic_scale_up
from shared.domain import ATOMIC_SCALE_UP_CLASS, CHECK_CAPACITY_CLASS, Condition, ProvisioningRequest
from shared.engine import provisioning_conditions as pc
from shared.ports import Ports
from shared.services.executor import Executor
from tests.memory_app import MemoryApp, memory_app

GROUP = "rg-atomic/pool-d4"
UID = "0b6f5a2c-1d3e-4f70-8a9b-c0d1e2f3a4b5"
PATCH = "PATCH virtualMachineScaleSets"  # the sandbox's count of capacity writes
SETTINGS = {"ARM_OPERATION_WAIT": "0s", "STEP_RETRY_DELAY": "0s", "MAX_NODE_PROVISION_TIME": "5m"}


def _scenario(*, quota_vcpus: int = 100, max_size: int = 10, boot: str = "60s", **changes: Any) -> dict[str, Any]:
    """One autoscaled D4s_v5 group at zero (4 vCPUs a node, DSv5 family quota `quota_vcpus`), nothing running."""
    return {
        "name": "atomic", "cluster_name": "atomic", "arm_throttling": False, "location": "westeurope",
        "boot_delay": {"min": boot, "max": boot}, "delete_delay": {"min": "20s", "max": "20s"},
        "node_groups": [
            {"resource_group": "rg-atomic", "name": "pool-d4", "vm_size": "Standard_D4s_v5",
             "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110},
             "capacity": {"cpu": "4", "memory": "16Gi", "pods": 110},
             "min": 0, "max": max_size, "initial": 0,
             "tags": {"k8s.io_cluster-autoscaler_node-template_resources_cpu": "3860m",
                      "k8s.io_cluster-autoscaler_node-template_resources_memory": "13.8Gi"}},
        ],
        "quotas": {"standardDSv5Family": quota_vcpus, "cores": 1000},
        **changes,
    }


class RequestsCluster:
    """The world's cluster, with ProvisioningRequests held here: the status writes are recorded."""

    def __init__(self, inner: Any, requests: Sequence[ProvisioningRequest]) -> None:
        self._inner = inner
        self.requests = {r.key: r for r in requests}
        self.writes: list[tuple[str, tuple[Condition, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def list_provisioning_requests(self) -> list[ProvisioningRequest]:
        return list(self.requests.values())

    def update_provisioning_request_status(self, namespace: str, name: str, *, conditions: Sequence[Condition],
                                           details: Mapping[str, str] | None = None) -> None:
        key = f"{namespace}/{name}"
        self.writes.append((key, tuple(conditions)))
        if key in self.requests:
            self.requests[key] = replace(self.requests[key], conditions=tuple(conditions))


def _request(*, uid: str = UID, class_name: str = ATOMIC_SCALE_UP_CLASS) -> ProvisioningRequest:
    waiting = Condition(pc.PROVISIONED, "False", pc.SCALE_UP_IN_PROGRESS, "asked for", None, 1)
    return ProvisioningRequest("training", "gang-a", class_name, uid=uid, generation=1, conditions=(waiting,))


class World:
    """The app, its cluster double and an executor over both."""

    def __init__(self, scenario: dict[str, Any], *, settings: Mapping[str, str] | None = None,
                 request: ProvisioningRequest | None = None) -> None:
        self.app: MemoryApp = memory_app(scenario, settings={**SETTINGS, **(settings or {})})
        self.cluster = RequestsCluster(self.app.ports.cluster, [request or _request()])
        self.ports: Ports = replace(self.app.ports, cluster=self.cluster)
        self.executor = Executor(self.ports, self.app.settings)

    def send(self, count: int = 4) -> AtomicScaleUp:
        action = new_atomic_scale_up(request="training/gang-a", request_uid=UID, parts=[(GROUP, count)],
                                     now=self.app.clock.now(), ttl=timedelta(minutes=5), reason="gang of 4")
        self.app.ports.queue.send(action)  # the poll's send, never a crash point
        return action

    def run(self, *, seconds: float = 900, step: float = 10, deliver: Callable[[str], None] | None = None) -> list[str]:
        """Every visible message executed, `step` seconds at a time, until the queue is empty; the outcomes."""
        outcomes: list[str] = []
        for _ in range(int(seconds / step)):
            texts = self.app.take_queued()
            for text in texts:
                if deliver is not None:
                    deliver(text)
                else:
                    outcomes.append(self.executor.execute(text, now=self.app.clock.now()).outcome)
            if not texts and not self.app.queue.peek() and not self.app.queue._heap:  # noqa: SLF001 - nothing left
                break
            self.app.clock.advance(step)
        return outcomes

    @property
    def request(self) -> ProvisioningRequest | None:
        return self.cluster.requests.get("training/gang-a")

    def instances(self) -> list[Any]:
        group = self.ports.provider.get_node_group(GROUP)
        assert group is not None
        return [i for i in self.ports.provider.list_instances(group) if not i.deleting]

    def capacity(self) -> int:
        group = self.ports.provider.get_node_group(GROUP)
        assert group is not None
        return group.capacity

    def outcome(self, action: AtomicScaleUp) -> str:
        entry = self.ports.state.get_ledger_entry(action.id)
        assert entry is not None
        return entry.outcome


def _settled(world: World) -> None:
    """The world a while later: deletes done, nothing left to run."""
    world.app.clock.advance(120)


def _assert_nothing_left(world: World) -> None:
    """The invariant of a request that failed: no instance of it left, the capacity as it was (zero)."""
    _settled(world)
    assert world.instances() == []
    assert world.capacity() == 0


def test_all_granted_the_request_is_provisioned_once_every_node_is_ready() -> None:
    world = World(_scenario())
    action = world.send(4)
    world.run()
    assert world.outcome(action).startswith("succeeded")
    request = world.request
    assert request is not None and request.is_true(pc.PROVISIONED)
    assert request.condition(pc.PROVISIONED).reason == pc.CAPACITY_IS_PROVISIONED  # type: ignore[union-attr]
    assert not pc.is_final(request)
    instances = world.instances()
    assert len(instances) == 4 == world.capacity()
    ready = [n for n in world.ports.cluster.list_nodes() if n.ready]
    assert len(ready) == 4
    # Provisioned was written once, after the nodes were Ready (never while waiting for them).
    provisioned = [c for _, conditions in world.cluster.writes for c in conditions
                   if c.type == pc.PROVISIONED and c.status == "True"]
    assert len(provisioned) == 1
    assert any(e.reason == pc.CAPACITY_IS_PROVISIONED and e.kind == "ProvisioningRequest" for e in world.app.events())


@pytest.mark.parametrize(("changes", "names"), [
    ({"quota_vcpus": 12}, "quota"),  # 3 D4s of quota for 4 asked
    ({"max_size": 3}, "max 3"),
])
def test_a_limit_that_cannot_hold_the_whole_request_ends_the_attempt_and_asks_for_nothing(changes: dict[str, Any],
                                                                                          names: str) -> None:
    # The poll found room (it fails outright a request no limit could ever hold): what binds now is capacity taken
    # since, so the request reads Provisioned=False and the poll plans the next attempt when there is room.
    world = World(_scenario(**changes))
    action = world.send(4)
    world.run()
    assert world.outcome(action).startswith("failed")
    request = world.request
    assert request is not None and not request.is_true(pc.FAILED)
    provisioned = request.condition(pc.PROVISIONED)
    assert provisioned is not None and provisioned.status == "False"
    assert provisioned.reason == pc.CAPACITY_IS_NOT_FOUND and names in provisioned.message
    assert world.app.world.counters.arm[PATCH] == 0  # nothing asked of Azure
    assert world.instances() == [] and world.capacity() == 0


def test_a_quota_azure_enforces_alone_ends_the_attempt_without_failing_the_request() -> None:
    # Refused whole, nothing granted: the request reads Provisioned=False (not Failed: Kueue would retry it only a
    # few times), and the next attempt, under its own id, is granted whole once the quota allows it.
    world = World(_scenario(quota_vcpus=12), settings={"QUOTA_AWARE": "false"})
    action = world.send(4)
    world.run()
    assert world.outcome(action).startswith("failed")
    request = world.request
    assert request is not None and not request.is_true(pc.FAILED)
    provisioned = request.condition(pc.PROVISIONED)
    assert provisioned is not None and (provisioned.status, provisioned.reason) == ("False", pc.CAPACITY_IS_NOT_FOUND)
    assert "quota" in provisioned.message and world.app.world.counters.arm[PATCH] == 1
    assert world.ports.state.get_group(GROUP).atomic_holder == ""
    _assert_nothing_left(world)
    world.app.world._quota_limits["standarddsv5family"] = ("standardDSv5Family", 16)  # noqa: SLF001 - raised
    world.app.clock.advance(11 * 60)  # past the family's refusal mark (10 minutes), as the poll would wait
    again = new_atomic_scale_up(request="training/gang-a", request_uid=UID, parts=[(GROUP, 4)],
                                now=world.app.clock.now(), ttl=timedelta(minutes=5), reason="gang of 4", attempt=2)
    assert again.id == f"{action.id}:2"
    world.app.ports.queue.send(again)
    world.run()
    assert world.outcome(again).startswith("succeeded")
    assert world.request is not None and world.request.is_true(pc.PROVISIONED) and len(world.instances()) == 4


@pytest.mark.parametrize("left_failed", [1, None])  # one instance of the four, or all of them
def test_instances_left_failed_every_added_instance_is_deleted_and_the_request_failed(left_failed: int | None) -> None:
    failure: dict[str, Any] = {"scale_set": "pool-d4", "code": "ZonalAllocationFailed"}
    if left_failed is not None:
        failure["instances"] = left_failed
    world = World(_scenario(allocation_failures=[failure]))
    action = world.send(4)
    world.run()
    assert world.outcome(action).startswith("failed")
    request = world.request
    assert request is not None
    failed = request.condition(pc.FAILED)
    assert failed is not None and failed.status == "True" and failed.reason == pc.PARTIAL_CAPACITY_RETURNED
    assert "ZonalAllocationFailed" in failed.message
    assert not request.is_true(pc.PROVISIONED)
    deleted = {k for k, n in world.app.world.counters.instances_deleted.items() if n}
    assert len(deleted) == 4  # every instance it added, the ones that came too
    assert all(n == 1 for n in world.app.world.counters.instances_deleted.values())
    _assert_nothing_left(world)
    assert any(e.reason == pc.PARTIAL_CAPACITY_RETURNED and e.type == "Warning" for e in world.app.events())


def test_nodes_not_ready_within_the_provision_time_are_given_back() -> None:
    world = World(_scenario(boot="20m"), settings={"MAX_NODE_PROVISION_TIME": "3m"})
    action = world.send(4)
    world.run(seconds=600)
    assert world.outcome(action).startswith("failed")
    failed = world.request.condition(pc.FAILED)  # type: ignore[union-attr]
    assert failed is not None and "MAX_NODE_PROVISION_TIME" in failed.message
    _assert_nothing_left(world)


def test_the_request_deleted_midway_rolls_the_scale_up_back() -> None:
    world = World(_scenario(boot="5m"))
    action = world.send(4)
    world.run(seconds=60)  # resized, waiting for the nodes
    assert world.capacity() == 4
    del world.cluster.requests["training/gang-a"]
    world.run()
    assert world.outcome(action).startswith("failed")
    assert world.cluster.writes == []  # nothing to write to: the request is gone
    _assert_nothing_left(world)


@pytest.mark.parametrize(("held", "poisoned"), [
    (_request(uid="11111111-2222-3333-4444-555555555555"), True),  # the message names another uid
    (_request(class_name=CHECK_CAPACITY_CLASS), True),  # never scaled up for
    (None, False),  # no such request (deleted before the executor ran: a stale decision)
])
def test_a_message_for_a_request_that_is_not_this_one_is_rejected_and_nothing_asked(
        held: ProvisioningRequest | None, poisoned: bool) -> None:
    world = World(_scenario(), request=held or _request())
    if held is None:
        world.cluster.requests.clear()
    action = world.send(4)
    outcomes = world.run()
    assert outcomes == ["rejected"]
    assert world.outcome(action).startswith("rejected")
    assert world.capacity() == 0 and world.instances() == []
    assert world.cluster.writes == []
    assert bool(world.app.poison()) == poisoned


def test_an_already_provisioned_or_failed_request_is_not_scaled_up_again() -> None:
    for condition in (Condition(pc.PROVISIONED, "True", pc.CAPACITY_IS_FOUND, "", None, 1),
                      Condition(pc.FAILED, "True", pc.QUOTA_EXCEEDED, "", None, 1)):
        world = World(_scenario(), request=replace(_request(), conditions=(condition,)))
        action = world.send(4)
        world.run()
        assert world.outcome(action).startswith("skipped")
        assert world.capacity() == 0 and world.cluster.writes == []


# -- crashes ------------------------------------------------------------------------------------

class Crash(Exception):
    """A crash of the invocation at one call with an external effect."""


EFFECTS = {"provider": ("begin_resize", "begin_delete_instances"),
           "state": ("update_ledger_entry", "create_ledger_entry", "update_group", "update_limit_reservations"),
           "queue": ("send",), "cluster": ("update_provisioning_request_status",)}


class Crashing:
    """A port whose k-th effect (counted over every port) raises Crash, just before or just after it happens."""

    def __init__(self, inner: Any, name: str, plan: dict[str, Any]) -> None:
        self._inner, self._name, self._plan = inner, name, plan

    def __getattr__(self, attribute: str) -> Any:
        value = getattr(self._inner, attribute)
        if attribute not in EFFECTS[self._name]:
            return value

        def effect(*args: Any, **kwargs: Any) -> Any:
            plan = self._plan
            plan["calls"] += 1
            crash = plan["calls"] == plan["at"]
            if crash and plan["when"] == "before":
                raise Crash(f"{self._name}.{attribute}")
            result = value(*args, **kwargs)
            if crash:
                raise Crash(f"{self._name}.{attribute}")
            return result

        return effect


# The two ways an atomic scale-up ends: every node usable, or one instance left Failed and all four given back.
GRANTED = _scenario()
PARTIAL = _scenario(allocation_failures=[{"scale_set": "pool-d4", "code": "ZonalAllocationFailed", "instances": 1}])


def _crashing_world(scenario: dict[str, Any], at: int, when: str) -> tuple[World, dict[str, Any]]:
    world = World(scenario, settings={"ACTION_LEASE": "1m"})
    plan = {"calls": 0, "at": at, "when": when}
    ports = world.ports
    world.ports = replace(ports, provider=Crashing(ports.provider, "provider", plan),
                          state=Crashing(ports.state, "state", plan), queue=Crashing(ports.queue, "queue", plan),
                          cluster=Crashing(ports.cluster, "cluster", plan))
    world.executor = Executor(world.ports, world.app.settings)
    return world, plan


def _deliver_with_redelivery(world: World) -> Callable[[str], None]:
    """Deliver a text; a crashed delivery is delivered again once the lease has run out (as the host would)."""
    def deliver(text: str) -> None:
        try:
            world.executor.execute(text, now=world.app.clock.now())
        except Crash:
            world.app.clock.advance(61)
            world.executor.execute(text, now=world.app.clock.now())
    return deliver


def _crash_points() -> Iterator[tuple[str, int, str]]:
    """Every effect of an uncrashed run of each path, crashed just before and just after it."""
    for path, scenario in (("granted", GRANTED), ("partial", PARTIAL)):
        world, plan = _crashing_world(scenario, 0, "before")
        world.send(4)
        world.run(deliver=_deliver_with_redelivery(world))
        for at in range(1, plan["calls"] + 1):
            yield path, at, "before"
            yield path, at, "after"


@pytest.mark.parametrize(("path", "at", "when"), list(_crash_points()))
def test_a_crash_at_any_effect_ends_the_same_on_redelivery_with_nothing_done_twice(path: str, at: int,
                                                                                    when: str) -> None:
    world, _ = _crashing_world(GRANTED if path == "granted" else PARTIAL, at, when)
    action = world.send(4)
    world.run(deliver=_deliver_with_redelivery(world))
    counters = world.app.world.counters
    assert counters.arm[PATCH] == 1  # the capacity written once, whatever crashed where
    request = world.request
    assert request is not None
    if path == "granted":
        assert world.outcome(action).startswith("succeeded")
        assert len(world.instances()) == 4 == world.capacity()
        assert not any(counters.instances_deleted.values())
        assert request.is_true(pc.PROVISIONED) and not pc.is_final(request)
    else:
        assert world.outcome(action).startswith("failed")
        assert sorted(counters.instances_deleted.values()) == [1, 1, 1, 1]  # each added instance deleted once
        assert request.is_true(pc.FAILED) and not request.is_true(pc.PROVISIONED)
        _assert_nothing_left(world)


def test_a_forged_follow_up_step_with_other_parts_is_refused() -> None:
    world = World(_scenario(boot="5m"))
    action = world.send(4)
    world.run(seconds=30)
    forged = replace(action, step="rollback", parts=((GROUP, 1),))
    outcome = world.executor.execute(encode_action(forged), now=world.app.clock.now())
    assert outcome.outcome == "rejected"
    assert decode_message(world.app.poison()[-1]) == forged
    assert world.capacity() == 4  # the real action's nodes untouched


def test_a_gpu_request_is_provisioned_only_once_every_node_has_its_gpus() -> None:
    gpu_group = {"resource_group": "rg-atomic", "name": "pool-a100", "vm_size": "Standard_NC24ads_A100_v4",
                 "allocatable": {"cpu": "23", "memory": "200Gi", "pods": 110, "nvidia.com/gpu": 1},
                 "min": 0, "max": 8, "initial": 0, "gpu_ready_delay": "3m"}
    world = World(_scenario(node_groups=[gpu_group], quotas={}), settings={"MAX_NODE_PROVISION_TIME": "10m"})
    seen: list[tuple[bool, bool]] = []  # at each Provisioned write: every node Ready, every node with its GPUs
    write = world.cluster.update_provisioning_request_status

    def watched(namespace: str, name: str, **kwargs: Any) -> None:
        if any(c.type == pc.PROVISIONED and c.status == "True" for c in kwargs["conditions"]):
            nodes = world.ports.cluster.list_nodes()
            seen.append((len(nodes) == 4 and all(n.ready for n in nodes),
                         all(n.allocatable.amount("nvidia.com/gpu") > 0 for n in nodes)))
        write(namespace, name, **kwargs)

    world.cluster.update_provisioning_request_status = watched  # type: ignore[method-assign]
    action = new_atomic_scale_up(request="training/gang-a", request_uid=UID, parts=[("rg-atomic/pool-a100", 4)],
                                 now=world.app.clock.now(), ttl=timedelta(minutes=5))
    world.app.ports.queue.send(action)
    world.run()
    assert world.outcome(action).startswith("succeeded")
    assert seen == [(True, True)]


def test_a_step_that_fails_on_the_hosts_last_delivery_gives_back_what_it_added() -> None:
    from shared.services.execution import HOST_MAX_DEQUEUE_COUNT

    world = World(_scenario())
    provider = world.ports.provider

    class Failing:
        """The provider, with a capacity write that happens and then fails the invocation."""

        def __getattr__(self, name: str) -> Any:
            return getattr(provider, name)

        def begin_resize(self, group: Any, capacity: int) -> Any:
            provider.begin_resize(group, capacity)
            raise RuntimeError("the invocation died after its capacity write")

    world.ports = replace(world.ports, provider=Failing())  # type: ignore[arg-type]
    world.executor = Executor(world.ports, world.app.settings)
    action = world.send(4)

    died: list[str] = []

    def deliver(text: str) -> None:
        try:
            world.executor.execute(text, now=world.app.clock.now(), dequeue_count=HOST_MAX_DEQUEUE_COUNT)
        except RuntimeError as exc:
            died.append(str(exc))

    world.run(deliver=deliver, seconds=30)
    assert len(died) == 1
    assert world.outcome(action).startswith("failed")
    failed = world.request.condition(pc.FAILED)  # type: ignore[union-attr]
    assert failed is not None and failed.status == "True" and failed.reason == pc.PARTIAL_CAPACITY_RETURNED
    assert len([n for n in world.app.world.counters.instances_deleted.values() if n]) == 4
    _assert_nothing_left(world)


def test_a_decision_that_expired_on_the_queue_asks_for_nothing_and_leaves_the_request_to_the_next_attempt() -> None:
    world = World(_scenario())
    action = world.send(4)
    world.app.clock.advance(600)  # past ACTION_TTL before any delivery
    assert world.run() == ["rejected"]
    assert world.outcome(action).startswith("rejected: expired")
    request = world.request
    assert request is not None and not request.is_true(pc.FAILED)
    provisioned = request.condition(pc.PROVISIONED)
    assert provisioned is not None and (provisioned.status, provisioned.reason) == ("False", pc.SCALE_UP_EXPIRED)
    assert world.app.world.counters.arm[PATCH] == 0 and world.capacity() == 0


@pytest.mark.parametrize("failures", [[], [{"scale_set": "pool-e4", "code": "AllocationFailed", "instances": 1}]])
def test_a_request_over_two_groups_is_granted_whole_or_given_back_in_both(failures: list[dict[str, Any]]) -> None:
    scenario = _scenario(allocation_failures=failures)
    second = {**scenario["node_groups"][0], "name": "pool-e4", "vm_size": "Standard_E4s_v5"}
    scenario["node_groups"].append(second)
    world = World(scenario)
    parts = [(GROUP, 2), ("rg-atomic/pool-e4", 2)]
    action = new_atomic_scale_up(request="training/gang-a", request_uid=UID, parts=parts, now=world.app.clock.now(),
                                 ttl=timedelta(minutes=5))
    world.app.ports.queue.send(action)
    world.run()
    world.app.clock.advance(120)
    request = world.request
    assert request is not None
    sizes = {}
    for group_id, _ in parts:
        group = world.ports.provider.get_node_group(group_id)
        assert group is not None
        sizes[group_id] = (group.capacity, len([i for i in world.ports.provider.list_instances(group)
                                                if not i.deleting]))
    if failures:
        assert world.outcome(action).startswith("failed") and request.is_true(pc.FAILED)
        assert sizes == {g: (0, 0) for g, _ in parts}  # both groups given back, not only the one that failed
    else:
        assert world.outcome(action).startswith("succeeded") and request.is_true(pc.PROVISIONED)
        assert sizes == {g: (n, n) for g, n in parts}
    assert world.ports.state.get_limit_reservations().reservations == {}  # every part's room given back


def test_a_rollback_never_deletes_an_added_node_that_another_pod_landed_on() -> None:
    # kube-scheduler knows no booking: an ordinary pod may take an added node before the request fails. That
    # node stays (ordinary capacity, drained by scale-down when idle); every other added instance goes.
    world = World(_scenario(boot_delay={"min": "60s", "max": "10m"}))
    action = world.send(4)
    nodes: list[Any] = []
    for _ in range(60):
        world.run(seconds=10)
        nodes = [n for n in world.app.ports.cluster.list_nodes() if n.ready]
        if nodes:
            break
    assert nodes and len(nodes) < 4, "some added nodes registered, not all"
    world.app.world.k8s_create("pods", "default", {"metadata": {"name": "squatter"}, "spec": {
        "nodeName": nodes[0].name,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]}})
    del world.cluster.requests["training/gang-a"]
    world.run()
    assert world.outcome(action).startswith("failed")
    _settled(world)
    left = world.instances()
    assert [i.instance_id for i in left] == [nodes[0].instance.instance_id]  # type: ignore[union-attr]
    squatter = world.app.ports.cluster.get_pod("default", "squatter")
    assert squatter is not None and squatter.node_name == nodes[0].name and not squatter.is_finished


def test_two_atomic_scale_ups_of_one_group_never_count_each_others_instances() -> None:
    # The first holds the group from its capacity write until confirm has named its instances; the second's write
    # waits for that, so its "before" listing holds every instance of the first.
    other_uid = "9f8e7d6c-5b4a-4321-8fed-cba987654321"
    other = replace(_request(uid=other_uid), name="gang-b")
    world = World(_scenario(boot="5m"), request=_request())
    world.cluster.requests[other.key] = other
    first = world.send(4)
    for _ in range(10):
        world.run(seconds=10)
        if world.ports.state.get_group(GROUP).atomic_holder == first.id:
            break
    assert world.ports.state.get_group(GROUP).atomic_holder == first.id
    second = new_atomic_scale_up(request="training/gang-b", request_uid=other_uid, parts=[(GROUP, 3)],
                                 now=world.app.clock.now(), ttl=timedelta(minutes=5), reason="gang of 3")
    world.app.ports.queue.send(second)
    world.run()
    assert world.outcome(first).startswith("succeeded") and world.outcome(second).startswith("succeeded")
    records = [json.loads(world.ports.state.get_ledger_entry(a.id).record or "{}")  # type: ignore[union-attr]
               for a in (first, second)]
    added = [r["added"][GROUP] for r in records]
    assert len(added[0]) == 4 and len(added[1]) == 3 and not set(added[0]) & set(added[1])
    assert set(added[0]) <= set(records[1]["before"][GROUP])
    assert len(world.instances()) == 7
    assert world.ports.state.get_group(GROUP).atomic_holder == ""
