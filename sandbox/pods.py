"""What the world remembers about each pod beyond its API object: role, timings, fate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shared.domain import Resources
from sandbox.scenario import WorkloadSpec

PodRole = Literal["workload", "daemonset", "mirror", "api"]


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """One unit of work; a replacement pod reuses it (same requests, same duration, restarted from zero)."""

    workload: WorkloadSpec
    owner_uid: str
    requests: Resources
    duration: float | None


@dataclass(slots=True)
class PodSim:
    uid: str
    namespace: str
    name: str
    seq: int
    role: PodRole
    workload: str
    owner_kind: str | None
    requests: Resources
    duration: float | None
    created: float
    template: PodTemplate | None = None
    bound: float | None = None
    started: float | None = None
    finished: float | None = None  # Succeeded
    stopped: float | None = None  # stopped without success (evicted or killed)
    deleted: float | None = None
    node: str | None = None
    evicted_while_running: bool = False
    killed: bool = False
    replaced: bool = False
    holds_resources: bool = False  # counted in its node's used resources

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
    if pod.deleted is not None or phase is None:
        return "deleted"
    return "running" if phase == "Running" else "pending"
