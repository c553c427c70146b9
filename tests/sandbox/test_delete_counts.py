"""Delete requests counted per instance, the evidence that a removal deleted its instance exactly once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox.world import World
from sandbox.world.errors import ArmError
from tests.sandbox.helpers import POOL, RG, scenario

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
SUB = "11111111-2222-3333-4444-555555555555"


def make(initial: int = 3) -> World:
    doc = scenario()
    doc["node_groups"][0]["initial"] = initial
    return World(doc, start=START)


def arm_breakdown(world: World) -> dict[str, Any]:
    return world.report()["api_calls"]["breakdown"]["arm"]


def test_each_instance_named_in_an_accepted_delete_counts_once() -> None:
    world = make()
    group = world.scale_set(SUB, RG, POOL)
    world.delete_instances(group, ["0"])
    world.delete_instances(group, ["1", "2"])
    breakdown = arm_breakdown(world)
    assert breakdown["instances_deleted"] == {f"{POOL}/0": 1, f"{POOL}/1": 1, f"{POOL}/2": 1}
    assert breakdown["instance_deletes_refused"] == {}


def test_deleting_an_instance_again_while_it_is_deleting_counts_twice() -> None:
    world = make()
    group = world.scale_set(SUB, RG, POOL)
    world.delete_instances(group, ["1"])
    world.advance_by(5)  # still Deleting (delete delay 30 s): ARM accepts the repeat
    world.delete_instances(group, ["1"])
    assert group.capacity == 2  # the repeat does not take capacity down again
    assert arm_breakdown(world)["instances_deleted"] == {f"{POOL}/1": 2}


def test_deleting_an_instance_that_is_gone_is_refused_and_counted_as_refused() -> None:
    world = make()
    group = world.scale_set(SUB, RG, POOL)
    world.delete_instances(group, ["1"])
    world.advance_by(60)  # vanished
    with pytest.raises(ArmError) as caught:
        world.delete_instances(group, ["1", "2"])  # ARM refuses the whole request
    assert (caught.value.status, caught.value.code) == (400, "InvalidParameter")
    breakdown = arm_breakdown(world)
    assert breakdown["instances_deleted"] == {f"{POOL}/1": 1}
    assert breakdown["instance_deletes_refused"] == {f"{POOL}/1": 1, f"{POOL}/2": 1}
    assert [i.instance_id for i in world.instances(group)] == [0, 2]  # nothing was deleted


def test_lowering_capacity_is_not_a_delete_request() -> None:
    world = make()
    group = world.scale_set(SUB, RG, POOL)
    world.set_capacity(group, 1)  # Azure's scale-in policy picks the victims, not the caller
    assert arm_breakdown(world)["instances_deleted"] == {}
