"""The scenario's AKS virtual node: virtual-kubelet's Node, and Azure Container Instances running the pods bound to it.

`VirtualNodePart` owns the virtual node (when the scenario has `virtual_node`), the container groups ACI
holds for pods bound there (`_aci_groups`, by pod uid, from creation until deleted), when container groups
were created (the creation-rate windows), the pods the provider refused and left Pending (`_aci_stuck`),
and the tallies the report shows: refusals by kind, start latencies, vCPU- and GB-seconds billed, peak cores.
The pure rules (labels, sizes, what ACI refuses and how it says so) are `sandbox.model.aci`.

The Node exists from the start, Ready, as virtual-kubelet registers it. It is no scale set's instance (no
providerID, an InternalIP no instance has), so the world never removes it, and DaemonSet and mirror pods
never go there (`_ensure_node_pods` looks only at scale set and static nodes; AKS does not deploy DaemonSets
to virtual nodes). Clients update it as any node (taints, cordon); the scheduler reads it as any node.

Binding a pod to it hands the pod to the provider (`_aci_create`, called from the scheduler's `_bind`)
instead of running it at once:
- refused (a feature ACI cannot run, the creation rate, the regional quotas: container groups that may exist at
  once, `max_container_groups`, and cores): the pod fails as
  virtual-kubelet's `handleProviderError` does: `Pending` (restartPolicy Always or OnFailure) or `Failed`
  (Never), reason `ProviderFailed`, the error as its message, and a `ProviderCreateFailed` Event. A Failed pod
  releases its node and its Job replaces it after the Job controller's back-off, unless that failure took the Job
  past its backoffLimit (sandbox.world.pod_lifecycle): then the Job has failed and its work never runs; a Pending one stays bound to the node for
  good (virtual-kubelet's status sync skips ProviderFailed pods and nothing retries them), counted by its
  owner, until deleted. Such pods do not hold up `done` (nothing in the world will ever change them), and
  the report lists them (`virtual_node.pods_stuck_names`).
- created: `Pending` (bound, container waiting in ContainerCreating) for a start latency drawn from the
  pod's own seeded stream (`_rng("aci-start", uid)`), then `Running` and Ready; its duration counts from
  then, and so does its wait in the report (created to started), so VM and ACI placements compare fairly.
Releasing a pod's node resources (`_release`: it completed, failed, was deleted, evicted or its node went)
deletes its container group at once: its cores and its place in the container-group count go back to the quota and
its billing stops. (Whether azure-aci keeps a finished pod's group until the pod is deleted is reported both ways.) Deleting a pod
there removes it at once, graceful or not: virtual-kubelet deletes the container group and then force-deletes
the pod (`_delete_pod`).

Billing: per pod, vCPU-seconds = ACI cores x seconds from the container group's creation to its deletion, GB-seconds
likewise with memory in GB of 10^9 bytes (sizes as the azure-aci provider converts requests:
`aci.container_group_size`). ACI bills from the start of the image pull (`aci.BILLING_SOURCE`), so the start
latency is billed; `bill_start_latency: false` bills from the container running instead. Prices are the Retail
Prices rows of `aci.ACI_METERS` unless the scenario sets its own.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from sandbox.model import aci
from sandbox.model.units import rfc3339
from sandbox.world import kobjects
from sandbox.world.core import INITIAL_NODE_AGE, WorldCore
from sandbox.world.kube_resources import MAX_EVENTS
from sandbox.world.metrics import percentile
from sandbox.world.pods import PodSim

PROVIDER_FAILED = "ProviderFailed"  # virtual-kubelet's pod status reason when the provider refuses a pod


@dataclass(frozen=True, slots=True)
class ContainerGroup:
    """One pod's container group on ACI, from its creation (the bind) until it is deleted."""

    pod: PodSim
    size: aci.ContainerGroupSize
    created: float  # sim seconds


@dataclass(frozen=True, slots=True)
class VirtualNodeUsage:
    """The virtual node's use of ACI at one moment (`World.virtual_node_usage`)."""

    node: str
    cores_in_use: float  # CPU of the container groups that exist (creating or running), as ACI counts it
    quota_cores: int
    creates_last_5min: int  # container groups created in the last 300 s (refusals are not creations)
    creates_last_hour: int
    creates_per_5min: int  # the limits those are held to
    creates_per_hour: int
    container_groups: int  # container groups that exist (creating or running), ACI's `ContainerGroups` usage
    max_container_groups: int  # the limit that is held to
    creating: tuple[str, ...]  # "<namespace>/<name>" of pods whose container group is starting
    running: tuple[str, ...]  # ... whose container runs
    stuck: tuple[str, ...]  # ... refused and left Pending (ProviderFailed) for good

    def as_json(self) -> dict[str, Any]:
        return {
            "node": self.node, "cores_in_use": self.cores_in_use, "quota_cores": self.quota_cores,
            "creates_last_5min": self.creates_last_5min, "creates_last_hour": self.creates_last_hour,
            "creates_per_5min": self.creates_per_5min, "creates_per_hour": self.creates_per_hour,
            "container_groups": self.container_groups, "max_container_groups": self.max_container_groups,
            "creating": list(self.creating), "running": list(self.running), "stuck": list(self.stuck),
        }


class VirtualNodePart(WorldCore):
    """The virtual node and ACI behind it. See the module docstring."""

    def _init_virtual_node_state(self) -> None:
        spec = self.scenario.virtual_node
        self._virtual_node_name: str | None = spec.name if spec is not None else None
        self._aci_groups: dict[str, ContainerGroup] = {}  # by pod uid
        self._aci_held = 0  # hundredths of a core held by _aci_groups
        self._aci_peak = 0  # the most ever held at once, likewise
        self._aci_peak_groups = 0  # the most container groups that existed at once
        self._aci_creates: deque[float] = deque()  # creation times within the last hour, oldest first
        self._aci_stuck: dict[str, PodSim] = {}  # refused and left Pending, by uid, until released
        self._aci_refused: Counter[str] = Counter()  # refusals by kind (sandbox.model.aci.REFUSAL_KINDS)
        self._aci_refused_quota: Counter[str] = Counter()  # quota refusals by quota (sandbox.model.aci.QUOTAS)
        self._aci_refused_uids: set[str] = set()
        self._aci_latencies: list[float] = []  # creation to running, per started container group
        self._aci_ran: list[str] = []  # "<namespace>/<name>" of pods whose container ran, in start order
        self._aci_vcpu_seconds = 0.0  # billed by container groups already deleted
        self._aci_gb_seconds = 0.0
        self._aci_ips = itertools.count()

    def _init_virtual_node(self) -> None:
        """virtual-kubelet's Node, registered when the add-on was enabled (before the start); draws ids only
        when the scenario has a virtual node, so worlds without one are unchanged."""
        spec = self.scenario.virtual_node
        if spec is None:
            return
        created = rfc3339(self.start - INITIAL_NODE_AGE)
        capacity = aci.node_capacity(spec.version)
        node = kobjects.node_object(
            name=spec.name, uid=self._uid(), created=created, provider_id="",
            labels=aci.node_labels(spec.name, spec.version), taints=(aci.TAINT,), capacity=capacity,
            allocatable=capacity, internal_ip=aci.INTERNAL_IP, pod_cidr="", machine_id="",
            kubelet_version=aci.KUBELET_VERSION, container_runtime="",
        )
        # virtual-kubelet sets no pod CIDR and reports its own pod's IP as the only address; the provider
        # reports fixed conditions; nodeInfo carries what virtual-kubelet fills in (the rest empty).
        for key in ("podCIDR", "podCIDRs"):
            node["spec"].pop(key, None)
        node["metadata"]["annotations"].pop("volumes.kubernetes.io/controller-managed-attach-detach", None)
        status = node["status"]
        for amounts in (status["capacity"], status["allocatable"]):
            amounts["memory"] = "4Ti"  # as the provider writes it (resource_list would say 4096Gi)
        status["addresses"] = [{"type": "InternalIP", "address": aci.INTERNAL_IP}]
        status["conditions"] = aci.node_conditions(created)
        status["nodeInfo"] = {
            "architecture": "amd64", "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "",
            "kubeProxyVersion": "", "kubeletVersion": aci.KUBELET_VERSION, "machineID": "",
            "operatingSystem": "Linux", "osImage": "", "systemUUID": "",
        }
        self._store.put("nodes", node)
        self._retry_all_pending = True

    def _is_virtual_node(self, name: str | None) -> bool:
        return name is not None and name == self._virtual_node_name

    # ------------------------------------------------------------------ the provider

    def _aci_create(self, pod: PodSim, obj: dict[str, Any]) -> None:
        """virtual-kubelet's CreatePod for a pod just bound here (`_bind` did the scheduler's bookkeeping and
        wrote the status of a pod that runs at once, which this replaces)."""
        spec = self.scenario.virtual_node
        assert spec is not None  # only the virtual node's pods come here
        status = obj["status"]
        for key in ("startTime", "hostIP", "hostIPs", "podIP", "podIPs"):
            status.pop(key, None)
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
        self._trim_creates()
        refusal = aci.check_create(
            obj, version=spec.version, region=self.scenario.location, quota_cores=spec.quota_cores,
            creates_per_5min=spec.creates_per_5min, creates_per_hour=spec.creates_per_hour,
            held_centicores=self._aci_held, creates=self._aci_creates, now=self._t,
            max_container_groups=spec.max_container_groups, live_groups=len(self._aci_groups),
        )
        if refusal is not None:
            self._aci_refuse(pod, obj, refusal)
            return
        size = aci.container_group_size(obj)
        self._aci_groups[pod.uid] = ContainerGroup(pod, size, self._t)
        self._aci_held += size.centicores
        self._aci_peak = max(self._aci_peak, self._aci_held)
        self._aci_peak_groups = max(self._aci_peak_groups, len(self._aci_groups))
        self._aci_creates.append(self._t)
        now = self._ts()
        status["phase"] = "Pending"
        for kind in ("ContainersReady", "Ready"):
            kobjects.set_condition(obj, kobjects.condition(kind, "False", now, "ContainersNotReady",
                                                           "containers with unready status: [main]"))
        status["containerStatuses"] = [kobjects.container_status()]  # waiting: ContainerCreating
        self._aci_event(pod, "Normal", "ProviderCreateSuccess", "Create pod in provider successfully")
        latency = spec.start_latency.sample(self._rng("aci-start", pod.uid))
        self._push(self._t + latency, "aci_started", pod)
        self._store.touch(obj)

    def _aci_refuse(self, pod: PodSim, obj: dict[str, Any], refusal: aci.Refusal) -> None:
        """virtual-kubelet's handleProviderError: Pending, or Failed under restartPolicy Never; ProviderFailed."""
        self._aci_refused[refusal.kind] += 1
        if refusal.quota is not None:
            self._aci_refused_quota[refusal.quota] += 1
        self._aci_refused_uids.add(pod.uid)
        pod.refused = True
        status = obj["status"]
        never = obj["spec"].get("restartPolicy") == "Never"
        status["phase"] = "Failed" if never else "Pending"
        status["reason"] = PROVIDER_FAILED
        status["message"] = refusal.message
        status.pop("containerStatuses", None)  # the provider never made a container
        self._aci_event(pod, "Warning", "ProviderCreateFailed", refusal.message)
        self._store.touch(obj)
        if never:
            pod.stopped = self._t
            self._release(pod)  # a Failed pod holds nothing on its node
            # Its Job makes another after the Job controller's back-off, unless this failure took the Job past
            # its backoffLimit (`_job_pod_failed`): then the Job has failed and makes no more.
            delay = self._job_pod_failed(pod)
            if delay is not None:
                self._push(self._t + delay, "job_backoff_over", pod)
            ttl = pod.template.workload.ttl_after_finished if pod.template is not None else None
            if ttl is not None:  # gone with the rest of its Job's finished pods, as a completed one would be
                self._push(self._t + ttl, "ttl_expired", pod)
        else:
            self._aci_stuck[pod.uid] = pod

    def _on_aci_started(self, pod: PodSim) -> None:
        """The container group's container runs: the pod is Running and Ready, its duration starts now."""
        group = self._aci_groups.get(pod.uid)
        if group is None or self._live.get(pod.key) is not pod:
            return  # deleted while it was being created
        obj = self._pod_obj(pod)
        if obj["status"].get("phase") != "Pending" or obj["metadata"].get("deletionTimestamp"):
            return
        now = self._ts()
        status = obj["status"]
        status["phase"] = "Running"
        status["startTime"] = now
        status["podIP"] = aci.pod_ip(next(self._aci_ips))
        status["podIPs"] = [{"ip": status["podIP"]}]
        for kind in ("Initialized", "ContainersReady", "Ready"):
            kobjects.set_condition(obj, kobjects.condition(kind, "True", now))
        status["containerStatuses"] = [kobjects.container_status(running_since=now)]
        pod.started = self._t
        self._aci_latencies.append(self._t - group.created)
        self._aci_ran.append(f"{pod.namespace}/{pod.name}")
        if pod.duration is not None:
            self._push(self._t + pod.duration, "complete", pod)
        self._store.touch(obj)

    def _aci_release(self, pod: PodSim) -> None:
        """The pod no longer needs its container group (called from `_release`): delete it, bill its run."""
        self._aci_stuck.pop(pod.uid, None)
        group = self._aci_groups.pop(pod.uid, None)
        if group is None:
            return
        self._aci_held -= group.size.centicores
        ran = self._aci_billed_seconds(group)
        self._aci_vcpu_seconds += group.size.cores * ran
        self._aci_gb_seconds += group.size.gb * ran

    def _aci_billed_seconds(self, group: ContainerGroup) -> float:
        """Seconds billed so far: from the creation (the image pull included; `aci.BILLING_SOURCE`), or, without
        `bill_start_latency`, from the container running; until now (the group is deleted when its pod stops)."""
        spec = self.scenario.virtual_node
        since = group.created if spec is not None and spec.bill_start_latency else group.pod.started
        return 0.0 if since is None else max(0.0, self._t - since)

    def _aci_stuck_pod(self, pod: PodSim) -> bool:
        """Refused by the provider and left Pending: it will never run (see the module docstring)."""
        return pod.uid in self._aci_stuck

    def _pending_provider_failed(self) -> int:
        """Live pods refused by the provider and left Pending (`state()`'s `pending_provider_failed`)."""
        return sum(1 for pod in self._aci_stuck.values() if self._live.get(pod.key) is pod)

    def _trim_creates(self) -> None:
        while self._aci_creates and self._t - self._aci_creates[0] >= aci.CREATE_WINDOWS[-1]:
            self._aci_creates.popleft()

    def _aci_event(self, pod: PodSim, kind: str, reason: str, message: str) -> None:
        """An Event as virtual-kubelet's pod controller records it (source `<node>/pod-controller`). These are
        the world's own: they are not counted in `events_by_reason`, which counts what clients create."""
        now = self._ts()
        nanos = int(self._at(self._t).timestamp() * 1e9)
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod.name}.{nanos:x}", "namespace": pod.namespace, "uid": self._uid(),
                         "creationTimestamp": now},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                               "uid": pod.uid},
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": f"{self._virtual_node_name}/pod-controller"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        if len(self._store.table("events")) >= MAX_EVENTS:
            self._store.drop_oldest("events")
        self._store.put("events", event)

    # ------------------------------------------------------------------ reading it

    def _aci_billed(self) -> tuple[float, float]:
        """(vCPU-seconds, GB-seconds) billed so far, container groups still running included."""
        vcpu, gb = self._aci_vcpu_seconds, self._aci_gb_seconds
        for group in self._aci_groups.values():
            ran = self._aci_billed_seconds(group)
            vcpu += group.size.cores * ran
            gb += group.size.gb * ran
        return vcpu, gb

    def _aci_names(self, pods: list[PodSim]) -> tuple[str, ...]:
        return tuple(f"{p.namespace}/{p.name}" for p in sorted(pods, key=lambda p: p.seq))

    def virtual_node_usage(self) -> VirtualNodeUsage | None:
        """The virtual node's use of ACI now (None without a virtual node): cores held by container groups that
        exist (creating or running) against the quota, container groups created in the last 5 minutes and the
        last hour against their limits, and the pods creating, running and stuck (refused, left Pending)."""
        with self.lock:
            spec = self.scenario.virtual_node
            if spec is None:
                return None
            self._trim_creates()
            groups = [g.pod for g in self._aci_groups.values()]
            return VirtualNodeUsage(
                node=spec.name,
                cores_in_use=self._aci_held / 100,
                quota_cores=spec.quota_cores,
                creates_last_5min=sum(1 for at in self._aci_creates if self._t - at < aci.CREATE_WINDOWS[0]),
                creates_last_hour=len(self._aci_creates),
                creates_per_5min=spec.creates_per_5min,
                creates_per_hour=spec.creates_per_hour,
                container_groups=len(self._aci_groups),
                max_container_groups=spec.max_container_groups,
                creating=self._aci_names([p for p in groups if p.started is None]),
                running=self._aci_names([p for p in groups if p.started is not None]),
                stuck=self._aci_names([p for p in self._aci_stuck.values() if self._live.get(p.key) is p]),
            )

    def virtual_node_report(self) -> dict[str, Any] | None:
        """The report's `virtual_node` block (None without a virtual node); see docs/scenarios.md."""
        with self.lock:
            spec = self.scenario.virtual_node
            if spec is None:
                return None
            usage = self.virtual_node_usage()
            assert usage is not None
            vcpu, gb = self._aci_billed()
            latencies = sorted(self._aci_latencies)
            placements: dict[str, Counter[str]] = {}
            for pod in sorted(self._pods.values(), key=lambda p: p.seq):
                if pod.node_bound:
                    continue
                where = ("none" if pod.node is None else "vm" if not self._is_virtual_node(pod.node)
                         else "refused" if pod.uid in self._aci_refused_uids else "virtual")
                placements.setdefault(pod.workload, Counter())[where] += 1
            return {
                "node": spec.name,
                "version": spec.version,
                "quota_cores": spec.quota_cores,
                "creates_per_5min": spec.creates_per_5min,
                "creates_per_hour": spec.creates_per_hour,
                "max_container_groups": spec.max_container_groups,
                "pods_started": len(latencies),
                "pods_refused": {kind: self._aci_refused.get(kind, 0) for kind in aci.REFUSAL_KINDS},
                "pods_refused_by_quota": {quota: self._aci_refused_quota.get(quota, 0) for quota in aci.QUOTAS},
                "pods_stuck": len(usage.stuck),
                "cores_in_use": usage.cores_in_use,
                "peak_cores": self._aci_peak / 100,
                "container_groups": usage.container_groups,
                "peak_container_groups": self._aci_peak_groups,
                "vcpu_seconds": round(vcpu, 3),
                "gb_seconds": round(gb, 3),
                "cost_usd": round(aci.seconds_cost(vcpu, gb, spec.price_vcpu_second, spec.price_gb_second), 6),
                "price_vcpu_second": spec.price_vcpu_second,
                "price_gb_second": spec.price_gb_second,
                "bill_start_latency": spec.bill_start_latency,
                "start_latency_p50": round(percentile(latencies, 0.5), 3),
                "start_latency_p95": round(percentile(latencies, 0.95), 3),
                "pods_ran": list(self._aci_ran),
                "pods_stuck_names": list(usage.stuck),
                "placements": {
                    workload: {kind: counts.get(kind, 0) for kind in ("virtual", "refused", "vm", "none")}
                    for workload, counts in sorted(placements.items())
                },
                # Jobs failed by their backoffLimit (sandbox.world.pod_lifecycle `jobs_report`).
                "jobs": self.jobs_report(),
            }
