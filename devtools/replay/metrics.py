"""What a replay measured, in the layout of out/bench/results.json, and two lower bounds on its cost.

Pending wait counts every workload pod, replacements included: from creation to running (binding, on
a VM node; its container group running, on a virtual node), or to the end of the run for a pod that
never ran (a policy that leaves pods waiting is not flattered by leaving them out). A pod ACI refused
(never running) is not counted itself: its Job's replacement waits from the refused pod's creation. Cost adds what ACI
bills for a virtual node's pods, if the world has one. Work lost is the run time of pods killed or
evicted while running: their replacements start over. A run with spot pools bills their node-seconds at the spot
price and adds a `spot` part (devtools.replay.spot.spot_section). Deallocated instances add their OS disks' cost
(`stopped_disk_cost`, also inside `cost`; its assumptions in `STOPPED_INSTANCE_ASSUMPTIONS`).

Two references, both computed from the trace rather than simulated, both priced like each other, both lower
bounds that no schedule is shown to reach: the oracle (`oracle_result`: fractional, perfectly packed nodes, zero
boot) and the lower bound (`lower_bound_result`: whole nodes, each billed its boot from creation, idle gaps kept or
released as a clairvoyant would, zero wait; see `lower_bound_seconds` for the model). The lower bound counts
ceil(fractional demand) nodes at each instant and never checks that the pods live then pack onto that many (nor that
they could stay put from one instant to the next), so it is not a schedule's cost: it is a floor under every
zero-wait schedule of whole nodes that boot. Every on-demand policy's `cost_vs_oracle` and `cost_vs_lower_bound`
divide its cost by theirs; the suite gives the spot and virtual-node tiers neither ratio (both references price
on-demand nodes only, so a ratio under 1 there would say nothing: `without_reference_ratios`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from devtools.replay.disruptions import disruptions_section
from devtools.replay.harness import DAEMONSET_CPU_MILLI, DAEMONSET_MEMORY_MIB, MIB, ReplayConfig, placeable, pool_of
from devtools.replay.pools import Pool
from devtools.replay.spot import spot_section
from devtools.replay.traces import Trace, TracePod
from sandbox.world import World
from sandbox.world.metrics import percentile


# What the figures of stopped (deallocated) instances rest on, for the bench to write beside them.
STOPPED_INSTANCE_ASSUMPTIONS: tuple[str, ...] = (
    "Starting a deallocated instance takes the sandbox scenario's start_delay: lognormal, median 50 s, p95 150 s, "
    "capped at 450 s, half the replay's create-and-boot delay. No published figure for a start versus a create was "
    "found; this assumes a start is no faster than that.",
    "A deallocated instance bills no compute and bills its managed OS disk at the Premium SSD LRS list price of the "
    "tier AKS gives its size (P10/128 GiB up to 7 vCPUs, P15 8-15, P20 16-63, P30 64+), East US, 730 hours a month "
    "(sandbox.model.os_disks); only P10's price is matched by a second source. Running nodes' disks are not priced.",
    "A deallocated Regular instance keeps counting its vCPUs against the regional and family quota, as a deallocated "
    "Spot instance counts against lowPriorityCores (Learn, virtual-machines/quotas.md).",
)


# What GPU nodes' timing rests on (sandbox.model.gpu_spec), for the bench to write beside its figures.
GPU_READINESS_ASSUMPTIONS: tuple[str, ...] = (
    "A created GPU VM's node registers Ready without its GPUs; its device plugin adds them after an extra delay, "
    "lognormal with median 240 s and p95 480 s, clipped to 60-720 s (sandbox.model.gpu_spec.DEFAULT_GPU_READY_DELAY). "
    "The only figure found is 'A100 nodes 5-11 minutes to Ready with drivers' (a Microsoft Q&A answer, unverified); "
    "with the replay's boot delay this puts a GPU node's boot plus GPUs at about 5-13 minutes. A started "
    "(deallocated) GPU VM keeps its installed driver and gets its GPUs at registration. Every policy sees the same "
    "nodes: ours counts such a node as capacity on its way (GPU_READINESS), the ca emulation as unready (its GPU "
    "label without allocatable GPUs), the nap emulation as not initialized.",
)


def wait_percentiles(waits: Iterable[float]) -> dict[str, float]:
    ordered = sorted(waits)
    return {
        "p50": round(percentile(ordered, 0.50), 1),
        "p95": round(percentile(ordered, 0.95), 1),
        "p99": round(percentile(ordered, 0.99), 1),
        "max": round(ordered[-1], 1) if ordered else 0.0,
    }


@dataclass(frozen=True, slots=True)
class DemandCurve:
    """Per pool, the nodes that perfectly packed pods would fill over time: a step function."""

    times: tuple[float, ...]  # change points, sim seconds
    nodes: Mapping[str, tuple[float, ...]]  # pool name -> fractional nodes from times[i] to times[i+1]

    def node_seconds(self, pool: str, *, until: float) -> float:
        values = self.nodes[pool]
        total = 0.0
        for i, value in enumerate(values):
            start = self.times[i]
            stop = self.times[i + 1] if i + 1 < len(self.times) else until
            total += value * max(0.0, min(stop, until) - start)
        return total

    def peak(self, pool: str) -> float:
        return max(self.nodes[pool], default=0.0)

    def total(self) -> list[float]:
        return [sum(values[i] for values in self.nodes.values()) for i in range(len(self.times))]


def demand_curve(pods: Sequence[TracePod], pools: Sequence[Pool]) -> DemandCurve:
    """Requested resources over node capacity, per pool, each pod running from arrival for its duration.

    A node offers its allocatable less the DaemonSet's requests; at each instant the pool needs
    the largest of CPU, memory and GPU demand over that (a fractional node count): no packing can
    do better, so its integral is a lower bound on any policy's node-seconds.
    """
    changes: dict[float, dict[str, list[float]]] = {}
    for pod in pods:
        pool = pool_of(pod, pools)
        if pool is None:
            continue
        for at, sign in ((pod.at, 1.0), (pod.at + pod.duration, -1.0)):
            delta = changes.setdefault(at, {}).setdefault(pool.name, [0.0, 0.0, 0.0])
            delta[0] += sign * pod.cpu_milli
            delta[1] += sign * pod.memory_bytes
            delta[2] += sign * pod.gpus
    used = {pool.name: [0.0, 0.0, 0.0] for pool in pools}
    times: list[float] = []
    nodes: dict[str, list[float]] = {pool.name: [] for pool in pools}
    for at in sorted(changes):
        for name, delta in changes[at].items():
            used[name] = [u + d for u, d in zip(used[name], delta)]
        times.append(at)
        for pool in pools:
            cpu, memory, gpus = used[pool.name]
            need = max(
                cpu / (pool.cpu_milli - DAEMONSET_CPU_MILLI),
                memory / ((pool.memory_mib - DAEMONSET_MEMORY_MIB) * MIB),
                gpus / pool.gpus if pool.gpus else 0.0,
                0.0,
            )
            nodes[pool.name].append(need if need > 1e-9 else 0.0)
    return DemandCurve(tuple(times), {name: tuple(values) for name, values in nodes.items()})


def _computed_result(node_seconds: Mapping[str, float], pools: Sequence[Pool], **figures: Any) -> dict[str, Any]:
    """A results.json entry for a computed reference (oracle, lower bound): its node-seconds billed, nobody waited."""
    cost = sum(node_seconds[pool.name] * pool.price_per_hour / 3600 for pool in pools)
    return {
        "node_seconds": round(sum(node_seconds.values()), 1),
        "cost": round(cost, 4),
        **{name: value(cost) if callable(value) else value for name, value in figures.items()},
        "pending_wait_s": {"p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0},
        "pods_killed": 0,
        "work_lost_s": 0.0,
        # A computation, not a controller: it acts and calls nothing.
        "scale_actions": 0,
        "arm_reads": 0,
        "arm_writes": 0,
        "throttle_violations": 0,
    }


def oracle_result(curve: DemandCurve, pools: Sequence[Pool], *, until: float) -> dict[str, Any]:
    return _computed_result({pool.name: curve.node_seconds(pool.name, until=until) for pool in pools}, pools,
                            cost_vs_oracle=1.0)


def lower_bound_seconds(curve: DemandCurve, pool: str, *, boot_s: float, until: float) -> float:
    """A lower bound on the node-seconds of any zero-wait schedule of whole nodes that each bill `boot_s` from
    creation.

    The model: n(t) = ceil(the pool's perfectly packed fractional demand) whole nodes must be ready at
    t (no packing fits pods on fewer). Stack n(t) as levels k = 1..max: level k is needed where
    n(t) >= k. A node ready at t was created at t - boot_s at the latest and billed since, so level
    k is billed its needed time, plus `boot_s` before its first need (cut at t = 0: the world bills
    nothing before it, and the pools' initial nodes come booted), plus, for each gap between two
    needs, min(gap, boot_s): keep the node idle, or release it and create another that boots in
    time. Per level this is exactly the measure of {s: n(t) >= k for some t in [s, s + boot_s]}, and
    every zero-wait schedule whose boots last at least `boot_s` bills at least its sum over levels:
    the n(t) nodes ready at t were all alive over [t - boot_s, t]. The level-by-level rent-or-buy
    choice attains it in node counts only: whether the pods live at t pack onto n(t) whole nodes, and
    whether they could stay on their nodes from one instant to the next, is not checked. Where they do
    not, every real schedule costs more: the figure is a lower bound, not a schedule's cost.

    `until`: the world's end; a level still needed then is billed up to it.
    """
    values = curve.nodes[pool]
    released: list[float] = []  # released[k]: when level k + 1 was last released (entries appear as levels do)
    level = 0
    seconds = 0.0
    for i, value in enumerate(values):
        start = curve.times[i]
        if start >= until:
            break
        stop = min(curve.times[i + 1] if i + 1 < len(curve.times) else until, until)
        # The tolerance absorbs float noise in the summed requests, as static_sizes does.
        needed = math.ceil(value - 1e-9) if value > 1e-9 else 0
        for k in range(level, needed):  # levels k + 1 start being needed at `start`
            if k < len(released):
                seconds += min(start - released[k], boot_s)  # idle through the gap, or a new node's boot
            else:
                released.append(start)  # placeholder: overwritten when the level is released
                seconds += min(start, boot_s)  # its first boot, cut at the world's start
        for k in range(needed, level):
            released[k] = start
        seconds += needed * max(0.0, stop - start)
        level = needed
    return seconds


def lower_bound_result(
    curve: DemandCurve, pools: Sequence[Pool], *, boot_s: float, until: float, oracle_cost: float
) -> dict[str, Any]:
    """The lower bound as a results.json entry, laid out like the oracle's (`lower_bound_seconds`).

    Priced like the oracle: every pool's node-seconds at its on-demand price; no virtual node (ACI)
    and no spot twins, so a `+vn` or `+spot` run may come in under it, as it may under the oracle
    (the suite gives those runs no ratio to it).
    Zero wait: a policy that makes pods wait, and so packs them differently, may also come in under
    it, as `vmss-cpu` does (hours of waits). Pool minimums (`min_size`) are ignored, as the oracle
    ignores them: a bound needs only to be low.
    """
    node_seconds = {pool.name: lower_bound_seconds(curve, pool.name, boot_s=boot_s, until=until) for pool in pools}
    return _computed_result(node_seconds, pools,
                            cost_vs_oracle=lambda cost: round(cost / oracle_cost, 4) if oracle_cost else None,
                            cost_vs_lower_bound=1.0, boot_s=boot_s)


def lower_bound_for(trace: Trace, config: ReplayConfig) -> dict[str, Any]:
    """The lower bound of a trace under a replay configuration: its pools, its world's end, its boot delays.

    The boot delay is the configuration's median (`boot_median_s`), not the lowest the world may draw.
    The world draws each node's boot from a lognormal (median, p95) clipped to [0, boot_max_s] with no
    floor, so its minimum is 0 s and would price boots at nothing. The median keeps the bound a lower
    bound for every schedule that serves each pod on arrival without knowing a node's boot delay
    before creating it (every autoscaler): such a schedule must create a node a worst-case boot
    (boot_max_s) ahead of its need, longer than the median; and in expectation a creation bills the
    lognormal's mean, above its median. What it does not bound: a schedule told which nodes will
    boot fast, or a policy that makes pods wait.
    """
    pods, _ = placeable(trace, config.pools)
    curve = demand_curve(pods, config.pools)
    # The world's end, as devtools.replay.run computes it: the last pod's end plus the tail.
    until = math.ceil(max((p.at + p.duration for p in pods), default=0.0) + config.tail_s)
    oracle = oracle_result(curve, config.pools, until=until)
    return lower_bound_result(curve, config.pools, boot_s=config.boot_median_s, until=until, oracle_cost=oracle["cost"])


def with_cost_vs_lower_bound(result: Mapping[str, Any], bound_cost: float) -> dict[str, Any]:
    """The results.json entry with `cost_vs_lower_bound` (its cost over the lower bound's) after `cost_vs_oracle`."""
    ratio = round(result["cost"] / bound_cost, 4) if bound_cost else None
    out: dict[str, Any] = {}
    for key, value in result.items():
        if key != "cost_vs_lower_bound":
            out[key] = value
        if key == "cost_vs_oracle":
            out["cost_vs_lower_bound"] = ratio
    out.setdefault("cost_vs_lower_bound", ratio)
    return out


def without_reference_ratios(result: Mapping[str, Any]) -> dict[str, Any]:
    """The results.json entry without `cost_vs_oracle` and `cost_vs_lower_bound`: for a run the two references do not
    price (spot twins, a virtual node), whose cost may come in under both without beating either."""
    return {key: value for key, value in result.items() if key not in ("cost_vs_oracle", "cost_vs_lower_bound")}


def static_sizes(curve: DemandCurve, pools: Sequence[Pool]) -> dict[str, int]:
    """Nodes per pool for fixed capacity sized to the trace's peak (perfect packing, rounded up)."""
    return {pool.name: max(pool.min_size, math.ceil(curve.peak(pool.name) - 1e-9)) for pool in pools}


def run_result(world: World, pools: Sequence[Pool], *, scale_actions: int, oracle_cost: float,
               removed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The results.json entry of one simulated run. `removed`: the policy's removals (node -> its kind of removal),
    for its voluntary disruptions (devtools.replay.disruptions); None counts every running pod stopped."""
    report = world.report()
    end = report["sim_seconds"]
    waits, killed, lost = [], 0, 0.0
    virtual_node = report.get("virtual_node")
    # A Job failed by its backoffLimit makes no more pods: its pods that never started are counted as tasks never
    # run (`virtual_node.tasks_never_run`), not as waits running to the end of the replay.
    failed_jobs = set(virtual_node["jobs"]["failed_names"]) if virtual_node is not None else set()
    for pod in report["pods"]:
        if pod["outcome"] == "failed":
            continue  # refused by ACI without running: its replacement's wait runs from this pod's creation
        if pod["started"] is None and pod["workload"] in failed_jobs:
            continue
        waits.append((pod["started"] if pod["started"] is not None else end) - pod["waiting_since"])
        if pod["killed"] or pod["evicted_while_running"]:
            killed += 1
            if pod["started"] is not None and pod["stopped"] is not None:
                lost += pod["stopped"] - pod["started"]
    by_group = report["node_seconds_by_group"]
    price = {pool.name: pool.price_per_hour for pool in pools}
    cost = sum(seconds * price[key.rsplit("/", 1)[-1]] / 3600 for key, seconds in by_group.items())
    if virtual_node is not None:  # pods bursting to ACI are paid per second, not per node
        cost += virtual_node["cost_usd"]
    # Deallocated (stopped) instances bill no compute, but their OS disk: in `cost`, and on its own.
    # A report without the section (a hand-made one) had nothing deallocated.
    stopped = report.get("stopped_disks") or {"cost_usd": 0.0, "disk_seconds": 0.0}
    stopped_disk_cost = stopped["cost_usd"]
    cost += stopped_disk_cost
    api = report["api_calls"]
    result = {
        "node_seconds": round(report["node_seconds"], 1),
        "cost": round(cost, 4),
        "cost_vs_oracle": round(cost / oracle_cost, 4) if oracle_cost else None,
        "stopped_disk_cost": round(stopped_disk_cost, 4),
        "stopped_disk_seconds": round(stopped["disk_seconds"], 1),
        "pending_wait_s": wait_percentiles(waits),
        "pods_killed": killed,
        "work_lost_s": round(lost, 1),
        "scale_actions": scale_actions,
        "arm_reads": api["arm_reads"],
        "arm_writes": api["arm_writes"],
        "throttle_violations": api["arm_throttled"],
        "pods": len(report["pods"]),
        "pods_completed": report["pods_completed"],
        "nodes_max": report["nodes_max"],
    }
    disruptions = disruptions_section(report["pods"], sim_seconds=max(end, 1.0), removed=removed)
    result["disruptions_per_day"] = disruptions["nodes_per_day"]
    result["disruptions"] = disruptions
    if any(pool.is_spot for pool in pools):  # the spot tier: evictions, lost work, where capacity ran, quota
        result["spot"] = spot_section(report, pools)
    if virtual_node is not None:  # the burst tier: what ACI held at its peak, what it refused, Jobs it failed
        jobs = virtual_node["jobs"]
        result["virtual_node"] = {
            "aci_cost": virtual_node["cost_usd"],
            "peak_container_groups": virtual_node["peak_container_groups"],
            "peak_cores": virtual_node["peak_cores"],
            "pods_refused": dict(virtual_node["pods_refused"]),
            "pods_refused_by_quota": dict(virtual_node["pods_refused_by_quota"]),
            "bill_start_latency": virtual_node["bill_start_latency"],
            "jobs_failed": jobs["failed"],
            "tasks_never_run": jobs["tasks_never_run"],
            "tasks_never_created": jobs["tasks_never_created"],
        }
    return result


def timeline_series(world: World) -> dict[str, list[float]]:
    """Billed nodes (ready, booting or being deleted; deallocated ones are not billed) and pending pods over time."""
    t, nodes, pending = [], [], []
    for sample in world.timeline:
        t.append(sample["t"])
        nodes.append(sum(g["ready"] + g["booting"] + g["deleting"] for g in sample["groups"].values()))
        pending.append(sample["pending"])
    return {"t": t, "nodes": nodes, "pending": pending}
