"""AKS virtual nodes (virtual-kubelet with its Azure Container Instances provider): the pure rules.

What the world's virtual node part (`sandbox.world.virtual_node`) asks of ACI, without any state:
the Node object's labels, taint and capacity as virtual-kubelet registers them, the size of the
container group a pod becomes (as the azure-aci provider converts requests), what the provider or
ACI refuses to run, and the texts of those refusals. Facts: shared/facts/burst-and-spot.md,
sections "AKS virtual nodes v1", "Virtual Nodes v2" (in the v1 section) and "ACI limits and price".

ACI's prices are the Retail Prices API rows it publishes (`ACI_METERS`, served by sandbox.api.prices_api), and
its quota errors carry the code ContainerGroupQuotaReached with the quota's name (`QUOTAS`).

Sizes are exact integers: CPU in hundredths of a core and memory in tenths of a GB (10^9 bytes),
the granularity ACI takes them in, so sums and quota comparisons never drift.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from shared.domain import Taint
from sandbox.model.dists import Dist
from sandbox.model.resources import Amounts
from sandbox.model.units import parse_bytes, parse_cpu_milli

VirtualNodeVersion = Literal[1, 2]
VERSIONS = (1, 2)

# Node names: the AKS add-on's (v1); v2's Helm release `virtual-node-v2` makes `<release>-0`.
DEFAULT_NAMES: Mapping[int, str] = {1: "virtual-node-aci-linux", 2: "virtual-node-v2-0"}

# virtual-kubelet's default taint (VKUBELET_TAINT_KEY/_VALUE/_EFFECT); v2 samples tolerate the same key.
TAINT = Taint("virtual-kubelet.io/provider", "azure", "NoSchedule")

# ACI's per-region, per-subscription defaults (changeable by a quota request).
DEFAULT_QUOTA_CORES = 100
DEFAULT_CREATES_PER_5MIN = 100
DEFAULT_CREATES_PER_HOUR = 300
CREATE_WINDOWS = (300.0, 3600.0)  # seconds: the 5-minute and the hourly creation limits

# The concurrent count: "100 standard container groups" per region and subscription is how many may exist at once
# (the usages API's `ContainerGroups` row counts the groups that exist), changeable like the rest.
DEFAULT_MAX_CONTAINER_GROUPS = 100

# ACI's rows in the Azure Retail Prices API (`serviceName eq 'Container Instances'`): Linux, Standard SKU,
# pay-as-you-go, East US. serviceName, productName, skuName, meterName and unitOfMeasure are as public clients
# query them (e.g. "Standard vCPU Duration" at "1 Hour", "Standard Memory Duration" at "1 GB Hour"); the prices
# are East US figures a public client recorded from the API for ACI_PRICE_DATE (another recorded 0.0365 and
# 0.004: not verified against the live API, which a client should read). `sandbox.api.prices_api` serves these
# rows and the world bills at them: one source, as LIST_PRICES_PER_HOUR is for VMs.
ACI_PRICE_DATE = "2026-08"
ACI_SERVICE_NAME = "Container Instances"
ACI_PRODUCT_NAME = "Container Instances"
ACI_SKU_NAME = "Standard"


@dataclass(frozen=True, slots=True)
class AciMeter:
    """One ACI row of the Retail Prices API: its meter, unit and USD price per unit."""

    meter_name: str
    unit_of_measure: str
    unit_price: float
    seconds_per_unit: float = 3600.0  # both meters are priced per hour (of a vCPU, of a GB)

    @property
    def per_second(self) -> float:
        return self.unit_price / self.seconds_per_unit


VCPU_METER = AciMeter("Standard vCPU Duration", "1 Hour", 0.0405)
MEMORY_METER = AciMeter("Standard Memory Duration", "1 GB Hour", 0.00445)
ACI_METERS = (VCPU_METER, MEMORY_METER)

# Linux prices in USD per vCPU-second and per GB-second, from the meters above.
DEFAULT_PRICE_VCPU_SECOND = VCPU_METER.per_second
DEFAULT_PRICE_GB_SECOND = MEMORY_METER.per_second

# Billing: "Container group duration is calculated from the time that we start to pull your first container's
# image (for a new deployment) ... until the container group is stopped" (ACI FAQ, "When does the meter start
# running?", MicrosoftDocs container-instances-faq). The start latency here runs from the creation call to the
# container running, mostly the image pull; how much of it comes before the pull starts is not published, so by
# default all of it is billed (`VirtualNodeSpec.bill_start_latency`).
BILLING_SOURCE = ("ACI FAQ 'When does the meter start running?': billed from the start of the first image pull "
                  "until the container group stops")

GB = 10**9  # ACI sizes memory in GB (memoryInGB); the provider divides bytes by 10^9, not 2^30

# Max per standard container group (the same inside a VNet), in the units below.
MAX_GROUP_CENTICORES = 31 * 100
MAX_GROUP_DECIGB = 240 * 10

# What the azure-aci provider gives a container that requests nothing (aci.go getContainers).
DEFAULT_CONTAINER_CENTICORES = 100  # 1 vCPU
DEFAULT_CONTAINER_DECIGB = 15  # 1.5 GB

# The Node's InternalIP: virtual-kubelet reports its own pod's IP. Any address outside the node subnet
# (10.224.0.0/16, sandbox.world.compute.private_ip) will do; this one is in the subnet AKS's virtual node docs
# give ACI (10.241.0.0/16), so no mapping by InternalIP can tie the node to a scale set instance.
INTERNAL_IP = "10.241.0.4"
POD_SUBNET = "10.241"  # container groups take their IPs from the virtual node subnet

# `kubeletVersion` as virtual-kubelet reports it: the shape AKS shows (e.g. v1.19.10-vk-azure-aci-v1.4.1);
# the numbers are illustrative (unverified).
KUBELET_VERSION = "v1.31.2-vk-azure-aci-1.6.2"

GPU = "nvidia.com/gpu"
AZURE_FILE_CSI = "file.csi.azure.com"

# "quota": a quota reached (ACI's code ContainerGroupQuotaReached), cores or container groups; which one is in
# `Refusal.quota` (the quota's name in ACI's message and usages API: StandardCores, ContainerGroups).
RefusalKind = Literal["quota", "rate", "unsupported"]
QUOTA_CORES = "StandardCores"
QUOTA_GROUPS = "ContainerGroups"
QUOTAS = (QUOTA_CORES, QUOTA_GROUPS)
REFUSAL_KINDS: tuple[RefusalKind, ...] = ("quota", "rate", "unsupported")


@dataclass(frozen=True, slots=True)
class VirtualNodeSpec:
    """An AKS virtual node: virtual-kubelet running pods on Azure Container Instances (sandbox.world.virtual_node),
    as a scenario declares it (`virtual_node`, parsed by sandbox.model.scenario)."""

    name: str = DEFAULT_NAMES[1]
    version: VirtualNodeVersion = 1  # 1: the AKS add-on (azure-aci); 2: Virtual Nodes v2 (preview)
    quota_cores: int = DEFAULT_QUOTA_CORES  # ACI's regional StandardCores quota
    creates_per_5min: int = DEFAULT_CREATES_PER_5MIN  # container group creations allowed per 5 minutes
    creates_per_hour: int = DEFAULT_CREATES_PER_HOUR  # ... and per hour
    max_container_groups: int = DEFAULT_MAX_CONTAINER_GROUPS  # container groups that may exist at once
    # From the container group's creation to its container running. Reports run 20-60 s (older ones up to
    # 110 s for big images); no current official figure.
    start_latency: Dist = field(default_factory=lambda: Dist("lognormal", (), 10.0, 180.0, 30.0, 60.0))
    price_vcpu_second: float = DEFAULT_PRICE_VCPU_SECOND  # USD, from the Retail Prices rows (ACI_METERS)
    price_gb_second: float = DEFAULT_PRICE_GB_SECOND  # USD per GB (10^9 bytes) and second; likewise
    # Bill from the container group's creation (its start latency, the image pull, included: BILLING_SOURCE);
    # False bills from the container running only.
    bill_start_latency: bool = True


@dataclass(frozen=True, slots=True)
class ContainerGroupSize:
    """A pod's container group as ACI sizes it: hundredths of a vCPU and tenths of a GB."""

    centicores: int
    decigb: int

    @property
    def cores(self) -> float:
        return self.centicores / 100

    @property
    def gb(self) -> float:
        return self.decigb / 10


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a container group was not created: its kind (for counting) and the error text the pod gets."""

    kind: RefusalKind
    message: str
    quota: str | None = None  # for kind "quota": QUOTA_CORES or QUOTA_GROUPS


def node_labels(name: str, version: int) -> dict[str, str]:
    """virtual-kubelet's node defaults (type, role, hostname; v2 samples select `virtualization=virtualnode2`
    instead of `type`, and whether v2 nodes also carry `type=virtual-kubelet` is unverified), then what the
    ACI provider adds (lower-cased OS labels, the load-balancer exclusions, `managed=false` so the cloud
    provider leaves the node alone)."""
    labels = {"type": "virtual-kubelet"} if version == 1 else {"virtualization": "virtualnode2"}
    return {
        **labels,
        "kubernetes.io/role": "agent",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.azure.com/managed": "false",
        "node.kubernetes.io/exclude-from-external-load-balancers": "true",
        "alpha.service-controller.kubernetes.io/exclude-balancer": "true",
    }


def node_capacity(version: int) -> Amounts:
    """Capacity = allocatable: the provider's defaults (cpu 10000, memory 4Ti, pods 5000), so the scheduler
    sees almost unlimited room; the real limit is the ACI quota. v2 holds up to 200 pods per virtual node;
    its cpu and memory figures are unverified, v1's are kept."""
    return Amounts.of(10_000 * 1000, 4 * 1024**4, 5000 if version == 1 else 200)


def node_conditions(at: str) -> list[dict[str, Any]]:
    """The fixed conditions the ACI provider reports (vk_node.go nodeConditions)."""
    rows = (
        ("Ready", "True", "KubeletReady", "kubelet is ready."),
        ("OutOfDisk", "False", "KubeletHasSufficientDisk", "kubelet has sufficient disk space available"),
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"),
    )
    return [
        {"type": kind, "status": status, "reason": reason, "message": message,
         "lastHeartbeatTime": at, "lastTransitionTime": at}
        for kind, status, reason, message in rows
    ]


def _quantity(resources: Mapping[str, Any], name: str) -> Any:
    """A container's request for `name`, else its limit (the API server defaults a missing request to the
    limit), else None."""
    for section in ("requests", "limits"):
        values = resources.get(section) or {}
        if isinstance(values, Mapping) and name in values:
            return values[name]
    return None


def container_group_size(pod: Mapping[str, Any]) -> ContainerGroupSize:
    """The sum over the pod's containers, each converted as azure-aci does (aci.go getContainers): CPU
    floored to 0.01 vCPU (at least 0.01), memory floored to 0.1 GB (at least 0.1); a container without
    a request gets 1 vCPU or 1.5 GB. Init containers take no resources on ACI."""
    centicores = decigb = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        cpu = _quantity(resources, "cpu")
        memory = _quantity(resources, "memory")
        centicores += DEFAULT_CONTAINER_CENTICORES if cpu is None else max(1, parse_cpu_milli(cpu) // 10)
        decigb += DEFAULT_CONTAINER_DECIGB if memory is None else max(1, parse_bytes(memory) // (GB // 10))
    return ContainerGroupSize(centicores, decigb)


def _containers(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return [c for c in spec.get(key) or [] if isinstance(c, Mapping)]


def _volume_kind(volume: Mapping[str, Any]) -> str:
    return next((key for key in volume if key != "name"), "unknown")


# Volume sources the provider turns into ACI volumes (aci_volumes.go getVolumes); anything else fails. The
# downward API is not among them. v2 also mounts Azure Files persistent volumes through claims; the sandbox
# has no PersistentVolumes to tell Azure Files from disks, so under v2 every claim passes.
_VOLUMES = frozenset({"emptyDir", "secret", "configMap", "projected", "azureFile", "gitRepo"})


def unsupported(pod: Mapping[str, Any], version: int, region: str) -> str | None:
    """What the provider, or ACI validating the request, refuses to run (the first problem found), or None.

    The texts are the azure-aci provider's where it has one (volumes, GPU); the host namespaces, privileged
    containers and init containers are our wording. Privileged containers failing is unverified. Init
    containers: unsupported on v1 per the AKS docs (the azure-aci README and a feature flag say otherwise),
    supported on v2."""
    spec = pod.get("spec") or {}
    name = (pod.get("metadata") or {}).get("name", "")
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            return f"pod {name} sets {field}, which virtual nodes do not support"
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, Mapping):
            continue
        kind = _volume_kind(volume)
        if kind == "csi":
            driver = (volume.get("csi") or {}).get("driver", "")
            if driver != AZURE_FILE_CSI:
                return f"pod {name} requires volume {volume.get('name')} which is of an unsupported type {driver}"
        elif kind not in _VOLUMES and not (version == 2 and kind == "persistentVolumeClaim"):
            return f"pod {name} requires volume {volume.get('name')} which is of an unsupported type {kind}"
    init = _containers(spec, "initContainers")
    if version == 1 and init:
        return f"pod {name} has init container {init[0].get('name')}, which virtual nodes do not support"
    for container in [*init, *_containers(spec, "containers")]:
        if (container.get("securityContext") or {}).get("privileged"):
            return f"pod {name} has privileged container {container.get('name')}, which virtual nodes do not support"
    for container in _containers(spec, "containers"):
        resources = container.get("resources") or {}
        if _quantity(resources, GPU) is not None:
            return f"the pod requires GPU resource, but ACI doesn't provide GPU enabled container group in region {region}"
    size = container_group_size(pod)
    if size.centicores > MAX_GROUP_CENTICORES or size.decigb > MAX_GROUP_DECIGB:
        # Our wording: the limit is ACI's (31 vCPU / 240 GB per standard container group).
        return (f"The container group of pod {name} requests {size.cores:g} CPU and {size.gb:g} GB, more than "
                f"the {MAX_GROUP_CENTICORES // 100} CPU and {MAX_GROUP_DECIGB // 10} GB a container group may "
                f"have in region '{region}'.")
    return None


QUOTA_ERROR_CODE = "ContainerGroupQuotaReached"


def quota_message(region: str, limit: int, usage_centicores: int, requested_centicores: int) -> str:
    """ACI's error for the core quota, as reported publicly (MicrosoftDocs azure-docs issue 51738; the ACI Spot
    troubleshooting article shows the code with quota 'StandardSpotCores'); the code prefix is our wording of how
    the provider's error carries it."""
    return _quota_text(QUOTA_CORES, region, f"{limit}", f"{usage_centicores / 100:g}", f"{requested_centicores / 100:g}")


def groups_message(region: str, limit: int, usage: int) -> str:
    """ACI's error when the container groups that exist are at the limit: the same text with quota
    'ContainerGroups' (its shape from the ACI troubleshooting article "container group quota 'ContainerGroups'
    exceeded in region"; that article's code is ServiceUnavailable for a different cause, so the code here is
    the quota code above, unverified for this quota)."""
    return _quota_text(QUOTA_GROUPS, region, f"{limit}", f"{usage}", "1")


def _quota_text(quota: str, region: str, limit: str, usage: str, requested: str) -> str:
    return (f"{QUOTA_ERROR_CODE}: Resource type 'Microsoft.ContainerInstance/containerGroups' container group quota "
            f"'{quota}' exceeded in region '{region}'. Limit: '{limit}', Usage: '{usage}' Requested: '{requested}'.")


def rate_message(limit: int, window: float) -> str:
    span = "5 minutes" if window == CREATE_WINDOWS[0] else "1 hour"
    return f"The number of container group creations exceeded the limit of '{limit}' in {span}"


def check_create(
    pod: Mapping[str, Any], *, version: int, region: str, quota_cores: int, creates_per_5min: int,
    creates_per_hour: int, held_centicores: int, creates: Iterable[float], now: float,
    max_container_groups: int = DEFAULT_MAX_CONTAINER_GROUPS, live_groups: int = 0,
) -> Refusal | None:
    """Whether creating the pod's container group now fails, and how, in the order the calls would fail:
    the provider's own checks and ACI's validation of the request, then the creation rate (throttled
    before anything is counted), then the regional quotas: container groups that exist, then cores (which of
    the two ACI checks first is not published; a refusal names one). `creates`: when earlier container groups
    were created (refused ones never count), `held_centicores`: what the live ones hold, `live_groups`: how
    many exist."""
    problem = unsupported(pod, version, region)
    if problem is not None:
        return Refusal("unsupported", problem)
    recent = [at for at in creates if now - at < CREATE_WINDOWS[1]]
    for window, limit in zip(CREATE_WINDOWS, (creates_per_5min, creates_per_hour), strict=True):
        if sum(1 for at in recent if now - at < window) >= limit:
            return Refusal("rate", rate_message(limit, window))
    if live_groups >= max_container_groups:
        return Refusal("quota", groups_message(region, max_container_groups, live_groups), QUOTA_GROUPS)
    size = container_group_size(pod)
    if held_centicores + size.centicores > quota_cores * 100:
        return Refusal("quota", quota_message(region, quota_cores, held_centicores, size.centicores), QUOTA_CORES)
    return None


def pod_ip(index: int) -> str:
    """A container group's private IP in the virtual node subnet (index from 0)."""
    return f"{POD_SUBNET}.{index // 250 % 256}.{index % 250 + 5}"


def seconds_cost(vcpu_seconds: float, gb_seconds: float, price_vcpu_second: float, price_gb_second: float) -> float:
    return vcpu_seconds * price_vcpu_second + gb_seconds * price_gb_second


def app_settings(spec: VirtualNodeSpec | None) -> dict[str, str]:
    """The autoscaler's app settings that tell it this virtual node's ACI limits and prices, as an operator sets
    them for their subscription and region (the autoscaler does not read ACI's usage API); {} without one."""
    if spec is None:
        return {}
    return {
        "ACI_QUOTA_CORES": str(spec.quota_cores),
        "ACI_CREATES_PER_5MIN": str(spec.creates_per_5min),
        "ACI_CREATES_PER_HOUR": str(spec.creates_per_hour),
        "ACI_MAX_CONTAINER_GROUPS": str(spec.max_container_groups),
        "ACI_PRICE_VCPU_SECOND": repr(spec.price_vcpu_second),
        "ACI_PRICE_GB_SECOND": repr(spec.price_gb_second),
    }
