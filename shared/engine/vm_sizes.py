"""Capacity of VM sizes, and the share the node keeps for itself.

Pure module, no side effects. Used only when a group has no live node and no
resource tags (scale from zero). Sources, best first: the Compute resource SKUs
API (the Compute adapter lists a location's sizes and caches them; observe passes
them in as `observed`, keyed by lower-cased size name), then the table below of
common sizes, for a size the API did not list or when it could not be read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from shared.domain import Resources, VmSizeCapacity

GIB = 1024**3
MIB = 1024**2

# vCPUs, memory GiB. From the published VM size pages.
_SIZES: dict[str, tuple[int, float]] = {
    "standard_d2s_v5": (2, 8), "standard_d4s_v5": (4, 16), "standard_d8s_v5": (8, 32),
    "standard_d16s_v5": (16, 64), "standard_d32s_v5": (32, 128),
    "standard_d2s_v3": (2, 8), "standard_d4s_v3": (4, 16), "standard_d8s_v3": (8, 32),
    "standard_d16s_v3": (16, 64),
    "standard_e2s_v5": (2, 16), "standard_e4s_v5": (4, 32), "standard_e8s_v5": (8, 64),
    "standard_e16s_v5": (16, 128),
    "standard_f4s_v2": (4, 8), "standard_f8s_v2": (8, 16), "standard_f16s_v2": (16, 32),
    "standard_b2s": (2, 4), "standard_b4ms": (4, 16),
    "standard_nc6s_v3": (6, 112), "standard_nc4as_t4_v3": (4, 28), "standard_nc8as_t4_v3": (8, 56),
}

# GPUs per size, for the sizes above that have them (the SKU's `GPUs` capability).
_GPUS: dict[str, int] = {"standard_nc6s_v3": 1, "standard_nc4as_t4_v3": 1, "standard_nc8as_t4_v3": 1}

# Sizes whose GPUs are AMD's (NVv4, NGads V620, ND MI300X): the SKU counts them, but they are
# not `nvidia.com/gpu` and AKS does not label their nodes accelerator=nvidia.
_AMD_GPU_SIZE = re.compile(r"^standard_(nv\d+as_v4|ng\d+[a-z]*_v620_v\d+|nd\d+[a-z]*_mi\d+x?_v\d+)$", re.IGNORECASE)

SOURCE_SKUS_API = "skus-api"
SOURCE_TABLE = "table"
NO_SIZES: Mapping[str, VmSizeCapacity] = MappingProxyType({})

DEFAULT_MAX_PODS = 110
EVICTION_HARD_MEMORY = 100 * MIB
# Ephemeral storage of a node we have never seen: the smallest OS disk AKS allows (30 GiB)
# less kubelet's default hard eviction threshold (nodefs.available 10%). Real disks are
# usually larger; a group tag `..._resources_ephemeral-storage` states the real figure.
DEFAULT_EPHEMERAL_STORAGE = int(30 * GIB * 0.9)
NVIDIA_GPU = "nvidia.com/gpu"


def table_capacity(vm_size: str) -> VmSizeCapacity | None:
    """The shipped table's figures for a size; None when the table does not know it."""
    size = _SIZES.get(vm_size.lower())
    if size is None:
        return None
    cores, memory_gib = size
    return VmSizeCapacity(vm_size, cores, int(memory_gib * GIB), _GPUS.get(vm_size.lower(), 0))


def vm_size_capacity(
    vm_size: str, observed: Mapping[str, VmSizeCapacity] = NO_SIZES
) -> tuple[VmSizeCapacity, str] | None:
    """A size's capacity and where it came from (SOURCE_SKUS_API or SOURCE_TABLE); None when neither knows it."""
    listed = observed.get(vm_size.lower())
    if listed is not None:
        return listed, SOURCE_SKUS_API
    table = table_capacity(vm_size)
    return None if table is None else (table, SOURCE_TABLE)


def nvidia_gpus(capacity: VmSizeCapacity) -> int:
    """GPUs a node of this size offers as `nvidia.com/gpu`: all of them, unless they are AMD's."""
    return 0 if _AMD_GPU_SIZE.match(capacity.name) else max(0, capacity.gpus)


def allocatable_for_capacity(capacity: VmSizeCapacity, *, max_pods: int = DEFAULT_MAX_PODS) -> Resources:
    """What kubelet would report allocatable: the size's capacity minus the system reservation."""
    gpus = nvidia_gpus(capacity)
    return Resources(
        cpu_milli=capacity.vcpus * 1000 - reserved_cpu_milli(capacity.vcpus),
        memory_bytes=capacity.memory_bytes - reserved_memory_bytes(capacity.memory_bytes),
        pods=max_pods,
        ephemeral_storage_bytes=DEFAULT_EPHEMERAL_STORAGE,
        extended=((NVIDIA_GPU, gpus),) if gpus else (),
    )


def allocatable_for_vm_size(
    vm_size: str, *, max_pods: int = DEFAULT_MAX_PODS, observed: Mapping[str, VmSizeCapacity] = NO_SIZES
) -> Resources | None:
    found = vm_size_capacity(vm_size, observed)
    return None if found is None else allocatable_for_capacity(found[0], max_pods=max_pods)


def has_nvidia_gpu(vm_size: str, observed: Mapping[str, VmSizeCapacity] = NO_SIZES) -> bool:
    """Whether the size carries NVIDIA GPUs (AKS then labels its nodes kubernetes.azure.com/accelerator=nvidia)."""
    found = vm_size_capacity(vm_size, observed)
    return found is not None and nvidia_gpus(found[0]) > 0


def reserved_cpu_milli(cores: int) -> int:
    """kube-reserved CPU, regressive as on AKS: 60m for the first core, less for each after."""
    steps = ((1, 60), (1, 40), (2, 20), (4, 10), (8, 10), (16, 10))
    reserved, left = 0, cores
    for count, per_core in steps:
        take = min(left, count)
        reserved += take * per_core
        left -= take
    return reserved + left * 5


def reserved_memory_bytes(memory: int) -> int:
    """kube-reserved memory, regressive as AKS documents it, plus the hard eviction threshold."""
    bands = ((4 * GIB, 0.25), (4 * GIB, 0.20), (8 * GIB, 0.10), (112 * GIB, 0.06))
    reserved, left = 0.0, float(memory)
    for size, share in bands:
        take = min(left, size)
        reserved += take * share
        left -= take
    reserved += left * 0.02
    return int(reserved) + EVICTION_HARD_MEMORY
