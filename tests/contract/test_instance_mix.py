"""A Flexible scale set with an instance mix against the sandbox's ARM double: VmssCompute's discovery lists one
lane per size, FlexCompute reads each lane's instances by their own size and grows one lane with ONE steering
PATCH (If-Match the set's etag) that Azure, and the sandbox, honour by creating VMs of that size."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared.adapters.compute import VmssCompute
from shared.adapters.flex_compute import FlexCompute
from shared.adapters.instance_mix import STRATEGY_TAG
from shared.domain import FLEXIBLE_SCALE_SET, NodeGroup, group_id
from shared.ports import CHANGED_SINCE_READ, ComputeError
from shared.settings import load_settings
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory

D2, D4, D16 = "Standard_D2s_v5", "Standard_D4s_v5", "Standard_D16s_v5"
_SHAPES = {D2: ("1900m", "6Gi", "2", "8Gi"), D4: ("3860m", "13Gi", "4", "16Gi"), D16: ("15820m", "56Gi", "16", "64Gi")}


def _size(name: str) -> dict[str, Any]:
    cpu, memory, cap_cpu, cap_memory = _SHAPES[name]
    return {"vm_size": name, "allocatable": {"cpu": cpu, "memory": memory, "pods": 110},
            "capacity": {"cpu": cap_cpu, "memory": cap_memory, "pods": 110}}


SCENARIO = {
    "name": "mix", "cluster_name": "mix", "flavour": "aks-engine", "arm_throttling": False, "arm_page_size": 2,
    "boot_delay": "60s", "delete_delay": "20s",
    "node_groups": [{"resource_group": "rg-b", "name": "farm", "orchestration": "Flexible", "min": 1, "max": 8,
                     "initial": 2, "instance_mix": {"strategy": "LowestPrice",
                                                    "sizes": [_size(D16), _size(D2), _size(D4)]}}],
}


class Mix:
    def __init__(self, server: SandboxServer, clock: ManualClock) -> None:
        settings = load_settings({**server.env(), "ARM_OPERATION_WAIT": "0s"})
        self.server, self.clock = server, clock
        self.lister = VmssCompute.from_settings(settings)
        self.flex = FlexCompute.from_settings(settings)

    def lanes(self) -> dict[str, NodeGroup]:
        return {g.lane: g for g in self.lister.list_node_groups() if g.name == "farm"}

    def settle(self, token: str) -> str:
        self.clock.advance(120)
        return self.flex.get_resize_operation(token).status


@pytest.fixture
def mix(sandbox_factory: SandboxFactory) -> Iterator[Mix]:
    clock = ManualClock(SANDBOX_START)
    side = Mix(sandbox_factory(SCENARIO, clock=clock), clock)
    yield side
    side.lister.close()
    side.flex.close()


def test_a_mix_set_is_listed_as_one_lane_per_size(mix: Mix) -> None:
    lanes = mix.lanes()
    assert set(lanes) == {D2, D4, D16}
    (first,) = {g.lanes for g in lanes.values()}
    assert first == (D2, D4, D16)  # LowestPrice: cheapest first (the sandbox's price table grows with vCPUs)
    members = {i.instance_id: i.vm_size for i in mix.flex.list_instances(
        NodeGroup(resource_group="rg-b", name="farm", min_size=0, max_size=0, capacity=0, vm_size="Mix",
                  provider=FLEXIBLE_SCALE_SET))}
    assert set(members.values()) == {""}  # a group that is no lane: instances carry no size of their own
    total = sum(g.capacity for g in lanes.values())
    assert total == 2
    for size, lane in lanes.items():
        assert lane.id == group_id("rg-b", "farm", size) and lane.vm_size == size and lane.parent_id == "rg-b/farm"
        assert lane.allocation_strategy == "LowestPrice" and lane.provider == FLEXIBLE_SCALE_SET
        others = total - lane.capacity
        assert (lane.min_size, lane.max_size) == (max(0, 1 - others), max(lane.capacity, 8 - others))
        instances = mix.flex.list_instances(lane)
        assert len(instances) == lane.capacity and all(i.vm_size == size for i in instances)
        assert mix.flex.get_node_group(lane.id) == lane
    assert mix.flex.get_node_group("rg-b/farm") is None  # the set itself is planned only as its lanes


@pytest.mark.parametrize("size", [D2, D4, D16])
def test_growing_one_lane_steers_the_new_vms_to_its_size(mix: Mix, size: str) -> None:
    lanes = mix.lanes()
    before = {s: {i.instance_id for i in mix.flex.list_instances(g)} for s, g in lanes.items()}
    lane = lanes[size]
    op = mix.flex.begin_resize(lane, lane.capacity + 2)
    assert mix.settle(op.token) == "Succeeded"
    after = mix.lanes()
    assert after[size].capacity == lane.capacity + 2
    assert all(after[s].capacity == lanes[s].capacity for s in lanes if s != size)  # nothing else grew
    assert {s: {i.instance_id for i in mix.flex.list_instances(g)} >= before[s] for s, g in after.items()} == \
        {s: True for s in lanes}
    assert after[size].lanes == lane.lanes and after[size].allocation_strategy == "LowestPrice"  # the user's, kept
    assert after[size].tags[STRATEGY_TAG] == "LowestPrice"
    vmss = mix.lister._client.virtual_machine_scale_sets.get("rg-b", "farm")  # noqa: SLF001
    ranks = {v.name: v.rank for v in vmss.properties.sku_profile.vm_sizes}
    assert ranks[size] == 0 and sorted(ranks.values()) == [0, 1, 2]
    assert vmss.sku.name == "Mix" and vmss.sku.capacity == sum(g.capacity for g in after.values())


def test_a_lane_resize_from_a_stale_read_is_refused(mix: Mix) -> None:
    lanes = mix.lanes()
    op = mix.flex.begin_resize(lanes[D4], lanes[D4].capacity + 1)  # another writer, from the same read
    assert mix.settle(op.token) == "Succeeded"
    with pytest.raises(ComputeError) as caught:
        mix.flex.begin_resize(lanes[D2], lanes[D2].capacity + 1)
    assert caught.value.code == CHANGED_SINCE_READ
    assert mix.lanes()[D2].capacity == lanes[D2].capacity


def test_deleting_a_named_instance_of_a_lane_removes_only_it(mix: Mix) -> None:
    lanes = mix.lanes()
    op = mix.flex.begin_resize(lanes[D16], lanes[D16].capacity + 1)
    assert mix.settle(op.token) == "Succeeded"
    lane = mix.lanes()[D16]
    (victim, *_) = sorted(i.instance_id for i in mix.flex.list_instances(lane))
    other = next(g for s, g in mix.lanes().items() if s != D16 and g.capacity)
    assert mix.flex.get_instance(other, victim) is None  # of another lane's size
    assert mix.flex.get_instance(lane, victim) is not None
    deleted = mix.flex.begin_delete_instances(lane, [victim])
    mix.clock.advance(120)
    assert mix.flex.get_delete_operation(deleted.token).status == "Succeeded"
    after = mix.lanes()
    assert after[D16].capacity == lane.capacity - 1 and after[other.lane].capacity == other.capacity


def test_a_prioritized_set_keeps_the_users_order_after_steering(sandbox_factory: SandboxFactory) -> None:
    """The user ranks D4s_v5 first: after we steer a growth to D16s_v5 (rank 0 on the set), the lanes still read
    the user's order (RANKS_TAG) and strategy."""
    ranked = [{**_size(D16), "rank": 2}, {**_size(D2), "rank": 1}, {**_size(D4), "rank": 0}]
    group = {**SCENARIO["node_groups"][0], "instance_mix": {"strategy": "Prioritized", "sizes": ranked}}
    clock = ManualClock(SANDBOX_START)
    side = Mix(sandbox_factory({**SCENARIO, "node_groups": [group]}, clock=clock), clock)
    try:
        lanes = side.lanes()
        assert next(iter(lanes.values())).lanes == (D4, D2, D16)
        op = side.flex.begin_resize(lanes[D16], lanes[D16].capacity + 1)
        assert side.settle(op.token) == "Succeeded"
        after = side.lanes()
        assert after[D16].capacity == lanes[D16].capacity + 1
        assert {g.lanes for g in after.values()} == {(D4, D2, D16)}
        assert {g.allocation_strategy for g in after.values()} == {"Prioritized"}
    finally:
        side.lister.close()
        side.flex.close()
