"""VMSS instance mix in the sandbox: a Flexible set with several VM sizes (sandbox.model.instance_mix), each new VM's
size chosen by the set's allocation strategy (sandbox.world.instance_mix), served with sku "Mix" and a skuProfile."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.api import arm_api, flexible
from sandbox.api.wire import Request
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world import World
from sandbox.world.compute import InstanceSim
from sandbox.world.errors import ArmError
from tests.sandbox.helpers import RG, START, SUB, scenario

MIX = "pool-mix"
D2 = {"vm_size": "Standard_D2s_v5", "allocatable": {"cpu": "1900m", "memory": "5Gi", "pods": 110},
      "capacity": {"cpu": "2", "memory": "8Gi", "pods": 110}}
D4 = {"vm_size": "Standard_D4s_v5", "allocatable": {"cpu": "3860m", "memory": "12Gi", "pods": 110},
      "capacity": {"cpu": "4", "memory": "16Gi", "pods": 110}}
D8 = {"vm_size": "Standard_D8s_v5", "allocatable": {"cpu": "7820m", "memory": "28Gi", "pods": 110},
      "capacity": {"cpu": "8", "memory": "32Gi", "pods": 110}}


def _group(strategy: str = "LowestPrice", sizes: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"resource_group": RG, "name": MIX, "orchestration": "Flexible", "min": 0, "max": 10, "initial": 0,
            "instance_mix": {"strategy": strategy, "sizes": sizes if sizes is not None else [D8, D2, D4]}, **extra}


def _world(group: dict[str, Any]) -> World:
    return World(scenario(node_groups=[group]), seed=0, start=START)


def _grow(world: World, capacity: int) -> list[InstanceSim]:
    group = world.scale_set(SUB, RG, MIX)
    world.set_capacity(group, capacity)
    world.advance_by(61)  # the helpers' 60 s boot: every new VM's node has registered
    return world.instances(group)


def _sizes(instances: list[InstanceSim]) -> list[str]:
    return [i.vm_size for i in sorted(instances, key=lambda i: i.instance_id)]


def test_the_scale_set_is_served_as_mix_with_its_sku_profile() -> None:
    world = _world(_group("Prioritized", [{**D4, "rank": 1}, {**D8, "rank": 0}]))
    body = arm_api.vmss_json(world, world.scale_set(SUB, RG, MIX))
    assert body["sku"] == {"name": "Mix", "capacity": 0}  # no tier: the sizes differ
    assert body["properties"]["skuProfile"] == {
        "vmSizes": [{"name": "Standard_D4s_v5", "rank": 1}, {"name": "Standard_D8s_v5", "rank": 0}],
        "allocationStrategy": "Prioritized",
    }
    assert body["properties"]["orchestrationMode"] == "Flexible"


def test_lowest_price_ranks_omitted_and_a_single_size_set_unchanged() -> None:
    world = _world(_group())
    profile = arm_api.vmss_json(world, world.scale_set(SUB, RG, MIX))["properties"]["skuProfile"]
    assert all("rank" not in size for size in profile["vmSizes"])
    plain = World(scenario(), seed=0, start=START)
    body = arm_api.vmss_json(plain, plain.scale_set(SUB, RG, "pool-a"))
    assert body["sku"]["name"] == "Standard_D4s_v5" and "skuProfile" not in body["properties"]


@pytest.mark.parametrize("strategy,sizes,expected", [
    # the fewest vCPUs is the cheapest within one family: every new VM is a D2
    ("LowestPrice", [D8, D2, D4], ["Standard_D2s_v5"] * 3),
    # the lowest rank, whatever the order listed
    ("Prioritized", [{**D2, "rank": 2}, {**D8, "rank": 0}, {**D4, "rank": 1}], ["Standard_D8s_v5"] * 3),
    # equal spare capacity per size assumed: the VMs spread over the sizes, in listed order
    ("CapacityOptimized", [D8, D2, D4], ["Standard_D8s_v5", "Standard_D2s_v5", "Standard_D4s_v5"]),
])
def test_scale_out_chooses_each_vm_size_by_the_strategy(strategy: str, sizes: list[dict[str, Any]],
                                                        expected: list[str]) -> None:
    world = _world(_group(strategy, sizes))
    assert _sizes(_grow(world, 3)) == expected


def test_prioritized_puts_unranked_sizes_last() -> None:
    world = _world(_group("Prioritized", [D2, {**D4, "rank": 5}]))
    assert _sizes(_grow(world, 2)) == ["Standard_D4s_v5"] * 2


def test_capacity_optimized_counts_the_members_the_set_already_has() -> None:
    world = _world(_group("CapacityOptimized", [D2, D4], initial=1))  # the initial VM is a D2
    assert _sizes(_grow(world, 4)) == ["Standard_D2s_v5", "Standard_D4s_v5", "Standard_D2s_v5", "Standard_D4s_v5"]


def test_nodes_register_with_their_sizes_allocatable_and_instance_type() -> None:
    world = _world(_group("CapacityOptimized", [D2, D8]))
    for inst in _grow(world, 2):
        node = world.k8s_get("nodes", "", inst.node_name)
        assert node is not None
        size = D2 if inst.vm_size == "Standard_D2s_v5" else D8
        assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == size["vm_size"]
        assert node["status"]["allocatable"]["cpu"] == size["allocatable"]["cpu"]
        assert node["status"]["capacity"]["cpu"] == size["capacity"]["cpu"]


def test_each_member_vm_reports_its_own_size() -> None:
    world = _world(_group("CapacityOptimized", [D4, D8]))
    group = world.scale_set(SUB, RG, MIX)
    members = _grow(world, 2)
    assert [flexible.vm_json(world, group, i)["properties"]["hardwareProfile"]["vmSize"] for i in members] == [
        "Standard_D4s_v5", "Standard_D8s_v5"]


def test_the_group_stands_as_its_largest_size_and_the_sku_catalogue_lists_every_size() -> None:
    spec = load_scenario(scenario(node_groups=[_group()])).node_groups[0]
    assert spec.vm_size == "Standard_D8s_v5" and spec.allocatable.cpu_milli == 7820
    world = _world(_group())
    assert {"standard_d2s_v5", "standard_d4s_v5", "standard_d8s_v5"} <= set(arm_api.vm_size_catalogue(world))


class _Body:
    def __init__(self, body: Any) -> None:
        self._body = body

    def json(self) -> Any:
        return self._body


def test_a_write_may_send_the_mix_back_but_not_change_its_sizes() -> None:
    world = _world(_group())
    group = world.scale_set(SUB, RG, MIX)
    same = arm_api.vmss_json(world, group)
    same["sku"]["capacity"] = 2
    assert arm_api._capacity_request(group, _Body(same)) == (2, same["tags"], None)  # type: ignore[arg-type]
    fewer = {"vmSizes": [{"name": "Standard_D2s_v5"}], "allocationStrategy": "LowestPrice"}
    changed = {"sku": {"name": "Mix", "capacity": 2}, "properties": {"skuProfile": fewer}}
    with pytest.raises(ArmError, match="instance mix"):
        arm_api._capacity_request(group, _Body(changed))  # type: ignore[arg-type]
    with pytest.raises(ArmError, match="VM size"):
        arm_api._capacity_request(group, _Body({"sku": {"name": "Standard_D2s_v5"}}))  # type: ignore[arg-type]


@pytest.mark.parametrize("change,path,problem", [
    ({"orchestration": "Uniform"}, "instance_mix", "Flexible"),
    ({"instance_mix": {"sizes": [D2]}}, "instance_mix.strategy", "required"),
    ({"instance_mix": {"strategy": "Cheapest", "sizes": [D2]}}, "instance_mix.strategy", "allocation strategy"),
    ({"instance_mix": {"strategy": "LowestPrice", "sizes": [D2] * 6}}, "instance_mix.sizes", "1 to 5"),
    ({"instance_mix": {"strategy": "LowestPrice", "sizes": []}}, "instance_mix.sizes", "1 to 5"),
    ({"instance_mix": {"strategy": "LowestPrice", "sizes": [D2, {**D4, "vm_size": "Standard_E4s_v5"}]}},
     "instance_mix.sizes[1].vm_size", "family"),
    ({"instance_mix": {"strategy": "LowestPrice", "sizes": [{**D2, "vm_size": "Standard_NC4as_T4_v3"}]}},
     "instance_mix.sizes[0].vm_size", "A, B, D, E or F"),
    ({"instance_mix": {"strategy": "LowestPrice", "sizes": [D2, D2]}}, "instance_mix.sizes[1].vm_size", "twice"),
    ({"instance_mix": {"strategy": "LowestPrice", "sizes": [{**D2, "rank": 1}]}}, "instance_mix.sizes[0].rank",
     "Prioritized"),
    ({"instance_mix": {"strategy": "LowestPrice", "sizes": [{"vm_size": "Standard_D2s_v5"}]}},
     "instance_mix.sizes[0].allocatable", "required"),
    ({"instance_mix": {"strategy": "LowestPrice", "sizes": [{**D2, "capacity": {"cpu": "1", "memory": "1Gi"}}]}},
     "instance_mix.sizes[0].allocatable", "exceed"),
    ({"vm_size": "Standard_D2s_v5"}, "vm_size", "each of its sizes"),
    ({"standby_pool": {"name": "pool-1"}}, "instance_mix", "Standby Pool"),
])
def test_bad_instance_mix_input_is_refused_naming_the_field(change: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(scenario(node_groups=[{**_group(), **change}]))
    assert info.value.path == f"$.node_groups[0].{path}"
    assert problem in info.value.problem


def _steer(first: str, others: list[str], strategy: str = "Prioritized") -> dict[str, Any]:
    sizes = [{"name": first, "rank": 0}, *({"name": n, "rank": i + 1} for i, n in enumerate(others))]
    return {"vmSizes": sizes, "allocationStrategy": strategy}


def _patch(world: World, body: dict[str, Any], *, etag: str | None = None) -> Any:
    group = world.scale_set(SUB, RG, MIX)
    request = Request.build("PATCH", f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/"
                            f"virtualMachineScaleSets/{MIX}", headers={"If-Match": etag or arm_api.vmss_etag(group)},
                            body=body)
    return arm_api._update(world, request, {"sub": SUB, "rg": RG, "vmss": MIX}, "2024-07-01")


@pytest.mark.parametrize("strategy", ["LowestPrice", "CapacityOptimized"])
@pytest.mark.parametrize("first", ["Standard_D2s_v5", "Standard_D4s_v5", "Standard_D8s_v5"])
def test_a_steering_write_stores_the_ranks_and_new_vms_take_the_first_size(strategy: str, first: str) -> None:
    """The autoscaler's steering PATCH: the same sizes, this one rank 0, Prioritized, with the capacity. Its new VMs
    are of that size, a GET shows the stored profile, and the next write with the old etag is refused."""
    world = _world(_group(strategy))
    group = world.scale_set(SUB, RG, MIX)
    etag = arm_api.vmss_etag(group)
    others = [s for s in ("Standard_D8s_v5", "Standard_D2s_v5", "Standard_D4s_v5") if s != first]
    _patch(world, {"sku": {"name": "Mix", "capacity": 3}, "properties": {"skuProfile": _steer(first, others)}})
    world.advance_by(61)
    assert _sizes(world.instances(group)) == [first] * 3
    profile = arm_api.vmss_json(world, group)["properties"]["skuProfile"]
    assert profile["allocationStrategy"] == "Prioritized"
    assert {v["name"]: v["rank"] for v in profile["vmSizes"]} == {first: 0, **{n: i + 1 for i, n in enumerate(others)}}
    with pytest.raises(ArmError) as stale:
        _patch(world, {"sku": {"name": "Mix", "capacity": 4}}, etag=etag)
    assert stale.value.status == 412 and len(world.instances(group)) == 3


def test_a_refused_increase_leaves_the_profile_as_it_was() -> None:
    """Quota refuses the growth (409): the steering profile of that write is not kept either."""
    world = World(scenario(node_groups=[_group()], quotas={"standardDSv5Family": 4}), seed=0, start=START)
    group = world.scale_set(SUB, RG, MIX)
    before = group.spec
    with pytest.raises(ArmError) as refused:
        _patch(world, {"sku": {"name": "Mix", "capacity": 1},
                       "properties": {"skuProfile": _steer("Standard_D8s_v5", ["Standard_D2s_v5", "Standard_D4s_v5"])}})
    assert refused.value.status == 409 and group.spec == before and not world.instances(group)


def test_quota_counts_each_vm_at_its_own_size() -> None:
    """Two D2s_v5 (2 vCPUs each) fit a 4-vCPU family quota, though the mix's largest size (D8s_v5) would not."""
    world = World(scenario(node_groups=[_group()], quotas={"standardDSv5Family": 4}), seed=0, start=START)
    group = world.scale_set(SUB, RG, MIX)
    _patch(world, {"sku": {"name": "Mix", "capacity": 2}})  # LowestPrice: two D2s_v5
    world.advance_by(61)
    assert _sizes(world.instances(group)) == ["Standard_D2s_v5"] * 2
    with pytest.raises(ArmError) as refused:
        _patch(world, {"sku": {"name": "Mix", "capacity": 3}})  # a third D2s_v5: 6 vCPUs > 4
    assert refused.value.status == 409 and "Quota" in refused.value.message


@pytest.mark.parametrize("profile,target,status", [
    (_steer("Standard_D2s_v5", ["Standard_D4s_v5", "Standard_D8s_v5", "Standard_D16s_v5", "Standard_D32s_v5",
                                "Standard_D48s_v5"]), "properties.skuProfile.vmSizes", 400),
    (_steer("Standard_D2s_v5", ["Standard_D4s_v5", "Standard_E8s_v5"]), "properties.skuProfile.vmSizes[2].name", 400),
    (_steer("Standard_D2s_v5", ["Standard_D4s_v5", "Standard_NC8as_T4_v3"]),
     "properties.skuProfile.vmSizes[2].name", 400),
    (_steer("Standard_D2s_v5", ["Standard_D4s_v5", "Standard_D8s_v5"], "Cheapest"),
     "properties.skuProfile.allocationStrategy", 400),
    (_steer("Standard_D2s_v5", ["Standard_D4s_v5", "Standard_D8s_v5"], "LowestPrice"),
     "properties.skuProfile.vmSizes[0].rank", 400),
    (_steer("Standard_D2s_v5", ["Standard_D2s_v5", "Standard_D8s_v5"]), "properties.skuProfile.vmSizes[1].name", 400),
    (_steer("Standard_D2s_v5", ["Standard_D4s_v5", "Standard_D16s_v5"]), "properties.skuProfile.vmSizes", 409),
    ({"vmSizes": "Standard_D2s_v5"}, "properties.skuProfile.vmSizes", 400),
])
def test_a_profile_beyond_azures_rules_is_refused_naming_the_property(
        profile: dict[str, Any], target: str, status: int) -> None:
    world = _world(_group())
    group = world.scale_set(SUB, RG, MIX)
    before = (group.spec, group.generation)
    with pytest.raises(ArmError) as refused:
        _patch(world, {"sku": {"name": "Mix", "capacity": 2}, "properties": {"skuProfile": profile}})
    assert (refused.value.status, refused.value.target) == (status, target)
    assert (group.spec, group.generation) == before and not world.instances(group)


def test_the_report_counts_vms_and_pods_by_size() -> None:
    """Every size of the mix appears (0 included); pods count under their node's size."""
    world = _world(_group("Prioritized", [{**D2, "rank": 0}, {**D4, "rank": 1}, {**D8, "rank": 2}]))
    group = world.scale_set(SUB, RG, MIX)
    _patch(world, {"sku": {"name": "Mix", "capacity": 2}})
    _patch(world, {"sku": {"name": "Mix", "capacity": 3},
                   "properties": {"skuProfile": _steer("Standard_D8s_v5", ["Standard_D2s_v5", "Standard_D4s_v5"])}})
    world.advance_by(61)
    from sandbox.world import instance_mix

    report = instance_mix.report(world)
    assert report is not None
    mine = report[group.key]
    assert mine["created_by_size"] == {"Standard_D2s_v5": 2, "Standard_D4s_v5": 0, "Standard_D8s_v5": 1}
    assert mine["alive_by_size_at_end"] == mine["created_by_size"]
    assert mine["profile"]["ranks"]["Standard_D8s_v5"] == 0 and mine["profile"]["strategy"] == "Prioritized"
    by_size = mine["node_seconds_by_size"]
    assert by_size["Standard_D4s_v5"] == 0 and by_size["Standard_D2s_v5"] == pytest.approx(2 * by_size["Standard_D8s_v5"])
    assert sum(by_size.values()) == pytest.approx(world.report()["node_seconds_by_group"][group.key], abs=0.01)
    assert instance_mix.report(World(scenario(), seed=0, start=START)) is None
