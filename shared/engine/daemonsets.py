"""Which DaemonSets would run on a new node of a group, and what they take from it.

Pure module. cluster-autoscaler builds a node group's template node by adding a pod of
every DaemonSet that would schedule there (its `daemonset` utils: the controller's
`NewPod` with the automatic tolerations, then the scheduler's filters against the
template's labels and taints). We do the same with the DaemonSet objects listed each
poll, so a group at zero, a group whose DaemonSet pods have not started yet, and
DaemonSets that select only some pools all give the right overhead.

Observed DaemonSet pods stay a cross-check, each DaemonSet counted once:

- a listed DaemonSet with a pod on a node of the group counts there even when the
  prediction says no (cluster-autoscaler keeps the example node's DaemonSet pods too;
  a mismatch is reported by `unpredicted_daemonsets`);
- a DaemonSet seen only through its pods (not listed: created since the listing, or a
  port that does not list them) counts by its pod's nodeSelector and tolerations, the
  pod's required affinity being the controller's pin to its own node.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from shared.domain import DaemonSet, HostPort, Node, Pod, Resources, Taint, Toleration
from shared.engine.placement import matches_node_affinity, tolerates_all

# What the DaemonSet controller adds to every pod it makes (pkg/controller/daemon/util,
# AddOrUpdateDaemonPodTolerations): node problems never keep or evict a node agent.
DAEMON_POD_TOLERATIONS: tuple[Toleration, ...] = (
    Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
    Toleration("node.kubernetes.io/unreachable", "Exists", "", "NoExecute"),
    Toleration("node.kubernetes.io/disk-pressure", "Exists", "", "NoSchedule"),
    Toleration("node.kubernetes.io/memory-pressure", "Exists", "", "NoSchedule"),
    Toleration("node.kubernetes.io/pid-pressure", "Exists", "", "NoSchedule"),
    Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule"),
)
# Added only to pods on the host network: they can start before the node's network is up.
HOST_NETWORK_TOLERATION = Toleration("node.kubernetes.io/network-unavailable", "Exists", "", "NoSchedule")


def daemon_pod_tolerations(daemonset: DaemonSet) -> tuple[Toleration, ...]:
    """The tolerations of the pods the controller makes: the template's plus the automatic ones."""
    extra = DAEMON_POD_TOLERATIONS + ((HOST_NETWORK_TOLERATION,) if daemonset.host_network else ())
    return daemonset.tolerations + extra


def runs_on(daemonset: DaemonSet, labels: Mapping[str, str], taints: Iterable[Taint], node_name: str = "") -> bool:
    """Whether the DaemonSet would run a pod on a node with these labels and taints.

    The controller's own test: nodeSelector, required node affinity, and NoSchedule and
    NoExecute taints against the pod's tolerations (PreferNoSchedule never keeps it off).
    """
    return matches_node_affinity(
        daemonset.node_selector, daemonset.node_affinity, labels, node_name
    ) and tolerates_all(daemon_pod_tolerations(daemonset), taints)


def daemonset_of_pod(pod: Pod) -> DaemonSet:
    """A DaemonSet as one of its pods shows it; the pod's affinity is left out (the controller pins it to its node)."""
    owner = pod.owner.name if pod.owner is not None else pod.name
    return DaemonSet(
        namespace=pod.namespace,
        name=owner,
        requests=pod.requests,
        node_selector=pod.node_selector,
        tolerations=pod.tolerations,
        host_ports=pod.host_ports,
    )


def observed_daemonset_pods(pods: Iterable[Pod]) -> dict[tuple[str, str], Pod]:
    """One observed pod per DaemonSet, by (namespace, DaemonSet name).

    A planner asking about many groups passes these values to `template_daemonsets` instead of every pod:
    the answer is the same, and the cluster's pods are walked once, not once per group."""
    chosen: dict[tuple[str, str], Pod] = {}
    for pod in pods:
        if pod.owner is not None and pod.owner.kind == "DaemonSet":
            chosen.setdefault((pod.namespace, pod.owner.name), pod)
    return chosen


def template_daemonsets(
    daemonsets: Sequence[DaemonSet],
    pods: Iterable[Pod],
    labels: Mapping[str, str],
    taints: Iterable[Taint],
    *,
    seen_on_group: Collection[tuple[str, str]] = (),
) -> list[DaemonSet]:
    """The DaemonSets that would put a pod on a new node with these labels and taints, each once.

    `daemonsets` are the listed objects; `pods` are the observed pods (any), of which only
    DaemonSet pods matter; `seen_on_group` names, as (namespace, name), the DaemonSets with a
    pod on a node of this group.
    """
    taints = tuple(taints)
    listed = {(d.namespace, d.name): d for d in daemonsets}
    chosen = {key: d for key, d in listed.items() if runs_on(d, labels, taints)}
    for key, pod in observed_daemonset_pods(pods).items():
        if key in chosen:
            continue
        if key in listed:
            if key in seen_on_group:
                chosen[key] = listed[key]
        elif runs_on(daemonset_of_pod(pod), labels, taints):
            chosen[key] = daemonset_of_pod(pod)
    return list(chosen.values())


def daemonsets_seen_by_group(nodes: Iterable[Node], pods: Iterable[Pod]) -> dict[str, frozenset[tuple[str, str]]]:
    """By group id, the (namespace, name) of each DaemonSet with a pod on one of the group's nodes."""
    group_of = {node.name: node.instance.group_id for node in nodes if node.instance is not None}
    seen: dict[str, set[tuple[str, str]]] = {}
    for pod in pods:
        group = group_of.get(pod.node_name or "")
        if group is not None and pod.owner is not None and pod.owner.kind == "DaemonSet":
            seen.setdefault(group, set()).add((pod.namespace, pod.owner.name))
    return {group: frozenset(keys) for group, keys in seen.items()}


def unpredicted_daemonsets(
    daemonsets: Sequence[DaemonSet], labels: Mapping[str, str], taints: Iterable[Taint],
    seen_on_group: Collection[tuple[str, str]],
) -> list[str]:
    """Listed DaemonSets with a pod on the group's nodes that the prediction says would not run there."""
    taints = tuple(taints)
    return sorted(
        d.key for d in daemonsets if (d.namespace, d.name) in seen_on_group and not runs_on(d, labels, taints)
    )


def overhead(daemonsets: Iterable[DaemonSet]) -> Resources:
    """What these DaemonSets' pods take from a node: their requests, one pod slot each."""
    total = Resources()
    for daemonset in daemonsets:
        requests = daemonset.requests
        total = total + Resources(
            requests.cpu_milli, requests.memory_bytes, 1, requests.ephemeral_storage_bytes, requests.extended
        )
    return total


def host_ports(daemonsets: Iterable[DaemonSet]) -> tuple[HostPort, ...]:
    """Host ports these DaemonSets bind on every node they run on, unavailable to workloads."""
    return tuple(port for daemonset in daemonsets for port in daemonset.host_ports)


__all__ = [
    "DAEMON_POD_TOLERATIONS",
    "daemon_pod_tolerations",
    "daemonset_of_pod",
    "daemonsets_seen_by_group",
    "host_ports",
    "observed_daemonset_pods",
    "overhead",
    "runs_on",
    "template_daemonsets",
    "unpredicted_daemonsets",
]
