"""shared.adapters.instance_mix without a server: lanes from a set and its members, their order by strategy, and
the one PATCH a lane's resize sends. (Against the sandbox: tests/contract/test_instance_mix.py.)"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from azure.mgmt.compute.models import VirtualMachineScaleSet

from shared.adapters.instance_mix import (
    RANKS_TAG,
    STRATEGY_TAG,
    MixProfile,
    as_lanes,
    lane_order,
    read_profile,
    resize_update,
    user_profile,
    user_strategy,
)
from shared.domain import FLEXIBLE_SCALE_SET, Instance, NodeGroup, VmSizeCapacity

D2, D4, D16 = "Standard_D2s_v5", "Standard_D4s_v5", "Standard_D16s_v5"
_GIB = 1024**3


def _vmss(sku: str, profile: dict[str, Any] | None) -> VirtualMachineScaleSet:
    return VirtualMachineScaleSet({"location": "eastus", "sku": {"name": sku, "capacity": 3},
                                   "properties": {"skuProfile": profile} if profile else {}})


def test_read_profile_only_for_a_mix_sku() -> None:
    profile = {"vmSizes": [{"name": D16, "rank": 1}, {"name": D2}], "allocationStrategy": "Prioritized"}
    assert read_profile(_vmss("Mix", profile)) == MixProfile((D16, D2), (1, None), "Prioritized")
    assert read_profile(_vmss("mix", profile)) is not None  # ARM compares names case-insensitively
    assert read_profile(_vmss("Standard_D4s_v5", profile)) is None
    assert read_profile(_vmss("Mix", None)) is None


SIZES = {D2.lower(): VmSizeCapacity(D2, 2, 8 * _GIB), D16.lower(): VmSizeCapacity(D16, 16, 64 * _GIB)}


@pytest.mark.parametrize("profile,strategy,prices,sizes,expected", [
    (MixProfile((D16, D2, D4), (None,) * 3, "LowestPrice"), "LowestPrice",
     {D2.lower(): 0.1, D4.lower(): 0.2, D16.lower(): 0.8}, {}, (D2, D4, D16)),
    # a price missing: by vCPUs (Resource SKUs, else the size's name)
    (MixProfile((D16, D4, D2), (None,) * 3, "LowestPrice"), "LowestPrice", {D2.lower(): 0.1}, SIZES, (D2, D4, D16)),
    (MixProfile((D16, D4, D2), (2, 0, None), "Prioritized"), "Prioritized", {}, {}, (D4, D16, D2)),
    (MixProfile((D16, D4, D2), (None,) * 3, "CapacityOptimized"), "CapacityOptimized", {}, SIZES, (D16, D4, D2)),
    # steered (Prioritized on the set), the user's LowestPrice from the tag decides
    (MixProfile((D16, D4, D2), (0, 1, 2), "Prioritized"), "LowestPrice", {}, SIZES, (D2, D4, D16)),
])
def test_lane_order_follows_the_strategy(profile: MixProfile, strategy: str, prices: dict[str, float],
                                         sizes: dict[str, VmSizeCapacity], expected: tuple[str, ...]) -> None:
    order = lane_order(profile, strategy, sizes=sizes, prices=prices)
    assert order == expected and sorted(order) == sorted(profile.sizes)


def test_user_strategy_prefers_our_tag() -> None:
    profile = MixProfile((D2, D4), (0, 1), "Prioritized")
    assert user_strategy(profile, {}) == "Prioritized"
    assert user_strategy(profile, {STRATEGY_TAG: "lowestprice"}) == "LowestPrice"
    assert user_strategy(profile, {STRATEGY_TAG: "nonsense"}) == "Prioritized"


SET = NodeGroup(resource_group="rg", name="farm", min_size=2, max_size=6, capacity=5, vm_size="Mix",
                provider=FLEXIBLE_SCALE_SET, etag='"7"', tags={"owner": "me"})


def _member(n: int, size: str, state: str = "Succeeded") -> Instance:
    return Instance(instance_id=f"farm_{n}", provisioning_state=state, vm_size=size)


@pytest.mark.parametrize("members", [
    [_member(1, D2), _member(2, D2), _member(3, D16), _member(4, D4, "Deleting"), _member(5, "Standard_D8s_v5")],
    [],
    [_member(n, D4) for n in range(6)],
])
def test_lanes_split_the_set_by_member_size(members: list[Instance]) -> None:
    profile = MixProfile((D16, D2, D4), (None,) * 3, "LowestPrice")
    lanes = as_lanes(SET, profile, members, order=(D2, D4, D16))
    alive = [m for m in members if not m.deleting]
    assert [g.lane for g in lanes] == [D2, D4, D16]
    for lane in lanes:
        others = len(alive) - lane.capacity
        assert lane.capacity == sum(1 for m in alive if m.vm_size == lane.lane)
        assert lane.min_size == max(0, SET.min_size - others) and lane.max_size >= lane.capacity
        assert lane.max_size == max(lane.capacity, SET.max_size - others)
        assert (lane.etag, lane.tags, lane.parent_id, lane.vm_size) == (SET.etag, SET.tags, SET.id, lane.lane)
        assert lane.id == f"{SET.id}~{lane.lane}" and lane.lanes == (D2, D4, D16)


def _lane(size: str, capacity: int, tags: dict[str, str] | None = None) -> NodeGroup:
    profile = MixProfile((D16, D2, D4), (None,) * 3, "LowestPrice")
    lanes = as_lanes(NodeGroup(**{**{f: getattr(SET, f) for f in ("resource_group", "name", "min_size", "max_size",
                                                                    "vm_size", "provider", "etag")},
                                  "capacity": 0, "tags": tags or {}}),
                     profile, [_member(n, size) for n in range(capacity)], order=(D2, D4, D16))
    return next(g for g in lanes if g.lane == size)


@pytest.mark.parametrize("size", [D2, D4, D16])
@pytest.mark.parametrize("grow", [1, 3])
def test_an_increase_is_one_patch_with_capacity_and_steering(size: str, grow: int) -> None:
    lane = _lane(size, 2)
    profile = MixProfile((D16, D2, D4), (None,) * 3, "LowestPrice")
    body = resize_update(lane, 2 + grow, set_sku_name="Mix", set_capacity=5, profile=profile,
                         tags={"owner": "me"}).as_dict()
    assert body["sku"] == {"name": "Mix", "capacity": 5 + grow}
    steering = body["properties"]["skuProfile"]
    assert steering["allocationStrategy"] == "Prioritized"
    assert [v["name"] for v in steering["vmSizes"]] == [size, *(s for s in (D2, D4, D16) if s != size)]
    assert [v["rank"] for v in steering["vmSizes"]] == [0, 1, 2]
    assert body["tags"] == {"owner": "me", STRATEGY_TAG: "LowestPrice"}  # the user's strategy, kept for reading


def test_the_strategy_tag_is_written_once_and_a_decrease_only_moves_capacity() -> None:
    lane = _lane(D4, 2, {STRATEGY_TAG: "LowestPrice"})
    profile = MixProfile((D16, D2, D4), (0, 1, 2), "Prioritized")
    grown = resize_update(lane, 3, set_sku_name="Mix", set_capacity=4, profile=profile,
                          tags={STRATEGY_TAG: "LowestPrice"}).as_dict()
    assert "tags" not in grown and grown["sku"]["capacity"] == 5
    shrunk = resize_update(lane, 1, set_sku_name="Mix", set_capacity=4, profile=profile, tags={}).as_dict()
    assert shrunk == {"sku": {"name": "Mix", "capacity": 3}}
    with pytest.raises(ValueError, match="capacity"):
        resize_update(lane, -1, set_sku_name="Mix", set_capacity=4, profile=profile, tags={})


def test_a_prioritized_users_ranks_are_kept_in_a_tag_and_read_back() -> None:
    """The steering write overwrites the set's ranks: the user's go in RANKS_TAG with their strategy, and
    user_profile reads them back, so the lanes keep the user's order whatever size we steered to last."""
    users = MixProfile((D16, D2, D4), (2, 0, 1), "Prioritized")
    lane = replace(_lane(D16, 0), allocation_strategy="Prioritized", lanes=(D2, D4, D16))
    tags = resize_update(lane, 1, set_sku_name="Mix", set_capacity=0, profile=users, tags={}).as_dict()["tags"]
    steered = MixProfile((D16, D2, D4), (0, 1, 2), "Prioritized")  # what the set says after our write
    assert lane_order(steered, "Prioritized", sizes={}, prices={})[0] == D16
    mine = user_profile(steered, tags)
    assert mine == users and lane_order(mine, mine.strategy, sizes={}, prices={}) == (D2, D4, D16)


@pytest.mark.parametrize("tags", [
    {},
    {STRATEGY_TAG: "LowestPrice", RANKS_TAG: "Standard_D2s_v5=0"},  # not Prioritized: ranks ignored
    {STRATEGY_TAG: "Prioritized", RANKS_TAG: "Standard_D2s_v5=0"},  # names not every size
    {STRATEGY_TAG: "Prioritized", RANKS_TAG: "garbage,=,x=y"},
])
def test_user_profile_falls_back_to_the_sets_ranks(tags: dict[str, str]) -> None:
    profile = MixProfile((D16, D2, D4), (0, 1, 2), "Prioritized")
    mine = user_profile(profile, tags)
    assert mine.sizes == profile.sizes and mine.ranks == profile.ranks
    assert mine.strategy == user_strategy(profile, tags)
