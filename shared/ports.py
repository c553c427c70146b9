"""The interfaces between the autoscaler's logic and the outside world.

Pure module: protocols and the small value types they exchange, no I/O.
Services (shared.services) depend on these; adapters (shared.adapters)
implement them with the Azure and Kubernetes SDKs; tests and the replay may
implement them in memory where they measure decisions rather than storage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from shared.actions import ScaleAction, ScaleDownRound
from shared.domain import (
    BufferStatus,
    BufferTemplate,
    CapacityBuffer,
    Condition,
    ProvisioningRequest,
    DaemonSet,
    DemandHistory,
    DisruptionBudget,
    GroupState,
    Instance,
    LimitReservations,
    Node,
    NodeGroup,
    Pod,
    QuotaUsage,
    Taint,
    UnavailableOffering,
    VmSizeCapacity,
)



class Clock(Protocol):
    def now(self) -> datetime: ...


# --- Kubernetes -------------------------------------------------------------

EvictionOutcome = Literal["evicted", "blocked", "not_found"]


class ClusterError(RuntimeError):
    """The Kubernetes API could not be read or written; the message names the call.

    `transient`: the API server answered 5xx or 429 (API priority and fairness), or not at all: the
    same call may well succeed later.
    """

    def __init__(self, message: str = "", *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class Cluster(Protocol):
    def list_nodes(self) -> list[Node]: ...

    def list_pods(self) -> list[Pod]:
        """Every pod that is not finished (phase Succeeded/Failed excluded)."""
        ...

    def get_node(self, name: str) -> Node | None: ...

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod, finished or not; None when it does not exist."""
        ...

    def annotate_pod(self, namespace: str, name: str, *, annotations: Mapping[str, str | None]) -> None:
        """Merge these annotations into the pod's (None removes one); a no-op on a missing pod."""
        ...

    def list_pods_on_node(self, node_name: str) -> list[Pod]: ...

    def get_config_map(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The ConfigMap's `data`, or None when it does not exist."""
        ...

    def list_event_times(self, reason: str) -> list[tuple[datetime, int]]:
        """(last time, count) of every core/v1 Event with this reason, all namespaces (the API server keeps
        them an hour): e.g. virtual-kubelet's ProviderCreateSuccess, one per container group it created."""
        ...

    def list_disruption_budgets(self) -> list[DisruptionBudget]:
        """Every PodDisruptionBudget (policy/v1) of every namespace, as the Eviction API enforces it now."""
        ...

    def list_daemonsets(self) -> list[DaemonSet]:
        """Every DaemonSet (apps/v1) of every namespace: what each new node of a group gives away."""
        ...

    def write_config_map(self, namespace: str, name: str, *, data: Mapping[str, str],
                         annotations: Mapping[str, str]) -> None:
        """Set these data keys and annotations, creating the ConfigMap when it does not exist."""
        ...

    def cordon(self, node_name: str, *, taint: Taint) -> None:
        """Mark unschedulable and add the taint; a no-op where both are already there."""
        ...

    def uncordon(self, node_name: str, *, taint_key: str) -> None:
        """Undo cordon(); a no-op where the node is already schedulable and untainted."""
        ...

    def add_taint(self, node_name: str, *, taint: Taint) -> None:
        """Add the taint unless present, without cordoning; a no-op on a missing node."""
        ...

    def remove_taint(self, node_name: str, *, taint_key: str) -> None:
        """Drop taints with this key, without uncordoning; a no-op on a missing node."""
        ...

    def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> EvictionOutcome:
        """Evict through the Eviction API: 'blocked' when a PodDisruptionBudget forbids it now."""
        ...

    def delete_node(self, name: str) -> None:
        """Remove the Node object; a no-op when it is already gone."""
        ...

    def list_capacity_buffers(self) -> list[CapacityBuffer] | None:
        """Every CapacityBuffer (autoscaling.x-k8s.io/v1beta1) of every namespace; None when the API does not serve
        the CRD (the feature is off). One that cannot be read comes back with its `problem` set."""
        ...

    def update_capacity_buffer_status(self, namespace: str, name: str, *, status: BufferStatus) -> None:
        """Write the buffer's status subresource; a no-op on a missing buffer."""
        ...

    def get_pod_template(self, namespace: str, name: str, *, kind: str = "PodTemplate",
                         api_group: str = "") -> BufferTemplate | None:
        """The pod shape of a PodTemplate, or of a workload's spec.template (Deployment, ReplicaSet, StatefulSet,
        Job); None when the object does not exist."""
        ...

    def list_provisioning_requests(self) -> list[ProvisioningRequest] | None:
        """Every ProvisioningRequest (autoscaling.x-k8s.io/v1) of every namespace; None when the API does not serve
        the CRD (the feature is off). One that cannot be read comes back with its `problem` set."""
        ...

    def update_provisioning_request_status(self, namespace: str, name: str, *, conditions: Sequence[Condition],
                                           details: Mapping[str, str] | None = None) -> None:
        """Write the request's status subresource: these conditions replace the old ones (and
        provisioningClassDetails when given); a no-op on a missing request."""
        ...

    def get_scale(self, namespace: str, name: str, *, kind: str, api_group: str) -> int | None:
        """The object's current replicas as its /scale subresource reports them (a Job's parallelism); None when
        it does not exist."""
        ...


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """A Kubernetes Event about one object, with cluster-autoscaler's reasons (TriggeredScaleUp, ...)."""

    namespace: str
    kind: str
    name: str
    uid: str
    reason: str
    message: str
    at: datetime
    type: Literal["Normal", "Warning"] = "Normal"


class EventSink(Protocol):
    def emit(self, event: ClusterEvent) -> None:
        """Best effort: an event that cannot be written is logged, never raised."""
        ...


# --- Node groups (Azure Compute and other backends) ---------------------------


# ARM's code when an If-Match precondition fails (HTTP 412): the resource changed since it was read.
CHANGED_SINCE_READ = "PreconditionFailed"
# Our code for a scale-in protection asked of a backend that has none (Flexible members, AKS-managed pools).
SCALE_IN_PROTECTION_UNSUPPORTED = "ScaleInProtectionNotSupported"


class ComputeError(RuntimeError):
    """An ARM call failed; `code` carries ARM's error code when there is one.

    `transient`: a server-side or network fault (HTTP 5xx or 408, a timeout, a dropped connection)
    that the same call may well survive later; throttling (429) has its own code, `TooManyRequests`.
    """

    def __init__(self, message: str, *, code: str = "", retry_after: float | None = None,
                 transient: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after = retry_after  # seconds, when ARM throttled us (429)
        self.transient = transient


@dataclass(frozen=True, slots=True)
class Operation:
    """A long-running ARM operation, resumable from `token` in a later invocation."""

    token: str
    status: Literal["InProgress", "Succeeded", "Failed", "Canceled"]
    error_code: str = ""
    error_message: str = ""

    @property
    def done(self) -> bool:
        return self.status != "InProgress"


class NodeGroupProvider(Protocol):
    """One backend of node groups, in the spirit of cluster-autoscaler's CloudProvider/NodeGroup.

    Everything the engine knows about groups and their instances comes from here, as domain data
    (NodeGroup, Instance, VmSizeCapacity): discover groups, list a group's instances with the keys
    that map them to nodes (instance id, computer name), grow a group, delete, deallocate or start
    specific instances, what a node template needs (the VM sizes of a location) and what a node costs.
    `kind` names the backend; discovery stamps it on every group it returns (NodeGroup.provider), and
    `shared.services.providers.ProviderRouter` sends each call for a group to the provider of its kind.
    A new backend (Flexible scale sets, AKS node pools, virtual nodes) is one new class with these methods.

    Long-running operations come back as `Operation`s whose token a later invocation resumes.
    """

    kind: str

    # Reads are frugal because ARM budgets them per scale set (listing instances is
    # high-cost, 10 a minute): groups come without instances; nodes name theirs.
    def list_node_groups(self) -> list[NodeGroup]:
        """Scale sets of the configured resource groups tagged for this cluster (instances not listed)."""
        ...

    def get_node_group(self, group_id: str) -> NodeGroup | None:
        """Fresh read of one discovered group; None when it no longer exists or is no longer tagged."""
        ...

    def get_instance(self, group: NodeGroup, instance_id: str) -> Instance | None:
        """One instance of the group, or None when it does not exist."""
        ...

    def list_instances(self, group: NodeGroup, *, power_state: bool = False) -> list[Instance]:
        """Every instance of the group in one (high-cost) call: cheaper than a GET per instance for several.

        Each with the keys node mapping reads: instance id, computer name, ARM id (not private IPs);
        `power_state` also reads each instance's power state (the instance view), which spot eviction
        detection needs (a backend that cannot tell leaves it "").
        """
        ...

    def list_private_ips(self, group: NodeGroup) -> dict[str, tuple[str, ...]]:
        """Private IPs of the group's instances by instance id, from their network interfaces (one list call).

        Only read when a node must be mapped by IP (kubeadm nodes without a providerID).
        """
        ...

    def list_vm_sizes(self, location: str) -> list[VmSizeCapacity]:
        """The VM sizes of a location from the resource SKUs API, restricted ones included; cached for hours.

        Never raises: when ARM fails, the stale list (or an empty one) comes back and a
        warning is logged, so a scale-from-zero template falls back to the shipped table.
        """
        ...

    def list_prices(self, groups: Sequence[NodeGroup]) -> dict[str, float]:
        """One node's price per hour (USD, pay-as-you-go, Linux) by group id; groups with no known price are left out.

        Cached for hours; never raises (a prices outage leaves groups out and logs a warning), so the
        `price` expander degrades to the rest of its chain.
        """
        ...

    def begin_resize(self, group: NodeGroup, capacity: int) -> Operation:
        """Set the group's capacity. When `group.etag` is set, only if the group is unchanged since that read:
        otherwise ComputeError with code CHANGED_SINCE_READ, and nothing changes."""
        ...

    def begin_delete_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation: ...

    def begin_deallocate_instances(self, group: NodeGroup, instance_ids: list[str], *,
                                   hibernate: bool = False) -> Operation:
        """Stop these instances and release their hardware; capacity is unchanged, compute is no longer billed.

        `hibernate`: keep their memory on the OS disk so a start resumes them (only where
        `group.hibernation_enabled`); a backend that cannot hibernate them refuses with ComputeError before
        anything changes (ARM: 400), and the caller may deallocate them plainly instead.
        """
        ...

    def begin_start_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation:
        """Start these (deallocated) instances again; a running one is left as it is."""
        ...

    def supports_scale_in_protection(self, group: NodeGroup) -> bool:
        """Whether `set_scale_in_protection` works on this group's instances: known without an ARM call."""
        ...

    def set_scale_in_protection(self, group: NodeGroup, instance_id: str, *, protect: bool) -> None:
        """Protect one instance from scale-in (a capacity decrease, Azure autoscale), or lift that protection.

        Started, not waited for: the next instance list shows the outcome. ComputeError with code
        SCALE_IN_PROTECTION_UNSUPPORTED where the backend has no such protection (check `supports_...` first).
        """
        ...

    def get_resize_operation(self, token: str) -> Operation: ...

    def get_delete_operation(self, token: str) -> Operation: ...

    def get_deallocate_operation(self, token: str) -> Operation: ...

    def get_start_operation(self, token: str) -> Operation: ...


# --- Durable state (Table storage) -------------------------------------------


class UnreadableRow(ValueError):
    """A stored row whose column cannot be read (not JSON, not a number, not a time): the row is named.

    Raised by a StateStore for the one row asked for; a service that meets it for one group's row reports it
    and goes on with the other groups. Never repaired by overwriting: an operator reads the row first.
    """

    def __init__(self, *, table: str, partition_key: str, row_key: str, column: str, problem: str) -> None:
        super().__init__(f"table {table!r} row PartitionKey={partition_key!r} RowKey={row_key!r}: "
                         f"column {column!r} cannot be read: {problem}")
        self.table = table
        self.partition_key = partition_key
        self.row_key = row_key
        self.column = column


# started: a delivery is working on `progress`; done: it finished that step;
# released: it failed and gave the step back, so a redelivery may take it at once.
LedgerStatus = Literal["started", "done", "released"]


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """The progress of one action. `progress` is (step index, attempt): it only moves forward."""

    action_id: str
    kind: str
    group: str
    progress: tuple[int, int]
    status: LedgerStatus
    updated_at: datetime
    outcome: str = ""  # set when the whole action is over: succeeded | skipped:<why> | failed:<why> | rejected:<why>
    operation: str = ""  # a long-running operation's continuation token, while one is in flight
    node: str = ""
    duplicates: int = 0  # deliveries suppressed because this progress was already taken
    # What we decided, as `ledger.record_of` writes it: the nodes and instances of a removal, the sizes of a
    # scale-up. Written by our own first claim and by the step that decides the sizes; a later message that
    # contradicts it is refused (a message is a request, never an order). Empty on rows of older versions.
    record: str = ""
    faulted_since: datetime | None = None  # the first transient ARM fault of the current step, while they last
    # When the current step first ran, by our own claims (`ledger.claim`): what its deadlines count from
    # (BATCH_DRAIN_TIMEOUT, MAX_POD_EVICTION_TIME), never a time a message carries. None on older rows.
    step_started_at: datetime | None = None
    etag: str | None = None


class StateStore(Protocol):
    # Group cooldowns; update_group returns False when another writer won the race.
    def get_group(self, group_id: str) -> GroupState: ...

    def update_group(self, state: GroupState) -> bool: ...

    # Nodes that are unneeded, and since when.
    def list_unneeded(self) -> dict[str, datetime]: ...

    def set_unneeded(self, node_name: str, since: datetime) -> None: ...

    def clear_unneeded(self, node_name: str) -> None: ...

    # The action ledger; create_ledger_entry returns False when the row exists (first writer wins),
    # update_ledger_entry returns False when the entry changed since it was read.
    def get_ledger_entry(self, action_id: str) -> LedgerEntry | None: ...

    def create_ledger_entry(self, entry: LedgerEntry) -> bool: ...

    def update_ledger_entry(self, entry: LedgerEntry) -> bool: ...

    def list_ledger(self) -> list[LedgerEntry]: ...

    # Retention: finished entries (with an outcome) last updated before `updated_before`, at most
    # `limit` of them; delete_ledger_entry returns False when the entry changed since it was read.
    def list_finished_ledger(self, *, updated_before: datetime, limit: int) -> list[LedgerEntry]: ...

    def delete_ledger_entry(self, entry: LedgerEntry) -> bool: ...

    # Unavailable offerings (engine.offerings): one row per key, replaced by a later mark of the same key
    # (the services keep the longer-lived of two); expired rows are deleted by the state sweep.
    def list_offerings(self) -> list[UnavailableOffering]: ...

    def put_offering(self, mark: UnavailableOffering) -> None: ...

    def delete_offering(self, key: str) -> None: ...

    # The limits row (services.limit_reservations): the room under the cluster-wide limits that scale-ups in
    # flight hold. update_limit_reservations creates the row (etag None: first writer wins) or replaces it if
    # unchanged since read; False when another writer won the race.
    def get_limit_reservations(self) -> LimitReservations: ...

    def update_limit_reservations(self, row: LimitReservations) -> bool: ...

    # Demand by hour, one row per group (services.demand, engine.forecast): an unknown group's is empty.
    # update_demand creates the row (etag None: first writer wins) or replaces it if unchanged since read;
    # False when another writer won the race. list_demand leaves out (and logs) a row it cannot read.
    def get_demand(self, group_id: str) -> DemandHistory: ...

    def update_demand(self, history: DemandHistory) -> bool: ...

    def list_demand(self) -> list[DemandHistory]: ...


# --- Measured usage (Azure Monitor) ---------------------------------------------


class BacklogSource(Protocol):
    """How much work waits for a load-driven group (LOAD_BACKLOG_QUEUE): the length of a queue."""

    @property
    def name(self) -> str:
        """Where the backlog is read, for logs."""
        ...

    def get_backlog(self) -> int:
        """Messages waiting now (approximate, as the queue service counts them). Raises UsageUnavailable."""
        ...


class QuotaUnavailable(RuntimeError):
    """The Compute usages could not be read; the planner then caps nothing and Azure is the judge."""


class QuotaSource(Protocol):
    """The subscription's Compute quotas per location (`GET .../locations/{location}/usages`).

    Reads are cached a few minutes per location (QUOTA_CACHE); `refresh` reads again at once (after a
    quota refusal). `note_requested` adds vCPUs we asked for since the last read to what the next answers
    report in use, so the polls between two reads never plan the same room twice.
    """

    def list_usages(self, location: str, *, refresh: bool = False) -> list[QuotaUsage]: ...

    def note_requested(self, location: str, names: Sequence[str], vcpus: int) -> None: ...


@dataclass(frozen=True, slots=True)
class StandbyPool:
    """A VMSS Standby Pool (`Microsoft.StandbyPool/standbyVirtualMachinePools`) and the Flexible set it serves."""

    resource_group: str
    name: str
    scale_set_resource_group: str  # of attachedVirtualMachineScaleSetId ("" when attached to nothing)
    scale_set_name: str
    vm_state: str  # Running, Deallocated or Hibernated
    max_ready: int  # elasticityProfile.maxReadyCapacity
    min_ready: int  # elasticityProfile.minReadyCapacity (0 when unset)


class StandbyPoolSource(Protocol):
    """The Standby Pools of the node resource groups (shared.adapters.standby_pools): listed, and their ready
    capacities set. Errors raise ComputeError."""

    def list_standby_pools(self) -> list[StandbyPool]: ...

    def update_standby_pool(self, pool: StandbyPool, *, max_ready: int, min_ready: int) -> StandbyPool: ...


class UsageUnavailable(RuntimeError):
    """The usage source could not be queried (unreachable, refused, throttled, misconfigured).

    A second opinion, never a requirement: the caller decides by requests alone and says so.
    """


class NodeUsageSource(Protocol):
    """Measured node CPU usage, a second opinion on nodes that look idle by their pods' requests."""

    @property
    def name(self) -> str:
        """The USAGE_SOURCE value (`log-analytics`, `vmss-metric`), for the log and telemetry."""
        ...

    def get_node_cpu_usage(self, nodes: Sequence[Node], *, window: timedelta, now: datetime) -> Mapping[str, float]:
        """Average CPU usage over [now - window, now] as a fraction (0..1) of each node's CPU capacity.

        Keyed by node name, holding only the nodes the source has data for: a node missing from the
        answer has not been measured (too new, no agent, dimension not found) and is decided by
        requests. Nodes, not names, because a source may need the providerID (the scale set metric
        is per scale-set instance). Raises UsageUnavailable when the source cannot be queried at all.
        """
        ...


# --- Queue --------------------------------------------------------------------


class ActionQueue(Protocol):
    def send(self, action: ScaleAction | ScaleDownRound, *, delay: timedelta = timedelta(0)) -> object:
        """Enqueue, invisible for `delay` (a step that must wait re-enqueues itself this way). Returns the queue's
        id of the message where it has one (the app ignores it; the local runner tracks delays by it)."""
        ...

    def send_poison(self, text: str) -> None:
        """Put a message that must never run on `<queue>-poison`, for an operator to look at."""
        ...


@dataclass(frozen=True, slots=True)
class Ports:
    """Everything a service needs from the outside world, assembled by shared.context."""

    cluster: Cluster
    provider: NodeGroupProvider  # every backend behind one router (shared.services.providers)
    state: StateStore
    queue: ActionQueue
    clock: Clock
    events: EventSink
    usage: NodeUsageSource | None = None  # None: USAGE_SOURCE=none, scale-down goes by requests alone
    backlog: BacklogSource | None = None  # None: LOAD_BACKLOG_QUEUE unset, load-driven groups follow CPU alone
    quota: QuotaSource | None = None  # None: QUOTA_AWARE=false, scale-ups are capped by Azure's refusals alone
    standby_pools: StandbyPoolSource | None = None  # None: STANDBY_POOLS=false, Standby Pools left as they are
