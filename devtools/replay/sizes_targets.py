"""The targets of `ours+sizes` (ours on multi-size groups, consolidation and drift at their defaults), judged on one
trace's results and its `ca` frontier, each met or missed with the figures behind it, printed either way.

- Cheaper than `ca`: at least SAVING_VS_CA below the best `ca` point of the frontier at no worse p95 wait. The best
  point is the cheapest of the `ca` points whose p95 wait is at least ours+sizes' (the points ours+sizes waits no
  longer than); with no such point the target is missed. Without a frontier, `ca`'s default run is the one point.
- No dearer than `nap`, killing fewer running pods (nap chooses among the same sizes and consolidates by eviction).
- No batch pod killed: every trace pod is a Job pod, so `pods_killed` is 0 for ours and ours+sizes.
- Disruptions per day reported for ours, ca and nap (and ours+sizes): met when each run carries the figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

POLICY = "ours+sizes"
TRACE = "alibaba2023"  # where the targets apply
SAVING_VS_CA = 0.10
REPORTED = ("ours", POLICY, "ca", "nap")  # whose disruptions per day are reported


def evaluate_sizes_targets(per_policy: Mapping[str, Mapping[str, Any]],
                           ca_points: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """The targets (see the module) for this trace's runs `per_policy`; `ca_points`: the `ca` frontier's points
    (`label`, `cost`, `p95_wait_s`, `pods_killed`); none: `ca`'s default run. [] when ours+sizes did not run."""
    mine = per_policy.get(POLICY)
    if mine is None:
        return []
    cost, p95, killed = mine["cost"], mine["pending_wait_s"]["p95"], mine["pods_killed"]
    targets = [_versus_ca(cost, p95, _ca_points(per_policy, ca_points))]
    nap = per_policy.get("nap")
    if nap is not None:
        met = cost <= nap["cost"] and killed < nap["pods_killed"]
        targets.append({"name": f"{POLICY}: cost at most nap's with fewer pods killed", "met": met,
                        "detail": f"${cost:,.2f} vs ${nap['cost']:,.2f}, {killed} vs {nap['pods_killed']} pods killed "
                                  f"(p95 {p95:.0f} s vs {nap['pending_wait_s']['p95']:.0f} s)"})
    for policy in ("ours", POLICY):
        if policy in per_policy:
            count = per_policy[policy]["pods_killed"]
            targets.append({"name": f"{policy}: no batch pod killed", "met": count == 0,
                            "detail": f"{count} Job pods killed"})
    shown = [policy for policy in REPORTED if policy in per_policy]
    targets.append({
        "name": "disruptions per day reported for " + ", ".join(shown),
        "met": all(per_policy.get(policy, {}).get("disruptions_per_day") is not None for policy in ("ours", "ca", "nap")),
        "detail": ", ".join(f"{policy} {_per_day(per_policy[policy])}" for policy in shown),
    })
    return targets


def _ca_points(per_policy: Mapping[str, Mapping[str, Any]],
               ca_points: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    if ca_points:
        return list(ca_points)
    ca = per_policy.get("ca")
    if ca is None:
        return []
    return [{"label": "default", "cost": ca["cost"], "p95_wait_s": ca["pending_wait_s"]["p95"],
             "pods_killed": ca["pods_killed"]}]


def _versus_ca(cost: float, p95: float, points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    name = f"{POLICY}: at least {SAVING_VS_CA:.0%} cheaper than the best ca point at no worse p95 wait"
    if not points:
        return {"name": name, "met": False, "detail": "no ca run to compare with"}
    slower = [p for p in points if p["p95_wait_s"] >= p95]
    cheapest = min(points, key=lambda p: p["cost"])
    if not slower:
        return {"name": name, "met": False,
                "detail": f"every ca point waits less than ours+sizes' p95 {p95:.0f} s (cheapest: "
                          f"{cheapest['label']} ${cheapest['cost']:,.2f} at {cheapest['p95_wait_s']:.0f} s); "
                          f"ours+sizes ${cost:,.2f}"}
    best = min(slower, key=lambda p: p["cost"])
    saving = 1.0 - cost / best["cost"] if best["cost"] else 0.0
    return {"name": name, "met": saving >= SAVING_VS_CA,
            "detail": f"${cost:,.2f} at p95 {p95:.0f} s vs ca {best['label']} ${best['cost']:,.2f} at "
                      f"{best['p95_wait_s']:.0f} s: {_relative(saving)} (cheapest ca point: {cheapest['label']} "
                      f"${cheapest['cost']:,.2f} at {cheapest['p95_wait_s']:.0f} s)"}


def _relative(saving: float) -> str:
    """`12.3% cheaper` or `8.7% dearer`: a negative saving read as the excess it is."""
    return f"{saving:.1%} cheaper" if saving >= 0 else f"{-saving:.1%} dearer"


def _per_day(result: Mapping[str, Any]) -> str:
    value = result.get("disruptions_per_day")
    if value is None:
        return "not measured"
    pods = (result.get("disruptions") or {}).get("pods_per_day")
    return f"{value:g} nodes/day" + (f" ({pods:g} pods/day)" if pods is not None else "")
