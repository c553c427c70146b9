"""`ours+standby` in the replay: its settings, what a run with warm standby measured, its targets and sweep sizes.

`ours+standby` is `ours` with `STANDBY_INSTANCES=auto` and `STANDBY_MAX=20` (STANDBY_SETTINGS; a run's own settings
override them, so the frontier sweeps fixed sizes the same way). The cap is raised from its default of 10 because the
traces' scale-ups are larger: on alibaba2023 it shortened the p95 wait, on alibaba2018 no cap tried did (the commit
that set it has the figures). Its `standby` part of results.json (`standby_section`) says how scale-ups
were served, from the world's own record of every instance, so it does not depend on what the autoscaler says:

- a **hit** is a start of a stopped (deallocated or hibernated) instance: a node a scale-up got without a create;
- a **miss** is an instance created during the run whose node ran a workload pod before it was ever stopped: a node
  a scale-up had to create (standby empty, or none kept); the instances created only to be stopped (refills) are
  counted apart as `refills`;
- `disk_cost` is what the stopped instances billed (OS disks, and the memory disks of hibernated ones), inside `cost`;
- `slow_pods` classifies every pod that waited longer than the target (STANDBY_TARGETS) by what it waited for:
  the start of a stopped instance, a create, or room on a node that was already there.

Pure functions of a finished world; the runs are devtools.replay.run's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from devtools.replay.metrics import STOPPED_INSTANCE_ASSUMPTIONS
from sandbox.world import World

POLICY = "ours+standby"
STANDBY_SETTING = "STANDBY_INSTANCES"
# What ours+standby sets beyond ours' defaults (results.json says them beside its figures).
STANDBY_SETTINGS: Mapping[str, str] = MappingProxyType({STANDBY_SETTING: "auto", "STANDBY_MAX": "20"})
# The frontier's standby sizes: fixed counts per group, and `auto` (the policy's default, the main table's run).
FRONTIER_SIZES: tuple[str, ...] = ("0", "1", "2", "5", "10", "20", "auto")
ASSUMPTIONS: tuple[str, ...] = (
    "ours+standby: ours with STANDBY_INSTANCES=auto (the standby target sized from the forecast of the next hour's "
    "scale-ups, within the break-even of disk cost against the time a start saves) and STANDBY_MAX=20 (default 10); "
    "every other setting at ours' default unless the run says otherwise (its `settings`)",
    "ours+standby: the replay's pools are Uniform scale sets, so standby instances are deallocated, never hibernated "
    "(a hibernated one would also bill its memory as a disk: sandbox.model.os_disks)",
    "forecast MAPE: the one-hour-ahead forecasts' mean absolute percentage error over every group's completed hours "
    "with demand, pooled; a replay of a few hours gives the seasonal model no earlier week, so it is the recent-level "
    "forecast being judged",
    "standby hits are starts of stopped instances, misses are instances created during the run whose node ran a "
    "workload pod before it was ever stopped, refills are instances created and stopped before running any: all "
    "counted from the world's instances, not from the autoscaler's own events",
    *STOPPED_INSTANCE_ASSUMPTIONS,
)


@dataclass(frozen=True, slots=True)
class StandbyTarget:
    """One of the issue's targets for ours+standby on a trace: a p95 wait limit and the run its cost may not exceed."""

    trace: str
    p95_s: float
    cost_at_most: str  # the result key whose cost ours+standby's may not exceed, in the same suite run


STANDBY_TARGETS: tuple[StandbyTarget, ...] = (
    StandbyTarget("alibaba2018", 60.0, "ours"),
    StandbyTarget("alibaba2023", 45.0, "ca"),
)
# Where a trace has no target of its own, a slow pod is one waiting longer than this.
DEFAULT_SLOW_S = 60.0


def standby_settings(overrides: Mapping[str, str]) -> dict[str, str]:
    """ours+standby's app settings: STANDBY_SETTINGS, then the run's own (a frontier point's size, a tuned idle time)."""
    return {**STANDBY_SETTINGS, **overrides}


def slow_threshold(trace: str) -> float:
    return next((t.p95_s for t in STANDBY_TARGETS if t.trace == trace), DEFAULT_SLOW_S)


def standby_section(world: World, *, slow_s: float = DEFAULT_SLOW_S, forecast_mape: float | None = None
                    ) -> dict[str, Any]:
    """How a finished run served its scale-ups (hits, misses, refills), what its stopped instances billed, and why
    its pods that waited longer than `slow_s` waited (`slow_pods`)."""
    report = world.report()
    instances = list(world._iter_instances())  # noqa: SLF001 - the world's record, gone instances included
    by_node = {inst.node_name: inst for inst in instances if inst.node_name}
    first_pod: dict[str, float] = {}
    for pod in report["pods"]:
        if pod["node"] and pod["started"] is not None and pod["node"] in by_node:
            first_pod[pod["node"]] = min(first_pod.get(pod["node"], pod["started"]), pod["started"])
    hits = sum(inst.starts for inst in instances)
    misses = refills = 0
    for inst in instances:
        if inst.created_at <= 0:
            continue  # the pools' initial instances: no scale-up made them
        ran = first_pod.get(inst.node_name)
        stopped = inst.first_stopped_at
        if ran is not None and (stopped is None or ran < stopped):
            misses += 1
        elif stopped is not None:
            refills += 1
    stopped = report.get("stopped_disks") or {}
    served = hits + misses
    return {
        "hits": hits,
        "misses": misses,
        "hit_rate": round(hits / served, 4) if served else None,
        "refills": refills,
        "deallocations": sum(world.counters.instances_deallocated.values()),
        "disk_cost": round(stopped.get("cost_usd", 0.0), 4),
        "disk_seconds": round(stopped.get("disk_seconds", 0.0), 1),
        "memory_disk_cost": round(stopped.get("memory_disk_cost_usd", 0.0), 4),
        "stopped_peak": _stopped_peak(world),
        "forecast_mape": forecast_mape,
        "slow_pods": slow_pods(report["pods"], instances, slow_s=slow_s),
    }


def forecast_mape(state: Any, now: Any) -> float | None:
    """The forecast's mean absolute percentage error over the run (every group's judged hours pooled), as the app's
    forecast reads it from its demand rows; None where it never had an hour to judge."""
    from shared.services.demand import pooled_forecast_error  # the app's services, only when a run asks

    return pooled_forecast_error(state, now=now)


def _stopped_peak(world: World) -> int:
    """The most instances stopped (deallocating or deallocated) at one timeline sample."""
    return max((sum(g.get("deallocated", 0) for g in sample["groups"].values()) for sample in world.timeline),
               default=0)


def slow_pods(pods: Sequence[Mapping[str, Any]], instances: Sequence[Any], *, slow_s: float) -> dict[str, Any]:
    """The pods that waited longer than `slow_s`, by what they waited for.

    The node a pod ran on was Ready only after the pod was created: it waited for a start of a stopped instance
    (`start`: the start delay's tail), or for a create (`create`: standby was empty, outgrown or none was kept),
    whether that VM was asked for before or after it came; the node was Ready already (`room`: the pod waited for
    room or the scheduler, not for a VM); or the pod never ran (`never_ran`). How many, and the
    longest wait in seconds, per cause; how many per group (the scale set its node was in)."""
    by_node = {inst.node_name: inst for inst in instances if inst.node_name}
    causes: Counter[str] = Counter()
    groups: Counter[str] = Counter()
    longest: dict[str, float] = {}
    for pod in pods:
        if pod["outcome"] == "failed":
            continue
        end = pod["started"]
        if end is None:
            cause, wait = "never_ran", None
        else:
            wait = end - pod["waiting_since"]
            if wait <= slow_s:
                continue
            cause = _cause(by_node.get(pod["node"]), created=pod["waiting_since"], started=end)
        causes[cause] += 1
        inst = by_node.get(pod["node"]) if pod["node"] else None
        groups[(inst.group_key.rsplit("/", 1)[-1] if inst is not None else pod.get("group")) or "none"] += 1
        if wait is not None:
            longest[cause] = max(longest.get(cause, 0.0), round(wait, 1))
    return {"threshold_s": slow_s, "count": sum(causes.values()), "by_cause": dict(sorted(causes.items())),
            "longest_s": dict(sorted(longest.items())), "by_group": dict(sorted(groups.items()))}


def _cause(inst: Any, *, created: float, started: float) -> str:
    """What a pod created at `created` and started at `started` on `inst`'s node waited for: the last time that
    instance came up before `started` (its create, or a start), unless its node was Ready when the pod came."""
    if inst is None:
        return "room"
    ups = [(inst.created_at, inst.registered_at if inst.registered_at is not None else inst.created_at, "create")]
    ups += [(at, ready, "start") for at, ready in zip(inst.start_times, inst.start_ready_times, strict=True)]
    _, ready, kind = max((up for up in ups if up[0] <= started), key=lambda up: up[0], default=ups[0])
    return "room" if ready <= created else kind


def evaluate_standby_targets(trace: str, per_policy: Mapping[str, Mapping[str, Any]],
                             seeds: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """The issue's targets for ours+standby on `trace` (none for a trace without one), met or missed with their
    figures; the standby disk cost and the forecast's error are stated in the detail, never judged. `seeds`: the
    suite's rows of p95 and cost per seed (`wait_over_seeds`); where they hold ours+standby and the run its cost
    is held to, both targets are judged once more on their means (one seed's p95 of a few hundred pods moves by
    several seconds)."""
    mine = per_policy.get(POLICY)
    target = next((t for t in STANDBY_TARGETS if t.trace == trace), None)
    if mine is None or target is None:
        return []
    other = per_policy.get(target.cost_at_most)
    p95 = mine["pending_wait_s"]["p95"]
    standby = mine.get("standby") or {}
    mape = standby.get("forecast_mape")
    stated = (f"standby disk cost ${standby.get('disk_cost', 0.0):,.2f}, hits {standby.get('hits', 0)}, misses "
              f"{standby.get('misses', 0)}, forecast MAPE " + ("n/a" if mape is None else f"{mape:.0%}"))
    targets = [{"name": f"ours+standby: p95 wait at most {target.p95_s:.0f} s", "met": p95 <= target.p95_s,
                "detail": f"{p95:.0f} s; {stated}"}]
    if other is not None:
        targets.append({
            "name": f"ours+standby: cost at most {target.cost_at_most}'s (same run)",
            "met": mine["cost"] <= other["cost"],
            "detail": f"${mine['cost']:,.2f} vs ${other['cost']:,.2f}, p95 {p95:.0f} s vs "
                      f"{other['pending_wait_s']['p95']:.0f} s",
        })
    rows = [row for row in seeds if POLICY in row and target.cost_at_most in row]
    if len(rows) > 1:
        mean = {policy: {key: sum(row[policy][key] for row in rows) / len(rows) for key in ("p95", "cost")}
                for policy in (POLICY, target.cost_at_most)}
        mine_mean, other_mean = mean[POLICY], mean[target.cost_at_most]
        targets.append({
            "name": f"ours+standby: p95 wait at most {target.p95_s:.0f} s at a cost at most {target.cost_at_most}'s, "
                    f"means over seeds {rows[0]['seed']}-{rows[-1]['seed']}",
            "met": mine_mean["p95"] <= target.p95_s and mine_mean["cost"] <= other_mean["cost"],
            "detail": f"p95 {mine_mean['p95']:.1f} s, cost ${mine_mean['cost']:,.2f} vs ${other_mean['cost']:,.2f} "
                      f"(p95 {other_mean['p95']:.1f} s)",
        })
    return targets


def evaluate_frontier_target(trace: str, frontier: Mapping[str, Sequence[Mapping[str, Any]]],
                             costs: Mapping[str, float]) -> list[dict[str, Any]]:
    """The trace's wait target (STANDBY_TARGETS) judged on the frontier: its cheapest ours-family point (ours,
    ours+standby or ours+buffer, at any swept setting) with a p95 wait at most the target's, against the cost of the
    run the target holds it to (`costs`, per policy: this suite's default runs). Every point is one replay on the
    suite's seed: a point that meets it here is a candidate to confirm on other seeds, not a tuned default."""
    from devtools.replay.frontier import cheapest_within, ours_points

    target = next((t for t in STANDBY_TARGETS if t.trace == trace), None)
    points = ours_points(frontier)
    if target is None or not points:
        return []
    limit = costs.get(target.cost_at_most)
    name = (f"cheapest swept ours point with p95 wait at most {target.p95_s:.0f} s"
            + (f", at a cost at most {target.cost_at_most}'s" if limit is not None else ""))
    found = cheapest_within(frontier, p95_s=target.p95_s)
    if found is None:
        fastest = min(points, key=lambda p: (p["p95_wait_s"], p["cost"]))
        return [{"name": name, "met": False,
                 "detail": f"no swept point reaches {target.p95_s:.0f} s; the shortest p95 is {fastest['label']}'s, "
                           f"{fastest['p95_wait_s']:.0f} s at ${fastest['cost']:,.2f}"}]
    family, point = found
    against = "" if limit is None else f" vs {target.cost_at_most}'s ${limit:,.2f}"
    return [{"name": name, "met": limit is None or point["cost"] <= limit,
             "detail": f"{family} {point['label']}: p95 {point['p95_wait_s']:.0f} s at ${point['cost']:,.2f}{against}"}]
