"""Voluntary disruptions per simulated day, counted from the world's records for every policy alike.

A disruption is a node the policy removed (or replaced) while it ran workload pods: the world's record of each
running pod evicted or killed names its node, and the policy's own record of its removals (`removed`: node ->
the policy's kind of removal, e.g. ours' `empty`, `drain`, `batch`, `replace`, `drift`; ca's `empty`, `drain`;
nap's `empty`, `delete`, `replace`; vmss-cpu's `scale-in`) says whether that node was one of its removals and
why. Running pods stopped on a node the policy did not remove (a spot VM Azure evicted, pods moved off at its
Preempt notice) are not the policy's voluntary disruptions and are left out. A node removed empty disrupts
nothing and is not counted. Per day means per simulated day of the run (its tail included), so runs of one trace
compare. A policy that keeps no record (`removed` None) has every running pod stopped counted, as `unattributed`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

UNATTRIBUTED = "unattributed"
# What the figures rest on, for results.json.
ASSUMPTIONS: tuple[str, ...] = (
    "disruptions_per_day: nodes a policy removed or replaced while they ran workload pods (a running pod evicted or "
    "killed on a node the policy removed), per simulated day of the run, tail included; a node removed empty is "
    "not counted; running pods stopped on nodes the policy did not remove (spot evictions, pods moved off at a "
    "Preempt notice) are not its voluntary disruptions. By reason: the policy's own kinds of removal (ours' "
    "ScaleDown removal kinds, ca's empty/drain, nap's empty/delete/replace, vmss-cpu's scale-in).",
)
DAY_S = 86_400.0


def disruptions_section(pods: Iterable[Mapping[str, Any]], *, sim_seconds: float,
                        removed: Mapping[str, str] | None) -> dict[str, Any]:
    """The results.json entry's `disruptions`: `nodes` and `pods` disrupted, the same per simulated day, and both
    `by_reason` (the policy's kinds of removal); `days` is the run's length in days.

    `pods` are the world report's pod records (`node`, `killed`, `evicted_while_running`)."""
    if sim_seconds <= 0:
        raise ValueError(f"disruptions per day need a run of some length, got sim_seconds={sim_seconds!r}")
    nodes: dict[str, str] = {}
    pods_by_reason: dict[str, int] = {}
    for pod in pods:
        if not (pod.get("killed") or pod.get("evicted_while_running")) or not pod.get("node"):
            continue
        node = str(pod["node"])
        if removed is None:
            reason = UNATTRIBUTED
        elif node in removed:
            reason = removed[node] or UNATTRIBUTED
        else:
            continue  # not a removal of this policy's: Azure's (spot) or the pods' own doing
        nodes[node] = reason
        pods_by_reason[reason] = pods_by_reason.get(reason, 0) + 1
    days = sim_seconds / DAY_S
    by_reason: dict[str, dict[str, int]] = {}
    for reason in sorted(pods_by_reason):
        by_reason[reason] = {"nodes": sum(1 for r in nodes.values() if r == reason), "pods": pods_by_reason[reason]}
    return {
        "nodes": len(nodes),
        "pods": sum(pods_by_reason.values()),
        "nodes_per_day": round(len(nodes) / days, 2),
        "pods_per_day": round(sum(pods_by_reason.values()) / days, 2),
        "by_reason": by_reason,
        "days": round(days, 4),
    }
