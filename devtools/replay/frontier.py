"""Cost-versus-wait frontiers: each policy's idle-time settings swept, and whether ours' points dominate the peers'.

A single setting per policy answers "which is cheaper at its defaults", which a tuned peer may turn around: CA with
a 1-minute unneeded time is cheaper and slower than at its 10. So each policy runs at several idle times and its
points (cost, p95 pending wait, pods killed, work lost) form its frontier; ours dominates a peer point when some ours
point costs at most `COST_RATIO` times as much, kills no more pods, and waits at most `WAIT_SLACK_S` longer at p95.

Pure: which settings a sweep runs (`sweep_points`), what a run's result contributes to a point (`point_of`), the
dominance table (`dominance`, `dominance_table`). The replays are the caller's (devtools.replay.suite).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

OURS = "ours"
# Ours with warm standby: its points (one per standby size) are ours' too when dominance looks for the best ours point.
OURS_STANDBY = "ours+standby"
# Ours with running headroom: a CapacityBuffer of N nodes' room per CPU pool (ReplayConfig.buffer_nodes), alone and
# with auto standby. Not a policy of its own: its points are ours' (or ours+standby's) runs with a buffer, kept in
# the frontier under this key.
OURS_BUFFER = "ours+buffer"
OURS_FAMILY = (OURS, OURS_STANDBY, OURS_BUFFER)
# The buffer sizes swept, in nodes' room per CPU pool; 0 is ours' (or ours+standby's) default run, reused. The
# traces listed in BUFFER_SIZES_LARGE_ON get the larger sizes too; with standby auto, the sizes in
# BUFFER_WITH_STANDBY only (each point is a whole replay: the sweep's wall time is the bench's).
BUFFER_SIZES = (0, 1, 2, 4, 8)
BUFFER_SIZES_LARGE = (16, 32)
BUFFER_SIZES_LARGE_ON = ("alibaba2018",)
BUFFER_WITH_STANDBY = (0, 2, 8)
PEERS = ("ca", "nap")
IDLE_MINUTES = (1, 2, 5, 10)
COST_RATIO = 1.0  # an ours point may cost at most this many times the peer point's
WAIT_SLACK_S = 5.0  # ... and wait at most this much longer at p95
# ca's sweep is the grid of both flags (unneeded time x delay after add): the two trade cost against wait
# differently (the first ends idle nodes, the second holds scale-down after every scale-up), so a peer tuned well
# may set them apart. CA's defaults (10m, 10m) are one of its points.
CA_GRID = True
NAP_CONSOLIDATE_AFTER = "NAP_CONSOLIDATE_AFTER"

ASSUMPTIONS = (
    "frontier: every point is one replay on the suite's seed; its p95 wait moves by several seconds between seeds, "
    "so a dominance miss by a few seconds is within the noise",
    "frontier: `ours` fixed N min sets SCALE_DOWN_IDLE_MODE=fixed with SCALE_DOWN_UNNEEDED_TIME and "
    "SCALE_DOWN_DELAY_AFTER_ADD both N min; `auto` is ours' default (break-even on CPU groups, fixed 10m on GPU ones)",
    "frontier: `ca` sweeps --scale-down-unneeded-time and --scale-down-delay-after-add, `nap` its consolidateAfter; "
    "every other setting stays at the policy's default",
    "dominance: the best ours point for a peer point is the one with the lowest p95 wait among those at most "
    "COST_RATIO x its cost with no more pods killed (ties: cheaper, then fewer killed); work lost and pods completed "
    "are shown, not judged",
    "frontier: `ours+standby` sweeps STANDBY_INSTANCES (fixed 0, 1, 2, 5, 10, 20 stopped instances per group, and "
    "`auto`, its default) at ours' default idle time; its points count as ours' in the dominance table, labelled "
    "`standby <size>`",
    "frontier: `ours+buffer` is ours (`buffer <n>`) or ours+standby (`standby auto + buffer <n>`) with one "
    "CapacityBuffer per CPU pool from the run's start, `n` chunks each 0.85 of an empty node's room (allocatable "
    "less the daemonset's requests; devtools.replay.harness.CHUNK_SHARE): about n empty nodes kept Ready beyond the "
    "pods' needs; GPU and spot pools get none. "
    "`buffer 0` is the policy's default run; its points count as ours' in the dominance table",
)


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One run of the sweep: a policy at one setting of its idle time."""

    policy: str
    label: str
    # ours: ReplayConfig.settings (app settings); a peer: ReplayConfig.peer_settings (its emulation's overrides).
    settings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # The policy as the suite's main table runs it: the caller may reuse that run instead of replaying it.
    default: bool = False
    # Where the point goes in the frontier (default: `policy`): ours+buffer's points replay ours or ours+standby.
    family: str = ""
    buffer_nodes: int = 0  # ReplayConfig.buffer_nodes: nodes' room kept by a CapacityBuffer per CPU pool

    @property
    def key(self) -> str:
        """The frontier's key for this point's policy line."""
        return self.family or self.policy

    def config_changes(self) -> dict[str, Any]:
        """The ReplayConfig fields this point sets (`dataclasses.replace` keywords)."""
        changes: dict[str, Any] = {"settings" if self.policy in OURS_FAMILY else "peer_settings": dict(self.settings)}
        if self.buffer_nodes:
            changes["buffer_nodes"] = self.buffer_nodes
        return changes


def _idle(minutes: int, after_add: int | None = None) -> dict[str, str]:
    return {"SCALE_DOWN_UNNEEDED_TIME": f"{minutes}m", "SCALE_DOWN_DELAY_AFTER_ADD": f"{after_add or minutes}m"}


def buffer_sizes(trace: str | None) -> tuple[int, ...]:
    """The buffer sizes swept on `trace` (None: the common ones)."""
    return BUFFER_SIZES + (BUFFER_SIZES_LARGE if trace in BUFFER_SIZES_LARGE_ON else ())


def buffer_points(policies: Iterable[str], trace: str | None = None) -> list[SweepPoint]:
    """ours+buffer's runs: ours at each of `buffer_sizes(trace)`, then ours+standby (auto) at BUFFER_WITH_STANDBY;
    a size of 0 is the policy's default run (reused when the caller has it)."""
    available = set(policies)
    points: list[SweepPoint] = []
    if OURS in available:
        points += [SweepPoint(OURS, f"buffer {n}", family=OURS_BUFFER, buffer_nodes=n, default=n == 0)
                   for n in buffer_sizes(trace)]
    if OURS_STANDBY in available:
        from devtools.replay.standby import STANDBY_SETTING

        # The standby size said as `standby auto` says it, so `+ buffer 0` is the same run (replayed once).
        points += [SweepPoint(OURS_STANDBY, f"standby auto + buffer {n}", {STANDBY_SETTING: "auto"},
                              family=OURS_BUFFER, buffer_nodes=n, default=n == 0) for n in BUFFER_WITH_STANDBY]
    return points


def sweep_points(policies: Iterable[str], *, ca_grid: bool = CA_GRID, trace: str | None = None) -> list[SweepPoint]:
    """The sweep's runs for the policies given (those of OURS and PEERS among them), ours first; ours+buffer's sizes
    depend on the `trace` (`buffer_sizes`)."""
    available = set(policies)
    points: list[SweepPoint] = []
    if OURS in available:
        points.append(SweepPoint(OURS, "auto", default=True))
        points += [SweepPoint(OURS, f"fixed {m}m", {"SCALE_DOWN_IDLE_MODE": "fixed", **_idle(m)})
                   for m in IDLE_MINUTES]
    if OURS_STANDBY in available:
        from devtools.replay.standby import FRONTIER_SIZES, STANDBY_SETTING, STANDBY_SETTINGS

        points += [SweepPoint(OURS_STANDBY, f"standby {size}", {STANDBY_SETTING: size},
                              default=STANDBY_SETTINGS.get(STANDBY_SETTING) == size) for size in FRONTIER_SIZES]
    points += buffer_points(available, trace)
    if "ca" in available:
        pairs = [(u, a) for u in IDLE_MINUTES for a in IDLE_MINUTES] if ca_grid else [(m, m) for m in IDLE_MINUTES]
        # CA's defaults are 10m and 10m (its flags' defaults), which the emulation leaves to ours' defaults.
        points += [SweepPoint("ca", f"{u}m/{a}m", _idle(u, a), default=(u, a) == (10, 10)) for u, a in pairs]
    if "nap" in available:
        from devtools.replay.policies.nap import NAP_DEFAULTS  # here: the tables need not import the emulation

        points.append(SweepPoint("nap", f"{NAP_DEFAULTS[NAP_CONSOLIDATE_AFTER]} (default)", default=True))
        points += [SweepPoint("nap", f"{m}m", {NAP_CONSOLIDATE_AFTER: f"{m}m"}) for m in IDLE_MINUTES]
    return points


def missing_peers(policies: Iterable[str]) -> list[str]:
    """The peers the sweep would compare with that this checkout does not have."""
    available = set(policies)
    return [peer for peer in PEERS if peer not in available]


def point_of(sweep: SweepPoint, result: Mapping[str, Any]) -> dict[str, Any]:
    """A frontier point of results.json: the sweep point and the figures of its run's result."""
    return {
        "label": sweep.label,
        "settings": dict(sweep.settings),
        "cost": result["cost"],
        "p95_wait_s": result["pending_wait_s"]["p95"],
        "pods_killed": result["pods_killed"],
        "work_lost_s": result["work_lost_s"],
        "pods_completed": result.get("pods_completed"),
        "pods": result.get("pods"),
        # The run's CPU seconds when the sweep ran it (a default point reused from the main table has none).
        **({"cpu_s": result["cpu_s"]} if "cpu_s" in result else {}),
    }


def best_ours(ours: Sequence[Mapping[str, Any]], peer: Mapping[str, Any], *,
              cost_ratio: float = COST_RATIO) -> Mapping[str, Any] | None:
    """The ours point with the lowest p95 wait among those at most `cost_ratio` x the peer's cost that kill no more
    pods (ties: the cheaper, then fewer killed); None when no ours point is that cheap and that gentle."""
    eligible = [p for p in ours
                if p["cost"] <= peer["cost"] * cost_ratio + 1e-9 and p["pods_killed"] <= peer["pods_killed"]]
    return min(eligible, key=lambda p: (p["p95_wait_s"], p["cost"], p["pods_killed"]), default=None)


def dominance(frontier: Mapping[str, Sequence[Mapping[str, Any]]], *, cost_ratio: float = COST_RATIO,
              wait_slack_s: float = WAIT_SLACK_S) -> dict[str, Any]:
    """For each peer point (every policy but OURS_FAMILY's), the best ours point (`best_ours`, among ours' and
    ours+standby's points) and whether it is within `wait_slack_s` of the peer's p95; a summary says whether every
    peer point is dominated.

    A peer point no ours point matches on cost and kills is missed; its row names ours' cheapest point and what
    that costs against the peer's, so the miss comes with its figures."""
    ours = ours_points(frontier)
    rows: list[dict[str, Any]] = []
    for policy, points in frontier.items():
        if policy in OURS_FAMILY:
            continue
        for peer in points:
            best = best_ours(ours, peer, cost_ratio=cost_ratio)
            row: dict[str, Any] = {
                "policy": policy, "label": peer["label"], "cost": peer["cost"], "p95_wait_s": peer["p95_wait_s"],
                "pods_killed": peer["pods_killed"], "work_lost_s": peer["work_lost_s"], "ours": None, "met": False,
            }
            if best is not None:
                difference = round(best["p95_wait_s"] - peer["p95_wait_s"], 1)
                row |= {"ours": best["label"], "ours_cost": best["cost"], "ours_p95_wait_s": best["p95_wait_s"],
                        "ours_pods_killed": best["pods_killed"], "ours_work_lost_s": best["work_lost_s"],
                        "cost_ratio": _ratio(best["cost"], peer["cost"]), "p95_difference_s": difference,
                        "met": difference <= wait_slack_s}
            elif ours:
                cheapest = min(ours, key=lambda p: (p["cost"], p["pods_killed"], p["p95_wait_s"]))
                row["cheapest_ours"] = {"label": cheapest["label"], "cost": cheapest["cost"],
                                        "cost_ratio": _ratio(cheapest["cost"], peer["cost"]),
                                        "pods_killed": cheapest["pods_killed"], "p95_wait_s": cheapest["p95_wait_s"]}
            rows.append(row)
    missed = [f"{r['policy']} {r['label']}" for r in rows if not r["met"]]
    return {
        "criteria": {"cost_ratio": cost_ratio, "wait_slack_s": wait_slack_s, "pods_killed": "at most the peer's"},
        "rows": rows,
        "summary": {"met": bool(rows) and not missed, "peer_points": len(rows), "dominated": len(rows) - len(missed),
                    "missed": missed,
                    "peers": sorted({r["policy"] for r in rows})},
    }


def ours_points(frontier: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Mapping[str, Any]]:
    """Ours' points, ours+standby's and ours+buffer's (labelled `standby <size>`, `buffer <n>`, so a dominance row
    names which)."""
    return [p for family in OURS_FAMILY for p in (frontier.get(family) or ())]


def cheapest_within(frontier: Mapping[str, Sequence[Mapping[str, Any]]], *, p95_s: float
                    ) -> tuple[str, Mapping[str, Any]] | None:
    """The cheapest ours-family point (its family and the point) whose p95 wait is at most `p95_s` and that kills no
    pod (ties: the shorter wait); None when no such point was swept."""
    eligible = [(family, p) for family in OURS_FAMILY for p in (frontier.get(family) or ())
                if p["p95_wait_s"] <= p95_s and not p["pods_killed"]]
    return min(eligible, key=lambda fp: (fp[1]["cost"], fp[1]["p95_wait_s"]), default=None)


def _ratio(cost: float, peer_cost: float) -> float | None:
    return round(cost / peer_cost, 4) if peer_cost else None


# --- tables ------------------------------------------------------------------------------------

FRONTIER_HEADERS = ("policy", "setting", "cost ($)", "p95 wait (s)", "pods killed", "work lost (s)", "pods completed")
DOMINANCE_HEADERS = ("peer point", "cost ($)", "p95 wait (s)", "killed", "best ours (no dearer, no more killed)",
                     "ours cost ($)", "ours p95 wait (s)", "ours killed", "p95 difference (s)", "verdict")
MISSING = "–"


def frontier_rows(frontier: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[tuple[str, ...]]:
    """Every point of every policy in sweep order, as FRONTIER_HEADERS' cells."""
    return [(policy, p["label"], f"{p['cost']:,.2f}", f"{p['p95_wait_s']:.0f}", f"{p['pods_killed']:,}",
             f"{p['work_lost_s']:,.0f}", MISSING if p.get("pods_completed") is None else f"{p['pods_completed']:,}")
            for policy, points in frontier.items() for p in points]


def dominance_rows(result: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """`dominance`'s rows as DOMINANCE_HEADERS' cells; a miss without an eligible ours point names ours' cheapest."""
    rows = []
    for r in result["rows"]:
        peer = (f"{r['policy']} {r['label']}", f"{r['cost']:,.2f}", f"{r['p95_wait_s']:.0f}", f"{r['pods_killed']:,}")
        if r["ours"] is None:
            cheapest = r.get("cheapest_ours")
            why = (f"none (cheapest ours, {cheapest['label']}: {cheapest['cost_ratio']:.2f}x the cost, "
                   f"{cheapest['pods_killed']:,} killed)" if cheapest else "none (no ours point)")
            rows.append((*peer, why, MISSING, MISSING, MISSING, MISSING, "MISSED"))
            continue
        rows.append((*peer, r["ours"], f"{r['ours_cost']:,.2f}", f"{r['ours_p95_wait_s']:.0f}",
                     f"{r['ours_pods_killed']:,}", _signed(r["p95_difference_s"]), "met" if r["met"] else "MISSED"))
    return rows


def _signed(seconds: float) -> str:
    """Whole seconds with their sign; a difference that rounds to none is 0, not -0."""
    whole = round(seconds)
    return f"{whole:+d}" if whole else "0"


def dominance_summary(result: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether ours dominates every peer point, and the sentence that says so with its count and misses."""
    criteria, summary = result["criteria"], result["summary"]
    text = (f"ours dominates every peer point (cost at most {criteria['cost_ratio']:.1f}x, p95 wait at most "
            f"{criteria['wait_slack_s']:.0f} s longer, no more pods killed): {summary['dominated']} of "
            f"{summary['peer_points']}" + (f"; missed: {', '.join(summary['missed'])}" if summary["missed"] else ""))
    return bool(summary["met"]), text


def markdown(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table, the first column left-aligned and the others right."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|"]
    return lines + ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]


def dominance_table(result: Mapping[str, Any]) -> list[str]:
    """`dominance`'s rows as markdown, then its summary line."""
    met, text = dominance_summary(result)
    rows = [(*row[:-1], row[-1] if row[-1] == "met" else f"**{row[-1]}**") for row in dominance_rows(result)]
    return [*markdown(DOMINANCE_HEADERS, rows), "", f"- {'met' if met else '**MISSED**'}: {text}"]
