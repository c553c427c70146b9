"""Which pods a ReplicaSet controller deletes when it scales in, and in what order.

The controller (kubernetes pkg/controller/replicaset, `getPodsToDelete`) ranks its active pods (not
Succeeded, not Failed, not being deleted) with `ActivePodsWithRanks.Less` (pkg/controller/controller_utils.go)
and deletes the first ones. Earlier in the order, rule by rule, the first rule that tells two pods apart
deciding:

1. not yet scheduled (no `spec.nodeName`) before scheduled;
2. phase Pending before Unknown before Running;
3. not Ready before Ready;
4. the lower `controller.kubernetes.io/pod-deletion-cost` annotation first (an int32 as a string; absent or
   unparseable counts as 0, as the controller ignores the parse error);
5. the higher rank first: the rank is how many active pods of the ReplicaSet share the pod's node (a node
   doubled up loses one first);
6. of two Ready pods, the one Ready for a shorter time first (a Ready pod without a transition time first);
7. more container restarts first (the busiest app container, then the busiest sidecar);
8. newer `creationTimestamp` first (one without first);

then the uid, which kube leaves to its unstable sort. Times compare as linear instants, as with the
LogarithmicScaleDown feature gate off; with it on (kube's default since 1.22) rules 6 and 8 compare
power-of-two buckets of age, and pods in the same bucket go by uid at once.

Pure: the pods are their API objects (as dicts), read as they are at the moment of scaling, so an
annotation set through the API a moment ago counts.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from sandbox.model.units import parse_time

DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
_PHASE_ORDER = {"Pending": 0, "Unknown": 1, "Running": 2}  # podPhaseToOrdinal; phases it lacks count as 0
_INT = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.ParseInt(s, 10, 32) accepts, before the range check
_INT32 = (-(2**31), 2**31 - 1)

Pod = Mapping[str, Any]


def is_active(pod: Pod) -> bool:
    """controller.IsPodActive: not finished and not being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


def deletion_cost(pod: Pod) -> int:
    """The pod-deletion-cost annotation as the controller reads it: an int32, else 0."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(DELETION_COST_ANNOTATION)
    if not isinstance(raw, str) or not _INT.fullmatch(raw):
        return 0
    value = int(raw)
    return value if _INT32[0] <= value <= _INT32[1] else 0


def deletion_order(pods: Iterable[Pod]) -> list[Pod]:
    """The ReplicaSet's active pods, the first to delete first; `pods` are all of its pods (any state)."""
    active = [pod for pod in pods if is_active(pod)]
    on_node = Counter(_node(pod) for pod in active)  # unscheduled pods share the rank of node ""
    return sorted(active, key=lambda pod: _key(pod, on_node[_node(pod)]))


def scale_in_victims(pods: Iterable[Pod], replicas: int) -> list[Pod]:
    """The pods to delete so that `replicas` active pods remain, in the order the controller deletes them."""
    order = deletion_order(pods)
    return order[: max(0, len(order) - replicas)]


def _node(pod: Pod) -> str:
    return (pod.get("spec") or {}).get("nodeName") or ""


def _ready_condition(pod: Pod) -> Mapping[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition if condition.get("status") == "True" else None
    return None


def _newer_first(timestamp: str | None) -> tuple[int, float]:
    """afterOrZero as a sort key: a missing time first, then the latest."""
    if not timestamp:
        return (0, 0.0)
    return (1, -parse_time(timestamp).timestamp())


def _restarts(pod: Pod) -> tuple[int, int]:
    """maxContainerRestarts: the most restarts of any app container, and of any sidecar (an init container
    with restartPolicy Always)."""
    status = pod.get("status") or {}
    regular = max((int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or []), default=0)
    sidecars = {
        c.get("name") for c in (pod.get("spec") or {}).get("initContainers") or [] if c.get("restartPolicy") == "Always"
    }
    sidecar = max(
        (int(c.get("restartCount") or 0) for c in status.get("initContainerStatuses") or [] if c.get("name") in sidecars),
        default=0,
    )
    return regular, sidecar


def _key(pod: Pod, rank: int) -> tuple[Any, ...]:
    """Ascending: the first pod is the first to delete. One element per rule of the module docstring."""
    meta = pod.get("metadata") or {}
    ready = _ready_condition(pod)
    regular_restarts, sidecar_restarts = _restarts(pod)
    return (
        1 if _node(pod) else 0,
        _PHASE_ORDER.get((pod.get("status") or {}).get("phase") or "", 0),
        0 if ready is None else 1,
        deletion_cost(pod),
        -rank,
        # Rule 6 compares two Ready pods only; pods that are not Ready were already told apart by rule 3
        # from Ready ones, and tie with each other here.
        (0, 0.0) if ready is None else _newer_first(ready.get("lastTransitionTime")),
        -regular_restarts,
        -sidecar_restarts,
        _newer_first(meta.get("creationTimestamp")),
        str(meta.get("uid") or ""),
    )
