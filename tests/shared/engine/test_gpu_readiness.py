from __future__ import annotations

import pytest

from shared.engine.gpu_readiness import GPU_RESOURCES, expected_gpus, gpu_count, usable
from tests.builders import node, res, template

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
