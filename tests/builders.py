"""Small builders for domain objects, so table-driven tests read as data."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from shared.domain import (
    ClusterSnapshot,
    HostPort,
    Instance,
    LabelSelector,
    Node,
    NodeGroup,
    NodeTemplate,
    OwnerRef,
    NodeSelectorTerm,
    Pod,
    PodAffinityTerm,
    Resources,
    SelectorRequirement,
    Taint,
    Toleration,
    TopologySpreadConstraint,
)

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
GIB = 1024**3
SUB = "00000000-0000-0000-0000-000000000000"


def res(cpu: float, mem_gib: float, pods: int = 0, *, eph_gib: float = 0, gpu: int = 0,
        ext: dict[str, int] | None = None) -> Resources:
    """Resources in cores and GiB; `gpu` is nvidia.com/gpu, `ext` any other extended resource."""
    extended = {**({"nvidia.com/gpu": gpu} if gpu else {}), **(ext or {})}
    return Resources(int(cpu * 1000), int(mem_gib * GIB), pods, int(eph_gib * GIB), tuple(extended.items()))


def sel(**labels: str) -> LabelSelector:
    """A label selector from matchLabels."""
    return LabelSelector(tuple(sorted(labels.items())))


def req(key: str, operator: str, *values: str) -> SelectorRequirement:
    return SelectorRequirement(key, operator, tuple(values))


def term(*requirements: SelectorRequirement, fields: tuple[SelectorRequirement, ...] = ()) -> NodeSelectorTerm:
    return NodeSelectorTerm(tuple(requirements), fields)


def affinity(topology_key: str, selector: LabelSelector | None, *namespaces: str,
             all_namespaces: bool = False) -> PodAffinityTerm:
    return PodAffinityTerm(topology_key, selector, tuple(namespaces), all_namespaces)


def spread(topology_key: str, selector: LabelSelector | None, max_skew: int = 1, **kw: object) -> TopologySpreadConstraint:
    return TopologySpreadConstraint(max_skew, topology_key, label_selector=selector, **kw)  # type: ignore[arg-type]


def provider_id(group: str, instance: int | str, rg: str = "rg") -> str:
    return (
        f"azure:///subscriptions/{SUB}/resourceGroups/{rg}/providers/Microsoft.Compute/"
        f"virtualMachineScaleSets/{group}/virtualMachines/{instance}"
    )


def group(name: str = "pool", *, target: int = 1, min_size: int = 0, max_size: int = 10, rg: str = "rg",
          instances: int | None = None, tags: dict[str, str] | None = None, vm_size: str = "Standard_D4s_v5",
          zones: tuple[str, ...] = (), location: str = "westeurope") -> NodeGroup:
    count = target if instances is None else instances
    return NodeGroup(rg, name, min_size, max_size, target, vm_size, tags=tags or {},
                     instances=tuple(Instance(str(i)) for i in range(count)), zones=zones, location=location)


def node(name: str, *, group_name: str = "pool", instance: int = 0, alloc: Resources | None = None, ready: bool = True,
         labels: dict[str, str] | None = None, taints: tuple[Taint, ...] = (), cordoned: bool = False,
         annotations: dict[str, str] | None = None, rg: str = "rg", zone: str | None = None) -> Node:
    """A node of a scale set; it carries its hostname label, and `zone` sets topology.kubernetes.io/zone."""
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if zone is not None:
        all_labels["topology.kubernetes.io/zone"] = zone
    return Node(name, alloc or res(4, 16, 110), T0 - timedelta(hours=1), provider_id(group_name, instance, rg),
                labels=all_labels, annotations=annotations or {}, taints=taints, ready=ready, unschedulable=cordoned)


def pod(name: str, *, cpu: float = 1, mem: float = 1, node_name: str | None = None, pending: bool = False,
        owner: str | None = "ReplicaSet", selector: dict[str, str] | None = None,
        tolerations: tuple[Toleration, ...] = (), phase: str | None = None, namespace: str = "default",
        requests: Resources | None = None, labels: dict[str, str] | None = None, owner_name: str | None = None,
        node_affinity: tuple[NodeSelectorTerm, ...] = (), pod_affinity: tuple[PodAffinityTerm, ...] = (),
        anti_affinity: tuple[PodAffinityTerm, ...] = (), spread: tuple[TopologySpreadConstraint, ...] = (),
        ports: tuple[HostPort, ...] = (), unsupported: tuple[str, ...] = (), terminating: bool = False) -> Pod:
    """A pod; `owner_name` names its controller (default: one controller per pod name)."""
    return Pod(namespace, name, requests or res(cpu, mem), T0 - timedelta(minutes=1), node_name=node_name,
               phase=phase or ("Pending" if node_name is None else "Running"), unschedulable=pending,
               owner=OwnerRef(owner, owner_name or f"{name}-owner") if owner else None, node_selector=selector or {},
               tolerations=tolerations, labels=labels or {}, node_affinity=node_affinity, pod_affinity=pod_affinity,
               pod_anti_affinity=anti_affinity, topology_spread=spread, host_ports=ports, unsupported=unsupported,
               terminating=terminating)


def daemon_pod(node_name: str, *, cpu: float = 0.1, mem: float = 0.125, ds: str = "kube-proxy") -> Pod:
    return Pod("kube-system", f"{ds}-{node_name}", res(cpu, mem), T0 - timedelta(hours=1), node_name=node_name,
               phase="Running", owner=OwnerRef("DaemonSet", ds))


def template(alloc: Resources | None = None, *, labels: dict[str, str] | None = None,
             taints: tuple[Taint, ...] = ()) -> NodeTemplate:
    return NodeTemplate(alloc or res(4, 16, 110), labels or {}, taints, source="test")


def snapshot(*, nodes: list[Node] = (), pods: list[Pod] = (), groups: list[NodeGroup] = (),  # type: ignore[assignment]
             templates: dict[str, NodeTemplate] | None = None, now: datetime = T0) -> ClusterSnapshot:
    return ClusterSnapshot(now, tuple(nodes), tuple(pods), tuple(groups),
                           templates if templates is not None else {g.id: template() for g in groups})
