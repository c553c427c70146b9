"""The simulated cluster: Kubernetes objects, VM Scale Sets and the controllers between them.

A discrete-event simulation in sim time, usable in-process without HTTP: call
`advance(to)` (or `advance_by(seconds)`) and read or change state through the
public methods, which all hold `world.lock` (one re-entrant lock, so the HTTP
server's threads and its clock ticker never interleave inside the world).

Determinism: everything random is drawn from generators seeded by `seed` and a
purpose (the workload of each scenario entry, the boot delay of each instance
id), so the same seed gives the same workload and the same boot delays whatever
order an autoscaler calls in. Internally times are float seconds since `start`.

`World` is composed of parts, each a class in its own module holding its own state:

- `core`: sim time, the event queue, seeded randomness and ids, the object store (`WorldCore`, under every part)
- `scheduler`: the scheduling queue, binding pods to nodes, what each node holds
- `pod_lifecycle`: arrivals, running, completion, eviction, deletion, DaemonSet and mirror pods
- `nodes`: Node objects as the scenario's cluster flavour names them, registered, lost and collected, and the
  removal marks on them
- `scale_sets`: scale sets and instances, capacity, delete, deallocate and start, operations, throttling
- `fault_injection`: injected API faults and scale-up failures, call counting
- `agent_pools`: AKS agent pools over their scale sets (count, deleteMachines, machines), their operations
- `quota`: the subscription's regional vCPU quotas, what every VM counts against them, refusals, the usages API
- `spot`: Spot capacity and admitting capacity increases (quota first), Spot evictions, their Scheduled Events
  (Event Grid), the Nodes evicted VMs leave behind
- `kube_resources`: the Kubernetes API calls (list, get, create, replace, delete)
- `render_queue`: the scenario's `render_queue`, frames a render manager hands to a DaemonSet's pods
- `virtual_node`: the scenario's `virtual_node`, virtual-kubelet's Node and Azure Container Instances running
  the pods bound to it
- `reports`: the timeline, measured node CPU, `done`, `state` and `report`

This module runs the event loop that drives them: `advance` pops the timed events in order, hands
each to its part, and reconciles after each instant (system pods, a scheduling pass, operations).

Beside the parts, the world's own records and rules: `compute` (scale sets, instances, operations), `pods`,
`kobjects` (objects in their API shape) and `store`, `scheduling` (the kube-scheduler stand-in),
`replicaset` and `disruption` (controller arithmetic), `faults`, `throttling`, `scheduled_events`,
`identity` (the token issuer) and `managed_cluster`, `metrics`, and `errors` (refusals that carry
what the API doubles answer with). The world is the middle layer of the sandbox: it reads the
scenario model (`sandbox.model`) and never the HTTP doubles (`sandbox.api`), which serve it.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from sandbox.model.scenario import Scenario
from sandbox.world.identity import DEFAULT_TOKEN_LIFETIME
from sandbox.world.core import (
    DEFAULT_START,
    LOG_ANALYTICS_WORKSPACE_ID,
    RESOURCES,
    SANDBOX_TOKEN,
)
from sandbox.world import capacity_buffers, drift, gang_jobs
from sandbox.world.agent_pools import AgentPoolsPart
from sandbox.world.fault_injection import FaultInjectionPart
from sandbox.world.kube_resources import MAX_EVENTS, KubeResourcesPart
from sandbox.world.nodes import TO_BE_DELETED_TAINT, NodesPart, RemovalStart
from sandbox.world.pod_lifecycle import CPU_USAGE_ANNOTATION, DURATION_ANNOTATION, PodLifecyclePart
from sandbox.world.quota import QuotaPart
from sandbox.world.render_queue import RenderQueuePart
from sandbox.world.reports import NodeCpu, ReportsPart
from sandbox.world.scale_sets import (
    MAX_CAPACITY,
    PREEMPTED_MESSAGE,
    SCALE_UP_FAILURE_DELAY,
    SHUTDOWN_TAINT,
    ScaleSetsPart,
)
from sandbox.world.scheduler import SchedulerPart
from sandbox.world.spot import SpotPart
from sandbox.world.standby_pools import StandbyPoolsPart
from sandbox.world.virtual_node import VirtualNodePart, VirtualNodeUsage

__all__ = [
    "CPU_USAGE_ANNOTATION",
    "DEFAULT_START",
    "DURATION_ANNOTATION",
    "LOG_ANALYTICS_WORKSPACE_ID",
    "MAX_CAPACITY",
    "MAX_EVENTS",
    "PREEMPTED_MESSAGE",
    "RESOURCES",
    "SANDBOX_TOKEN",
    "SCALE_UP_FAILURE_DELAY",
    "SHUTDOWN_TAINT",
    "TO_BE_DELETED_TAINT",
    "NodeCpu",
    "RemovalStart",
    "VirtualNodeUsage",
    "World",
]


class World(
    ReportsPart,
    RenderQueuePart,
    KubeResourcesPart,
    AgentPoolsPart,
    SpotPart,
    QuotaPart,
    FaultInjectionPart,
    StandbyPoolsPart,
    ScaleSetsPart,
    NodesPart,
    PodLifecyclePart,
    VirtualNodePart,
    SchedulerPart,
):
    """One simulated cluster world. See the module docstring; every public method holds `lock`."""

    _gang_jobs: gang_jobs.GangJobs  # the scenario's gang jobs and Kueue double (sandbox.world.gang_jobs)
    _drift: drift.DriftState  # the scenario's model changes (sandbox.world.drift)

    def __init__(
        self,
        scenario: Scenario | str | Path | Mapping[str, Any],
        *,
        seed: int = 0,
        start: datetime | None = None,
        token_lifetime: float = DEFAULT_TOKEN_LIFETIME,
    ) -> None:
        self._init_core(scenario, seed=seed, start=start, token_lifetime=token_lifetime)
        # Each part's own state, then the scenario's objects: in this order, which the ids drawn follow.
        self._init_reports_state()
        self._init_pod_state()
        self._init_scale_set_state()
        self._init_standby_pool_state()
        self._init_node_state()
        self._init_fault_state()
        self._init_scheduler_state()
        self._init_kube_state()
        self._init_render_state()
        self._init_virtual_node_state()
        self._init_quota_state()
        self._init_spot_state()
        self._init_namespaces()
        self._init_pdbs()
        self._init_daemonsets()
        self._init_scale_sets()
        self._init_static_nodes()
        self._init_agent_pools()  # draws no ids: worlds without pools are unchanged
        self._init_standby_pools()  # draws no ids, pushes no events: worlds without Standby Pools are unchanged
        self._init_spot()  # draws no ids (its own streams): worlds without evictions are unchanged
        self._init_virtual_node()  # draws ids only for a virtual node: worlds without one are unchanged
        self._schedule_workloads()
        capacity_buffers.schedule_actions(self)  # pushes events only for a scenario with capacity_buffers
        gang_jobs.schedule(self)  # pushes events only for a scenario with gang_jobs or quota_changes
        drift.schedule(self)  # pushes events only for a scenario with model_changes
        self._init_render_queue()  # draws from its own stream only: worlds without one are unchanged
        self._advance_to(0.0)  # arrivals at t=0 exist from the first look

    # ------------------------------------------------------------------ the event loop

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

    def _handle(self, kind: str, payload: Any) -> None:
        handlers = {
            "arrival": self._on_arrival,
            "provisioned": self._on_provisioned,
            "registered": self._on_registered,
            "gpu_ready": self._on_gpu_ready,
            "complete": self._on_complete,
            "terminated": self._on_terminated,
            "vanish": self._on_vanish,
            "node_gc": self._on_node_gc,
            "op_fail": self._on_op_fail,
            "power_done": self._on_power_done,
            "rebooted": self._on_rebooted,
            "ttl_expired": self._on_ttl_expired,
            "frames": self._on_frames,
            "frame_done": self._on_frame_done,
            "aci_started": self._on_aci_started,
            "job_backoff_over": self._replace,
            "spot_notice": self._on_spot_notice,
            "spot_evict": self._on_spot_evict,
            "spot_candidate": self._on_spot_candidate,
            "spot_level": self._on_spot_level,
            "spot_level_candidate": self._on_spot_level_candidate,
            "spot_node_gc": self._on_spot_node_gc,
            "standby_pool_tick": self._on_standby_pool_tick,
            "buffer_action": lambda spec: capacity_buffers.apply_action(self, spec),
            "gang_job": lambda payload: gang_jobs.on_event(self, payload),
            "model_change": lambda spec: drift.on_event(self, spec),
        }
        handlers[kind](payload)
        self._dirty = True

    def _reconcile(self) -> None:
        if not self._dirty:
            return
        if self._retry_all_pending:  # set by every node or pod change that system pods could care about
            self._ensure_node_pods()
        self._schedule()
        gang_jobs.reconcile(self)  # gang jobs and the Kueue double act on what the pass and the autoscaler did
        self._render_frames()
        self._finish_operations()
        self._dirty = False

