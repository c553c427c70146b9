"""Stopped (deallocated) instances in a replay: their OS disks' cost in `cost` and on its own, their start delay."""

from __future__ import annotations

from dataclasses import replace

import pytest

from devtools.replay.harness import RESOURCE_GROUP, ReplayConfig, build_world
from devtools.replay.metrics import STOPPED_INSTANCE_ASSUMPTIONS, run_result
from devtools.replay.pools import CPU_POOL
from devtools.replay.traces import Trace, TracePod
from sandbox.model import os_disks, quota
from sandbox.world import World

CONFIG = ReplayConfig(pools=(CPU_POOL,), tail_s=900.0)
TRACE = Trace("tiny", "<test>", (TracePod(at=0.0, duration=600.0, cpu_milli=1000, memory_bytes=1 << 30),), "hand-made")


def _world(seed: int = 0) -> World:
    return build_world(TRACE, replace(CONFIG, seed=seed), initial={CPU_POOL.name: 2})


def _group(world: World):  # noqa: ANN202 - the world's scale set
    return world.scale_set(world.subscription_id, RESOURCE_GROUP, CPU_POOL.name)


def _stop_one(world: World, *, stopped_for: float) -> None:
    world.advance_by(10)
    world.deallocate_instances(_group(world), ["1"])
    world.advance_by(60 + stopped_for)  # the deallocation takes up to 40 s (the sandbox's default delete delay)


@pytest.mark.parametrize("stopped_for", [0.0, 300.0, 900.0])  # the world ends at 1500 s
def test_stopped_disk_cost_is_in_cost_and_on_its_own(stopped_for: float) -> None:
    world = _world()
    _stop_one(world, stopped_for=stopped_for)
    report = world.report()
    result = run_result(world, CONFIG.pools, scale_actions=0, oracle_cost=1.0)
    disk = os_disks.os_disk_for(quota.vcpus(world.scenario.node_groups[0].capacity))
    seconds = report["stopped_disks"]["disk_seconds"]
    assert stopped_for <= seconds <= stopped_for + 60  # deallocated 20-40 s after the ask
    assert result["stopped_disk_seconds"] == pytest.approx(seconds, abs=0.1)
    assert result["stopped_disk_cost"] == pytest.approx(seconds * disk.usd_per_second, abs=1e-4)
    compute = report["node_seconds"] * CPU_POOL.price_per_hour / 3600
    assert result["cost"] == pytest.approx(compute + result["stopped_disk_cost"], abs=2e-4)
    assert result["stopped_disk_cost"] < seconds * CPU_POOL.price_per_hour / 3600  # a disk is cheaper than the VM


def test_a_replay_without_deallocations_has_no_disk_cost() -> None:
    world = _world()
    world.advance_by(600)
    result = run_result(world, CONFIG.pools, scale_actions=0, oracle_cost=1.0)
    assert result["stopped_disk_cost"] == 0 and result["stopped_disk_seconds"] == 0


def test_the_replay_start_delay_is_no_faster_than_half_its_boot_delay_and_is_stated() -> None:
    world = _world()
    start, boot = world.scenario.start_delay, world.scenario.boot_delay
    assert start.median >= boot.median / 2 and start.p95 >= boot.p95 / 2 and start.high >= boot.high / 2
    assert start.median < boot.median  # its own distribution, not the create-and-boot one
    assert any("start_delay" in line and f"{start.median:.0f} s" in line for line in STOPPED_INSTANCE_ASSUMPTIONS)


def _start_delay(seed: int) -> float:
    world = _world(seed)
    _stop_one(world, stopped_for=0.0)
    world.start_instances(_group(world), ["1"])
    return next(i for i in world.instances(_group(world)) if i.instance_id == 1).boot_delay


def test_a_replay_start_delay_is_deterministic_per_seed() -> None:
    assert _start_delay(3) == _start_delay(3)
    assert _start_delay(3) != _start_delay(4)


@pytest.mark.parametrize("fraction", [0.25, 0.5, 1.0])
def test_the_start_fraction_scales_the_start_delay_and_the_suite_keeps_half(fraction: float) -> None:
    world = build_world(TRACE, replace(CONFIG, start_fraction=fraction), initial={CPU_POOL.name: 1})
    start, boot = world.scenario.start_delay, world.scenario.boot_delay
    assert (start.median, start.p95, start.high) == pytest.approx(
        (boot.median * fraction, boot.p95 * fraction, boot.high * fraction))
    assert ReplayConfig().start_fraction == 0.5  # the suite's configurations start from the default
