"""The simulated cluster: Kubernetes objects, VM Scale Sets and the controllers between them.

A discrete-event simulation in sim time, usable in-process without HTTP: call
`advance(to)` (or `advance_by(seconds)`) and read or change state through the
public methods, which all hold `world.lock` (one re-entrant lock, so the HTTP
server's threads and its clock ticker never interleave inside the world).

Determinism: everything random is drawn from generators seeded by `seed` and a
purpose (the workload of each scenario entry, the boot delay of each instance
id), so the same seed gives the same workload and the same boot delays whatever
order an autoscaler calls in. Internally times are float seconds since `start`.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import random
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from shared.domain import Taint, Toleration, group_id
from sandbox import kobjects
from sandbox.compute import InstanceSim, Operation, ScaleSetSim, computer_name
from sandbox.disruption import budget_status, budget_violation, is_healthy, status_json
from sandbox.errors import ArmError, KubeError, conflict, not_found
from sandbox.faults import Fault, ScaleUpFailure, default_scale_up_message, make_fault
from sandbox.identity import DEFAULT_TOKEN_LIFETIME, TokenIssuer
from sandbox.managed_cluster import ManagedCluster
from sandbox.metrics import ApiCounters, distribution, seconds
from sandbox.podspec import PodNeeds, SpecError, parse_pod
from sandbox.pods import PodRole, PodSim, PodTemplate, pod_outcome
from sandbox.resources import EPHEMERAL_STORAGE, Amounts, parse_resource_list
from sandbox.scenario import DaemonSetSpec, MirrorPodSpec, NodeGroupSpec, Scenario, WorkloadSpec, load_scenario
from sandbox.scheduling import ClusterView, NodeSlot, static_reasons, unschedulable_message, untolerated_taint
from sandbox.selectors import labels_match, parse_label_selector
from sandbox.store import ObjectStore
from sandbox.throttling import BUCKETS, TokenBucket
from sandbox.units import parse_cpu_milli, parse_duration, parse_time, rfc3339

DEFAULT_START = datetime(2030, 1, 7, 9, 0, 0, tzinfo=UTC)  # a Monday morning; any fixed instant keeps runs comparable
SANDBOX_TOKEN = "sandbox-token"  # the kubeconfig's ServiceAccount token: only the Kubernetes API double takes it
DURATION_ANNOTATION = "sandbox.autoscaler/duration"  # API-created pods: how long the container runs
CPU_USAGE_ANNOTATION = "sandbox.autoscaler/cpu-usage"  # API-created pods: CPU they use, as measured
LOG_ANALYTICS_WORKSPACE_ID = "5a4d0b0e-0000-4000-8000-00000000c0de"  # the workspace the Log Analytics double serves
MAX_CAPACITY = 1000  # a Uniform scale set without single placement group
SCALE_UP_FAILURE_DELAY = 5.0  # sim seconds before an injected allocation failure surfaces
MAX_EVENTS = 10_000  # core/v1 events kept (the real API expires them after an hour)
RESOURCES = ("nodes", "pods", "events", "configmaps", "poddisruptionbudgets", "namespaces", "daemonsets")
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery rand.String: no vowels, no confusables
_INITIAL_NODE_AGE = timedelta(hours=1)  # initial nodes registered before the scenario starts
# cluster-autoscaler's taint on a node it is removing (with spec.unschedulable: the removal has started)
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"
# the cloud node lifecycle controller's taint on a node whose instance the provider reports shut down (deallocated)
SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown"
PREEMPTED_MESSAGE = "Operation execution has been preempted by a more recent operation."


@dataclass(frozen=True, slots=True)
class NodeCpu:
    """One node's CPU as the monitoring doubles report it."""

    used_milli: int
    capacity_milli: int
    since: datetime  # when the node came up: a monitoring agent has samples from here on

    @property
    def fraction(self) -> float:
        return self.used_milli / self.capacity_milli if self.capacity_milli else 0.0


@dataclass(frozen=True, slots=True)
class RemovalStart:
    """A node seen marked for removal (tainted ToBeDeletedByClusterAutoscaler or cordoned), as it was then."""

    node: str
    group: str
    instance: InstanceSim
    at: float  # sim seconds
    age: float  # seconds since the Node was created
    utilization: float  # larger of CPU and memory requests over allocatable; DaemonSet and mirror pods left out
    pods: int  # unfinished pods on it, DaemonSet and mirror pods left out

    def as_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "group": self.group,
            "instance_id": self.instance.instance_id,
            "cordoned_at": round(self.at, 3),
            "age_seconds": round(self.age, 3),
            "utilization": round(self.utilization, 4),
            "pods": self.pods,
            "delete_started_at": seconds(self.instance.delete_started_at),
        }


def _marked_for_removal(node: Mapping[str, Any]) -> bool:
    spec = node.get("spec") or {}
    return bool(spec.get("unschedulable")) or any(
        isinstance(t, dict) and t.get("key") == TO_BE_DELETED_TAINT for t in spec.get("taints") or []
    )


class World:
    """One simulated cluster world. See the module docstring; every public method holds `lock`."""

    def __init__(
        self,
        scenario: Scenario | str | Path | Mapping[str, Any],
        *,
        seed: int = 0,
        start: datetime | None = None,
        token_lifetime: float = DEFAULT_TOKEN_LIFETIME,
    ) -> None:
        self.lock = threading.RLock()
        self.scenario = load_scenario(scenario)
        self.seed = seed
        chosen = start or self.scenario.start or DEFAULT_START
        if chosen.tzinfo is None:
            raise ValueError("start must be timezone-aware")
        self.start = chosen.astimezone(UTC).replace(microsecond=0)
        self.subscription_id = self.scenario.subscription_id
        self.token = SANDBOX_TOKEN
        # Entra ID behind a managed identity: the expiring tokens ARM, Key Vault, Log Analytics and
        # (for an AKS cluster) the Kubernetes API take. Wall-clock lifetimes, whatever the world's speed.
        self.identity = TokenIssuer(token_lifetime)
        self.managed_cluster: ManagedCluster | None = None  # set by the server, which knows its URL and CA
        self.workspace_id = LOG_ANALYTICS_WORKSPACE_ID
        self.counters = ApiCounters()
        self.timeline: list[dict[str, Any]] = []
        self._t = 0.0
        self._end = self.scenario.duration
        self._seq = itertools.count()
        self._events: list[tuple[float, int, str, Any]] = []
        self._ids = random.Random(f"{seed}|ids")
        self._store = ObjectStore(RESOURCES, self._mark_dirty)
        self._pods: dict[str, PodSim] = {}  # every pod ever, by uid
        self._live: dict[tuple[str, str], PodSim] = {}
        self._groups: dict[str, ScaleSetSim] = {}
        self._gone: list[InstanceSim] = []
        self._by_node: dict[str, InstanceSim] = {}
        self._operations: dict[str, Operation] = {}
        self._faults: list[Fault] = []
        self._buckets: dict[tuple[str, str], TokenBucket] = {}  # (scale set key or "rg:<name>", bucket)
        self._node_pods: dict[tuple[str, str], str] = {}  # (system pod id, node) -> uid
        self._names_used: dict[str, itertools.count[int]] = {}
        self._arrivals_due = 0
        self._next_sample = 0.0
        self._alive = 0
        self._nodes_max = 0
        self._ip_counter = itertools.count(1)
        self._dirty = True
        # kube-scheduler retries unschedulable pods only after a cluster event that could help
        # (a node added or changed, a pod gone or finished); new pods are always tried once.
        self._retry_all_pending = True
        self._new_pods: list[PodSim] = []
        self._unbound: dict[str, PodSim] = {}  # live pods without a node, by uid
        self._used: dict[str, Amounts] = {}  # requests of unfinished pods, by node
        # Pods holding resources on a node, by uid: what inter-pod affinity and spreading look at. The
        # subsets with required anti-affinity or host ports are kept apart because every pod checks them.
        self._placed: dict[str, PodSim] = {}
        self._placed_anti: dict[str, PodSim] = {}
        self._placed_ports: dict[str, PodSim] = {}
        self._allocatable_cache: dict[tuple[str, str], Amounts] = {}
        self._events_by_reason: Counter[str] = Counter()  # Events created through the API
        self._not_triggered: dict[tuple[str, str], str] = {}  # pod -> the latest NotTriggerScaleUp message about it
        self._events_by_object: dict[str, Counter[str]] = {}  # "namespace/name" of the involved object -> reasons
        self._created_by_group: Counter[str] = Counter()  # instances added by scale-ups (initial ones left out)
        self._removal_starts: dict[str, RemovalStart] = {}  # by node: the latest unmarked -> marked change
        self._owners: dict[str, str] = {}  # owner uid of each workload given pods by add_arrival
        self._init_namespaces()
        self._init_pdbs()
        self._init_daemonsets()
        self._init_scale_sets()
        self._schedule_workloads()
        self._advance_to(0.0)  # arrivals at t=0 exist from the first look

    # ------------------------------------------------------------------ time

    @property
    def now(self) -> datetime:
        with self.lock:
            return self._at(self._t)

    @property
    def t(self) -> float:
        """Sim seconds since start."""
        with self.lock:
            return self._t

    @property
    def end(self) -> datetime:
        return self._at(self._end)

    def _at(self, t: float) -> datetime:
        return self.start + timedelta(seconds=t)

    def _ts(self, t: float | None = None) -> str:
        return rfc3339(self._at(self._t if t is None else t))

    def advance(self, to: datetime) -> None:
        """Run the world up to `to` (never past the scenario's duration; never backwards)."""
        with self.lock:
            self._advance_to((to - self.start).total_seconds())

    def advance_by(self, seconds_: float) -> None:
        with self.lock:
            self._advance_to(self._t + seconds_)

    def _advance_to(self, target: float) -> None:
        target = min(target, self._end)
        while self._events and self._events[0][0] <= target:
            when = self._events[0][0]
            self._sample_before(when)
            self._t = max(self._t, when)
            while self._events and self._events[0][0] <= when:
                _, _, kind, payload = heapq.heappop(self._events)
                self._handle(kind, payload)
            self._reconcile()
        self._sample_before(target)
        self._t = max(self._t, target)
        self._reconcile()
        self._sample_through(self._t)

    def _push(self, at: float, kind: str, payload: Any) -> None:
        heapq.heappush(self._events, (at, next(self._seq), kind, payload))

    def _handle(self, kind: str, payload: Any) -> None:
        handlers = {
            "arrival": self._on_arrival,
            "provisioned": self._on_provisioned,
            "registered": self._on_registered,
            "complete": self._on_complete,
            "terminated": self._on_terminated,
            "vanish": self._on_vanish,
            "node_gc": self._on_node_gc,
            "op_fail": self._on_op_fail,
            "power_done": self._on_power_done,
            "rebooted": self._on_rebooted,
            "ttl_expired": self._on_ttl_expired,
        }
        handlers[kind](payload)
        self._dirty = True

    def _rng(self, *purpose: object) -> random.Random:
        return random.Random("|".join([str(self.seed), *map(str, purpose)]))

    def _uid(self) -> str:
        return str(uuid.UUID(int=self._ids.getrandbits(128), version=4))

    # ------------------------------------------------------------------ object store

    def _mark_dirty(self) -> None:
        self._dirty = True

    def _init_namespaces(self) -> None:
        names = {"default", "kube-system", "kube-public", "kube-node-lease", *self.scenario.namespaces}
        names |= {w.namespace for w in self.scenario.workloads} | {d.namespace for d in self.scenario.daemonsets}
        names |= {p.namespace for p in self.scenario.pdbs}
        names |= {m.namespace for g in self.scenario.node_groups for m in g.mirror_pods}
        for name in sorted(names):
            self._store.put(
                "namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": name,
                        "uid": self._uid(),
                        "creationTimestamp": rfc3339(self.start - _INITIAL_NODE_AGE),
                        "labels": {"kubernetes.io/metadata.name": name},
                    },
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                },
            )

    def _init_pdbs(self) -> None:
        for spec in self.scenario.pdbs:
            body: dict[str, Any] = {"selector": {"matchLabels": dict(spec.selector)}}
            if spec.min_available is not None:
                body["minAvailable"] = spec.min_available
            else:
                body["maxUnavailable"] = spec.max_unavailable
            self._store.put(
                "poddisruptionbudgets",
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {
                        "name": spec.name,
                        "namespace": spec.namespace,
                        "uid": self._uid(),
                        "generation": 1,
                        "creationTimestamp": rfc3339(self.start - _INITIAL_NODE_AGE),
                    },
                    "spec": body,
                },
            )

    def _init_daemonsets(self) -> None:
        """The DaemonSet objects (apps/v1), and each one's pod as the controller makes it (for placement)."""
        self._daemon_needs: dict[tuple[str, str], PodNeeds] = {}
        for ds in self.scenario.daemonsets:
            uid = str(uuid.UUID(int=self._rng("daemonset", ds.namespace, ds.name).getrandbits(128), version=4))
            template = self._daemon_pod_object(ds, uid)
            self._daemon_needs[(ds.namespace, ds.name)] = parse_pod(template)
            self._store.put("daemonsets", kobjects.daemonset_object(ds.namespace, ds.name, uid,
                                                                    rfc3339(self.start - _INITIAL_NODE_AGE), template))

    def _daemon_runs_on(self, ds: DaemonSetSpec, name: str, labels: Mapping[str, str], taints: Iterable[Taint]) -> bool:
        """The DaemonSet controller's test: nodeSelector, required node affinity, and NoSchedule/NoExecute taints
        against the template's tolerations plus the ones it adds to every pod (not-ready, unreachable, ...)."""
        needs = self._daemon_needs[(ds.namespace, ds.name)]
        return needs.matches_node_affinity(name, labels) and untolerated_taint(taints, needs.tolerations) is None

    # ------------------------------------------------------------------ scale sets and instances

    def _init_scale_sets(self) -> None:
        for spec in self.scenario.node_groups:
            key = group_id(spec.resource_group, spec.name)
            tags = dict(spec.tags)
            if spec.autoscaled:
                tags |= {
                    "cluster-autoscaler-enabled": "true",
                    "cluster-autoscaler-name": self.scenario.cluster_name,
                    "min": str(spec.min_size),
                    "max": str(spec.max_size),
                }
            group = ScaleSetSim(spec=spec, key=key, capacity=0, tags=tags, unique_id=self._uid(), created_at=0.0)
            self._groups[key] = group
            for _ in range(spec.initial):
                inst = self._new_instance(group, already_running=True)
                self._register_node(inst, created=self.start - spec.initial_age)
            group.capacity = spec.initial
        for failure in self.scenario.scale_up_failures:
            self.fail_next_scale_up(
                failure.scale_set, code=failure.code, message=failure.message, count=failure.count,
                resource_group=failure.resource_group,
            )

    def _boot_delay(self, group: ScaleSetSim, instance_id: int) -> float:
        dist = group.spec.boot_delay or self.scenario.boot_delay
        return dist.sample(self._rng("boot", group.key, instance_id))

    def _new_instance(self, group: ScaleSetSim, *, already_running: bool = False) -> InstanceSim:
        instance_id = group.next_instance_id
        group.next_instance_id += 1
        boot = 0.0 if already_running else self._boot_delay(group, instance_id)
        zones = group.spec.zones
        inst = InstanceSim(
            group_key=group.key,
            instance_id=instance_id,
            computer_name=computer_name(group.spec.computer_name_prefix, instance_id),
            vm_id=self._uid(),
            zone=zones[instance_id % len(zones)] if zones else "",
            created_at=self._t,
            boot_delay=boot,
            provision_at=self._t + boot * self.scenario.provisioning_fraction,
            ready_at=self._t + boot,
            state="Succeeded" if already_running else "Creating",
            power="running" if already_running else "starting",
            ip_index=next(self._ip_counter),
        )
        group.instances[instance_id] = inst
        if not already_running:
            self._created_by_group[group.key] += 1
        self._alive += 1
        self._nodes_max = max(self._nodes_max, self._alive)
        if not already_running:
            self._push(inst.provision_at, "provisioned", inst)
            self._push(inst.ready_at, "registered", inst)
        return inst

    def _provider_id(self, inst: InstanceSim) -> str:
        group = self._groups[inst.group_key]
        return (
            f"azure:///subscriptions/{self.subscription_id}/resourceGroups/{group.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{group.name}/virtualMachines/{inst.instance_id}"
        )

    @staticmethod
    def _node_labels(spec: NodeGroupSpec, hostname: str, zone: str) -> dict[str, str]:
        region = spec.location
        return {
            "kubernetes.io/hostname": hostname,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": spec.vm_size,
            "topology.kubernetes.io/region": region,
            # Azure's cloud provider labels zonal nodes "<region>-<zone>" and regional ones "0".
            "topology.kubernetes.io/zone": f"{region}-{zone}" if zone else "0",
            "agentpool": spec.name,
            **spec.labels,
        }

    def _register_node(self, inst: InstanceSim, created: datetime | None = None) -> None:
        group = self._groups[inst.group_key]
        spec = group.spec
        labels = self._node_labels(spec, inst.computer_name, inst.zone)
        node = kobjects.node_object(
            name=inst.computer_name,
            uid=self._uid(),
            created=rfc3339(created or self._at(self._t)),
            provider_id=self._provider_id(inst),
            labels=labels,
            taints=spec.taints,
            capacity=spec.capacity,
            allocatable=spec.allocatable,
            internal_ip=f"10.224.{inst.ip_index // 250}.{inst.ip_index % 250 + 4}",
            pod_cidr=f"10.244.{inst.ip_index % 256}.0/24",
            machine_id=inst.vm_id.replace("-", ""),
        )
        node["metadata"]["annotations"].update(spec.annotations)
        self._store.put("nodes", node)
        self._retry_all_pending = True
        inst.node_registered = True
        self._by_node[inst.computer_name] = inst

    def _on_provisioned(self, inst: InstanceSim) -> None:
        if inst.state == "Creating":
            inst.state = "Succeeded"
            inst.power = "running"
            self._groups[inst.group_key].generation += 1

    def _on_registered(self, inst: InstanceSim) -> None:
        # power_seq 0: no deallocation or start since it was created (those register through `rebooted`)
        if inst.alive and inst.state != "Deleting" and not inst.node_registered and inst.power_seq == 0:
            self._register_node(inst)

    def _start_instance_delete(self, inst: InstanceSim) -> None:
        if inst.state == "Deleting":
            return
        group = self._groups[inst.group_key]
        inst.state = "Deleting"
        inst.delete_started_at = self._t
        inst.power_seq += 1  # a deallocation or start under way is preempted
        group.generation += 1
        delay = self.scenario.delete_delay.sample(self._rng("delete", group.key, inst.instance_id))
        self._push(self._t + delay, "vanish", inst)
        node = self._store.get("nodes", "", inst.computer_name)
        if node is not None and not inst.node_deleted_by_api:
            self._node_lost(node)
            self._kill_pods_on(inst.computer_name)

    def _node_lost(self, node: dict[str, Any]) -> None:
        """The VM is shutting down: kubelet stops posting status, the node lifecycle controller marks it."""
        now = self._ts()
        kobjects.set_condition(
            node,
            {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            },
        )
        taints = node.setdefault("spec", {}).setdefault("taints", [])
        for effect in ("NoSchedule", "NoExecute"):
            if not any(t.get("key") == "node.kubernetes.io/unreachable" and t.get("effect") == effect for t in taints):
                taints.append(kobjects.taint_json(Taint("node.kubernetes.io/unreachable", "", effect), now))
        self._store.touch(node)

    def _on_vanish(self, inst: InstanceSim) -> None:
        group = self._groups[inst.group_key]
        inst.vanished_at = self._t
        group.instances.pop(inst.instance_id, None)
        group.generation += 1
        self._gone.append(inst)
        if inst.unbilled_since is None:  # a deallocated instance stopped counting when it was deallocated
            self._alive -= 1
        if inst.node_registered and not inst.node_deleted_by_api:
            self._push(self._t + self.scenario.node_removal_delay, "node_gc", inst)

    def _on_node_gc(self, inst: InstanceSim) -> None:
        """The cloud node lifecycle controller deletes Node objects whose VM is gone."""
        node = self._store.get("nodes", "", inst.computer_name)
        if node is not None and self._by_node.get(inst.computer_name) is inst:
            self._remove_node(inst.computer_name)

    def _remove_node(self, name: str) -> dict[str, Any] | None:
        self._kill_pods_on(name)
        for pod in [p for p in self._live.values() if p.node == name]:
            self._remove_pod(pod)  # pod garbage collection of pods bound to a missing node
        node = self._store.drop("nodes", "", name)
        self._by_node.pop(name, None)
        return node

    # ------------------------------------------------------------------ pods

    def _schedule_workloads(self) -> None:
        for spec in self.scenario.workloads:
            rng = self._rng("workload", spec.namespace, spec.name)
            # Its own stream, so adding `cpu_usage` to a workload leaves its arrivals and requests as they were.
            usage_rng = self._rng("cpu-usage", spec.namespace, spec.name)
            owner_uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            for wave in range(spec.repeat_times):
                for _ in range(spec.count):
                    at = spec.at + wave * spec.repeat_every + rng.uniform(0.0, spec.spread)
                    cpu = max(1, round(spec.cpu.sample(rng)))
                    memory = max(1 << 20, round(spec.memory.sample(rng) / (1 << 20)) << 20)  # whole Mi
                    duration = None if spec.duration is None else round(spec.duration.sample(rng), 3)
                    scalars = dict(spec.extended)
                    if spec.ephemeral_storage is not None:
                        scalars[EPHEMERAL_STORAGE] = max(1 << 20, round(spec.ephemeral_storage.sample(rng) / (1 << 20)) << 20)
                    usage = None if spec.cpu_usage is None else max(0, round(spec.cpu_usage.sample(usage_rng)))
                    template = PodTemplate(spec, owner_uid, Amounts.of(cpu, memory, 1, scalars), duration, usage)
                    self._push(at, "arrival", template)
                    self._arrivals_due += 1

    def add_arrival(self, at: float, workload: WorkloadSpec, requests: Amounts, duration: float | None) -> None:
        """One pod of `workload` created at sim second `at` (a replayed trace's pods, outside the scenario).

        Pods of one workload share its owner (one Job or ReplicaSet). `at` must not be in the past.
        """
        with self.lock:
            if at < self._t:
                raise ValueError(f"arrival at {at}s is before the world's time {self._t}s")
            key = f"{workload.namespace}/{workload.name}"
            owner_uid = self._owners.get(key)
            if owner_uid is None:
                owner_uid = self._owners[key] = self._uid()
            self._push(at, "arrival", PodTemplate(workload, owner_uid, requests, duration))
            self._arrivals_due += 1

    def _pod_name(self, namespace: str, base: str, *, kind: str) -> str:
        """Bare pods are numbered; controller pods get kube's 5-character random suffix."""
        while True:
            if kind == "Pod":
                name = f"{base}-{next(self._names_used.setdefault(f'{namespace}/{base}', itertools.count()))}"
            else:
                name = f"{base}-{''.join(self._ids.choice(_NAME_ALPHABET) for _ in range(5))}"
            if (namespace, name) not in self._live:
                return name

    def _on_arrival(self, template: PodTemplate) -> None:
        self._arrivals_due -= 1
        self._create_workload_pod(template)

    def _create_workload_pod(self, template: PodTemplate) -> PodSim:
        spec = template.workload
        owner = None if spec.kind == "Pod" else kobjects.owner_reference(spec.kind, spec.name, template.owner_uid)
        name = self._pod_name(spec.namespace, spec.name, kind=spec.kind)
        obj = kobjects.pod_object(
            namespace=spec.namespace,
            name=name,
            uid=self._uid(),
            created=self._ts(),
            requests=template.requests,
            labels=spec.labels,
            annotations=spec.annotations,
            node_selector=spec.node_selector,
            tolerations=spec.tolerations,
            owner=owner,
            restart_policy="Never" if spec.kind == "Job" else "Always",
            priority=spec.priority or 0,
            affinity=spec.affinity,
            topology_spread_constraints=spec.topology_spread_constraints,
            host_ports=spec.host_ports,
            volumes=spec.volumes,
            active_deadline_seconds=spec.active_deadline_seconds,
        )
        return self._add_pod(
            obj,
            role="workload",
            workload=f"{spec.namespace}/{spec.name}",
            owner_kind=None if spec.kind == "Pod" else spec.kind,
            duration=template.duration,
            template=template,
            cpu_usage_milli=template.cpu_usage_milli,
        )

    def _add_pod(
        self,
        obj: dict[str, Any],
        *,
        role: PodRole,
        workload: str,
        owner_kind: str | None,
        duration: float | None,
        template: PodTemplate | None = None,
        needs: PodNeeds | None = None,
        cpu_usage_milli: int | None = None,
    ) -> PodSim:
        """Track a new pod; its scheduling needs come from the object itself (parse errors surface to
        the caller: a 422 for API pods, a bug for pods the world builds from a validated scenario)."""
        meta = obj["metadata"]
        pod = PodSim(
            uid=meta["uid"],
            namespace=meta["namespace"],
            name=meta["name"],
            seq=next(self._seq),
            role=role,
            workload=workload,
            owner_kind=owner_kind,
            needs=needs or parse_pod(obj),
            duration=duration,
            created=self._t,
            template=template,
            cpu_usage_milli=cpu_usage_milli,
        )
        self._pods[pod.uid] = pod
        self._live[pod.key] = pod
        if not pod.node_bound:
            self._new_pods.append(pod)
            self._unbound[pod.uid] = pod
        self._store.put("pods", obj)
        return pod

    def _pod_obj(self, pod: PodSim) -> dict[str, Any]:
        return self._store.table("pods")[pod.key]

    def _bind(self, pod: PodSim, node_name: str) -> None:
        obj = self._pod_obj(pod)
        inst = self._by_node.get(node_name)
        now = self._ts()
        obj["spec"]["nodeName"] = node_name
        status = obj["status"]
        status["phase"] = "Running"
        status["startTime"] = now
        if inst is not None:
            status["hostIP"] = f"10.224.{inst.ip_index // 250}.{inst.ip_index % 250 + 4}"
            status["hostIPs"] = [{"ip": status["hostIP"]}]
            octet = sum(1 for p in self._live.values() if p.node == node_name) % 250 + 2
            status["podIP"] = f"10.244.{inst.ip_index % 256}.{octet}"
            status["podIPs"] = [{"ip": status["podIP"]}]
        for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"):
            kobjects.set_condition(obj, kobjects.condition(kind, "True", now))
        status["containerStatuses"] = [kobjects.container_status(running_since=now)]
        pod.node = node_name
        pod.group = inst.group_key if inst is not None else None
        self._unbound.pop(pod.uid, None)
        self._used[node_name] = self._used.get(node_name, Amounts()) + pod.requests
        pod.holds_resources = True
        self._placed[pod.uid] = pod
        if pod.needs.anti_affinity:
            self._placed_anti[pod.uid] = pod
        if pod.needs.host_ports:
            self._placed_ports[pod.uid] = pod
        pod.bound = pod.bound if pod.bound is not None else self._t
        pod.started = self._t
        if pod.duration is not None:
            self._push(self._t + pod.duration, "complete", pod)
        self._store.touch(obj)

    def _on_complete(self, pod: PodSim) -> None:
        obj = self._store.get("pods", *pod.key)
        if obj is None or obj["metadata"]["uid"] != pod.uid or obj["status"].get("phase") != "Running":
            return
        if obj["metadata"].get("deletionTimestamp"):
            return  # evicted: the work is lost, the replacement starts over
        now = self._ts()
        obj["status"]["phase"] = "Succeeded"
        for kind in ("Ready", "ContainersReady"):
            kobjects.set_condition(obj, kobjects.condition(kind, "False", now, "PodCompleted"))
        obj["status"]["containerStatuses"] = [
            kobjects.container_status(running_since=None, finished_at=now, started_at=obj["status"].get("startTime", now))
        ]
        pod.finished = self._t
        self._release(pod)
        self._store.touch(obj)
        ttl = pod.template.workload.ttl_after_finished if pod.template is not None else None
        if ttl is not None:
            self._push(self._t + ttl, "ttl_expired", pod)

    def _on_ttl_expired(self, pod: PodSim) -> None:
        self._remove_pod(pod)  # a no-op when the pod is already gone

    def _kill_pods_on(self, node_name: str) -> None:
        """The node's VM is going away: its running workload pods die (Failed), owners replace them."""
        now = self._ts()
        for pod in [p for p in self._live.values() if p.node == node_name]:
            obj = self._pod_obj(pod)
            if pod.node_bound or obj["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            if obj["metadata"].get("deletionTimestamp"):
                self._remove_pod(pod)  # already being deleted: it simply goes now
                continue
            obj["status"]["phase"] = "Failed"
            obj["status"]["reason"] = "Terminated"
            obj["status"]["message"] = "Pod was terminated in response to imminent node shutdown."
            for kind in ("Ready", "ContainersReady"):
                kobjects.set_condition(obj, kobjects.condition(kind, "False", now, "PodFailed"))
            obj["status"]["containerStatuses"] = [
                kobjects.container_status(
                    finished_at=now, started_at=obj["status"].get("startTime", now), exit_code=137, reason="Error"
                )
            ]
            pod.killed = True
            pod.stopped = self._t
            self._release(pod)
            self._store.touch(obj)
            self._replace(pod)

    def _replace(self, pod: PodSim) -> None:
        """Job and ReplicaSet controllers create a new pod for one that will not finish."""
        if pod.replaced or pod.template is None or pod.owner_kind not in ("Job", "ReplicaSet") or pod.finished is not None:
            return
        pod.replaced = True
        self._create_workload_pod(pod.template)

    def _remove_pod(self, pod: PodSim) -> None:
        if self._live.get(pod.key) is not pod:
            return
        del self._live[pod.key]
        self._store.drop("pods", pod.namespace, pod.name)
        self._unbound.pop(pod.uid, None)
        self._release(pod)
        pod.deleted = self._t
        if pod.started is not None and pod.finished is None and pod.stopped is None:
            pod.stopped = self._t

    def _release(self, pod: PodSim) -> None:
        """The pod's requests stop counting on its node (it finished, died or is gone): retry pending pods."""
        if pod.holds_resources and pod.node is not None:
            self._used[pod.node] = self._used[pod.node] - pod.requests
            pod.holds_resources = False
            for index in (self._placed, self._placed_anti, self._placed_ports):
                index.pop(pod.uid, None)
        self._retry_all_pending = True

    def _delete_pod(self, pod: PodSim, grace: float | None) -> dict[str, Any]:
        """Graceful deletion: running pods keep their node for the grace period, others go at once."""
        obj = self._pod_obj(pod)
        grace = self.scenario.termination_grace if grace is None else max(0.0, grace)
        phase = obj["status"].get("phase")
        if pod.node is None or phase in ("Succeeded", "Failed") or grace == 0:
            result = copy.deepcopy(obj)
            self._remove_pod(pod)
        else:
            if not obj["metadata"].get("deletionTimestamp"):
                pod.terminating = True
                obj["metadata"]["deletionTimestamp"] = self._ts(self._t + grace)
                obj["metadata"]["deletionGracePeriodSeconds"] = int(round(grace))
                kobjects.set_condition(obj, kobjects.condition("Ready", "False", self._ts(), "PodTerminating"))
                self._store.touch(obj)
                self._push(self._t + grace, "terminated", pod)
            result = copy.deepcopy(obj)
        if not pod.node_bound:
            self._replace(pod)
        return result

    def _on_terminated(self, pod: PodSim) -> None:
        self._remove_pod(pod)

    def _ensure_node_pods(self) -> None:
        """DaemonSet controller and kubelet mirror pods: one of each per Ready node, bound directly."""
        for name, inst in list(self._by_node.items()):
            node = self._store.get("nodes", "", name)
            if node is None or inst.state == "Deleting" or not kobjects.is_ready(node):
                continue
            labels = node["metadata"].get("labels") or {}
            taints = kobjects.parse_taints(node)
            for ds in self.scenario.daemonsets:
                if self._daemon_runs_on(ds, name, labels, taints):
                    self._ensure_node_pod(f"ds/{ds.namespace}/{ds.name}", name, lambda ds=ds: self._daemon_pod(ds, name))
            for mirror in self._groups[inst.group_key].spec.mirror_pods:
                self._ensure_node_pod(
                    f"mirror/{mirror.namespace}/{mirror.name}", name, lambda mirror=mirror: self._mirror_pod(mirror, name)
                )

    def _ensure_node_pod(self, pod_id: str, node: str, build: Callable[[], PodSim]) -> None:
        uid = self._node_pods.get((pod_id, node))
        current = self._pods.get(uid) if uid else None
        if current is not None and self._live.get(current.key) is current:
            if not self._pod_obj(current)["metadata"].get("deletionTimestamp"):
                return
        pod: PodSim = build()
        self._node_pods[(pod_id, node)] = pod.uid
        self._bind(pod, node)

    def _daemon_pod_object(self, ds: DaemonSetSpec, ds_uid: str, name: str = "", uid: str = "") -> dict[str, Any]:
        """A pod of the DaemonSet as its controller makes it: the template's selector, affinity and tolerations,
        plus the tolerations the controller adds to every DaemonSet pod."""
        return kobjects.pod_object(
            namespace=ds.namespace,
            name=name,
            uid=uid,
            created=self._ts(),
            requests=ds.requests + Amounts(pods=1),
            labels=ds.labels,
            annotations={},
            node_selector=ds.node_selector,
            affinity=ds.affinity,
            tolerations=ds.tolerations + kobjects.DAEMON_POD_TOLERATIONS,
            owner=kobjects.owner_reference("DaemonSet", ds.name, ds_uid),
            restart_policy="Always",
            priority_class="system-node-critical",
        )

    def _daemon_pod(self, ds: DaemonSetSpec, node: str) -> PodSim:
        ds_uid = str(uuid.UUID(int=self._rng("daemonset", ds.namespace, ds.name).getrandbits(128), version=4))
        obj = self._daemon_pod_object(
            ds, ds_uid, self._pod_name(ds.namespace, ds.name, kind="DaemonSet"), self._uid()
        )
        # The controller pins each pod to its node (matchFields metadata.name) in place of the template's affinity.
        obj["spec"].setdefault("affinity", {})["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            }
        }
        obj["spec"]["nodeName"] = node
        return self._add_pod(
            obj, role="daemonset", workload=f"{ds.namespace}/{ds.name}", owner_kind="DaemonSet", duration=None,
            cpu_usage_milli=ds.cpu_usage_milli,
        )

    def _mirror_pod(self, mirror: MirrorPodSpec, node: str) -> PodSim:
        requests = mirror.requests + Amounts(pods=1)
        node_obj = self._store.get("nodes", "", node) or {"metadata": {"uid": ""}}
        obj = kobjects.pod_object(
            namespace=mirror.namespace,
            name=f"{mirror.name}-{node}",
            uid=self._uid(),
            created=self._ts(),
            requests=requests,
            labels={"component": mirror.name, "tier": "node"},
            annotations={
                "kubernetes.io/config.mirror": f"{self._ids.getrandbits(128):032x}",
                "kubernetes.io/config.source": "file",
            },
            node_selector={},
            tolerations=(Toleration(operator="Exists", effect="NoExecute"),),
            owner=kobjects.owner_reference("Node", node, node_obj["metadata"]["uid"]),
            restart_policy="Always",
            priority_class="system-node-critical",
        )
        obj["spec"]["nodeName"] = node
        return self._add_pod(
            obj, role="mirror", workload=f"{mirror.namespace}/{mirror.name}", owner_kind="Node", duration=None,
        )

    def _node_slots(self) -> dict[str, NodeSlot]:
        used = self._used
        slots = {}
        for node in self._store.listed("nodes"):
            name = node["metadata"]["name"]
            slots[name] = NodeSlot(
                name=name,
                labels=node["metadata"].get("labels") or {},
                taints=kobjects.parse_taints(node),
                allocatable=self._allocatable(node),
                used=used.get(name, Amounts()),
                ready=kobjects.is_ready(node),
                unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
            )
        for pod in self._placed_ports.values():
            slot = slots.get(pod.node or "")
            if slot is not None:
                slot.ports.extend(pod.needs.host_ports)
        return slots

    def _allocatable(self, node: dict[str, Any]) -> Amounts:
        """Parsed once per node version: quantities are slow to parse and rarely change."""
        key = (node["metadata"]["name"], node["metadata"]["resourceVersion"])
        cached = self._allocatable_cache.get(key)
        if cached is None:
            try:
                cached = parse_resource_list((node.get("status") or {}).get("allocatable") or {})
            except ValueError:
                cached = Amounts()  # a node reporting nonsense takes no pods
            if len(self._allocatable_cache) > 10_000:
                self._allocatable_cache.clear()
            self._allocatable_cache[key] = cached
        return cached

    def _namespace_labels(self) -> dict[str, Mapping[str, str]]:
        return {
            obj["metadata"]["name"]: obj["metadata"].get("labels") or {} for obj in self._store.listed("namespaces")
        }

    def _unplaceable(self, pod: PodSim) -> bool:
        """Whether no node of any scale set could ever take the pod, even empty: the sandbox's own
        scheduler judges a fresh node of each group (every zone, its DaemonSet and mirror pods on it).
        Such pods can never run, so they do not hold up `done`. Affinity to other pods and spreading are
        left out: other pods may yet make those satisfiable."""
        if pod.unplaceable is None:
            pod.unplaceable = not any(
                not static_reasons(pod.needs, slot) for group in self._groups.values() for slot in self._fresh_slots(group)
            )
        return pod.unplaceable

    def _fresh_slots(self, group: ScaleSetSim) -> list[NodeSlot]:
        spec = group.spec
        if spec.max_size == 0:
            return []
        slots = []
        for zone in spec.zones or ("",):
            labels = self._node_labels(spec, f"{spec.computer_name_prefix}-template", zone)
            used = Amounts()
            for daemonset in self.scenario.daemonsets:
                if self._daemon_runs_on(daemonset, labels["kubernetes.io/hostname"], labels, spec.taints):
                    used += daemonset.requests + Amounts(pods=1)
            for mirror in spec.mirror_pods:
                used += mirror.requests + Amounts(pods=1)
            slots.append(NodeSlot(labels["kubernetes.io/hostname"], labels, spec.taints, spec.allocatable, used,
                                  ready=True, unschedulable=False))
        return slots

    def _schedule(self) -> None:
        candidates = list(self._unbound.values()) if self._retry_all_pending else self._new_pods
        pending = [
            p
            for p in candidates
            if self._live.get(p.key) is p and p.node is None and not p.node_bound
            and not self._pod_obj(p)["spec"].get("nodeName")  # named a node itself: the scheduler stays out
            and self._pod_obj(p)["status"].get("phase") == "Pending"
            and not p.terminating
        ]
        self._retry_all_pending = False
        self._new_pods = []
        if not pending:
            return
        nodes = list(self._node_slots().values())
        view = ClusterView(
            nodes,
            pods=lambda: self._placed.values(),  # live: a pod bound in this pass is seen by the next
            anti_affinity_pods=lambda: self._placed_anti.values(),
            namespace_labels=self._namespace_labels() if any(p.needs.needs_pod_view for p in pending) else None,
        )
        # Nodes only fill up, ports only get taken and existing anti-affinity only grows during a pass, so a
        # pod at least as big as one that found no node, and alike in everything else, finds none either:
        # reuse the verdict. Not for pods with affinity or spreading, which other placements can help.
        failures: dict[tuple[Any, ...], list[tuple[Amounts, str]]] = {}
        now = self._ts()
        for pod in sorted(pending, key=lambda p: p.seq):
            needs = pod.needs
            known: list[tuple[Amounts, str]] = []
            if not needs.needs_pod_view:
                if pod.shape is None:
                    pod.shape = (
                        needs.namespace, tuple(sorted(needs.labels.items())), tuple(sorted(needs.node_selector.items())),
                        needs.node_affinity, needs.tolerations, needs.host_ports,
                    )
                known = failures.setdefault(pod.shape, [])
            message = next((m for smaller, m in known if smaller.fits_in(pod.requests)), None)
            if message is None:
                chosen, reasons = view.choose(needs)
                if chosen is not None:
                    view.place(needs, chosen)
                    self._bind(pod, chosen.name)
                    continue
                message = unschedulable_message(len(nodes), reasons)
                known[:] = [(r, m) for r, m in known if not pod.requests.fits_in(r)] + [(pod.requests, message)]
            obj = self._pod_obj(pod)
            if kobjects.set_condition(obj, kobjects.condition("PodScheduled", "False", now, "Unschedulable", message)):
                self._store.touch(obj)

    # ------------------------------------------------------------------ reconciliation and sampling

    def _reconcile(self) -> None:
        if not self._dirty:
            return
        if self._retry_all_pending:  # set by every node or pod change that system pods could care about
            self._ensure_node_pods()
        self._schedule()
        self._finish_operations()
        self._dirty = False

    def _sample_before(self, t: float) -> None:
        while self._next_sample < t and self._next_sample <= self._end:
            self._sample(self._next_sample)

    def _sample_through(self, t: float) -> None:
        while self._next_sample <= t and self._next_sample <= self._end:
            self._sample(self._next_sample)

    def _sample(self, at: float) -> None:
        pending, running = self._pod_counts()
        self.timeline.append(
            {"t": round(at, 3), "groups": self._group_counts(), "pending": pending, "running": running}
        )
        self._next_sample = at + self.scenario.timeline_interval

    def _group_counts(self) -> dict[str, dict[str, int]]:
        counts = {}
        busy = self._busy_nodes()
        for key, group in self._groups.items():
            ready = booting = deleting = deallocated = idle = 0
            for inst in group.instances.values():
                node = self._store.get("nodes", "", inst.computer_name) if inst.node_registered else None
                if inst.state == "Deleting":
                    deleting += 1
                elif inst.power in ("deallocating", "deallocated"):
                    deallocated += 1
                elif node is not None and kobjects.is_ready(node):
                    ready += 1
                    idle += inst.computer_name not in busy
                else:
                    booting += 1
            counts[key] = {
                "ready": ready,
                "booting": booting,
                "deleting": deleting,
                "deallocated": deallocated,  # deallocating or deallocated: in capacity, not billed once deallocated
                "target": group.capacity,
                "min": group.spec.min_size,
                "max": group.spec.max_size,
                "idle": idle,  # Ready nodes running nothing but DaemonSet and mirror pods
                "autoscaled": group.spec.autoscaled,
            }
        return counts

    def _busy_nodes(self) -> set[str]:
        busy = set()
        for pod in self._live.values():
            if pod.role in ("daemonset", "mirror"):
                continue
            obj = self._pod_obj(pod)
            if obj["status"].get("phase") not in ("Succeeded", "Failed") and obj["spec"].get("nodeName"):
                busy.add(obj["spec"]["nodeName"])
        return busy

    def _pod_counts(self) -> tuple[int, int]:
        """(pending, running) among pods that are not DaemonSet or mirror pods."""
        pending = running = 0
        for pod in self._live.values():
            if pod.node_bound:
                continue
            obj = self._pod_obj(pod)
            phase = obj["status"].get("phase")
            if phase == "Pending" and not obj["metadata"].get("deletionTimestamp"):
                pending += 1
            elif phase == "Running":
                running += 1
        return pending, running

    def _finished_count(self) -> int:
        return sum(1 for p in self._pods.values() if p.finished is not None and not p.node_bound)

    # ------------------------------------------------------------------ Kubernetes API surface

    @property
    def resource_version(self) -> str:
        with self.lock:
            return str(self._store.revision)

    def k8s_list(self, resource: str, namespace: str | None = None, *,
                 accept: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
        """Deep copies, sorted by namespace/name like the API server's storage order.

        `accept` (a label/field selector) sees the stored object and is applied before copying: a
        `spec.nodeName=` list of a cluster with thousands of finished pods copied them all (140 ms a call
        in many-idle, measured), where the API server answers it from an index.
        """
        with self.lock:
            return [self._render(resource, obj) for obj in self._store.listed(resource, namespace)
                    if accept is None or accept(obj)]

    def k8s_view(self, resource: str) -> list[dict[str, Any]]:
        """The stored objects themselves in storage order, not copies: for in-process readers that never
        change them (the replay converts every pod each poll, and deep copies would dominate its time)."""
        with self.lock:
            return self._store.listed(resource)

    def k8s_get(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            obj = self._store.get(resource, namespace, name)
            if obj is None:
                raise not_found(resource, name)
            return self._render(resource, obj)

    def _render(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        result = copy.deepcopy(obj)
        if resource == "poddisruptionbudgets":
            status = budget_status(obj["spec"], self._selected_pods(obj))
            result["status"] = status_json(status, self._ts())
        return result

    def _selected_pods(self, pdb: Mapping[str, Any]) -> list[dict[str, Any]]:
        selector = pdb["spec"].get("selector", {}).get("matchLabels", {})
        requirements = parse_label_selector(",".join(f"{k}={v}" for k, v in selector.items()))
        namespace = pdb["metadata"]["namespace"]
        return [
            obj
            for obj in self._store.listed("pods", namespace)
            if labels_match(requirements, obj["metadata"].get("labels"))
        ]

    def namespace_exists(self, namespace: str) -> bool:
        with self.lock:
            return self._store.get("namespaces", "", namespace) is not None

    def k8s_create(self, resource: str, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an event, a config map or a pod (pods get sim semantics: scheduled, run for their duration)."""
        with self.lock:
            if not self.namespace_exists(namespace):
                raise not_found("namespaces", namespace)
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name"):
                if not meta.get("generateName"):
                    message = f"{resource} is invalid: metadata.name: Required value: name or generateName is required"
                    raise KubeError(422, "Invalid", message)
                meta["name"] = meta["generateName"] + "".join(self._ids.choice(_NAME_ALPHABET) for _ in range(5))
            if meta.get("namespace") not in (None, namespace):
                message = "the namespace of the provided object does not match the namespace sent on the request"
                raise KubeError(400, "BadRequest", message)
            if self._store.get(resource, namespace, meta["name"]) is not None:
                details = {"name": meta["name"], "kind": resource}
                raise KubeError(409, "AlreadyExists", f'{resource} "{meta["name"]}" already exists', details)
            meta.update(namespace=namespace, uid=self._uid(), creationTimestamp=self._ts())
            meta.pop("resourceVersion", None)
            if resource == "pods":
                return copy.deepcopy(self._pod_obj(self._create_api_pod(obj)))
            if resource == "events":
                self._events_by_reason[str(obj.get("reason") or "")] += 1
                involved = obj.get("involvedObject") or {}
                if obj.get("reason") == "NotTriggerScaleUp" and involved.get("kind") == "Pod":
                    key = (str(involved.get("namespace") or namespace), str(involved.get("name") or ""))
                    self._not_triggered[key] = str(obj.get("message") or "")
                about = f"{involved.get('namespace') or ''}/{involved.get('name') or ''}"
                self._events_by_object.setdefault(about, Counter())[str(obj.get("reason") or "")] += 1
                if len(self._store.table("events")) >= MAX_EVENTS:
                    self._store.drop_oldest("events")
            obj.setdefault("apiVersion", "v1")
            obj.setdefault("kind", {"events": "Event", "configmaps": "ConfigMap"}.get(resource, ""))
            return copy.deepcopy(self._store.put(resource, obj))

    def _create_api_pod(self, obj: dict[str, Any]) -> PodSim:
        spec = obj.setdefault("spec", {})
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            raise KubeError(422, "Invalid", "Pod is invalid: spec.containers: Required value")
        try:
            needs = parse_pod(obj)
            annotations = obj["metadata"].get("annotations") or {}
            raw_duration = annotations.get(DURATION_ANNOTATION)
            duration = None if raw_duration is None else parse_duration(raw_duration)
            raw_usage = annotations.get(CPU_USAGE_ANNOTATION)
            cpu_usage = None if raw_usage is None else parse_cpu_milli(raw_usage)
            if cpu_usage is not None and cpu_usage < 0:
                raise ValueError(f"metadata.annotations[{CPU_USAGE_ANNOTATION}]: must not be negative")
        except SpecError as exc:
            raise KubeError(422, "Invalid", f'Pod "{obj["metadata"]["name"]}" is invalid: {exc.path}: {exc.problem}') from None
        except ValueError as exc:
            raise KubeError(422, "Invalid", f"Pod is invalid: {exc}") from None
        obj["apiVersion"], obj["kind"] = "v1", "Pod"
        obj["status"] = {"phase": "Pending", "qosClass": "Burstable"}
        owner = next((o for o in obj["metadata"].get("ownerReferences") or [] if o.get("controller")), None)
        node = spec.get("nodeName")
        pod = self._add_pod(
            obj,
            role="api",
            workload=f"{obj['metadata']['namespace']}/api",
            owner_kind=owner.get("kind") if owner else None,
            duration=duration,
            needs=needs,
            cpu_usage_milli=cpu_usage,
        )
        if node:
            if node in self._by_node and self._store.get("nodes", "", node) is not None:
                self._bind(pod, node)
        self._reconcile()
        return pod

    def k8s_replace(self, resource: str, namespace: str, name: str, new: dict[str, Any]) -> dict[str, Any]:
        """PUT semantics (also the last step of PATCH): optimistic concurrency on resourceVersion."""
        with self.lock:
            current = self._store.get(resource, namespace, name)
            if current is None:
                raise not_found(resource, name)
            meta = new.get("metadata") or {}
            if meta.get("name", name) != name:
                message = f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
                raise KubeError(400, "BadRequest", message)
            if meta.get("resourceVersion") and meta["resourceVersion"] != current["metadata"]["resourceVersion"]:
                raise conflict(resource, name)
            updated = copy.deepcopy(new)
            updated_meta = updated.setdefault("metadata", {})
            for immutable in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "ownerReferences"):
                if immutable in current["metadata"]:
                    updated_meta[immutable] = current["metadata"][immutable]
            updated["apiVersion"], updated["kind"] = current.get("apiVersion"), current.get("kind")
            if resource == "nodes":
                kobjects.validate_node(updated)
                updated["status"] = copy.deepcopy(current["status"])  # status is a subresource
                updated.setdefault("spec", {})["providerID"] = current["spec"].get("providerID")
            elif resource != "configmaps":
                raise KubeError(405, "MethodNotAllowed", f"the sandbox does not update {resource}")
            was_marked = resource == "nodes" and _marked_for_removal(current)
            self._store.put(resource, updated)
            self._retry_all_pending = self._retry_all_pending or resource == "nodes"
            if resource == "nodes":
                self._note_removal_mark(name, was_marked=was_marked, marked=_marked_for_removal(updated))
            return copy.deepcopy(updated)

    def _note_removal_mark(self, name: str, *, was_marked: bool, marked: bool) -> None:
        """A removal starts when a node is first tainted ToBeDeletedByClusterAutoscaler or cordoned: remember the
        node as it is now (age, utilisation); an unmarked node's removal was called off."""
        if was_marked == marked:
            return
        if not marked:
            self._removal_starts.pop(name, None)
            return
        inst = self._by_node.get(name)
        node = self._store.get("nodes", "", name)
        if inst is None or node is None:
            return
        allocatable = self._allocatable(node)
        used = Amounts()
        pods = 0
        for pod in self._placed.values():
            if pod.node == name and not pod.node_bound and pod.owner_kind != "DaemonSet":
                used += pod.requests
                pods += 1
        shares = [
            used.cpu_milli / allocatable.cpu_milli if allocatable.cpu_milli else 0.0,
            used.memory_bytes / allocatable.memory_bytes if allocatable.memory_bytes else 0.0,
        ]
        created = parse_time(node["metadata"]["creationTimestamp"])
        self._removal_starts[name] = RemovalStart(
            node=name, group=inst.group_key, instance=inst, at=self._t,
            age=(self._at(self._t) - created).total_seconds(), utilization=max(shares), pods=pods,
        )

    def scale_down_order(self) -> list[dict[str, Any]]:
        """Nodes whose removal started (marked) and whose instance was then deleted, in the order they were marked."""
        with self.lock:
            started = [
                r for r in self._removal_starts.values()
                if r.instance.delete_started_at is not None and r.instance.delete_started_at >= r.at
            ]
            return [r.as_json() for r in sorted(started, key=lambda r: (r.at, r.node))]

    def k8s_delete(self, resource: str, namespace: str, name: str, grace_seconds: float | None = None) -> dict[str, Any]:
        with self.lock:
            current = self._store.get(resource, namespace, name)
            if current is None:
                raise not_found(resource, name)
            if resource == "pods":
                return self._delete_pod(self._live[(namespace, name)], grace_seconds)
            if resource == "nodes":
                inst = self._by_node.get(name)
                if inst is not None:
                    inst.node_deleted_by_api = True
                removed = self._remove_node(name)
                return copy.deepcopy(removed or current)
            if resource not in ("configmaps", "events"):
                raise KubeError(405, "MethodNotAllowed", f"the sandbox does not delete {resource}")
            return copy.deepcopy(self._store.drop(resource, namespace, name) or current)

    def evict(self, namespace: str, name: str) -> None:
        """The Eviction API: refuses with 429 when a PodDisruptionBudget would be violated."""
        with self.lock:
            pod = self._live.get((namespace, name))
            if pod is None:
                raise not_found("pods", name)
            obj = self._pod_obj(pod)
            budgets = [
                pdb
                for pdb in self._store.listed("poddisruptionbudgets", namespace)
                if pod.uid in {p["metadata"]["uid"] for p in self._selected_pods(pdb)}
            ]
            if len(budgets) > 1:
                message = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                raise KubeError(500, "InternalError", message)
            if budgets and is_healthy(obj):
                status = budget_status(budgets[0]["spec"], self._selected_pods(budgets[0]))
                if status.disruptions_allowed < 1:
                    raise budget_violation(budgets[0]["metadata"]["name"], status)
            running = obj["status"].get("phase") == "Running" and not obj["metadata"].get("deletionTimestamp")
            if running and not pod.node_bound:
                pod.evicted_while_running = True
            self._delete_pod(pod, None)

    # ------------------------------------------------------------------ ARM surface

    def scale_sets(self, subscription_id: str, resource_group: str) -> list[ScaleSetSim]:
        with self.lock:
            self._check_resource_group(subscription_id, resource_group)
            return sorted(
                (g for g in self._groups.values() if g.resource_group.lower() == resource_group.lower()),
                key=lambda g: g.name.lower(),
            )

    def scale_set(self, subscription_id: str, resource_group: str, name: str) -> ScaleSetSim:
        with self.lock:
            self._check_resource_group(subscription_id, resource_group)
            group = self._groups.get(group_id(resource_group, name))
            if group is None:
                raise ArmError(
                    404,
                    "ResourceNotFound",
                    f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{name}' under resource group "
                    f"'{resource_group}' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix",
                )
            return group

    def _check_resource_group(self, subscription_id: str, resource_group: str) -> None:
        if subscription_id.lower() != self.subscription_id.lower():
            raise ArmError(404, "SubscriptionNotFound", f"The subscription '{subscription_id}' could not be found.")
        if resource_group.lower() not in {rg.lower() for rg in self.scenario.resource_groups}:
            raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{resource_group}' could not be found.")

    def instances(self, group: ScaleSetSim) -> list[InstanceSim]:
        with self.lock:
            return sorted(group.instances.values(), key=lambda i: i.instance_id)

    def provisioning_state(self, group: ScaleSetSim) -> str:
        with self.lock:
            busy = any(op.status == "InProgress" and op.group_key == group.key for op in self._operations.values())
            return "Updating" if busy else "Succeeded"

    def set_capacity(self, group: ScaleSetSim, capacity: int, tags: Mapping[str, str] | None = None) -> Operation:
        """PATCH sku.capacity: grow creates instances, shrink deletes the highest ids (Azure's default scale-in)."""
        with self.lock:
            if capacity < 0 or capacity > MAX_CAPACITY:
                raise ArmError(
                    400, "InvalidParameter", f"The value {capacity} of parameter 'sku.capacity' is out of range. "
                    f"The value must be between 0 and {MAX_CAPACITY}, inclusive.", "sku.capacity",
                )
            if tags is not None:
                group.tags = dict(tags)
            op = Operation(op_id=self._uid(), kind="scale", group_key=group.key, started_at=self._t)
            self._operations[op.op_id] = op
            active = group.active()
            current = len(active)  # capacity can run ahead of instances while an injected failure is pending
            group.generation += 1
            if capacity > current and group.scale_up_failures:
                failure = group.scale_up_failures[0]
                failure.remaining -= 1
                if failure.remaining <= 0:
                    group.scale_up_failures.pop(0)
                op.error_code, op.error_message = failure.code, failure.message
                op.revert_capacity_from, op.revert_capacity_to = capacity, current
                group.capacity = capacity
                self._push(self._t + SCALE_UP_FAILURE_DELAY, "op_fail", op)
                return op
            if capacity > current:
                created = [self._new_instance(group) for _ in range(capacity - current)]
                op.instance_ids = frozenset(i.instance_id for i in created)
            elif capacity < current:
                victims = active[capacity:]
                for inst in victims:
                    self._start_instance_delete(inst)
                op.kind = "delete"
                op.instance_ids = frozenset(i.instance_id for i in victims)
            group.capacity = capacity
            self._dirty = True
            self._finish_operations()
            return op

    def delete_instances(self, group: ScaleSetSim, instance_ids: list[str]) -> Operation:
        """POST .../delete: the named instances go; capacity drops by the number that were active."""
        with self.lock:
            if not instance_ids:
                raise ArmError(400, "InvalidParameter", "The value of parameter instanceIds is invalid.", "instanceIds")
            targets: list[InstanceSim] = []
            for raw in instance_ids:
                inst = group.instances.get(int(raw)) if str(raw).isdigit() else None
                if inst is None:
                    # ARM refuses the whole request; count every instance it named (one gone already: a second delete).
                    for named in instance_ids:
                        self.counters.instance_deletes_refused[f"{group.name}/{named}"] += 1
                    raise ArmError(
                        400,
                        "InvalidParameter",
                        f"The provided instanceId {raw} is not an active Virtual Machine Scale Set VM instanceId.",
                        "instanceIds",
                    )
                if inst not in targets:
                    targets.append(inst)
            op = Operation(
                op_id=self._uid(), kind="delete", group_key=group.key, started_at=self._t,
                instance_ids=frozenset(i.instance_id for i in targets),
            )
            self._operations[op.op_id] = op
            for inst in targets:
                self.counters.instances_deleted[f"{group.name}/{inst.instance_id}"] += 1
                if inst.state != "Deleting":
                    group.capacity -= 1
                    self._start_instance_delete(inst)
            group.generation += 1
            self._dirty = True
            return op

    # ------------------------------------------------------------------ deallocate and start instances

    def deallocate_instances(self, group: ScaleSetSim, instance_ids: list[str] | None) -> Operation:
        """POST .../deallocate: the instances (every one when none are named, as ARM does) shut down and release
        their hardware; they stay in the scale set and in sku.capacity. Already deallocating or deallocated
        ones are left as they are. Not billed once deallocated."""
        with self.lock:
            targets = self._power_targets(group, instance_ids, "deallocate")
            for inst in targets:
                self.counters.instances_deallocated[f"{group.name}/{inst.instance_id}"] += 1
                if inst.power not in ("deallocating", "deallocated"):
                    self._start_deallocation(inst)
            return self._power_operation(group, "deallocate", targets)

    def start_instances(self, group: ScaleSetSim, instance_ids: list[str] | None) -> Operation:
        """POST .../start: deallocating or deallocated instances boot again (the group's boot delay); their node
        registers Ready under the same name. Starting or running ones are left as they are (a no-op success)."""
        with self.lock:
            targets = self._power_targets(group, instance_ids, "start")
            for inst in targets:
                self.counters.instances_started[f"{group.name}/{inst.instance_id}"] += 1
                if inst.power in ("deallocating", "deallocated"):
                    self._start_boot(inst)
            return self._power_operation(group, "start", targets)

    def _power_targets(self, group: ScaleSetSim, instance_ids: list[str] | None, verb: str) -> list[InstanceSim]:
        """The instances a deallocate or start names, all checked before anything changes (ARM refuses the whole
        request). None or [] means every instance of the scale set (those being deleted left out)."""
        if not instance_ids:
            return group.active()
        targets: list[InstanceSim] = []
        for raw in instance_ids:
            inst = group.instances.get(int(raw)) if str(raw).isdigit() else None
            if inst is None:
                raise ArmError(
                    400,
                    "InvalidParameter",
                    f"The provided instanceId {raw} is not an active Virtual Machine Scale Set VM instanceId.",
                    "instanceIds",
                )
            if inst.state == "Deleting":
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    f"Operation '{verb}' is not allowed on VM '{group.name}_{inst.instance_id}' "
                    "since it is being deleted.",
                )
            if inst not in targets:
                targets.append(inst)
        return targets

    def _power_operation(
        self, group: ScaleSetSim, kind: Literal["deallocate", "start"], targets: list[InstanceSim]
    ) -> Operation:
        op = Operation(
            op_id=self._uid(), kind=kind, group_key=group.key, started_at=self._t,
            instance_ids=frozenset(i.instance_id for i in targets),
            power_seqs=tuple((i.instance_id, i.power_seq) for i in targets),
        )
        self._operations[op.op_id] = op
        group.generation += 1
        self._dirty = True
        self._finish_operations()  # nothing to do (already there): succeeded at once
        return op

    def _start_deallocation(self, inst: InstanceSim) -> None:
        """Provisioning Updating, power deallocating: the VM shuts down now, so kubelet stops (the node goes
        NotReady as when its VM is deleted, its workload pods die); deallocated after `deallocate_delay`."""
        group = self._groups[inst.group_key]
        inst.power_seq += 1
        inst.state, inst.power = "Updating", "deallocating"
        group.generation += 1
        dist = self.scenario.deallocate_delay or self.scenario.delete_delay
        delay = dist.sample(self._rng("deallocate", group.key, inst.instance_id, inst.power_seq))
        self._push(self._t + delay, "power_done", (inst, inst.power_seq))
        node = self._store.get("nodes", "", inst.computer_name)
        if node is not None and self._by_node.get(inst.computer_name) is inst:
            self._node_lost(node)
            self._kill_pods_on(inst.computer_name)
        self._dirty = True

    def _start_boot(self, inst: InstanceSim) -> None:
        """Provisioning Updating, power starting: billed again from now; running (the operation done) after
        `provisioning_fraction` of a fresh boot delay, the node Ready after all of it."""
        group = self._groups[inst.group_key]
        inst.power_seq += 1
        inst.starts += 1
        if inst.unbilled_since is not None:
            inst.unbilled_seconds += self._t - inst.unbilled_since
            inst.unbilled_since = None
            self._alive += 1
            self._nodes_max = max(self._nodes_max, self._alive)
        inst.state, inst.power = "Updating", "starting"
        group.generation += 1
        dist = group.spec.boot_delay or self.scenario.boot_delay
        inst.boot_delay = dist.sample(self._rng("start", group.key, inst.instance_id, inst.starts))
        inst.provision_at = self._t + inst.boot_delay * self.scenario.provisioning_fraction
        inst.ready_at = self._t + inst.boot_delay
        self._push(inst.provision_at, "power_done", (inst, inst.power_seq))
        self._push(inst.ready_at, "rebooted", (inst, inst.power_seq))
        self._dirty = True

    def _on_power_done(self, payload: tuple[InstanceSim, int]) -> None:
        inst, seq = payload
        if not inst.alive or inst.power_seq != seq or inst.state == "Deleting":
            return  # preempted by a later deallocate, start or delete
        self._groups[inst.group_key].generation += 1
        if inst.power == "starting":
            inst.state, inst.power = "Succeeded", "running"
        elif inst.power == "deallocating":
            inst.state, inst.power = "Succeeded", "deallocated"
            inst.unbilled_since = self._t
            self._alive -= 1
            node = self._store.get("nodes", "", inst.computer_name)
            if node is not None and self._by_node.get(inst.computer_name) is inst:
                # The cloud node lifecycle controller: the provider reports the instance shut down.
                taints = node.setdefault("spec", {}).setdefault("taints", [])
                if not any(t.get("key") == SHUTDOWN_TAINT for t in taints):
                    taints.append(kobjects.taint_json(Taint(SHUTDOWN_TAINT, "", "NoSchedule"), self._ts()))
                self._store.touch(node)

    def _on_rebooted(self, payload: tuple[InstanceSim, int]) -> None:
        """A started instance has booted: kubelet registers its node again under the same name (the hostname
        is the computer name). A Node object left from before the deallocation is made Ready again (the
        lifecycle controllers lift their taints); a deleted one is created afresh."""
        inst, seq = payload
        if not inst.alive or inst.power_seq != seq or inst.power != "running":
            return
        node = self._store.get("nodes", "", inst.computer_name)
        if node is None or self._by_node.get(inst.computer_name) is not inst:
            inst.node_deleted_by_api = False
            self._register_node(inst)
            return
        now = self._ts()
        kobjects.set_condition(
            node,
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            },
        )
        spec = node.setdefault("spec", {})
        lifted = ("node.kubernetes.io/unreachable", SHUTDOWN_TAINT)
        spec["taints"] = [t for t in spec.get("taints") or [] if t.get("key") not in lifted]
        if not spec["taints"]:
            del spec["taints"]
        node.setdefault("status", {}).setdefault("nodeInfo", {})["bootID"] = self._uid()
        self._store.touch(node)
        self._retry_all_pending = True

    def operation(self, op_id: str) -> Operation | None:
        with self.lock:
            return self._operations.get(op_id)

    def _on_op_fail(self, op: Operation) -> None:
        group = self._groups[op.group_key]
        if group.capacity == op.revert_capacity_from and op.revert_capacity_to is not None:
            group.capacity = op.revert_capacity_to
            group.generation += 1
        op.status, op.ended_at = "Failed", self._t

    def _finish_operations(self) -> None:
        for op in self._operations.values():
            if op.status != "InProgress" or op.error_code is not None:
                continue
            group = self._groups[op.group_key]
            if op.kind == "scale":
                done = all(group.instances.get(i) is None or group.instances[i].state != "Creating" for i in op.instance_ids)
            elif op.kind in ("deallocate", "start"):
                # Done when every instance got there; failed when a later deallocate, start or delete took one over.
                goal = "deallocated" if op.kind == "deallocate" else "running"
                current = [(group.instances.get(i), seq) for i, seq in op.power_seqs]
                if any(inst is None or inst.power_seq != seq for inst, seq in current):
                    op.status, op.ended_at = "Failed", self._t
                    op.error_code, op.error_message = "OperationPreempted", PREEMPTED_MESSAGE
                    continue
                done = all(inst is not None and inst.power == goal for inst, _ in current)
            else:
                done = all(i not in group.instances for i in op.instance_ids)
            if done:
                op.status, op.ended_at = "Succeeded", self._t

    def take_token(self, key: str, bucket: str) -> tuple[bool, int, float, str] | None:
        """Spend one token of a throttling bucket; None when the scenario turns throttling off."""
        with self.lock:
            if not self.scenario.arm_throttling:
                return None
            token_bucket = self._buckets.get((key, bucket))
            if token_bucket is None:
                token_bucket = self._buckets[(key, bucket)] = TokenBucket.full(BUCKETS[bucket], self._t)
            allowed, remaining, retry = token_bucket.take(self._t)
            if not allowed:
                self.counters.arm_throttled += 1
            return allowed, remaining, retry, token_bucket.header(remaining)

    # ------------------------------------------------------------------ measured usage (Azure Monitor doubles)

    def node_cpu(self, names: Iterable[str] | None = None) -> dict[str, NodeCpu]:
        """What a monitoring agent would measure now on each Ready node (all, or those named).

        A pod uses its CPU request while it holds its node's resources (running or terminating),
        unless its workload's `cpu_usage`, its DaemonSet's, or its `sandbox.autoscaler/cpu-usage`
        annotation says otherwise. No history is kept: a window of any length reads as now.
        A NotReady node (booting, or its VM going away) has no agent reporting, so no entry.
        """
        with self.lock:
            wanted = None if names is None else set(names)
            used: dict[str, int] = {}
            for pod in self._placed.values():
                if pod.node is not None:
                    used[pod.node] = used.get(pod.node, 0) + pod.cpu_used_milli
            result: dict[str, NodeCpu] = {}
            for name, inst in self._by_node.items():
                if wanted is not None and name not in wanted:
                    continue
                node = self._store.get("nodes", "", name)
                if node is None or inst.state == "Deleting" or not kobjects.is_ready(node):
                    continue
                capacity = self._groups[inst.group_key].spec.capacity.cpu_milli
                # A node cannot use more than it has, whatever the pods on it ask for.
                since = parse_time(node["metadata"]["creationTimestamp"])
                result[name] = NodeCpu(min(used.get(name, 0), capacity), capacity, since)
            return result

    # ------------------------------------------------------------------ faults and counters

    def inject_fault(
        self,
        target: tuple[str, str, str] | list[str],
        *,
        status: int,
        count: int = 1,
        code: str | None = None,
        message: str | None = None,
        retry_after: float | None = None,
    ) -> Fault:
        """The next `count` calls matching (api, method, resource) fail with `status` (see sandbox.faults)."""
        with self.lock:
            fault = make_fault(target, status=status, count=count, code=code, message=message, retry_after=retry_after)
            self._faults.append(fault)
            return fault

    def fail_next_scale_up(
        self, scale_set: str, *, code: str = "QuotaExceeded", message: str | None = None, count: int = 1,
        resource_group: str | None = None,
    ) -> None:
        """The next `count` capacity increases of the scale set fail as LROs with `code`; no instances appear."""
        with self.lock:
            matches = [
                g for g in self._groups.values()
                if g.name == scale_set and (resource_group is None or g.resource_group.lower() == resource_group.lower())
            ]
            if len(matches) != 1:
                raise ValueError(f"no single scale set named {scale_set!r}")
            group = matches[0]
            text = message or default_scale_up_message(code, group.spec.vm_size, group.spec.location)
            group.scale_up_failures.append(ScaleUpFailure(group.name, code, text, count))

    def take_fault(self, api: str, method: str, resource: str) -> Fault | None:
        with self.lock:
            for fault in self._faults:
                if fault.matches(api, method, resource):
                    fault.remaining -= 1
                    self.counters.faults_triggered += 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
            return None

    def faults(self) -> list[dict[str, Any]]:
        with self.lock:
            return [f.describe() for f in self._faults]

    def count_call(self, api: str, operation: str, *, write: bool) -> None:
        with self.lock:
            self.counters.count(api, operation, write=write)

    # ------------------------------------------------------------------ reports

    def done(self) -> tuple[bool, str | None]:
        """(done, why): the duration ran out, or no arrivals are due, every pod with a duration has
        finished and every pod without one (a service) is running, apart from pods no node group could
        ever hold (they stay Pending; see `_unplaceable`)."""
        with self.lock:
            if self._t >= self._end:
                return True, "duration-reached"
            if self._arrivals_due or not (self.scenario.workloads or self._owners):
                return False, None
            expected = {e.workload for e in self.scenario.expect_unschedulable}
            for pod in self._live.values():
                if pod.role != "workload":
                    continue
                phase = self._pod_obj(pod)["status"].get("phase")
                if (phase == "Pending" and not self._unplaceable(pod) and pod.workload not in expected) or (
                    pod.duration is not None and phase == "Running"
                ):
                    return False, None
            return True, "workload-complete"

    def _expected_unschedulable(self) -> dict[str, Any]:
        """Per workload of the scenario's `expect_unschedulable`: how many pods should stay Pending, and those that do,
        each with the autoscaler's latest NotTriggerScaleUp message about it (None if it has written none)."""
        report: dict[str, Any] = {}
        for expected in self.scenario.expect_unschedulable:
            pending = [
                {"pod": f"{pod.namespace}/{pod.name}",
                 "reason": self._not_triggered.get((pod.namespace, pod.name))}
                for pod in self._live.values()
                if pod.workload == expected.workload and not pod.node_bound
                and self._pod_obj(pod)["status"].get("phase") == "Pending"
                and not self._pod_obj(pod)["metadata"].get("deletionTimestamp")
            ]
            spec = next(w for w in self.scenario.workloads if f"{w.namespace}/{w.name}" == expected.workload)
            count = expected.count if expected.count is not None else spec.count * spec.repeat_times
            report[expected.workload] = {"expected": count, "pending": sorted(pending, key=lambda p: p["pod"])}
        return report

    def _pending_unplaceable(self) -> int:
        return sum(
            1 for pod in self._live.values()
            if not pod.node_bound and pod.node is None and not pod.terminating
            and self._pod_obj(pod)["status"].get("phase") == "Pending" and self._unplaceable(pod)
        )

    def state(self) -> dict[str, Any]:
        with self.lock:
            pending, running = self._pod_counts()
            done, why = self.done()
            return {
                "now": rfc3339(self._at(self._t)),
                "sim_seconds": round(self._t, 3),
                "groups": self._group_counts(),
                "pending": pending,
                "pending_unplaceable": self._pending_unplaceable(),
                "running": running,
                "finished": self._finished_count(),
                "arrivals_due": self._arrivals_due,
                "done": done,
                "done_reason": why,
                "idle_nodes": self._idle_nodes(),
                **({"expect_unschedulable": self._expected_unschedulable()} if self.scenario.expect_unschedulable else {}),
            }

    def _idle_nodes(self) -> dict[str, list[str]]:
        """Per group, the names of the Ready nodes counted `idle` in `groups` (nothing but DaemonSet and mirror pods)."""
        busy = self._busy_nodes()
        idle: dict[str, list[str]] = {}
        for key, group in self._groups.items():
            names = []
            for inst in group.instances.values():
                node = self._store.get("nodes", "", inst.computer_name) if inst.node_registered else None
                if inst.state != "Deleting" and node is not None and kobjects.is_ready(node) and inst.computer_name not in busy:
                    names.append(inst.computer_name)
            idle[key] = sorted(names)
        return idle

    def _iter_instances(self) -> Iterator[InstanceSim]:
        for group in self._groups.values():
            yield from group.instances.values()
        yield from self._gone

    def report(self) -> dict[str, Any]:
        with self.lock:
            node_seconds: dict[str, float] = {key: 0.0 for key in self._groups}
            for inst in self._iter_instances():
                until = inst.vanished_at if inst.vanished_at is not None else self._t
                unbilled = inst.unbilled_seconds
                if inst.unbilled_since is not None:  # deallocated now (or when it vanished)
                    unbilled += until - inst.unbilled_since
                node_seconds[inst.group_key] += max(0.0, until - inst.created_at - unbilled)
            pods = [p for p in sorted(self._pods.values(), key=lambda p: p.seq) if not p.node_bound]
            summaries = []
            for pod in pods:
                obj = self._store.get("pods", *pod.key) if self._live.get(pod.key) is pod else None
                phase = obj["status"].get("phase") if obj else None
                summaries.append(
                    {
                        "namespace": pod.namespace,
                        "name": pod.name,
                        "workload": pod.workload,
                        "node": pod.node,
                        "group": pod.group,
                        "phase": phase or "Deleted",
                        "outcome": pod_outcome(pod, phase),
                        "cpu_milli": pod.requests.cpu_milli,
                        "memory_bytes": pod.requests.memory_bytes,
                        "extended": dict(pod.requests.scalars),
                        "created": seconds(pod.created),
                        "bound": seconds(pod.bound),
                        "started": seconds(pod.started),
                        "finished": seconds(pod.finished),
                        "stopped": seconds(pod.stopped),
                        "evicted_while_running": pod.evicted_while_running,
                        "killed": pod.killed,
                    }
                )
            unschedulable = sum(
                1
                for p in pods
                if self._live.get(p.key) is p
                and any(
                    c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                    for c in self._pod_obj(p)["status"].get("conditions") or []
                )
                and self._pod_obj(p)["status"].get("phase") == "Pending"
            )
            pending, running = self._pod_counts()
            done, why = self.done()
            waits = [p.bound - p.created for p in pods if p.bound is not None]
            return {
                "scenario": self.scenario.name,
                "seed": self.seed,
                "start": rfc3339(self.start),
                "now": rfc3339(self._at(self._t)),
                "sim_seconds": round(self._t, 3),
                "duration_seconds": self._end,
                "done": done,
                "done_reason": why,
                "pods_total": len(pods),
                "pods_completed": sum(1 for p in pods if p.finished is not None),
                "pods_pending": pending,
                "pods_running": running,
                "pods_unschedulable": unschedulable,
                "pods_unplaceable": self._pending_unplaceable(),
                "running_pods_evicted": sum(1 for p in pods if p.evicted_while_running),
                "pods_killed": sum(1 for p in pods if p.killed),
                "pod_wait_seconds": distribution(waits),
                "node_seconds": round(sum(node_seconds.values()), 3),
                "node_seconds_by_group": {k: round(v, 3) for k, v in node_seconds.items()},
                "nodes_max": self._nodes_max,
                "nodes_by_group": self._group_counts(),
                "api_calls": self.counters.as_json(),
                "events_by_reason": dict(sorted(self._events_by_reason.items())),
                "events_by_object": {k: dict(sorted(v.items())) for k, v in sorted(self._events_by_object.items())},
                "instances_created_by_group": {k: self._created_by_group.get(k, 0) for k in self._groups},
                "scale_down_order": self.scale_down_order(),
                "expect_unschedulable": self._expected_unschedulable(),
                "timeline": copy.deepcopy(self.timeline),
                "pods": summaries,
            }
