"""GPU_READINESS through the polls, over the sandbox's late device plugin (sandbox.model.gpu_spec): a GPU node
Ready without its GPUs is capacity on its way (no second node asked for its pods), its boot is measured to when
its GPUs came, and one whose GPUs never come is reported (GPUNotReady) and removed as an unready node."""

from __future__ import annotations

from typing import Any

import pytest

from shared.engine.gpu_readiness import held_back
from shared.services.observe import observe
from shared.services.pending import run_pending_poll
from tests.memory_app import MemoryApp, memory_app

GROUP = "rg-gpu/gpu"
BOOT_S = 75


def _app(*, gpu_ready_delay: str, pods: int = 2, **settings: str) -> MemoryApp:
    return memory_app({
        "name": "gpu", "cluster_name": "gpu", "arm_throttling": False, "boot_delay": f"{BOOT_S}s",
        "delete_delay": "20s", "duration": "2h",
        "node_groups": [{"resource_group": "rg-gpu", "name": "gpu", "vm_size": "Standard_NC24ads_A100_v4",
                         "allocatable": {"cpu": "23", "memory": "200Gi", "pods": 110, "nvidia.com/gpu": 1},
                         "labels": {"kubernetes.azure.com/accelerator": "nvidia"},
                         "min": 0, "max": 6, "initial": 0, "gpu_ready_delay": gpu_ready_delay}],
        # One GPU each: one pod per node.
        "workloads": [{"name": "train", "kind": "Job", "count": pods, "at": "5s", "spread": "0s", "duration": "90m",
                       "requests": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}],
    }, settings={"ARM_OPERATION_WAIT": "0s", "STEP_RETRY_DELAY": "0s", **settings})


def _pending_polls(app: MemoryApp, seconds: int, *, every: int = 30) -> list[Any]:
    results = []
    for _ in range(seconds // every):
        app.clock.advance(every)
        results.append(run_pending_poll(app.ports, app.settings, now=app.clock.now()))
        app.run_actions()
    return results


@pytest.mark.parametrize("readiness", ["true", "false"])
def test_a_node_without_its_gpus_is_capacity_on_its_way_only_with_gpu_readiness(readiness: str) -> None:
    app = _app(gpu_ready_delay="300s", GPU_READINESS=readiness)
    last = _pending_polls(app, 360)[-1]  # two nodes asked for, Ready at ~85 s, no GPUs until ~385 s
    nodes = app.ports.cluster.list_nodes()
    assert len(nodes) == 2 and all(n.ready for n in nodes)  # kubelet says Ready
    snapshot = observe(app.ports, now=app.clock.now(), gpu_readiness=readiness == "true")
    gpus = {t.allocatable.amount("nvidia.com/gpu") for t in snapshot.templates.values()}
    if readiness == "true":
        # Held back: not Ready to the planners; the group's template still has its GPU (from its VM size, not
        # from a node without it); the pods wait for the nodes on their way, reported as nothing else.
        assert all(held_back(n) and not n.ready for n in snapshot.nodes)
        assert gpus == {1}
        assert not last.plan.unplaceable and not last.plan.increases
    else:
        # A Ready node without its GPU is the group's template: the group seems to have none, and its own pods
        # are reported as fitting no group while their nodes finish booting.
        assert not any(held_back(n) for n in snapshot.nodes)
        assert gpus == {0}
        assert len(last.plan.unplaceable) == 2
        assert all("nvidia.com/gpu" in why for why in last.plan.unplaceable.values())


@pytest.mark.parametrize("readiness,boot", [("true", BOOT_S + 120), ("false", BOOT_S)])
def test_the_boot_is_measured_to_when_the_gpus_came(readiness: str, boot: int) -> None:
    app = _app(gpu_ready_delay="120s", pods=1, GPU_READINESS=readiness)
    _pending_polls(app, 300, every=10)
    boots = app.ports.state.get_group(GROUP).boots
    assert len(boots) == 1
    # The scale-up is decided at the first poll after the pod (10 s), so the boot is taken from there; with
    # the readiness hold it runs to the first poll that saw the GPUs (polls every 10 s).
    assert boot <= boots[0] <= boot + 10 + 5


def test_a_gpu_node_whose_gpus_never_come_is_reported_and_removed() -> None:
    app = _app(gpu_ready_delay="2h", pods=1, SCALE_DOWN_UNREADY_TIME="20m")
    for _ in range(45):  # 45 minutes of both polls, every minute
        app.tick(60)
    reported = [e for e in app.events() if e.reason == "GPUNotReady"]
    assert reported and all(e.kind == "Node" and e.type == "Warning" for e in reported)
    first = reported[0]
    assert "MAX_NODE_PROVISION_TIME" in first.message
    # Not before the provision time: the node registered about 85 s in (boot 75 s after the first poll).
    assert first.at - app.world.start >= app.settings.max_node_provision_time
    # Removed like an unready node: that node is gone (a replacement may be booting).
    assert first.name not in {n.name for n in app.ports.cluster.list_nodes()}
