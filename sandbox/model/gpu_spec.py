"""GPU node groups in the sandbox: when a GPU VM's GPUs become allocatable after its node is Ready.

Pure module. A GPU VM's kubelet registers the node Ready before the GPU driver is installed and loaded and
the device plugin has advertised `nvidia.com/gpu` (or `amd.com/gpu`); until then the node's capacity and
allocatable have no GPUs. A node group's `gpu_ready_delay` (seconds after registration, a Dist) says how long
that takes; a group whose allocatable has GPUs and no `gpu_ready_delay` gets `DEFAULT_GPU_READY_DELAY`, and
`gpu_ready_delay: 0` gives the GPUs at registration (a CPU group never waits).

The default is an assumption, not a measurement: the only figure found is "A100 nodes 5-11 minutes to Ready
with drivers" (a Microsoft Q&A answer, unverified: shared/facts/capacity-ahead-gangs-sizes.md). With the
sandbox's default boot (lognormal, median 100 s, p95 300 s) a lognormal extra delay of median 240 s and p95
480 s, clipped to [60 s, 720 s], puts registration plus GPUs at about 5.7 minutes in the median and 11-13
minutes at the p95, the reported range. Lognormal because the delay is a sum of downloads and installs with a
long right tail, as the boot delay is modelled; the clip keeps it positive (the driver is never instant) and
bounded (a plugin that never reports is a fault to inject, not a draw of this distribution).
"""

from __future__ import annotations

from sandbox.model.dists import Dist
from sandbox.model.resources import Amounts

GPU_RESOURCE_NAMES = ("nvidia.com/gpu", "amd.com/gpu")
DEFAULT_GPU_READY_DELAY = Dist("lognormal", (), 60.0, 720.0, 240.0, 480.0)


def gpus(amounts: Amounts) -> int:
    """The GPUs in these amounts (any vendor's)."""
    return sum(amounts.scalar(name) for name in GPU_RESOURCE_NAMES)


def without_gpus(amounts: Amounts) -> Amounts:
    """The amounts a node reports before its device plugin runs: the same, without the GPU resources."""
    return Amounts.of(amounts.cpu_milli, amounts.memory_bytes, amounts.pods,
                      [(name, value) for name, value in amounts.scalars if name not in GPU_RESOURCE_NAMES])


def gpu_ready_delay(allocatable: Amounts, configured: Dist | None) -> Dist | None:
    """The delay a group's new nodes wait for their GPUs; None for a group without GPUs or one set to 0."""
    if gpus(allocatable) <= 0:
        return None
    delay = DEFAULT_GPU_READY_DELAY if configured is None else configured
    if delay.kind == "fixed" and delay.values[0] <= 0:
        return None
    return delay
