"""Resource amounts the way kube-scheduler counts them (its framework.Resource).

cpu, memory and pods are the fields every pod and node has, so they stay plain
integers on the hot path; everything else (ephemeral-storage, hugepages and
extended resources such as `nvidia.com/gpu`) is a "scalar" resource kept in a
small sorted tuple, empty for most pods. The sandbox keeps its own type rather
than shared.domain.Resources because the world must model resources the
autoscaler may not know about yet: a faithful cluster is the yardstick.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sandbox.model.units import format_bytes, format_cpu, parse_bytes, parse_count, parse_cpu_milli

EPHEMERAL_STORAGE = "ephemeral-storage"
_BYTE_SCALARS_PREFIX = "hugepages-"


def is_scalar_name(name: str) -> bool:
    """Resources the scheduler checks besides cpu, memory and pods: ephemeral storage, hugepages and
    extended resources, which are always domain-qualified (`nvidia.com/gpu`)."""
    return name == EPHEMERAL_STORAGE or name.startswith(_BYTE_SCALARS_PREFIX) or "/" in name


def _measured_in_bytes(name: str) -> bool:
    return name == EPHEMERAL_STORAGE or name.startswith(_BYTE_SCALARS_PREFIX)


def parse_scalar(name: str, value: Any) -> int:
    """Bytes for storage-like resources; a whole count for extended resources (they cannot be fractional)."""
    return parse_bytes(value) if _measured_in_bytes(name) else parse_count(value)


def format_scalar(name: str, value: int) -> str:
    return format_bytes(value) if _measured_in_bytes(name) else str(value)


def _merge(left: tuple[tuple[str, int], ...], right: tuple[tuple[str, int], ...], sign: int) -> tuple[tuple[str, int], ...]:
    if not right:
        return left
    totals = dict(left)
    for name, value in right:
        totals[name] = totals.get(name, 0) + sign * value
    return tuple(sorted((k, v) for k, v in totals.items() if v))


@dataclass(frozen=True, slots=True)
class Amounts:
    """cpu in millicores, memory in bytes, pods as a count, plus scalar resources sorted by name."""

    cpu_milli: int = 0
    memory_bytes: int = 0
    pods: int = 0
    scalars: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def of(cpu_milli: int = 0, memory_bytes: int = 0, pods: int = 0,
           scalars: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> Amounts:
        items = scalars.items() if isinstance(scalars, Mapping) else scalars
        return Amounts(cpu_milli, memory_bytes, pods, tuple(sorted((k, v) for k, v in items if v)))

    def scalar(self, name: str) -> int:
        for key, value in self.scalars:
            if key == name:
                return value
        return 0

    def __add__(self, other: Amounts) -> Amounts:
        return Amounts(
            self.cpu_milli + other.cpu_milli,
            self.memory_bytes + other.memory_bytes,
            self.pods + other.pods,
            _merge(self.scalars, other.scalars, 1),
        )

    def __sub__(self, other: Amounts) -> Amounts:
        return Amounts(
            self.cpu_milli - other.cpu_milli,
            self.memory_bytes - other.memory_bytes,
            self.pods - other.pods,
            _merge(self.scalars, other.scalars, -1),
        )

    def fits_in(self, capacity: Amounts) -> bool:
        if self.cpu_milli > capacity.cpu_milli or self.memory_bytes > capacity.memory_bytes or self.pods > capacity.pods:
            return False
        return all(value <= capacity.scalar(name) for name, value in self.scalars)

    def insufficient(self, free: Amounts) -> list[str]:
        """kube-scheduler's NodeResourcesFit reasons for a pod with these requests on a node with `free` left.

        Like the plugin, a resource the pod does not request never fails, even on an overcommitted node."""
        reasons = []
        if self.pods > free.pods:
            reasons.append("Too many pods")
        if self.cpu_milli and self.cpu_milli > free.cpu_milli:
            reasons.append("Insufficient cpu")
        if self.memory_bytes and self.memory_bytes > free.memory_bytes:
            reasons.append("Insufficient memory")
        for name, value in self.scalars:
            if value > free.scalar(name):
                reasons.append(f"Insufficient {name}")
        return reasons


def parse_resource_list(quantities: Mapping[str, Any]) -> Amounts:
    """A Kubernetes ResourceList (`{"cpu": "1500m", "memory": "4Gi", "nvidia.com/gpu": "1"}`); names the
    scheduler does not check are ignored, as it ignores them. Raises ValueError on a bad quantity."""
    scalars = {name: parse_scalar(name, value) for name, value in quantities.items() if is_scalar_name(name)}
    return Amounts.of(
        parse_cpu_milli(quantities.get("cpu", 0)),
        parse_bytes(quantities.get("memory", 0)),
        parse_count(quantities.get("pods", 0)),
        scalars,
    )


def resource_list(amounts: Amounts, *, with_pods: bool = True) -> dict[str, str]:
    """The API shape: every quantity a string (the official client's models insist)."""
    quantities = {"cpu": format_cpu(amounts.cpu_milli), "memory": format_bytes(amounts.memory_bytes)}
    for name, value in amounts.scalars:
        quantities[name] = format_scalar(name, value)
    if with_pods:
        quantities["pods"] = str(amounts.pods)
    return quantities
