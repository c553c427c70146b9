"""Hibernated standby instances in the sandbox: a deallocate with hibernate=true on a hibernation-enabled Flexible set,
the memory disk it bills while stopped, its resume delay, and the refusals where the set cannot hibernate."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox.api.arm_api import handle
from sandbox.api.wire import Request
from sandbox.model import os_disks
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world import World
from sandbox.world.compute import ScaleSetSim
from sandbox.world.errors import ArmError
from sandbox.world.identity import ARM_AUDIENCE
from tests.sandbox.helpers import POOL, RG, SUB, scenario

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
KEY = f"{RG}/{POOL}"
MEMORY_GIB = 16  # helpers.BASE's pool: Standard_D4s_v5, 16 GiB


def _doc(*, flexible: bool = True, enabled: bool = True) -> dict[str, Any]:
    doc = scenario()
    group = doc["node_groups"][0]
    group["initial"] = 2
    if flexible:
        group["orchestration"] = "Flexible"
    if enabled:
        group["hibernation_enabled"] = True
    return doc


def make(*, seed: int = 0, **kinds: bool) -> World:
    return World(_doc(**kinds), start=START, seed=seed)


def pool(world: World) -> ScaleSetSim:
    return world.scale_set(SUB, RG, POOL)


def ids(world: World) -> list[str]:
    return [i.arm_id for i in world.instances(pool(world))]


def test_hibernation_is_a_flexible_sets_capability_the_scenario_refuses_elsewhere() -> None:
    assert load_scenario(_doc()).node_groups[0].hibernation_enabled
    assert not load_scenario(_doc(enabled=False)).node_groups[0].hibernation_enabled
    with pytest.raises(ScenarioError, match=r"node_groups\[0\]\.hibernation_enabled.*Flexible"):
        load_scenario(_doc(flexible=False))
    bad = copy.deepcopy(_doc())
    bad["node_groups"][0]["hibernation_enabled"] = "yes"
    with pytest.raises(ScenarioError, match="hibernation_enabled"):
        load_scenario(bad)


def test_a_hibernated_instance_bills_its_os_disk_and_its_memory_as_a_disk() -> None:
    world = make()
    world.deallocate_instances(pool(world), ids(world)[1:], hibernate=True)
    world.advance_by(30)  # helpers.BASE: a deallocation takes 30 s
    world.advance_by(170)
    disks = world.report()["stopped_disks"]
    group = disks["by_group"][KEY]
    os_disk, memory = os_disks.os_disk_for(4), os_disks.memory_disk_for(MEMORY_GIB)
    assert group["hibernated_seconds"] == pytest.approx(group["disk_seconds"]) == pytest.approx(170)
    assert group["memory_disk_cost_usd"] == pytest.approx(170 * memory.usd_per_second, abs=1e-6)
    assert group["cost_usd"] == pytest.approx(170 * (os_disk.usd_per_second + memory.usd_per_second), abs=1e-6)
    assert disks["memory_disk_cost_usd"] == group["memory_disk_cost_usd"] and disks["cost_usd"] == group["cost_usd"]


def test_a_plain_deallocation_bills_no_memory_disk_and_a_resume_ends_the_spell() -> None:
    world = make()
    first, second = ids(world)
    world.deallocate_instances(pool(world), [first])
    world.deallocate_instances(pool(world), [second], hibernate=True)
    world.advance_by(130)
    world.start_instances(pool(world), [first, second])
    world.advance_by(300)
    group = world.report()["stopped_disks"]["by_group"][KEY]
    assert group["disk_seconds"] == pytest.approx(2 * 100)  # both stopped from 30 s to 130 s
    assert group["hibernated_seconds"] == pytest.approx(100)  # only the hibernated one's memory
    assert all(not i.hibernated and i.power == "running" for i in world.instances(pool(world)))


def _resume_delays(seed: int, *, hibernate: bool) -> list[float]:
    world = World({**_doc(), "start_delay": {"median": "50s", "p95": "150s", "max": "450s"}}, start=START, seed=seed)
    delays = []
    for _ in range(3):
        world.deallocate_instances(pool(world), ids(world)[:1], hibernate=hibernate)
        world.advance_by(30)
        world.start_instances(pool(world), ids(world)[:1])
        delays.append(world.instances(pool(world))[0].boot_delay)
        world.advance_by(500)
    return delays


def test_a_resume_draws_the_start_delay_from_its_own_stream() -> None:
    resumed = _resume_delays(3, hibernate=True)
    assert resumed == _resume_delays(3, hibernate=True)  # deterministic per seed
    assert resumed != _resume_delays(3, hibernate=False)  # not the plain start's draws
    assert all(0.0 <= d <= 450.0 for d in resumed)  # the start delay's distribution (assumed: no published figure)


@pytest.mark.parametrize(("kinds", "message"), [
    ({"flexible": True, "enabled": False}, "additionalCapabilities.hibernationEnabled"),
    ({"flexible": False, "enabled": False}, "Flexible orchestration mode"),
])
def test_a_set_that_cannot_hibernate_refuses_before_anything_changes(kinds: dict[str, bool], message: str) -> None:
    world = make(**kinds)
    with pytest.raises(ArmError) as refused:
        world.deallocate_instances(pool(world), ids(world)[:1], hibernate=True)
    assert (refused.value.status, refused.value.code, refused.value.target) == (400, "InvalidParameter", "hibernate")
    assert message in refused.value.message
    assert all(i.power == "running" for i in world.instances(pool(world)))


def _post(world: World, path: str, **query: str) -> Any:
    request = Request.build("POST", f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/{path}",
                            {"api-version": "2024-07-01", **query},
                            {"Authorization": f"Bearer {world.identity.issue(ARM_AUDIENCE).token}"}, body={})
    return handle(world, request)


def test_the_arm_api_hibernates_a_member_and_a_set_given_hibernate_true() -> None:
    world = make()
    first, second = ids(world)
    member = _post(world, f"Microsoft.Compute/virtualMachines/{first}/deallocate", hibernate="true")
    whole = _post(world, f"Microsoft.Compute/virtualMachineScaleSets/{POOL}/deallocate", hibernate="true")
    assert (member.status, whole.status) == (202, 202)
    world.advance_by(60)
    assert {i.arm_id: (i.power, i.hibernated) for i in world.instances(pool(world))} == {
        first: ("deallocated", True), second: ("deallocated", True)}


def test_the_arm_api_refuses_hibernating_a_set_created_without_it() -> None:
    world = make(enabled=False)
    refused = _post(world, f"Microsoft.Compute/virtualMachineScaleSets/{POOL}/deallocate", hibernate="true")
    assert refused.status == 400


@pytest.mark.parametrize(("memory_gib", "tier", "count"), [
    (8, "P10", 1), (128, "P10", 1), (129, "P15", 1), (440, "P20", 1), (880, "P30", 1), (1900, "P30", 2),
])
def test_the_memory_disk_is_the_smallest_tier_holding_the_memory(memory_gib: float, tier: str, count: int) -> None:
    disk = os_disks.memory_disk_for(memory_gib)
    assert (disk.tier.tier, disk.count) == (tier, count)
    assert disk.count * disk.tier.size_gib >= memory_gib


def test_a_vm_without_memory_cannot_be_priced_hibernated() -> None:
    with pytest.raises(ValueError, match="memory"):
        os_disks.memory_disk_for(0)


# -- the Node object of a resumed VM: its kubelet never stopped, so it registers nothing deleted under it ---------

TAINT = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}


def _ready(node: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))


def _stop_and_start(world: World, *, hibernate: bool, delete_node: bool) -> tuple[str, dict[str, Any] | None]:
    """Cordon the second instance's node with our taint, stop it (its Node deleted or kept), start it again and
    wait past the longest start delay: the node's name and its Node object then (None: never registered)."""
    inst = world.instances(pool(world))[1]
    name = inst.node_name
    node = world.k8s_get("nodes", "", name)
    node["spec"] = {**node.get("spec", {}), "unschedulable": True, "taints": [TAINT]}
    node["metadata"]["labels"]["team"] = "kept"
    world.k8s_replace("nodes", "", name, node)
    world.deallocate_instances(pool(world), [inst.arm_id], hibernate=hibernate)
    world.advance_by(60)
    if delete_node:
        world.k8s_delete("nodes", "", name)
    world.start_instances(pool(world), [inst.arm_id])
    world.advance_by(900)  # past any start delay of helpers.BASE
    assert inst.power == "running"
    return name, world._store.get("nodes", "", name)  # noqa: SLF001 - the Node as stored, or None


@pytest.mark.parametrize("hibernate", [True, False], ids=["resumed", "booted"])
def test_a_kept_node_comes_back_ready_with_its_name_labels_taints_and_cordon(hibernate: bool) -> None:
    world = make()
    name, node = _stop_and_start(world, hibernate=hibernate, delete_node=False)
    assert node is not None and _ready(node)
    assert node["metadata"]["name"] == name and node["metadata"]["labels"]["team"] == "kept"
    # What we set stays until we lift it; only the lifecycle controllers' taints go.
    assert node["spec"]["unschedulable"] is True
    assert [t["key"] for t in node["spec"]["taints"]] == [TAINT["key"]]


@pytest.mark.parametrize("hibernate,registers", [(True, False), (False, True)], ids=["resumed", "booted"])
def test_a_node_deleted_while_stopped_registers_again_only_after_a_boot(hibernate: bool, registers: bool) -> None:
    world = make()
    name, node = _stop_and_start(world, hibernate=hibernate, delete_node=True)
    inst = world.instances(pool(world))[1]
    assert (node is not None) == registers and inst.lost_node == (not registers)
    if registers:  # a booted kubelet registers afresh: Ready, uncordoned, none of the old labels
        assert node is not None and _ready(node) and not node["spec"].get("unschedulable")
        assert "team" not in node["metadata"]["labels"]
    world.advance_by(3600)
    assert (world._store.get("nodes", "", name) is not None) == registers  # noqa: SLF001 - never, for a resume
