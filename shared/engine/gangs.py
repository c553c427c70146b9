"""Gangs: pods that are useful only all together (a distributed training job, an MPI run, a JobSet).

Pure module, no side effects. A pod's gang is read from the first of these it carries (namespaced, so two
namespaces' gangs of one name stay apart):

- label `scheduling.x-k8s.io/pod-group`: scheduler-plugins' coscheduling PodGroup;
- annotation `scheduling.k8s.io/group-name`, then `scheduling.volcano.sh/group-name`: Volcano's PodGroup;
- label, then annotation, `jobset.sigs.k8s.io/jobset-name`: a JobSet (the JobSet controller puts both);
- label `kueue.x-k8s.io/pod-group-name`: a Kueue plain-pod group;
- annotation `kueue.x-k8s.io/workload`: the Kueue Workload a Job's pods were started for;
- label, then annotation, `kueue.x-k8s.io/workload-name`: a Workload named by the sandbox's Kueue double and
  by tools that label pods so.

The gang is its pods that exist: a PodGroup's minMember and Kueue's `pod-group-total-count` are not read.
The scale-up planner uses the gang to place a gang's pending pods all or none (docs/gangs.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.domain import Pod

LABEL, ANNOTATION = "label", "annotation"
# (where, key), first found wins.
GANG_KEYS: tuple[tuple[str, str], ...] = (
    (LABEL, "scheduling.x-k8s.io/pod-group"),
    (ANNOTATION, "scheduling.k8s.io/group-name"),
    (ANNOTATION, "scheduling.volcano.sh/group-name"),
    (LABEL, "jobset.sigs.k8s.io/jobset-name"),
    (ANNOTATION, "jobset.sigs.k8s.io/jobset-name"),
    (LABEL, "kueue.x-k8s.io/pod-group-name"),
    (ANNOTATION, "kueue.x-k8s.io/workload"),
    (LABEL, "kueue.x-k8s.io/workload-name"),
    (ANNOTATION, "kueue.x-k8s.io/workload-name"),
)


def gang_of(pod: Pod) -> str | None:
    """`<namespace>/<name>` of the pod's gang, from the first gang key it carries; None for a pod of no gang."""
    labels, annotations = pod.labels, pod.annotations
    if not labels and not annotations:
        return None  # the common case, kept cheap: the planner asks for every pending pod
    for where, key in GANG_KEYS:
        value = (labels if where == LABEL else annotations).get(key)
        if value:
            return f"{pod.namespace}/{value}"
    return None


def gangs(pods: Iterable[Pod]) -> dict[str, list[Pod]]:
    """Gang -> its pods among `pods`, in their order; pods of no gang are left out."""
    members: dict[str, list[Pod]] = {}
    for pod in pods:
        gang = gang_of(pod)
        if gang is not None:
            members.setdefault(gang, []).append(pod)
    return members


def partial_reason(gang: str, placed: int, pending: int) -> str:
    """Why a gang's pods got no node: the words of the plan's unplaceable entry and of its events."""
    return f"gang {gang}: only {placed} of {pending} pending pods fit"
