"""What the world reports: its timeline, measured node CPU, whether it is done, its state and its final report.

`ReportsPart` owns the timeline (pending and running pods and each group's node counts, sampled
every `timeline_interval` sim seconds as time passes) and reads every other part to answer
`node_cpu` (the Azure Monitor doubles), `done`, `state` and `report`. It changes nothing else.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sandbox.model import os_disks, quota
from sandbox.model.instance_mix import member_spec
from sandbox.model.resources import parse_resource_list
from sandbox.model.units import parse_time, rfc3339
from sandbox.world import drift, gang_jobs, instance_mix, kobjects
from sandbox.world.compute import InstanceSim
from sandbox.world.core import WorldCore
from sandbox.world.metrics import distribution, percentile, seconds
from sandbox.world.pods import pod_outcome


@dataclass(frozen=True, slots=True)
class NodeCpu:
    """One node's CPU as the monitoring doubles report it."""

    used_milli: int
    capacity_milli: int
    since: datetime  # when the node came up: a monitoring agent has samples from here on

    @property
    def fraction(self) -> float:
        return self.used_milli / self.capacity_milli if self.capacity_milli else 0.0


class ReportsPart(WorldCore):
    """Sampling and reports. See the module docstring."""

    def _init_reports_state(self) -> None:
        self.timeline: list[dict[str, Any]] = []
        self._next_sample = 0.0

    def _sample_before(self, t: float) -> None:
        while self._next_sample < t and self._next_sample <= self._end:
            self._sample(self._next_sample)

    def _sample_through(self, t: float) -> None:
        while self._next_sample <= t and self._next_sample <= self._end:
            self._sample(self._next_sample)

    def _sample(self, at: float) -> None:
        pending, running = self._pod_counts()
        sample: dict[str, Any] = {"t": round(at, 3), "groups": self._group_counts(), "pending": pending, "running": running}
        queue = self.render_queue_report()
        if queue is not None:  # a render queue's frames waiting and rendering
            sample["frames_backlog"], sample["frames_rendering"] = queue["backlog"], queue["rendering"]
        self.timeline.append(sample)
        drift.sample(self, at)  # type: ignore[arg-type]  # stale nodes disrupted now (model changes only)
        self._next_sample = at + self.scenario.timeline_interval

    def _group_counts(self) -> dict[str, dict[str, int]]:
        counts = {}
        busy = self._busy_nodes()
        for key, group in self._groups.items():
            ready = booting = deleting = deallocated = idle = 0
            for inst in group.instances.values():
                node = self._store.get("nodes", "", inst.node_name) if inst.node_registered else None
                if inst.state == "Deleting":
                    deleting += 1
                elif inst.power in ("deallocating", "deallocated"):
                    deallocated += 1
                elif node is not None and kobjects.is_ready(node):
                    ready += 1
                    idle += inst.node_name not in busy
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
            members: list[tuple[str, InstanceSim | None]] = [*self._by_node.items()]
            members += [(name, None) for name in self._static_nodes]  # the k3s server reports too
            for name, inst in members:
                if wanted is not None and name not in wanted:
                    continue
                node = self._store.get("nodes", "", name)
                if node is None or (inst is not None and inst.state == "Deleting") or not kobjects.is_ready(node):
                    continue
                capacity = (  # an instance-mix member's own size
                    member_spec(self._groups[inst.group_key].spec, inst.vm_size).capacity.cpu_milli if inst is not None
                    else parse_resource_list(node["status"]["capacity"]).cpu_milli
                )
                # A node cannot use more than it has, whatever the pods on it ask for.
                since = parse_time(node["metadata"]["creationTimestamp"])
                result[name] = NodeCpu(min(used.get(name, 0), capacity), capacity, since)
            return result


    # ------------------------------------------------------------------ reports

    def done(self) -> tuple[bool, str | None]:
        """(done, why): the duration ran out, or no arrivals are due, every pod with a duration has
        finished and every pod without one (a service) is running, apart from pods no node group could
        ever hold (they stay Pending; see `_unplaceable`) and pods a virtual node's provider refused and left
        Pending (nothing retries them; see `sandbox.world.virtual_node`), and no frame of a render queue is
        due, waiting or rendering."""
        with self.lock:
            if self._t >= self._end:
                return True, "duration-reached"
            if self._arrivals_due or self._render_work_left():
                return False, None
            if not (self.scenario.workloads or self._owners or self.scenario.render_queue):
                return False, None
            expected = {e.workload for e in self.scenario.expect_unschedulable}
            for pod in self._live.values():
                if pod.role != "workload":
                    continue
                phase = self._pod_obj(pod)["status"].get("phase")
                if (
                    phase == "Pending" and not self._aci_stuck_pod(pod) and not self._unplaceable(pod)
                    and pod.workload not in expected
                ) or (pod.duration is not None and phase == "Running"):
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
                **({"render_queue": self.render_queue_report()} if self.scenario.render_queue else {}),
                **({"pending_provider_failed": self._pending_provider_failed()} if self.scenario.virtual_node else {}),
            }

    def _idle_nodes(self) -> dict[str, list[str]]:
        """Per group, the names of the Ready nodes counted `idle` in `groups` (nothing but DaemonSet and mirror pods)."""
        busy = self._busy_nodes()
        idle: dict[str, list[str]] = {}
        for key, group in self._groups.items():
            names = []
            for inst in group.instances.values():
                node = self._store.get("nodes", "", inst.node_name) if inst.node_registered else None
                if inst.state != "Deleting" and node is not None and kobjects.is_ready(node) and inst.node_name not in busy:
                    names.append(inst.node_name)
            idle[key] = sorted(names)
        return idle

    def _node_registration(self) -> dict[str, Any]:
        """Every instance a capacity increase created whose Node registered (gone ones included), from the request
        to the registration: `nodes` (node, group, requested, registered, seconds; by registration), their
        `seconds` (nodes, p50, p95, max) and the same per group. Initial nodes and instances that never registered
        (Failed, deleted while booting) are left out."""
        rows = sorted(
            ({"node": inst.node_name, "group": inst.group_key, "requested": seconds(inst.created_at),
              "registered": seconds(inst.registered_at), "seconds": seconds(inst.registered_at - inst.created_at)}
             for inst in self._iter_instances() if inst.registered_at is not None),
            key=lambda row: (row["registered"], row["node"]),
        )
        by_group: dict[str, list[float]] = {}
        for row in rows:
            by_group.setdefault(row["group"], []).append(row["seconds"])
        return {"nodes": rows, "seconds": _spread([row["seconds"] for row in rows]),
                "seconds_by_group": {group: _spread(values) for group, values in sorted(by_group.items())}}

    def report(self) -> dict[str, Any]:
        with self.lock:
            node_seconds: dict[str, float] = {key: 0.0 for key in self._groups}
            stopped_seconds: dict[str, float] = {key: 0.0 for key in self._groups}
            hibernated_seconds: dict[str, float] = {key: 0.0 for key in self._groups}
            for inst in self._iter_instances():
                until = inst.vanished_at if inst.vanished_at is not None else self._t
                unbilled = inst.unbilled_seconds
                if inst.unbilled_since is not None:  # deallocated now (or when it vanished)
                    unbilled += until - inst.unbilled_since
                node_seconds[inst.group_key] += max(0.0, until - inst.created_at - unbilled)
                stopped_seconds[inst.group_key] += unbilled  # no compute billed, its OS disk still is
                hibernated = inst.hibernated_seconds  # ... and a hibernated one's memory disk
                if inst.hibernated and inst.unbilled_since is not None:
                    hibernated += until - inst.unbilled_since
                hibernated_seconds[inst.group_key] += hibernated
            stopped_disks = self._stopped_disks(stopped_seconds, hibernated_seconds)
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
                        # Where its wait starts: its creation, or for a replacement of a pod ACI refused, the
                        # creation of the first pod of that work.
                        "waiting_since": seconds(pod.waiting_since if pod.waiting_since is not None else pod.created),
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
            # Until the container runs: the bind on a VM node, the container group running on the virtual node.
            waits = [p.started - p.created for p in pods if p.started is not None]
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
                # Nodes of no scale set that the autoscaler wrote to (updated, deleted, evicted from): must be none.
                "unmanaged_nodes_touched": dict(sorted(self._unmanaged_touches.items())),
                "pod_wait_seconds": distribution(waits),
                "node_seconds": round(sum(node_seconds.values()), 3),
                "node_seconds_by_group": {k: round(v, 3) for k, v in node_seconds.items()},
                # Deallocated instances: no compute billed, their managed OS disk billed (sandbox.model.os_disks).
                "stopped_disks": stopped_disks,
                "nodes_max": self._nodes_max,
                "nodes_by_group": self._group_counts(),
                "api_calls": self.counters.as_json(),
                "events_by_reason": dict(sorted(self._events_by_reason.items())),
                "events_by_object": {k: dict(sorted(v.items())) for k, v in sorted(self._events_by_object.items())},
                "instances_created_by_group": {k: self._created_by_group.get(k, 0) for k in self._groups},
                "scale_down_order": self.scale_down_order(),
                "expect_unschedulable": self._expected_unschedulable(),
                # The scenario's render queue (frames done, interrupted, waiting; per node); None without one.
                "render_queue": self.render_queue_report(),
                # The scenario's virtual node (ACI use, refusals, billing, where pods ended); None without one.
                "virtual_node": self.virtual_node_report(),
                # Spot evictions, their notices and what they cost, Spot capacity failures and every capacity increase
                # (sandbox.world.spot); the vCPU quotas, their peak usage and the requests refused (sandbox.world.quota).
                "spot": self.spot_report(),
                "quota": self.quota_report(),
                # Standby Pools: VMs created, taken, deleted, VM-seconds running and stopped (sandbox.world.standby_pools).
                "standby_pools": self.standby_pool_report(),
                # Instances a successful capacity increase left Failed, their deletes and the fallback
                # (sandbox.world.scale_sets, the scenario's `allocation_failures`).
                "allocation": self.allocation_report(),
                # How long each new node took from the capacity increase that created its VM to registering.
                "node_registration": self._node_registration(),
                # Gang jobs: attempts, admissions, gang waits, capacity held by partial gangs; None without any.
                "gang_jobs": gang_jobs.report(self),  # type: ignore[arg-type]
                # Model changes: instances on the latest model at the end, stale ones replaced, the most disrupted at
                # once (sandbox.world.drift); None without model changes.
                "drift": drift.report(self),  # type: ignore[arg-type]
                # Instance-mix scale sets: VMs created and alive by size, each workload's pods by node size, the
                # stored profile (sandbox.world.instance_mix); None without a mix.
                "instance_mix": instance_mix.report(self),  # type: ignore[arg-type]
                # Each scenario workload's kind, by "<namespace>/<name>" as pods name their workload.
                "workload_kinds": {f"{w.namespace}/{w.name}": w.kind for w in self.scenario.workloads},
                "timeline": copy.deepcopy(self.timeline),
                "pods": summaries,
            }


    def _stopped_disks(self, stopped_seconds: dict[str, float], hibernated_seconds: dict[str, float]) -> dict[str, Any]:
        """The report's `stopped_disks`: per group, the disk-seconds of its deallocated instances, the OS disk tier
        AKS gives its VM size and what those seconds cost at that tier's list price; of those, the seconds spent
        hibernated and what their memory disk cost (sandbox.model.os_disks.memory_disk_for), inside `cost_usd`;
        totals."""
        by_group: dict[str, dict[str, Any]] = {}
        for key, seconds_ in stopped_seconds.items():
            spec = self._groups[key].spec
            disk = os_disks.os_disk_for(quota.vcpus(spec.capacity))
            cost = seconds_ * disk.usd_per_second
            by_group[key] = {"disk_seconds": round(seconds_, 3), "tier": disk.tier, "size_gib": disk.size_gib}
            hibernated = hibernated_seconds.get(key, 0.0)
            if hibernated > 0:
                memory = os_disks.memory_disk_for(spec.capacity.memory_bytes / (1 << 30))
                memory_cost = hibernated * memory.usd_per_second
                cost += memory_cost
                by_group[key] |= {"hibernated_seconds": round(hibernated, 3), "memory_disk_tier": memory.tier.tier,
                                  "memory_disks": memory.count, "memory_disk_cost_usd": round(memory_cost, 6)}
            by_group[key]["cost_usd"] = round(cost, 6)
        return {
            "disk_seconds": round(sum(g["disk_seconds"] for g in by_group.values()), 3),
            "cost_usd": round(sum(g["cost_usd"] for g in by_group.values()), 6),
            "hibernated_seconds": round(sum(g.get("hibernated_seconds", 0.0) for g in by_group.values()), 3),
            "memory_disk_cost_usd": round(sum(g.get("memory_disk_cost_usd", 0.0) for g in by_group.values()), 6),
            "by_group": by_group,
            "price_date": os_disks.DISK_PRICE_DATE,
        }


def _spread(values: list[float]) -> dict[str, float | int]:
    """How many, and the nearest-rank p50, p95 and max of some durations in seconds (0 for none)."""
    ordered = sorted(values)
    return {"nodes": len(ordered), "p50": round(percentile(ordered, 0.5), 1), "p95": round(percentile(ordered, 0.95), 1),
            "max": round(ordered[-1], 1) if ordered else 0}
