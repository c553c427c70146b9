"""Stopped (deallocated) instances as standby: the start delay, the OS disk billed while stopped, the quota held."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox.api import prices_api
from sandbox.api.wire import Request
from sandbox.model import os_disks
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


# ------------------------------------------------------------------ the OS disk billed while stopped


def test_a_deallocated_instance_bills_its_os_disk_not_compute() -> None:
    world = make(initial=2)  # helpers.BASE's pool: 4 vCPUs, so AKS's P10/128 GiB managed OS disk
    stopped(world, ["1"])  # instance 1 deallocated at 30 s
    world.advance_by(170)
    report = world.report()
    disks = report["stopped_disks"]
    assert report["node_seconds"] == pytest.approx(200 + 30)
    assert disks["by_group"][KEY]["disk_seconds"] == pytest.approx(170)
    tier = os_disks.os_disk_for(4)
    assert (disks["by_group"][KEY]["tier"], disks["by_group"][KEY]["size_gib"]) == (tier.tier, tier.size_gib) == ("P10", 128)
    assert disks["by_group"][KEY]["cost_usd"] == pytest.approx(170 * tier.usd_per_month / (730 * 3600), abs=1e-6)
    assert disks["cost_usd"] == disks["by_group"][KEY]["cost_usd"] and disks["disk_seconds"] == pytest.approx(170)
    started(world, 1)
    world.advance_by(100)  # running again: the disk-seconds stop growing
    assert world.report()["stopped_disks"]["disk_seconds"] == pytest.approx(170)


def test_no_deallocation_no_disk_cost() -> None:
    world = make(initial=2)
    world.advance_by(300)
    assert world.report()["stopped_disks"]["cost_usd"] == 0 and world.report()["stopped_disks"]["disk_seconds"] == 0


@pytest.mark.parametrize(("vcpus", "tier"), [(1, "P10"), (7, "P10"), (8, "P15"), (16, "P20"), (63, "P20"), (64, "P30"),
                                              (96, "P30")])
def test_the_os_disk_tier_follows_aks_defaults_by_vcpus(vcpus: int, tier: str) -> None:
    assert os_disks.os_disk_for(vcpus).tier == tier


def test_bigger_tiers_cost_more() -> None:
    prices = [t.usd_per_month for t in os_disks.OS_DISK_TIERS]
    sizes = [t.size_gib for t in os_disks.OS_DISK_TIERS]
    assert prices == sorted(prices) and sizes == sorted(sizes) and len(set(prices)) == len(prices)


def _prices(filter_text: str) -> list[dict[str, Any]]:
    response = prices_api.handle(Request.build("GET", prices_api.PREFIX, {"$filter": filter_text}), base_url="https://x")
    assert response.status == 200
    return json.loads(response.body)["Items"]


def test_the_prices_double_serves_the_disk_rows_under_the_real_filters() -> None:
    items = _prices("serviceName eq 'Storage' and armRegionName eq 'eastus' and productName eq 'Premium SSD Managed "
                    "Disks' and skuName eq 'P10 LRS' and meterName eq 'P10 LRS Disk' and priceType eq 'Consumption'")
    assert len(items) == 1
    (row,) = items
    assert row["unitOfMeasure"] == "1/Month" and row["retailPrice"] == os_disks.os_disk_for(4).usd_per_month
    every = _prices("serviceName eq 'Storage' and armRegionName eq 'westeurope'")
    assert sorted(r["meterName"] for r in every) == sorted(t.meter_name for t in os_disks.OS_DISK_TIERS)
    # a VM client's filter never picks a disk row
    vm = _prices("serviceName eq 'Virtual Machines' and armRegionName eq 'eastus' and armSkuName eq 'Standard_D4s_v5'")
    assert vm and all(r["serviceName"] == "Virtual Machines" for r in vm)


# ------------------------------------------------------------------ the quota a stopped instance holds


def test_a_deallocated_regular_instance_keeps_its_cores_in_the_usages() -> None:
    world = make(initial=2, quotas={"cores": 100})
    before = {u["name"]["value"]: u["currentValue"] for u in world.usages(SUB, "westeurope")}
    stopped(world, ["1"])
    after = {u["name"]["value"]: u["currentValue"] for u in world.usages(SUB, "westeurope")}
    assert before["cores"] == after["cores"] == 8 and before == after
