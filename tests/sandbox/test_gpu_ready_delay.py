"""GPU VMs in the sandbox: a created GPU VM's node registers Ready without its GPUs, which its device plugin adds
`gpu_ready_delay` later (sandbox.model.gpu_spec); a GPU pod waits for them, a CPU group never does."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.model.gpu_spec import DEFAULT_GPU_READY_DELAY, gpu_ready_delay, gpus, without_gpus
from sandbox.model.dists import Dist
from sandbox.model.resources import Amounts
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world import World
from tests.sandbox.helpers import POOL, RG, START, SUB, job, scenario

GPU_ALLOC = {"cpu": "24", "memory": "200Gi", "pods": 110, "nvidia.com/gpu": 4}


def _world(*, gpu_ready_delay: Any = None, allocatable: dict[str, Any] | None = None,
           workloads: list[dict[str, Any]] | None = None) -> World:
    group: dict[str, Any] = {"resource_group": RG, "name": POOL, "vm_size": "Standard_NC24ads_A100_v4",
                             "allocatable": allocatable or GPU_ALLOC, "min": 0, "max": 4, "initial": 1}
    if gpu_ready_delay is not None:
        group["gpu_ready_delay"] = gpu_ready_delay
    return World(scenario(node_groups=[group], workloads=workloads or []), seed=0, start=START)


def _node(world: World, name: str) -> dict[str, Any]:
    node = world.k8s_get("nodes", "", name)
    assert node is not None
    return node


def _ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in node["status"].get("conditions", []))


def _new_node(world: World) -> str:
    fresh = [i for i in world.instances(world.scale_set(SUB, RG, POOL)) if i.instance_id != 0]
    assert len(fresh) == 1
    return fresh[0].node_name


@pytest.mark.parametrize("delay,gpus_at", [("120s", 60 + 120), ("0s", 60), (None, None)])
def test_a_created_gpu_vm_is_ready_first_and_gets_its_gpus_after_the_delay(delay: str | None,
                                                                           gpus_at: int | None) -> None:
    world = _world(gpu_ready_delay=delay)
    initial = next(i for i in world.instances(world.scale_set(SUB, RG, POOL)) if i.instance_id == 0)
    assert _node(world, initial.node_name)["status"]["allocatable"]["nvidia.com/gpu"] == "4"  # long up: has them
    world.set_capacity(world.scale_set(SUB, RG, POOL), 2)
    world.advance_by(61)  # boot 60 s: registered, Ready
    name = _node_and_check_ready(world)
    inst = next(i for i in world.instances(world.scale_set(SUB, RG, POOL)) if i.node_name == name)
    if gpus_at == 60:
        assert _node(world, name)["status"]["allocatable"].get("nvidia.com/gpu") == "4"
        return
    assert "nvidia.com/gpu" not in _node(world, name)["status"]["allocatable"]
    assert "nvidia.com/gpu" not in _node(world, name)["status"]["capacity"]
    world.advance_by(DEFAULT_GPU_READY_DELAY.high + 1 if gpus_at is None else gpus_at - 61 + 1)
    node = _node(world, name)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4" and node["status"]["capacity"]["nvidia.com/gpu"] == "4"
    assert inst.gpus_ready_at is not None and inst.registered_at is not None
    waited = inst.gpus_ready_at - inst.registered_at
    if gpus_at is None:  # the default: an assumption, within its clip
        assert DEFAULT_GPU_READY_DELAY.low <= waited <= DEFAULT_GPU_READY_DELAY.high
    else:
        assert waited == pytest.approx(gpus_at - 60)


def _node_and_check_ready(world: World) -> str:
    name = _new_node(world)
    assert _ready(_node(world, name))
    return name


def test_a_gpu_pod_waits_for_the_gpus_and_a_cpu_group_never_waits() -> None:
    gpu_job = job("train", cpu="4", memory="8Gi", duration="1h", at="0s")
    gpu_job["requests"]["nvidia.com/gpu"] = 4
    world = _world(gpu_ready_delay="300s", workloads=[gpu_job, {**gpu_job, "name": "train-2"}])
    world.set_capacity(world.scale_set(SUB, RG, POOL), 2)
    world.advance_by(200)  # the new node is Ready since 60 s, without GPUs: the second pod still waits
    pods = world.k8s_list("pods", "default")
    assert sum(1 for p in pods if p["spec"].get("nodeName") and p["metadata"]["name"].startswith("train")) == 1
    world.advance_by(200)  # GPUs at 360 s
    pods = world.k8s_list("pods", "default")
    assert sum(1 for p in pods if p["spec"].get("nodeName") and p["metadata"]["name"].startswith("train")) == 2
    cpu = _world(allocatable={"cpu": "4", "memory": "16Gi", "pods": 110}, gpu_ready_delay="300s")
    cpu.set_capacity(cpu.scale_set(SUB, RG, POOL), 2)
    cpu.advance_by(61)
    assert _new_node(cpu) and cpu.instances(cpu.scale_set(SUB, RG, POOL))[1].gpus_ready_at is None


@pytest.mark.parametrize("allocatable,configured,expected", [
    (Amounts.of(4000, 1, 110), None, None),  # no GPUs: never waits
    (Amounts.of(4000, 1, 110, {"nvidia.com/gpu": 1}), None, DEFAULT_GPU_READY_DELAY),
    (Amounts.of(4000, 1, 110, {"amd.com/gpu": 2}), Dist.fixed(30), Dist.fixed(30)),
    (Amounts.of(4000, 1, 110, {"nvidia.com/gpu": 1}), Dist.fixed(0), None),
])
def test_which_groups_wait(allocatable: Amounts, configured: Dist | None, expected: Dist | None) -> None:
    assert gpu_ready_delay(allocatable, configured) == expected
    assert gpus(without_gpus(allocatable)) == 0
    assert without_gpus(allocatable).cpu_milli == allocatable.cpu_milli


def test_the_default_is_stated_and_bounded() -> None:
    # The assumption (gpu_spec's docstring): lognormal, positive and below MAX_NODE_PROVISION_TIME's 15 minutes.
    d = DEFAULT_GPU_READY_DELAY
    assert d.kind == "lognormal" and 0 < d.low < d.median < d.p95 <= d.high < 15 * 60


def test_a_bad_delay_is_refused_with_its_path() -> None:
    doc = scenario(node_groups=[{"resource_group": RG, "name": POOL, "vm_size": "x", "allocatable": GPU_ALLOC,
                                 "max": 2, "gpu_ready_delay": {"median": "5m", "p95": "1m"}}])
    with pytest.raises(ScenarioError, match=r"gpu_ready_delay\.p95"):
        load_scenario(doc)
