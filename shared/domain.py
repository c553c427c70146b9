"""The autoscaler's domain: resources, pods, nodes, node groups and snapshots.

Pure module: frozen dataclasses and small helpers, no I/O and no side effects.
Nothing here imports an SDK; adapters translate SDK objects into these types.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from datetime import datetime, timedelta
from types import MappingProxyType

EMPTY_MAP: Mapping[str, str] = MappingProxyType({})

# The taint cluster-autoscaler puts on a node it is about to delete; we use the
# same key so that tooling written for CA recognises our drains.
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"
DEFAULT_GRACE_SECONDS = 30  # the API's default terminationGracePeriodSeconds
LONG_TERMINATING_EXTRA_SECONDS = 30  # cluster-autoscaler's PodLongTerminatingExtraThreshold
# cluster-autoscaler's annotation marking a pod as a DaemonSet pod whatever owns it.
DAEMONSET_POD_ANNOTATION = "cluster-autoscaler.kubernetes.io/daemonset-pod"
DELETION_CANDIDATE_TAINT = "DeletionCandidateOfClusterAutoscaler"


# NodeGroupProvider.kind of each backend: VM Scale Sets in Uniform and in Flexible orchestration
# (whose instances are plain VMs, named, not numbered), and AKS agent pools (the agentPools API).
UNIFORM_SCALE_SET = "vmss-uniform"
FLEXIBLE_SCALE_SET = "vmss-flexible"
AKS_AGENT_POOL = "aks-agentpool"
# Virtual nodes (virtual-kubelet, e.g. AKS virtual nodes on Azure Container Instances) form a group kind of
# their own: observed and reported, never scaled, drained or deleted (engine.virtual_nodes).
VIRTUAL_NODE = "virtual-node"

# Well-known node labels the engine reasons about (kubelet and cloud-provider conventions).
# Spot capacity, as AKS marks it (and as we ask other clusters' spot nodes to be marked): a label, and a
# NoSchedule taint with the same key and value, so only pods that tolerate eviction land there.
SPOT_LABEL = "kubernetes.azure.com/scalesetpriority"
SPOT_VALUE = "spot"
REGULAR = "Regular"  # ARM's priority of on-demand VMs
SPOT = "Spot"

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_ZONE_LEGACY = "failure-domain.beta.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_REGION_LEGACY = "failure-domain.beta.kubernetes.io/region"
LABEL_AZURE_DISK_ZONE = "topology.disk.csi.azure.com/zone"

ExtendedResources = tuple[tuple[str, int], ...]


def extended_resources(items: Iterable[tuple[str, int]] | Mapping[str, int]) -> ExtendedResources:
    """Sorted by name, zero amounts dropped: equal resources then compare and hash equal."""
    pairs = items.items() if isinstance(items, Mapping) else items
    merged: dict[str, int] = {}
    for name, amount in pairs:
        merged[name] = merged.get(name, 0) + amount
    return tuple(sorted((name, amount) for name, amount in merged.items() if amount != 0))


def _combine(a: ExtendedResources, b: ExtendedResources, sign: int) -> ExtendedResources:
    merged = dict(a)
    for name, amount in b:
        merged[name] = merged.get(name, 0) + sign * amount
    return tuple(sorted((name, amount) for name, amount in merged.items() if amount != 0))


def _amount(extended: ExtendedResources, name: str) -> int:
    # A linear scan: these tuples hold one or two entries, where a dict would cost more to build.
    for key, amount in extended:
        if key == name:
            return amount
    return 0


@dataclass(frozen=True, slots=True)
class Resources:
    """Schedulable quantities. CPU in millicores, memory and ephemeral storage in bytes, pods as a count.

    `extended` holds every other scalar resource the scheduler counts (`nvidia.com/gpu`,
    `hugepages-2Mi`, any `vendor/name`), as (name, amount) pairs sorted by name without
    zero amounts; a resource absent from a capacity counts as zero capacity. The common
    case has no extended resources, and every operation takes a fast path for it because
    the scale-up planner calls these in tight loops.
    """

    cpu_milli: int = 0
    memory_bytes: int = 0
    pods: int = 0
    ephemeral_storage_bytes: int = 0
    extended: ExtendedResources = ()

    def __post_init__(self) -> None:
        if self.extended:
            canonical = extended_resources(self.extended)
            if canonical != self.extended:
                object.__setattr__(self, "extended", canonical)

    def __add__(self, other: Resources) -> Resources:
        extended = self.extended
        if other.extended:
            extended = _combine(extended, other.extended, 1) if extended else other.extended
        return Resources(
            self.cpu_milli + other.cpu_milli,
            self.memory_bytes + other.memory_bytes,
            self.pods + other.pods,
            self.ephemeral_storage_bytes + other.ephemeral_storage_bytes,
            extended,
        )

    def __sub__(self, other: Resources) -> Resources:
        extended = self.extended
        if other.extended:
            extended = _combine(extended, other.extended, -1)
        return Resources(
            self.cpu_milli - other.cpu_milli,
            self.memory_bytes - other.memory_bytes,
            self.pods - other.pods,
            self.ephemeral_storage_bytes - other.ephemeral_storage_bytes,
            extended,
        )

    def amount(self, name: str) -> int:
        """An extended resource's amount; 0 when absent."""
        return _amount(self.extended, name)

    def fits_in(self, capacity: Resources) -> bool:
        """Whether these requests fit `capacity` (usually free space).

        As kube-scheduler's NodeResourcesFit, a resource requested at zero always fits,
        even on an over-committed node whose free amount is negative.
        """
        if (
            (self.cpu_milli > 0 and self.cpu_milli > capacity.cpu_milli)
            or (self.memory_bytes > 0 and self.memory_bytes > capacity.memory_bytes)
            or (self.pods > 0 and self.pods > capacity.pods)
            or (self.ephemeral_storage_bytes > 0 and self.ephemeral_storage_bytes > capacity.ephemeral_storage_bytes)
        ):
            return False
        if self.extended:
            available = capacity.extended
            for name, amount in self.extended:
                if amount > 0 and amount > _amount(available, name):
                    return False
        return True

    def is_zero(self) -> bool:
        return (
            self.cpu_milli == 0
            and self.memory_bytes == 0
            and self.pods == 0
            and self.ephemeral_storage_bytes == 0
            and not self.extended
        )


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
        if self.operator != "Equal":  # alpha Gt/Lt (or anything else): never assume it tolerates
            return False
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str


# --- What a pod asks of the nodes it may run on -------------------------------------
#
# Small frozen mirrors of the Kubernetes API's scheduling constructs. Every collection
# is a tuple, so pods with equal constraints compare and hash equal: the scale-up
# planner groups pending pods into equivalence classes on exactly these values.

SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


_INT64 = re.compile(r"[+-]?[0-9]+")


def _as_int(text: str) -> int | None:
    """The value as Go's strconv.ParseInt(text, 10, 64) reads it: no spaces, no underscores, 64-bit."""
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _valid_label_key(key: str) -> bool:
    """A qualified name: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (0 < len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and _LABEL_NAME.fullmatch(name) is not None


def _valid_label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and _LABEL_NAME.fullmatch(value) is not None)


def valid_node_requirement(requirement: SelectorRequirement) -> bool:
    """Whether the scheduler can parse a node selector requirement (labels.NewRequirement).

    The scheduler's node affinity (component-helpers nodeaffinity) turns a parse error
    into a term that matches no node, rather than failing the pod or matching every node:
    an invalid key or value, In/NotIn without values, Exists/DoesNotExist with values,
    Gt/Lt without exactly one integer value, or an unknown operator.
    """
    return _valid_node_requirement(requirement.key, requirement.operator, requirement.values)


def _valid_node_requirement(key: str, operator: str, values: tuple[str, ...]) -> bool:
    if not _valid_label_key(key):
        return False
    if operator in ("In", "NotIn"):
        return bool(values) and all(_valid_label_value(v) for v in values)
    if operator in ("Exists", "DoesNotExist"):
        return not values
    if operator in ("Gt", "Lt"):
        return len(values) == 1 and _as_int(values[0]) is not None
    return False


def _valid_field_requirement(requirement: SelectorRequirement) -> bool:
    """matchFields: only In/NotIn with exactly one value (nodeSelectorRequirementsAsFieldSelector)."""
    return requirement.operator in ("In", "NotIn") and len(requirement.values) == 1


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    """One `matchExpressions` entry of a node selector term or of a label selector.

    Operators as in the API: In, NotIn, Exists, DoesNotExist, and (node selectors
    only) Gt and Lt, which compare the label's value and the single value as integers.
    NotIn and DoesNotExist match when the key is absent.
    """

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        operator = self.operator
        if operator == "In":
            value = labels.get(self.key)
            return value is not None and value in self.values
        if operator == "NotIn":
            value = labels.get(self.key)
            return value is None or value not in self.values
        if operator == "Exists":
            return self.key in labels
        if operator == "DoesNotExist":
            return self.key not in labels
        if operator in ("Gt", "Lt"):
            value = labels.get(self.key)
            if value is None or len(self.values) != 1:
                return False
            have, bound = _as_int(value), _as_int(self.values[0])
            if have is None or bound is None:
                return False
            return have > bound if operator == "Gt" else have < bound
        return False  # an operator we do not know matches nothing; the adapter reports it


# The API names the two uses differently; the semantics are one.
NodeSelectorRequirement = SelectorRequirement
LabelSelectorRequirement = SelectorRequirement


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """One of a required node affinity's `nodeSelectorTerms`: its requirements are ANDed.

    `match_fields` may only name `metadata.name` (the API allows nothing else); a term
    with neither expressions nor fields matches no node, as in the scheduler.
    """

    match_expressions: tuple[SelectorRequirement, ...] = ()
    match_fields: tuple[SelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        if not self.match_expressions and not self.match_fields:
            return False
        if not self.valid:  # as the scheduler: a term it cannot parse matches no node
            return False
        for requirement in self.match_expressions:
            if not requirement.matches(labels):
                return False
        if self.match_fields:
            fields = {"metadata.name": node_name}
            for requirement in self.match_fields:
                if not requirement.matches(fields):
                    return False
        return True

    @property
    def valid(self) -> bool:
        """Whether every requirement parses as the scheduler would parse it (see valid_node_requirement)."""
        return _term_valid(self)


@lru_cache(maxsize=4096)
def _term_valid(term: NodeSelectorTerm) -> bool:
    # Terms are few and shared by many pods; the regexes run once per distinct term.
    return all(valid_node_requirement(r) for r in term.match_expressions) and all(
        _valid_field_requirement(r) for r in term.match_fields
    )


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A label selector (`matchLabels` ANDed with `matchExpressions`). The empty selector matches everything."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[SelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for requirement in self.match_expressions:
            if not requirement.matches(labels):
                return False
        return True

    @property
    def keys(self) -> frozenset[str]:
        """The label keys this selector looks at: labels outside them cannot change its answer."""
        return frozenset(k for k, _ in self.match_labels) | {r.key for r in self.match_expressions}


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A required pod affinity or anti-affinity term.

    The term selects pods by `label_selector` (None, as an absent selector in the API,
    matches no pod) in `namespaces`; with no namespaces listed and `all_namespaces`
    false it means the namespace of the pod that carries the term, as in the API.
    `all_namespaces` stands for an empty `namespaceSelector` ({}), which selects every
    namespace. Topology is the node label `topology_key` (hostname, zone, or any).
    """

    topology_key: str
    label_selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False

    def applies_to_namespace(self, namespace: str, owner_namespace: str) -> bool:
        """Whether the term looks at pods in `namespace`, for a term carried by a pod in `owner_namespace`."""
        if self.all_namespaces:
            return True
        if self.namespaces:
            return namespace in self.namespaces
        return namespace == owner_namespace

    def selects(self, pod: Pod, owner_namespace: str) -> bool:
        """Whether this term (carried by a pod in `owner_namespace`) selects `pod`."""
        return (
            self.label_selector is not None
            and self.applies_to_namespace(pod.namespace, owner_namespace)
            and self.label_selector.matches(pod.labels)
        )


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    """A `topologySpreadConstraints` entry. Only `DoNotSchedule` is a filter; `ScheduleAnyway` only scores.

    `label_selector` already includes the pod's own values for `matchLabelKeys` (the
    adapter merges them, as the scheduler does); None matches no pod. `min_domains`
    None means 1. The two policies decide which nodes count as eligible domains:
    `node_affinity_policy` Honor (default) keeps only nodes matching the pod's node
    selector and required affinity; `node_taints_policy` Honor keeps only nodes whose
    taints the pod tolerates (default Ignore).
    """

    max_skew: int
    topology_key: str
    when_unsatisfiable: str = "DoNotSchedule"
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"

    @property
    def is_filter(self) -> bool:
        return self.when_unsatisfiable == "DoNotSchedule"


@dataclass(frozen=True, slots=True)
class HostPort:
    """A container port bound on the node (`hostPort`). An empty host IP means every address, 0.0.0.0."""

    port: int
    protocol: str = "TCP"
    host_ip: str = "0.0.0.0"

    def conflicts_with(self, other: HostPort) -> bool:
        """kube-scheduler's NodePorts rule: same port and protocol, and the same or a wildcard address."""
        return (
            self.port == other.port
            and self.protocol == other.protocol
            and (self.host_ip == other.host_ip or self.host_ip == "0.0.0.0" or other.host_ip == "0.0.0.0")
        )


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
    terminating: bool = False  # metadata.deletionTimestamp is set: the pod is on its way out
    deleted_at: datetime | None = None  # metadata.deletionTimestamp: when the pod was asked to terminate
    priority: int = 0  # spec.priority, resolved from the PriorityClass by the API server
    # Required node affinity: the terms are ORed. Empty means none (the API requires a term when set).
    node_affinity: tuple[NodeSelectorTerm, ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()  # required terms, all must hold
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()  # required terms, none may be violated
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    # Scheduling constructs we cannot evaluate (a volume's topology, a namespaceSelector,
    # dynamic resource claims...), named so the engine reports them rather than
    # pretending the pod fits.
    unsupported: tuple[str, ...] = ()
    # Volumes whose data dies with the node: hostPath, and emptyDir not backed by memory.
    local_volumes: tuple[str, ...] = ()
    started_at: datetime | None = None  # status.startTime
    active_deadline_seconds: int | None = None  # spec.activeDeadlineSeconds: the pod is killed after this
    termination_grace_seconds: int | None = None  # spec.terminationGracePeriodSeconds (the API defaults it to 30)
    status_reason: str = ""  # status.reason: e.g. `ProviderFailed`, set by virtual-kubelet when ACI refused the pod
    status_message: str = ""  # status.message: the provider's words
    # What the pod asks of its host that not every runtime offers (a virtual node on ACI does not), in the
    # vocabulary of `engine.virtual_nodes.aci_unsupported`: host-network, host-pid, host-ipc, privileged,
    # init-containers, volume:<kind>:<name> for each volume.
    runtime_features: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_daemonset(self) -> bool:
        """Owned by a DaemonSet, or marked as one by cluster-autoscaler's annotation (a custom controller's
        per-node pods, e.g. an operator's agents): such pods go with their node, as CA's IsDaemonSetPod."""
        if self.owner is not None and self.owner.kind == "DaemonSet":
            return True
        return self.annotations.get(DAEMONSET_POD_ANNOTATION) == "true"

    def long_terminating(self, now: datetime) -> bool:
        """Asked to terminate longer ago than its grace period and 30 s more: cluster-autoscaler's
        IsPodLongTerminating. Such a pod will not leave by itself; scale-down ignores it."""
        if self.deleted_at is None:
            return False
        grace = self.termination_grace_seconds if self.termination_grace_seconds is not None else DEFAULT_GRACE_SECONDS
        return now > self.deleted_at + timedelta(seconds=grace + LONG_TERMINATING_EXTRA_SECONDS)

    @property
    def is_finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def is_node_bound_system_pod(self) -> bool:
        """DaemonSet and mirror pods live and die with their node; they never block removal."""
        return self.is_daemonset or self.is_mirror


@dataclass(frozen=True, slots=True)
class DaemonSet:
    """A DaemonSet (apps/v1) as its pod template asks of every node it runs on.

    `requests` are computed from the template as for a Pod (init containers, overhead);
    `tolerations` are the template's own: the DaemonSet controller adds its automatic ones
    (engine.daemonsets) when it makes each pod. `host_network` decides one of those.
    """

    namespace: str
    name: str
    requests: Resources
    node_selector: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    node_affinity: tuple[NodeSelectorTerm, ...] = ()  # required terms, ORed
    tolerations: tuple[Toleration, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    host_network: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget as the Eviction API enforces it: how many more of its pods may go now."""

    namespace: str
    name: str
    selector: LabelSelector | None  # None selects nothing, an empty selector every pod of the namespace
    disruptions_allowed: int  # status.disruptionsAllowed

    def covers(self, pod: Pod) -> bool:
        return pod.namespace == self.namespace and self.selector is not None and self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class InstanceRef:
    """One instance of a node group: as a node's providerID names it, or as node mapping found it.

    `subscription_id` is "" when the node was mapped by hostname or IP (the autoscaler's own
    subscription, AZURE_SUBSCRIPTION_ID); `scale_set` is the group's name.
    """

    subscription_id: str
    resource_group: str
    scale_set: str
    instance_id: str
    lane: str = ""  # the VM size of the lane it belongs to, in a multi-size group (NodeGroup.lane); "" otherwise

    @property
    def group_id(self) -> str:
        return group_id(self.resource_group, self.scale_set, self.lane)


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


def instance_order(instance_id: str) -> tuple[int, str]:
    """A sort key for instance ids: Uniform ids (digits) numerically, then Flexible VM names by text."""
    return (int(instance_id), "") if instance_id.isdigit() else (1 << 62, instance_id)


# A multi-size group (a Flexible scale set with an instance mix, an AKS VirtualMachines pool) is planned as one
# lane per VM size: a NodeGroup each, whose id is the set's id, LANE_SEPARATOR and the size as the set spells it
# (`rg/vmss~Standard_D4s_v5`). `~` is not allowed in scale-set or agent-pool names, so the id stays unambiguous.
LANE_SEPARATOR = "~"


def group_id(resource_group: str, scale_set: str, lane: str = "") -> str:
    """A node group's identity: resource groups compare case-insensitively in ARM, names do not."""
    base = f"{resource_group.lower()}/{scale_set}"
    return f"{base}{LANE_SEPARATOR}{lane}" if lane else base


def parent_group_id(group_id_: str) -> str:
    """The scale set's (or pool's) id of a lane's id; a group that is not a lane is its own parent."""
    return group_id_.partition(LANE_SEPARATOR)[0]


def lane_of(group_id_: str) -> str:
    """The VM size a lane's id names; "" for a group that is not a lane."""
    return group_id_.partition(LANE_SEPARATOR)[2]


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
    internal_ips: tuple[str, ...] = ()  # status.addresses of type InternalIP: a key for mapping by IP
    # Types of the node's conditions other than Ready whose status is True (an in-cluster agent's signal, e.g.
    # a termination handler's condition: SPOT_EVICTION_SIGNAL=condition:<type>).
    conditions: frozenset[str] = frozenset()
    # Set by the services from node mapping (engine.node_mapping): `mapped` says it was decided, and
    # `mapped_to` is the instance (None: unmanaged or ambiguous, never touched). Until then, the
    # providerID alone names the instance, as cloud-provider-azure writes it.
    mapped: bool = False
    mapped_to: InstanceRef | None = None

    @property
    def instance(self) -> InstanceRef | None:
        """The group instance this node runs on; None for a node that is not ours to manage."""
        return self.mapped_to if self.mapped else parse_provider_id(self.provider_id)

    @property
    def is_being_deleted(self) -> bool:
        return any(t.key == TO_BE_DELETED_TAINT for t in self.taints)


@dataclass(frozen=True, slots=True)
class NodeTemplate:
    """What a new node of a group will look like to the scheduler."""

    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    taints: tuple[Taint, ...] = ()
    source: str = "unknown"  # live-node | tags | vm-size:skus-api | vm-size:table


@dataclass(frozen=True, slots=True)
class VmSizeCapacity:
    """A VM size's hardware, as the Compute resource SKUs API lists it for one location.

    `vcpus` are the cores the guest sees (`vCPUsAvailable` for constrained-core sizes),
    `memory_bytes` the size's memory (ARM's `MemoryGB` counts GiB), `gpus` whole GPUs.
    `restriction` is ARM's reason code (`NotAvailableForSubscription`, `QuotaId`) when the
    subscription cannot deploy the size anywhere in that location, "" when it can.
    """

    name: str
    vcpus: int
    memory_bytes: int
    gpus: int = 0
    restriction: str = ""
    family: str = ""  # the SKU's quota family (`standardDSv5Family`): which Compute usage its cores count against


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    """One Compute usage of a location (`GET .../locations/{location}/usages`): vCPUs in use of a quota.

    `name` is ARM's `name.value`: `cores` (total regional vCPUs), `lowPriorityCores` (spot), or a family
    (`standardDSv5Family`); other usages (virtualMachines, ...) are kept but never planned against.
    """

    name: str
    current: int
    limit: int
    localized: str = ""


ANY_OFFERING = "*"  # an offering key's priority or name that covers every value


@dataclass(frozen=True, slots=True, order=True)
class OfferingKey:
    """What a mark covers in one location: a VM size (`scope` "size"), a quota family ("family") or every size
    ("priority", name `*`), in one zone ("" = regional, or every zone) and of one priority (Regular, Spot or `*`)."""

    location: str
    scope: str
    name: str
    zone: str = ""
    priority: str = ANY_OFFERING

    @property
    def text(self) -> str:
        """The key as one string (the state row's key): `westeurope/size/standard_d4s_v5/1/Spot`."""
        return "/".join((self.location, self.scope, self.name, self.zone, self.priority))

    @classmethod
    def parse(cls, text: str) -> OfferingKey:
        parts = text.split("/")
        if len(parts) != 5:
            raise ValueError(f"offering key {text!r}: expected location/scope/name/zone/priority")
        return cls(*parts)


@dataclass(frozen=True, slots=True)
class UnavailableOffering:
    """One mark: `key` may not be asked for before `until`, because `group`'s scale-up failed with `code`."""

    key: OfferingKey
    until: datetime
    since: datetime
    kind: str
    code: str
    group: str = ""
    message: str = ""  # the start of Azure's message, for operators

    def live(self, now: datetime) -> bool:
        return now < self.until


@dataclass(frozen=True, slots=True)
class Instance:
    """One instance of a node group, with the keys a node can be mapped to it by (engine.node_mapping).

    `instance_id`: a Uniform scale set's decimal id, a Flexible scale set's VM name.
    `computer_name`: the hostname ARM gave the VM (k3s and kubeadm name their nodes after it).
    `private_ips`: the primary NIC's private addresses; filled only when IP mapping needs them.
    `resource_id`: the VM's ARM id (`.../virtualMachineScaleSets/<vmss>/virtualMachines/<id>` or,
    for Flexible members, `.../virtualMachines/<vm name>`): what cloud-provider-azure puts after `azure://`.
    """

    instance_id: str
    provisioning_state: str = "Succeeded"  # Creating | Succeeded | Deleting | Failed ...
    computer_name: str = ""
    private_ips: tuple[str, ...] = ()
    resource_id: str = ""
    # The instance view's PowerState code without its prefix (running, deallocated, ...); "" when not read
    # (`list_instances(power_state=True)` reads it: only spot groups need it, to see evictions).
    power_state: str = ""
    # A Failed instance's error, from its instance view's `ProvisioningState/failed/<Code>` status (code and
    # message): read for Failed instances only (an allocation that failed after its operation succeeded).
    error_code: str = ""
    error_message: str = ""
    # VMSS instance protection (`properties.protectionPolicy`), as the instance list reports it: None when not
    # read (a backend without it, or an instance not listed). Scale-in protection keeps a capacity decrease or
    # Azure autoscale from picking the instance; protection from scale-set actions implies it and is an
    # operator's, never changed by us (engine.protection).
    protected_from_scale_in: bool | None = None
    protected_from_scale_set_actions: bool = False
    # The instance's own VM size where its group holds several (instance mix, AKS VirtualMachines pools); "" when
    # the group has one size.
    vm_size: str = ""
    # Whether the instance runs the scale set's latest model (ARM's `latestModelApplied`): False means it drifted
    # (engine.drift); None when the backend does not report it.
    latest_model_applied: bool | None = None

    @property
    def deleting(self) -> bool:
        return self.provisioning_state.lower() == "deleting"

    @property
    def deallocated(self) -> bool:
        return self.power_state.lower() in ("deallocated", "deallocating")

    @property
    def failed(self) -> bool:
        return self.provisioning_state.lower() == "failed"


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """One node group the autoscaler may resize: today a Uniform VM Scale Set."""

    resource_group: str
    name: str
    min_size: int
    max_size: int
    # The backend's size (a scale set's sku.capacity): the instances it holds, deallocated ones included;
    # what `NodeGroupProvider.begin_resize` sets.
    capacity: int
    vm_size: str
    tags: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    instances: tuple[Instance, ...] = ()
    zones: tuple[str, ...] = ()
    location: str = ""
    # The backend that discovered the group (NodeGroupProvider.kind): where its calls are routed.
    provider: str = UNIFORM_SCALE_SET
    # Why the autoscaler must not act on this group although it is marked for it (e.g. an AKS pool whose own
    # cluster autoscaler is on); "" for a group it manages. Refused groups are reported, never planned for.
    refused: str = ""
    # ARM's VM priority: Regular (on demand) or Spot; a spot VM is evicted by Azure when it needs the capacity
    # back, per `eviction_policy` (Delete: gone; Deallocate: stopped, still in the capacity).
    priority: str = REGULAR
    eviction_policy: str = ""
    # The backend's version of the group as read (ARM's etag), "" when it reports none: a resize made from this
    # read is sent with If-Match, so ARM refuses it if the group changed since (NodeGroupProvider.begin_resize).
    etag: str = ""
    # Whether its instances may hibernate on a deallocate (memory kept on the OS disk, resumed on start): a Flexible
    # scale set created with additionalCapabilities.hibernationEnabled, not spot; read by the providers.
    hibernation_enabled: bool = False
    # Multi-size groups (engine.multi_size): `lane` is the VM size this NodeGroup grows and removes, one lane per
    # size of the scale set or pool (its id ends in `~<size>`, `vm_size` is that size, `capacity` its instances,
    # and `min_size`/`max_size` what the other lanes leave of the set's own). `lanes` lists every size of the set in
    # the order its allocation strategy prefers them (`allocation_strategy`: LowestPrice, CapacityOptimized,
    # Prioritized, or "" for an AKS VirtualMachines pool, whose sizes we choose freely). "" and () for a one-size group.
    lane: str = ""
    lanes: tuple[str, ...] = ()
    allocation_strategy: str = ""
    # AKS: the node image version the pool's new nodes get (`properties.nodeImageVersion`); a node whose
    # `kubernetes.azure.com/node-image-version` label differs has drifted (engine.drift). "" elsewhere.
    node_image_version: str = ""
    # Filled in by the services from the group's state, never by a provider:
    stopped: int = 0  # of the capacity, instances we deallocated (SCALE_DOWN_MODE=deallocate): no node, none coming
    written_off: int = 0  # nodes asked for that the planner no longer counts on (a ProvisionTimeout backoff)

    @property
    def running_target(self) -> int:
        """The nodes the group is to have running, as the planners count them: min and max apply to it.

        The capacity less the instances we deallocated and the nodes written off; a planned scale-up
        adds to the capacity.
        """
        return self.capacity - self.stopped - self.written_off

    @property
    def id(self) -> str:
        return group_id(self.resource_group, self.name, self.lane)

    @property
    def parent_id(self) -> str:
        """The scale set's (or pool's) id: a lane's parent, or the group itself."""
        return group_id(self.resource_group, self.name)

    @property
    def is_spot(self) -> bool:
        return self.priority.lower() == SPOT.lower()


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything one decision looks at, observed at `taken_at`."""

    taken_at: datetime
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    groups: tuple[NodeGroup, ...]
    templates: Mapping[str, NodeTemplate] = field(default_factory=dict)  # by group id
    disruption_budgets: tuple[DisruptionBudget, ...] = ()
    # Capacities from the resource SKUs API by lower-cased size name; only read for scale-from-zero templates.
    vm_sizes: Mapping[str, VmSizeCapacity] = field(default_factory=dict)
    # DaemonSet objects as listed: what each new node of a group gives away (engine.daemonsets).
    daemonsets: tuple[DaemonSet, ...] = ()
    # One node's price per hour (USD) by group id, from the provider; only read by the `price` expander.
    prices: Mapping[str, float] = field(default_factory=dict)
    # Node mapping, for the operator: node -> the method that found its instance (provider-id, hostname, ip),
    # and node -> why none was (unmanaged or ambiguous); such nodes carry no instance and are never touched.
    mapped_by: Mapping[str, str] = field(default_factory=dict)
    unmapped: Mapping[str, str] = field(default_factory=dict)
    ambiguous: frozenset[str] = frozenset()  # of `unmapped`, the nodes with more than one candidate instance
    # Groups marked for the autoscaler that it refuses to act on (NodeGroup.refused), by id: not in `groups`.
    refused: Mapping[str, str] = field(default_factory=dict)

    def group(self, group_id_: str) -> NodeGroup | None:
        return next((g for g in self.groups if g.id == group_id_), None)

    def pods_on(self, node_name: str) -> list[Pod]:
        return [p for p in self.pods if p.node_name == node_name and not p.is_finished]


# Voluntary disruptions, by reason (Karpenter's names, and ours for a replacement by a cheaper node): what a
# disruption budget (engine.disruption_budgets) may limit.
EMPTY = "Empty"
UNDERUTILIZED = "Underutilized"
REPLACE = "Replace"
DRIFTED = "Drifted"
DISRUPTION_REASONS = (EMPTY, UNDERUTILIZED, REPLACE, DRIFTED)


@dataclass(frozen=True, slots=True)
class Replacement:
    """One node being replaced: capacity asked of `to_group` first, the node drained once that is Ready.

    `reason` is REPLACE (consolidation: several nodes onto one cheaper) or DRIFTED (model, image or age: `detail`
    says which). `since` is when the replacement capacity was asked, by action `action_id`; `count` is the nodes
    that action asked for on behalf of the nodes replaced together (`together`, this one included).
    `saving_per_hour` is the consolidation's saving in USD per hour (0 for drift). `given_up_at` is set when the
    replacement was given up (REPLACEMENT_TIMEOUT): the entry stays as a tombstone, so the node is not proposed
    again, forced or counted as disrupted until its back-off ends (engine.replacement).
    """

    node: str
    reason: str
    to_group: str
    since: datetime
    action_id: str = ""
    count: int = 1
    together: tuple[str, ...] = ()
    saving_per_hour: float = 0.0
    detail: str = ""
    given_up_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class GroupState:
    """Per node group: cooldown times and the nodes being removed. `etag` guards updates."""

    group_id: str
    last_scale_up: datetime | None = None
    last_scale_down: datetime | None = None
    last_failure: datetime | None = None
    # Nodes with a removal in flight, each with the id of the action that reserved it.
    removing: Mapping[str, str] = field(default_factory=dict)
    # Removals past the point of no return: the delete is about to be or has been requested.
    committed: frozenset[str] = frozenset()
    # Draining nodes that pending pods need back, and since when: the executor cancels their removal.
    reclaim: Mapping[str, datetime] = field(default_factory=dict)
    # Instances we deallocated (SCALE_DOWN_MODE=deallocate): still in the scale set's capacity, started
    # again before new ones are added. The group's size as the planners see it leaves them out.
    stopped: frozenset[str] = frozenset()
    # When we deallocated each of them: the cap (SCALE_DOWN_DEALLOCATED_MAX) deletes the oldest first.
    # Entries for instances no longer in `stopped` mean nothing; rows written before it have none.
    stopped_at: Mapping[str, datetime] = field(default_factory=dict)
    backoff_until: datetime | None = None  # no scale-up is planned onto the group before this
    backoff_failures: int = 0  # consecutive failed scale-ups; sets the next backoff's length
    backoff_reason: str = ""  # the last failure's error code, for operators
    # ARM throttled a removal of the group's instances (429) until then: its budget of writes per scale set
    # is spent, so the scale-down planner gives the slots to other groups meanwhile.
    throttled_until: datetime | None = None
    # Spot instances Azure announced it will evict (a Preempt notice), and when (the notice's NotBefore): their
    # nodes are drained as soon as they are seen, even if the notice came before the node registered.
    preempted: Mapping[str, datetime] = field(default_factory=dict)
    # Measured boots (engine.idle): seconds from a scale-up's request to the registration of its median node,
    # one per scale-up, the last idle.BOOT_WINDOW, oldest first; SCALE_DOWN_IDLE_MODE=break-even keeps idle
    # nodes for about their median.
    boots: tuple[int, ...] = ()
    # Scale-ups whose new instances have not all registered: (requested at, nodes asked for, nodes still to
    # come), oldest first.
    boot_requests: tuple[tuple[datetime, int, int], ...] = ()
    # The latest registration measured: nodes registered at or before it are counted already.
    boots_counted_until: datetime | None = None
    # Measured starts (engine.idle.measure_starts): seconds from a scale-up's start of stopped instances to its
    # median instance's node being Ready, one per scale-up, the last idle.BOOT_WINDOW, oldest first.
    starts: tuple[int, ...] = ()
    # Starts of stopped instances not yet expired: (requested at, instance ids started, ids not yet Ready),
    # oldest first. Kept until MAX_NODE_PROVISION_TIME after the request even once all are Ready, so that their
    # fresh nodes are not taken for new instances' boots.
    start_requests: tuple[tuple[datetime, tuple[str, ...], tuple[str, ...]], ...] = ()
    # The atomic scale-up (its action id) growing the group, and since when: it names the instances it added by
    # listing the group before and after its capacity write, so no other atomic scale-up writes in between.
    atomic_holder: str = ""
    atomic_since: datetime | None = None
    # Nodes of this group being replaced (engine.replacement), by node name: the replacement was asked of
    # `Replacement.to_group`, and the node is drained once it is Ready.
    replacing: Mapping[str, Replacement] = field(default_factory=dict)
    etag: str | None = None  # None: the row does not exist yet

    def without_removal(self, node: str) -> GroupState:
        """The state with no trace of the node's removal: reservation, commitment, reclaim request."""
        return replace(self, removing={n: a for n, a in self.removing.items() if n != node},
                       committed=self.committed - {node},
                       reclaim={n: at for n, at in self.reclaim.items() if n != node})


@dataclass(frozen=True, slots=True)
class LimitReservation:
    """Room under the cluster-wide limits one scale-up holds from its check until its action ends.

    `target` is the running size it grows the group to (absolute, as `ScaleUp.target_size`), so once the
    capacity is written the reservation adds nothing to what the group counts already. `nodes`, `cores` and
    `memory_bytes` (per node) price it when the group is no longer discovered.
    """

    action_id: str
    group_id: str
    target: int
    nodes: int
    cores: int
    memory_bytes: int
    until: datetime  # after this the reservation holds nothing, whether or not its action released it

    def live(self, now: datetime) -> bool:
        return now < self.until


@dataclass(frozen=True, slots=True)
class LimitReservations:
    """The one limits row: the reservations of the scale-ups in flight, by action id; `etag` guards updates."""

    reservations: Mapping[str, LimitReservation] = field(default_factory=dict)
    etag: str | None = None  # None: the row does not exist yet


@dataclass(frozen=True, slots=True)
class DemandHistory:
    """A group's demand by hour (engine.forecast): the peak nodes asked for and not yet there, per whole UTC hour.

    `peaks[i]` is the hour `start + i` hours; the last is the current hour, still rising. None marks an hour no
    poll observed (the app was stopped), which is unknown, not zero. `etag` guards updates (None: no row yet).
    """

    group_id: str
    start: datetime | None = None  # the whole UTC hour of peaks[0]; None while nothing is noted
    peaks: tuple[float | None, ...] = ()
    etag: str | None = None


# CapacityBuffer (autoscaling.x-k8s.io/v1beta1): spare room asked for ahead of pods; read by the Cluster port, decided
# on by engine.buffers. Only the fields we act on; `problem` names what could not be read (the buffer is skipped).
ACTIVE_CAPACITY = "buffer.x-k8s.io/active-capacity"


@dataclass(frozen=True, slots=True)
class ScalableRef:
    """spec.scalableRef: an object with a /scale subresource whose pods the buffer's chunks look like."""

    api_group: str
    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class BufferCondition:
    """One metav1.Condition of a buffer's status; `since` is lastTransitionTime."""

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str = ""
    since: datetime | None = None
    observed_generation: int = 0


@dataclass(frozen=True, slots=True)
class BufferStatus:
    """A buffer's status as written (CA's fields, and the proposal's readyReplicas)."""

    replicas: int | None = None
    ready_replicas: int | None = None
    pod_template: str | None = None
    pod_template_generation: int | None = None
    strategy: str | None = None
    conditions: tuple[BufferCondition, ...] = ()


@dataclass(frozen=True, slots=True)
class CapacityBuffer:
    namespace: str
    name: str
    uid: str = ""
    generation: int = 0
    strategy: str = ACTIVE_CAPACITY
    pod_template: str | None = None  # spec.podTemplateRef.name
    scalable: ScalableRef | None = None
    replicas: int | None = None
    percentage: int | None = None
    limits: Mapping[str, int] = field(default_factory=lambda: EMPTY_MAP)  # cpu in millicores, others in units
    status: BufferStatus = BufferStatus()
    problem: str = ""  # the spec could not be read: reported in status, the buffer skipped

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class BufferTemplate:
    """The pod shape a buffer's chunks take: a PodTemplate's, or a scalable workload's spec.template."""

    pod: Pod  # namespace and name empty: a shape, not a pod
    name: str  # the PodTemplate's (or the workload's) name
    generation: int = 0


# ProvisioningRequest (autoscaling.x-k8s.io/v1): capacity asked for a set of pods ahead of them, all of it or none;
# read by the Cluster port, decided on by engine.provisioning. Only the fields we act on; `problem` names what could
# not be read (the request is reported Failed, never acted on).
CHECK_CAPACITY_CLASS = "check-capacity.autoscaling.x-k8s.io"
ATOMIC_SCALE_UP_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
# A pod names the request whose booked room it takes (the older cluster-autoscaler.kubernetes.io key still read).
CONSUME_PROVISIONING_REQUEST = "autoscaling.x-k8s.io/consume-provisioning-request"
CONSUME_PROVISIONING_REQUEST_LEGACY = "cluster-autoscaler.kubernetes.io/consume-provisioning-request"
PROVISIONING_CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
PROVISIONING_CLASS_ANNOTATION_LEGACY = "cluster-autoscaler.kubernetes.io/provisioning-class-name"

# A metav1.Condition, as buffers' and requests' statuses carry it.
Condition = BufferCondition


@dataclass(frozen=True, slots=True)
class PodSet:
    """spec.podSets[]: `count` pods shaped like the PodTemplate `pod_template` in the request's namespace."""

    pod_template: str
    count: int


@dataclass(frozen=True, slots=True)
class ProvisioningRequest:
    namespace: str
    name: str
    class_name: str  # spec.provisioningClassName
    pod_sets: tuple[PodSet, ...] = ()
    created_at: datetime | None = None  # metadata.creationTimestamp
    uid: str = ""
    generation: int = 0
    parameters: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)  # spec.parameters
    conditions: tuple[Condition, ...] = ()  # status.conditions
    details: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)  # status.provisioningClassDetails
    problem: str = ""  # the spec could not be read

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def is_true(self, type_: str) -> bool:
        found = self.condition(type_)
        return found is not None and found.status == "True"


def consumed_request(pod: Pod) -> str | None:
    """namespace/name of the ProvisioningRequest whose room this pod takes, from its annotations; None if none."""
    name = pod.annotations.get(CONSUME_PROVISIONING_REQUEST) or pod.annotations.get(CONSUME_PROVISIONING_REQUEST_LEGACY)
    return f"{pod.namespace}/{name}" if name else None
