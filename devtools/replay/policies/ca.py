"""`ca`: an emulation of cluster-autoscaler's Azure (VMSS) provider with its documented defaults.

One control loop every `--scan-interval` (10 s), acting synchronously as CA's RunOnce does:

1. Caches: scale sets are listed every 60 s (the provider's vmssCacheTTL) and each scale set's
   instances every 5 min (vmssVmsCacheTTL); between refreshes the target sizes are CA's own
   (it updates its cache after IncreaseSize). In-flight capacity changes are polled each loop.
2. Provisioning: nodes asked for that have not registered within `--max-node-provision-time`
   (15 min) put the group into exponential backoff (5 min doubling to 30 min) and CA gives the
   missing instances up (DecreaseTargetSize). An increase is done when no node is upcoming against
   the target CA's cache holds (so an instance that left the scale set meanwhile, e.g. a spot VM
   evicted with policy Delete, is not waited for). A capacity change Azure refuses at once (a 409
   such as a quota refusal: IncreaseSize returns the error) backs the group off at once, as CA does;
   so does a long-running operation that fails, where CA on Azure (its fast backoff is off by
   default, ../shared/facts/burst-and-spot.md) would wait for the 15 min: that favours CA.
3. Scale-up: unschedulable pods, once the oldest is 2 s old and the oldest asking for a GPU 30 s old (CA's
   `allPodsAreNew`: "waiting one iteration for more"; such a loop does no scale-down either), a binpacking estimate over each group's template node and the
   `least-waste` expander (our planner implements the same estimator and expander, so it is
   reused), one group per loop as CA's expander picks one option. CA has no spot-first rule: for
   `ca+spot` the `priority` expander prefers the spot scale sets (`CA_SPOT_SETTINGS`). CA reads no
   Scheduled Events: a spot VM's Preempt notice does nothing; its pods die with the VM and their
   replacements are pending pods like any other.
4. Scale-down, skipped in a loop that scaled up. Every other loop updates the unneeded nodes and their
   timers (CA's planner `UpdateClusterState`); the removals wait out `--scale-down-delay-after-add` (10 min)
   after the last scale-up of any group and `--scale-down-delay-after-failure` (3 min) (global: CA's
   `--scale-down-delay-type-local` defaults to false), but the timers run meanwhile. A node is unneeded when its
   requests (DaemonSet pods counted: `--ignore-daemonsets-utilization=false`) are under 0.5 of
   allocatable and its pods fit elsewhere, by the engine's drain rules and removal simulation, which follow
   CA's (a kube-system pod without a PodDisruptionBudget blocks only for `--blocking-system-pod-distruption-timeout`,
   1 h from its creation; a node found removable stays in the simulation, tainted ToBeDeleted, so a spread
   domain it alone held still counts). **Job pods are movable** (CA evicts them). After 10 min
   unneeded, empty nodes are deleted in bulk (up to 10) and non-empty ones drained one at a time
   (`--max-drain-parallelism=1`): tainted ToBeDeletedByClusterAutoscaler, every pod evicted
   (respecting PodDisruptionBudgets), and the instance deleted once its pods are gone or
   `--max-graceful-termination-sec` (600 s) has passed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from devtools.replay.harness import Replay, every
from devtools.replay.policies.ours import replay_settings
from shared.domain import TO_BE_DELETED_TAINT, ClusterSnapshot, GroupState, NodeGroup, Taint, parse_provider_id
from shared.engine.backoff import after_failure, backoff_reason
from shared.engine.scale_down import plan_scale_down
from shared.engine.scale_up import pending_pods, plan_scale_up
from shared.engine.templates import build_templates
from shared.engine.vm_sizes import NVIDIA_GPU
from shared.ports import ComputeError
from shared.options import scale_down_options, scale_up_options

log = logging.getLogger(__name__)

SCAN_INTERVAL = timedelta(seconds=10)
# CA's unschedulablePodTimeBuffer and unschedulablePodWithGpuTimeBuffer (core/static_autoscaler.go).
NEW_POD_BUFFER = timedelta(seconds=2)
NEW_GPU_POD_BUFFER = timedelta(seconds=30)
GROUPS_TTL = timedelta(seconds=60)
INSTANCES_TTL = timedelta(minutes=5)
MAX_NODE_PROVISION_TIME = timedelta(minutes=15)
MAX_GRACEFUL_TERMINATION = timedelta(seconds=600)
MAX_EMPTY_BULK_DELETE = 10
# CA's defaults where they differ from ours: no batch protection, DaemonSets count in utilization.
CA_SETTINGS = {
    "BATCH_PROTECTION": "false",
    "SCALE_DOWN_IGNORE_DAEMONSETS_UTILIZATION": "false",
    "MAX_SCALE_DOWN_PARALLELISM": str(MAX_EMPTY_BULK_DELETE),
    "EXPANDER": "least-waste",
    "SPOT_FIRST": "false",  # CA has no spot-first rule: spot groups are options like any other, the expander decides
    "SCALE_DOWN_IDLE_MODE": "fixed",  # CA's unneeded time and delay after a scale-up are fixed (10 minutes each)
}
# `ca+spot`: the priority expander preferring the spot scale sets (`<pool>-spot`), least-waste among equals:
# `--expander=priority,least-waste` and the ConfigMap cluster-autoscaler-priority-expander with these priorities.
SPOT_PRIORITIES = {"50": ["spot"], "10": [".*"]}
CA_SPOT_SETTINGS = {
    **CA_SETTINGS,
    "EXPANDER": "priority,least-waste",
    "PRIORITY_EXPANDER_CONFIG": json.dumps(SPOT_PRIORITIES),
}


@dataclass(frozen=True, slots=True)
class _Increase:
    group_id: str
    target: int
    deadline: datetime
    token: str


@dataclass(frozen=True, slots=True)
class _Drain:
    node: str
    group_id: str
    instance_id: str
    started: datetime


class ClusterAutoscaler:
    name = "ca"

    def __init__(self, replay: Replay, *, settings: Mapping[str, str] = CA_SETTINGS) -> None:
        self._replay = replay
        self._cluster = replay.cluster
        self._compute = replay.compute
        self._start = replay.world.now
        self._settings = replay_settings(replay, settings)
        self._down_options = scale_down_options(self._settings)
        self._groups: dict[str, NodeGroup] = {}
        # Each group's target as CA's size cache has it: the last listing's capacity, or what CA set since.
        self._listed: dict[str, int] = {}
        self._groups_at: datetime | None = None
        self._instances_at: dict[str, datetime] = {}
        self._vm_sizes: dict[str, object] | None = None
        self._states: dict[str, GroupState] = {}
        self._increases: list[_Increase] = []
        self._drain: _Drain | None = None
        self._unneeded: dict[str, datetime] = {}
        self._last_scale_up: datetime | None = None
        self._last_failure: datetime | None = None
        self._actions = 0

    def next_wakeup(self, now: datetime) -> datetime:
        return every(SCAN_INTERVAL, self._start, now)

    def scale_actions(self) -> int:
        return self._actions

    # -- one loop ----------------------------------------------------------------------

    def wake(self, now: datetime) -> None:
        try:
            self._refresh(now)
        except ComputeError as exc:  # throttled discovery: CA logs and tries next loop
            log.info("ca: refresh failed: %s", exc)
            return
        snapshot = self._snapshot(now)
        self._check_increases(snapshot, now)
        scaled_up, too_new = self._scale_up(snapshot, now)
        if not scaled_up:
            self._scale_down(snapshot, now, actuate=not too_new)

    def _refresh(self, now: datetime) -> None:
        if self._groups_at is None or now - self._groups_at >= GROUPS_TTL:
            # cluster-autoscaler's Azure provider writes a scale set's capacity from its cache, without If-Match.
            listed = {g.id: replace(g, etag="") for g in self._compute.list_node_groups()}
            self._listed = {gid: g.capacity for gid, g in listed.items()}
            for gid, group in listed.items():
                known = self._groups.get(gid)
                # An increase still in flight keeps CA's own target, as its cache does.
                if known is not None and any(i.group_id == gid for i in self._increases):
                    group = replace(group, capacity=max(group.capacity, known.capacity))
                listed[gid] = group
            self._groups, self._groups_at = listed, now
        for gid, group in self._groups.items():
            if gid not in self._instances_at or now - self._instances_at[gid] >= INSTANCES_TTL:
                self._compute.list_instances(group)
                self._instances_at[gid] = now
        if self._vm_sizes is None:
            self._vm_sizes = {s.name.lower(): s for s in self._compute.list_vm_sizes(self._replay.world.scenario.location)}

    def _snapshot(self, now: datetime) -> ClusterSnapshot:
        nodes = self._cluster.list_nodes()
        groups = tuple(self._groups.values())
        return ClusterSnapshot(
            taken_at=now, nodes=tuple(nodes), pods=tuple(self._cluster.list_pods()), groups=groups,
            templates=build_templates(groups, nodes, vm_sizes=self._vm_sizes or {}), vm_sizes=self._vm_sizes or {},
        )

    def _state(self, gid: str) -> GroupState:
        return self._states.get(gid) or GroupState(group_id=gid)

    def _back_off(self, gid: str, code: str, now: datetime) -> None:
        self._states[gid] = after_failure(self._state(gid), now=now, code=code)
        self._last_failure = now

    def _set_target(self, gid: str, target: int) -> None:
        if gid in self._groups:
            self._groups[gid] = replace(self._groups[gid], capacity=target)
        self._listed[gid] = target  # CA sets its cached size when it changes it, until the next refresh

    # -- provisioning ---------------------------------------------------------------------

    def _check_increases(self, snapshot: ClusterSnapshot, now: datetime) -> None:
        registered: dict[str, int] = {}
        for node in snapshot.nodes:
            ref = parse_provider_id(node.provider_id)
            if ref is not None and node.ready:
                registered[ref.group_id] = registered.get(ref.group_id, 0) + 1
        still: list[_Increase] = []
        for inc in self._increases:
            group = self._groups.get(inc.group_id)
            if group is None:
                continue
            try:
                op = self._compute.get_resize_operation(inc.token)
            except ComputeError:
                still.append(inc)
                continue
            if op.status in ("Failed", "Canceled"):
                self._back_off(inc.group_id, op.error_code or "ProvisioningFailed", now)
                self._set_target(inc.group_id, registered.get(inc.group_id, 0))
                continue
            # Done when no node is still upcoming: CA counts against the target the cloud reports once its cache is
            # refreshed, so instances that left the scale set meanwhile (a spot eviction, a deletion) are not waited for.
            if registered.get(inc.group_id, 0) >= min(inc.target, self._listed.get(inc.group_id, inc.target)):
                continue
            if now >= inc.deadline:
                # Long-unregistered nodes: back off and give up the instances that never came.
                self._back_off(inc.group_id, "MaxNodeProvisionTime", now)
                keep = registered.get(inc.group_id, 0)
                try:
                    self._compute.begin_resize(group, keep)
                    self._set_target(inc.group_id, keep)
                except ComputeError as exc:
                    log.info("ca: giving up unregistered nodes of %s failed: %s", inc.group_id, exc)
                continue
            still.append(inc)
        self._increases = still

    # -- scale-up ---------------------------------------------------------------------------

    def _scale_up(self, snapshot: ClusterSnapshot, now: datetime) -> tuple[bool, bool]:
        """(scaled up, pods too new: CA waits a loop for more and disables scale-down for it)."""
        pending = pending_pods(snapshot)
        if not pending:
            return False, False
        gpu = [p.created_at for p in pending if any(name == NVIDIA_GPU for name, _ in p.requests.extended)]
        if now - min(p.created_at for p in pending) < NEW_POD_BUFFER or (gpu and now - min(gpu) < NEW_GPU_POD_BUFFER):
            return False, True
        unavailable = {
            gid: why for gid in self._groups if (why := backoff_reason(self._state(gid), now=now)) is not None
        }
        options = replace(scale_up_options(self._settings, now=now), unavailable=unavailable)
        plan = plan_scale_up(snapshot, options=options)
        if not plan.increases:
            return False, False
        increase = plan.increases[0]  # CA's expander picks one option per loop
        group = self._groups[increase.group_id]
        try:
            op = self._compute.begin_resize(group, increase.new_target)
        except ComputeError as exc:
            log.info("ca: IncreaseSize %s failed: %s", group.id, exc)
            self._back_off(group.id, exc.code or "IncreaseSizeFailed", now)
            return False, False
        self._actions += 1
        self._set_target(group.id, increase.new_target)
        self._increases.append(_Increase(group.id, increase.new_target, now + MAX_NODE_PROVISION_TIME, op.token))
        self._last_scale_up = now
        return True, False

    # -- scale-down -------------------------------------------------------------------------

    def _scale_down(self, snapshot: ClusterSnapshot, now: datetime, *, actuate: bool = True) -> None:
        if self._drain is not None:
            self._finish_drain(snapshot, now)
        # The unneeded timers run in every loop, cooldown or not (CA's planner UpdateClusterState comes first).
        draining = {self._drain.node} if self._drain is not None else set()
        states = {gid: GroupState(gid, removing={n: "ca" for n in draining}) for gid in self._groups}
        plan = plan_scale_down(
            snapshot, unneeded_since=self._unneeded, group_states=states, now=now, options=self._down_options
        )
        self._unneeded = dict(plan.unneeded)
        delays = self._down_options.delays
        if not actuate:
            return
        if self._last_scale_up is not None and now - self._last_scale_up < delays.after_add:
            return
        if self._last_failure is not None and now - self._last_failure < delays.after_failure:
            return
        empty = [r for r in plan.removals if r.kind == "empty"][:MAX_EMPTY_BULK_DELETE]
        by_group: dict[str, list[str]] = {}
        for removal in empty:
            ref = parse_provider_id(removal.provider_id)
            if ref is not None:
                self._cluster.cordon(removal.node, taint=Taint(TO_BE_DELETED_TAINT, str(int(now.timestamp())), "NoSchedule"))
                by_group.setdefault(removal.group_id, []).append(ref.instance_id)
        for gid, ids in by_group.items():
            self._delete(gid, ids, now)
        if self._drain is None:
            drain = next((r for r in plan.removals if r.kind != "empty"), None)
            if drain is not None:
                self._start_drain(drain.node, drain.group_id, drain.provider_id, now)

    def _start_drain(self, node: str, gid: str, provider_id: str, now: datetime) -> None:
        ref = parse_provider_id(provider_id)
        if ref is None:
            return
        self._cluster.cordon(node, taint=Taint(TO_BE_DELETED_TAINT, str(int(now.timestamp())), "NoSchedule"))
        for pod in self._cluster.list_pods_on_node(node):
            if pod.is_daemonset or pod.is_mirror:
                continue
            self._cluster.evict(pod.namespace, pod.name)
        self._drain = _Drain(node, gid, ref.instance_id, now)
        self._unneeded.pop(node, None)

    def _finish_drain(self, snapshot: ClusterSnapshot, now: datetime) -> None:
        drain = self._drain
        assert drain is not None
        left = [p for p in snapshot.pods_on(drain.node) if not p.is_daemonset and not p.is_mirror]
        if left and now - drain.started < MAX_GRACEFUL_TERMINATION:
            for pod in left:
                if not pod.terminating:
                    self._cluster.evict(pod.namespace, pod.name)  # CA retries evictions a PDB refused
            return
        self._delete(drain.group_id, [drain.instance_id], now)
        self._drain = None

    def _delete(self, gid: str, instance_ids: list[str], now: datetime) -> None:
        group = self._groups.get(gid)
        if group is None:
            return
        try:
            self._compute.begin_delete_instances(group, instance_ids)
        except ComputeError as exc:
            log.info("ca: DeleteNodes %s %s failed: %s", gid, instance_ids, exc)
            self._last_failure = now
            return
        self._actions += 1
        self._set_target(gid, max(0, group.capacity - len(instance_ids)))
