"""The `Cluster` port over the Kubernetes API, with the official `kubernetes` client.

Adapter module: every `KubernetesCluster` method does network I/O against the
API server. The `pod_from_json` / `node_from_json` converters are pure and are
what the tests exercise without a server.

Lists are read with `_preload_content=False` and parsed from raw JSON straight
into domain objects: the client's model deserialisation costs far more than
the request itself once a cluster has thousands of pods.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import urllib3
from kubernetes.client import (
    ApiClient,
    Configuration,
    AppsV1Api,
    BatchV1Api,
    CoreV1Api,
    CustomObjectsApi,
    PolicyV1Api,
    V1ConfigMap,
    V1DeleteOptions,
    V1Eviction,
    V1ObjectMeta,
)
from kubernetes.client.exceptions import ApiException

from shared.adapters.kube_decode import (
    BudgetItem,
    DaemonSetItem,
    EventItem,
    Malformed,
    NodeItem,
    PodItem,
    Unchanged,
    decode_page,
    decoded_identity,
    identity,
    item_key,
)
from shared.domain import (
    EMPTY_MAP,
    BufferStatus,
    BufferTemplate,
    CapacityBuffer,
    Condition,
    DaemonSet,
    DisruptionBudget,
    HostPort,
    LabelSelector,
    Node,
    NodeSelectorTerm,
    OwnerRef,
    Pod,
    PodAffinityTerm,
    ProvisioningRequest,
    Resources,
    SelectorRequirement,
    Taint,
    Toleration,
    TopologySpreadConstraint,
    extended_resources,
)
from shared.adapters import kube_buffers, kube_provreq
from shared.gc_pause import gc_paused
from shared.ports import ClusterError, EvictionOutcome
from shared.quantities import parse_count, parse_cpu_milli, parse_memory_bytes
from shared.settings import Settings

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

__all__ = [
    "KubernetesApiError",
    "KubernetesCluster",
    "disruption_budget_from_json",
    "node_from_json",
    "pod_from_json",
    "requests_from_spec",
]

log = logging.getLogger(__name__)

_UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"
_MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MERGE_PATCH = "application/merge-patch+json"

# Connect within 5 s, and never wait more than 30 s between bytes: a hung API
# server must not hold a function invocation for its whole timeout.
DEFAULT_REQUEST_TIMEOUT: Final = (5.0, 30.0)
# Items per list page. `python -m devtools.measure_paging` (1,000 nodes x 30 heavy pods): decoding costs the same
# at any page size (2.0 s at 500, 1.8 s at 2,000, loaded machine), the peak memory grows with the page (84 MiB at
# 500, 112 at 2,000, 169 at 5,000), and every page is a round trip: 65 requests at 500, 19 at 2,000, so at 20 ms
# a round trip 0.9 s less waiting (4.5 s at 5,000 nodes). kubectl pages at 500.
DEFAULT_PAGE_SIZE: Final = 2000
# How long a 404 on the CapacityBuffer or ProvisioningRequest list is believed: a CRD installed meanwhile is seen
# within this long.
CRD_ABSENT_RECHECK: Final = 300.0


class KubernetesApiError(ClusterError):
    """A Kubernetes API call failed; `status` is the HTTP status, 0 when no response came back."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message, transient=status == 0 or status == 429 or status >= 500)
        self.status = status


# --- Pure conversion ---------------------------------------------------------


def _timestamp(text: str | None) -> datetime:
    if not text:
        return _EPOCH
    # The API writes RFC 3339 in UTC ("2024-05-01T12:00:00Z"); 3.11 parses the Z.
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _optional_timestamp(text: Any, field: str) -> datetime | None:
    """An RFC 3339 timestamp that may be absent (None); a malformed one raises ValueError naming `field`."""
    if text is None or text == "":
        return None
    if not isinstance(text, str):
        raise ValueError(f"{field}: not a timestamp: {text!r}")
    try:
        return _timestamp(text)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None


def _optional_int(value: Any, field: str) -> int | None:
    """A whole number that may be absent (None); anything else raises ValueError naming `field`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field}: not a whole number: {value!r}")
    return value


def _frozen(mapping: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping)) if mapping else EMPTY_MAP


# Resources the scheduler does not count against a node (kube-scheduler's
# IsScalarResourceName: extended `vendor/name` and prefixed native resources,
# hugepages-*, attachable-volumes-*), besides the four it models natively.
_SCALAR_PREFIXES = ("hugepages-", "attachable-volumes-")


def _quantities(raw: Mapping[str, Any] | None) -> dict[str, int]:
    """A requests/limits/allocatable/overhead map as integers per resource name; names we never count are dropped.

    cpu in millicores, memory, ephemeral-storage and hugepages in bytes, anything else
    as a count (rounded up, as the API server's Value()).
    """
    if not raw:
        return {}
    out: dict[str, int] = {}
    for name, quantity in raw.items():
        if quantity is None:
            continue
        if name == "cpu":
            out[name] = parse_cpu_milli(quantity)
        elif name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
            out[name] = parse_memory_bytes(quantity)
        elif name == "pods" or "/" in name or name.startswith(_SCALAR_PREFIXES):
            out[name] = parse_count(quantity)
    return out


def _as_resources(amounts: Mapping[str, int], *, pods: int | None = None) -> Resources:
    extended = {k: v for k, v in amounts.items() if k not in ("cpu", "memory", "ephemeral-storage", "pods")}
    return Resources(
        cpu_milli=amounts.get("cpu", 0),
        memory_bytes=amounts.get("memory", 0),
        pods=amounts.get("pods", 0) if pods is None else pods,
        ephemeral_storage_bytes=amounts.get("ephemeral-storage", 0),
        extended=extended_resources(extended),
    )


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    requests = dict(resources.get("limits") or {})
    # The API server defaults a missing request to its limit at admission; doing the
    # same here keeps hand-written objects (tests, replays) consistent with live ones.
    requests.update(resources.get("requests") or {})
    return _quantities(requests)


def _add(a: dict[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) + amount
    return out


def _max(a: dict[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for name, amount in b.items():
        if amount > out.get(name, 0):
            out[name] = amount
    return out


def _is_pod_level_resource(name: str) -> bool:
    # component-helpers IsSupportedPodLevelResource (KEP-2837): cpu, memory and hugepages-*.
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _pod_level_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Pod-level requests of the resources that support them, a limit standing in for a missing request.

    The API server defaults a pod-level request to its pod-level limit, as it does for
    containers; hugepages are usually given as a limit only.
    """
    raw = spec.get("resources") or {}
    requests = {k: v for k, v in (raw.get("limits") or {}).items() if _is_pod_level_resource(k)}
    requests.update({k: v for k, v in (raw.get("requests") or {}).items() if _is_pod_level_resource(k)})
    return _quantities(requests)


def requests_from_spec(spec: Mapping[str, Any]) -> Resources:
    """What the scheduler reserves for a pod (k8s.io/component-helpers resource.PodRequests).

    Regular containers add up. Init containers run one at a time, so each is
    max'ed against the total; sidecars (init containers with restartPolicy
    Always) keep running, so they add to the total and to every later init
    container. Pod-level requests (cpu, memory, hugepages-*), where set, replace
    the container aggregate; the RuntimeClass overhead comes on top. Every resource (cpu, memory,
    ephemeral-storage, extended ones such as nvidia.com/gpu) follows the same
    rule. A pod always takes one pod slot.
    """
    total: dict[str, int] = {}
    for container in spec.get("containers") or ():
        total = _add(total, _container_requests(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or ():
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            total = _add(total, requests)
            sidecars = _add(sidecars, requests)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _add(requests, sidecars))
    amounts = _max(total, init_peak)
    amounts.update(_pod_level_requests(spec))
    amounts = _add(amounts, _quantities(spec.get("overhead")))
    return _as_resources(amounts, pods=1)


def _controller(references: Sequence[Mapping[str, Any]] | None) -> OwnerRef | None:
    for reference in references or ():
        if reference.get("controller"):
            return OwnerRef(kind=reference.get("kind", ""), name=reference.get("name", ""))
    return None


def _toleration(raw: Mapping[str, Any]) -> Toleration:
    return Toleration(
        key=raw.get("key") or "",
        operator=raw.get("operator") or "Equal",
        value=raw.get("value") or "",
        effect=raw.get("effect") or "",
    )


def _is_unschedulable(conditions: Sequence[Mapping[str, Any]] | None) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in conditions or ()
    )


# --- Scheduling constraints --------------------------------------------------------
#
# Each reader returns the domain value and appends to `unsupported` the name of any
# construct the engine cannot evaluate, so the pod is reported rather than treated
# as fitting.

_LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_NODE_OPERATORS = (*_LABEL_OPERATORS, "Gt", "Lt")


def _requirements(
    raw: Sequence[Mapping[str, Any]] | None, allowed: Sequence[str], what: str, unsupported: list[str]
) -> tuple[SelectorRequirement, ...]:
    out = []
    for item in raw or ():
        operator = item.get("operator") or ""
        if operator not in allowed:
            unsupported.append(f"{what} operator {operator or '(none)'}")
        out.append(SelectorRequirement(item.get("key") or "", operator, tuple(str(v) for v in item.get("values") or ())))
    return tuple(out)


def _label_selector(raw: Mapping[str, Any] | None, what: str, unsupported: list[str]) -> LabelSelector | None:
    if raw is None:
        return None
    return LabelSelector(
        match_labels=tuple(sorted((str(k), str(v)) for k, v in (raw.get("matchLabels") or {}).items())),
        match_expressions=_requirements(raw.get("matchExpressions"), _LABEL_OPERATORS, what, unsupported),
    )


def _with_pod_label_keys(
    selector: LabelSelector | None, labels: Mapping[str, str], match_keys: Sequence[str], mismatch_keys: Sequence[str]
) -> LabelSelector | None:
    """Merge `matchLabelKeys` (key In [the pod's value]) and `mismatchLabelKeys` (NotIn) into a selector.

    This is what the API server (pod affinity) and the scheduler (topology spread) do;
    a key the pod has no label for is skipped, and merging twice changes nothing.
    """
    extra = [SelectorRequirement(k, "In", (labels[k],)) for k in match_keys if k in labels]
    extra += [SelectorRequirement(k, "NotIn", (labels[k],)) for k in mismatch_keys if k in labels]
    if selector is None or not extra:
        return selector
    merged = selector.match_expressions + tuple(r for r in extra if r not in selector.match_expressions)
    return LabelSelector(selector.match_labels, merged)


def _node_affinity(raw: Mapping[str, Any] | None, unsupported: list[str]) -> tuple[NodeSelectorTerm, ...]:
    required = (raw or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = []
    for term in required.get("nodeSelectorTerms") or ():
        fields = _requirements(term.get("matchFields"), ("In", "NotIn"), "nodeAffinity matchFields", unsupported)
        for field_requirement in fields:
            if field_requirement.key != "metadata.name":
                unsupported.append(f"nodeAffinity matchFields on {field_requirement.key or '(none)'}")
        expressions = _requirements(term.get("matchExpressions"), _NODE_OPERATORS, "nodeAffinity", unsupported)
        terms.append(NodeSelectorTerm(expressions, fields))
    return tuple(terms)


def _pod_affinity_terms(
    raw: Mapping[str, Any] | None, kind: str, labels: Mapping[str, str], unsupported: list[str]
) -> tuple[PodAffinityTerm, ...]:
    terms = []
    for term in (raw or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ():
        selector = _label_selector(term.get("labelSelector"), f"{kind} labelSelector", unsupported)
        selector = _with_pod_label_keys(
            selector, labels, term.get("matchLabelKeys") or (), term.get("mismatchLabelKeys") or ()
        )
        namespace_selector = term.get("namespaceSelector")
        all_namespaces = False
        if namespace_selector is not None:
            if namespace_selector.get("matchLabels") or namespace_selector.get("matchExpressions"):
                # Selecting namespaces by their labels needs the Namespace objects, which we do not observe.
                unsupported.append(f"{kind} namespaceSelector")
            else:
                all_namespaces = True  # {} selects every namespace
        terms.append(
            PodAffinityTerm(
                topology_key=term.get("topologyKey") or "",
                label_selector=selector,
                namespaces=tuple(term.get("namespaces") or ()),
                all_namespaces=all_namespaces,
            )
        )
    return tuple(terms)


def _spread_constraints(
    raw: Sequence[Mapping[str, Any]] | None, labels: Mapping[str, str], unsupported: list[str]
) -> tuple[TopologySpreadConstraint, ...]:
    out = []
    for item in raw or ():
        when = item.get("whenUnsatisfiable") or "DoNotSchedule"
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            unsupported.append(f"topologySpreadConstraints whenUnsatisfiable {when}")
        affinity_policy = item.get("nodeAffinityPolicy") or "Honor"
        taints_policy = item.get("nodeTaintsPolicy") or "Ignore"
        for name, value in (("nodeAffinityPolicy", affinity_policy), ("nodeTaintsPolicy", taints_policy)):
            if value not in ("Honor", "Ignore"):
                unsupported.append(f"topologySpreadConstraints {name} {value}")
        selector = _label_selector(item.get("labelSelector"), "topologySpreadConstraints labelSelector", unsupported)
        selector = _with_pod_label_keys(selector, labels, item.get("matchLabelKeys") or (), ())
        min_domains = item.get("minDomains")
        out.append(
            TopologySpreadConstraint(
                max_skew=int(item.get("maxSkew") or 1),
                topology_key=item.get("topologyKey") or "",
                when_unsatisfiable=when,
                label_selector=selector,
                min_domains=int(min_domains) if min_domains is not None else None,
                node_affinity_policy=affinity_policy,
                node_taints_policy=taints_policy,
            )
        )
    return tuple(out)


def _host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """Ports bound on the node: every container's, and the sidecars' (restartable init containers), which keep running."""
    containers = list(spec.get("containers") or ())
    containers += [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    host_network = bool(spec.get("hostNetwork"))
    ports = []
    for container in containers:
        for port in container.get("ports") or ():
            # With hostNetwork the API server defaults hostPort to containerPort; do the same for hand-written objects.
            host_port = port.get("hostPort") or (port.get("containerPort") if host_network else 0)
            if host_port:
                ports.append(HostPort(int(host_port), port.get("protocol") or "TCP", port.get("hostIP") or "0.0.0.0"))
    return tuple(ports)


def _volume_constraints(spec: Mapping[str, Any], unsupported: list[str]) -> None:
    for volume in spec.get("volumes") or ():
        claim = volume.get("persistentVolumeClaim")
        if claim is not None:
            # A bound volume may pin the pod to a zone or node (its PV's node affinity), and an unbound
            # one may be restricted by its StorageClass; we observe neither, so we cannot tell.
            unsupported.append(f"volume topology of persistentVolumeClaim {claim.get('claimName', '?')}")
        elif volume.get("ephemeral") is not None:
            unsupported.append(f"volume topology of ephemeral volume {volume.get('name', '?')}")
    if spec.get("resourceClaims"):
        unsupported.append("resourceClaims (dynamic resource allocation)")


def _local_volumes(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the volumes whose data dies with the node: hostPath, and emptyDir not backed by memory.

    An emptyDir with `medium: Memory` is a tmpfs that dies with the pod anyway, so moving the pod loses
    nothing more than a restart would; every other medium ("" is the node's disk) lives on the node.
    """
    names = []
    for volume in spec.get("volumes") or ():
        if volume.get("hostPath") is not None:
            names.append(str(volume.get("name") or ""))
        elif volume.get("emptyDir") is not None and (volume.get("emptyDir") or {}).get("medium") != "Memory":
            names.append(str(volume.get("name") or ""))
    return tuple(names)


_HOST_NAMESPACES = (("hostNetwork", "host-network"), ("hostPID", "host-pid"), ("hostIPC", "host-ipc"))


def _runtime_features(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """What the pod asks of its host that a virtual node may not offer (`Pod.runtime_features`)."""
    features = [name for key, name in _HOST_NAMESPACES if spec.get(key)]
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    # A container is a dict (plain JSON) or a typed struct (kube_decode) that answers `get` alike.
    if any(((c.get("securityContext") or {}).get("privileged")) for c in containers if hasattr(c, "get")):
        features.append("privileged")
    if spec.get("initContainers"):
        features.append("init-containers")
    for volume in spec.get("volumes") or ():
        if isinstance(volume, Mapping):
            kind = next((k for k in volume if k != "name"), "unknown")
            features.append(f"volume:{kind}:{volume.get('name') or ''}")
    return tuple(features)


def _scheduling(spec: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    """The Pod fields that constrain placement, as keyword arguments."""
    unsupported: list[str] = []
    affinity = spec.get("affinity") or {}
    fields = {
        "node_affinity": _node_affinity(affinity.get("nodeAffinity"), unsupported),
        "pod_affinity": _pod_affinity_terms(affinity.get("podAffinity"), "podAffinity", labels, unsupported),
        "pod_anti_affinity": _pod_affinity_terms(
            affinity.get("podAntiAffinity"), "podAntiAffinity", labels, unsupported
        ),
        "topology_spread": _spread_constraints(spec.get("topologySpreadConstraints"), labels, unsupported),
        "host_ports": _host_ports(spec),
    }
    for toleration in spec.get("tolerations") or ():
        # The API accepts only Equal and Exists; Gt/Lt exist only behind the alpha
        # TaintTolerationComparisonOperators gate, whose numeric comparison we do not model.
        operator = toleration.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            unsupported.append(f"toleration operator {operator}")
    _volume_constraints(spec, unsupported)
    fields["unsupported"] = tuple(dict.fromkeys(unsupported))  # each construct once, in order
    return fields


def pod_from_json(obj: Mapping[str, Any]) -> Pod:
    """A Pod in the API's JSON shape (as listed by /api/v1/pods) as a domain Pod."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    annotations = metadata.get("annotations") or {}
    labels = _frozen(metadata.get("labels"))
    return Pod(
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        uid=metadata.get("uid", ""),
        requests=requests_from_spec(spec),
        created_at=_timestamp(metadata.get("creationTimestamp")),
        node_name=spec.get("nodeName") or None,
        phase=status.get("phase") or "Pending",
        unschedulable=_is_unschedulable(status.get("conditions")),
        owner=_controller(metadata.get("ownerReferences")),
        node_selector=_frozen(spec.get("nodeSelector")),
        tolerations=tuple(_toleration(t) for t in spec.get("tolerations") or ()),
        labels=labels,
        annotations=_frozen(annotations),
        is_mirror=_MIRROR_ANNOTATION in annotations,
        terminating=bool(metadata.get("deletionTimestamp")),
        deleted_at=_optional_timestamp(metadata.get("deletionTimestamp"), "metadata.deletionTimestamp"),
        priority=int(spec.get("priority") or 0),
        local_volumes=_local_volumes(spec),
        started_at=_optional_timestamp(status.get("startTime"), "status.startTime"),
        active_deadline_seconds=_optional_int(spec.get("activeDeadlineSeconds"), "spec.activeDeadlineSeconds"),
        termination_grace_seconds=_optional_int(
            spec.get("terminationGracePeriodSeconds"), "spec.terminationGracePeriodSeconds"),
        status_reason=str(status.get("reason") or ""),
        status_message=str(status.get("message") or "")[:1024],
        runtime_features=_runtime_features(spec),
        **_scheduling(spec, labels),
    )


def event_time(obj: Mapping[str, Any]) -> tuple[datetime, int]:
    """A core/v1 Event's last time (lastTimestamp, else eventTime, else its creation) and count (at least 1)."""
    when = obj.get("lastTimestamp") or obj.get("eventTime") or (obj.get("metadata") or {}).get("creationTimestamp")
    count = obj.get("count")
    return _timestamp(when), count if isinstance(count, int) and count > 0 else 1


def daemonset_from_json(obj: Mapping[str, Any]) -> DaemonSet:
    """A DaemonSet (apps/v1) in the API's JSON shape: what its pod template asks of each node.

    The template is read as a Pod is (requests with init containers and overhead, host
    ports). A required node affinity the engine cannot evaluate is left out, with a
    warning: the DaemonSet then counts on every node its selector and tolerations allow,
    which can only under-promise a new node's room, never over-promise it.
    """
    metadata = obj.get("metadata") or {}
    template = (obj.get("spec") or {}).get("template") or {}
    spec = template.get("spec") or {}
    unsupported: list[str] = []
    node_affinity = _node_affinity((spec.get("affinity") or {}).get("nodeAffinity"), unsupported)
    if unsupported:
        log.warning("daemonset %s/%s: %s; its pods are counted on every node they tolerate",
                    metadata.get("namespace", ""), metadata.get("name", ""), unsupported[0])
        node_affinity = ()
    return DaemonSet(
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        requests=requests_from_spec(spec),
        node_selector=_frozen(spec.get("nodeSelector")),
        node_affinity=node_affinity,
        tolerations=tuple(_toleration(t) for t in spec.get("tolerations") or ()),
        host_ports=_host_ports(spec),
        host_network=bool(spec.get("hostNetwork")),
    )


def disruption_budget_from_json(obj: Mapping[str, Any]) -> DisruptionBudget:
    """A PodDisruptionBudget (policy/v1) in the API's JSON shape as the Eviction API enforces it.

    A null selector selects no pod and an empty one every pod of the namespace (policy/v1).
    `disruptions_allowed` is `status.disruptionsAllowed` (0 when missing), and 0 while the
    disruption controller has not yet seen the budget's latest spec (`observedGeneration` below
    `generation`), because the Eviction API refuses every eviction it guards until then. A selector
    operator the API does not define raises ValueError: guessing could leave a pod unprotected.
    """
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    unsupported: list[str] = []
    selector = _label_selector(spec.get("selector"), "spec.selector", unsupported)
    if unsupported:
        raise ValueError(unsupported[0])
    allowed = _optional_int(status.get("disruptionsAllowed"), "status.disruptionsAllowed") or 0
    generation = _optional_int(metadata.get("generation"), "metadata.generation") or 0
    observed = _optional_int(status.get("observedGeneration"), "status.observedGeneration") or 0
    if observed < generation:
        allowed = 0
    return DisruptionBudget(
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        selector=selector,
        disruptions_allowed=max(0, allowed),
    )


_UNREADABLE = "unreadable object"


def unreadable_pod(metadata: Mapping[str, Any], spec: Mapping[str, Any], error: str) -> Pod | None:
    """A pod we could not read, as a placeholder that keeps every decision about it conservative.

    It keeps its identity and node (so its node is never taken for empty), has no owner (so the
    node is never drained under it) and an unsupported construct (so, pending, it is reported and
    never planned for). None when not even its name and node can be read: then it is only reported.
    """
    name, namespace, node = metadata.get("name"), metadata.get("namespace", ""), spec.get("nodeName")
    if not isinstance(name, str) or not isinstance(namespace, str) or not isinstance(node, str | None):
        return None
    uid = metadata.get("uid")
    return Pod(namespace=namespace, name=name, uid=uid if isinstance(uid, str) else "", requests=Resources(pods=1),
               created_at=_EPOCH, node_name=node or None, phase="Running" if node else "Pending",
               unsupported=(f"{_UNREADABLE}: {error}"[:300],))


def unreadable_node(metadata: Mapping[str, Any], spec: Mapping[str, Any], error: str) -> Node | None:
    """A node we could not read, as a placeholder: no room, cordoned and NotReady (nothing is planned onto it and
    it is no group's template), never scaled down (the scale-down-disabled annotation, which the planner checks
    before readiness), but still there, so its instance is not taken for one that never registered. None when
    not even its name can be read."""
    name, provider_id = metadata.get("name"), spec.get("providerID")
    if not isinstance(name, str) or not name:
        return None
    return Node(name=name, allocatable=Resources(), created_at=_EPOCH,
                provider_id=provider_id if isinstance(provider_id, str) else "",
                annotations=MappingProxyType({"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true",
                                              "vmss-autoscaler.io/unreadable": error[:300]}),
                ready=False, unschedulable=True)


def _taint(raw: Mapping[str, Any]) -> Taint:
    return Taint(key=raw.get("key", ""), value=raw.get("value") or "", effect=raw.get("effect") or "NoSchedule")


def node_from_json(obj: Mapping[str, Any]) -> Node:
    """A Node in the API's JSON shape as a domain Node."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allocatable = _as_resources(_quantities(status.get("allocatable")))
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
    return Node(
        name=metadata.get("name", ""),
        allocatable=allocatable,
        created_at=_timestamp(metadata.get("creationTimestamp")),
        provider_id=spec.get("providerID") or "",
        labels=_frozen(metadata.get("labels")),
        annotations=_frozen(metadata.get("annotations")),
        taints=tuple(_taint(t) for t in spec.get("taints") or ()),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        internal_ips=tuple(
            a["address"] for a in status.get("addresses") or () if a.get("type") == "InternalIP" and a.get("address")
        ),
        conditions=frozenset(c.get("type", "") for c in status.get("conditions") or ()
                             if c.get("status") == "True" and c.get("type") not in ("Ready", None)),
    )


def _taint_json(taint: Taint) -> dict[str, str]:
    raw = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        raw["value"] = taint.value
    return raw


# Node spec changes as JSON merge patches (None: nothing to change), computed from the spec as read.
# Module-level so that anything holding Node JSON (the replay's in-process cluster) changes it the same way.


def cordon_patch(spec: Mapping[str, Any], taint: Taint) -> dict[str, Any] | None:
    taints = list(spec.get("taints") or [])
    present = any(t.get("key") == taint.key and t.get("effect") == taint.effect for t in taints)
    if spec.get("unschedulable") and present:
        return None
    return {"unschedulable": True, "taints": taints if present else [*taints, _taint_json(taint)]}


def uncordon_patch(spec: Mapping[str, Any], taint_key: str) -> dict[str, Any] | None:
    taints = list(spec.get("taints") or [])
    kept = [t for t in taints if t.get("key") != taint_key]
    if not spec.get("unschedulable") and len(kept) == len(taints):
        return None
    # null deletes the field in a merge patch: schedulable is the default.
    return {"unschedulable": None, "taints": kept or None}


def add_taint_patch(spec: Mapping[str, Any], taint: Taint) -> dict[str, Any] | None:
    taints = list(spec.get("taints") or [])
    if any(t.get("key") == taint.key and t.get("effect") == taint.effect for t in taints):
        return None
    return {"taints": [*taints, _taint_json(taint)]}


def remove_taint_patch(spec: Mapping[str, Any], taint_key: str) -> dict[str, Any] | None:
    taints = list(spec.get("taints") or [])
    kept = [t for t in taints if t.get("key") != taint_key]
    return None if len(kept) == len(taints) else {"taints": kept or None}


# --- The adapter ---------------------------------------------------------------

_R = TypeVar("_R")
_V = TypeVar("_V")
_Item = TypeVar("_Item", bound=Any)


def _no_placeholder(metadata: Mapping[str, Any], spec: Mapping[str, Any], error: str) -> None:
    return None


def _readable(what: str, item: Any) -> Any:
    if isinstance(item, Malformed):
        metadata, _spec = identity(item.raw)
        raise ClusterError(f"{what}: cannot read {metadata.get('name', '?')!r}: {item.error}")
    return item


def _api_message(exc: ApiException) -> str:
    """The `message` of the Status object the API server sends with an error, when there is one."""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return (exc.body or "")[:200]
    return str(body.get("message", "")) if isinstance(body, dict) else ""


def _modest_retries() -> urllib3.Retry:
    # urllib3's default is 3 retries of everything; two quick retries of connection
    # trouble is enough here: the next timer tick is the real retry. Status codes
    # are never retried, so a 429 or 500 reaches us at once.
    return urllib3.Retry(
        total=2,
        connect=2,
        read=1,  # only idempotent methods are retried after a read error
        status=0,
        backoff_factor=0.2,
        status_forcelist=(),
        respect_retry_after_header=False,
        raise_on_status=False,
    )


class KubernetesCluster:
    """`shared.ports.Cluster` over one cluster's API server. Every method does network I/O.

    Build it with `from_settings` (reads the kubeconfig) or hand it an ApiClient.
    All errors other than the outcomes the port defines surface as
    `KubernetesApiError`, a `ClusterError` whose message names the call.
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        request_timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT,
        page_size: int = DEFAULT_PAGE_SIZE,
        conflict_retries: int = 3,
    ) -> None:
        self._api_client = api_client
        self._core = CoreV1Api(api_client)
        self._policy = PolicyV1Api(api_client)
        self._apps = AppsV1Api(api_client)
        self._custom = CustomObjectsApi(api_client)
        self._batch = BatchV1Api(api_client)
        self._timeout = request_timeout
        self._page_size = page_size
        self._conflict_retries = conflict_retries
        # Warm reuse between polls of one Function instance: the last full list's conversions.
        self._warm_nodes: dict[tuple[str, str], Node] = {}
        # When the API server last said it serves no such CRD (monotonic seconds, by plural): not asked again for
        # CRD_ABSENT_RECHECK, so a cluster without buffers or requests costs one LIST every few minutes, not one per
        # poll (_list_custom).
        self._crd_absent_at: dict[str, float] = {}
        self._monotonic: Callable[[], float] = time.monotonic
        self._warm_pods: dict[tuple[str, str], Pod] = {}

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        credential: TokenCredential | None = None,
        request_timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> KubernetesCluster:
        """Connect as `settings.kube_auth` says (`shared.adapters.kube_access`), on a private client configuration.

        `credential` is the app's Azure credential, used with KUBE_AUTH=aks or key-vault
        (built from the settings when None). The kubernetes package's global default
        configuration is left alone, so several clusters (or tests) can coexist in one process.
        """
        from shared.adapters.kube_access import new_api_client

        configuration = Configuration()
        configuration.retries = _modest_retries()
        api_client = new_api_client(settings, configuration, credential=credential)
        return cls(api_client, request_timeout=request_timeout, page_size=page_size)

    def close(self) -> None:
        """Release the connection pool."""
        self._api_client.close()

    @property
    def api_client(self) -> ApiClient:
        """The configured client, shared with the event sink so both use one connection pool."""
        return self._api_client

    # -- plumbing ---------------------------------------------------------------

    def _call(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call an API method (CoreV1Api, PolicyV1Api) without preloading; any failure becomes KubernetesApiError."""
        try:
            return method(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
        except ApiException as exc:
            raise KubernetesApiError(
                f"{what}: HTTP {exc.status} {exc.reason or ''}: {_api_message(exc)}".rstrip(": "),
                status=int(exc.status or 0),
            ) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise KubernetesApiError(f"{what}: {type(exc).__name__}: {exc}") from exc

    def _read(self, what: str, method: Callable[..., Any], parse: Callable[[bytes], _R], *args: Any,
              **kwargs: Any) -> _R:
        """One call's response body, parsed by `parse`; a body that does not parse is a KubernetesApiError."""
        response = self._call(what, method, *args, **kwargs)
        try:
            return parse(response.data)
        except urllib3.exceptions.HTTPError as exc:
            raise KubernetesApiError(f"{what}: reading the response: {exc}") from exc
        except ValueError as exc:
            raise KubernetesApiError(f"{what}: the response is not JSON: {exc}") from exc
        finally:
            response.release_conn()

    def _json(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self._read(what, method, json.loads, *args, **kwargs)  # type: ignore[no-any-return]

    def _typed_items(self, what: str, method: Callable[..., Any], kind: type[_Item], *,
                     known: Container[tuple[str, str]] | None = None, **kwargs: Any
                     ) -> Iterator[_Item | Malformed | Unchanged]:
        """Every item of a list call as a typed struct (`kube_decode`), page by page (`limit` and `continue`);
        items whose (uid, resourceVersion) is in `known` are not decoded."""
        token: str | None = None
        while True:
            page = self._read(what, method, lambda data: decode_page(data, kind, known=known), limit=self._page_size,
                              _continue=token, **kwargs)
            yield from page.items
            token = page.continue_token
            if token is None:
                return

    def _typed_list(self, what: str, method: Callable[..., Any], kind: type[_Item],
                    convert: Callable[[Any], _V], unreadable: Callable[[Mapping[str, Any], Mapping[str, Any], str], _V | None],
                    *, warm: dict[tuple[str, str], _V] | None = None, **kwargs: Any) -> list[_V]:
        """A list call's items converted, malformed ones reported and replaced by `unreadable`'s placeholder.

        `warm`: the conversions of the previous full list by (uid, resourceVersion); an item seen unchanged is
        not converted again. It is replaced in place by this list's entries only, so objects gone from the
        cluster are dropped and its size follows the cluster's.
        """
        out: list[_V] = []
        fresh: dict[tuple[str, str], _V] = {}
        reused = 0
        for item in self._typed_items(what, method, kind, known=warm or None, **kwargs):
            if isinstance(item, Unchanged):
                value = fresh[item.key] = warm[item.key]  # type: ignore[index]
                out.append(value)
                reused += 1
                continue
            if isinstance(item, Malformed):
                metadata, spec = identity(item.raw)
                self._report_unreadable(what, metadata, item.error, unreadable(metadata, spec, item.error), out)
                continue
            key = item_key(item) if warm is not None else None
            try:
                value = convert(item)
            except (ValueError, TypeError, AttributeError) as exc:  # a malformed quantity, timestamp or field
                metadata, spec = decoded_identity(item)
                self._report_unreadable(what, metadata, str(exc), unreadable(metadata, spec, str(exc)), out)
                continue
            if key is not None:
                fresh[key] = value
            out.append(value)
        if warm is not None:
            warm.clear()
            warm.update(fresh)
            log.debug("%s: %d of %d objects unchanged since the last list", what, reused, len(out))
        return out

    @staticmethod
    def _report_unreadable(what: str, metadata: Mapping[str, Any], error: str, placeholder: _V | None,
                           out: list[_V]) -> None:
        name = f"{metadata.get('namespace') or ''}/{metadata.get('name') or '?'}".lstrip("/")
        if placeholder is None:
            log.error("%s: skipped an object that cannot be read (%s): %s", what, name, error)
            return
        log.error("%s: cannot read %s (%s); it is kept as a placeholder that nothing is planned onto or removes",
                  what, name, error)
        out.append(placeholder)

    def _discard(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        response = self._call(what, method, *args, **kwargs)
        try:
            response.drain_conn()
        except urllib3.exceptions.HTTPError:
            pass  # the call succeeded; an unread body is no reason to fail it
        finally:
            response.release_conn()

    def _json_or_none(self, what: str, method: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
        """One object read, or None when the API says it does not exist (404)."""
        try:
            return self._json(what, method, *args)
        except KubernetesApiError as exc:
            if exc.status == 404:
                return None
            raise

    def _read_node_json(self, name: str, what: str) -> dict[str, Any] | None:
        return self._json_or_none(what, self._core.read_node, name)

    @staticmethod
    def _converted(what: str, convert: Callable[[Any], Any], obj: Any) -> Any:
        try:
            return convert(obj)
        except ValueError as exc:  # a malformed quantity or timestamp
            name = (obj.get("metadata") or {}).get("name", "?")
            raise ClusterError(f"{what}: cannot read {name!r}: {exc}") from exc

    # -- reads ------------------------------------------------------------------

    def list_nodes(self) -> list[Node]:
        """Every Node. One that cannot be read is logged and kept as a placeholder (`unreadable_node`)."""
        with gc_paused():
            return self._typed_list("list nodes", self._core.list_node, NodeItem, node_from_json, unreadable_node,
                                    warm=self._warm_nodes)

    def list_pods(self) -> list[Pod]:
        """Every unfinished pod (phase Succeeded/Failed are filtered by the server).

        One that cannot be read is logged and kept as a placeholder (`unreadable_pod`)."""
        with gc_paused():
            return self._typed_list("list pods", self._core.list_pod_for_all_namespaces, PodItem, pod_from_json,
                                    unreadable_pod, warm=self._warm_pods, field_selector=_UNFINISHED)

    def get_node(self, name: str) -> Node | None:
        what = f"get node {name}"
        raw = self._read_node_json(name, what)
        return None if raw is None else self._converted(what, node_from_json, raw)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        what = f"get pod {namespace}/{name}"
        raw = self._json_or_none(what, self._core.read_namespaced_pod, name, namespace)
        return None if raw is None else self._converted(what, pod_from_json, raw)

    def annotate_pod(self, namespace: str, name: str, *, annotations: Mapping[str, str | None]) -> None:
        """A JSON merge patch of the pod's annotations: others' annotations stay, a None value removes one."""
        what = f"annotate pod {namespace}/{name}"
        try:
            self._discard(what, self._core.patch_namespaced_pod, name, namespace,
                          {"metadata": {"annotations": dict(annotations)}}, _content_type=_MERGE_PATCH)
        except KubernetesApiError as exc:
            if exc.status != 404:
                raise

    def list_pods_on_node(self, node_name: str) -> list[Pod]:
        """The node's unfinished pods: finished ones hold no resources and need no eviction."""
        what = f"list pods on node {node_name}"
        selector = f"spec.nodeName={node_name},{_UNFINISHED}"
        return self._typed_list(what, self._core.list_pod_for_all_namespaces, PodItem, pod_from_json, unreadable_pod,
                                field_selector=selector)

    def get_config_map(self, namespace: str, name: str) -> Mapping[str, str] | None:
        what = f"get configmap {namespace}/{name}"
        raw = self._json_or_none(what, self._core.read_namespaced_config_map, name, namespace)
        return None if raw is None else {str(k): str(v) for k, v in (raw.get("data") or {}).items()}

    def list_event_times(self, reason: str) -> list[tuple[datetime, int]]:
        """Events with this reason (a field selector the API server indexes): when each last happened, and how
        often (an event repeated is one object with a count)."""
        return self._typed_list(f"list events {reason}", self._core.list_event_for_all_namespaces, EventItem,
                                event_time, _no_placeholder, field_selector=f"reason={reason}")

    def list_disruption_budgets(self) -> list[DisruptionBudget]:
        """Every PodDisruptionBudget (policy/v1) of every namespace.

        One that cannot be read fails the call: leaving it out could let an eviction through it guards."""
        what = "list poddisruptionbudgets"
        items = self._typed_items(what, self._policy.list_pod_disruption_budget_for_all_namespaces, BudgetItem)
        return [self._converted(what, disruption_budget_from_json, _readable(what, o)) for o in items]

    def list_daemonsets(self) -> list[DaemonSet]:
        """Every DaemonSet (apps/v1) of every namespace; one that cannot be read is logged and left out (its pods
        then count on the nodes that run them, not on new ones)."""
        return self._typed_list("list daemonsets", self._apps.list_daemon_set_for_all_namespaces, DaemonSetItem,
                                daemonset_from_json, _no_placeholder)

    # -- writes -----------------------------------------------------------------

    def _patch_node_guarded(
        self,
        name: str,
        what: str,
        change: Callable[[dict[str, Any]], dict[str, Any] | None],
        *,
        missing_ok: bool,
    ) -> None:
        """Read the node, compute a spec change, and merge-patch it guarded by resourceVersion.

        `change` returns None when there is nothing to do. The patch carries the
        resourceVersion it was computed from, so a concurrent edit (another
        controller touching taints) makes the API server answer 409 Conflict
        instead of us overwriting it; we then re-read and try again.
        """
        for _attempt in range(self._conflict_retries + 1):
            raw = self._read_node_json(name, what)
            if raw is None:
                if missing_ok:
                    return
                raise KubernetesApiError(f"{what}: node not found", status=404)
            spec_patch = change(raw.get("spec") or {})
            if spec_patch is None:
                return
            body = {"metadata": {"resourceVersion": (raw.get("metadata") or {}).get("resourceVersion")}, "spec": spec_patch}
            try:
                self._discard(what, self._core.patch_node, name, body, _content_type=_MERGE_PATCH)
                return
            except KubernetesApiError as exc:
                if exc.status != 409:
                    raise
                log.info("%s: the node changed under us, retrying", what)
        raise KubernetesApiError(f"{what}: still conflicting after {self._conflict_retries + 1} attempts", status=409)

    def cordon(self, node_name: str, *, taint: Taint) -> None:
        """Mark the node unschedulable and add `taint` (matched on key and effect) unless present.

        Raises ClusterError when the node does not exist: a drain of a missing node is a caller bug.
        """
        self._patch_node_guarded(node_name, f"cordon node {node_name}", lambda spec: cordon_patch(spec, taint),
                                 missing_ok=False)

    def uncordon(self, node_name: str, *, taint_key: str) -> None:
        """Make the node schedulable and drop every taint with `taint_key`; a no-op on a missing node."""
        self._patch_node_guarded(node_name, f"uncordon node {node_name}", lambda spec: uncordon_patch(spec, taint_key),
                                 missing_ok=True)

    def add_taint(self, node_name: str, *, taint: Taint) -> None:
        """Add `taint` (matched on key and effect) unless present; a no-op on a missing node."""
        self._patch_node_guarded(node_name, f"taint node {node_name}", lambda spec: add_taint_patch(spec, taint),
                                 missing_ok=True)

    def remove_taint(self, node_name: str, *, taint_key: str) -> None:
        """Drop every taint with `taint_key`, leaving cordoning alone; a no-op on a missing node."""
        self._patch_node_guarded(node_name, f"untaint node {node_name}",
                                 lambda spec: remove_taint_patch(spec, taint_key), missing_ok=True)

    def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> EvictionOutcome:
        """POST an Eviction (policy/v1): 429 means a PodDisruptionBudget forbids it right now."""
        body = V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=V1ObjectMeta(name=name, namespace=namespace),
            delete_options=(
                V1DeleteOptions(grace_period_seconds=grace_period_seconds) if grace_period_seconds is not None else None
            ),
        )
        try:
            self._discard(
                f"evict pod {namespace}/{name}", self._core.create_namespaced_pod_eviction, name, namespace, body
            )
        except KubernetesApiError as exc:
            if exc.status == 429:
                return "blocked"
            if exc.status == 404:
                return "not_found"
            raise
        return "evicted"

    def write_config_map(self, namespace: str, name: str, *, data: Mapping[str, str],
                         annotations: Mapping[str, str]) -> None:
        """Merge-patch the ConfigMap's data and annotations, creating it when missing.

        A merge patch leaves keys and annotations others put there alone. Two writers
        racing to create it both end in a patch: the loser's 409 turns into one.
        """
        what = f"write configmap {namespace}/{name}"
        patch = {"metadata": {"annotations": dict(annotations)}, "data": dict(data)}
        for _attempt in range(2):
            try:
                self._discard(what, self._core.patch_namespaced_config_map, name, namespace, patch,
                              _content_type=_MERGE_PATCH)
                return
            except KubernetesApiError as exc:
                if exc.status != 404:
                    raise
            body = V1ConfigMap(metadata=V1ObjectMeta(name=name, namespace=namespace, annotations=dict(annotations)),
                               data=dict(data))
            try:
                self._discard(what, self._core.create_namespaced_config_map, namespace, body)
                return
            except KubernetesApiError as exc:
                if exc.status != 409:
                    raise
        raise KubernetesApiError(f"{what}: created and deleted under us twice", status=409)

    # -- CapacityBuffers (autoscaling.x-k8s.io/v1beta1) ---------------------------

    def list_capacity_buffers(self) -> list[CapacityBuffer] | None:
        """Every buffer; None when the API server does not serve the CRD (404: the feature is off; believed for
        CRD_ABSENT_RECHECK before asking again). A buffer that cannot be read comes back with `problem` set
        (kube_buffers.buffer_from_json)."""
        return self._list_custom(kube_buffers.GROUP, kube_buffers.VERSION, kube_buffers.PLURAL,
                                 kube_buffers.buffer_from_json)

    def _list_custom(self, group: str, version: str, plural: str, decode: Callable[[dict[str, Any]], _Item]
                     ) -> list[_Item] | None:
        """Every object of a custom resource, all namespaces, page by page, each decoded; None when the CRD is not
        served (a 404, believed for CRD_ABSENT_RECHECK per resource: a cluster without it costs one LIST then)."""
        what = f"list {plural}"
        absent = self._crd_absent_at.get(plural)
        if absent is not None and self._monotonic() - absent < CRD_ABSENT_RECHECK:
            return None
        items: list[_Item] = []
        token: str | None = None
        while True:
            try:
                page = self._json(what, self._custom.list_cluster_custom_object, group, version, plural,
                                  limit=self._page_size, _continue=token)
            except KubernetesApiError as exc:
                if exc.status == 404:
                    self._crd_absent_at[plural] = self._monotonic()
                    return None
                raise
            items += [decode(obj) for obj in page.get("items") or () if isinstance(obj, dict)]
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return items

    def update_capacity_buffer_status(self, namespace: str, name: str, *, status: BufferStatus) -> None:
        """A JSON merge patch of the status subresource; a no-op on a missing buffer."""
        what = f"update capacitybuffer {namespace}/{name} status"
        try:
            self._discard(what, self._custom.patch_namespaced_custom_object_status, kube_buffers.GROUP,
                          kube_buffers.VERSION, namespace, kube_buffers.PLURAL, name,
                          {"status": kube_buffers.status_json(status)}, _content_type=_MERGE_PATCH)
        except KubernetesApiError as exc:
            if exc.status != 404:
                raise

    # -- ProvisioningRequests (autoscaling.x-k8s.io/v1) ----------------------------

    def list_provisioning_requests(self) -> list[ProvisioningRequest] | None:
        """Every request; None when the API server does not serve the CRD (404, believed for CRD_ABSENT_RECHECK
        like the buffers' list). One that cannot be read comes back with `problem` set
        (kube_provreq.request_from_json)."""
        return self._list_custom(kube_provreq.GROUP, kube_provreq.VERSION, kube_provreq.PLURAL,
                                 kube_provreq.request_from_json)

    def update_provisioning_request_status(self, namespace: str, name: str, *, conditions: Sequence[Condition],
                                           details: Mapping[str, str] | None = None) -> None:
        """One PATCH of the status subresource (kube_provreq.status_patch says which kind and why); a no-op on a
        missing request."""
        what = f"update provisioningrequest {namespace}/{name} status"
        content_type, body = kube_provreq.status_patch(conditions, details)
        try:
            self._discard(what, self._custom.patch_namespaced_custom_object_status, kube_provreq.GROUP,
                          kube_provreq.VERSION, namespace, kube_provreq.PLURAL, name, body, _content_type=content_type)
        except KubernetesApiError as exc:
            if exc.status != 404:
                raise

    def get_pod_template(self, namespace: str, name: str, *, kind: str = "PodTemplate",
                         api_group: str = "") -> BufferTemplate | None:
        what = f"get {kind.lower()} {namespace}/{name}"
        if kind == "PodTemplate" and api_group == "":
            raw = self._json_or_none(what, self._core.read_namespaced_pod_template, name, namespace)
        else:
            raw = self._workload(what, namespace, name, kind=kind, api_group=api_group)
        return None if raw is None else self._converted(what, lambda obj: kube_buffers.template_from_json(obj, kind),
                                                        raw)

    def get_scale(self, namespace: str, name: str, *, kind: str, api_group: str) -> int | None:
        what = f"get {kind.lower()} {namespace}/{name} scale"
        if kind == "Job":
            raw = self._workload(what, namespace, name, kind=kind, api_group=api_group)
        elif kind in kube_buffers.WORKLOADS and kube_buffers.WORKLOADS[kind][0] == api_group:
            method = {"Deployment": self._apps.read_namespaced_deployment_scale,
                      "ReplicaSet": self._apps.read_namespaced_replica_set_scale,
                      "StatefulSet": self._apps.read_namespaced_stateful_set_scale}[kind]
            raw = self._json_or_none(what, method, name, namespace)
        else:
            raise ClusterError(f"{what}: scalableRef kind {api_group}/{kind} is not one we read "
                               f"({', '.join(sorted(kube_buffers.WORKLOADS))})")
        return None if raw is None else self._converted(what, lambda obj: kube_buffers.scale_replicas(obj, kind), raw)

    def _workload(self, what: str, namespace: str, name: str, *, kind: str, api_group: str) -> dict[str, Any] | None:
        known = kube_buffers.WORKLOADS.get(kind)
        if known is None or known[0] != api_group:
            raise ClusterError(f"{what}: scalableRef kind {api_group}/{kind} is not one we read "
                               f"({', '.join(sorted(kube_buffers.WORKLOADS))})")
        method = {"Deployment": self._apps.read_namespaced_deployment,
                  "ReplicaSet": self._apps.read_namespaced_replica_set,
                  "StatefulSet": self._apps.read_namespaced_stateful_set,
                  "Job": self._batch.read_namespaced_job}[kind]
        return self._json_or_none(what, method, name, namespace)

    def delete_node(self, name: str) -> None:
        """Delete the Node object; already gone is fine."""
        try:
            self._discard(f"delete node {name}", self._core.delete_node, name)
        except KubernetesApiError as exc:
            if exc.status != 404:
                raise
