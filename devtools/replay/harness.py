"""Virtual-time replay: one sandbox World per run, driven by a trace, decided by a policy.

The world runs in-process and only moves when the harness advances it: from one policy
wake-up (a timer, a queue message, a control loop's tick) to the next, never sleeping. The
same trace, seed and configuration give the same world, the same boot delays and therefore
the same numbers, whichever policy runs.

A policy is anything with `next_wakeup(now)` and `wake(now)` (see `Policy`); the ones that
act on the cluster do it through `Replay.cluster` and `Replay.compute`, the same ports the
functions use, so ARM calls are counted and throttled alike for every policy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Protocol

from devtools.replay.pools import DEFAULT_POOLS, Pool
from devtools.replay.runtime_estimates import annotation_value, estimates
from devtools.replay.spot import SPOT_TOLERATION, SpotTier
from devtools.replay.traces import Trace, TracePod
from devtools.replay.world_ports import WorldCluster, WorldCompute
from sandbox.model.resources import Amounts
from sandbox.model.scenario import Dist, WorkloadSpec
from sandbox.world import World
from shared.domain import Toleration
from shared.engine.spot_work import EXPECTED_RUNTIME_ANNOTATION

CLUSTER_NAME = "replay"
RESOURCE_GROUP = "rg-replay"
GPU = "nvidia.com/gpu"
MIB = 1 << 20
# What every node runs besides the trace's pods (kube-proxy-like); the oracle subtracts it too.
DAEMONSET_CPU_MILLI = 100
DAEMONSET_MEMORY_MIB = 128
_GPU_TOLERATION = Toleration(key=GPU, operator="Exists", effect="NoSchedule")
# The documented pattern for overflowing onto a virtual node: tolerate its taint, prefer VM nodes.
_VN_TOLERATION = Toleration(key="virtual-kubelet.io/provider", operator="Exists", effect="NoSchedule")
_PREFER_VMS = MappingProxyType({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
    "weight": 100, "preference": {"matchExpressions": [
        {"key": "type", "operator": "NotIn", "values": ["virtual-kubelet"]}]}}]}})


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """What a run varies besides the policy. Boot delay: lognormal with this median and p95, capped."""

    seed: int = 0
    pools: tuple[Pool, ...] = DEFAULT_POOLS
    boot_median_s: float = 100.0
    boot_p95_s: float = 300.0
    boot_max_s: float = 900.0
    # A start of a deallocated instance takes this fraction of the boot delay's median, p95 and cap. No published
    # figure: the suite keeps 0.5, never faster (devtools.replay.metrics.STOPPED_INSTANCE_ASSUMPTIONS); other values
    # are for a one-off sensitivity replay (`--start-fraction`).
    start_fraction: float = 0.5
    provisioning_failure_rate: float = 0.0  # share of capacity increases that fail with QuotaExceeded
    tail_s: float = 3600.0  # sim time after the trace's last pod would have ended with no waiting
    timeline_interval_s: float = 60.0
    job_ttl_s: float = 60.0  # finished pods are deleted this long after they end (Job ttlSecondsAfterFinished)
    settings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # app-setting overrides for `ours`
    # Overrides for the peers' emulations (`ca`: our setting names for CA's flags, e.g. SCALE_DOWN_UNNEEDED_TIME for
    # --scale-down-unneeded-time; `nap`: its own names, devtools.replay.policies.nap), so a frontier sweeps them too.
    peer_settings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # The virtual-node tier (the sandbox scenario's `virtual_node`: ACI quota, start latency, prices); None: none.
    # With it, every trace pod tolerates the virtual node and prefers VM nodes (the documented overflow pattern).
    virtual_node: Mapping[str, Any] | None = None
    # The spot tier (devtools.replay.spot.SpotTier's fields: eviction rate, notice, eviction policy, ...); None: none.
    # With it, every pool has a spot twin `<pool>-spot`, every trace pod tolerates spot, and Azure evicts.
    spot: Mapping[str, Any] | None = None
    # The subscription's regional vCPU quotas (the scenario's `quotas`: `lowPriorityCores`, `cores`, families);
    # empty: unlimited.
    quotas: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # Running headroom: a CapacityBuffer per CPU pool holding this many nodes' room from t=0 (`headroom_buffers`);
    # 0: none.
    buffer_nodes: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.buffer_nodes, bool) or not isinstance(self.buffer_nodes, int) or self.buffer_nodes < 0:
            raise ValueError(f"buffer_nodes must be a whole number of nodes, 0 or more, got {self.buffer_nodes!r}")


class Policy(Protocol):
    name: str

    def next_wakeup(self, now: datetime) -> datetime | None:
        """When the policy next wants to run (None: never again); strictly after `now` unless work is due."""
        ...

    def wake(self, now: datetime) -> None: ...

    def scale_actions(self) -> int:
        """Scale decisions carried out (grow, shrink or remove nodes), however many calls each took."""
        ...


def pool_of(pod: TracePod, pools: Sequence[Pool]) -> Pool | None:
    """The pool a pod belongs on: the first (pools are listed cheapest first) whose empty node holds it.

    GPU pods go to GPU pools only (the GPU taint keeps the rest off those nodes).
    """
    for pool in pools:
        if bool(pod.gpus) != bool(pool.gpus):
            continue
        if (
            pod.cpu_milli <= pool.cpu_milli - DAEMONSET_CPU_MILLI
            and pod.memory_bytes <= (pool.memory_mib - DAEMONSET_MEMORY_MIB) * MIB
            and pod.gpus <= pool.gpus
        ):
            return pool
    return None


def placeable(trace: Trace, pools: Sequence[Pool]) -> tuple[list[TracePod], int]:
    """The trace's pods some pool can hold, and how many none can (left out of every run alike)."""
    kept = [p for p in trace.pods if pool_of(p, pools) is not None]
    return kept, len(trace.pods) - len(kept)


# A headroom chunk's share of an empty node's room (allocatable less the DaemonSet): above half, so one chunk holds one
# node; below the planner's scale-from-zero estimate of a node (the VM size's capacity less AKS's reservations, about
# nine tenths of the pools' allocatable memory), so a chunk can be planned on a pool at zero, not only beside a live
# node of it.
CHUNK_SHARE = 0.85


def headroom_buffers(pools: Sequence[Pool], nodes: int) -> list[dict[str, Any]]:
    """The scenario's `capacity_buffers` for `nodes` nodes' room in each CPU pool: one buffer per pool, created at
    t=0, whose chunk is CHUNK_SHARE of one empty node of that pool and whose replicas are `nodes`.

    A node-sized chunk, not a trace-shaped pod: the trace's pods vary in size, and a node's room is what an operator
    can price (N nodes at the pool's rate) and what a burst of any shape can use. Such a chunk fits a node with at
    most the rest of its room taken, so the buffer keeps about `nodes` empty Ready nodes; pods landing on one take
    it out of the buffer and the next pending poll asks for another. GPU and spot pools get none: their pods
    tolerate a taint the placeholder does not, and a GPU node's room is priced apart."""
    if nodes <= 0:
        return []
    return [{"at": "0s", "action": "create", "namespace": "default", "name": f"headroom-{pool.name}",
             "replicas": nodes,
             "requests": {"cpu": f"{int((pool.cpu_milli - DAEMONSET_CPU_MILLI) * CHUNK_SHARE)}m",
                          "memory": f"{int((pool.memory_mib - DAEMONSET_MEMORY_MIB) * CHUNK_SHARE)}Mi"}}
            for pool in pools if not pool.gpus and not pool.is_spot]


def _job_name(job: str, index: int) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", job.lower()).strip("-")[:40] if job else ""
    return f"job-{base}" if base else f"pod-{index}"


def workload_estimates(pods: Sequence[TracePod], *, seed: int) -> dict[str, float]:
    """The world's workload name -> its pods' estimated run time, seconds (devtools.replay.runtime_estimates): the
    annotation `build_world` puts on `pods` (the placeable ones, in trace order)."""
    return {_job_name(pod.job, index): estimate
            for index, (pod, estimate) in enumerate(zip(pods, estimates(pods, seed=seed), strict=True))}


def build_world(
    trace: Trace, config: ReplayConfig, *, initial: Mapping[str, int] | None = None, fixed: bool = False
) -> World:
    """The cluster at t=0 (pools at `initial` nodes, default their min) with the trace's pods scheduled to arrive."""
    pods, _ = placeable(trace, config.pools)
    last_end = max((p.at + p.duration for p in pods), default=0.0)
    spot = SpotTier.of(config.spot)
    twins = spot.pools(config.pools) if spot is not None else ()
    scenario: dict[str, Any] = {
        "name": f"replay-{trace.name}",
        "cluster_name": CLUSTER_NAME,
        "duration": math.ceil(last_end + config.tail_s),
        "timeline_interval": config.timeline_interval_s,
        "boot_delay": {"median": config.boot_median_s, "p95": config.boot_p95_s, "max": config.boot_max_s},
        # Starting a deallocated instance: no published figure, so never faster than half a create-and-boot
        # (devtools.replay.metrics.STOPPED_INSTANCE_ASSUMPTIONS).
        "start_delay": {"median": config.boot_median_s * config.start_fraction,
                        "p95": config.boot_p95_s * config.start_fraction,
                        "max": config.boot_max_s * config.start_fraction},
        "node_groups": [
            pool.node_group(resource_group=RESOURCE_GROUP, initial=(initial or {}).get(pool.name, pool.min_size), fixed=fixed)
            for pool in (*config.pools, *twins)
        ],
        "daemonsets": [{
            "name": "kube-proxy", "namespace": "kube-system",
            "requests": {"cpu": f"{DAEMONSET_CPU_MILLI}m", "memory": f"{DAEMONSET_MEMORY_MIB}Mi"},
        }],
    }
    if config.virtual_node is not None:
        scenario["virtual_node"] = dict(config.virtual_node)
    if spot is not None:
        scenario.update(spot.scenario(config.pools))
    if config.quotas:
        scenario["quotas"] = dict(config.quotas)
    buffers = headroom_buffers(config.pools, config.buffer_nodes)
    if buffers:
        scenario["capacity_buffers"] = buffers
    world = World(scenario, seed=config.seed)
    # The user's estimate of each pod's run time, on every policy's pods alike (only ours reads it).
    expected = workload_estimates(pods, seed=config.seed)
    specs: dict[str, WorkloadSpec] = {}
    for index, pod in enumerate(pods):
        name = _job_name(pod.job, index)
        spec = specs.get(name)
        if spec is None:
            spec = specs[name] = WorkloadSpec(
                name=name, namespace="default", kind="Job", count=0, at=0.0, spread=0.0,
                cpu=Dist.fixed(pod.cpu_milli), memory=Dist.fixed(pod.memory_bytes), duration=None,
                labels=MappingProxyType({"job-name": name, "batch.kubernetes.io/job-name": name}),
                tolerations=((_GPU_TOLERATION,) if pod.gpus else ()) + (
                    (_VN_TOLERATION,) if config.virtual_node is not None else ()) + (
                    (SPOT_TOLERATION,) if spot is not None else ()),
                affinity=_PREFER_VMS if config.virtual_node is not None else None,
                ttl_after_finished=config.job_ttl_s,
                annotations=MappingProxyType({EXPECTED_RUNTIME_ANNOTATION: annotation_value(expected[name])}),
            )
        requests = Amounts.of(pod.cpu_milli, pod.memory_bytes, 1, {GPU: pod.gpus} if pod.gpus else {})
        world.add_arrival(pod.at, spec, requests, pod.duration)
    return world


class Replay:
    """One run: a world, the ports over it, and the loop that wakes the policy in virtual time."""

    def __init__(self, world: World, config: ReplayConfig) -> None:
        self.world = world
        self.config = config
        self.cluster = WorldCluster(world)
        self.compute = WorldCompute(
            world, cluster_name=CLUSTER_NAME, resource_groups=(RESOURCE_GROUP,),
            failure_rate=config.provisioning_failure_rate, seed=config.seed,
            multi_size={pool.name: pool.multi_size for pool in config.pools if pool.multi_size},
        )
        self.wakeups = 0

    def now(self) -> datetime:
        return self.world.now

    def run(self, policy: Policy, *, progress: Any = None) -> None:
        """Advance to each wake-up and let the policy act, until the world's end.

        `progress(fraction)` is called about every ten sim minutes.
        """
        end = self.world.end
        span = max(1.0, (end - self.world.start).total_seconds())
        reported = 0.0
        while self.world.now < end:
            wakeup = policy.next_wakeup(self.world.now)
            if wakeup is None or wakeup > end:
                self.world.advance(end)
                break
            self.world.advance(wakeup)
            self.wakeups += 1
            policy.wake(self.world.now)
            if progress is not None and self.world.t - reported >= 600:
                reported = self.world.t
                progress(reported / span)


def clock_of(replay: Replay) -> Any:
    """A Clock port reading the world's sim time."""

    class _WorldClock:
        def now(self) -> datetime:
            return replay.world.now

    return _WorldClock()


def every(period: timedelta, start: datetime, now: datetime) -> datetime:
    """The first multiple of `period` after `start` that is strictly after `now`."""
    elapsed = (now - start).total_seconds()
    step = period.total_seconds()
    return start + timedelta(seconds=(math.floor(elapsed / step) + 1) * step)
