"""The gang replay: alibaba2023's multi-GPU jobs as all-or-nothing gangs, each asking a best-effort-atomic
ProvisioningRequest, run under `ours` and under `ca` (cluster-autoscaler as it behaves on Azure).

The gang rule. The openb pod list carries no job or app id, and its multi-GPU pods never arrive together: over
the whole trace no two pods asking for 2 or more GPUs share a creation second, nor a 300 s window with the same
shape. So "pods that arrive together for one job" gives no gang. Instead each pod asking for MIN_GANG_GPUS or more
GPUs is taken as one distributed job and replayed as a gang of one worker pod per GPU_PER_WORKER GPUs (torchrun's
and MPI's one rank per GPU, one pod per rank): the pod's CPU and memory split evenly among its workers (rounded up),
arriving when the pod was created, running for the pod's run time once all workers run.

What the run assumes, the same for both policies and seeds (`ASSUMPTIONS`, printed with every figure):
- a GPU family quota that binds at the peak: QUOTA_SHARE of the cores the peak's GPUs need, in whole large nodes;
- Azure's partial grants: the first ALLOCATION_FAILURES capacity increases of each GPU scale set leave one new
  instance Failed (ZonalAllocationFailed) after an operation that succeeded.

Each gang is a sandbox gang job (sandbox.world.gang_jobs: its PodTemplate and request, its pods once Provisioned,
a retry after Kueue's backoff on Failed). What is measured comes from watching the world's pods every
OBSERVE_EVERY (`GangObserver`): GPU-hours held by partial gangs (a gang's bound pods' GPUs while fewer than all its
workers are bound, before it was first complete), gang wait (arrival to all workers Running), gangs never complete,
requests seen and failed; cost and pods killed as every replay counts them (devtools.replay.metrics.run_result).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from devtools.replay.harness import (
    CLUSTER_NAME, DAEMONSET_CPU_MILLI, DAEMONSET_MEMORY_MIB, GPU, RESOURCE_GROUP, Replay, ReplayConfig, pool_of,
)
from devtools.replay.pools import GPU_POOL_2, GPU_POOL_4, Pool
from devtools.replay.traces import MIB, TRACE_DIR, TRACE_FILES, Trace, TracePod, read_alibaba2023
from sandbox.model import quota

# The window: the days where 70 of the trace's 75 multi-GPU pods arrive, replayed 78x faster (8 h of arrivals).
GANG_WINDOW_DAYS = (123.0, 149.0)
GANG_TIME_COMPRESSION = 78.0
MIN_GANG_GPUS = 2
GPUS_PER_WORKER = 1
GANG_POOLS: tuple[Pool, ...] = (GPU_POOL_2, GPU_POOL_4)
QUOTA_SHARE = 0.75
ALLOCATION_FAILURES = 3
ALLOCATION_FAILURE_CODE = "ZonalAllocationFailed"
OBSERVE_EVERY = timedelta(seconds=10)
TAIL_S = 3600.0
GANG_LABEL = "scheduling.x-k8s.io/pod-group"
ATOMIC_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
POLICIES = ("ours", "ca")
ASSUMPTIONS = (
    "gangs: each alibaba2023 pod asking for 2+ GPUs is one job, replayed as a gang of one 1-GPU worker per GPU "
    "(its CPU and memory split evenly); the trace has no job ids and no multi-GPU pods arriving together",
    f"gangs: GPU family quota {QUOTA_SHARE:.0%} of the cores the peak's GPUs need, in whole 96-core nodes (binds "
    "at the peak)",
    f"gangs: the first {ALLOCATION_FAILURES} capacity increases of each GPU scale set leave one new instance Failed "
    f"({ALLOCATION_FAILURE_CODE}) after a successful operation; same for every policy and seed",
)


@dataclass(frozen=True, slots=True)
class GangJob:
    """One gang: `workers` identical pods that all run or none does."""

    name: str
    at: float  # seconds after the replay's start
    duration: float  # seconds of work once every worker runs
    workers: int
    cpu_milli: int  # per worker
    memory_bytes: int  # per worker, whole MiB
    gpus: int  # per worker

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"gang {self.name}: workers must be at least 1, not {self.workers!r}")
        if self.gpus < 1:
            raise ValueError(f"gang {self.name}: gpus per worker must be at least 1, not {self.gpus!r}")

    @property
    def total_gpus(self) -> int:
        return self.workers * self.gpus

    def worker(self) -> TracePod:
        return TracePod(self.at, self.duration, self.cpu_milli, self.memory_bytes, gpus=self.gpus, job=self.name)


@dataclass(frozen=True, slots=True)
class GangWorkload:
    jobs: tuple[GangJob, ...]
    note: str  # the cut of the trace and the rule, with the numbers


def gangs_of(trace: Trace, *, pools: Sequence[Pool] = GANG_POOLS, min_gpus: int = MIN_GANG_GPUS,
             gpus_per_worker: int = GPUS_PER_WORKER) -> GangWorkload:
    """The trace's pods asking for `min_gpus` or more GPUs, each as a gang of one worker per `gpus_per_worker` GPUs
    (a remainder rounds the count up); gangs whose worker no pool holds are left out and counted in the note."""
    if min_gpus < 1 or gpus_per_worker < 1:
        raise ValueError(f"min_gpus and gpus_per_worker must be at least 1, not {min_gpus!r}, {gpus_per_worker!r}")
    jobs: list[GangJob] = []
    unfit = 0
    for pod in trace.pods:
        if pod.gpus < min_gpus:
            continue
        workers = math.ceil(pod.gpus / gpus_per_worker)
        job = GangJob(
            name=f"gang-{len(jobs) + unfit:03d}", at=pod.at, duration=pod.duration, workers=workers,
            cpu_milli=math.ceil(pod.cpu_milli / workers),
            memory_bytes=max(1, math.ceil(pod.memory_bytes / workers / MIB)) * MIB,
            gpus=min(gpus_per_worker, pod.gpus),
        )
        if pool_of(job.worker(), pools) is None:
            unfit += 1
            continue
        jobs.append(job)
    sizes = sorted({j.workers for j in jobs})
    note = (f"Gangs from {trace.name}: {trace.note} Pods asking for {min_gpus}+ GPUs, each a gang of one "
            f"worker per {gpus_per_worker} GPU(s): {len(jobs)} gangs of "
            f"{', '.join(map(str, sizes)) or 'no'} workers ({sum(j.workers for j in jobs)} pods)"
            f"{f'; {unfit} left out (no pool holds a worker)' if unfit else ''}.")
    return GangWorkload(tuple(jobs), note)


def load_gang_workload(path: str | Path | None = None) -> GangWorkload:
    """The gang workload from the shared alibaba2023 pod list (or `path`), over GANG_WINDOW_DAYS."""
    source = Path(path) if path is not None else TRACE_DIR / TRACE_FILES["alibaba2023"]
    trace = read_alibaba2023(source, window_days=GANG_WINDOW_DAYS, time_compression=GANG_TIME_COMPRESSION)
    return gangs_of(trace)


def peak_gpus(jobs: Sequence[GangJob]) -> int:
    """Most GPUs the gangs hold at once if each ran from arrival for its duration."""
    events = sorted([(j.at, j.total_gpus) for j in jobs] + [(j.at + j.duration, -j.total_gpus) for j in jobs],
                    key=lambda e: (e[0], e[1]))  # ends before starts at one instant
    held = peak = 0
    for _, change in events:
        held += change
        peak = max(peak, held)
    return peak


def family_quota(jobs: Sequence[GangJob], pools: Sequence[Pool] = GANG_POOLS, *,
                 share: float = QUOTA_SHARE) -> dict[str, int]:
    """The GPU family's vCPU quota: `share` of the cores the peak's GPUs need on the largest pool's nodes, rounded
    down to whole such nodes (at least one)."""
    largest = max(pools, key=lambda p: p.gpus)
    node_cores = math.ceil(largest.cpu_milli / 1000)
    nodes = math.ceil(peak_gpus(jobs) / largest.gpus)
    return {quota.vm_family(largest.vm_size): max(1, math.floor(nodes * share)) * node_cores}


@dataclass(frozen=True, slots=True)
class GangConfig:
    seed: int = 0
    pools: tuple[Pool, ...] = GANG_POOLS
    boot_median_s: float = 100.0
    boot_p95_s: float = 300.0
    boot_max_s: float = 900.0
    quota_share: float = QUOTA_SHARE
    allocation_failures: int = ALLOCATION_FAILURES
    settings: Mapping[str, str] = field(default_factory=dict)  # app-setting overrides for `ours`


def gang_scenario(workload: GangWorkload, config: GangConfig = GangConfig()) -> dict[str, Any]:
    """The sandbox scenario: the GPU pools from zero, the family quota, the partial grants, one gang job per gang."""
    jobs = workload.jobs
    end = math.ceil(max((j.at + j.duration for j in jobs), default=0.0) + TAIL_S)
    scenario: dict[str, Any] = {
        "name": "replay-gangs",
        "cluster_name": CLUSTER_NAME,
        "duration": end,
        "timeline_interval": 60,
        "boot_delay": {"median": config.boot_median_s, "p95": config.boot_p95_s, "max": config.boot_max_s},
        "node_groups": [pool.node_group(resource_group=RESOURCE_GROUP) for pool in config.pools],
        "daemonsets": [{"name": "kube-proxy", "namespace": "kube-system",
                        "requests": {"cpu": f"{DAEMONSET_CPU_MILLI}m", "memory": f"{DAEMONSET_MEMORY_MIB}Mi"}}],
        "quotas": family_quota(jobs, config.pools, share=config.quota_share),
        "gang_jobs": [{
            "name": j.name, "namespace": "default", "at": f"{j.at:.3f}s", "pods": j.workers,
            "requests": {"cpu": f"{j.cpu_milli}m", "memory": f"{j.memory_bytes // MIB}Mi", GPU: j.gpus},
            "duration": f"{j.duration:.3f}s", "class": "atomic",
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
        } for j in jobs],
    }
    if config.allocation_failures:
        scenario["allocation_failures"] = [
            {"scale_set": pool.name, "code": ALLOCATION_FAILURE_CODE, "instances": 1,
             "count": config.allocation_failures} for pool in config.pools if pool.gpus]
    return scenario


@dataclass(slots=True)
class _GangSeen:
    bound: int = 0
    complete_at: float | None = None
    held_gpu_s: float = 0.0


class GangObserver:
    """Watches the world's gang pods (label GANG_LABEL) at each look and integrates, per gang, the GPUs its bound
    pods hold while the gang is incomplete (before it first has every worker Running)."""

    def __init__(self, jobs: Sequence[GangJob]) -> None:
        self.jobs = {j.name: j for j in jobs}
        self.seen = {name: _GangSeen() for name in self.jobs}
        self.requests: dict[str, str] = {}  # request namespace/name -> its gang's job ("" if unknown)
        self.failed_requests: set[str] = set()
        self._last: float | None = None

    def look(self, t: float, pods: Sequence[Mapping[str, Any]],
             requests: Sequence[Mapping[str, Any]] = ()) -> None:
        """One look at time `t` (seconds): the interval since the last look is charged at the last look's counts."""
        if self._last is not None and t > self._last:
            dt = t - self._last
            for name, seen in self.seen.items():
                if seen.complete_at is None and 0 < seen.bound < self.jobs[name].workers:
                    seen.held_gpu_s += seen.bound * self.jobs[name].gpus * dt
        self._last = t
        bound: dict[str, int] = {}
        running: dict[str, int] = {}
        for pod in pods:
            job = ((pod.get("metadata") or {}).get("labels") or {}).get(GANG_LABEL)
            if job not in self.seen:
                continue
            phase = (pod.get("status") or {}).get("phase")
            if not (pod.get("spec") or {}).get("nodeName") or phase in ("Succeeded", "Failed"):
                continue
            bound[job] = bound.get(job, 0) + 1
            if phase == "Running":
                running[job] = running.get(job, 0) + 1
        for name, seen in self.seen.items():
            seen.bound = bound.get(name, 0)
            if seen.complete_at is None and running.get(name, 0) >= self.jobs[name].workers:
                seen.complete_at = t
        for obj in requests:
            meta = obj.get("metadata") or {}
            key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            self.requests.setdefault(key, "")
            if any(c.get("type") == "Failed" and c.get("status") == "True"
                   for c in (obj.get("status") or {}).get("conditions") or ()):
                self.failed_requests.add(key)

    def result(self, end: float) -> dict[str, Any]:
        """GPU-hours held by partial gangs, gang waits (never complete: charged to `end`), requests."""
        waits = sorted((s.complete_at if s.complete_at is not None else end) - self.jobs[n].at
                       for n, s in self.seen.items())
        return {
            "gangs": len(self.jobs),
            "gangs_never_complete": sum(1 for s in self.seen.values() if s.complete_at is None),
            "partial_gang_gpu_hours": round(sum(s.held_gpu_s for s in self.seen.values()) / 3600, 3),
            "gangs_held_partial": sum(1 for s in self.seen.values() if s.held_gpu_s > 0),
            "gang_wait_s": {"p50": _percentile(waits, 0.50), "p95": _percentile(waits, 0.95),
                            "max": waits[-1] if waits else 0.0},
            "requests": len(self.requests),
            "requests_failed": len(self.failed_requests),
            "requests_retried": max(0, len(self.requests) - len(self.jobs)),
        }


def _percentile(ordered: Sequence[float], q: float) -> float:
    if not ordered:
        return 0.0
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 1)


class _Observed:
    """A policy with the observer's looks between its own wake-ups (every OBSERVE_EVERY at least)."""

    def __init__(self, policy: Any, observer: GangObserver, world: Any) -> None:
        self.policy, self.observer, self.world = policy, observer, world
        self.name = policy.name

    def next_wakeup(self, now: datetime) -> datetime | None:
        own = self.policy.next_wakeup(now)
        probe = now + OBSERVE_EVERY
        return probe if own is None else min(own, probe)

    def wake(self, now: datetime) -> None:
        self.observer.look(self.world.t, self.world.k8s_view("pods"), _requests(self.world))
        self.policy.wake(now)  # every policy here acts only on what is due, so an extra wake-up changes nothing

    def scale_actions(self) -> int:
        return self.policy.scale_actions()


def _requests(world: Any) -> list[dict[str, Any]]:
    try:
        return world.k8s_view("provisioningrequests")
    except Exception:  # a world without the resource: no requests to count
        return []


class GangReplayUnavailable(RuntimeError):
    """The sandbox cannot run gang jobs yet (its scenario has no `gang_jobs`): the replay names what is missing."""


def run_gangs(policy: str, workload: GangWorkload, config: GangConfig = GangConfig()) -> dict[str, Any]:
    """One run of the gang workload under `policy` ("ours" or "ca"): the gang figures, cost, pods killed."""
    from devtools.replay.metrics import run_result
    from devtools.replay.policies.ca import CA_SETTINGS, ClusterAutoscaler
    from devtools.replay.policies.ca_provreq import CaProvisioningRequests
    from devtools.replay.policies.ours import Ours
    from sandbox.model.scenario import ScenarioError
    from sandbox.world import World

    if policy not in POLICIES:
        raise ValueError(f"unknown gang policy {policy!r}: choose one of {', '.join(POLICIES)}")
    if not workload.jobs:
        raise ValueError("the gang workload has no gangs")
    try:
        world = World(gang_scenario(workload, config), seed=config.seed)
    except ScenarioError as exc:
        raise GangReplayUnavailable(f"the sandbox refused the gang scenario: {exc}") from exc
    replay_config = ReplayConfig(seed=config.seed, pools=config.pools, boot_median_s=config.boot_median_s,
                                 boot_p95_s=config.boot_p95_s, boot_max_s=config.boot_max_s, tail_s=TAIL_S)
    run = Replay(world, replay_config)
    chosen: Any
    if policy == "ours":
        chosen = Ours(run, settings={"PROVISIONING_REQUESTS": "true", **config.settings})
    else:
        chosen = ClusterAutoscaler(run, settings=CA_SETTINGS, provisioning=CaProvisioningRequests(run))
    observer = GangObserver(workload.jobs)
    run.run(_Observed(chosen, observer, world))
    if not observer.requests:
        raise GangReplayUnavailable("the sandbox created no ProvisioningRequest: its gang jobs are not played")
    base = run_result(world, config.pools, scale_actions=chosen.scale_actions(), oracle_cost=0.0,
                      removed=chosen.removed_nodes)
    result = observer.result(world.t)
    result.update({"cost": base["cost"], "pods_killed": base["pods_killed"], "scale_actions": base["scale_actions"],
                   "assumptions": list(ASSUMPTIONS)})
    played = world.report().get("gang_jobs") or {}
    # The sandbox's own account (sandbox.world.gang_jobs): held from each pod's start, where the observer counts
    # from its binding; attempts and jobs given up after Kueue's retries.
    result["sandbox"] = {"partial_gang_gpu_hours": round(played.get("partial_gang_gpu_seconds", 0.0) / 3600, 3),
                         "attempts": played.get("attempts", 0), "completed": played.get("completed", 0),
                         "given_up": played.get("given_up", 0)}
    return result


def evaluate_gang_targets(per_policy: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Issue 32's targets for ours on the gang replay, met or missed (never asserted)."""
    ours, ca = per_policy.get("ours"), per_policy.get("ca")
    if ours is None:
        return []
    targets = [
        {"name": "0 GPU-hours held by partial gangs", "met": ours["partial_gang_gpu_hours"] == 0,
         "detail": f"{ours['partial_gang_gpu_hours']:.2f} GPU-h"
                   + (f" (ca {ca['partial_gang_gpu_hours']:.2f})" if ca is not None else "")},
        {"name": "no running pod killed", "met": ours["pods_killed"] == 0, "detail": f"{ours['pods_killed']} killed"},
    ]
    if ca is not None:
        p95, ca_p95 = ours["gang_wait_s"]["p95"], ca["gang_wait_s"]["p95"]
        targets.append({"name": "gang p95 wait no worse than ca's", "met": p95 <= ca_p95,
                        "detail": f"{p95:.0f} s vs {ca_p95:.0f} s"})
    return targets


def gang_table(per_policy: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The bench's markdown table for the gang replay."""
    lines = ["| policy | partial-gang GPU-h | gangs held partial | gang wait p50 / p95 | never complete | "
             "requests (failed) | gangs done / given up | pods killed | cost |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in per_policy.items():
        if "error" in r:
            lines.append(f"| {name} | could not run: {r['error']} | | | | | | | |")
            continue
        played = r.get("sandbox") or {}
        lines.append(f"| {name} | {r['partial_gang_gpu_hours']:.2f} | {r['gangs_held_partial']} | "
                     f"{r['gang_wait_s']['p50']:.0f} / {r['gang_wait_s']['p95']:.0f} s | {r['gangs_never_complete']} | "
                     f"{r['requests']} ({r['requests_failed']}) | {played.get('completed', '-')} / "
                     f"{played.get('given_up', '-')} | {r['pods_killed']} | ${r['cost']:,.2f} |")
    return lines


def run_gang_suite(config: GangConfig = GangConfig()) -> dict[str, Any]:
    """Both policies on the gang workload: results per policy (or why one could not run) and the targets."""
    workload = load_gang_workload()
    per_policy: dict[str, dict[str, Any]] = {}
    for policy in POLICIES:
        try:
            per_policy[policy] = run_gangs(policy, workload, config)
        except GangReplayUnavailable as exc:
            per_policy[policy] = {"error": str(exc)}
    ran = {k: v for k, v in per_policy.items() if "error" not in v}
    return {"note": workload.note, "assumptions": list(ASSUMPTIONS), "results": per_policy,
            "targets": evaluate_gang_targets(ran) if "ours" in ran else []}


def gang_markdown(section: Mapping[str, Any]) -> str:
    """The gang replay's part of the bench report: its note, assumptions, table and targets (met or MISSED)."""
    lines = ["### Gangs (alibaba2023 multi-GPU jobs, best-effort-atomic ProvisioningRequests)", "",
             section.get("note", ""), "", *(f"- assumption: {a}" for a in section.get("assumptions", ())), "",
             *gang_table(section.get("results") or {}), ""]
    targets = section.get("targets") or ()
    if targets:
        lines.append("Targets:")
        lines += [f"- {'met' if t['met'] else '**MISSED**'}: {t['name']} — {t['detail']}" for t in targets]
        lines.append("")
    return "\n".join(lines)
