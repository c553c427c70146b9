"""Injected failures: the next N matching API calls answer with an error instead of running.

A target is (api, method, resource): api is "k8s", "arm" or "loganalytics"; method
an HTTP verb or "*"; resource is, for k8s, the resource name in the URL ("pods",
"nodes", "eviction", "events", "configmaps", "poddisruptionbudgets", ...), for arm,
the scale set name (or "operations" for LRO polls, "metrics" for Azure Monitor
metrics of any scale set, the managed cluster's name for listClusterUserCredential, "usages" for the
Compute usages list),
for loganalytics "query", "*" matching anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class FaultError(ValueError):
    """An invalid fault description."""


@dataclass(slots=True)
class Fault:
    api: str
    method: str
    resource: str
    status: int
    remaining: int
    code: str | None = None
    message: str | None = None
    retry_after: float | None = None

    def matches(self, api: str, method: str, resource: str) -> bool:
        return (
            self.remaining > 0
            and self.api == api
            and self.method in ("*", method.upper())
            and self.resource in ("*", resource)
        )

    def describe(self) -> dict[str, Any]:
        return {
            "target": [self.api, self.method, self.resource],
            "status": self.status,
            "remaining": self.remaining,
            "code": self.code,
            "message": self.message,
            "retry_after": self.retry_after,
        }


@dataclass(slots=True)
class ScaleUpFailure:
    """The next capacity increase of a scale set fails as a long-running operation."""

    scale_set: str
    code: str
    message: str
    remaining: int


def make_fault(
    target: tuple[str, str, str] | list[str],
    *,
    status: int,
    count: int = 1,
    code: str | None = None,
    message: str | None = None,
    retry_after: float | None = None,
) -> Fault:
    if len(target) != 3:
        raise FaultError(f"target must be (api, method, resource), got {target!r}")
    api, method, resource = (str(part) for part in target)
    if api not in ("k8s", "arm", "loganalytics"):
        raise FaultError(f"target api must be 'k8s', 'arm' or 'loganalytics', got {api!r}")
    if not 400 <= int(status) <= 599:
        raise FaultError(f"status must be an HTTP error status (400-599), got {status!r}")
    if int(count) < 1:
        raise FaultError(f"count must be at least 1, got {count!r}")
    if retry_after is not None and float(retry_after) < 0:
        raise FaultError("retry_after must not be negative")
    return Fault(api, method.upper(), resource, int(status), int(count), code, message, retry_after)


def default_scale_up_message(code: str, vm_size: str, location: str) -> str:
    """Messages shaped like the ones Azure returns for the common allocation failures."""
    if code == "QuotaExceeded":
        return (
            f"Operation could not be completed as it results in exceeding approved {vm_size} Family Cores quota. "
            f"Location: {location}."
        )
    if code in ("AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest"):
        return "Allocation failed. We do not have sufficient capacity for the requested VM size in this region."
    if code == "SkuNotAvailable":
        return f"The requested VM size '{vm_size}' is currently not available in location '{location}'."
    return f"The operation failed with code {code}."
