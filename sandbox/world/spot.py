"""Spot VMs in the world: Spot capacity, admitting capacity increases, evictions and their Scheduled Events.

`SpotPart` owns the log of every capacity increase (`capacity_increases` in the report), the Spot capacity
failures, the planned and done evictions, the Event Grid events published (in order, with a sequence number)
and the Nodes left behind by evicted VMs. Facts: shared/facts/burst-and-spot.md, "Spot VMs in scale sets".

Admitting a capacity increase (`_admit_capacity_increase`, `_admit_start`, called by `sandbox.world.scale_sets`
for a scale set's capacity, an agent pool's count and starting deallocated instances): the quota first
(`sandbox.world.quota`, a refusal is a 409), then the scenario's `spot_capacity` for a Spot set: beyond
`available` Spot instances holding hardware (not deallocated, not being deleted), `SkuNotAvailable` is a 409
and nothing changes; an allocation code fails the long-running operation as an injected scale-up failure does
(armed at the front of the scale set's queue of `scale_up_failures`, consumed at once).

Spot availability (the scenario's `spot_availability`): each entry's Spot Placement Score level is a Markov chain
stepped every `step` seconds from its own seeded stream (`_rng("spot-availability", entry)`), so the same seed and
scenario give the same levels whatever the autoscaler does. While a level holds, its `available` caps the set's
Spot instances holding hardware as `spot_capacity` does (the same refusal or allocation failure), and its
`eviction_rate_per_hour` is a Poisson process per running instance, drawn by thinning against the entry's highest
rate (a candidate kept with probability running / bound x rate now / highest rate; its own seeded stream).

Evictions (the scenario's `evictions`, and `simulate_eviction`): with `notice`, a Preempt Scheduled Event
(`sandbox.world.scheduled_events`) is published 30 s before the eviction (at once when the eviction is due sooner
than that), and the instances are picked then: the `count` oldest running instances of the set (by creation,
then instance id), or for `rate_per_hour` a Poisson process per running instance, drawn by thinning: candidate
times at `rate x max(max, initial, 1)` per hour, each kept with probability running / that bound (always kept
when more are running), the victim drawn among the running ones; its stream is seeded from the seed and the
entry alone. At the eviction an instance still running (the autoscaler may have deleted or deallocated it
meanwhile) is evicted by its set's policy:

- `Delete`: it leaves the set at once (capacity drops, it is in no instance list any more);
- `Deallocate`: it is deallocated at once (it stays in capacity, `PowerState/deallocated`, and keeps counting
  against `lowPriorityCores`); starting it again obeys quota and Spot capacity like any start.

Either way its node goes NotReady and unreachable and its running pods die, as when any VM shuts down
(`sandbox.world.nodes._node_lost`, `sandbox.world.pod_lifecycle._kill_pods_on`), and the Node object stays
(as on k3s or kubeadm without a cloud provider) unless the scenario's `cloud_node_lifecycle` has it deleted
after `node_removal_delay`. A Node stays stale until it is deleted or its VM, started again, is Ready.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sandbox.model import quota
from sandbox.model.spot import EVICTION_NOTICE_SECONDS, SKU_NOT_AVAILABLE, capacity_message
from sandbox.model.spot_spec import AvailabilitySpec, EvictionSpec
from sandbox.world import scheduled_events
from sandbox.world.compute import InstanceSim, ScaleSetSim
from sandbox.world.core import WorldCore
from sandbox.world.errors import ArmError
from sandbox.world.faults import ScaleUpFailure
from sandbox.world.instance_mix import next_sizes
from sandbox.world.metrics import seconds


@dataclass(slots=True)
class PlannedEviction:
    """One instance Azure will evict at `due`; `noticed_at` when its Preempt event went out."""

    inst: InstanceSim
    due: float
    noticed_at: float | None
    pods_at_notice: frozenset[str] = frozenset()  # uids of the workload pods running on its node then


@dataclass(frozen=True, slots=True)
class EvictionDue:
    """The `spot_evict` event: evict `planned` (picked at the notice), or pick entry `spec_index`'s victims now."""

    due: float
    spec_index: int | None = None
    planned: tuple[PlannedEviction, ...] = ()


@dataclass(slots=True)
class StaleNode:
    """A Node whose VM was evicted: stale from `since` until deleted or Ready again (`until`, None while it lasts)."""

    node: str
    inst: InstanceSim
    since: float
    starts: int  # the instance's starts at the eviction: a later start brings the node back
    until: float | None = None


@dataclass(slots=True)
class _SpotTally:
    notices: int = 0
    evictions: int = 0
    evictions_with_notice: int = 0
    evicted_pods: int = 0
    evicted_job_pods: int = 0
    lost_work: float = 0.0
    moved: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    failure_times: list[float] = field(default_factory=list)


@dataclass(slots=True)
class _Availability:
    """One `spot_availability` entry as the run goes: its level, the level's history, its two streams."""

    spec: AvailabilitySpec
    level: str
    levels: Any  # random.Random: the chain's draws
    evictions: Any  # random.Random: the eviction candidates' draws
    history: list[tuple[float, str]]
    refusals: Counter[str] = field(default_factory=Counter)  # capacity failures by the level they happened at
    candidate_at: float | None = None


class SpotPart(WorldCore):
    """Spot capacity, admission of capacity increases, evictions. See the module docstring."""

    def _init_spot_state(self) -> None:
        self._capacity_log: list[dict[str, Any]] = []
        self._spot = _SpotTally()
        self._eventgrid: list[dict[str, Any]] = []  # {"seq", "event"}, in publishing order
        self._planned: set[tuple[str, int]] = set()  # (group key, instance id) picked and not yet due
        self._eviction_log: list[dict[str, Any]] = []
        self._stale: list[StaleNode] = []
        self._eviction_streams: dict[int, Any] = {}
        self._candidate_at: dict[int, float] = {}  # entry -> its next Poisson candidate time (`next_notice_at`)
        self._availability: list[_Availability] = []

    def _init_spot(self) -> None:
        """The scenario's evictions on the event queue (after the scale sets; draws no ids), and the quota peaks of
        the initial instances."""
        for index, spec in enumerate(self.scenario.evictions):
            if spec.rate_per_hour is not None:
                self._eviction_streams[index] = self._rng("evictions", index)
                self._next_candidate(index)
                continue
            for due in spec.at:
                if spec.notice:
                    self._push(max(0.0, due - EVICTION_NOTICE_SECONDS), "spot_notice", (index, due))
                else:
                    self._push(due, "spot_evict", EvictionDue(due, spec_index=index))
        for index, spec in enumerate(self.scenario.spot_availability):
            state = _Availability(spec, spec.initial, self._rng("spot-availability", index),
                                  self._rng("spot-availability-evictions", index), [(0.0, spec.initial)])
            self._availability.append(state)
            self._push(spec.step, "spot_level", index)
            if spec.max_rate > 0:
                self._next_level_candidate(index)
        self._note_quota_peaks()

    def _eviction_group(self, spec: EvictionSpec | AvailabilitySpec) -> ScaleSetSim:
        return next(
            g for g in self._groups.values()
            if g.name == spec.scale_set
            and (spec.resource_group is None or g.resource_group.lower() == spec.resource_group.lower())
        )

    # ------------------------------------------------------------------ admitting capacity increases

    def _log_increase(self, group: ScaleSetSim, kind: str, from_: int, to: int, outcome: str) -> None:
        self._capacity_log.append({
            "t": round(self._t, 3), "scale_set": group.name, "kind": kind, "from": from_, "to": to, "outcome": outcome,
            "spot": group.spec.priority == "Spot",
        })

    def _spot_capacity_code(self, group: ScaleSetSim, adding: int) -> str | None:
        """The failure code when `adding` more Spot instances of the set would exceed the Spot capacity now."""
        if group.spec.priority != "Spot" or adding <= 0:
            return None
        entries = [
            e for e in self.scenario.spot_capacity
            if e.scale_set == group.name and e.applies(self._t)
            and (e.resource_group is None or e.resource_group.lower() == group.resource_group.lower())
        ]
        limits = [(e.available, e.code) for e in entries]
        for state in self._availability_of(group):
            level = state.spec.level(state.level)
            if level.available is not None:
                limits.append((level.available, level.code))
        if not limits:
            return None
        available, code = min(limits, key=lambda limit: limit[0])
        held = sum(1 for i in group.instances.values() if i.state != "Deleting" and i.power != "deallocated")
        if held + adding <= available:
            return None
        for state in self._availability_of(group):
            state.refusals[state.level] += 1
        return code

    def _availability_of(self, group: ScaleSetSim) -> list[_Availability]:
        return [
            s for s in self._availability
            if s.spec.scale_set == group.name
            and (s.spec.resource_group is None or s.spec.resource_group.lower() == group.resource_group.lower())
        ]

    def _spot_failure(self, group: ScaleSetSim, code: str) -> str:
        self._spot.failures[code] += 1
        self._spot.failure_times.append(self._t)
        return capacity_message(code, group.spec.vm_size, group.spec.location, group.spec.zones[0] if group.spec.zones else "")

    def _admit_capacity_increase(self, group: ScaleSetSim, current: int, target: int) -> None:
        """Before a scale set grows from `current` active instances to `target`: refuse (raise ArmError) for quota
        or SkuNotAvailable, nothing changed; arm an allocation failure for `set_capacity` to consume. Logs a
        refusal; `set_capacity` logs what it does otherwise."""
        adding = target - current
        try:
            self._check_quota(group, _added_vcpus(group, adding))
        except ArmError as refusal:
            self._log_increase(group, "capacity", group.capacity, target, refusal.code)
            raise
        code = self._spot_capacity_code(group, adding)
        if code is None:
            return
        message = self._spot_failure(group, code)
        if code == SKU_NOT_AVAILABLE:
            self._log_increase(group, "capacity", group.capacity, target, code)
            raise ArmError(409, code, message, "sku.name")
        group.scale_up_failures.insert(0, ScaleUpFailure(group.name, code, message, 1))

    def _admit_start(self, group: ScaleSetSim, targets: list[InstanceSim]) -> tuple[str, str] | None:
        """Before deallocated instances start: refuse (raise ArmError) for quota or SkuNotAvailable; an allocation
        failure is returned as (code, message) for the start operation to fail with. None: go ahead."""
        waking = [i for i in targets if i.power == "deallocated"]  # deallocating ones still hold their hardware
        if not any(i.power in ("deallocating", "deallocated") for i in targets):
            return None
        allocated = sum(1 for i in group.active() if i.power != "deallocated")
        # A deallocated VM, Regular or Spot, still counts against its quotas (sandbox.world.quota): starting it adds
        # nothing there, so the check is only counted.
        try:
            self._check_quota(group, 0)
        except ArmError as refusal:
            self._log_increase(group, "start", allocated, allocated + len(waking), refusal.code)
            raise
        code = self._spot_capacity_code(group, len(waking))
        outcome = code or "ok"
        self._log_increase(group, "start", allocated, allocated + len(waking), outcome)
        if code is None:
            return None
        message = self._spot_failure(group, code)
        if code == SKU_NOT_AVAILABLE:
            raise ArmError(409, code, message, "sku.name")
        return code, message

    # ------------------------------------------------------------------ evictions

    def _running(self, group: ScaleSetSim) -> list[InstanceSim]:
        """Running instances not already picked for an eviction, oldest first."""
        return sorted(
            (i for i in group.instances.values()
             if i.state == "Succeeded" and i.power == "running" and (group.key, i.instance_id) not in self._planned),
            key=lambda i: (i.created_at, i.instance_id),
        )

    def _workload_pods_on(self, node: str) -> list[Any]:
        """The pods whose containers run on the node now: not DaemonSet or mirror pods, Running, not terminating."""
        return [
            p for p in self._live.values()
            if p.node == node and not p.node_bound and not p.terminating
            and self._pod_obj(p)["status"].get("phase") == "Running"
        ]

    def _plan(self, inst: InstanceSim, due: float, *, notice: bool) -> PlannedEviction:
        self._planned.add((inst.group_key, inst.instance_id))
        if not notice:
            return PlannedEviction(inst, due, None)
        self._publish_preempt(inst, due)
        pods = frozenset(p.uid for p in self._workload_pods_on(inst.node_name)) if self._owns_node(inst) else frozenset()
        return PlannedEviction(inst, due, self._t, pods)

    def _owns_node(self, inst: InstanceSim) -> bool:
        return self._by_node.get(inst.node_name) is inst and self._store.get("nodes", "", inst.node_name) is not None

    def _on_spot_notice(self, payload: tuple[int, float]) -> None:
        index, due = payload
        spec = self.scenario.evictions[index]
        victims = self._running(self._eviction_group(spec))[: spec.count]
        planned = tuple(self._plan(inst, due, notice=True) for inst in victims)
        self._push(due, "spot_evict", EvictionDue(due, planned=planned))

    def _on_spot_evict(self, payload: EvictionDue) -> None:
        planned = payload.planned
        if payload.spec_index is not None:  # no notice: picked at the eviction itself
            spec = self.scenario.evictions[payload.spec_index]
            victims = self._running(self._eviction_group(spec))[: spec.count]
            planned = tuple(self._plan(inst, payload.due, notice=False) for inst in victims)
        for plan in planned:
            self._planned.discard((plan.inst.group_key, plan.inst.instance_id))
            self._count_moved(plan)
            inst = plan.inst
            if inst.alive and inst.state != "Deleting" and inst.power in ("running", "starting"):
                self._evict(inst, noticed=plan.noticed_at is not None)

    def _count_moved(self, plan: PlannedEviction) -> None:
        """Pods running on the node at the notice and deleted or evicted since (not finished, not killed): moved
        off it in time, the autoscaler having acted on the notice."""
        for uid in plan.pods_at_notice:
            pod = self._pods[uid]
            if (pod.terminating or pod.deleted is not None) and pod.finished is None and not pod.killed:
                self._spot.moved += 1

    def _next_candidate(self, index: int) -> None:
        spec = self.scenario.evictions[index]
        group_spec = self._eviction_group(spec).spec
        bound = max(group_spec.max_size, group_spec.initial, 1)
        rate = (spec.rate_per_hour or 0.0) * bound / 3600.0
        self._candidate_at[index] = self._t + self._eviction_streams[index].expovariate(rate)
        self._push(self._candidate_at[index], "spot_candidate", index)

    def _on_spot_candidate(self, index: int) -> None:
        spec = self.scenario.evictions[index]
        group = self._eviction_group(spec)
        stream = self._eviction_streams[index]
        keep, pick = stream.random(), stream.random()  # always two draws: the stream stays aligned
        running = self._running(group)
        bound = max(group.spec.max_size, group.spec.initial, 1)
        if running and keep < len(running) / bound:
            self._evict_soon(running[min(int(pick * len(running)), len(running) - 1)], notice=spec.notice)
        self._next_candidate(index)

    def _on_spot_level(self, index: int) -> None:
        """One step of an availability entry's chain: draw the next level (always one draw per step)."""
        state = self._availability[index]
        draw = state.levels.random()
        moves = state.spec.level(state.level).next
        nxt, acc = moves[-1][0], 0.0
        for target, p in moves:
            acc += p
            if draw < acc:
                nxt = target
                break
        if nxt != state.level:
            state.level = nxt
            state.history.append((self._t, nxt))
        self._push(self._t + state.spec.step, "spot_level", index)

    def _next_level_candidate(self, index: int) -> None:
        state = self._availability[index]
        group_spec = self._eviction_group(state.spec).spec
        bound = max(group_spec.max_size, group_spec.initial, 1)
        state.candidate_at = self._t + state.evictions.expovariate(state.spec.max_rate * bound / 3600.0)
        self._push(state.candidate_at, "spot_level_candidate", index)

    def _on_spot_level_candidate(self, index: int) -> None:
        state = self._availability[index]
        group = self._eviction_group(state.spec)
        keep, pick = state.evictions.random(), state.evictions.random()  # always two draws: the stream stays aligned
        running = self._running(group)
        bound = max(group.spec.max_size, group.spec.initial, 1)
        share = state.spec.level(state.level).eviction_rate_per_hour / state.spec.max_rate
        if running and keep < len(running) / bound * share:
            self._evict_soon(running[min(int(pick * len(running)), len(running) - 1)], notice=state.spec.notice)
        self._next_level_candidate(index)

    def _evict_soon(self, inst: InstanceSim, *, notice: bool) -> None:
        """Plan one instance's eviction: 30 s after its Preempt notice, or at once without one."""
        due = self._t + (EVICTION_NOTICE_SECONDS if notice else 0.0)
        self._push(due, "spot_evict", EvictionDue(due, planned=(self._plan(inst, due, notice=notice),)))

    def _evict(self, inst: InstanceSim, *, noticed: bool) -> None:
        group = self._groups[inst.group_key]
        tally = self._spot
        tally.evictions += 1
        tally.evictions_with_notice += int(noticed)
        node_name = inst.node_name
        has_node = self._owns_node(inst)
        if has_node:
            victims = self._workload_pods_on(node_name)
            jobs = [p for p in victims if p.owner_kind == "Job"]
            tally.evicted_pods += len(victims)
            tally.evicted_job_pods += len(jobs)
            tally.lost_work += sum(self._t - p.started for p in jobs if p.started is not None)
            if not inst.node_deleted_by_api:
                self._node_lost(self._store.get("nodes", "", node_name))  # type: ignore[arg-type]
                self._kill_pods_on(node_name)
        inst.power_seq += 1  # a deallocation or start under way is preempted, stale timer events ignored
        group.generation += 1
        if group.spec.eviction_policy == "Delete":
            group.instances.pop(inst.instance_id, None)
            inst.vanished_at = self._t
            self._gone.append(inst)
            group.capacity = max(0, group.capacity - 1)
        else:
            inst.state, inst.power = "Succeeded", "deallocated"
        if inst.unbilled_since is None:
            inst.unbilled_since = self._t
            self._alive -= 1
        self._eviction_log.append({
            "t": round(self._t, 3), "scale_set": group.name, "instance_id": inst.report_id, "node": node_name,
            "policy": group.spec.eviction_policy, "notice": noticed,
        })
        if has_node:
            self._stale.append(StaleNode(node_name, inst, self._t, inst.starts))
            if self.scenario.cloud_node_lifecycle:
                self._push(self._t + self.scenario.node_removal_delay, "spot_node_gc", (inst, inst.power_seq))
        self._retry_all_pending = True
        self._dirty = True

    def _on_spot_node_gc(self, payload: tuple[InstanceSim, int]) -> None:
        """The cloud node lifecycle controller deletes the Node of an evicted VM (one not started again since)."""
        inst, seq = payload
        if inst.power_seq == seq and self._owns_node(inst):
            self._remove_node(inst.node_name)

    def _spot_node_removed(self, name: str) -> None:
        """A Node was deleted (through the API or by a controller): a stale one stops being stale."""
        for stale in self._stale:
            if stale.node == name and stale.until is None:
                stale.until = self._t

    def _publish_preempt(self, inst: InstanceSim, due: float) -> None:
        group = self._groups[inst.group_key]
        rg_id = f"/subscriptions/{self.subscription_id}/resourceGroups/{group.resource_group}"
        topic = f"{rg_id}/providers/Microsoft.Compute/virtualMachineScaleSets/{group.name}"
        if group.flexible:
            subject, resource = f"{rg_id}/providers/Microsoft.Compute/virtualMachines/{inst.vm_name}", inst.vm_name
        else:
            subject, resource = f"{topic}/virtualMachines/{inst.instance_id}", f"{group.name}_{inst.instance_id}"
        seq = len(self._eventgrid) + 1
        event_id = str(uuid.UUID(int=self._rng("scheduled-event", seq).getrandbits(128), version=4))
        event = scheduled_events.preempt_event(
            event_id=event_id, topic=topic, subject=subject, resource=resource, published=self._at(self._t),
            not_before=self._at(due),
        )
        self._eventgrid.append({"seq": seq, "event": event})
        self._spot.notices += 1

    # ------------------------------------------------------------------ public

    def note_refused_increase(self, group: ScaleSetSim, target: int, code: str) -> None:
        """A capacity increase the ARM surface refused itself (a size restricted for the subscription): logged."""
        with self.lock:
            self._log_increase(group, "capacity", group.capacity, target, code)

    def simulate_eviction(self, group: ScaleSetSim, inst: InstanceSim) -> None:
        """POST .../simulateEviction: the Preempt notice now, the eviction 30 s later (Azure evicts "soon" after the
        call; the 30 s of notice is the sandbox's choice). Only a running Spot VM can be evicted."""
        with self.lock:
            name = inst.vm_name or f"{group.name}_{inst.instance_id}"
            if group.spec.priority != "Spot":  # code as Azure refuses it; the wording is the sandbox's
                raise ArmError(409, "OperationNotAllowed", f"Simulate eviction is only supported for Spot VMs; '{name}' "
                                                           "is a Regular VM.")
            if inst.state == "Deleting" or inst.power != "running" or (group.key, inst.instance_id) in self._planned:
                raise ArmError(409, "OperationNotAllowed", f"Simulate eviction is not allowed on VM '{name}': it is not "
                                                           "running or is already being evicted.")
            due = self._t + EVICTION_NOTICE_SECONDS
            self._push(due, "spot_evict", EvictionDue(due, planned=(self._plan(inst, due, notice=True),)))
            self._dirty = True

    def next_notice_at(self) -> float | None:
        """The earliest sim time after now at which the scenario's evictions may publish a Preempt notice (a Poisson
        candidate, kept or not, or a timed entry's notice); None: none to come. For a driver that delivers the events
        as Event Grid would without polling every second (the replay); `simulate_eviction` publishes at its call."""
        with self.lock:
            times = [t for i, t in self._candidate_at.items() if self.scenario.evictions[i].notice and t > self._t]
            times += [s.candidate_at for s in self._availability
                      if s.spec.notice and s.candidate_at is not None and s.candidate_at > self._t]
            times += [max(0.0, due - EVICTION_NOTICE_SECONDS) for spec in self.scenario.evictions
                      if spec.notice and spec.rate_per_hour is None for due in spec.at
                      if max(0.0, due - EVICTION_NOTICE_SECONDS) > self._t]
            return min(times, default=None)

    def eventgrid_events(self, after: int = 0) -> list[dict[str, Any]]:
        """The Event Grid events published so far (every one is published when its time comes), those after `after`."""
        with self.lock:
            return [dict(entry) for entry in self._eventgrid if entry["seq"] > after]

    def spot_report(self) -> dict[str, Any]:
        """The report's `spot` section (see docs in the module and sandbox.world.reports)."""
        with self.lock:
            tally = self._spot
            stale_seconds = []
            at_end = 0
            for stale in self._stale:
                end = stale.until
                inst = stale.inst
                if end is None and inst.alive and inst.starts > stale.starts and inst.power == "running" \
                        and inst.ready_at <= self._t:
                    end = inst.ready_at  # started again and Ready: the same Node is good again
                if end is None:
                    at_end += 1
                    end = self._t
                stale_seconds.append(end - stale.since)
            fallback_lags = []
            missing = 0
            for failed_at in tally.failure_times:
                after = [e["t"] for e in self._capacity_log if not e["spot"] and e["outcome"] == "ok" and e["t"] >= failed_at]
                if after:
                    fallback_lags.append(min(after) - failed_at)
                else:
                    missing += 1
                    fallback_lags.append(self._t - failed_at)
            return {
                "evictions": tally.evictions,
                "evictions_with_notice": tally.evictions_with_notice,
                "notices_published": tally.notices,
                "evicted_pods": tally.evicted_pods,
                "evicted_job_pods": tally.evicted_job_pods,
                "lost_work_seconds": round(tally.lost_work, 3),
                "pods_moved_before_eviction": tally.moved,
                "stale_node_seconds_max": round(max(stale_seconds), 3) if stale_seconds else 0.0,
                "stale_nodes_at_end": at_end,
                "capacity_failures": dict(sorted(tally.failures.items())),
                "capacity_increases": [dict(e) for e in self._capacity_log],
                "fallback_lag_seconds": seconds(max(fallback_lags)) if fallback_lags else None,
                "fallbacks_missing": missing,
                "eviction_log": [dict(e) for e in self._eviction_log],
                "availability": [self._availability_report(state) for state in self._availability],
            }

    def _availability_report(self, state: _Availability) -> dict[str, Any]:
        """One availability entry's levels over the run: the changes, seconds at each level, refusals by level."""
        seconds_at: Counter[str] = Counter()
        for (since, level), (until, _) in zip(state.history, [*state.history[1:], (self._t, "")], strict=True):
            seconds_at[level] += max(0.0, min(until, self._t) - since)
        return {
            "scale_set": state.spec.scale_set,
            "levels": [{"t": round(t, 3), "level": level} for t, level in state.history],
            "seconds_at": {lv.name: round(seconds_at[lv.name], 3) for lv in state.spec.levels},
            "refusals_by_level": dict(sorted(state.refusals.items())),
        }


def _added_vcpus(group: ScaleSetSim, adding: int) -> int:
    """The vCPUs `adding` new VMs take: an instance mix's at the sizes its strategy will give them."""
    mix = group.spec.instance_mix
    if mix is None:
        return adding * quota.vcpus(group.spec.capacity)
    alive = (i.vm_size for i in group.active())
    return sum(quota.vcpus(size.capacity) for size in next_sizes(mix, alive, adding))
