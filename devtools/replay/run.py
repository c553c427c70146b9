"""One replay of one trace under one policy: the world it needs, the run, and what it measured."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from devtools.replay.harness import Replay, ReplayConfig, build_world, placeable, pool_of, workload_estimates
from devtools.replay.metrics import demand_curve, oracle_result, run_result, static_sizes, timeline_series
from devtools.replay import standby
from devtools.replay.policies import (
    POLICIES,
    SIZES_POLICIES,
    SPOT_FIRST_POLICY,
    SPOT_POLICIES,
    STANDBY_POLICIES,
    VIRTUAL_NODE_POLICIES,
    Static,
)
from devtools.replay.policies.ca import CA_SETTINGS, CA_SPOT_SETTINGS, ClusterAutoscaler
from devtools.replay.policies.nap import NAP_ASSUMPTIONS, NodeAutoProvisioning
from devtools.replay.policies.ours import Ours
from devtools.replay.policies.vmss_cpu import VmssCpuAutoscale
from devtools.replay.pools import SIZE_GROUPS, nap_pools, sized_pools
from devtools.replay import runtime_estimates
from devtools.replay.spot import SpotTier, billed_pools
from devtools.replay.traces import Trace


# What `ours+sizes` runs on, for results.json beside its figures.
SIZES_ASSUMPTIONS: tuple[str, ...] = (
    "ours+sizes: the CPU pool becomes multi-size groups holding the sizes nap chooses from (Standard_D2s_v5 to "
    "D64s_v5, nap's allocatable and maxPods 250 for each), split into "
    + " and ".join(f"{name} ({', '.join(s.removeprefix('Standard_') for s in sizes)})" for name, sizes in SIZE_GROUPS)
    + " since Azure takes at most 5 sizes per instance mix or VirtualMachines pool; GPU pools as for ours.",
    "ours+sizes: each group is presented to the autoscaler as an AKS VirtualMachines pool is (one lane per size, "
    "allocation strategy '': sizes chosen freely by the planner), each group's min 0 and max 1000 nodes shared by "
    "its lanes; in the world each size is its own Flexible scale set (lanes modelled as separate scale sets), so a "
    "lane's capacity change and deletions are one scale set's, and its ARM calls are throttled with that set's "
    "own buckets, not one pool's.",
    "ours+sizes: nodes are plain VMs (Flexible members, as a VirtualMachines pool's), so mapping nodes to instances "
    "lists every group's instances each poll (counted in arm_reads), and scale-in protection is not available.",
    "ours+sizes: ours' default settings, consolidation, disruption budgets and drift replacement included as this "
    "checkout has them; the world never changes a scale set's model or a node's image and NODE_MAX_AGE is 0, so no "
    "node drifts: drift replacement has nothing to do here.",
)


@dataclass(frozen=True, slots=True)
class ReplayOutcome:
    policy: str
    result: dict[str, Any]  # the results.json entry
    series: dict[str, list[float]]  # t, nodes, pending over time ({} for the oracle)
    demand: dict[str, list[float]]  # t, nodes: what perfectly packed pods would fill
    pods_left_out: int  # pods no pool can hold, left out of every policy's run alike
    wakeups: int = 0
    sim_seconds: float = 0.0  # the world's run, tail included
    # Function executions by function name (`ours` counts them; {} for the other policies).
    executions: Mapping[str, int] = field(default_factory=dict)
    # (sim seconds, cumulative ARM reads), about every ten sim minutes: the reads' curve over the run.
    arm_read_samples: tuple[tuple[float, int], ...] = ()


def _spot_work(world: Any, config: ReplayConfig, pods: Any, result: Mapping[str, Any],
               settings: Mapping[str, str]) -> dict[str, Any]:
    """The run's expected spot loss beside the measured one (runtime_estimates.spot_work_section); the limit is
    ours+spot's under `settings` (None for the other policies: spot-first and ca apply none)."""
    tier = SpotTier.of(config.spot)
    assert tier is not None
    by_workload = workload_estimates(pods, seed=config.seed)
    rates = {twin.name: tier.rate_of(twin.vm_size) for twin in tier.pools(config.pools)}
    limit = runtime_estimates.limit_s(settings, config.pools) if settings else None
    return runtime_estimates.spot_work_section(
        world.report()["pods"], by_workload, rates, pod_estimates=runtime_estimates.estimates(pods, seed=config.seed),
        limit=limit, lost_work_s=(result.get("spot") or {}).get("lost_work_s", 0.0))


def replay(
    trace: Trace, policy: str, config: ReplayConfig = ReplayConfig(), *, progress: Callable[[float], None] | None = None
) -> ReplayOutcome:
    if policy not in (*POLICIES, SPOT_FIRST_POLICY):
        raise ValueError(f"unknown policy {policy!r}: choose one of {', '.join((*POLICIES, SPOT_FIRST_POLICY))}")
    if policy in VIRTUAL_NODE_POLICIES:
        if config.virtual_node is None:
            config = replace(config, virtual_node={})  # the sandbox's defaults: ACI's documented quota
    elif config.virtual_node is not None:
        config = replace(config, virtual_node=None)  # the VM-only policies run without one
    if policy in (*SPOT_POLICIES, SPOT_FIRST_POLICY):
        if config.spot is None:
            config = replace(config, spot={})  # the spot tier's defaults (devtools.replay.spot)
    elif config.spot is not None:
        config = replace(config, spot=None)  # the on-demand policies run without spot pools
    pods, left_out = placeable(trace, config.pools)
    if not pods:
        raise ValueError(f"trace {trace.name}: no pod fits any pool ({', '.join(p.name for p in config.pools)})")
    curve = demand_curve(pods, config.pools)
    end = math.ceil(max(p.at + p.duration for p in pods) + config.tail_s)  # the world's duration too
    oracle = oracle_result(curve, config.pools, until=end)
    demand = {"t": list(curve.times), "nodes": [round(v, 3) for v in curve.total()]}
    if policy == "oracle":
        return ReplayOutcome(policy, oracle, {}, demand, left_out)
    if policy == "nap" or policy in SIZES_POLICIES:
        # NAP's sizes, each its own scale set (for ours+sizes: lanes of multi-size groups), for the same pods as every
        # policy: those the standard pools hold.
        config = replace(config, pools=nap_pools(config.pools) if policy == "nap" else sized_pools(config.pools))
        outside = [p for p in pods if pool_of(p, config.pools) is None]
        if outside:
            raise ValueError(f"trace {trace.name}: {len(outside)} pods fit a standard pool but no NAP size")
        trace = replace(trace, pods=tuple(pods))
    if policy == "static":
        world = build_world(trace, config, initial=static_sizes(curve, config.pools), fixed=True)
    elif policy == "vmss-cpu":
        world = build_world(trace, config, initial={pool.name: max(1, pool.min_size) for pool in config.pools})
    else:
        world = build_world(trace, config)
    run = Replay(world, config)
    samples: list[tuple[float, int]] = [(0.0, world.counters.arm_reads)]

    def sampled(fraction: float) -> None:
        samples.append((world.t, world.counters.arm_reads))
        if progress is not None:
            progress(fraction)

    chosen: Any
    spot_settings: dict[str, str] = {}
    if policy in ("ours+spot", SPOT_FIRST_POLICY):
        # The product's spot defaults with the eviction rate the tier assumes for the trace's main pool (an
        # operator's reading of its band); the run's own settings override them.
        node_seconds = {pool.name: curve.node_seconds(pool.name, until=end) for pool in config.pools}
        spot_settings = {**runtime_estimates.spot_settings(config.pools, node_seconds, config.spot,
                                                           spot_first=policy == SPOT_FIRST_POLICY),
                         **config.settings}
        chosen = Ours(run, settings=spot_settings)
    elif policy in ("ours", "ours+vn", *SIZES_POLICIES):
        chosen = Ours(run)
    elif policy in STANDBY_POLICIES:
        chosen = Ours(run, settings=standby.standby_settings(config.settings))
    elif policy in ("ca", "ca+vn"):
        chosen = ClusterAutoscaler(run, settings={**CA_SETTINGS, **config.peer_settings})
    elif policy == "ca+spot":
        chosen = ClusterAutoscaler(run, settings={**CA_SPOT_SETTINGS, **config.peer_settings})
    elif policy == "vmss-cpu":
        chosen = VmssCpuAutoscale(run)
    elif policy == "nap":
        chosen = NodeAutoProvisioning(run, settings=config.peer_settings, arrivals=[p.at for p in pods])
    else:
        chosen = Static()
    run.run(chosen, progress=sampled)
    samples.append((world.t, world.counters.arm_reads))
    # The oracle is the standard pools' for every policy (nap's included), so the ratios compare.
    result = run_result(world, billed_pools(config.pools, config.spot), scale_actions=chosen.scale_actions(),
                        oracle_cost=oracle["cost"], removed=chosen.removed_nodes)
    if policy in STANDBY_POLICIES:
        # What it set beyond ours' defaults, how its scale-ups were served and what its stopped instances billed.
        result["settings"] = standby.standby_settings(config.settings)
        tagged = {pool.name: dict(pool.tags) for pool in config.pools if pool.tags}
        if tagged:  # per-group choices (autoscaler-standby) made with scale-set tags
            result["pool_tags"] = tagged
        result["standby"] = standby.standby_section(world, slow_s=standby.slow_threshold(trace.name),
                                                    forecast_mape=standby.forecast_mape(chosen.state, world.now))
        result["assumptions"] = list(standby.ASSUMPTIONS)
    elif policy == "nap":
        result["assumptions"] = list(NAP_ASSUMPTIONS)
    elif policy in SIZES_POLICIES:
        result["assumptions"] = list(SIZES_ASSUMPTIONS)
    elif isinstance(chosen, ClusterAutoscaler):
        result["assumptions"] = list(chosen.assumptions())
    if config.spot is not None:
        result["spot_work"] = _spot_work(world, config, pods, result, spot_settings)
        if spot_settings:
            result["settings"] = dict(spot_settings)
        result["assumptions"] = [*result.get("assumptions", ()), *runtime_estimates.ASSUMPTIONS]
    return ReplayOutcome(policy, result, timeline_series(world), demand, left_out, run.wakeups, world.t,
                         dict(getattr(chosen, "executions", {})), tuple(samples))
