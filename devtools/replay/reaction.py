"""Reaction time: our pending-poll interval against pending wait, cost, ARM reads and Function executions.

    python -m devtools.replay.reaction [--seed N] [--json out.json]   # both traces, 10/15/30 s, and `ca`

Each trace is replayed under `ours` with `PENDING_POLL_SCHEDULE` at every interval of `INTERVALS_S`
(one seed, so that it can run in `make bench`), and under `ca` (cluster-autoscaler's 10 s loop) for
comparison. Per run: pending wait p50/p95/p99, node cost, ARM reads (total, per hour over the run and
in its busiest hour) and writes, and the Function executions the replay ran (the pending poll, the
utilization poll, queue-triggered scale actions, Event Grid notices) scaled to a day of trace time
and priced on Flex Consumption (`FlexPrices`). `study()` returns the figures, a markdown table and a
recommended interval (`recommend`); docs/measurements.md ("Reaction time: the pending-poll interval")
holds the measured table and the trade-off.

The Functions bill is an estimate: the replay counts executions but does not time them against a
real API server, so every execution is billed `FlexPrices.billed_seconds_per_execution` (the plan's
minimum billable period, 1 s, by default: the issue's tick target at 1,000 nodes is 1 s too). The
hourly `sweep_state` timer is not replayed (24 executions a day, whatever the interval).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from devtools.replay.harness import ReplayConfig
from devtools.replay.pools import DEFAULT_POOLS, POOL_SETS
from devtools.replay.run import replay
from devtools.replay.traces import Trace, load_trace

TRACES = ("alibaba2018", "alibaba2023")
INTERVALS_S = (10, 15, 30)
DEFAULT_INTERVAL_S = 30  # the baseline compared against: PENDING_POLL_SCHEDULE's default until this study (now 10 s)
DAY_S = 86_400.0
# Resource Manager's classic per-subscription read limit (12,000 reads an hour). Azure now meters reads
# per principal with a token bucket (250, refilled 25/s: ../shared/facts/azure.md), a looser limit; the
# classic figure is the one to stay well under, since other tools read through the same subscription.
ARM_READS_PER_HOUR_LIMIT = 12_000
# What "a small extra cost" and "a clearly better p95" mean for `recommend`. The cost bound is issue 19's
# ("p95 wait at most ca's at no more than 5 % extra cost"); between seeds, node cost moves by up to 2 %.
MAX_EXTRA_COST_SHARE = 0.05  # nodes plus Functions, per day, against the default interval
MIN_P95_GAIN_S = 5.0  # on at least one trace, and no trace worse
MAX_ARM_READS_SHARE = 0.5  # of ARM_READS_PER_HOUR_LIMIT in the busiest hour: room for everyone else


@dataclass(frozen=True, slots=True)
class FlexPrices:
    """Flex Consumption on-demand billing: per execution, and per GB-s of instance memory while executing.

    Prices: East US pay-as-you-go, before the monthly free grant (docs/benchmarks.md names the sources).
    Memory: the instance size infra/modules/functionapp.bicep deploys (`instanceMemoryMB: 2048`).
    """

    usd_per_gb_second: float = 0.000026
    usd_per_million_executions: float = 0.40
    instance_memory_gb: float = 2048 / 1024
    min_billed_s: float = 1.0  # the plan's minimum billable execution period; past it, rounded up to 100 ms
    billed_seconds_per_execution: float = 1.0  # assumed execution time (see the module's docstring)

    def billed_seconds(self, duration_s: float) -> float:
        """What the plan bills for one execution of this duration: at least the minimum, then whole 100 ms."""
        if duration_s < 0:
            raise ValueError(f"an execution cannot last {duration_s} s")
        return max(self.min_billed_s, math.ceil(round(duration_s * 10, 6)) / 10)

    def usd_per_execution(self) -> float:
        gb_seconds = self.billed_seconds(self.billed_seconds_per_execution) * self.instance_memory_gb
        return gb_seconds * self.usd_per_gb_second + self.usd_per_million_executions / 1e6


def schedule_for(interval_s: int) -> str:
    """The six-field NCRONTAB expression firing every `interval_s` seconds, on the minute's whole multiples."""
    if interval_s <= 0 or 60 % interval_s:
        raise ValueError(f"a pending-poll interval must divide a minute (1-60 s), got {interval_s} s")
    return "0 * * * * *" if interval_s == 60 else f"*/{interval_s} * * * * *"


def per_day(count: float, sim_seconds: float) -> float:
    """A count over a run of `sim_seconds`, scaled to a day of trace time."""
    if sim_seconds <= 0:
        raise ValueError(f"a run must last some time, got {sim_seconds} s")
    return count * DAY_S / sim_seconds


def busiest_hour(samples: Sequence[tuple[float, int]]) -> int:
    """The most reads in any window of at least an hour between samples (t seconds, cumulative reads).

    Samples are taken about every ten sim minutes, so a window runs an hour to an hour and ten minutes:
    an upper bound on the busiest hour, which is what a limit check wants. A run shorter than an hour
    counts all its reads.
    """
    if not samples:
        return 0
    if samples[-1][0] - samples[0][0] <= 3600:
        return samples[-1][1] - samples[0][1]
    best, start = 0, 0
    for t, reads in samples:
        while start + 1 < len(samples) and t - samples[start + 1][0] >= 3600:
            start += 1  # the latest sample at least an hour before this one
        if t - samples[start][0] >= 3600:
            best = max(best, reads - samples[start][1])
    return best


@dataclass(frozen=True, slots=True)
class OursRun:
    """A replay of `ours` with what `replay()` keeps to itself: the Function executions and the ARM read curve."""

    result: dict[str, Any]
    executions: dict[str, int]  # by function name, as function_app.py names them
    sim_seconds: float
    arm_read_samples: tuple[tuple[float, int], ...]  # (sim seconds, cumulative ARM reads), about every 10 min


def run_ours(trace: Trace, config: ReplayConfig) -> OursRun:
    """`ours` on the trace (devtools.replay.run.replay), with its Function executions and ARM read curve."""
    if config.virtual_node is not None or config.spot is not None:
        raise ValueError("the reaction study replays `ours` on the VM pools only (no virtual node, no spot tier)")
    outcome = replay(trace, "ours", config)
    return OursRun(outcome.result, dict(outcome.executions), outcome.sim_seconds, outcome.arm_read_samples)


def _wait(result: Mapping[str, Any]) -> dict[str, float]:
    return {q: result["pending_wait_s"][q] for q in ("p50", "p95", "p99")}


def figures(run: OursRun, *, prices: FlexPrices = FlexPrices()) -> dict[str, Any]:
    """One interval's row: wait, cost per day, ARM calls, executions per day and their Flex Consumption bill."""
    executions = sum(run.executions.values())
    executions_per_day = per_day(executions, run.sim_seconds)
    hours = run.sim_seconds / 3600
    return {
        "pending_wait_s": _wait(run.result),
        "cost": run.result["cost"],
        "node_usd_per_day": round(per_day(run.result["cost"], run.sim_seconds), 2),
        "arm_reads": run.result["arm_reads"],
        "arm_writes": run.result["arm_writes"],
        "arm_reads_per_hour": round(run.result["arm_reads"] / hours, 1),
        "arm_reads_busiest_hour": busiest_hour(run.arm_read_samples),
        "throttle_violations": run.result["throttle_violations"],
        "executions": dict(sorted(run.executions.items())),
        "executions_per_day": round(executions_per_day, 1),
        "functions_usd_per_day": round(executions_per_day * prices.usd_per_execution(), 4),
        "sim_hours": round(hours, 2),
    }


def ca_figures(trace: Trace, config: ReplayConfig) -> dict[str, Any]:
    outcome = replay(trace, "ca", config)
    result, sim_seconds = outcome.result, outcome.sim_seconds
    return {
        "pending_wait_s": _wait(result),
        "cost": result["cost"],
        "node_usd_per_day": round(per_day(result["cost"], sim_seconds), 2),
        "arm_reads": result["arm_reads"],
        "arm_writes": result["arm_writes"],
        "arm_reads_per_hour": round(result["arm_reads"] / (sim_seconds / 3600), 1),
        "throttle_violations": result["throttle_violations"],
    }


def recommend(per_trace: Mapping[str, Mapping[str, Mapping[str, Any]]], *,
              default_s: int = DEFAULT_INTERVAL_S) -> dict[str, Any]:
    """The interval to make the default, from the figures, by the rule docs/benchmarks.md states.

    A shorter interval than the default qualifies when, on every trace, its p95 wait is no longer, its
    nodes plus Functions cost per day at most MAX_EXTRA_COST_SHARE above the default's and its busiest
    hour within MAX_ARM_READS_SHARE of the ARM read limit, and on some trace its p95 is at least
    MIN_P95_GAIN_S shorter. Of those, the lowest p95 summed over the traces wins (ties: the longer
    interval, the cheaper to run). `per_trace` maps trace -> "ours@<n>s" -> `figures()`.
    """
    key = f"ours@{default_s}s"
    candidates: list[tuple[float, int]] = []
    reasons: dict[int, str] = {}
    intervals = sorted({int(k[5:-1]) for rows in per_trace.values() for k in rows if k.startswith("ours@")})
    for interval in intervals:
        if interval >= default_s:
            continue
        mine, why = f"ours@{interval}s", []
        gain = 0.0
        for trace, rows in per_trace.items():
            ours, base = rows[mine], rows[key]
            p95, base_p95 = ours["pending_wait_s"]["p95"], base["pending_wait_s"]["p95"]
            total = ours["node_usd_per_day"] + ours["functions_usd_per_day"]
            base_total = base["node_usd_per_day"] + base["functions_usd_per_day"]
            if p95 > base_p95:
                why.append(f"{trace}: p95 {p95:.0f} s, longer than {base_p95:.0f} s")
            if total > base_total * (1 + MAX_EXTRA_COST_SHARE):
                why.append(f"{trace}: ${total:,.2f}/day, over {MAX_EXTRA_COST_SHARE:.0%} above ${base_total:,.2f}")
            if ours["arm_reads_busiest_hour"] > MAX_ARM_READS_SHARE * ARM_READS_PER_HOUR_LIMIT:
                why.append(f"{trace}: {ours['arm_reads_busiest_hour']:,} ARM reads in the busiest hour")
            gain = max(gain, base_p95 - p95)
        if gain < MIN_P95_GAIN_S:
            why.append(f"p95 at most {gain:.0f} s shorter (wanted {MIN_P95_GAIN_S:.0f} s)")
        if why:
            reasons[interval] = "; ".join(why)
        else:
            candidates.append((sum(rows[mine]["pending_wait_s"]["p95"] for rows in per_trace.values()), -interval))
    if not candidates:
        return {"interval_s": default_s, "schedule": schedule_for(default_s), "changed": False,
                "why_not": {f"{i} s": r for i, r in reasons.items()}}
    chosen = -min(candidates)[1]
    return {"interval_s": chosen, "schedule": schedule_for(chosen), "changed": True,
            "why_not": {f"{i} s": r for i, r in reasons.items()}}


def markdown_table(per_trace: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    lines = [
        "| trace | policy | pending wait p50 / p95 / p99 (s) | node cost ($/day) | ARM reads (/h mean, busiest h) "
        "| ARM writes | Function executions / day | Functions ($/day, Flex) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for trace, rows in per_trace.items():
        for name, row in rows.items():
            wait = row["pending_wait_s"]
            busiest = f", {row['arm_reads_busiest_hour']:,}" if "arm_reads_busiest_hour" in row else ""
            runs = f"{row['executions_per_day']:,.0f}" if "executions_per_day" in row else "-"
            bill = f"{row['functions_usd_per_day']:.2f}" if "functions_usd_per_day" in row else "-"
            lines.append(
                f"| {trace} | {name} | {wait['p50']:.0f} / {wait['p95']:.0f} / {wait['p99']:.0f} "
                f"| {row['node_usd_per_day']:,.2f} | {row['arm_reads_per_hour']:,.0f}{busiest} | {row['arm_writes']:,} "
                f"| {runs} | {bill} |")
    return "\n".join(lines)


def study(
    *, traces: Sequence[str | Trace] = TRACES, intervals_s: Sequence[int] = INTERVALS_S, seed: int = 0,
    include_ca: bool = True, prices: FlexPrices = FlexPrices(), base: ReplayConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], str]:
    """Every trace under every interval (and `ca`): the figures, a markdown table and the recommendation.

    A trace is a name (its pools: POOL_SETS) or a Trace (pools: `base`'s, default DEFAULT_POOLS).
    """
    if DEFAULT_INTERVAL_S not in intervals_s:
        raise ValueError(f"the study compares with the default interval, {DEFAULT_INTERVAL_S} s: include it")
    per_trace: dict[str, dict[str, dict[str, Any]]] = {}
    for item in traces:
        trace = load_trace(item, seed=seed) if isinstance(item, str) else item
        pools = POOL_SETS.get(trace.name, base.pools if base is not None else DEFAULT_POOLS)
        config = replace(base or ReplayConfig(), seed=seed, pools=pools)
        rows: dict[str, dict[str, Any]] = {}
        for interval in intervals_s:
            if progress is not None:
                progress(f"{trace.name}: ours at {interval} s")
            settings = {**config.settings, "PENDING_POLL_SCHEDULE": schedule_for(interval)}
            rows[f"ours@{interval}s"] = figures(run_ours(trace, replace(config, settings=settings)), prices=prices)
        if include_ca:
            if progress is not None:
                progress(f"{trace.name}: ca")
            rows["ca"] = ca_figures(trace, config)
        per_trace[trace.name] = rows
    chosen = recommend(per_trace)
    data = {
        "seed": seed,
        "intervals_s": list(intervals_s),
        "flex_prices": {"usd_per_gb_second": prices.usd_per_gb_second,
                        "usd_per_million_executions": prices.usd_per_million_executions,
                        "instance_memory_gb": prices.instance_memory_gb,
                        "billed_seconds_per_execution": prices.billed_seconds(prices.billed_seconds_per_execution),
                        "usd_per_execution": prices.usd_per_execution()},
        "arm_reads_per_hour_limit": ARM_READS_PER_HOUR_LIMIT,
        "traces": per_trace,
        "recommendation": chosen,
    }
    table = markdown_table(per_trace)
    verdict = (f"Recommended PENDING_POLL_SCHEDULE: `{chosen['schedule']}` ({chosen['interval_s']} s"
               f"{'' if chosen['changed'] else ', the current default'}).")
    return data, f"{table}\n\n{verdict}"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import sys
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m devtools.replay.reaction", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="boot delays, and alibaba2018's sampled jobs (default 0)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    data, text = study(seed=args.seed, progress=lambda what: print(f"... {what}", file=sys.stderr, flush=True))
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
