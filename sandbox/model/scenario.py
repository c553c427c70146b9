"""Scenario files: what the simulated cluster looks like and what work arrives.

`load_scenario` turns a JSON file (or a bare name such as `burst`, resolved to
`sandbox/scenarios/<name>.json`, or an in-memory dict) into frozen dataclasses.
Every problem is reported as a `ScenarioError` naming the file, the JSON path
and what is wrong, so a typo in a long file is found at once. docs/scenarios.md
documents every field; keep the two in step.
"""

from __future__ import annotations

import copy
import json
import math
import re
from datetime import timedelta
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from shared.domain import EMPTY_MAP, Taint, Toleration
from sandbox.model import aci
from sandbox.model.aci import VirtualNodeSpec  # defined beside the rules that read it; scenario files declare it
from sandbox.model.agent_pools import (
    COMPUTER_NAME_PREFIX, AgentPoolError, AgentPoolSpec, check_pools, expand_node_group, split_vm_pool,
)
from sandbox.model.buffer_spec import FIELD as BUFFERS_FIELD
from sandbox.model.buffer_spec import BufferActionSpec, parse_buffer_actions
from sandbox.model.dists import Dist  # re-exported: scenario fields are Dists
from sandbox.model.drift_spec import TOP_LEVEL_FIELDS as DRIFT_FIELDS
from sandbox.model.drift_spec import ModelChangeSpec
from sandbox.model.drift_spec import parse_sections as parse_drift_sections
from sandbox.model.gang_spec import TOP_LEVEL_FIELDS as GANG_FIELDS
from sandbox.model.gang_spec import GangSections, parse_gang_sections
from sandbox.model.instance_mix import FIELD as MIX_FIELD
from sandbox.model.instance_mix import InstanceMixSpec, parse_instance_mix
from sandbox.model.nic_spec import FIELDS as NIC_FIELDS
from sandbox.model.nic_spec import NicSpec, check_subnets, group_nics, parse_nics
from sandbox.model.podspec import HostPort, SpecError, parse_affinity, parse_spread_constraints
from sandbox.model.resources import EPHEMERAL_STORAGE, Amounts, parse_scalar
from sandbox.model.spec_fields import FieldError as _Invalid  # raised while walking the document; turned into ScenarioError
from sandbox.model.spec_fields import listed as _list
from sandbox.model.spec_fields import obj as _obj
from sandbox.model.spec_fields import typename as _typename
from sandbox.model.spec_fields import whole as _int
from sandbox.model.spot import SCALE_SET_EVICTION_DEFAULT, SPOT_LABEL_KEY, SPOT_LABEL_VALUE, SPOT_TAINT, EvictionPolicy, Priority
from sandbox.model.spot_spec import (
    NODE_GROUP_FIELDS,
    TOP_LEVEL_FIELDS,
    AvailabilitySpec,
    EvictionSpec,
    SpotCapacitySpec,
)
from sandbox.model.spot_spec import parse_priority, parse_sections
from sandbox.model.standby_pool_spec import StandbyPoolSpec, parse_standby_pool
from sandbox.model.units import parse_bytes, parse_count, parse_cpu_milli, parse_duration, parse_time

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"

# How the cluster names and identifies its nodes (docs/scenarios.md, "Cluster flavours"):
# aks-engine: the Azure cloud provider (providerID azure:///..., node name = computer name);
# k3s: k3s's embedded cloud controller (providerID k3s://<node name>, a server node outside the scale sets);
# kubeadm: no cloud provider (no providerID, node names of the operator's own choosing).
FLAVOURS = ("aks-engine", "k3s", "kubeadm")
Flavour = Literal["aks-engine", "k3s", "kubeadm"]

# A node group's VMSS orchestration mode (docs/scenarios.md, "Flexible orchestration"; sandbox.api.flexible).
ORCHESTRATIONS = ("Uniform", "Flexible")
Orchestration = Literal["Uniform", "Flexible"]
# A Flexible member is named `{scale set}_{8 hex}`, and a VM name is at most 64 characters.
_FLEX_VMSS_NAME_MAX = 64 - 9

class ScenarioError(ValueError):
    """A scenario file is missing, unreadable or invalid."""

    def __init__(self, source: str, path: str, problem: str) -> None:
        super().__init__(f"{source}: {path}: {problem}")
        self.source = source
        self.path = path
        self.problem = problem


@dataclass(frozen=True, slots=True)
class MirrorPodSpec:
    name: str
    namespace: str
    requests: Amounts


@dataclass(frozen=True, slots=True)
class NodeGroupSpec:
    resource_group: str
    name: str
    vm_size: str
    allocatable: Amounts  # with extended resources such as nvidia.com/gpu among the scalars
    capacity: Amounts
    min_size: int
    max_size: int
    initial: int
    autoscaled: bool = True  # carries the cluster-autoscaler discovery tags
    location: str = ""
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    taints: tuple[Taint, ...] = ()
    zones: tuple[str, ...] = ()
    tags: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    computer_name_prefix: str = ""
    boot_delay: Dist | None = None  # None: the scenario's default
    mirror_pods: tuple[MirrorPodSpec, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)  # on every node of the pool
    initial_age: timedelta = timedelta(hours=1)  # how long before the start the initial nodes registered
    orchestration: Orchestration = "Uniform"  # one of ORCHESTRATIONS
    # additionalCapabilities.hibernationEnabled, set at creation: a deallocate may hibernate its VMs (Flexible only).
    hibernation_enabled: bool = False
    agent_pool: AgentPoolSpec | None = None  # the AKS agent pool this scale set is behind (sandbox.model.agent_pools)
    # Spot VMs (sandbox.model.spot, sandbox.model.spot_spec): a Spot group's nodes carry the Spot label and taint already.
    priority: Priority = "Regular"
    eviction_policy: EvictionPolicy = SCALE_SET_EVICTION_DEFAULT  # what an eviction does to a Spot VM
    max_price: float = -1.0  # billingProfile.maxPrice; -1: never evicted for price
    # Each VM's NICs (sandbox.model.nic_spec): () is one primary NIC named after the scale set in 10.224.0.0/16.
    nics: tuple[NicSpec, ...] = ()
    node_ip: str = ""  # the NIC whose address the Node registers as its InternalIP; "": the primary's
    standby_pool: StandbyPoolSpec | None = None  # a Flexible set's Standby Pool (sandbox.model.standby_pool_spec)
    # Seconds after registration until a GPU node's GPUs are allocatable (sandbox.model.gpu_spec); None: its default
    # for a group with GPUs.
    gpu_ready_delay: Dist | None = None
    # A Flexible set's VM sizes and allocation strategy (sandbox.model.instance_mix); then vm_size, allocatable and
    # capacity above are its largest size's, and each member VM has its own (instance_mix.member_spec).
    instance_mix: InstanceMixSpec | None = None


@dataclass(frozen=True, slots=True)
class DaemonSetSpec:
    name: str
    namespace: str
    requests: Amounts
    node_selector: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    cpu_usage_milli: int | None = None  # CPU each pod uses, as measured; None: its request
    # The pod template's tolerations; the default tolerates every taint, as node agents commonly do.
    tolerations: tuple[Toleration, ...] = (Toleration(operator="Exists"),)
    affinity: Mapping[str, Any] | None = None  # the pod template's spec.affinity as Kubernetes JSON (validated)


@dataclass(frozen=True, slots=True)
class ScaleStep:
    """From `at` (seconds after the start) on, a scaled ReplicaSet wants `replicas` pods."""

    at: float
    replicas: int


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    name: str
    namespace: str
    kind: Literal["Job", "ReplicaSet", "Pod"]
    count: int
    at: float  # seconds after the start when the first wave arrives
    spread: float  # arrivals of a wave are uniform over [at, at + spread]
    cpu: Dist  # millicores
    memory: Dist  # bytes
    duration: Dist | None  # seconds of running; None runs forever
    repeat_every: float = 0.0
    repeat_times: int = 1
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    node_selector: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    tolerations: tuple[Toleration, ...] = ()
    ephemeral_storage: Dist | None = None  # bytes; None requests none
    extended: Mapping[str, int] = field(default_factory=lambda: EMPTY_MAP)  # e.g. {"nvidia.com/gpu": 1}
    affinity: Mapping[str, Any] | None = None  # spec.affinity as Kubernetes JSON (validated)
    topology_spread_constraints: tuple[Mapping[str, Any], ...] = ()  # Kubernetes JSON (validated)
    host_ports: tuple[HostPort, ...] = ()
    priority: int | None = None  # spec.priority; None leaves the API default (0)
    cpu_usage: Dist | None = None  # millicores each pod uses, as measured; None: its CPU request
    volumes: tuple[Mapping[str, Any], ...] = ()  # spec.volumes as Kubernetes JSON: hostPath and emptyDir (validated)
    active_deadline_seconds: int | None = None  # spec.activeDeadlineSeconds, passed on (kubelet's, never enforced here)
    # Job spec.ttlSecondsAfterFinished: the TTL controller deletes a finished pod this long after it ends
    # (None keeps it, as Kubernetes does without a TTL). Long traces need it, or finished pods pile up.
    ttl_after_finished: float | None = None
    # A ReplicaSet's replicas over time (sandbox.world.pod_lifecycle scales it; sandbox.world.replicaset picks whom
    # to delete). Set, it replaces count, at, spread and repeat, and `count` holds the most replicas of a step.
    scale: tuple[ScaleStep, ...] = ()


@dataclass(frozen=True, slots=True)
class ScaleUpFailureSpec:
    """Capacity increases of a scale set that fail from the start (World.fail_next_scale_up)."""

    scale_set: str
    code: str = "QuotaExceeded"
    count: int = 1
    resource_group: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class AllocationFailureSpec:
    """Capacity increases of a scale set that Azure accepts and whose operation succeeds, but that leave `instances`
    of their new instances in provisioning state Failed with `code` (None: all of them), for `count` increases."""

    scale_set: str
    code: str = "ZonalAllocationFailed"
    instances: int | None = None
    count: int = 1
    resource_group: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class PdbSpec:
    name: str
    namespace: str
    selector: Mapping[str, str]
    min_available: int | str | None = None
    max_unavailable: int | str | None = None


@dataclass(frozen=True, slots=True)
class FrameBatch:
    """Frames added to a render queue's backlog at one moment."""

    at: float  # seconds after the start
    count: int
    frame_time: Dist | None = None  # this batch's own frame time; None: the queue's


@dataclass(frozen=True, slots=True)
class RenderQueueSpec:
    """A render manager handing frames to the pods of one DaemonSet (sandbox.world.render_queue)."""

    daemonset: str  # "<namespace>/<name>" of a DaemonSet of `daemonsets`
    frames: tuple[FrameBatch, ...]
    frame_time: Dist  # seconds one frame takes on one node
    busy_cpu_milli: int  # the worker pod's measured CPU while it renders
    idle_cpu_milli: int  # ... and while it waits for a frame
    # An Azure Storage queue the sandbox mirrors the backlog in (one message per frame waiting), which
    # LOAD_BACKLOG_QUEUE can name (sandbox.api.storage_backlog); None: the backlog is published nowhere.
    storage_queue: str | None = None

    @property
    def frames_total(self) -> int:
        return sum(batch.count for batch in self.frames)


@dataclass(frozen=True, slots=True)
class ExpectedUnschedulable:
    """Pods of one workload the scenario expects to stay Pending for good: no node and no group can hold them."""

    workload: str  # "<namespace>/<name>", as the report names pods' workloads
    count: int | None = None  # how many of its pods stay Pending; None: all of them


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    source: str
    node_groups: tuple[NodeGroupSpec, ...]
    description: str = ""
    cluster_name: str = "sandbox"
    flavour: Flavour = "aks-engine"  # one of FLAVOURS
    subscription_id: str = "00000000-0000-0000-0000-000000000000"
    location: str = "westeurope"
    start: datetime | None = None
    duration: float = 3600.0
    arm_throttling: bool = True
    arm_page_size: int = 100
    timeline_interval: float = 10.0
    boot_delay: Dist = field(default_factory=lambda: Dist("lognormal", (), 0.0, 900.0, 100.0, 300.0))
    provisioning_fraction: float = 0.3
    delete_delay: Dist = field(default_factory=lambda: Dist("uniform", (), 20.0, 40.0))
    deallocate_delay: Dist | None = None  # None: delete_delay (POST .../deallocate: deallocating -> deallocated)
    # Starting a deallocated instance (POST .../start): its own delay, not a fresh create-and-boot. No published
    # figure (shared/facts/capacity-ahead-gangs-sizes.md): assumed no faster than half the default boot delay.
    start_delay: Dist = field(default_factory=lambda: Dist("lognormal", (), 0.0, 450.0, 50.0, 150.0))
    node_removal_delay: float = 10.0
    termination_grace: float = 5.0
    namespaces: tuple[str, ...] = ()
    daemonsets: tuple[DaemonSetSpec, ...] = ()
    workloads: tuple[WorkloadSpec, ...] = ()
    pdbs: tuple[PdbSpec, ...] = ()
    scale_up_failures: tuple[ScaleUpFailureSpec, ...] = ()
    allocation_failures: tuple[AllocationFailureSpec, ...] = ()
    # VM sizes the subscription may not deploy (resource SKUs restriction NotAvailableForSubscription).
    restricted_vm_sizes: tuple[str, ...] = ()
    # Pods that must end Pending, each reported unplaceable by the autoscaler (`expect_unschedulable`).
    expect_unschedulable: tuple[ExpectedUnschedulable, ...] = ()
    # Bounds on summary.json figures that `make demo` checks: (dotted path, the most it may be).
    expect_at_most: tuple[tuple[str, float], ...] = ()
    # ... and (dotted path, the least it may be), e.g. pods that must have started on a virtual node.
    expect_at_least: tuple[tuple[str, float], ...] = ()
    # Frames handed to a DaemonSet's pods, one at a time per node (`render_queue`); None: no render queue.
    render_queue: RenderQueueSpec | None = None
    # An AKS virtual node backed by Azure Container Instances (`virtual_node`); None: no virtual node.
    virtual_node: VirtualNodeSpec | None = None
    # Spot capacity, the subscription's vCPU quotas, Spot evictions, and whether a cloud node lifecycle controller
    # deletes an evicted VM's Node (sandbox.model.spot_spec; the world's sandbox.world.spot and sandbox.world.quota).
    spot_capacity: tuple[SpotCapacitySpec, ...] = ()
    quotas: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    evictions: tuple[EvictionSpec, ...] = ()
    spot_availability: tuple[AvailabilitySpec, ...] = ()  # Spot Placement Score levels over the run
    cloud_node_lifecycle: bool = False
    # CapacityBuffers created and scaled through /scale on the timeline (sandbox.model.buffer_spec).
    capacity_buffers: tuple[BufferActionSpec, ...] = ()
    # Gang jobs with ProvisioningRequests, a Kueue-like queue, quota changes on the timeline (sandbox.model.gang_spec).
    gangs: GangSections = GangSections()
    # Scale-set model and AKS node image changes on the timeline (sandbox.model.drift_spec, sandbox.world.drift).
    model_changes: tuple[ModelChangeSpec, ...] = ()

    @property
    def resource_groups(self) -> tuple[str, ...]:
        """Resource groups holding node groups, in first-seen order."""
        seen: dict[str, str] = {}
        for group in self.node_groups:
            seen.setdefault(group.resource_group.lower(), group.resource_group)
        return tuple(seen.values())


# ---------------------------------------------------------------------------- loading


def resolve_scenario_path(name_or_path: str | Path) -> Path:
    """A bare name ('burst') means sandbox/scenarios/<name>.json; anything else is a path."""
    text = str(name_or_path)
    if isinstance(name_or_path, str) and re.fullmatch(r"[A-Za-z0-9_.-]+", text) and not text.endswith(".json"):
        return SCENARIO_DIR / f"{text}.json"
    return Path(name_or_path)


def load_scenario(source: str | Path | Mapping[str, Any] | Scenario) -> Scenario:
    """Load and validate a scenario from a name, a path, a dict, or pass a Scenario through."""
    if isinstance(source, Scenario):
        return source
    if isinstance(source, Mapping):
        return scenario_from_dict(source, source_name="<memory>")
    path = resolve_scenario_path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(str(path), "$", f"cannot read the file: {exc.strerror or exc}") from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(str(path), "$", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    return scenario_from_dict(document, source_name=str(path), default_name=path.stem)


def scenario_from_dict(document: Any, *, source_name: str = "<memory>", default_name: str = "inline") -> Scenario:
    try:
        return _scenario(document, source_name, default_name)
    except _Invalid as exc:
        raise ScenarioError(source_name, exc.path, exc.problem) from None


# ---------------------------------------------------------------------------- field readers

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # DNS-1123 label: pods, namespaces, PDBs
_VMSS_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_RG_NAME = re.compile(r"^[-\w._()]{1,90}$")
_PREFIX = re.compile(r"^[a-z0-9][-a-z0-9]{0,14}$")
_QUEUE_NAME = re.compile(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$")  # an Azure Storage queue's name


def _str(value: Any, path: str, pattern: re.Pattern[str] | None = None, what: str = "") -> str:
    if not isinstance(value, str) or not value:
        raise _Invalid(path, f"must be a non-empty string, got {_typename(value)}")
    if pattern is not None and not pattern.match(value):
        raise _Invalid(path, f"{value!r} is not a valid {what or 'name'}")
    return value


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(path, f"must be true or false, got {_typename(value)}")
    return value


def _parsed(parse: Callable[[Any], float], value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _Invalid(path, f"must be a string or a number, got {_typename(value)}")
    try:
        return float(parse(value))
    except ValueError as exc:
        raise _Invalid(path, str(exc)) from None


def _duration(value: Any, path: str) -> float:
    return _parsed(parse_duration, value, path)


def _string_map(value: Any, path: str) -> Mapping[str, str]:
    if not isinstance(value, dict):
        raise _Invalid(path, f"must be an object of strings, got {_typename(value)}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise _Invalid(f"{path}.{key}", f"must be a string, got {_typename(item)}")
    return MappingProxyType(dict(value))


def _items(obj: Mapping[str, Any], key: str, path: str, read: Callable[[Any, str], Any]) -> tuple[Any, ...]:
    """Read the optional list `obj[key]` (default empty), each element with `read(value, its path)`."""
    return tuple(read(item, f"{path}.{key}[{i}]") for i, item in enumerate(_list(obj.get(key, []), f"{path}.{key}")))


def _dist(value: Any, path: str, parse: Callable[[Any], float]) -> Dist:
    """scalar: fixed; list: choice; {min,max}: uniform; {median,p95[,min][,max]}: lognormal."""
    if isinstance(value, list):
        if not value:
            raise _Invalid(path, "a choice list must not be empty")
        return Dist("choice", tuple(_parsed(parse, v, f"{path}[{i}]") for i, v in enumerate(value)))
    if isinstance(value, dict):
        if "median" in value:
            obj = _obj(value, path, {"median", "p95", "min", "max"}, {"median", "p95"})
            median = _parsed(parse, obj["median"], f"{path}.median")
            p95 = _parsed(parse, obj["p95"], f"{path}.p95")
            if p95 < median:
                raise _Invalid(f"{path}.p95", f"must not be below the median ({obj['median']})")
            low = _parsed(parse, obj["min"], f"{path}.min") if "min" in obj else 0.0
            high = _parsed(parse, obj["max"], f"{path}.max") if "max" in obj else math.inf
            if high < low:
                raise _Invalid(f"{path}.max", "must not be below min")
            return Dist("lognormal", (), low, high, median, p95)
        obj = _obj(value, path, {"min", "max"}, {"min", "max"})
        low = _parsed(parse, obj["min"], f"{path}.min")
        high = _parsed(parse, obj["max"], f"{path}.max")
        if high < low:
            raise _Invalid(f"{path}.max", "must not be below min")
        return Dist("uniform", (), low, high)
    return Dist.fixed(_parsed(parse, value, path))


# Extended resources are domain-qualified names (`nvidia.com/gpu`, `example.com/fpga`), as the API requires.
_EXTENDED = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _extended_name(name: str, path: str) -> str:
    if not _EXTENDED.match(name):
        raise _Invalid(
            f"{path}.{name}",
            "unknown resource: use cpu, memory, ephemeral-storage, pods or an extended resource such as nvidia.com/gpu",
        )
    return name


def _resources(value: Any, path: str, *, need_pods: bool) -> Amounts:
    """Node allocatable/capacity (need_pods) or fixed requests: cpu, memory, pods, ephemeral-storage and
    extended resources (whole counts)."""
    if not isinstance(value, dict):
        raise _Invalid(path, f"must be an object, got {_typename(value)}")
    for key in ("cpu", "memory"):
        if key not in value:
            raise _Invalid(f"{path}.{key}", "required field is missing")
    scalars: dict[str, int] = {}
    for name, raw in value.items():
        if name in ("cpu", "memory", "pods"):
            continue
        if name != EPHEMERAL_STORAGE:
            _extended_name(name, path)
        scalars[name] = int(_parsed(lambda v, n=name: parse_scalar(n, v), raw, f"{path}.{name}"))
        if name == EPHEMERAL_STORAGE and need_pods:
            scalars[name] -= scalars[name] % 1024  # whole Ki, like memory
    pods = int(_parsed(parse_count, value.get("pods", 110 if need_pods else 0), f"{path}.pods"))
    memory = int(_parsed(parse_bytes, value["memory"], f"{path}.memory"))
    if need_pods:  # node resources: kubelet reports memory in whole Ki, so "13.8Gi" becomes 14470348Ki
        memory -= memory % 1024
    return Amounts.of(int(_parsed(parse_cpu_milli, value["cpu"], f"{path}.cpu")), memory, pods, scalars)


_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _taint(value: Any, path: str) -> Taint:
    obj = _obj(value, path, {"key", "value", "effect"}, {"key"})
    effect = obj.get("effect", "NoSchedule")
    if effect not in _EFFECTS:
        raise _Invalid(f"{path}.effect", f"must be one of {', '.join(_EFFECTS)}, got {effect!r}")
    return Taint(_str(obj["key"], f"{path}.key"), _opt_str(obj, "value", path), effect)


def _opt_str(obj: Mapping[str, Any], key: str, path: str, default: str = "") -> str:
    value = obj.get(key, default)
    if not isinstance(value, str):
        raise _Invalid(f"{path}.{key}", f"must be a string, got {_typename(value)}")
    return value


def _toleration(value: Any, path: str) -> Toleration:
    obj = _obj(value, path, {"key", "operator", "value", "effect"})
    operator = obj.get("operator", "Equal")
    if operator not in ("Equal", "Exists"):
        raise _Invalid(f"{path}.operator", f"must be Equal or Exists, got {operator!r}")
    effect = _opt_str(obj, "effect", path)
    if effect and effect not in _EFFECTS:
        raise _Invalid(f"{path}.effect", f"must be empty or one of {', '.join(_EFFECTS)}, got {effect!r}")
    key, value_ = _opt_str(obj, "key", path), _opt_str(obj, "value", path)
    # The API server's rules, so the pods the world creates are ones it would have accepted.
    if operator == "Equal" and not key:
        raise _Invalid(f"{path}.operator", "must be Exists when key is empty")
    if operator == "Exists" and value_:
        raise _Invalid(f"{path}.value", "must be empty when operator is Exists")
    return Toleration(key, operator, value_, effect)


def _budget(value: Any, path: str) -> int | str:
    if isinstance(value, str):
        if not re.fullmatch(r"\d{1,3}%", value) or int(value[:-1]) > 100:
            raise _Invalid(path, f"must be a count or a percentage such as '50%', got {value!r}")
        return value
    return _int(value, path)


# ---------------------------------------------------------------------------- sections


def _scenario(document: Any, source: str, default_name: str) -> Scenario:
    top = _obj(
        document,
        "$",
        {
            "name", "description", "cluster_name", "flavour", "subscription_id", "location", "start", "duration",
            "arm_throttling", "arm_page_size", "timeline_interval", "boot_delay", "provisioning_fraction",
            "delete_delay", "deallocate_delay", "start_delay", "node_removal_delay", "termination_grace", "namespaces", "node_groups",
            "daemonsets", "workloads", "pdbs", "scale_up_failures", "allocation_failures", "restricted_vm_sizes", "expect_unschedulable",
            "expect_at_most", "expect_at_least", "render_queue", "virtual_node", BUFFERS_FIELD, *TOP_LEVEL_FIELDS,
            *GANG_FIELDS, *DRIFT_FIELDS,
        },
        {"node_groups"},
    )
    location = _str(top.get("location", "westeurope"), "$.location")
    # A VirtualMachines agent pool stands for one scale set per size (sandbox.model.agent_pools.split_vm_pool).
    groups = tuple(group for parts in _items(top, "node_groups", "$", lambda item, path: tuple(
        _node_group(part, path, location, top) for part in split_vm_pool(item, path))) for group in parts)
    if not groups:
        raise _Invalid("$.node_groups", "must name at least one scale set")
    pool_problem = check_pools([(i, g.agent_pool) for i, g in enumerate(groups) if g.agent_pool is not None])
    if pool_problem is not None:
        raise _Invalid(*pool_problem)
    subnet_problem = check_subnets([(f"$.node_groups[{i}].nics", group_nics(g.nics, g.name)) for i, g in enumerate(groups)])
    if subnet_problem is not None:
        raise _Invalid(*subnet_problem)
    seen: set[tuple[str, str]] = set()
    prefixes: set[str] = set()
    for i, group in enumerate(groups):
        key = (group.resource_group.lower(), group.name.lower())
        if key in seen:
            raise _Invalid(f"$.node_groups[{i}].name", f"scale set {group.name!r} appears twice in {group.resource_group!r}")
        seen.add(key)
        if group.computer_name_prefix in prefixes:  # node names would collide
            raise _Invalid(
                f"$.node_groups[{i}].computer_name_prefix", f"{group.computer_name_prefix!r} is used by another scale set"
            )
        prefixes.add(group.computer_name_prefix)

    fraction = top.get("provisioning_fraction", 0.3)
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
        raise _Invalid("$.provisioning_fraction", f"must be a number in (0, 1], got {fraction!r}")
    duration = _duration(top.get("duration", "60m"), "$.duration")
    if duration <= 0:
        raise _Invalid("$.duration", "must be longer than zero")
    interval = _duration(top.get("timeline_interval", "10s"), "$.timeline_interval")
    if interval <= 0:
        raise _Invalid("$.timeline_interval", "must be longer than zero")
    start = None
    if top.get("start") is not None:
        try:
            start = parse_time(_str(top["start"], "$.start"))
        except ValueError:
            raise _Invalid("$.start", f"not an RFC 3339 timestamp: {top['start']!r}") from None

    defaults = Scenario(name="", source="", node_groups=())
    namespaces = _items(top, "namespaces", "$", lambda item, path: _str(item, path, _NAME, "namespace"))
    scenario = Scenario(
        name=_str(top.get("name", default_name), "$.name"),
        source=source,
        description=_opt_str(top, "description", "$"),
        cluster_name=_str(top.get("cluster_name", defaults.cluster_name), "$.cluster_name"),
        flavour=_flavour(top.get("flavour", defaults.flavour), "$.flavour"),
        subscription_id=_str(top.get("subscription_id", defaults.subscription_id), "$.subscription_id"),
        location=location,
        start=start,
        duration=duration,
        arm_throttling=_bool(top.get("arm_throttling", True), "$.arm_throttling"),
        arm_page_size=_int(top.get("arm_page_size", 100), "$.arm_page_size", 1),
        timeline_interval=interval,
        boot_delay=_dist(top["boot_delay"], "$.boot_delay", parse_duration)
        if "boot_delay" in top
        else defaults.boot_delay,
        provisioning_fraction=float(fraction),
        delete_delay=_dist(top["delete_delay"], "$.delete_delay", parse_duration)
        if "delete_delay" in top
        else defaults.delete_delay,
        deallocate_delay=_dist(top["deallocate_delay"], "$.deallocate_delay", parse_duration)
        if "deallocate_delay" in top
        else None,
        start_delay=_dist(top["start_delay"], "$.start_delay", parse_duration)
        if "start_delay" in top
        else defaults.start_delay,
        node_removal_delay=_duration(top.get("node_removal_delay", "10s"), "$.node_removal_delay"),
        termination_grace=_duration(top.get("termination_grace", "5s"), "$.termination_grace"),
        namespaces=namespaces,
        node_groups=groups,
        daemonsets=_items(top, "daemonsets", "$", _daemonset),
        workloads=_items(top, "workloads", "$", _workload),
        pdbs=_items(top, "pdbs", "$", _pdb),
        scale_up_failures=_items(top, "scale_up_failures", "$", _scale_up_failure),
        allocation_failures=_items(top, "allocation_failures", "$", _allocation_failure),
        restricted_vm_sizes=_items(top, "restricted_vm_sizes", "$", lambda item, path: _str(item, path)),
    )
    scenario = replace(scenario, expect_unschedulable=_items(
        top, "expect_unschedulable", "$", lambda item, path: _expected_unschedulable(item, path, scenario.workloads)))
    scenario = replace(scenario, expect_at_most=_bounds(top.get("expect_at_most", {}), "$.expect_at_most"),
                       expect_at_least=_bounds(top.get("expect_at_least", {}), "$.expect_at_least"))
    named: set[str] = set()
    for i, expected in enumerate(scenario.expect_unschedulable):
        if expected.workload in named:
            raise _Invalid(f"$.expect_unschedulable[{i}]", f"{expected.workload} is named twice")
        named.add(expected.workload)
    named_sets = [(f"$.scale_up_failures[{i}]", f) for i, f in enumerate(scenario.scale_up_failures)]
    named_sets += [(f"$.allocation_failures[{i}]", f) for i, f in enumerate(scenario.allocation_failures)]
    for where, failure in named_sets:
        matches = [
            g for g in groups
            if g.name == failure.scale_set
            and (failure.resource_group is None or g.resource_group.lower() == failure.resource_group.lower())
        ]
        if len(matches) != 1:
            problem = "names no scale set of node_groups" if not matches else "is ambiguous: add its resource_group"
            raise _Invalid(f"{where}.scale_set", f"{failure.scale_set!r} {problem}")
    _unique([(w.namespace, w.name) for w in scenario.workloads], "$.workloads", "workload")
    _unique([(d.namespace, d.name) for d in scenario.daemonsets], "$.daemonsets", "daemonset")
    _unique([(p.namespace, p.name) for p in scenario.pdbs], "$.pdbs", "PodDisruptionBudget")
    if "render_queue" in top:
        scenario = replace(scenario, render_queue=_render_queue(top["render_queue"], "$.render_queue", scenario.daemonsets))
    if "virtual_node" in top:
        scenario = replace(scenario, virtual_node=_virtual_node(top["virtual_node"], "$.virtual_node", scenario))
    scenario = replace(scenario, capacity_buffers=parse_buffer_actions(
        top, (*namespaces, *(w.namespace for w in scenario.workloads)), duration))
    scenario = replace(scenario, gangs=parse_gang_sections(
        top, (*namespaces, *(w.namespace for w in scenario.workloads)), duration))
    scenario = replace(scenario, **parse_drift_sections(top, groups, duration))
    return replace(scenario, **parse_sections(top, groups))


_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")  # a DNS subdomain, as Node names are


def _virtual_node(value: Any, path: str, scenario: Scenario) -> VirtualNodeSpec:
    """`{"name", "version", "quota_cores", "creates_per_5min", "creates_per_hour", "max_container_groups",
    "start_latency": dist, "price_vcpu_second", "price_gb_second", "bill_start_latency"}`, every field optional
    (`{}` is the AKS add-on's defaults)."""
    obj = _obj(value, path, {"name", "version", "quota_cores", "creates_per_5min", "creates_per_hour",
                             "max_container_groups", "start_latency", "price_vcpu_second", "price_gb_second",
                             "bill_start_latency"})
    version = obj.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version not in aci.VERSIONS:
        raise _Invalid(f"{path}.version", f"must be 1 (the AKS add-on) or 2 (Virtual Nodes v2), got {version!r}")
    name = _str(obj.get("name", aci.DEFAULT_NAMES[version]), f"{path}.name", _NODE_NAME, "node name")
    # Nodes of the scale sets must never take the virtual node's name.
    if scenario.flavour == "k3s" and name == "k3s-server":
        raise _Invalid(f"{path}.name", "'k3s-server' is the k3s server's node")
    for group in scenario.node_groups:
        prefix = "worker-" if scenario.flavour == "kubeadm" else group.computer_name_prefix
        if name.startswith(prefix):
            raise _Invalid(f"{path}.name", f"{name!r} could be the name of a node of scale set {group.name!r} "
                                           f"(their names start with {prefix!r})")
    prices = {}
    for key, default in (("price_vcpu_second", aci.DEFAULT_PRICE_VCPU_SECOND),
                         ("price_gb_second", aci.DEFAULT_PRICE_GB_SECOND)):
        price = obj.get(key, default)
        if isinstance(price, bool) or not isinstance(price, int | float) or not 0 <= price < math.inf:
            raise _Invalid(f"{path}.{key}", f"must be a number of USD at least 0, got {price!r}")
        prices[key] = float(price)
    bill_start_latency = obj.get("bill_start_latency", True)
    if not isinstance(bill_start_latency, bool):
        raise _Invalid(f"{path}.bill_start_latency", f"must be true or false, got {bill_start_latency!r}")
    return VirtualNodeSpec(
        name=name,
        version=version,
        quota_cores=_int(obj.get("quota_cores", aci.DEFAULT_QUOTA_CORES), f"{path}.quota_cores"),
        creates_per_5min=_int(obj.get("creates_per_5min", aci.DEFAULT_CREATES_PER_5MIN), f"{path}.creates_per_5min"),
        creates_per_hour=_int(obj.get("creates_per_hour", aci.DEFAULT_CREATES_PER_HOUR), f"{path}.creates_per_hour"),
        max_container_groups=_int(obj.get("max_container_groups", aci.DEFAULT_MAX_CONTAINER_GROUPS),
                                  f"{path}.max_container_groups"),
        start_latency=_dist(obj["start_latency"], f"{path}.start_latency", parse_duration)
        if "start_latency" in obj
        else VirtualNodeSpec().start_latency,
        bill_start_latency=bill_start_latency,
        **prices,
    )


def _render_queue(value: Any, path: str, daemonsets: tuple[DaemonSetSpec, ...]) -> RenderQueueSpec:
    """`{"daemonset", "frames": [{"at", "count"}], "frame_time": dist, "busy_cpu", "idle_cpu", "storage_queue"}`."""
    obj = _obj(value, path, {"daemonset", "frames", "frame_time", "busy_cpu", "idle_cpu", "storage_queue"},
               {"daemonset", "frames", "frame_time", "busy_cpu"})
    name = _str(obj["daemonset"], f"{path}.daemonset")
    namespace, _, short = name.rpartition("/")
    matches = [d for d in daemonsets if d.name == short and (not namespace or d.namespace == namespace)]
    if not matches:
        known = ", ".join(f"{d.namespace}/{d.name}" for d in daemonsets) or "none"
        raise _Invalid(f"{path}.daemonset", f"{name!r} names no DaemonSet of daemonsets (declared: {known})")
    if len(matches) > 1:
        raise _Invalid(f"{path}.daemonset", f"{name!r} is ambiguous: write <namespace>/{short}")
    (daemonset,) = matches
    frames = _items(obj, "frames", path, _frame_batch)
    if not frames:
        raise _Invalid(f"{path}.frames", "must hold at least one batch of frames")
    frame_time = _frame_time(obj["frame_time"], f"{path}.frame_time")
    idle = daemonset.requests.cpu_milli if daemonset.cpu_usage_milli is None else daemonset.cpu_usage_milli
    return RenderQueueSpec(
        daemonset=f"{daemonset.namespace}/{daemonset.name}",
        frames=frames,
        frame_time=frame_time,
        busy_cpu_milli=_cpu_usage(obj["busy_cpu"], f"{path}.busy_cpu"),
        idle_cpu_milli=_cpu_usage(obj["idle_cpu"], f"{path}.idle_cpu") if "idle_cpu" in obj else idle,
        storage_queue=(_str(obj["storage_queue"], f"{path}.storage_queue", _QUEUE_NAME,
                            "Azure Storage queue name (3-63 lowercase letters, digits and single hyphens)")
                       if "storage_queue" in obj else None),
    )


def _frame_batch(value: Any, path: str) -> FrameBatch:
    obj = _obj(value, path, {"at", "count", "frame_time"}, {"at", "count"})
    return FrameBatch(
        at=_duration(obj["at"], f"{path}.at"),  # parse_duration refuses negative durations
        count=_int(obj["count"], f"{path}.count", 0),
        frame_time=_frame_time(obj["frame_time"], f"{path}.frame_time") if "frame_time" in obj else None,
    )


def _frame_time(value: Any, path: str) -> Dist:
    """A duration `dist` whose every value is above zero (a lognormal needs a median above zero)."""
    dist = _dist(value, path, parse_duration)
    shortest = (
        dist.median if dist.kind == "lognormal" and dist.low <= 0
        else min(dist.values) if dist.kind in ("fixed", "choice") else dist.low
    )
    if shortest <= 0:
        raise _Invalid(path, "a frame must take longer than zero")
    return dist


def _flavour(value: Any, path: str) -> Flavour:
    if not isinstance(value, str) or value not in FLAVOURS:
        shown = repr(value) if isinstance(value, str) else _typename(value)
        raise _Invalid(path, f"{shown} is not a cluster flavour (allowed: {', '.join(FLAVOURS)})")
    return value  # type: ignore[return-value]


_SUMMARY_PATH = re.compile(r"^[a-z][a-z0-9_]*(\.[A-Za-z0-9_/-]+)*$")


def _bounds(value: Any, path: str) -> tuple[tuple[str, float], ...]:
    """`{"removal_lag_s.max": 900, ...}`: summary.json figures (a dotted path) and the most each may be."""
    if not isinstance(value, dict):
        raise _Invalid(path, f"must be an object of numbers, got {_typename(value)}")
    bounds = []
    for key, bound in value.items():
        _str(key, f"{path}.{key}", _SUMMARY_PATH, "summary.json path (dotted, e.g. removal_lag_s.max)")
        if isinstance(bound, bool) or not isinstance(bound, int | float) or bound < 0:
            raise _Invalid(f"{path}.{key}", f"must be a number at least 0, got {bound!r}")
        bounds.append((key, float(bound)))
    return tuple(bounds)


def _expected_unschedulable(value: Any, path: str, workloads: tuple[WorkloadSpec, ...]) -> ExpectedUnschedulable:
    """`"<name>"`, `"<namespace>/<name>"` or `{"workload": either, "count": n}`: a declared workload's pods."""
    count: int | None = None
    if isinstance(value, dict):
        obj = _obj(value, path, {"workload", "count"}, {"workload"})
        name, where = _str(obj["workload"], f"{path}.workload"), f"{path}.workload"
        if "count" in obj:
            count = _int(obj["count"], f"{path}.count", 1)
    else:
        name, where = _str(value, path), path
    namespace, _, short = name.rpartition("/")
    matches = [w for w in workloads if w.name == short and w.namespace == (namespace or "default")]
    if not matches:
        raise _Invalid(where, f"{name!r} names no workload of workloads")
    (workload,) = matches
    if count is not None and count > workload.count * workload.repeat_times:
        raise _Invalid(f"{path}.count", f"{count} is more than the {workload.count * workload.repeat_times} pod(s) "
                                        f"{name!r} creates")
    return ExpectedUnschedulable(f"{workload.namespace}/{workload.name}", count)


def _unique(keys: list[tuple[str, str]], path: str, what: str) -> None:
    seen: set[tuple[str, str]] = set()
    for i, key in enumerate(keys):
        if key in seen:
            raise _Invalid(f"{path}[{i}].name", f"{what} {key[0]}/{key[1]} is declared twice")
        seen.add(key)


def _node_group(value: Any, path: str, location: str, top: Mapping[str, Any]) -> NodeGroupSpec:
    pool = None
    if isinstance(value, dict) and "agent_pool" in value:  # an AKS agent pool: the scale set AKS keeps behind it
        defaults = Scenario(name="", source="", node_groups=())
        try:
            value, pool = expand_node_group(
                value, path, cluster_name=_str(top.get("cluster_name", defaults.cluster_name), "$.cluster_name"),
                subscription_id=_str(top.get("subscription_id", defaults.subscription_id), "$.subscription_id"),
                location=location, flavour=_flavour(top.get("flavour", defaults.flavour), "$.flavour"),
            )
        except AgentPoolError as exc:
            raise _Invalid(exc.path, exc.problem) from None
    # an instance mix's sizes carry their own vm_size and allocatable
    sized = set() if isinstance(value, dict) and MIX_FIELD in value else {"vm_size", "allocatable"}
    obj = _obj(
        value,
        path,
        {
            "resource_group", "name", "vm_size", "allocatable", "capacity", "min", "max", "initial", "autoscaled",
            "location", "labels", "taints", "zones", "tags", "computer_name_prefix", "boot_delay", "mirror_pods",
            "annotations", "initial_age", "orchestration", "hibernation_enabled", "standby_pool", "gpu_ready_delay",
            MIX_FIELD, *NODE_GROUP_FIELDS, *NIC_FIELDS,
        },
        {"resource_group", "name"} | sized,
    )
    mix = _instance_mix(obj, path)
    name = _str(obj["name"], f"{path}.name", _VMSS_NAME, "scale set name")
    orchestration = _orchestration(obj.get("orchestration", "Uniform"), f"{path}.orchestration")
    if orchestration == "Flexible" and len(name) > _FLEX_VMSS_NAME_MAX:
        raise _Invalid(
            f"{path}.name",
            f"a Flexible scale set's name is at most {_FLEX_VMSS_NAME_MAX} characters (its VMs are named "
            f"<name>_<8 hex>, 64 at most), got {len(name)}",
        )
    autoscaled = _bool(obj.get("autoscaled", True), f"{path}.autoscaled")
    hibernation = _bool(obj.get("hibernation_enabled", False), f"{path}.hibernation_enabled")
    if hibernation and orchestration != "Flexible":
        raise _Invalid(f"{path}.hibernation_enabled", "hibernation needs a Flexible scale set (orchestration: Flexible)")
    min_size = _int(obj.get("min", 0), f"{path}.min")
    initial = _int(obj.get("initial", min_size), f"{path}.initial")
    if autoscaled and "max" not in obj:
        raise _Invalid(f"{path}.max", "required field is missing (autoscaled scale sets carry min and max tags)")
    max_size = _int(obj.get("max", max(min_size, initial)), f"{path}.max")
    if max_size < min_size:
        raise _Invalid(f"{path}.max", f"must be at least min ({min_size}), got {max_size}")
    if autoscaled and not min_size <= initial <= max_size:
        raise _Invalid(f"{path}.initial", f"must be between min ({min_size}) and max ({max_size}), got {initial}")
    if mix is not None:  # the set stands as its largest size where one size is asked (module docstring)
        vm_size, allocatable, capacity = mix.largest().vm_size, mix.largest().allocatable, mix.largest().capacity
    else:
        vm_size = _str(obj["vm_size"], f"{path}.vm_size")
        allocatable = _resources(obj["allocatable"], f"{path}.allocatable", need_pods=True)
        capacity = _resources(obj["capacity"], f"{path}.capacity", need_pods=True) if "capacity" in obj else allocatable
    if not allocatable.fits_in(capacity):
        raise _Invalid(f"{path}.allocatable", "must not exceed capacity")
    zones = _items(obj, "zones", path, lambda item, where: _str(item, where))
    # The prefix becomes the node name, which Kubernetes wants lowercase (a DNS subdomain).
    prefix = _str(
        obj.get("computer_name_prefix", name.lower()), f"{path}.computer_name_prefix",
        _PREFIX if pool is None else COMPUTER_NAME_PREFIX, "computer name prefix",
    )
    priority, eviction_policy, max_price = parse_priority(obj, path, agent_pool=pool is not None)
    nics, node_ip = parse_nics(obj, path, scale_set=name, agent_pool=pool is not None)
    labels = _string_map(obj.get("labels", {}), f"{path}.labels")
    taints = _items(obj, "taints", path, _taint)
    if priority == "Spot":  # as AKS stamps Spot nodes: pods must tolerate the taint to land there
        labels = MappingProxyType({**labels, SPOT_LABEL_KEY: SPOT_LABEL_VALUE})
        taints = taints if SPOT_TAINT in taints else (*taints, SPOT_TAINT)
    return NodeGroupSpec(
        resource_group=_str(obj["resource_group"], f"{path}.resource_group", _RG_NAME, "resource group name"),
        name=name,
        vm_size=vm_size,
        allocatable=allocatable,
        capacity=capacity,
        min_size=min_size,
        max_size=max_size,
        initial=initial,
        autoscaled=autoscaled,
        location=_str(obj.get("location", location), f"{path}.location"),
        labels=labels,
        taints=taints,
        zones=zones,
        tags=_string_map(obj.get("tags", {}), f"{path}.tags"),
        computer_name_prefix=prefix,
        boot_delay=_dist(obj["boot_delay"], f"{path}.boot_delay", parse_duration) if "boot_delay" in obj else None,
        mirror_pods=_items(obj, "mirror_pods", path, _mirror_pod),
        annotations=_annotations(obj.get("annotations", {}), f"{path}.annotations"),
        initial_age=_initial_age(obj.get("initial_age", "1h"), f"{path}.initial_age"),
        orchestration=orchestration,
        hibernation_enabled=hibernation,
        agent_pool=pool,
        priority=priority,
        eviction_policy=eviction_policy,
        max_price=max_price,
        nics=nics,
        node_ip=node_ip,
        standby_pool=parse_standby_pool(
            obj["standby_pool"], f"{path}.standby_pool", orchestration=orchestration, priority=priority,
        ) if "standby_pool" in obj else None,
        gpu_ready_delay=(_dist(obj["gpu_ready_delay"], f"{path}.gpu_ready_delay", parse_duration)
                         if "gpu_ready_delay" in obj else None),
        instance_mix=mix,
    )


def _instance_mix(obj: Mapping[str, Any], path: str) -> InstanceMixSpec | None:
    """The group's `instance_mix` section, None without one; the sizes replace the group's own size fields."""
    if MIX_FIELD not in obj:
        return None
    for name in ("vm_size", "allocatable", "capacity"):
        if name in obj:
            raise _Invalid(f"{path}.{name}", f"not with {MIX_FIELD}: each of its sizes has its own")
    return parse_instance_mix(
        obj[MIX_FIELD], f"{path}.{MIX_FIELD}",
        orchestration=_orchestration(obj.get("orchestration", "Uniform"), f"{path}.orchestration"),
        has_standby_pool="standby_pool" in obj,
        resources=lambda value, where: _resources(value, where, need_pods=True),
    )


def _orchestration(value: Any, path: str) -> Orchestration:
    if not isinstance(value, str) or value not in ORCHESTRATIONS:
        shown = repr(value) if isinstance(value, str) else _typename(value)
        raise _Invalid(path, f"{shown} is not an orchestration mode (allowed: {', '.join(ORCHESTRATIONS)})")
    return value  # type: ignore[return-value]


def _initial_age(value: Any, path: str) -> timedelta:
    try:
        age = timedelta(seconds=parse_duration(_str(value, path)))
    except ValueError as exc:
        raise _Invalid(path, str(exc)) from None
    if age < timedelta(0):
        raise _Invalid(path, f"must not be negative, got {value!r}")
    return age


# A qualified name as the API server wants for annotation keys: an optional DNS-subdomain prefix and `/`,
# then up to 63 alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric.
_QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def _annotations(value: Any, path: str) -> Mapping[str, str]:
    """Node annotations: string keys (qualified names, as the API server validates them) to string values."""
    annotations = _string_map(value, path)
    for key in annotations:
        if not _QUALIFIED_NAME.match(key) or len(key.partition("/")[0]) > 253:
            raise _Invalid(f"{path}.{key}", f"{key!r} is not a valid annotation key (an optional DNS prefix and '/', "
                                            "then a name of up to 63 letters, digits, '-', '_' or '.')")
    return annotations


def _mirror_pod(value: Any, path: str) -> MirrorPodSpec:
    obj = _obj(value, path, {"name", "namespace", "requests"}, {"name"})
    requests = _resources(obj["requests"], f"{path}.requests", need_pods=False) if "requests" in obj else Amounts()
    return MirrorPodSpec(
        name=_str(obj["name"], f"{path}.name", _NAME, "pod name"),
        namespace=_str(obj.get("namespace", "kube-system"), f"{path}.namespace", _NAME, "namespace"),
        requests=requests,
    )


def _daemonset(value: Any, path: str) -> DaemonSetSpec:
    obj = _obj(
        value, path, {"name", "namespace", "requests", "node_selector", "labels", "cpu_usage", "tolerations", "affinity"},
        {"name", "requests"},
    )
    name = _str(obj["name"], f"{path}.name", _NAME, "DaemonSet name")
    labels = _string_map(obj.get("labels", {"app": name}), f"{path}.labels")
    affinity = obj.get("affinity")
    try:  # the scheduler's own parser, as for workloads
        parse_affinity(affinity, f"{path}.affinity", labels)
    except SpecError as exc:
        raise _Invalid(exc.path, exc.problem) from None
    return DaemonSetSpec(
        name=name,
        namespace=_str(obj.get("namespace", "kube-system"), f"{path}.namespace", _NAME, "namespace"),
        requests=_resources(obj["requests"], f"{path}.requests", need_pods=False),
        node_selector=_string_map(obj.get("node_selector", {}), f"{path}.node_selector"),
        labels=labels,
        cpu_usage_milli=_cpu_usage(obj["cpu_usage"], f"{path}.cpu_usage") if "cpu_usage" in obj else None,
        tolerations=(
            _items(obj, "tolerations", path, _toleration) if "tolerations" in obj else (Toleration(operator="Exists"),)
        ),
        affinity=copy.deepcopy(affinity) if affinity is not None else None,
    )


def _cpu_usage(value: Any, path: str) -> int:
    milli = round(_parsed(parse_cpu_milli, value, path))
    if milli < 0:
        raise _Invalid(path, f"must not be negative, got {value!r}")
    return milli


def _workload(value: Any, path: str) -> WorkloadSpec:
    obj = _obj(
        value,
        path,
        {
            "name", "namespace", "kind", "count", "at", "spread", "repeat", "requests", "duration", "labels",
            "annotations", "node_selector", "tolerations", "affinity", "topology_spread_constraints",
            "host_ports", "priority", "cpu_usage", "volumes", "active_deadline", "ttl_after_finished", "scale",
        },
        {"name", "requests"},
    )
    name = _str(obj["name"], f"{path}.name", _NAME, "workload name")
    kind = obj.get("kind", "Job")
    if kind not in ("Job", "ReplicaSet", "Pod"):
        raise _Invalid(f"{path}.kind", f"must be Job, ReplicaSet or Pod, got {kind!r}")
    requests = obj["requests"]
    if not isinstance(requests, dict):
        raise _Invalid(f"{path}.requests", f"must be an object, got {_typename(requests)}")
    for key in ("cpu", "memory"):
        if key not in requests:
            raise _Invalid(f"{path}.requests.{key}", "required field is missing")
    cpu = _dist(requests["cpu"], f"{path}.requests.cpu", parse_cpu_milli)
    memory = _dist(requests["memory"], f"{path}.requests.memory", parse_bytes)
    storage = (
        _dist(requests[EPHEMERAL_STORAGE], f"{path}.requests.{EPHEMERAL_STORAGE}", parse_bytes)
        if EPHEMERAL_STORAGE in requests
        else None
    )
    extended = {
        _extended_name(key, f"{path}.requests"): int(_parsed(parse_count, value, f"{path}.requests.{key}"))
        for key, value in requests.items()
        if key not in ("cpu", "memory", EPHEMERAL_STORAGE)
    }
    duration = None if obj.get("duration") is None else _dist(obj["duration"], f"{path}.duration", parse_duration)
    repeat_every, repeat_times = 0.0, 1
    if "repeat" in obj:
        repeat = _obj(obj["repeat"], f"{path}.repeat", {"every", "times"}, {"every", "times"})
        repeat_every = _duration(repeat["every"], f"{path}.repeat.every")
        repeat_times = _int(repeat["times"], f"{path}.repeat.times", 1)
        if repeat_every <= 0:
            raise _Invalid(f"{path}.repeat.every", "must be longer than zero")
    default_labels = {"app": name}
    if kind == "Job":  # what the Job controller stamps on its pods
        default_labels |= {"job-name": name, "batch.kubernetes.io/job-name": name}
    labels = _string_map(obj.get("labels", default_labels), f"{path}.labels")
    affinity = obj.get("affinity")
    spread = tuple(_list(obj.get("topology_spread_constraints", []), f"{path}.topology_spread_constraints"))
    try:  # the scheduler's own parser, so what loads is exactly what it understands
        parse_affinity(affinity, f"{path}.affinity", labels)
        parse_spread_constraints(list(spread), f"{path}.topology_spread_constraints", labels)
    except SpecError as exc:
        raise _Invalid(exc.path, exc.problem) from None
    priority = obj.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise _Invalid(f"{path}.priority", f"must be a whole number, got {_typename(priority)}")
    scale = _scale(obj, kind, path)
    return WorkloadSpec(
        name=name,
        namespace=_str(obj.get("namespace", "default"), f"{path}.namespace", _NAME, "namespace"),
        kind=kind,
        count=max(step.replicas for step in scale) if scale else _int(obj.get("count", 1), f"{path}.count", 1),
        at=_duration(obj.get("at", 0), f"{path}.at"),
        spread=_duration(obj.get("spread", 0), f"{path}.spread"),
        cpu=cpu,
        memory=memory,
        duration=duration,
        repeat_every=repeat_every,
        repeat_times=repeat_times,
        labels=labels,
        annotations=_string_map(obj.get("annotations", {}), f"{path}.annotations"),
        node_selector=_string_map(obj.get("node_selector", {}), f"{path}.node_selector"),
        tolerations=_items(obj, "tolerations", path, _toleration),
        ephemeral_storage=storage,
        extended=MappingProxyType(extended),
        affinity=copy.deepcopy(affinity) if affinity is not None else None,
        topology_spread_constraints=tuple(copy.deepcopy(c) for c in spread),
        host_ports=_items(obj, "host_ports", path, _host_port),
        priority=priority,
        cpu_usage=_dist(obj["cpu_usage"], f"{path}.cpu_usage", parse_cpu_milli) if "cpu_usage" in obj else None,
        volumes=_volumes(obj, path),
        active_deadline_seconds=_deadline(obj["active_deadline"], f"{path}.active_deadline")
        if "active_deadline" in obj
        else None,
        ttl_after_finished=_ttl(obj, kind, path),
        scale=scale,
    )


def _scale(obj: Mapping[str, Any], kind: str, path: str) -> tuple[ScaleStep, ...]:
    """`scale`: [{"at", "replicas"}, ...], times strictly increasing. The steps alone say how many pods there
    are and when, so the fields that otherwise say it are refused next to them rather than half-applied."""
    if "scale" not in obj:
        return ()
    if kind != "ReplicaSet":
        raise _Invalid(f"{path}.scale", f"only ReplicaSets scale, this workload is a {kind}")
    for conflicting in ("count", "at", "spread", "repeat"):
        if conflicting in obj:
            raise _Invalid(f"{path}.{conflicting}", "not used with scale: its steps set the replicas and when")
    steps = _items(obj, "scale", path, _scale_step)
    if not steps:
        raise _Invalid(f"{path}.scale", "must hold at least one step")
    for i in range(1, len(steps)):
        if steps[i].at <= steps[i - 1].at:
            raise _Invalid(f"{path}.scale[{i}].at", f"must be later than the step before ({steps[i - 1].at:g}s)")
    return steps


def _scale_step(value: Any, path: str) -> ScaleStep:
    obj = _obj(value, path, {"at", "replicas"}, {"at", "replicas"})
    at = _duration(obj["at"], f"{path}.at")
    if at < 0:
        raise _Invalid(f"{path}.at", f"must not be negative, got {obj['at']!r}")
    return ScaleStep(at, _int(obj["replicas"], f"{path}.replicas", 0))


def _ttl(obj: Mapping[str, Any], kind: str, path: str) -> float | None:
    if "ttl_after_finished" not in obj:
        return None
    if kind != "Job":
        raise _Invalid(f"{path}.ttl_after_finished", f"only Jobs have ttlSecondsAfterFinished, this workload is a {kind}")
    return _duration(obj["ttl_after_finished"], f"{path}.ttl_after_finished")


_MAX_INT32 = 2**31 - 1


def _deadline(value: Any, path: str) -> int:
    """spec.activeDeadlineSeconds: whole seconds from 1 to 2^31-1, as the API server validates it."""
    seconds = _duration(value, path)
    if seconds != int(seconds) or not 1 <= seconds <= _MAX_INT32:
        raise _Invalid(path, f"must be whole seconds between 1s and {_MAX_INT32}s, got {value!r}")
    return int(seconds)


_HOST_PATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice")


def _volumes(obj: Mapping[str, Any], path: str) -> tuple[Mapping[str, Any], ...]:
    volumes = _items(obj, "volumes", path, _volume)
    seen: set[str] = set()
    for i, volume in enumerate(volumes):
        if volume["name"] in seen:
            raise _Invalid(f"{path}.volumes[{i}].name", f"duplicate volume name {volume['name']!r}")
        seen.add(volume["name"])
    return volumes


def _volume(value: Any, path: str) -> Mapping[str, Any]:
    """One pod volume in its Kubernetes JSON shape: `hostPath` or `emptyDir`, as the API server would store it."""
    obj = _obj(value, path, {"name", "hostPath", "emptyDir"}, {"name"})
    name = _str(obj["name"], f"{path}.name", _NAME, "volume name")
    if ("hostPath" in obj) == ("emptyDir" in obj):
        raise _Invalid(path, "needs exactly one of hostPath and emptyDir")
    if "hostPath" in obj:
        host = _obj(obj["hostPath"], f"{path}.hostPath", {"path", "type"}, {"path"})
        host_path = _str(host["path"], f"{path}.hostPath.path")
        if ".." in host_path.split("/"):
            raise _Invalid(f"{path}.hostPath.path", "must not contain '..'")
        kind = _opt_str(host, "type", f"{path}.hostPath")
        if kind not in _HOST_PATH_TYPES:
            allowed = ", ".join(_HOST_PATH_TYPES[1:])
            raise _Invalid(f"{path}.hostPath.type", f"must be empty or one of {allowed}, got {kind!r}")
        return {"name": name, "hostPath": {"path": host_path, "type": kind}}  # the API server defaults type to ""
    empty = _obj(obj["emptyDir"], f"{path}.emptyDir", {"medium", "sizeLimit"})
    source: dict[str, Any] = {}
    medium = _opt_str(empty, "medium", f"{path}.emptyDir")
    if medium not in ("", "Memory"):
        raise _Invalid(f"{path}.emptyDir.medium", f"must be \"\" (the node's disk) or Memory, got {medium!r}")
    if medium:
        source["medium"] = medium
    if "sizeLimit" in empty:
        if _parsed(parse_bytes, empty["sizeLimit"], f"{path}.emptyDir.sizeLimit") < 0:
            raise _Invalid(f"{path}.emptyDir.sizeLimit", f"must not be negative, got {empty['sizeLimit']!r}")
        source["sizeLimit"] = str(empty["sizeLimit"])
    return {"name": name, "emptyDir": source}


_PROTOCOLS = ("TCP", "UDP", "SCTP")


def _host_port(value: Any, path: str) -> HostPort:
    """A bare port number (TCP) or {"port", "protocol"}."""
    if isinstance(value, dict):
        obj = _obj(value, path, {"port", "protocol"}, {"port"})
        protocol = obj.get("protocol", "TCP")
        if protocol not in _PROTOCOLS:
            raise _Invalid(f"{path}.protocol", f"must be one of {', '.join(_PROTOCOLS)}, got {protocol!r}")
        port = _int(obj["port"], f"{path}.port", 1)
    else:
        protocol, port = "TCP", _int(value, path, 1)
    if port > 65535:
        raise _Invalid(path, f"must be a port number up to 65535, got {port}")
    return HostPort(port, protocol)


def _scale_up_failure(value: Any, path: str) -> ScaleUpFailureSpec:
    obj = _obj(value, path, {"scale_set", "resource_group", "code", "count", "message"}, {"scale_set"})
    return ScaleUpFailureSpec(
        scale_set=_str(obj["scale_set"], f"{path}.scale_set", _VMSS_NAME, "scale set name"),
        code=_str(obj.get("code", "QuotaExceeded"), f"{path}.code"),
        count=_int(obj.get("count", 1), f"{path}.count", 1),
        resource_group=_optional_resource_group(obj, path),
        message=_str(obj["message"], f"{path}.message") if "message" in obj else None,
    )


def _allocation_failure(value: Any, path: str) -> AllocationFailureSpec:
    obj = _obj(value, path, {"scale_set", "resource_group", "code", "instances", "count", "message"}, {"scale_set"})
    return AllocationFailureSpec(
        scale_set=_str(obj["scale_set"], f"{path}.scale_set", _VMSS_NAME, "scale set name"),
        code=_str(obj.get("code", "ZonalAllocationFailed"), f"{path}.code"),
        instances=_int(obj["instances"], f"{path}.instances", 1) if "instances" in obj else None,
        count=_int(obj.get("count", 1), f"{path}.count", 1),
        resource_group=_optional_resource_group(obj, path),
        message=_str(obj["message"], f"{path}.message") if "message" in obj else None,
    )


def _optional_resource_group(obj: Mapping[str, Any], path: str) -> str | None:
    """A fault's `resource_group`, when it names one (None: the scale set's name is enough)."""
    if "resource_group" not in obj:
        return None
    return _str(obj["resource_group"], f"{path}.resource_group", _RG_NAME, "resource group name")


def _pdb(value: Any, path: str) -> PdbSpec:
    obj = _obj(value, path, {"name", "namespace", "selector", "min_available", "max_unavailable"}, {"name", "selector"})
    if ("min_available" in obj) == ("max_unavailable" in obj):
        raise _Invalid(path, "needs exactly one of min_available and max_unavailable")
    return PdbSpec(
        name=_str(obj["name"], f"{path}.name", _NAME, "PodDisruptionBudget name"),
        namespace=_str(obj.get("namespace", "default"), f"{path}.namespace", _NAME, "namespace"),
        selector=_string_map(obj["selector"], f"{path}.selector"),
        min_available=_budget(obj["min_available"], f"{path}.min_available") if "min_available" in obj else None,
        max_unavailable=_budget(obj["max_unavailable"], f"{path}.max_unavailable") if "max_unavailable" in obj else None,
    )
