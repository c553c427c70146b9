"""Does a pod fit a node (or a node-to-be)? The scheduler's filters we model so far.

Pure module, no side effects. Each predicate returns None when the pod passes,
or a short reason in kube-scheduler's words when it does not, so that callers
can both decide and explain.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from shared.domain import Pod, Resources, Taint

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def selector_mismatch(pod: Pod, labels: Mapping[str, str]) -> str | None:
    if all(labels.get(key) == value for key, value in pod.node_selector.items()):
        return None
    return "node(s) didn't match node selector"


def untolerated_taint(pod: Pod, taints: Iterable[Taint]) -> str | None:
    for taint in taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in pod.tolerations):
            return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    return None


def insufficient(requests: Resources, free: Resources) -> str | None:
    if requests.cpu_milli > free.cpu_milli:
        return "Insufficient cpu"
    if requests.memory_bytes > free.memory_bytes:
        return "Insufficient memory"
    if requests.pods > free.pods:
        return "Too many pods"
    return None


def static_mismatch(pod: Pod, labels: Mapping[str, str], taints: Iterable[Taint]) -> str | None:
    """The checks that do not depend on what else runs on the node."""
    return selector_mismatch(pod, labels) or untolerated_taint(pod, taints)


def pod_requests(pod: Pod) -> Resources:
    """A pod always takes one pod slot, whatever its containers request."""
    return Resources(pod.requests.cpu_milli, pod.requests.memory_bytes, 1)
