from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.engine.gpu_readiness import (
    GPU_NOT_READY,
    GPU_RESOURCES,
    as_capacity,
    expected_gpus,
    gpu_count,
    gpu_template,
    held_back,
    overdue,
    usable,
)
from tests.builders import T0, group, node, res, snapshot, template

CPU_TEMPLATE = template(res(4, 16, 110))
GPU_TEMPLATE = template(res(24, 220, 110, gpu=4), labels={"kubernetes.azure.com/accelerator": "nvidia"})
AMD_TEMPLATE = template(res(24, 220, 110, ext={"amd.com/gpu": 2}))
NO_GPUS_YET = res(24, 220, 110)


@pytest.mark.parametrize("case_id,the_node,the_template,expected,is_usable", [
    ("cpu node, cpu template", node("c"), CPU_TEMPLATE, 0, True),
    ("cpu node, no template", node("c"), None, 0, True),
    ("cpu node not Ready", node("c", ready=False), CPU_TEMPLATE, 0, False),
    ("gpu template, Ready, GPUs not allocatable yet", node("g", alloc=NO_GPUS_YET), GPU_TEMPLATE, 4, False),
    ("gpu template, Ready, GPUs allocatable", node("g", alloc=res(24, 220, 110, gpu=4)), GPU_TEMPLATE, 4, True),
    ("gpu template, GPUs allocatable but not Ready", node("g", alloc=res(24, 220, 110, gpu=4), ready=False),
     GPU_TEMPLATE, 4, False),
    ("gpu template, part of the GPUs allocatable: usable", node("g", alloc=res(24, 220, 110, gpu=1)),
     GPU_TEMPLATE, 4, True),
    ("amd template, amd GPUs allocatable", node("g", alloc=res(24, 220, 110, ext={"amd.com/gpu": 2})),
     AMD_TEMPLATE, 2, True),
    ("amd template, no GPUs yet", node("g", alloc=NO_GPUS_YET), AMD_TEMPLATE, 2, False),
    ("no template, AKS accelerator label, no GPUs yet",
     node("g", alloc=NO_GPUS_YET, labels={"kubernetes.azure.com/accelerator": "nvidia"}), None, 1, False),
    ("no template, GPU feature discovery label, no GPUs yet",
     node("g", alloc=NO_GPUS_YET, labels={"nvidia.com/gpu.present": "true"}), None, 1, False),
    ("no template, legacy accelerator label", node("g", alloc=NO_GPUS_YET, labels={"accelerator": "nvidia"}),
     None, 1, False),
    ("gpu.present=false says no GPU", node("g", alloc=NO_GPUS_YET, labels={"nvidia.com/gpu.present": "false"}),
     None, 0, True),
    ("cpu template but the node's labels say GPU",
     node("g", alloc=NO_GPUS_YET, labels={"kubernetes.azure.com/accelerator": "nvidia"}), CPU_TEMPLATE, 1, False),
    ("cpu template, a labelled template says GPU", node("g", alloc=NO_GPUS_YET),
     template(NO_GPUS_YET, labels={"accelerator": "nvidia"}), 1, False),
    ("no template, node offers GPUs unlabelled", node("g", alloc=res(8, 56, 110, gpu=1)), None, 1, True),
])
def test_expected_and_usable(case_id, the_node, the_template, expected, is_usable) -> None:  # type: ignore[no-untyped-def]
    assert expected_gpus(the_node, the_template) == expected
    assert usable(the_node, the_template) is is_usable
    # Invariants: a usable node is Ready; a node expecting no GPU is usable exactly when Ready; a usable GPU node
    # offers at least one GPU.
    assert not is_usable or the_node.ready
    if expected == 0:
        assert is_usable is the_node.ready
    else:
        assert is_usable is (the_node.ready and gpu_count(the_node.allocatable) > 0)


def test_gpu_resources_are_the_vendors_device_plugin_names() -> None:
    assert set(GPU_RESOURCES) == {"nvidia.com/gpu", "amd.com/gpu"}
    assert gpu_count(res(1, 1, ext={"nvidia.com/gpu": 2, "amd.com/gpu": 1})) == 3
    assert gpu_count(res(1, 1)) == 0


def _gpu_snapshot():  # type: ignore[no-untyped-def]
    gpu, cpu = group("gpu"), group("cpu")
    nodes = [
        node("g-waiting", group_name="gpu", instance=0, alloc=NO_GPUS_YET),
        node("g-usable", group_name="gpu", instance=1, alloc=res(24, 220, 110, gpu=4)),
        node("g-booting", group_name="gpu", instance=2, alloc=NO_GPUS_YET, ready=False),
        node("c-ready", group_name="cpu", instance=0),
        node("stray", group_name="other", labels={"kubernetes.azure.com/accelerator": "nvidia"}, alloc=NO_GPUS_YET),
    ]
    return snapshot(nodes=nodes, groups=[gpu, cpu], templates={gpu.id: GPU_TEMPLATE, cpu.id: CPU_TEMPLATE})


def test_as_capacity_holds_back_exactly_the_ready_nodes_without_their_gpus() -> None:
    before = _gpu_snapshot()
    after = as_capacity(before)
    was = {n.name: n for n in before.nodes}
    templates = {"g": GPU_TEMPLATE, "c": CPU_TEMPLATE, "s": None}
    for n in after.nodes:
        # Invariant: a node is Ready afterwards exactly when it was usable before; held back = was Ready, is not now.
        assert n.ready is usable(was[n.name], templates[n.name[0]])
        assert held_back(n) is (was[n.name].ready and not n.ready)
        assert replace(n, ready=was[n.name].ready, conditions=was[n.name].conditions) == was[n.name]
    assert {n.name for n in after.nodes if held_back(n)} == {"g-waiting", "stray"}
    # Nothing to hold back: the very same snapshot.
    plain = snapshot(nodes=[node("c")], groups=[group()])
    assert as_capacity(plain) is plain


def test_overdue_names_only_held_back_nodes_older_than_the_provision_time() -> None:
    held = as_capacity(_gpu_snapshot()).nodes
    give_up = timedelta(minutes=15)
    ages = {n.name: T0 - n.created_at for n in held}
    late = overdue(held, now=T0, give_up=give_up)
    assert {n.name for n in late} == {n.name for n in held if held_back(n) and ages[n.name] > give_up}
    assert all(GPU_NOT_READY in n.conditions for n in late)
    assert overdue(held, now=T0 - timedelta(hours=1), give_up=give_up) == ()  # just created: not yet


@pytest.mark.parametrize("the_template,is_gpu", [
    (None, False), (CPU_TEMPLATE, False), (GPU_TEMPLATE, True), (AMD_TEMPLATE, True),
    (template(NO_GPUS_YET, labels={"kubernetes.azure.com/accelerator": "nvidia"}), True),
])
def test_gpu_template(the_template, is_gpu) -> None:  # type: ignore[no-untyped-def]
    assert gpu_template(the_template) is is_gpu
