"""Stopped (deallocated) instances as standby: the start delay, the OS disk billed while stopped, the quota held."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox.model.scenario import Scenario, load_scenario
from sandbox.world import World
from sandbox.world.compute import InstanceSim, ScaleSetSim
from tests.sandbox.helpers import POOL, RG, SUB, scenario

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
KEY = f"{RG}/{POOL}"


def make(*, seed: int = 0, initial: int = 1, **overrides: Any) -> World:
    doc = scenario(**overrides)
    doc["node_groups"][0]["initial"] = initial
    return World(doc, start=START, seed=seed)


def pool(world: World) -> ScaleSetSim:
    return world.scale_set(SUB, RG, POOL)


def stopped(world: World, ids: list[str], *, wait: float = 30.0) -> None:
    """Deallocate `ids` and wait until they are deallocated (helpers.BASE: deallocation takes 30 s)."""
    world.deallocate_instances(pool(world), ids)
    world.advance_by(wait)
    assert {i.power for i in world.instances(pool(world)) if str(i.instance_id) in ids} == {"deallocated"}


def started(world: World, instance_id: int) -> InstanceSim:
    world.start_instances(pool(world), [str(instance_id)])
    return next(i for i in world.instances(pool(world)) if i.instance_id == instance_id)


# ------------------------------------------------------------------ the start delay


def test_the_default_start_delay_is_half_the_default_boot_delay() -> None:
    defaults = Scenario(name="", source="", node_groups=())
    assert defaults.start_delay.kind == "lognormal"
    assert defaults.start_delay.median == defaults.boot_delay.median / 2
    assert defaults.start_delay.p95 == defaults.boot_delay.p95 / 2
    assert defaults.start_delay.high == defaults.boot_delay.high / 2


def test_a_scenario_without_start_delay_gets_the_default() -> None:
    doc = scenario()
    doc.pop("start_delay", None)
    assert load_scenario(doc).start_delay == Scenario(name="", source="", node_groups=()).start_delay


@pytest.mark.parametrize("start_s", [5.0, 200.0])
def test_a_start_takes_the_start_delay_not_the_boot_delay(start_s: float) -> None:
    world = make(start_delay=f"{start_s}s")  # helpers.BASE: boot 60 s, provisioning_fraction 0.5
    stopped(world, ["0"])
    began = world.report()["sim_seconds"]
    inst = started(world, 0)
    assert inst.boot_delay == start_s
    assert inst.provision_at - began == pytest.approx(start_s * 0.5)
    assert inst.ready_at - began == pytest.approx(start_s)
    world.advance_by(start_s - 0.5)
    assert world.state()["groups"][KEY]["ready"] == 0
    world.advance_by(1.0)
    assert world.state()["groups"][KEY]["ready"] == 1


def test_a_created_instance_still_takes_the_boot_delay() -> None:
    world = make(start_delay="5s", initial=0)
    world.set_capacity(pool(world), 1)
    (inst,) = world.instances(pool(world))
    assert inst.boot_delay == 60.0


def _start_delays(seed: int, starts: int = 3) -> list[float]:
    world = make(seed=seed, start_delay={"median": "50s", "p95": "150s", "max": "450s"})
    delays = []
    for _ in range(starts):
        stopped(world, ["0"])
        delays.append(started(world, 0).boot_delay)
        world.advance_by(500)
    return delays


def test_start_delays_are_deterministic_per_seed_and_differ_across_seeds_and_starts() -> None:
    first = _start_delays(7)
    assert first == _start_delays(7)
    assert first != _start_delays(8)
    assert len(set(first)) == len(first)  # each start draws its own
    assert all(0.0 <= d <= 450.0 for d in first)
