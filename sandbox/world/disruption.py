"""PodDisruptionBudget arithmetic, as the disruption controller computes it.

expectedPods: pods the budget selects (not finished, not terminating);
currentHealthy: those Running and Ready; desiredHealthy from minAvailable or
expected - maxUnavailable (percentages round up, as the controller does);
disruptionsAllowed = max(0, currentHealthy - desiredHealthy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sandbox.world.errors import KubeError


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    expected: int
    current_healthy: int
    desired_healthy: int

    @property
    def disruptions_allowed(self) -> int:
        return max(0, self.current_healthy - self.desired_healthy)


def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def is_healthy(pod: Mapping[str, Any]) -> bool:
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def is_counted(pod: Mapping[str, Any]) -> bool:
    """Pods a budget expects: still meant to run."""
    return not pod.get("metadata", {}).get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def budget_status(spec: Mapping[str, Any], selected_pods: list[Mapping[str, Any]]) -> BudgetStatus:
    expected = sum(1 for p in selected_pods if is_counted(p))
    healthy = sum(1 for p in selected_pods if is_healthy(p))
    if spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    elif spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    else:  # neither set: the API defaults minAvailable to 1
        desired = 1
    return BudgetStatus(expected, healthy, desired)


def status_json(status: BudgetStatus, at: str) -> dict[str, Any]:
    allowed = status.disruptions_allowed
    return {
        "currentHealthy": status.current_healthy,
        "desiredHealthy": status.desired_healthy,
        "disruptionsAllowed": allowed,
        "expectedPods": status.expected,
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True" if allowed > 0 else "False",
                "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                "message": "",
                "lastTransitionTime": at,
                "observedGeneration": 1,
            }
        ],
    }


def budget_violation(pdb_name: str, status: BudgetStatus) -> KubeError:
    """The apiserver's answer to an eviction the budget forbids (kubectl drain retries on it)."""
    cause = {
        "reason": "DisruptionBudget",
        "message": f"The disruption budget {pdb_name} needs {status.desired_healthy} healthy pods "
        f"and has {status.current_healthy} currently",
    }
    return KubeError(
        429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.", {"causes": [cause]}
    )
