"""`make bench`: both traces through every policy, the engine at scale and the cold start, in one report.

Writes out/bench/results.json (layout in docs/benchmarks.md), out/bench/series.json (the curves
behind the plots), PNG plots and out/bench/report.html, and prints the markdown table. Targets
for `ours` are evaluated and reported, never asserted: a missed target is printed as MISSED and
docs/benchmarks.md says why. The suite also sweeps ours', ca's and nap's idle times (the cost-versus-wait
frontier, devtools.replay.frontier) and says whether ours' points dominate the peers'; `run_frontier` runs that
part alone.
"""

from __future__ import annotations

import json
import multiprocessing
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from devtools.replay import gangs
from devtools.replay.disruptions import ASSUMPTIONS as DISRUPTION_ASSUMPTIONS
from devtools.replay.frontier import ASSUMPTIONS as FRONTIER_ASSUMPTIONS
from devtools.replay.frontier import dominance, missing_peers, point_of, sweep_points
from devtools.replay.harness import ReplayConfig
from devtools.replay.metrics import (
    GPU_READINESS_ASSUMPTIONS,
    lower_bound_for,
    with_cost_vs_lower_bound,
    without_reference_ratios,
)
from devtools.replay.policies import POLICIES, SIZES_POLICIES, SPOT_FIRST_POLICY, SPOT_POLICIES, VIRTUAL_NODE_POLICIES
from devtools.replay.pools import POOL_SETS, PRICE_DATE, PRICE_SOURCE, PRICES_PER_HOUR
from devtools.replay.run import ReplayOutcome, replay
from devtools.replay.sizes_targets import TRACE as SIZES_TRACE
from devtools.replay.sizes_targets import evaluate_sizes_targets
from devtools.replay.spot import SPOT_SEEDS, SpotTier, compare_lost, quiet_spot_logs
from devtools.replay.spot_prices import SPOT_PRICE_DATE, SPOT_PRICE_FRACTION, SPOT_PRICE_SOURCE
from devtools.replay.spot_tiers import SPOT_TARGET_TIER, SPOT_TIERS, tier_facts
from devtools.replay.standby import ASSUMPTIONS as STANDBY_ASSUMPTIONS
from devtools.replay.standby import POLICY as STANDBY_POLICY
from devtools.replay.standby import evaluate_frontier_target, evaluate_standby_targets
from devtools.replay.traces import Trace, load_trace, trace_stats
from devtools.replay.vn_tiers import VN_QUOTAS, VN_TIER_STATEMENTS, VN_TIERS

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "out" / "bench"
TRACES = ("alibaba2018", "alibaba2023")
BATCH_TRACE = "alibaba2018"  # where the targets for `ours` apply
TARGET_COST_VS_ORACLE = 1.10
# Issue 19: on the batch trace, ours within 3x of the lower bound; on the other traces, a p95 wait no longer than
# ca's at most 5 % dearer.
TARGET_COST_VS_BOUND = 3.0
TARGET_EXTRA_COST_VS_CA = 0.05
# The wait target is judged on the suite's seed and, as a second row, on the mean over it and the next ones:
# a p95 of some 800 pods is the 40th-longest wait, and one seed's p95 moves by about +-15 s (measured over
# seeds 0-5 on alibaba2023), more than the gaps being judged.
WAIT_SEEDS = 3
WAIT_SLACK_S = 30.0
VN_TARGET_P95_S = 60.0  # ours+vn at the raised quota, on the batch trace
VN_TARGET_COST_SHARE = 0.5  # ... at most this share of ours without the virtual node
SPOT_TARGET_COST_SHARE = 0.5  # ours+spot at most this share of ours (on demand), on the batch trace
FRONTIER_WORKERS = 2  # the sweep's replays run in this many processes: independent runs, one core each
BOUND_ASSUMPTIONS = (
    "lower_bound: ceil(perfectly packed demand) whole nodes at each instant, each level billed its boot (the boot "
    "median) from creation, idle gaps kept or released at best, zero wait; that the pods live at an instant pack "
    "onto that many nodes, or stay on them from one instant to the next, is not checked, so no schedule is shown to "
    "reach it",
    "lower_bound and oracle price on-demand nodes only: runs with spot twins (+spot) or a virtual node (+vn) carry "
    "neither cost_vs_oracle nor cost_vs_lower_bound",
    "lower_bound counts whole nodes of the trace's standard pools: nap and ours+sizes, which pick among other VM "
    "sizes, carry no cost_vs_lower_bound (their cost_vs_oracle stays: the oracle's fractional nodes are priced per "
    "vCPU as the D-series sizes are)",
)
# Policies whose nodes are not the standard pools' whole nodes: the lower bound's node counts do not bound them.
OTHER_SIZES_POLICIES = ("nap", *SIZES_POLICIES)


def with_reference_ratios(policy: str, result: Mapping[str, Any], bound_cost: float) -> dict[str, Any]:
    """A run's results.json entry with its cost over the lower bound's where that bound bounds the policy: not for
    the spot and virtual-node tiers (neither reference prices them: no cost_vs_oracle either), nor for a policy of
    other VM sizes (OTHER_SIZES_POLICIES)."""
    if policy in (*SPOT_POLICIES, SPOT_FIRST_POLICY, *VIRTUAL_NODE_POLICIES):
        return without_reference_ratios(result)
    if policy in OTHER_SIZES_POLICIES:
        return {key: value for key, value in result.items() if key != "cost_vs_lower_bound"}
    return with_cost_vs_lower_bound(result, bound_cost)


def config_for(trace: str, *, seed: int = 0, **changes: Any) -> ReplayConfig:
    return replace(ReplayConfig(seed=seed, pools=POOL_SETS.get(trace, ReplayConfig().pools)), **changes)


def pending_poll_interval_s(config: ReplayConfig) -> float:
    """Seconds between our pending polls under this configuration's settings (for the wait target)."""
    from shared.schedules import parse_ncrontab
    from shared.settings import SPECS

    expression = config.settings.get("PENDING_POLL_SCHEDULE") or next(
        s.default for s in SPECS if s.name == "PENDING_POLL_SCHEDULE")
    schedule = parse_ncrontab(str(expression))
    first = schedule.next_after(datetime(2030, 1, 7, tzinfo=timezone.utc))
    return (schedule.next_after(first) - first).total_seconds()


def evaluate_targets(per_policy: Mapping[str, Mapping[str, Any]], config: ReplayConfig) -> list[dict[str, Any]]:
    """The issue's targets for `ours` on the batch trace, each met or missed with the figures behind it."""
    ours, ca = per_policy["ours"], per_policy.get("ca")
    limit = config.boot_p95_s + pending_poll_interval_s(config) + WAIT_SLACK_S
    p95 = ours["pending_wait_s"]["p95"]
    targets = [
        {"name": f"cost within {TARGET_COST_VS_ORACLE:.2f}x of the oracle", "met": ours["cost_vs_oracle"] <= TARGET_COST_VS_ORACLE,
         "detail": f"{ours['cost_vs_oracle']:.2f}x"},
        {"name": "p95 pending wait within boot p95 + one poll + 30 s", "met": p95 <= limit,
         "detail": f"{p95:.0f} s against {limit:.0f} s"},
        {"name": "no running pod killed", "met": ours["pods_killed"] == 0, "detail": f"{ours['pods_killed']} killed"},
    ]
    if "cost_vs_lower_bound" in ours:
        targets.append({"name": f"cost within {TARGET_COST_VS_BOUND:g}x of the lower bound",
                        "met": ours["cost_vs_lower_bound"] <= TARGET_COST_VS_BOUND,
                        "detail": f"{ours['cost_vs_lower_bound']:.2f}x at p95 {p95:.0f} s"})
    if ca is not None:
        cheaper = ours["cost"] < ca["cost"]
        no_slower = p95 <= ca["pending_wait_s"]["p95"]
        targets.append({
            "name": "cheaper than ca at equal or lower p95 wait", "met": cheaper and no_slower,
            "detail": f"cost ${ours['cost']:,.2f} vs ${ca['cost']:,.2f}, p95 {p95:.0f} s vs {ca['pending_wait_s']['p95']:.0f} s",
        })
    return targets


def evaluate_wait_targets(per_policy: Mapping[str, Mapping[str, Any]],
                          seeds: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """Issue 19's reaction target on a trace other than the batch one: ours' p95 wait at most ca's, at a cost at most
    TARGET_EXTRA_COST_VS_CA above ca's; on this run's seed, then (given `seeds`, `wait_over_seeds`' rows) on the
    means over those seeds."""
    ours, ca = per_policy.get("ours"), per_policy.get("ca")
    if ours is None or ca is None:
        return []
    name = f"p95 wait at most ca's, at most {TARGET_EXTRA_COST_VS_CA:.0%} dearer"
    targets = [_wait_target(name, ours["pending_wait_s"]["p95"], ours["cost"], ca["pending_wait_s"]["p95"], ca["cost"])]
    if seeds:
        mean = {policy: {key: sum(row[policy][key] for row in seeds) / len(seeds) for key in ("p95", "cost")}
                for policy in ("ours", "ca")}
        first, last = seeds[0]["seed"], seeds[-1]["seed"]
        targets.append(_wait_target(f"{name}, means over seeds {first}-{last}", mean["ours"]["p95"],
                                    mean["ours"]["cost"], mean["ca"]["p95"], mean["ca"]["cost"]))
    return targets


def _wait_target(name: str, p95: float, cost: float, theirs: float, their_cost: float) -> dict[str, Any]:
    extra = cost / their_cost - 1 if their_cost else float("inf")
    return {"name": name, "met": p95 <= theirs and cost <= their_cost * (1 + TARGET_EXTRA_COST_VS_CA),
            "detail": f"p95 {p95:.0f} s vs {theirs:.0f} s, cost ${cost:,.2f} vs ${their_cost:,.2f} ({extra:+.1%})"}


SeedRuns = dict[tuple[str, int, str, str], Mapping[str, Any]]


def replay_on_seed(name: str, seed: int, policy: str, *, tier: str = "", runs: SeedRuns | None = None
                   ) -> Mapping[str, Any]:
    """The result of `policy` on trace `name` sampled with `seed` (at spot tier `tier`, if any), replayed once per
    suite: `runs` keeps what the seed comparisons replayed, so ours on a seed is not run again for each of them."""
    key = (name, seed, policy, tier)
    if runs is not None and key in runs:
        return runs[key]
    config = config_for(name, seed=seed)
    if tier:
        config = replace(config, **{k: dict(v) for k, v in SPOT_TIERS[tier].items()})
    result = replay(load_trace(name, seed=seed), policy, config).result
    if runs is not None:
        runs[key] = result
    return result


def wait_over_seeds(name: str, per_policy: Mapping[str, Mapping[str, Any]], *, seed: int,
                    count: int = WAIT_SEEDS, runs: SeedRuns | None = None) -> list[dict[str, Any]]:
    """Per seed from `seed` on, ours' and ca's p95 wait and cost on trace `name` (and ours+standby's, when this run
    has it): `seed`'s from this run's results (`per_policy`), the next ones replayed here (the trace sampled, boots
    drawn, with that seed)."""
    policies = [policy for policy in ("ours", "ca", STANDBY_POLICY) if policy in per_policy]
    rows = [{"seed": seed, **{policy: _wait_row(per_policy[policy]) for policy in policies}}]
    for other in range(seed + 1, seed + count):
        rows.append({"seed": other, **{policy: _wait_row(replay_on_seed(name, other, policy, runs=runs))
                                       for policy in policies}})
    return rows


def _wait_row(result: Mapping[str, Any]) -> dict[str, float]:
    return {"p95": result["pending_wait_s"]["p95"], "cost": result["cost"]}


def evaluate_vn_targets(per_policy: Mapping[str, Mapping[str, Any]], *, batch: bool) -> list[dict[str, Any]]:
    """Issue 17's targets for `ours+vn`: each met or missed, with the figures behind it."""
    ours = per_policy.get("ours")
    targets: list[dict[str, Any]] = []
    for quota in VN_QUOTAS:
        mine, theirs = per_policy.get(f"ours+vn@{quota}"), per_policy.get(f"ca+vn@{quota}")
        if mine is None:
            continue
        p95 = mine["pending_wait_s"]["p95"]
        if batch and ours is not None and quota == max(VN_QUOTAS):
            share = mine["cost"] / ours["cost"] if ours["cost"] else float("inf")
            targets.append({"name": f"ours+vn at {quota} cores: p95 wait at most {VN_TARGET_P95_S:.0f} s",
                            "met": p95 <= VN_TARGET_P95_S, "detail": f"{p95:.0f} s"})
            targets.append({"name": f"ours+vn at {quota} cores: cost at most {VN_TARGET_COST_SHARE:.1f}x ours",
                            "met": share <= VN_TARGET_COST_SHARE,
                            "detail": f"{share:.2f}x (${mine['cost']:,.2f} vs ${ours['cost']:,.2f})"})
        elif batch and ours is not None:
            no_worse = mine["cost"] <= ours["cost"] and p95 <= ours["pending_wait_s"]["p95"]
            targets.append({"name": f"ours+vn at {quota} cores: no worse than ours on cost and p95 wait",
                            "met": no_worse, "detail": f"cost ${mine['cost']:,.2f} vs ${ours['cost']:,.2f}, p95 "
                            f"{p95:.0f} s vs {ours['pending_wait_s']['p95']:.0f} s"})
        if theirs is not None:
            cheaper = mine["cost"] < theirs["cost"] and p95 <= theirs["pending_wait_s"]["p95"]
            done = (f"; ca+vn completed {theirs['pods_completed']:,} of {theirs['pods']:,} pods"
                    if "pods_completed" in theirs and "pods" in theirs else "")
            targets.append({"name": f"ours+vn at {quota} cores: cheaper than ca+vn at equal or lower p95 wait",
                            "met": cheaper, "detail": f"cost ${mine['cost']:,.2f} vs ${theirs['cost']:,.2f}, p95 "
                            f"{p95:.0f} s vs {theirs['pending_wait_s']['p95']:.0f} s{done}"})
        targets.append({"name": f"ours+vn at {quota} cores: no running pod killed", "met": mine["pods_killed"] == 0,
                        "detail": f"{mine['pods_killed']} killed"})
    return targets


def evaluate_spot_targets(per_policy: Mapping[str, Mapping[str, Any]], *, batch: bool) -> list[dict[str, Any]]:
    """The spot tier's targets: on the batch trace at SPOT_TARGET_TIER, ours+spot costs at most half of ours (on
    demand) at the same p95 wait (ours' p95 + WAIT_SLACK_S at most); at every tier, it throws away less running work
    than ca+spot (`work_lost_s`: every running pod killed or evicted, those ours moved off at a notice included)."""
    ours = per_policy.get("ours")
    targets: list[dict[str, Any]] = []
    for tier in SPOT_TIERS:
        mine, theirs = per_policy.get(f"ours+spot@{tier}"), per_policy.get(f"ca+spot@{tier}")
        if mine is None:
            continue
        p95 = mine["pending_wait_s"]["p95"]
        if batch and ours is not None and tier == SPOT_TARGET_TIER:
            share = mine["cost"] / ours["cost"] if ours["cost"] else float("inf")
            spot = mine.get("spot") or {}
            even = _break_even_fraction(mine, ours)
            targets.append({
                "name": f"ours+spot at {tier}: cost at most {SPOT_TARGET_COST_SHARE:.1f}x ours (on demand)",
                "met": share <= SPOT_TARGET_COST_SHARE,
                "detail": f"{share:.2f}x (${mine['cost']:,.2f} vs ${ours['cost']:,.2f}; spot {spot.get('spot_share', 0):.0%} "
                          f"of node-hours" + (f"; still met up to a spot price of {even:.2f}x on demand)" if even else ")"),
            })
            limit = ours["pending_wait_s"]["p95"] + WAIT_SLACK_S
            targets.append({"name": f"ours+spot at {tier}: p95 wait no more than ours' + {WAIT_SLACK_S:.0f} s",
                            "met": p95 <= limit, "detail": f"{p95:.0f} s vs {ours['pending_wait_s']['p95']:.0f} s"})
        if theirs is not None:
            lost, their_lost = mine["work_lost_s"], theirs["work_lost_s"]
            mine_spot, their_spot = mine.get("spot") or {}, theirs.get("spot") or {}
            outcome = compare_lost(lost, their_lost)  # nothing lost on both sides is a tie, not a win
            targets.append({
                "name": f"ours+spot at {tier}: less running work lost than ca+spot",
                "met": outcome == "less",
                "detail": f"{outcome}: {lost:,.0f} s vs {their_lost:,.0f} s ({mine_spot.get('evictions', 0)} vs "
                          f"{their_spot.get('evictions', 0)} VMs evicted; pods died with the VM "
                          f"{mine_spot.get('evicted_pods', 0)} vs {their_spot.get('evicted_pods', 0)}, moved off at "
                          f"the notice {mine_spot.get('pods_moved_before_eviction', 0)} vs "
                          f"{their_spot.get('pods_moved_before_eviction', 0)})",
            })
    return targets


def _break_even_fraction(mine: Mapping[str, Any], ours: Mapping[str, Any]) -> float | None:
    """The spot price fraction at which ours+spot would cost exactly SPOT_TARGET_COST_SHARE of ours, all else equal."""
    spot = mine.get("spot") or {}
    at_on_demand = spot.get("spot_cost_at_on_demand") or 0.0
    if at_on_demand <= 0:
        return None
    on_demand_part = mine["cost"] - spot.get("spot_cost", 0.0)
    return max(0.0, (SPOT_TARGET_COST_SHARE * ours["cost"] - on_demand_part) / at_on_demand)


def with_sizes_targets(targets: Sequence[Mapping[str, Any]], per_policy: Mapping[str, Mapping[str, Any]],
                       ca_points: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The trace's targets with ours+sizes' judged on `ca`'s frontier points, in place of those the replay section
    judged on ca's default run alone."""
    fresh = evaluate_sizes_targets(per_policy, ca_points)
    names = {t["name"] for t in fresh}  # the targets' names do not depend on the ca points judged against
    return [*(t for t in targets if t["name"] not in names), *fresh]


def runs_of(policies: tuple[str, ...]) -> list[tuple[str, str, dict[str, Any]]]:
    """(result key, policy, ReplayConfig changes) for each replay: a virtual-node policy once per ACI quota, a spot
    policy once per spot tier."""
    runs: list[tuple[str, str, dict[str, Any]]] = []
    for policy in policies:
        if policy in VIRTUAL_NODE_POLICIES:
            runs += [(f"{policy}@{quota}", policy, {"virtual_node": dict(VN_TIERS[quota])}) for quota in VN_QUOTAS]
        elif policy in SPOT_POLICIES:
            runs += [(f"{policy}@{tier}", policy, {k: dict(v) for k, v in changes.items()})
                     for tier, changes in SPOT_TIERS.items()]
        else:
            runs.append((policy, policy, {}))
    return runs


def _jsonable(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def replay_section(
    traces: Mapping[str, Trace], *, seed: int, policies: tuple[str, ...] = POLICIES,
    step: Callable[[str, float], None] = lambda label, fraction: None, wait_seeds: int = 1,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(replay results, per-trace facts, targets, series) for every trace and policy.

    `wait_seeds` above 1: on the traces other than the batch one, ours and ca are replayed on that many seeds in
    all (`wait_over_seeds`, in the facts), and the wait target is judged on their means too. The traces must
    then be named ones (`load_trace` samples each seed's)."""
    results: dict[str, Any] = {}
    facts: dict[str, Any] = {}
    targets: dict[str, Any] = {}
    series: dict[str, Any] = {}
    seed_runs: SeedRuns = {}  # the other seeds' replays, shared by the wait and the spot comparisons
    for name, trace in traces.items():
        config = config_for(name, seed=seed)
        results[name], series[name] = {}, {}
        # The lower bound is the same for every run of the trace: on-demand pools, the base config's boots.
        bound = lower_bound_for(trace, config)
        outcome: ReplayOutcome | None = None
        for key, policy, changes in runs_of(policies):
            label = f"{name} / {key}"
            started = time.perf_counter()
            run_config = replace(config, **changes) if changes else config
            outcome = replay(trace, policy, run_config, progress=lambda f, label=label: step(label, f))
            results[name][key] = {**with_reference_ratios(policy, outcome.result, bound["cost"]),
                                  "wall_s": round(time.perf_counter() - started, 1)}
            if outcome.series:
                series[name][key] = outcome.series
            step(label, 1.0)
        assert outcome is not None
        results[name]["lower_bound"] = bound
        series[name]["_demand"] = outcome.demand
        stats = trace_stats(trace)
        facts[name] = {
            "note": trace.note, "source": trace.source, "pods": len(trace.pods), "pods_left_out": outcome.pods_left_out,
            "stats": asdict(stats), "pools": [asdict(p) | {"price_per_hour": p.price_per_hour} for p in config.pools],
            "config": {f.name: _jsonable(getattr(config, f.name)) for f in fields(config)
                       if f.name not in ("pools", "settings", "peer_settings")},
        }
        if any(policy in VIRTUAL_NODE_POLICIES for policy in policies):
            facts[name]["virtual_node_tiers"] = {str(quota): dict(VN_TIER_STATEMENTS[quota]) for quota in VN_QUOTAS}
        if any(policy in SPOT_POLICIES for policy in policies):
            facts[name]["spot_tiers"] = {tier: tier_facts(tier, config.pools) for tier in SPOT_TIERS}
            facts[name]["spot_pools"] = [asdict(p) | {"price_per_hour": p.price_per_hour}
                                         for p in SpotTier().pools(config.pools)]
            ours_cost = (results[name].get("ours") or {}).get("cost")
            for key, result in results[name].items():
                if "spot" in result and ours_cost:
                    result["spot"]["cost_vs_ours"] = round(result["cost"] / ours_cost, 4)
        if name == BATCH_TRACE and "ours" in results[name]:
            targets[name] = evaluate_targets(results[name], config)
        elif name != BATCH_TRACE:
            seeds: list[dict[str, Any]] = []
            if wait_seeds > 1 and {"ours", "ca"} <= results[name].keys():
                step(f"{name} / ours, ca: seeds", 0.0)
                seeds = facts[name]["wait_over_seeds"] = wait_over_seeds(name, results[name], seed=seed,
                                                                         count=wait_seeds, runs=seed_runs)
                step(f"{name} / ours, ca: seeds", 1.0)
            targets[name] = evaluate_wait_targets(results[name], seeds)
        vn_targets = evaluate_vn_targets(results[name], batch=name == BATCH_TRACE)
        if vn_targets:
            targets[name] = [*targets.get(name, []), *vn_targets]
        spot_targets = evaluate_spot_targets(results[name], batch=name == BATCH_TRACE)
        spot_keys = {"ours", f"ours+spot@{SPOT_TARGET_TIER}", f"ca+spot@{SPOT_TARGET_TIER}"}
        if wait_seeds > 1 and spot_keys <= results[name].keys():
            step(f"{name} / spot: seeds", 0.0)
            rows = facts[name]["spot_over_seeds"] = spot_over_seeds(name, results[name], seed=seed, runs=seed_runs)
            spot_targets += evaluate_spot_seed_targets(rows, batch=name == BATCH_TRACE)
            step(f"{name} / spot: seeds", 1.0)
        if spot_targets:
            targets[name] = [*targets.get(name, []), *spot_targets]
        standby_targets = evaluate_standby_targets(name, results[name], (facts[name].get("wait_over_seeds") or ()))
        if standby_targets:
            targets[name] = [*targets.get(name, []), *standby_targets]
        if name == SIZES_TRACE:  # against ca's default run here; run_suite judges them again on ca's frontier
            targets[name] = [*targets.get(name, []), *evaluate_sizes_targets(results[name])]
    return results, facts, targets, series


SPOT_SEED_POLICIES = ("ours", "ours+spot", SPOT_FIRST_POLICY, "ca+spot")
# ours+spot (spot or on demand by the work) at most this much dearer than ours+spot-first, its spot-first self.
SPOT_BY_WORK_COST_SHARE = 1.1


def spot_over_seeds(name: str, per_policy: Mapping[str, Mapping[str, Any]], *, seed: int,
                    seeds: tuple[int, ...] = SPOT_SEEDS, runs: SeedRuns | None = None) -> list[dict[str, Any]]:
    """Per seed, ours' (on demand), ours+spot's, ours+spot-first's and ca+spot's figures at SPOT_TARGET_TIER on trace
    `name`: `seed`'s from this run's results (ours+spot-first, which has no run there, replayed), the others replayed
    here (the trace sampled, boots, availability and evictions drawn
    with that seed). One seed's evictions are a handful of events: a spot conclusion must hold on several."""
    def key(policy: str) -> str:
        return policy if policy == "ours" else f"{policy}@{SPOT_TARGET_TIER}"

    rows = []
    for other in seeds:
        if other == seed:
            # ours+spot-first has no run in the main table: replayed on this seed too.
            figures = {policy: per_policy.get(key(policy)) or replay_on_seed(name, other, policy,
                                                                             tier=SPOT_TARGET_TIER, runs=runs)
                       for policy in SPOT_SEED_POLICIES}
        else:
            figures = {policy: replay_on_seed(name, other, policy, runs=runs,
                                              tier="" if policy == "ours" else SPOT_TARGET_TIER)
                       for policy in SPOT_SEED_POLICIES}
        rows.append({"seed": other, **{policy: _spot_row(result) for policy, result in figures.items()}})
    return rows


def _spot_row(result: Mapping[str, Any]) -> dict[str, Any]:
    spot = result.get("spot") or {}
    by_work = result.get("spot_work") or {}
    return {"cost": result["cost"], "p95": result["pending_wait_s"]["p95"], "work_lost_s": result["work_lost_s"],
            "evictions": spot.get("evictions", 0), "pods_killed": result["pods_killed"],
            # The loss the spot-by-work rule expects of the pods that started on spot, beside the loss measured.
            **{k: by_work[k] for k in ("expected_loss_s", "pods_started_on_spot", "pods_over_limit",
                                       "long_pods_started_on_spot", "limit_s") if k in by_work}}


def evaluate_spot_seed_targets(rows: Sequence[Mapping[str, Any]], *, batch: bool) -> list[dict[str, Any]]:
    """The spot targets judged over seeds: on the batch trace, ours+spot at most SPOT_TARGET_COST_SHARE of ours on
    every seed; on every trace, less running work lost than ca+spot on at least one seed and more on none (a seed
    where neither lost anything is a tie)."""
    seeds = ", ".join(str(row["seed"]) for row in rows)
    targets: list[dict[str, Any]] = []
    if batch:
        shares = [row["ours+spot"]["cost"] / row["ours"]["cost"] if row["ours"]["cost"] else float("inf")
                  for row in rows]
        targets.append({
            "name": f"ours+spot at {SPOT_TARGET_TIER}, seeds {seeds}: cost at most {SPOT_TARGET_COST_SHARE:.1f}x "
                    "ours (on demand) on every seed",
            "met": all(share <= SPOT_TARGET_COST_SHARE for share in shares),
            "detail": ", ".join(f"seed {row['seed']} {share:.2f}x" for row, share in zip(rows, shares, strict=True)),
        })
    outcomes = [compare_lost(row["ours+spot"]["work_lost_s"], row["ca+spot"]["work_lost_s"]) for row in rows]
    targets.append({
        "name": f"ours+spot at {SPOT_TARGET_TIER}, seeds {seeds}: less running work lost than ca+spot, more on none",
        "met": "more" not in outcomes and "less" in outcomes,
        "detail": ", ".join(f"seed {row['seed']} {outcome} ({row['ours+spot']['work_lost_s']:,.0f} s vs "
                            f"{row['ca+spot']['work_lost_s']:,.0f} s)" for row, outcome in zip(rows, outcomes, strict=True)),
    })
    if all(SPOT_FIRST_POLICY in row for row in rows):
        targets += _spot_by_work_targets(rows, outcomes, seeds)
    return targets


def _spot_by_work_targets(rows: Sequence[Mapping[str, Any]], outcomes: Sequence[str], seeds: str
                          ) -> list[dict[str, Any]]:
    """Spot or on demand by the work: ours+spot loses less running work than ca+spot on every seed (at least three),
    at most SPOT_BY_WORK_COST_SHARE of ours+spot-first's cost on every seed; the expected loss beside the measured."""
    shares = [row["ours+spot"]["cost"] / row[SPOT_FIRST_POLICY]["cost"] if row[SPOT_FIRST_POLICY]["cost"]
              else float("inf") for row in rows]

    def lost(row: Mapping[str, Any]) -> str:
        mine, first = row["ours+spot"], row[SPOT_FIRST_POLICY]
        return (f"seed {row['seed']}: {mine['work_lost_s']:,.0f} s lost (expected "
                f"{mine.get('expected_loss_s', 0):,.0f} s; {mine.get('pods_over_limit', 0)} pods over the "
                f"{mine.get('limit_s') or 0:,.0f} s limit, {mine.get('long_pods_started_on_spot', 0)} of them started "
                f"on spot) vs ca+spot {row['ca+spot']['work_lost_s']:,.0f} s, spot-first "
                f"{first['work_lost_s']:,.0f} s (expected {first.get('expected_loss_s', 0):,.0f} s)")

    return [
        {"name": f"ours+spot at {SPOT_TARGET_TIER}, seeds {seeds}: less running work lost than ca+spot on every seed "
                 f"(at least {len(SPOT_SEEDS)})",
         "met": len(rows) >= len(SPOT_SEEDS) and all(outcome == "less" for outcome in outcomes),
         "detail": "; ".join(lost(row) for row in rows)},
        {"name": f"ours+spot at {SPOT_TARGET_TIER}, seeds {seeds}: cost at most {SPOT_BY_WORK_COST_SHARE:.1f}x "
                 f"{SPOT_FIRST_POLICY} on every seed",
         "met": all(share <= SPOT_BY_WORK_COST_SHARE for share in shares),
         "detail": ", ".join(f"seed {row['seed']} {share:.3f}x (${row['ours+spot']['cost']:,.2f} vs "
                             f"${row[SPOT_FIRST_POLICY]['cost']:,.2f})" for row, share in zip(rows, shares, strict=True))},
    ]


def _sweep_replay(trace: Trace, name: str, seed: int, policy: str, changes: Mapping[str, Any]) -> dict[str, Any]:
    """One run of the frontier's sweep, in a worker process: the suite's configuration of the trace with the point's
    settings (plain dicts: a ReplayConfig's default mappings do not pickle)."""
    quiet_spot_logs()
    started = time.process_time()
    result = replay(trace, policy, config_for(name, seed=seed, **changes)).result
    # CPU seconds, not wall: what the sweep costs, whatever else the machine runs meanwhile.
    return {**result, "cpu_s": round(time.process_time() - started, 1)}


def frontier_section(
    traces: Mapping[str, Trace], *, seed: int, policies: tuple[str, ...] = POLICIES,
    known: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    step: Callable[[str, float], None] = lambda label, fraction: None, workers: int = FRONTIER_WORKERS,
    show: Callable[[str], None] = print,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(frontier, dominance) per trace: every sweep point of devtools.replay.frontier replayed on the trace, and for
    each peer point the best ours point.

    `known`: this run's results per trace and policy (the replay section's); a policy's default point is taken
    from them rather than replayed again (the same trace, seed and settings give the same run). `workers` above 1
    runs the replays in that many processes; 1 runs them here, in order."""
    for peer in missing_peers(policies):
        show(f"frontier: no `{peer}` policy in this checkout; its points are left out")
    sweeps = {name: sweep_points(policies, trace=name) for name in traces}
    found: dict[tuple[str, int], Mapping[str, Any]] = {}
    # One replay per trace, policy and configuration: a point the sweep lists twice (ours' default is also
    # ours+buffer's `buffer 0`) is run once.
    jobs: dict[tuple[str, str, str], list[tuple[str, int]]] = {}
    for name, sweep in sweeps.items():
        for i, point in enumerate(sweep):
            reused = ((known or {}).get(name) or {}).get(point.policy) if point.default else None
            if reused is not None:
                found[name, i] = reused
            else:
                key = (name, point.policy, json.dumps(point.config_changes(), sort_keys=True))
                jobs.setdefault(key, []).append((name, i))

    def label(job: tuple[str, str, str]) -> str:
        name, i = jobs[job][0]
        return f"{name} / frontier {sweeps[name][i].key} {sweeps[name][i].label}"

    def run_job(job: tuple[str, str, str]) -> Any:
        name, i = jobs[job][0]
        point = sweeps[name][i]
        return traces[name], name, seed, point.policy, point.config_changes()

    if workers <= 1:
        for job, same in jobs.items():
            result = _sweep_replay(*run_job(job))
            found.update(dict.fromkeys(same, result))
            step(label(job), 1.0)
    else:
        # Fresh interpreters (not forks of one that runs the progress bar's thread), each a core of its own.
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {job: pool.submit(_sweep_replay, *run_job(job)) for job in jobs}
            for job, future in futures.items():
                found.update(dict.fromkeys(jobs[job], future.result()))
                step(label(job), 1.0)
    frontier: dict[str, Any] = {}
    for name, sweep in sweeps.items():
        frontier[name] = {}
        for i, point in enumerate(sweep):
            frontier[name].setdefault(point.key, []).append(point_of(point, found[name, i]))
    return frontier, {name: dominance(points) for name, points in frontier.items()}


def sweep_cpu_s(frontier: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]) -> float:
    """The CPU seconds of the sweep's own replays, over every trace and policy."""
    return round(sum(p.get("cpu_s", 0.0) for per_trace in frontier.values() for points in per_trace.values()
                     for p in points), 1)


def frontier_steps(policies: tuple[str, ...] = POLICIES, traces: Sequence[str] = TRACES) -> int:
    """The sweep's replays, for the progress bar: every point but the defaults the replay section ran."""
    return sum(not point.default for name in traces for point in sweep_points(policies, trace=name))


def default_costs(frontier: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, float]:
    """Each policy's cost at its default setting, from its frontier points (a frontier run has no main table)."""
    labels = {point.key: point.label for point in sweep_points(frontier) if point.default and point.key == point.policy}
    return {policy: p["cost"] for policy, label in labels.items() for p in frontier.get(policy) or ()
            if p["label"] == label}


def run_frontier(*, seed: int = 0, out: Path = OUT / "frontier", show: Any = print,
                 workers: int = FRONTIER_WORKERS) -> dict[str, Any]:
    """The frontier alone, defaults included: out/bench/frontier/results.json and its report.html, and the tables
    printed (`make bench` runs it within the suite)."""
    from devtools import bench_report

    quiet_spot_logs()
    traces = {name: load_trace(name, seed=seed) for name in TRACES}
    started = time.perf_counter()
    frontier, dominated = frontier_section(traces, seed=seed, workers=workers, show=show)
    targets = {name: found for name in traces
               if (found := evaluate_frontier_target(name, frontier[name], default_costs(frontier[name])))}
    results = {
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m devtools.replay frontier", "seed": seed,
        "machine": {"python": platform.python_version(), "cpus": _cpus(), "workers": workers},
        "wall_s": round(time.perf_counter() - started, 1), "cpu_s": sweep_cpu_s(frontier),
        "assumptions": list(FRONTIER_ASSUMPTIONS),
        "targets": targets, "frontier": frontier, "dominance": dominated,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    written = bench_report.write_report(results, {}, out)
    show(bench_report.markdown_table(results))
    show(f"wrote {out / 'results.json'} and {', '.join(str(p.relative_to(out)) for p in written)}; the sweep took "
         f"{results['wall_s']:.0f} s of wall time, {results['cpu_s']:.0f} s of CPU in its replays")
    return results


def run_suite(*, seed: int = 0, quick: bool = False, out: Path = OUT, show: Any = print) -> dict[str, Any]:
    """Everything `make bench` measures; `quick` runs the small engine sizes only (the replays are always whole)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from devtools import bench, bench_report, bench_scale, bench_scale_down
    from devtools.replay import encoding_share, reaction

    quiet_spot_logs()
    traces = {name: load_trace(name, seed=seed) for name in TRACES}
    steps = len(traces) * len(runs_of(POLICIES)) + sum(name != BATCH_TRACE for name in traces) + 6
    steps += frontier_steps(POLICIES, tuple(traces)) + 1  # and the gang replay
    with Progress(TextColumn("{task.description:<32}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), transient=False) as progress:
        task = progress.add_task("replays", total=steps)
        done = {"n": 0}

        def step(label: str, fraction: float) -> None:
            progress.update(task, description=label, completed=done["n"] + min(fraction, 0.99))
            if fraction >= 1.0:
                done["n"] += 1
                progress.update(task, completed=done["n"])

        replays, facts, targets, series = replay_section(traces, seed=seed, step=step, wait_seeds=WAIT_SEEDS)
        frontier_started = time.perf_counter()
        frontier, dominated = frontier_section(traces, seed=seed, known=replays, step=step,
                                               show=progress.console.print)
        frontier_wall_s = round(time.perf_counter() - frontier_started, 1)
        for name in traces:
            costs = {policy: r["cost"] for policy, r in (replays.get(name) or {}).items() if "cost" in r}
            found = evaluate_frontier_target(name, frontier[name], costs)
            if found:
                targets[name] = [*targets.get(name, []), *found]
            if name == SIZES_TRACE:
                targets[name] = with_sizes_targets(targets.get(name, []), replays.get(name) or {},
                                                   (frontier.get(name) or {}).get("ca") or ())
        progress.update(task, description="engine at scale")
        # The official client's deserialisation (the naive path) of 5,000 nodes takes minutes: measured
        # at 100 and 1,000 nodes, where its ratio to ours is already clear.
        engine = {"at_scale": bench_scale.engine_at_scale(sizes=(100, 1000) if quick else (100, 1000, 5000),
                                                          naive=(100, 1000))}
        step("engine at scale", 1.0)
        progress.update(task, description="planners")
        engine["planners"] = bench.run(quick=quick)
        step("planners", 1.0)
        progress.update(task, description="cold start")
        cold = bench_scale.cold_start()
        step("cold start", 1.0)
        progress.update(task, description="scale-down vs size")
        engine["scale_down_vs_size"] = bench_scale_down.run(sizes=(500, 1000) if quick else bench_scale_down.SIZES,
                                                            repeat=2)
        step("scale-down vs size", 1.0)
        progress.update(task, description="reaction time")
        # ca's figures are the replay section's; the study adds ours at each pending-poll interval.
        reaction_figures, reaction_text = reaction.study(seed=seed, include_ca=False)
        step("reaction time", 1.0)
        progress.update(task, description="encoding share")
        encoding = [encoding_share.measure(name, "ours", seed=seed) for name in TRACES]
        step("encoding share", 1.0)
        progress.update(task, description="gang replay")
        gang_figures = gangs.run_gang_suite(gangs.GangConfig(seed=seed))
        step("gang replay", 1.0)
    results = {
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "make bench",
        "machine": {"python": platform.python_version(), "cpus": _cpus()},
        "seed": seed,
        "prices": {"date": PRICE_DATE, "currency": "USD", "source": PRICE_SOURCE, "per_hour": PRICES_PER_HOUR,
                   "spot": {"date": SPOT_PRICE_DATE, "source": SPOT_PRICE_SOURCE, "fraction": SPOT_PRICE_FRACTION}},
        "assumptions": [*BOUND_ASSUMPTIONS, *FRONTIER_ASSUMPTIONS, *STANDBY_ASSUMPTIONS, *GPU_READINESS_ASSUMPTIONS,
                        *DISRUPTION_ASSUMPTIONS],
        "traces": facts,
        "targets": targets,
        "replay": replays,
        "frontier": frontier,
        "dominance": dominated,
        "frontier_wall_s": frontier_wall_s,
        "frontier_cpu_s": sweep_cpu_s(frontier),
        "engine": engine,
        "cold_start": cold,
        "reaction": reaction_figures,
        "encoding_share": encoding,
        "gangs": gang_figures,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "series.json").write_text(json.dumps(series) + "\n")
    written = bench_report.write_report(results, series, out)
    show(bench_report.markdown_table(results))
    show("\n".join(bench_scale.engine_table(engine["at_scale"])))
    show("")
    show("\n".join(bench.table(engine["planners"])))
    show("")
    show("\n".join(bench_scale.cold_start_table(cold)))
    show("")
    show("\n".join(bench_scale_down.table(engine["scale_down_vs_size"])))
    show("")
    show(reaction_text)
    show("")
    show("\n".join(encoding_table(encoding)))
    show("")
    show(f"wrote {out / 'results.json'}, {out / 'series.json'} and {', '.join(str(p.relative_to(out)) for p in written)}")
    return results


ENCODING_SHARE_GOAL = 0.2  # issue 19: the replay spends at most a fifth of its time in YAML or JSON


def encoding_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One row per trace: the replay's CPU time, the part in YAML/JSON/msgspec code, and the goal."""
    lines = ["| replay | CPU | in YAML/JSON encoding | share | goal |", "|---|---:|---:|---:|---|"]
    lines += [f"| {r['trace']} / {r['policy']} | {r['total_s']:.1f} s | {r['encoding_s']:.1f} s | {r['share']:.1%} | "
              f"<= {ENCODING_SHARE_GOAL:.0%}: {'met' if r['share'] <= ENCODING_SHARE_GOAL else 'MISSED'} |"
              for r in rows]
    return lines


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
