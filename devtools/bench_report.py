"""The replay benchmark's results as people read them: a markdown table, and one HTML page with plots.

The replay benchmark runs workload traces through several autoscaler policies on a simulated
cluster and writes `results` (out/bench/results.json) and per-policy time `series`. This module
only renders them; it computes nothing that is not already in its inputs, so a figure in the report
can always be traced back to the JSON.

- `markdown_table(results)`: one table per trace, for a README, an issue or a pull request, with the
  trace's cost-versus-wait frontier and dominance table when the results have them;
- `write_report(results, series, out_dir)`: PNG plots per trace (the frontier's too) and `report.html`,
  one self-contained file (the plots embedded as data URIs) that can be attached or mailed as is.

Output is deterministic for the same input: the only date in the page is `results["generated"]`,
passed in by the caller, so two renderings of the same run compare equal.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.replay.frontier import (
    DOMINANCE_HEADERS,
    FRONTIER_HEADERS,
    dominance_rows,
    dominance_summary,
    frontier_rows,
)

# The policies in the order the table reads best: ours first, then what it is compared with, the
# lower bound and the oracle (the two computed references) last. Policies not named here follow, alphabetically.
POLICY_ORDER = ("ours", "ours+sizes", "ours+standby", "ours+buffer", "ca", "nap", "ours+vn@100", "ca+vn@100", "ours+vn@1000", "ca+vn@1000",
                "ours+spot", "ca+spot", "ours+spot@5%", "ca+spot@5%", "ours+spot@20%", "ca+spot@20%",
                "ours+spot@5%,quota320", "ca+spot@5%,quota320", "vmss-cpu", "static", "lower_bound", "oracle")
FRONTIER_TITLE = ("Frontier (each policy at each idle time swept; ours+standby at each standby size; ours+buffer at "
                  "each CapacityBuffer size, in empty nodes kept per CPU pool)")
DEMAND_KEY = "_demand"
MISSING = "–"  # en dash: a metric that does not apply to the policy (e.g. the oracle's pending waits)
# Above this many points a line is decimated to MAX_PLOT_POINTS // 3 buckets, about one per pixel
# column of a 10-inch figure: 20k-point step lines draw slowly and add nothing the eye can see,
# while keeping each bucket's extremes keeps spikes (a burst of pending pods) visible.
MAX_PLOT_POINTS = 3000
FIGSIZE = (10.0, 4.0)
DPI = 100
WORK_LOST_HOURS_FROM_S = 3600.0  # below an hour, work lost reads better in seconds

HEADERS = (
    "policy", "node-hours", "cost ($)", "cost vs oracle", "cost vs lower bound",
    "pending wait p50 (s)", "pending wait p95 (s)", "pending wait p99 (s)", "pending wait max (s)",
    "pods killed", "work lost", "disruptions/day", "scale actions", "ARM reads", "ARM writes", "throttle violations",
    "pods completed",
)
# The spot tier's own figures (results' `spot` part), one row per policy that ran with spot pools. "died with the
# VM": pods running when their spot VM was evicted; "moved at the notice": pods evicted on the Preempt notice.
# "work lost (all)" is the main table's: every running pod killed or evicted, whatever the reason.
SPOT_HEADERS = (
    "policy", "cost ($)", "cost vs ours", "spot share of node-hours", "pending wait p95 (s)", "VMs evicted",
    "notices", "pods moved at the notice", "pods died with the VM", "Job pods died with the VM",
    "work lost with the VM", "work lost (all)", "quota refusals",
)

# Warm standby's own figures (results' `standby` part, devtools.replay.standby): how scale-ups were served and why
# the pods that waited longer than the trace's target waited.
STANDBY_HEADERS = (
    "policy", "cost ($)", "of which stopped disks ($)", "pending wait p95 (s)", "standby hits", "misses",
    "hit rate", "refills", "most stopped at once", "forecast MAPE", "pods over target: start / create / room",
)

VN_HEADERS = (
    "policy", "cost ($)", "of which ACI ($)", "pending wait p95 (s)", "peak container groups", "peak ACI cores",
    "pods ACI refused", "Jobs failed (backoffLimit)", "tasks never run", "pods completed",
)


@dataclass(frozen=True)
class Target:
    name: str
    met: bool
    detail: str


@dataclass(frozen=True)
class TraceSection:
    """What the markdown and the HTML both show for one trace, formatted once so they cannot disagree."""

    trace: str
    note: str | None
    rows: tuple[tuple[str, ...], ...]  # cells in HEADERS order, already formatted
    targets: tuple[Target, ...]
    spot_rows: tuple[tuple[str, ...], ...] = ()  # cells in SPOT_HEADERS order, for the policies with spot pools
    frontier_rows: tuple[tuple[str, ...], ...] = ()  # cells in FRONTIER_HEADERS order: every point of the sweep
    dominance_rows: tuple[tuple[str, ...], ...] = ()  # cells in DOMINANCE_HEADERS order: one per peer point
    dominance: Target | None = None  # whether ours dominates every peer point, with the count and the misses
    vn_rows: tuple[tuple[str, ...], ...] = ()  # cells in VN_HEADERS order, for the runs with a virtual node
    standby_rows: tuple[tuple[str, ...], ...] = ()  # cells in STANDBY_HEADERS order, for the runs with warm standby


# --- formatting -------------------------------------------------------------------------------

def _number(value: Any) -> float | None:
    """A metric as a float, or None when it does not apply (None, missing, NaN, not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if math.isnan(value):
        return None
    return float(value)


def _fmt(value: Any, spec: str, suffix: str = "") -> str:
    number = _number(value)
    return MISSING if number is None else f"{number:{spec}}{suffix}"


def _fmt_int(value: Any) -> str:
    number = _number(value)
    return MISSING if number is None else f"{round(number):,}"


def _fmt_node_hours(node_seconds: Any) -> str:
    number = _number(node_seconds)
    return MISSING if number is None else f"{number / 3600:,.1f}"


def _fmt_work_lost(seconds: Any) -> str:
    number = _number(seconds)
    if number is None:
        return MISSING
    if abs(number) >= WORK_LOST_HOURS_FROM_S:
        return f"{number / 3600:,.1f} h"
    return f"{round(number):,} s"


def ordered_policies(policies: Iterable[str]) -> list[str]:
    """Known policies in POLICY_ORDER, then the others alphabetically; keys starting with "_" are not policies."""
    names = [p for p in dict.fromkeys(policies) if not p.startswith("_")]
    known = [p for p in POLICY_ORDER if p in names]
    return known + sorted(p for p in names if p not in POLICY_ORDER)


def policy_row(policy: str, metrics: Mapping[str, Any] | None) -> tuple[str, ...]:
    """One policy's formatted cells, in HEADERS order."""
    m = metrics or {}
    waits = m.get("pending_wait_s") or {}
    return (
        policy,
        _fmt_node_hours(m.get("node_seconds")),
        _fmt(m.get("cost"), ",.2f"),
        _fmt(m.get("cost_vs_oracle"), ",.2f", "x"),
        _fmt(m.get("cost_vs_lower_bound"), ",.2f", "x"),
        *(_fmt_int(waits.get(q)) for q in ("p50", "p95", "p99", "max")),
        _fmt_int(m.get("pods_killed")),
        _fmt_work_lost(m.get("work_lost_s")),
        _fmt(m.get("disruptions_per_day"), ",.1f"),  # nodes removed while running workload pods, per sim day
        _fmt_int(m.get("scale_actions")),
        _fmt_int(m.get("arm_reads")),
        _fmt_int(m.get("arm_writes")),
        _fmt_int(m.get("throttle_violations")),
        _completed(m),
    )


def spot_row(policy: str, metrics: Mapping[str, Any]) -> tuple[str, ...]:
    """One spot policy's formatted cells, in SPOT_HEADERS order."""
    spot = metrics.get("spot") or {}
    share = _number(spot.get("spot_share"))
    return (
        policy,
        _fmt(metrics.get("cost"), ",.2f"),
        _fmt(spot.get("cost_vs_ours"), ",.2f", "x"),
        MISSING if share is None else f"{share:.0%}",
        _fmt_int((metrics.get("pending_wait_s") or {}).get("p95")),
        _fmt_int(spot.get("evictions")),
        _fmt_int(spot.get("notices_published")),
        _fmt_int(spot.get("pods_moved_before_eviction")),
        _fmt_int(spot.get("evicted_pods")),
        _fmt_int(spot.get("evicted_job_pods")),
        _fmt_work_lost(spot.get("lost_work_s")),
        _fmt_work_lost(metrics.get("work_lost_s")),
        _fmt_int(spot.get("quota_refused_requests")),
    )


def vn_row(policy: str, metrics: Mapping[str, Any]) -> tuple[str, ...]:
    """One virtual-node run's formatted cells, in VN_HEADERS order."""
    vn = metrics.get("virtual_node") or {}
    refused = vn.get("pods_refused")
    return (
        policy,
        _fmt(metrics.get("cost"), ",.2f"),
        _fmt(vn.get("aci_cost"), ",.2f"),
        _fmt_int((metrics.get("pending_wait_s") or {}).get("p95")),
        _fmt_int(vn.get("peak_container_groups")),
        _fmt(vn.get("peak_cores"), ",.0f"),
        _fmt_int(sum(refused.values()) if isinstance(refused, Mapping) else None),
        _fmt_int(vn.get("jobs_failed")),
        _fmt_int(vn.get("tasks_never_run")),
        _completed(metrics),
    )


def standby_row(policy: str, metrics: Mapping[str, Any]) -> tuple[str, ...]:
    """A run's `standby` part as STANDBY_HEADERS' cells."""
    standby = metrics.get("standby") or {}
    slow = standby.get("slow_pods") or {}
    causes = slow.get("by_cause") or {}
    rate, mape = _number(standby.get("hit_rate")), _number(standby.get("forecast_mape"))
    return (
        policy, _fmt(metrics.get("cost"), ",.2f"), _fmt(standby.get("disk_cost"), ",.2f"),
        _fmt((metrics.get("pending_wait_s") or {}).get("p95"), ",.0f"), _fmt_int(standby.get("hits")),
        _fmt_int(standby.get("misses")), MISSING if rate is None else f"{rate:.0%}", _fmt_int(standby.get("refills")),
        _fmt_int(standby.get("stopped_peak")), MISSING if mape is None else f"{mape:.0%}",
        f"{causes.get('start', 0):,} / {causes.get('create', 0):,} / {causes.get('room', 0):,}"
        + (f" (> {slow['threshold_s']:.0f} s)" if slow.get("threshold_s") is not None else ""),
    )


def _completed(m: Mapping[str, Any]) -> str:
    """Completed of all pods run (replacements included): a cheap run that left work undone shows here."""
    done, total = _number(m.get("pods_completed")), _number(m.get("pods"))
    if done is None or total is None:
        return "–"
    return f"{done:,.0f} of {total:,.0f}"


def sections(results: Mapping[str, Any]) -> list[TraceSection]:
    """The traces in the order the benchmark ran them, each with its note, rows and targets."""
    notes = results.get("traces") or {}
    all_targets = results.get("targets") or {}
    frontiers, dominance = results.get("frontier") or {}, results.get("dominance") or {}
    out = []
    replay = results.get("replay") or {}
    for trace in dict.fromkeys([*replay, *frontiers, *dominance]):  # a frontier-only run has no main table
        per_policy = replay.get(trace) or {}
        note = (notes.get(trace) or {}).get("note")
        targets = tuple(
            Target(str(t.get("name", "")), bool(t.get("met")), str(t.get("detail") or ""))
            for t in all_targets.get(trace) or ()
        )
        rows = tuple(policy_row(p, per_policy[p]) for p in ordered_policies(per_policy))
        spot_rows = tuple(spot_row(p, per_policy[p]) for p in ordered_policies(per_policy)
                          if isinstance(per_policy[p], Mapping) and per_policy[p].get("spot"))
        vn_rows = tuple(vn_row(p, per_policy[p]) for p in ordered_policies(per_policy)
                        if isinstance(per_policy[p], Mapping) and per_policy[p].get("virtual_node"))
        standby_rows = tuple(standby_row(p, per_policy[p]) for p in ordered_policies(per_policy)
                             if isinstance(per_policy[p], Mapping) and per_policy[p].get("standby"))
        verdict = None
        if dominance.get(trace):
            met, text = dominance_summary(dominance[trace])
            verdict = Target(text, met, "")
        out.append(TraceSection(str(trace), str(note) if note else None, rows, targets, spot_rows,
                                tuple(frontier_rows(frontiers.get(trace) or {})),
                                tuple(dominance_rows(dominance[trace])) if dominance.get(trace) else (), verdict,
                                vn_rows, standby_rows))
    return out


def _prices_line(results: Mapping[str, Any]) -> str | None:
    prices = results.get("prices")
    if not prices:
        return None
    parts = [f"Prices: {prices.get('currency') or 'USD'}"]
    if prices.get("date"):
        parts.append(f"as of {prices['date']}")
    if prices.get("source"):
        parts.append(f"source: {prices['source']}")
    line = ", ".join(parts) + "."
    spot = prices.get("spot")
    if isinstance(spot, Mapping) and (spot.get("date") or spot.get("source")):
        line += " Spot prices" + (f" as of {spot['date']}" if spot.get("date") else "")
        line += (f", source: {spot['source']}" if spot.get("source") else "") + "."
    return line


# --- markdown ---------------------------------------------------------------------------------

def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(results: Mapping[str, Any]) -> str:
    """One markdown table per trace, the trace's note above it and its targets below; prices at the end."""
    lines: list[str] = []
    for section in sections(results):
        lines += [f"### {section.trace}", ""]
        if section.note:
            lines += [section.note, ""]
        if section.rows:
            lines += _md_rows(HEADERS, section.rows)
        if section.spot_rows:
            lines += ["Spot:", ""]
            lines.append("| " + " | ".join(SPOT_HEADERS) + " |")
            lines.append("|" + "|".join(["---"] + ["---:"] * (len(SPOT_HEADERS) - 1)) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in section.spot_rows]
            lines.append("")
        if section.vn_rows:
            lines += ["Virtual node (ACI):", "", *_md_rows(VN_HEADERS, section.vn_rows)]
        if section.standby_rows:
            lines += ["Warm standby:", "", *_md_rows(STANDBY_HEADERS, section.standby_rows)]
        if section.targets:
            lines.append("Targets:")
            lines += [f"- {'met' if t.met else '**MISSED**'}: {t.name}" + (f" — {t.detail}" if t.detail else "")
                      for t in section.targets]
            lines.append("")
        lines += _md_frontier(section)
    if results.get("gangs"):  # the gang replay (devtools.replay.gangs)
        from devtools.replay.gangs import gang_markdown

        lines += [gang_markdown(results["gangs"]), ""]
    prices = _prices_line(results)
    if prices:
        lines += [prices, ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _md_rows(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|"]
    return lines + ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows] + [""]


def _md_frontier(section: TraceSection) -> list[str]:
    """The frontier's points, then the dominance table and its verdict (MISSED in bold, as the targets)."""
    lines: list[str] = []
    if section.frontier_rows:
        lines += [f"{FRONTIER_TITLE}:", "", *_md_rows(FRONTIER_HEADERS, section.frontier_rows)]
    if section.dominance_rows:
        rows = [(*row[:-1], row[-1] if row[-1] == "met" else f"**{row[-1]}**") for row in section.dominance_rows]
        lines += ["Dominance (for each peer point, the best ours point):", "", *_md_rows(DOMINANCE_HEADERS, rows)]
    if section.dominance is not None:
        lines += [f"- {'met' if section.dominance.met else '**MISSED**'}: {section.dominance.name}", ""]
    return lines


# --- plots ------------------------------------------------------------------------------------

def downsample(t: Sequence[float], y: Sequence[float], max_points: int = MAX_PLOT_POINTS) -> tuple[list[float], list[float]]:
    """At most about max_points points: each bucket keeps its first, min and max points, in time order.

    Keeping the extremes (not every n-th point) is what keeps a short spike of pending pods or a
    brief scale-out on the plot; keeping the first point keeps step shapes starting where they did.
    """
    n = min(len(t), len(y))
    if n <= max_points:
        return list(t[:n]), list(y[:n])
    buckets = max(1, max_points // 3)
    keep: list[int] = []
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        if lo >= hi:
            continue
        window = range(lo, hi)
        keep += sorted({lo, min(window, key=y.__getitem__), max(window, key=y.__getitem__)})
    if keep[-1] != n - 1:
        keep.append(n - 1)
    return [t[i] for i in keep], [y[i] for i in keep]


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "trace"


def _colors(policies: Iterable[str]) -> dict[str, str]:
    """The same colour for a policy in every plot of the report."""
    palette = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple",
               "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray")
    return {p: palette[i % len(palette)] for i, p in enumerate(ordered_policies(policies))}


def _hours_series(data: Mapping[str, Any] | None, key: str) -> tuple[list[float], list[float]] | None:
    if not data or not data.get("t") or not data.get(key):
        return None
    values = [math.nan if v is None else float(v) for v in data[key]]  # a gap in the series, not a crash
    t, y = downsample(data["t"], values)
    return [s / 3600 for s in t], y


def _new_figure() -> Any:
    # A bare Figure renders through the Agg canvas without pyplot: no global backend switch and
    # no figure registry to leak into, so this is safe to call from code that also uses pyplot.
    from matplotlib.figure import Figure

    return Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")


def _legend_outside(ax: Any) -> None:
    # Outside the axes, so it never hides the part of a line someone is looking for
    # (and "best" placement is slow on thousands of points).
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)


def _save(fig: Any, path: Path) -> Path:
    # No "Software" metadata: the PNG bytes (and so report.html) depend only on the data drawn.
    fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
    return path


def _plot_nodes(trace: str, per_policy: Mapping[str, Any], colors: Mapping[str, str], path: Path) -> Path | None:
    demand = _hours_series(per_policy.get(DEMAND_KEY), "nodes")
    lines = [(p, _hours_series(per_policy[p], "nodes")) for p in ordered_policies(per_policy)]
    lines = [(p, s) for p, s in lines if s]
    if not lines and not demand:
        return None
    fig = _new_figure()
    ax = fig.add_subplot()
    for policy, (t, y) in lines:
        ax.step(t, y, where="post", color=colors.get(policy), linewidth=1.2, label=policy)
    if demand:
        ax.plot(*demand, color="black", linestyle="--", linewidth=1.0, drawstyle="steps-post", label="demand")  # a step function
    ax.set(title=f"{trace}: nodes billed", xlabel="time (hours)", ylabel="nodes")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return _save(fig, path)


def _plot_pending(trace: str, per_policy: Mapping[str, Any], colors: Mapping[str, str], path: Path) -> Path | None:
    lines = [(p, _hours_series(per_policy[p], "pending")) for p in ordered_policies(per_policy)]
    lines = [(p, s) for p, s in lines if s]
    if not lines:
        return None
    fig = _new_figure()
    ax = fig.add_subplot()
    for policy, (t, y) in lines:
        ax.step(t, y, where="post", color=colors.get(policy), linewidth=1.2, label=policy)
    ax.set(title=f"{trace}: pending pods", xlabel="time (hours)", ylabel="pending pods")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return _save(fig, path)


def _plot_outcomes(trace: str, per_policy: Mapping[str, Any], colors: Mapping[str, str], path: Path) -> Path | None:
    """Cost, pods killed and work lost side by side: what a policy saves against what it breaks."""
    policies = ordered_policies(per_policy)
    if not policies:
        return None
    panels: tuple[tuple[str, Callable[[Mapping[str, Any]], Any], str], ...] = (
        ("cost ($)", lambda m: m.get("cost"), "{:,.2f}"),
        ("pods killed", lambda m: m.get("pods_killed"), "{:,.0f}"),
        ("work lost (hours)", lambda m: None if _number(m.get("work_lost_s")) is None else m["work_lost_s"] / 3600,
         "{:,.1f}"),
    )
    fig = _new_figure()
    axes = fig.subplots(1, len(panels))
    fig.suptitle(f"{trace}: cost and disruption per policy")
    positions = list(range(len(policies)))
    for ax, (label, metric, fmt) in zip(axes, panels):
        values = [_number(metric(per_policy[p] or {})) for p in policies]
        bars = ax.bar(positions, [v or 0.0 for v in values], color=[colors.get(p) for p in policies])
        ax.bar_label(bars, labels=[MISSING if v is None else fmt.format(v) for v in values], fontsize="x-small")
        ax.set_xticks(positions, policies, rotation=30, ha="right", fontsize="small")
        ax.set_ylabel(label)
        ax.margins(y=0.15)
        ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def pareto(points: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The points no other point beats on both cost and p95 wait (ties kept), by cost: a policy's frontier line."""
    return sorted((p for p in points
                   if not any(q["cost"] <= p["cost"] and q["p95_wait_s"] <= p["p95_wait_s"]
                              and (q["cost"], q["p95_wait_s"]) != (p["cost"], p["p95_wait_s"]) for q in points)),
                  key=lambda p: (p["cost"], p["p95_wait_s"]))


def _frontier_labels(points: Sequence[Mapping[str, Any]], *,
                     every: Sequence[Mapping[str, Any]]) -> list[tuple[tuple[float, float], str]]:
    """One label per spot on the plot: a policy's points that land within a pixel or two of each other (a 200th of
    the axes' spans over `every` point) with the same pods killed and work lost share one, their settings listed."""
    def span(key: str) -> float:
        values = [q[key] for q in every]
        return (max(values) - min(values)) / 200 or 1.0

    x_step, y_step = span("cost"), span("p95_wait_s")
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for p in points:
        key = (round(p["cost"] / x_step), round(p["p95_wait_s"] / y_step), p["pods_killed"],
               _fmt_work_lost(p["work_lost_s"]))
        groups.setdefault(key, []).append(p)
    return [((group[0]["cost"], group[0]["p95_wait_s"]),
             f"{', '.join(p['label'] for p in group)}: {_fmt_int(group[0]['pods_killed'])} killed, "
             f"{_fmt_work_lost(group[0]['work_lost_s'])} lost") for group in groups.values()]


def _plot_frontier(trace: str, frontier: Mapping[str, Any], colors: Mapping[str, str], path: Path) -> Path | None:
    """Cost against p95 wait, every point of every policy's sweep, each labelled with its setting, the pods it killed
    and the work it lost; a line through each policy's undominated points."""
    policies = [p for p in ordered_policies(frontier) if frontier[p]]
    if not policies:
        return None
    fig = _new_figure()
    ax = fig.add_subplot()
    for policy in policies:
        points = frontier[policy]
        ax.scatter([p["cost"] for p in points], [p["p95_wait_s"] for p in points], color=colors.get(policy),
                   s=18, label=policy, zorder=3)
        front = pareto(points)
        ax.plot([p["cost"] for p in front], [p["p95_wait_s"] for p in front], color=colors.get(policy),
                linewidth=1.0, alpha=0.6)
        for (x, y), text in _frontier_labels(points, every=[q for ps in frontier.values() for q in ps]):
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=5.5, color=colors.get(policy))
    ax.set(title=f"{trace}: cost against p95 pending wait, per setting swept", xlabel="cost ($)",
           ylabel="p95 pending wait (s)")
    ax.margins(x=0.15, y=0.1)  # room for the rightmost and topmost points' labels
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return _save(fig, path)


# --- HTML -------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; }
th { background: #f3f3f3; }
td { text-align: right; font-variant-numeric: tabular-nums; }
td:first-child { text-align: left; font-weight: 600; }
.note { color: #444; white-space: pre-wrap; }
.met { color: #1a7f37; } .missed { color: #cf222e; font-weight: 600; }
img { max-width: 100%; display: block; margin: 0.5em 0; }
.meta { color: #666; font-size: 0.9em; }
""".strip()


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _html_table(section: TraceSection) -> list[str]:
    out = _html_rows(HEADERS, section.rows) if section.rows else []
    if section.spot_rows:
        out += ["<p>Spot:</p>", *_html_rows(SPOT_HEADERS, section.spot_rows)]
    if section.vn_rows:
        out += ["<p>Virtual node (ACI):</p>", *_html_rows(VN_HEADERS, section.vn_rows)]
    if section.standby_rows:
        out += ["<p>Warm standby:</p>", *_html_rows(STANDBY_HEADERS, section.standby_rows)]
    return out


def _html_frontier(section: TraceSection) -> list[str]:
    out: list[str] = []
    if section.frontier_rows:
        out += [f"<p>{_e(FRONTIER_TITLE)}:</p>", *_html_rows(FRONTIER_HEADERS, section.frontier_rows)]
    if section.dominance_rows:
        out += ["<p>Dominance (for each peer point, the best ours point):</p>",
                *_html_rows(DOMINANCE_HEADERS, section.dominance_rows)]
    if section.dominance is not None:
        status = '<span class="met">met</span>' if section.dominance.met else '<span class="missed">MISSED</span>'
        out.append(f"<p>{status}: {_e(section.dominance.name)}</p>")
    return out


def _html_rows(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["<table>", "<thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr></thead>", "<tbody>"]
    out += ["<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows]
    out += ["</tbody>", "</table>"]
    return out


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render_html(results: Mapping[str, Any], plots: Mapping[str, Sequence[tuple[str, Path]]]) -> str:
    """The page: per trace its note, table, targets and plots (embedded); prices and `generated` at the end."""
    by_trace = {s.trace: s for s in sections(results)}
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           "<title>Replay benchmark</title>", f"<style>\n{_CSS}\n</style>", "</head>", "<body>",
           "<h1>Replay benchmark</h1>"]
    for trace in dict.fromkeys([*by_trace, *plots]):
        out.append(f"<h2>{_e(trace)}</h2>")
        section = by_trace.get(trace)
        if section:
            if section.note:
                out.append(f'<p class="note">{_e(section.note)}</p>')
            out += _html_table(section)
            if section.targets:
                out.append("<p>Targets:</p>")
                out.append("<ul>")
                for t in section.targets:
                    status = '<span class="met">met</span>' if t.met else '<span class="missed">MISSED</span>'
                    detail = f" — {_e(t.detail)}" if t.detail else ""
                    out.append(f"<li>{status}: {_e(t.name)}{detail}</li>")
                out.append("</ul>")
            out += _html_frontier(section)
        for alt, path in plots.get(trace, ()):
            out.append(f'<img src="{_data_uri(path)}" alt="{_e(alt)}">')
    prices = _prices_line(results)
    if prices:
        out.append(f'<p class="meta">{_e(prices)}</p>')
    if results.get("generated"):
        out.append(f'<p class="meta">Generated {_e(results["generated"])}.</p>')
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"


def write_report(results: Mapping[str, Any], series: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Per trace: nodes over time, pending pods over time, a cost/disruption bar chart and, when the results have a
    frontier, cost against p95 wait per idle-time setting (PNGs), then report.html.

    Returns the paths written, PNGs in trace order then the page. A trace missing from `series`
    gets only its bar chart; a plot with nothing to draw is not written.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    replay = results.get("replay") or {}
    frontiers = results.get("frontier") or {}
    written: list[Path] = []
    plots: dict[str, list[tuple[str, Path]]] = {}
    slugs: set[str] = set()
    for trace in dict.fromkeys([*replay, *series, *frontiers]):
        slug = base = _slug(str(trace))
        suffix = 2
        while slug in slugs:  # two trace names that differ only in punctuation must not overwrite each other
            slug, suffix = f"{base}-{suffix}", suffix + 1
        slugs.add(slug)
        trace_series = series.get(trace) or {}
        trace_results = replay.get(trace) or {}
        trace_frontier = frontiers.get(trace) or {}
        colors = _colors([*trace_results, *trace_series, *trace_frontier])
        for kind, plot, data in (("nodes", _plot_nodes, trace_series),
                                 ("pending", _plot_pending, trace_series),
                                 ("outcomes", _plot_outcomes, trace_results),
                                 ("frontier", _plot_frontier, trace_frontier)):
            path = plot(str(trace), data, colors, out_dir / f"{slug}-{kind}.png")
            if path:
                written.append(path)
                plots.setdefault(str(trace), []).append((f"{trace}: {kind}", path))
    page = out_dir / "report.html"
    page.write_text(render_html(results, plots), encoding="utf-8")
    written.append(page)
    return written


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(prog="python -m devtools.bench_report", description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="?", default=root / "out" / "bench" / "results.json")
    parser.add_argument("--series", type=Path, help="per-policy time series (JSON); without it, only bar charts")
    parser.add_argument("--out", type=Path, default=root / "out" / "bench")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    series = json.loads(args.series.read_text()) if args.series else {}
    print(markdown_table(results), end="")
    for path in write_report(results, series, args.out):
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
