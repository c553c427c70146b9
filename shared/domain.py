"""The autoscaler's domain: resources, pods, nodes, node groups and snapshots.

Pure module: frozen dataclasses and small helpers, no I/O and no side effects.
Nothing here imports an SDK; adapters translate SDK objects into these types.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

EMPTY_MAP: Mapping[str, str] = MappingProxyType({})

# The taint cluster-autoscaler puts on a node it is about to delete; we use the
# same key so that tooling written for CA recognises our drains.
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"
DELETION_CANDIDATE_TAINT = "DeletionCandidateOfClusterAutoscaler"


@dataclass(frozen=True, slots=True)
class Resources:
    """Schedulable quantities. CPU in millicores, memory in bytes, pods as a count."""

    cpu_milli: int = 0
    memory_bytes: int = 0
    pods: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_milli + other.cpu_milli,
            self.memory_bytes + other.memory_bytes,
            self.pods + other.pods,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_milli - other.cpu_milli,
            self.memory_bytes - other.memory_bytes,
            self.pods - other.pods,
        )

    def fits_in(self, capacity: Resources) -> bool:
        return (
            self.cpu_milli <= capacity.cpu_milli
            and self.memory_bytes <= capacity.memory_bytes
            and self.pods <= capacity.pods
        )

    def is_zero(self) -> bool:
        return self.cpu_milli == 0 and self.memory_bytes == 0 and self.pods == 0


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty matches every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    requests: Resources
    created_at: datetime
    uid: str = ""
    node_name: str | None = None
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed | Unknown
    unschedulable: bool = False  # condition PodScheduled=False, reason Unschedulable
    owner: OwnerRef | None = None
    node_selector: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    tolerations: tuple[Toleration, ...] = ()
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    is_mirror: bool = False
    deleting: bool = False  # metadata.deletionTimestamp is set
    priority: int = 0  # spec.priority, resolved from the PriorityClass by the API server

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_daemonset(self) -> bool:
        return self.owner is not None and self.owner.kind == "DaemonSet"

    @property
    def is_finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def is_node_bound_system_pod(self) -> bool:
        """DaemonSet and mirror pods live and die with their node; they never block removal."""
        return self.is_daemonset or self.is_mirror


@dataclass(frozen=True, slots=True)
class InstanceRef:
    """One VM Scale Set instance, as named by a node's providerID."""

    subscription_id: str
    resource_group: str
    scale_set: str
    instance_id: str

    @property
    def group_id(self) -> str:
        return group_id(self.resource_group, self.scale_set)


_PROVIDER_ID = re.compile(
    r"^azure:///subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)"
    r"/providers/Microsoft\.Compute/virtualMachineScaleSets/(?P<vmss>[^/]+)"
    r"/virtualMachines/(?P<id>[^/]+)$",
    re.IGNORECASE,
)


def parse_provider_id(provider_id: str) -> InstanceRef | None:
    """Map a node's providerID to its scale-set instance; None when it is not a VMSS instance."""
    match = _PROVIDER_ID.match(provider_id or "")
    if match is None:
        return None
    return InstanceRef(match["sub"], match["rg"], match["vmss"], match["id"])


def group_id(resource_group: str, scale_set: str) -> str:
    """A node group's identity: resource groups compare case-insensitively in ARM, names do not."""
    return f"{resource_group.lower()}/{scale_set}"


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    allocatable: Resources
    created_at: datetime
    provider_id: str = ""
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    taints: tuple[Taint, ...] = ()
    ready: bool = False
    unschedulable: bool = False  # spec.unschedulable (cordoned)

    @property
    def instance(self) -> InstanceRef | None:
        return parse_provider_id(self.provider_id)

    @property
    def is_being_deleted(self) -> bool:
        return any(t.key == TO_BE_DELETED_TAINT for t in self.taints)


@dataclass(frozen=True, slots=True)
class NodeTemplate:
    """What a new node of a group will look like to the scheduler."""

    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    taints: tuple[Taint, ...] = ()
    source: str = "unknown"  # live-node | tags | vm-size


@dataclass(frozen=True, slots=True)
class Instance:
    instance_id: str
    provisioning_state: str = "Succeeded"  # Creating | Succeeded | Deleting | Failed ...
    computer_name: str = ""


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """One VM Scale Set that the autoscaler may resize."""

    resource_group: str
    name: str
    min_size: int
    max_size: int
    target_size: int  # sku.capacity
    vm_size: str
    tags: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    instances: tuple[Instance, ...] = ()
    zones: tuple[str, ...] = ()
    location: str = ""

    @property
    def id(self) -> str:
        return group_id(self.resource_group, self.name)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything one decision looks at, observed at `taken_at`."""

    taken_at: datetime
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    groups: tuple[NodeGroup, ...]
    templates: Mapping[str, NodeTemplate] = field(default_factory=dict)  # by group id

    def group(self, group_id_: str) -> NodeGroup | None:
        return next((g for g in self.groups if g.id == group_id_), None)

    def pods_on(self, node_name: str) -> list[Pod]:
        return [p for p in self.pods if p.node_name == node_name and not p.is_finished]


@dataclass(frozen=True, slots=True)
class GroupState:
    """Per node group: cooldown times and the nodes being removed. `etag` guards updates."""

    group_id: str
    last_scale_up: datetime | None = None
    last_scale_down: datetime | None = None
    last_failure: datetime | None = None
    # Nodes with a removal in flight, each with the id of the action that reserved it.
    deleting: Mapping[str, str] = field(default_factory=dict)
    backoff_until: datetime | None = None  # no scale-up is planned onto the group before this
    backoff_failures: int = 0  # consecutive failed scale-ups; sets the next backoff's length
    backoff_reason: str = ""  # the last failure's error code, for operators
    etag: str | None = None  # None: the row does not exist yet
