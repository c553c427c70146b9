"""`ours+sizes`: the CPU sizes nap chooses from as lanes of multi-size groups, presented as a VirtualMachines pool's."""

from __future__ import annotations

from collections import Counter

import pytest

from devtools.replay.harness import RESOURCE_GROUP, Replay, ReplayConfig, build_world
from devtools.replay.pools import MAX_SIZES_PER_GROUP, NAP_GENERAL, POOL_SETS, SIZE_GROUPS, sized_pools
from devtools.replay.traces import Trace, TracePod
from shared.domain import LANE_SEPARATOR, group_id, parent_group_id
from shared.ports import ComputeError

GIB = 1 << 30
POOLS = sized_pools(POOL_SETS["alibaba2023"])


def _world_and_compute(*, initial: dict[str, int] | None = None) -> Replay:
    pods = (TracePod(at=0.0, duration=600.0, cpu_milli=1000, memory_bytes=GIB),)
    config = ReplayConfig(pools=POOLS, tail_s=600.0)
    return Replay(build_world(Trace("tiny", "<test>", pods, "hand-made"), config, initial=initial), config)


def test_sized_pools_hold_nap_sizes_in_groups_azure_allows() -> None:
    lanes = [p for p in POOLS if p.multi_size]
    assert sorted(p.vm_size for p in lanes) == sorted(p.vm_size for p in NAP_GENERAL)
    by_group = Counter(p.multi_size for p in lanes)
    assert set(by_group) == {name for name, _ in SIZE_GROUPS}
    assert all(count <= MAX_SIZES_PER_GROUP for count in by_group.values())
    # Same size, same allocatable and maxPods as nap's, so both choose among the same nodes.
    nap = {p.vm_size: p for p in NAP_GENERAL}
    assert all((p.cpu_milli, p.memory_mib, p.max_pods) == (nap[p.vm_size].cpu_milli, nap[p.vm_size].memory_mib,
                                                           nap[p.vm_size].max_pods) for p in lanes)
    # GPU pools stay one size each, as ours has them.
    assert [p for p in POOLS if not p.multi_size] == [p for p in POOL_SETS["alibaba2023"] if p.gpus]
    assert all(len(p.name) <= 15 for p in POOLS)  # a computer name prefix


def test_each_group_is_listed_as_one_lane_per_size_never_as_its_scale_sets() -> None:
    run = _world_and_compute(initial={"cpu-small-d4s": 2, "cpu-small-d8s": 1})
    groups = run.compute.list_node_groups()
    lanes = [g for g in groups if g.lane]
    assert {g.name for g in lanes} == {name for name, _ in SIZE_GROUPS}
    assert not any(g.name in {p.name for p in POOLS if p.multi_size} for g in groups)
    for name, sizes in SIZE_GROUPS:
        mine = [g for g in lanes if g.name == name]
        assert [g.lane for g in mine] == list(sizes)
        for g in mine:
            assert g.id == group_id(RESOURCE_GROUP, name, g.lane) and LANE_SEPARATOR in g.id
            assert g.parent_id == parent_group_id(g.id) == group_id(RESOURCE_GROUP, name)
            assert g.lanes == sizes and g.vm_size == g.lane and g.allocation_strategy == ""
            others = sum(o.capacity for o in mine if o is not g)
            assert g.max_size == max(g.capacity, 1000 - others) and g.min_size == 0
            assert len({o.etag for o in mine}) == 1  # one group, one etag
    small = {g.lane: g for g in lanes if g.name == "cpu-small"}
    assert small["Standard_D4s_v5"].capacity == 2 and small["Standard_D8s_v5"].capacity == 1
    assert [i.vm_size for i in run.compute.list_instances(small["Standard_D4s_v5"])] == ["Standard_D4s_v5"] * 2


def test_a_lane_grows_and_loses_named_instances_of_its_size_only() -> None:
    run = _world_and_compute(initial={"cpu-small-d4s": 1})
    lane = run.compute.get_node_group(group_id(RESOURCE_GROUP, "cpu-small", "Standard_D8s_v5"))
    assert lane is not None and lane.capacity == 0
    run.compute.begin_resize(lane, 2)
    after = {g.lane: g.capacity for g in run.compute.list_node_groups() if g.name == "cpu-small"}
    assert after == {"Standard_D2s_v5": 0, "Standard_D4s_v5": 1, "Standard_D8s_v5": 2, "Standard_D16s_v5": 0}
    # The write changed the group's etag: a lane read before it is refused (If-Match).
    with pytest.raises(ComputeError):
        run.compute.begin_resize(lane, 3)
    small = run.compute.get_node_group(group_id(RESOURCE_GROUP, "cpu-small", "Standard_D4s_v5"))
    assert small is not None
    (victim,) = run.compute.list_instances(small)
    run.compute.begin_delete_instances(small, [victim.instance_id])
    run.world.advance_by(120)
    after = {g.lane: g.capacity for g in run.compute.list_node_groups() if g.name == "cpu-small"}
    assert after["Standard_D4s_v5"] == 0 and after["Standard_D8s_v5"] == 2


def test_unknown_lanes_and_the_lane_sets_names_are_no_groups() -> None:
    run = _world_and_compute()
    assert run.compute.get_node_group(group_id(RESOURCE_GROUP, "cpu-small", "Standard_E8s_v5")) is None
    assert run.compute.get_node_group(group_id(RESOURCE_GROUP, "cpu-small-d2s")) is None
    assert run.compute.get_node_group(group_id(RESOURCE_GROUP, "gpu-nc48")) is not None
