"""`ca`: an emulation of cluster-autoscaler's Azure (VMSS) provider with its documented defaults.

Read against kubernetes/autoscaler's cluster-autoscaler: core/static_autoscaler.go (RunOnce, allPodsAreNew,
isScaleDownInCooldown), core/scaleup/orchestrator and expander/factory (one best option per loop, the expander
chain ending in `random`), core/scaledown/planner, core/scaledown/budgets and actuation (actuator.go,
delete_in_batch.go: deletions in flight), config/flags/flags.go (defaults), cloudprovider/azure (caches,
azure_scale_set.go DeleteInstances); and ../shared/facts/cluster-autoscaler.md.

Loops, as cluster-autoscaler's main.go (the `FrequentLoopsEnabled` loop, `trigger.Wait(previousRun)`) and
loop/trigger.go (`LoopTrigger.Wait`, `StartPodObserver`) start them, read at release 1.36.0. With `--frequent-loops-enabled` (true by
default since release 1.35.0, config/flags/flags.go; false up to 1.34), the next loop starts:
- as soon as the last one ends when a scale-up or a started scale-down happened in the last loop or the one before
  (`LoopTrigger.Wait(previousRun)`: `lastScaleUpTime` or `lastScaleDownDeleteTime`, both set to the loop's start
  time in static_autoscaler.go, not before `previousRun`, the start of the loop before the last);
- else at the first of `--scan-interval` (10 s) and a signal from the pod observer (`StartPodObserver`): a pod
  in the informer's field selector (`spec.nodeName==""`, phase neither Succeeded nor Failed) added or updated with
  condition PodScheduled=False, reason Unschedulable, whose lastTransitionTime is at most `maxPodChangeAge` (10 s)
  old (`isRecentUnschedulablePod`). The channel holds one signal, so a signal while a loop runs starts the next
  loop as soon as it ends. There is no debounce: a loop a new pod starts finds it under 2 s old and waits "one
  iteration for more" (below), so a lone pod is scaled up for by the timer's loop 10 s later, or by the loop of a
  signal 2 s or more after it.
The emulation watches the pods as that informer does: it looks at every pod change (resourceVersion) once a second
(`WATCH_PROBE`), just after each loop (pods its own loop changed) and, when given the trace's arrivals (`arrivals`,
as `nap` is), at each arrival. A loop takes `LOOP_DURATION` (1 s: a RunOnce over tens of nodes with one ARM write; CA's
scalability tests measure under 10 s at 1,000 nodes) where CA's timing depends on it: a loop started right after
another, or by a signal that came while it ran. `CA_FREQUENT_LOOPS` in the settings (true or false, default
`FREQUENT_LOOPS`) sets the flag; false runs one loop every `--scan-interval`, as CA up to 1.34 does. Each loop acts
synchronously, as CA's RunOnce does:

1. Caches: scale sets are listed every 60 s (the provider's vmssCacheTTL) and each scale set's
   instances every 5 min (vmssVmsCacheTTL); between refreshes the target sizes are CA's own
   (it updates its cache after IncreaseSize). In-flight capacity changes are polled each loop.
2. Provisioning: nodes asked for that have not registered within `--max-node-provision-time`
   (15 min) put the group into exponential backoff (5 min doubling to 30 min) and CA gives the
   missing instances up: those Azure left Failed deleted by id (removeOldUnregisteredNodes), else
   DecreaseTargetSize. An increase is done when no node is upcoming against
   the target CA's cache holds (so an instance that left the scale set meanwhile, e.g. a spot VM
   evicted with policy Delete, is not waited for). A capacity change Azure refuses at once (a 409
   such as a quota refusal: IncreaseSize returns the error) backs the group off at once, as CA does.
3. Scale-up: unschedulable pods, once the oldest is 2 s old and the oldest asking for a GPU 30 s old (CA's
   `allPodsAreNew`: "waiting one iteration for more"; such a loop does no scale-down either). Every group is
   estimated (binpacking over its template node) and the expander chain picks one option: `least-waste`, ties
   broken at random (`--expander=least-waste` plus the `random` fallback CA's factory appends; seeded by the loop
   time, so runs repeat). Our planner implements the same estimator and expanders, so it is reused; its first
   choice is the group grown, and only that group grows in the loop. CA has no spot-first rule: for `ca+spot` the
   `priority` expander prefers the spot scale sets (`CA_SPOT_SETTINGS`). CA reads no Scheduled Events: a spot
   VM's Preempt notice does nothing; its pods die with the VM and their replacements are pending pods like any
   other.
4. Scale-down, skipped in a loop that scaled up. Every other loop updates the unneeded nodes and their
   timers (CA's planner `UpdateClusterState`); new removals wait out `--scale-down-delay-after-add` (10 min)
   after the last scale-up, `--scale-down-delay-after-delete` (`SCALE_DOWN_DELAY_AFTER_DELETE`, 10 s: the scan
   interval, as AKS sets it and the flag's old help said; upstream's flag defaults to 0, which at a 10 s loop
   allows the same) after the last deletion started, and `--scale-down-delay-after-failure` (3 min) after a
   failed one, all global (`--scale-down-delay-type-local=false`); the timers run meanwhile. A node is unneeded
   when its requests (DaemonSet pods counted: `--ignore-daemonsets-utilization=false`) are under 0.5 of
   allocatable and its pods fit elsewhere, by the engine's drain rules and removal simulation, which follow
   CA's (a kube-system pod without a PodDisruptionBudget blocks only for `--blocking-system-pod-distruption-timeout`,
   1 h from its creation; a node found removable stays in the simulation, tainted ToBeDeleted, so a spread
   domain it alone held still counts). **Job pods are movable** (CA evicts them). After 10 min unneeded,
   removals start within CA's budgets for deletions in flight (budgets.CropNodes): `--max-scale-down-parallelism`
   (`MAX_SCALE_DOWN_PARALLELISM`, 10) less the deletions in flight goes to empty nodes first, deleted in bulk;
   what is left, at most `--max-drain-parallelism` (1) less the drains in flight, to non-empty nodes: tainted
   ToBeDeletedByClusterAutoscaler, every pod evicted (respecting PodDisruptionBudgets), and the instance deleted
   once its pods are gone or `--max-graceful-termination-sec` (600 s) has passed. An empty node's deletion is in
   flight until CA's DeleteNodes returns: `--node-delete-delay-after-taint` (5 s) after tainting, as Azure's
   DeleteInstances returns once the request is accepted. A delete Azure refuses untaints the node, which can be
   chosen again; a taint that fails starts the delay after failure (the actuator's only synchronous error).

Simplifications, and the side each favours:
- The scan-interval timer runs from a loop's start; CA's starts when the loop ends (`time.After` in Wait), so CA's
  timed loops come up to a loop's duration later. Favours CA.
- A pod change is seen at the next look (within 1 s; at once for an arrival when the arrivals are given), not at
  once. Favours ours, by under a second per signal.
- Pods arriving at one instant give one signal; CA, seeing them a few milliseconds apart while its loop runs,
  may run one more loop (finding them too new) when it ends, and start its timer a loop's duration later.
  Favours CA.
- ProvisioningRequests are read only when a `provisioning` pass is given (devtools.replay.policies.ca_provreq, the
  gang replay); as the trigger's third reason to loop at once they are not modelled. Favours neither side.
- An empty node's delete call is made in the loop that taints it, not 5 s later: its VM goes 5 s sooner.
  Favours CA.
- A long-running capacity increase that fails backs the group off at once; CA on Azure (its fast backoff is off
  by default, ../shared/facts/burst-and-spot.md) waits for the 15 min. Favours CA.
- The group chosen grows by its whole increase in our plan; in the rare plan that picks the same group again
  for pods its first estimate left, CA would add those nodes a loop later. Favours CA.
- Caches expire exactly at their TTLs, without the provider's optional jitter. Favours neither side.
"""

from __future__ import annotations

import bisect
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from devtools.replay.harness import Replay, every
from devtools.replay.policies.ours import replay_settings
from shared.domain import TO_BE_DELETED_TAINT, ClusterSnapshot, GroupState, NodeGroup, Taint, parse_provider_id
from shared.engine.backoff import after_failure, backoff_reason
from shared.engine.gpu_readiness import hold_back
from shared.engine.scale_down import plan_scale_down
from shared.engine.scale_up import ScaleUpSimulation, pending_pods, simulate_scale_up
from shared.engine.templates import build_templates
from shared.engine.vm_sizes import NVIDIA_GPU
from shared.ports import ClusterError, ComputeError
from shared.options import scale_down_options, scale_up_options
from sandbox.model.units import parse_time

log = logging.getLogger(__name__)

SCAN_INTERVAL = timedelta(seconds=10)
# --frequent-loops-enabled (true since release 1.35.0), overridden by CA_FREQUENT_LOOPS in the settings.
FREQUENT_LOOPS = True
FREQUENT_LOOPS_SETTING = "CA_FREQUENT_LOOPS"
# A loop's own duration where CA's timing depends on it (see the module docstring).
LOOP_DURATION = timedelta(seconds=1)
# loop/trigger.go maxPodChangeAge: an unschedulable pod signals only this long after its condition changed.
MAX_POD_CHANGE_AGE = timedelta(seconds=10)
# The pod watch is looked at this often, besides at each trace arrival given and after each loop.
WATCH_PROBE = timedelta(seconds=1)
# After an arrival's time, when the watch is looked at: the world has bound or marked the new pod by then.
WATCH_DELAY = timedelta(milliseconds=1)
# CA's unschedulablePodTimeBuffer and unschedulablePodWithGpuTimeBuffer (core/static_autoscaler.go).
NEW_POD_BUFFER = timedelta(seconds=2)
NEW_GPU_POD_BUFFER = timedelta(seconds=30)
GROUPS_TTL = timedelta(seconds=60)
INSTANCES_TTL = timedelta(minutes=5)
MAX_NODE_PROVISION_TIME = timedelta(minutes=15)
MAX_GRACEFUL_TERMINATION = timedelta(seconds=600)
# --max-scale-down-parallelism (our MAX_SCALE_DOWN_PARALLELISM overrides it) and --max-drain-parallelism.
MAX_SCALE_DOWN_PARALLELISM = 10
MAX_DRAIN_PARALLELISM = 1
# --node-delete-delay-after-taint: an empty node's deletion stays in flight this long after its taint.
NODE_DELETE_DELAY_AFTER_TAINT = timedelta(seconds=5)
# CA's defaults where they differ from ours: no batch protection, DaemonSets count in utilization; CA's expander
# factory ends every chain with `random`, which breaks the ties the named expanders leave.
CA_SETTINGS = {
    "BATCH_PROTECTION": "false",
    "SCALE_DOWN_IGNORE_DAEMONSETS_UTILIZATION": "false",
    "MAX_SCALE_DOWN_PARALLELISM": str(MAX_SCALE_DOWN_PARALLELISM),
    "SCALE_DOWN_DELAY_AFTER_DELETE": f"{int(SCAN_INTERVAL.total_seconds())}s",
    "EXPANDER": "least-waste,random",
    "SPOT_FIRST": "false",  # CA has no spot-first rule: spot groups are options like any other, the expander decides
    "SCALE_DOWN_IDLE_MODE": "fixed",  # CA's unneeded time and delay after a scale-up are fixed (10 minutes each)
}
# `ca+spot`: the priority expander preferring the spot scale sets (`<pool>-spot`), least-waste among equals:
# `--expander=priority,least-waste` (then CA's `random` fallback) and the ConfigMap
# cluster-autoscaler-priority-expander with these priorities.
SPOT_PRIORITIES = {"50": ["spot"], "10": [".*"]}
# What the figures of a `ca` run assume about its loop trigger, for the result's `assumptions`.
CA_ASSUMPTIONS = (
    "ca: --frequent-loops-enabled=true (the default since cluster-autoscaler 1.35.0): a loop right after a productive "
    "one (scale-up or scale-down started in the last two loops), else at the first of the 10 s scan interval and a "
    "new unschedulable pod (seen within 1 s); a loop takes 1 s where that matters, the timer runs from a loop's start",
)
CA_SPOT_SETTINGS = {
    **CA_SETTINGS,
    "EXPANDER": "priority,least-waste,random",
    "PRIORITY_EXPANDER_CONFIG": json.dumps(SPOT_PRIORITIES),
}


@dataclass(frozen=True, slots=True)
class _Increase:
    group_id: str
    target: int
    deadline: datetime
    token: str
    atomic: bool = False  # a ProvisioningRequest's AtomicIncreaseSize (devtools.replay.policies.ca_provreq)


@dataclass(frozen=True, slots=True)
class _Drain:
    node: str
    group_id: str
    instance_id: str
    started: datetime


@dataclass(frozen=True, slots=True)
class _EmptyDeletion:
    """An empty node's deletion in CA's deletion tracker: in flight until `until` (its DeleteNodes returns)."""

    node: str
    group_id: str
    until: datetime


def _flag(name: str, raw: str | None, default: bool) -> bool:
    if raw is None or raw.strip() == "":
        return default
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"{name}: not a boolean: {raw!r} (use true or false)")


def _recently_unschedulable(obj: Mapping[str, Any], now: datetime) -> bool:
    """isRecentUnschedulablePod: PodScheduled=False, reason Unschedulable, changed at most MAX_POD_CHANGE_AGE ago."""
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled":
            if cond.get("status") != "False" or cond.get("reason") != "Unschedulable":
                return False
            changed = cond.get("lastTransitionTime")
            return changed is not None and parse_time(changed) + MAX_POD_CHANGE_AGE >= now
    return False


def expander_choice(simulation: ScaleUpSimulation) -> str | None:
    """The group the expander chose first: the group of the plan's first new node (the planner commits its
    choices in order), which is CA's one best option for the loop; None when no group grows."""
    for step in simulation.steps:
        if step.kind == "new" and step.pod is None and step.group_id is not None:
            return step.group_id
    return None


class ClusterAutoscaler:
    name = "ca"

    def __init__(self, replay: Replay, *, settings: Mapping[str, str] = CA_SETTINGS,
                 arrivals: Sequence[float] = (), provisioning: Any = None) -> None:
        self._replay = replay
        # The ProvisioningRequest pass (devtools.replay.policies.ca_provreq); None: requests are not read.
        self._provisioning = provisioning
        self._world = replay.world
        self._cluster = replay.cluster
        self._compute = replay.compute
        self._start = replay.world.now
        ours = dict(settings)
        self._frequent = _flag(FREQUENT_LOOPS_SETTING, ours.pop(FREQUENT_LOOPS_SETTING, None), FREQUENT_LOOPS)
        self._settings = replay_settings(replay, ours)
        self._down_options = scale_down_options(self._settings)
        self._groups: dict[str, NodeGroup] = {}
        # Each group's target as CA's size cache has it: the last listing's capacity, or what CA set since.
        self._listed: dict[str, int] = {}
        self._groups_at: datetime | None = None
        self._instances_at: dict[str, datetime] = {}
        self._vm_sizes: dict[str, object] | None = None
        self._states: dict[str, GroupState] = {}
        self._increases: list[_Increase] = []
        self._drains: dict[str, _Drain] = {}
        self._empties: dict[str, _EmptyDeletion] = {}
        self._unneeded: dict[str, datetime] = {}
        self._last_scale_up: datetime | None = None
        self._last_delete: datetime | None = None
        self._last_failure: datetime | None = None
        self._actions = 0
        self.removed_nodes: dict[str, str] = {}  # node -> removal kind (empty, drain): devtools.replay.disruptions
        # The loop trigger: main.go's (previousRun, lastRun), when the last loop ends, the observer's one signal.
        self._runs = (self._start, self._start)
        self._loop_end = self._start
        self._signal: datetime | None = None
        # The pod watch: trace arrivals (sim seconds, sorted), the resourceVersion
        # of each pod in the observer's field selector as last seen, and when it was last looked at.
        self._arrivals = sorted(set(arrivals))
        self._versions: dict[str, str] = {}
        self._looked: datetime | None = None
        self.loops: list[datetime] = []  # each loop's start, for tests and reports

    def next_wakeup(self, now: datetime) -> datetime:
        if not self._frequent:
            return every(SCAN_INTERVAL, self._start, now)
        return min(self._next_loop(), self._next_look(now))

    def scale_actions(self) -> int:
        return self._actions

    def assumptions(self) -> tuple[str, ...]:
        """What this run assumes about CA's loop trigger, for the result's `assumptions`."""
        if self._frequent:
            return CA_ASSUMPTIONS
        return ("ca: --frequent-loops-enabled=false (the default up to cluster-autoscaler 1.34): one loop every 10 s",)

    # -- the loop trigger --------------------------------------------------------------

    def _productive(self) -> bool:
        """LoopTrigger.Wait(previousRun): a scale-up or a started scale-down in the last two loops."""
        previous = self._runs[0]
        return any(last is not None and last >= previous for last in (self._last_scale_up, self._last_delete))

    def _next_loop(self) -> datetime:
        if self._productive():
            return self._loop_end
        timer = self._runs[1] + SCAN_INTERVAL
        if self._signal is None:
            return timer
        return min(timer, max(self._signal, self._loop_end))

    def _next_look(self, now: datetime) -> datetime:
        if self._looked is None:
            return now  # the informer's first list
        times = [now + WATCH_PROBE]
        if self._loop_end > now:
            times.append(self._loop_end)
        elapsed = (now - WATCH_DELAY - self._start).total_seconds()
        at = bisect.bisect_right(self._arrivals, elapsed + 1e-6)
        if at < len(self._arrivals):
            times.append(self._start + timedelta(seconds=self._arrivals[at]) + WATCH_DELAY)
        return min(times)

    def _watch(self, now: datetime) -> None:
        """The pod observer's informer: every pod in its field selector added or changed since the last look that
        isRecentUnschedulablePod accepts puts a signal in the channel, which holds one."""
        self._looked = now
        versions: dict[str, str] = {}
        for obj in self._world.k8s_view("pods"):
            if (obj.get("spec") or {}).get("nodeName") or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            meta = obj["metadata"]
            uid, version = meta["uid"], str(meta.get("resourceVersion", ""))
            versions[uid] = version
            if self._versions.get(uid) != version and self._signal is None and _recently_unschedulable(obj, now):
                self._signal = now
        self._versions = versions

    # -- one loop ----------------------------------------------------------------------

    def wake(self, now: datetime) -> None:
        if self._frequent:
            self._watch(now)
            if now < self._next_loop():
                return
            self._signal = None  # Wait takes the signal that started the loop, or drains one after a productive loop
            self._runs = (self._runs[1], now)
            self._loop_end = now + LOOP_DURATION
        self.loops.append(now)
        self._run_once(now)

    def _run_once(self, now: datetime) -> None:
        try:
            self._refresh(now)
        except ComputeError as exc:  # throttled discovery: CA logs and tries next loop
            log.info("ca: refresh failed: %s", exc)
            return
        snapshot = self._snapshot(now)
        self._check_increases(snapshot, now)
        self._progress_deletions(snapshot, now)
        if self._provisioning is not None and self._provisioning.run_once(self, snapshot, now):
            return  # a request's scale-up: like any scale-up, no scale-down in this loop
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
        # FilterOutNodesWithUnreadyResources: a node with the GPU label and no allocatable GPU is unready to CA.
        listed = self._cluster.list_nodes()
        nodes = list(hold_back(listed, {}) or listed)
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
                # Instances Azure left Failed are deleted by id (CA's removal of long-unregistered nodes); a resize
                # down would scale in the newest instances, Ready ones with pods among them.
                if self._delete_failed(group):
                    continue
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
        if self._provisioning is not None:
            pending = self._provisioning.ordinary(self, pending, now)
        if not pending:
            return False, False
        gpu = [p.created_at for p in pending if any(name == NVIDIA_GPU for name, _ in p.requests.extended)]
        if now - min(p.created_at for p in pending) < NEW_POD_BUFFER or (gpu and now - min(gpu) < NEW_GPU_POD_BUFFER):
            return False, True
        # gangs=False: cluster-autoscaler plans each pod on its own (it knows gangs only through ProvisioningRequests).
        options = replace(scale_up_options(self._settings, now=now), unavailable=self.unavailable_groups(now),
                          gangs=False)
        simulation = simulate_scale_up(snapshot, options=options)
        chosen = expander_choice(simulation)
        if chosen is None:
            return False, False
        # CA carries out the expander's one best option per loop; the other groups wait for the next loops.
        increase = next(i for i in simulation.plan.increases if i.group_id == chosen)
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

    # -- what the ProvisioningRequest pass uses -----------------------------------------------

    @property
    def settings(self) -> Any:
        return self._settings

    def unavailable_groups(self, now: datetime) -> dict[str, str]:
        """Groups in backoff, with why: the scale-up leaves them out."""
        return {gid: why for gid in self._groups if (why := backoff_reason(self._state(gid), now=now)) is not None}

    def increase_in_flight(self, token: str) -> bool:
        return any(i.token == token for i in self._increases)

    def atomic_increase(self, gid: str, target: int, now: datetime) -> str | None:
        """AtomicIncreaseSize on Azure: one capacity PUT for the whole increase, tracked like any increase (given up
        after --max-node-provision-time, never rolled back); its operation token, or None when Azure refused it."""
        group = self._groups[gid]
        try:
            op = self._compute.begin_resize(group, target)
        except ComputeError as exc:
            log.info("ca: AtomicIncreaseSize %s failed: %s", gid, exc)
            self._back_off(gid, exc.code or "IncreaseSizeFailed", now)
            return None
        self._actions += 1
        self._set_target(gid, target)
        self._increases.append(_Increase(gid, target, now + MAX_NODE_PROVISION_TIME, op.token, atomic=True))
        self._last_scale_up = now
        return op.token

    def _delete_failed(self, group: NodeGroup) -> bool:
        """DeleteNodes for the group's instances in provisioning state Failed; False when it has none."""
        try:
            failed = [i.instance_id for i in self._compute.list_instances(group) if i.provisioning_state == "Failed"]
            if not failed:
                return False
            self._compute.begin_delete_instances(group, failed)
        except ComputeError as exc:
            log.info("ca: deleting the failed instances of %s failed: %s", group.id, exc)
            return False  # given up by the resize instead
        self._set_target(group.id, max(0, self._groups[group.id].capacity - len(failed)))
        return True

    # -- scale-down -------------------------------------------------------------------------

    def _progress_deletions(self, snapshot: ClusterSnapshot, now: datetime) -> None:
        """CA's actuator runs beside the loop: empty deletions leave its tracker once DeleteNodes returns, drains
        once their node is deleted, whatever the loop does."""
        self._empties = {n: e for n, e in self._empties.items() if e.until > now}
        for drain in list(self._drains.values()):
            self._finish_drain(drain, snapshot, now)

    def _scale_down(self, snapshot: ClusterSnapshot, now: datetime, *, actuate: bool = True) -> None:
        # The unneeded timers run in every loop, cooldown or not (CA's planner UpdateClusterState comes first).
        removing: dict[str, dict[str, str]] = {gid: {} for gid in self._groups}
        for entry in (*self._drains.values(), *self._empties.values()):
            removing.setdefault(entry.group_id, {})[entry.node] = "ca"
        states = {gid: GroupState(gid, removing=nodes) for gid, nodes in removing.items()}
        plan = plan_scale_down(
            snapshot, unneeded_since=self._unneeded, group_states=states, now=now, options=self._down_options
        )
        self._unneeded = dict(plan.unneeded)
        if not actuate or self._in_cooldown(now):
            return
        # CA's budgets for deletions in flight: empty nodes first, then drains within what is left.
        budget = self._settings.max_scale_down_parallelism - len(self._empties) - len(self._drains)
        empty = [r for r in plan.removals if r.kind == "empty"][:max(0, budget)]
        drain_budget = min(budget - len(empty), MAX_DRAIN_PARALLELISM - len(self._drains))
        drains = [r for r in plan.removals if r.kind != "empty"][:max(0, drain_budget)]
        try:
            for removal in (*empty, *drains):
                self._cluster.cordon(removal.node, taint=Taint(TO_BE_DELETED_TAINT, str(int(now.timestamp())), "NoSchedule"))
        except ClusterError as exc:  # the actuator's synchronous failure: CA untaints and counts a failed scale-down
            log.info("ca: tainting for scale-down failed: %s", exc)
            for removal in (*empty, *drains):
                self._cluster.uncordon(removal.node, taint_key=TO_BE_DELETED_TAINT)
            self._last_failure = now
            return
        if empty or drains:
            self._last_delete = now  # CA's lastScaleDownDeleteTime: the loop a deletion started in
        for removal in (*empty, *drains):  # what the replay counts voluntary disruptions by
            self.removed_nodes[removal.node] = removal.kind
        by_group: dict[str, list[tuple[str, str]]] = {}
        for removal in empty:
            self._empties[removal.node] = _EmptyDeletion(removal.node, removal.group_id, now + NODE_DELETE_DELAY_AFTER_TAINT)
            by_group.setdefault(removal.group_id, []).append((removal.node, removal.instance_id))
        for gid, nodes in by_group.items():
            self._delete(gid, nodes)
        for removal in drains:
            self._start_drain(removal.node, removal.group_id, removal.instance_id, now)

    def _in_cooldown(self, now: datetime) -> bool:
        """CA's isScaleDownInCooldown with global delays: a delay is over once that long has passed."""
        delays = self._down_options.delays
        return any(
            last is not None and now - last < delay
            for last, delay in ((self._last_scale_up, delays.after_add), (self._last_delete, delays.after_delete),
                                (self._last_failure, delays.after_failure))
        )

    def _start_drain(self, node: str, gid: str, instance_id: str, now: datetime) -> None:
        for pod in self._cluster.list_pods_on_node(node):
            if pod.is_daemonset or pod.is_mirror:
                continue
            self._cluster.evict(pod.namespace, pod.name)
        self._drains[node] = _Drain(node, gid, instance_id, now)
        self._unneeded.pop(node, None)

    def _finish_drain(self, drain: _Drain, snapshot: ClusterSnapshot, now: datetime) -> None:
        left = [p for p in snapshot.pods_on(drain.node) if not p.is_daemonset and not p.is_mirror]
        if left and now - drain.started < MAX_GRACEFUL_TERMINATION:
            for pod in left:
                if not pod.terminating:
                    self._cluster.evict(pod.namespace, pod.name)  # CA retries evictions a PDB refused
            return
        self._delete(drain.group_id, [(drain.node, drain.instance_id)])
        del self._drains[drain.node]

    def _delete(self, gid: str, nodes: list[tuple[str, str]]) -> None:
        """DeleteNodes for (node, instance id) pairs of one group; a refusal untaints them, as CA's clean-up does."""
        group = self._groups.get(gid)
        if group is None:
            return
        try:
            self._compute.begin_delete_instances(group, [instance for _, instance in nodes])
        except ComputeError as exc:
            log.info("ca: DeleteNodes %s %s failed: %s", gid, nodes, exc)
            for node, _ in nodes:
                self._cluster.uncordon(node, taint_key=TO_BE_DELETED_TAINT)
                self._empties.pop(node, None)
            return
        self._actions += 1
        self._set_target(gid, max(0, group.capacity - len(nodes)))
