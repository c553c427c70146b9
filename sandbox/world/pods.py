"""What the world remembers about each pod beyond its API object: role, timings, fate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sandbox.model.podspec import PodNeeds
from sandbox.model.resources import Amounts
from sandbox.model.scenario import WorkloadSpec

PodRole = Literal["workload", "daemonset", "mirror", "api"]


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """One unit of work; a replacement pod reuses it (same requests, same duration, restarted from zero)."""

    workload: WorkloadSpec
    owner_uid: str
    requests: Amounts
    duration: float | None
    cpu_usage_milli: int | None = None  # measured CPU use; None: the CPU request


@dataclass(slots=True)
class PodSim:
    uid: str
    namespace: str
    name: str
    seq: int
    role: PodRole
    workload: str
    owner_kind: str | None
    needs: PodNeeds  # parsed from the API object once: pod specs do not change after creation
    duration: float | None
    created: float
    template: PodTemplate | None = None
    group: str | None = None  # node group (shared.domain.group_id) of the node it was bound to
    bound: float | None = None
    started: float | None = None
    finished: float | None = None  # Succeeded
    stopped: float | None = None  # stopped without success (evicted or killed)
    deleted: float | None = None
    node: str | None = None
    evicted_while_running: bool = False
    killed: bool = False
    replaced: bool = False
    # For a pod that replaces one a virtual node's provider refused (it never ran): when the first pod of that
    # work was created. Its wait is measured from then, and the refused pod's is not measured at all.
    waiting_since: float | None = None
    refused: bool = False  # a virtual node's provider refused it (ProviderFailed): it never ran
    holds_resources: bool = False  # counted in its node's used resources
    terminating: bool = False  # metadata.deletionTimestamp is set
    unplaceable: bool | None = None  # fits no node group even on an empty node (computed once, lazily)
    shape: tuple[Any, ...] | None = None  # what, besides requests, decides where it fits (scheduler cache key)
    cpu_usage_milli: int | None = None  # CPU it uses while running, as a monitoring agent would measure it

    @property
    def cpu_used_milli(self) -> int:
        """What Container Insights would measure: the override, else the request (a pod busy as asked)."""
        return self.requests.cpu_milli if self.cpu_usage_milli is None else self.cpu_usage_milli

    @property
    def requests(self) -> Amounts:
        return self.needs.requests

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def node_bound(self) -> bool:
        """DaemonSet and mirror pods live and die with their node."""
        return self.role in ("daemonset", "mirror")


def pod_outcome(pod: PodSim, phase: str | None) -> str:
    if pod.finished is not None:
        return "succeeded"
    if pod.killed:
        return "killed"
    if pod.evicted_while_running:
        return "evicted"
    if pod.refused and phase in ("Failed", None):  # refused by a virtual node's provider (restartPolicy Never),
        return "failed"  # whether or not its Job has removed it since
    if pod.deleted is not None or phase is None:
        return "deleted"
    return "running" if phase == "Running" else "pending"
