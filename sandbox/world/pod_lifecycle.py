"""Pod lifecycle in the world: arrivals, creation, running to completion, eviction, deletion and replacement.

`PodLifecyclePart` owns every pod the world has made (`_pods`, by uid) and the live ones (`_live`,
by namespace/name), the scenario's arrival schedule (`_arrivals_due`), the owners of replayed
workloads, pod naming, and the DaemonSet and kubelet mirror pods it keeps on each Ready node. It
plays the controllers around pods: the Job and ReplicaSet controllers replace pods that will not
finish, a ReplicaSet with a `scale` grows and shrinks to each step's replicas (its scale-in victims
chosen as the controller ranks them, `sandbox.world.replicaset`), the kubelet runs a pod for its duration
and kills it when its node's VM goes away, graceful deletion holds a pod's node for its grace period,
and the Eviction API honours PodDisruptionBudgets.

Jobs fail by their backoffLimit (`JOB_BACKOFF_LIMIT`, Kubernetes' default 6; Kubernetes docs, Jobs, "Pod
backoff failure policy"): once more of a Job's pods have failed than that, the Job controller marks the Job
Failed (reason BackoffLimitExceeded), deletes its active pods (at once) and makes no more, so its work never runs. The
failures counted are the pods a virtual node's provider refused (Failed, ProviderFailed: `_job_pod_failed`).
Pods killed with their node or evicted are not counted: the trace's Jobs are taken to carry the pod failure
policy the Kubernetes docs give for that (`podFailurePolicy` rule Ignore on condition DisruptionTarget), an
assumption `jobs_report` states.
Binding a pod to a node is the scheduler's (`sandbox.world.scheduler`).
"""

from __future__ import annotations

import copy
import functools
import itertools
import random
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.domain import Taint, Toleration
from sandbox.model.podspec import PodNeeds, SpecError, parse_pod
from sandbox.model.resources import EPHEMERAL_STORAGE, Amounts
from sandbox.model.scenario import DaemonSetSpec, MirrorPodSpec, WorkloadSpec
from sandbox.model.selectors import labels_match, parse_label_selector
from sandbox.model.units import parse_cpu_milli, parse_duration, rfc3339
from sandbox.world import kobjects
from sandbox.world.core import INITIAL_NODE_AGE, NAME_ALPHABET, WorldCore
from sandbox.world.disruption import budget_status, budget_violation, is_healthy
from sandbox.world.errors import KubeError, not_found
from sandbox.world.pods import PodRole, PodSim, PodTemplate
from sandbox.world.replicaset import is_active, scale_in_victims
from sandbox.world.scheduling import untolerated_taint

DURATION_ANNOTATION = "sandbox.autoscaler/duration"  # API-created pods: how long the container runs
CPU_USAGE_ANNOTATION = "sandbox.autoscaler/cpu-usage"  # API-created pods: CPU they use, as measured
JOB_BACKOFF_LIMIT = 6  # a Job's spec.backoffLimit when unset (Kubernetes' default); the trace's Jobs set none
# The Job controller's delay before replacing a failed pod: 10 s, doubled per failure of the Job, at most 6 min.
JOB_BACKOFF_BASE_S = 10.0
JOB_BACKOFF_MAX_S = 360.0
JOB_ASSUMPTIONS = (
    "A Job fails once more than backoffLimit (6, Kubernetes' default) of its pods have failed; a failed Job makes "
    "no more pods and its active pods are deleted at once (no grace period), so its unfinished tasks never run.",
    "Only pods the virtual node's provider refused (ProviderFailed) count as failures: the Jobs are taken to "
    "ignore disruptions (podFailurePolicy Ignore on DisruptionTarget), so pods killed with their node or evicted "
    "do not.",
)


@dataclass(frozen=True, slots=True)
class ReplicasChange:
    """A scaled ReplicaSet's `spec.replicas` becomes `replicas` (one step of the workload's `scale`)."""

    workload: WorkloadSpec
    replicas: int


class PodLifecyclePart(WorldCore):
    """Pods from arrival to deletion. See the module docstring."""

    def _init_pod_state(self) -> None:
        self._pods: dict[str, PodSim] = {}  # every pod ever, by uid
        self._live: dict[tuple[str, str], PodSim] = {}
        self._node_pods: dict[tuple[str, str], str] = {}  # (system pod id, node) -> uid
        self._names_used: dict[str, itertools.count[int]] = {}
        self._arrivals_due = 0
        self._owners: dict[str, str] = {}  # owner uid of each workload given pods by add_arrival
        self._daemon_needs: dict[tuple[str, str], PodNeeds] = {}  # each DaemonSet's pod, for placement
        # Scaled ReplicaSets (a workload's `scale`) by "namespace/name": the replicas wanted now, and a new pod's
        # draw from the workload's own random stream.
        self._replicas: dict[str, int] = {}
        self._replica_draws: dict[str, Callable[[], PodTemplate]] = {}
        # Jobs by "namespace/name": failed pods counted against backoffLimit, when a Job failed, its tasks (arrivals
        # of its work, replacements not counted) and those that arrived after it failed (never given a pod).
        self._job_failures: dict[str, int] = {}
        self._jobs_failed: dict[str, float] = {}
        self._job_tasks: dict[str, int] = {}
        self._job_tasks_dropped: dict[str, int] = {}

    def _init_daemonsets(self) -> None:
        """The DaemonSet objects (apps/v1), and each one's pod as the controller makes it (for placement)."""
        for ds in self.scenario.daemonsets:
            uid = str(uuid.UUID(int=self._rng("daemonset", ds.namespace, ds.name).getrandbits(128), version=4))
            template = self._daemon_pod_object(ds, uid)
            self._daemon_needs[(ds.namespace, ds.name)] = parse_pod(template)
            self._store.put("daemonsets", kobjects.daemonset_object(ds.namespace, ds.name, uid,
                                                                    rfc3339(self.start - INITIAL_NODE_AGE), template))

    def _daemon_runs_on(self, ds: DaemonSetSpec, name: str, labels: Mapping[str, str], taints: Iterable[Taint]) -> bool:
        """The DaemonSet controller's test: nodeSelector, required node affinity, and NoSchedule/NoExecute taints
        against the template's tolerations plus the ones it adds to every pod (not-ready, unreachable, ...)."""
        needs = self._daemon_needs[(ds.namespace, ds.name)]
        return needs.matches_node_affinity(name, labels) and untolerated_taint(taints, needs.tolerations) is None

    def _schedule_workloads(self) -> None:
        for spec in self.scenario.workloads:
            rng = self._rng("workload", spec.namespace, spec.name)
            # Its own stream, so adding `cpu_usage` to a workload leaves its arrivals and requests as they were.
            usage_rng = self._rng("cpu-usage", spec.namespace, spec.name)
            owner_uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            if spec.scale:  # pods are drawn when a step asks for them; each step counts as an arrival due
                key = f"{spec.namespace}/{spec.name}"
                self._replica_draws[key] = functools.partial(self._draw_template, spec, owner_uid, rng, usage_rng)
                for step in spec.scale:
                    self._push(step.at, "arrival", ReplicasChange(spec, step.replicas))
                    self._arrivals_due += 1
                continue
            for wave in range(spec.repeat_times):
                for _ in range(spec.count):
                    at = spec.at + wave * spec.repeat_every + rng.uniform(0.0, spec.spread)
                    self._push(at, "arrival", self._draw_template(spec, owner_uid, rng, usage_rng))
                    self._arrivals_due += 1

    @staticmethod
    def _draw_template(spec: WorkloadSpec, owner_uid: str, rng: random.Random, usage_rng: random.Random) -> PodTemplate:
        cpu = max(1, round(spec.cpu.sample(rng)))
        memory = max(1 << 20, round(spec.memory.sample(rng) / (1 << 20)) << 20)  # whole Mi
        duration = None if spec.duration is None else round(spec.duration.sample(rng), 3)
        scalars = dict(spec.extended)
        if spec.ephemeral_storage is not None:
            scalars[EPHEMERAL_STORAGE] = max(1 << 20, round(spec.ephemeral_storage.sample(rng) / (1 << 20)) << 20)
        usage = None if spec.cpu_usage is None else max(0, round(spec.cpu_usage.sample(usage_rng)))
        return PodTemplate(spec, owner_uid, Amounts.of(cpu, memory, 1, scalars), duration, usage)

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
                name = f"{base}-{''.join(self._ids.choice(NAME_ALPHABET) for _ in range(5))}"
            if (namespace, name) not in self._live:
                return name

    def _on_arrival(self, payload: PodTemplate | ReplicasChange) -> None:
        self._arrivals_due -= 1
        # A scale step rides on the arrival event (World's handler table stays as it is): it is due like one.
        if isinstance(payload, ReplicasChange):
            self._scale_replica_set(payload)
            return
        spec = payload.workload
        if spec.kind == "Job":
            key = f"{spec.namespace}/{spec.name}"
            self._job_tasks[key] = self._job_tasks.get(key, 0) + 1
            if key in self._jobs_failed:  # a failed Job makes no more pods
                self._job_tasks_dropped[key] = self._job_tasks_dropped.get(key, 0) + 1
                return
        self._create_workload_pod(payload)

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
            self._enqueue(pod)
        self._store.put("pods", obj)
        return pod

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
            known = node in self._by_node or node in self._static_nodes or self._is_virtual_node(node)
            if known and self._store.get("nodes", "", node) is not None:
                self._bind(pod, node)
        self._reconcile()
        return pod

    def _pod_obj(self, pod: PodSim) -> dict[str, Any]:
        return self._store.table("pods")[pod.key]

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
        if pod.owner_kind == "Job" and pod.workload in self._jobs_failed:
            return  # a failed Job makes no more pods
        spec = pod.template.workload
        if spec.scale and self._active_replicas(spec) >= self._replicas.get(f"{spec.namespace}/{spec.name}", 0):
            return  # a scaled ReplicaSet tops up to its current replicas only: scale-in victims stay gone
        pod.replaced = True
        new = self._create_workload_pod(pod.template)
        if pod.started is None and pod.stopped is not None:  # refused without ever running: the same work waits on
            new.waiting_since = pod.waiting_since if pod.waiting_since is not None else pod.created

    def _job_pod_failed(self, pod: PodSim) -> float | None:
        """A Job's pod failed in a way its backoffLimit counts: the back-off before the Job replaces it, or None
        when this failure failed the Job (more than JOB_BACKOFF_LIMIT failed pods) and nothing replaces it."""
        if pod.owner_kind != "Job":
            return JOB_BACKOFF_BASE_S
        if pod.workload in self._jobs_failed:
            return None
        failures = self._job_failures[pod.workload] = self._job_failures.get(pod.workload, 0) + 1
        if failures > JOB_BACKOFF_LIMIT:
            self._fail_job(pod.workload)
            return None
        return min(JOB_BACKOFF_BASE_S * 2 ** min(failures - 1, 6), JOB_BACKOFF_MAX_S)

    def _fail_job(self, workload: str) -> None:
        """The Job controller on BackoffLimitExceeded: the Job is Failed and its active pods are deleted, never
        replaced. They go at once, without a grace period, by an event at this instant (the `ttl_expired` removal)
        rather than here: this runs inside a scheduling pass (a refusal at the bind), which may still hold them."""
        self._jobs_failed[workload] = self._t
        for pod in [p for p in self._live.values() if p.role == "workload" and p.workload == workload]:
            if pod.finished is None and is_active(self._pod_obj(pod)):
                self._push(self._t, "ttl_expired", pod)

    def jobs_report(self) -> dict[str, Any]:
        """Jobs failed by their backoffLimit: how many, which (by when they failed), their tasks (the work that
        arrived for them, replacements not counted), those that never completed, and those that arrived after the
        Job failed and never got a pod; with the backoffLimit and the assumptions they rest on."""
        with self.lock:
            completed: dict[str, int] = {}
            for pod in self._pods.values():
                if pod.workload in self._jobs_failed and pod.finished is not None:
                    completed[pod.workload] = completed.get(pod.workload, 0) + 1
            failed = sorted(self._jobs_failed, key=lambda key: (self._jobs_failed[key], key))
            tasks = sum(self._job_tasks.get(key, 0) for key in failed)
            return {
                "backoff_limit": JOB_BACKOFF_LIMIT,
                "failed": len(failed),
                "failed_names": failed,
                "tasks_of_failed_jobs": tasks,
                "tasks_never_run": tasks - sum(completed.values()),
                "tasks_never_created": sum(self._job_tasks_dropped.get(key, 0) for key in failed),
                "assumptions": list(JOB_ASSUMPTIONS),
            }

    def _replica_set_pods(self, spec: WorkloadSpec) -> list[PodSim]:
        key = f"{spec.namespace}/{spec.name}"
        return [p for p in self._live.values() if p.role == "workload" and p.workload == key]

    def _active_replicas(self, spec: WorkloadSpec) -> int:
        return sum(1 for p in self._replica_set_pods(spec) if is_active(self._pod_obj(p)))

    def _scale_replica_set(self, change: ReplicasChange) -> None:
        """The ReplicaSet controller after `spec.replicas` changed: it creates the missing pods, or deletes the
        surplus gracefully in its order (sandbox.world.replicaset), read from the live objects so that a deletion cost
        annotated through the API counts."""
        spec = change.workload
        key = f"{spec.namespace}/{spec.name}"
        self._replicas[key] = change.replicas
        pods = {p.uid: p for p in self._replica_set_pods(spec)}
        objects = [self._pod_obj(p) for p in pods.values()]
        for _ in range(change.replicas - sum(1 for obj in objects if is_active(obj))):
            self._create_workload_pod(self._replica_draws[key]())
        for victim in scale_in_victims(objects, change.replicas):
            self._delete_pod(pods[victim["metadata"]["uid"]], None)

    def _remove_pod(self, pod: PodSim) -> None:
        if self._live.get(pod.key) is not pod:
            return
        del self._live[pod.key]
        self._store.drop("pods", pod.namespace, pod.name)
        self._dequeue(pod)
        self._release(pod)
        pod.deleted = self._t
        if pod.started is not None and pod.finished is None and pod.stopped is None:
            pod.stopped = self._t

    def _delete_pod(self, pod: PodSim, grace: float | None) -> dict[str, Any]:
        """Graceful deletion: running pods keep their node for the grace period, others go at once."""
        obj = self._pod_obj(pod)
        grace = self.scenario.termination_grace if grace is None else max(0.0, grace)
        phase = obj["status"].get("phase")
        # On the virtual node, virtual-kubelet deletes the container group, then the pod with no grace.
        if pod.node is None or phase in ("Succeeded", "Failed") or grace == 0 or self._is_virtual_node(pod.node):
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
            self._touch_if_unmanaged(pod.node)
            running = obj["status"].get("phase") == "Running" and not obj["metadata"].get("deletionTimestamp")
            if running and not pod.node_bound:
                pod.evicted_while_running = True
            self._delete_pod(pod, None)

    def _selected_pods(self, pdb: Mapping[str, Any]) -> list[dict[str, Any]]:
        selector = pdb["spec"].get("selector", {}).get("matchLabels", {})
        requirements = parse_label_selector(",".join(f"{k}={v}" for k, v in selector.items()))
        namespace = pdb["metadata"]["namespace"]
        return [
            obj
            for obj in self._store.listed("pods", namespace)
            if labels_match(requirements, obj["metadata"].get("labels"))
        ]

    def _ensure_node_pods(self) -> None:
        """DaemonSet controller and kubelet mirror pods: one of each per Ready node, bound directly. Nodes of
        no scale set (the k3s server) run the DaemonSets too; mirror pods are a pool's."""
        for name, inst in list(self._by_node.items()):
            node = self._store.get("nodes", "", name)
            if node is None or inst.state == "Deleting" or not kobjects.is_ready(node):
                continue
            self._ensure_daemon_pods(name, node)
            for mirror in self._groups[inst.group_key].spec.mirror_pods:
                self._ensure_node_pod(
                    f"mirror/{mirror.namespace}/{mirror.name}", name, lambda mirror=mirror: self._mirror_pod(mirror, name)
                )
        for name in list(self._static_nodes):
            node = self._store.get("nodes", "", name)
            if node is not None and kobjects.is_ready(node):
                self._ensure_daemon_pods(name, node)

    def _ensure_daemon_pods(self, name: str, node: dict[str, Any]) -> None:
        labels = node["metadata"].get("labels") or {}
        taints = kobjects.parse_taints(node)
        for ds in self.scenario.daemonsets:
            if self._daemon_runs_on(ds, name, labels, taints):
                self._ensure_node_pod(f"ds/{ds.namespace}/{ds.name}", name, lambda ds=ds: self._daemon_pod(ds, name))

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
            cpu_usage_milli=self._daemon_cpu_usage(ds),  # a render queue's worker: idle until it takes a frame
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

