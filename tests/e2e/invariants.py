"""Invariants of a whole scenario run, checked on its summary.json data rather than exact figures or log text.

A run (`run_scenario`) is the summary `make demo` writes (devtools/demo.py `build_summary`), the sandbox's final
report it was built from (per-pod facts the summary leaves out: requests, node, group), and the parsed scenario.
What a scenario promises (docs/scenarios.md) is a `Promises`; `INVARIANTS` are the checks every e2e test file runs
on its runs, table-driven:

    @pytest.mark.parametrize("invariant", INVARIANTS, ids=invariant_id)
    def test_invariants(burst: Run, invariant: Invariant) -> None:
        invariant(burst)

Bounds come from the scenario's own definition (group sizes, boot delays, the pods' requests) plus a stated
slack, so they survive harmless timing changes and still fail for a real regression.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devtools import demo
from sandbox.model.scenario import DaemonSetSpec, Dist, NodeGroupSpec, Scenario, load_scenario
from sandbox.world.compute import computer_name

POLL_PENDING_S = 30.0  # a bound on the wait for a pending poll: the schedule is every 10 s, 30 s leaves slack
POLL_UTILIZATION_S = 60.0  # poll_utilization's schedule (every 60 s)
# What a pod may wait beyond one pending poll and its node's boot: the scale-up action's queue hops and the
# runner's wall-time jitter (one wall second is 30-90 sandbox seconds in these runs) take up to two more polls.
SCALE_UP_JITTER_S = 2 * POLL_PENDING_S

_EMPTY: Mapping[str, Any] = {}


@dataclass(frozen=True)
class Promises:
    """What a scenario promises about its run (its description in docs/scenarios.md)."""

    # Workloads that need new nodes: each must get TriggeredScaleUp. Empty: the scenario needs no scale-up at
    # all, so no instance may be created and no pod may wait for a node.
    scale_up_for: tuple[str, ...] = ()
    # Workload -> pods of it meant to stay Pending for good (no group can hold them): never run, never
    # trigger a scale-up, get NotTriggerScaleUp, and do not hold up convergence.
    never_run: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    # Workloads whose running pods a drain may evict (replicated services); every other running pod is safe.
    may_evict: frozenset[str] = frozenset()
    # Group -> ready nodes at the end where that is not its minimum (an int), or None where the count depends
    # on where long-running pods landed; either way no group may end with an unprotected idle node above min.
    ends_at: Mapping[str, int | None] = field(default_factory=lambda: _EMPTY)
    # Nodes allowed above a first-fit-decreasing packing of every pod that ran (see `nodes_needed`); the reason
    # for each scenario's slack is stated where its Promises are.
    node_slack: int = 0


@dataclass(frozen=True)
class Run:
    summary: dict[str, Any]
    report: dict[str, Any]
    scenario: Scenario
    promises: Promises

    def __repr__(self) -> str:  # pytest prints fixtures' reprs in failures: keep that short
        return f"Run({self.scenario.name}: {digest(self.summary)})"


Invariant = Callable[[Run], None]


def run_scenario(scenario: str, out: Path, promises: Promises, **kwargs: Any) -> Run:
    """Run a scenario through devtools.demo.run_scenario (live view off); keep the sandbox report its summary
    was built from. `kwargs` go to run_scenario (speed, wall_timeout, duplicate_delivery, ...)."""
    reports: list[dict[str, Any]] = []
    build_summary = demo.build_summary

    def capture(name: str, report: dict[str, Any], *args: Any, **kw: Any) -> dict[str, Any]:
        reports.append(report)
        return build_summary(name, report, *args, **kw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(demo, "build_summary", capture)
        summary = demo.run_scenario(scenario, out_dir=out, live=False, **kwargs)
    return Run(summary, reports[-1], load_scenario(scenario), promises)


def digest(summary: dict[str, Any]) -> dict[str, Any]:
    """The figures worth reading when an invariant fails (the whole summary is hundreds of lines)."""
    keys = ("converged", "sim_seconds", "pods_total", "pods_completed", "pods_unschedulable_at_end",
            "expected_unschedulable", "pending_wait_s", "running_pods_evicted_by_workload", "pods_killed", "nodes_max",
            "groups_at_end", "instances_created_by_group", "events", "actions", "kept_nodes", "expectations")
    return {k: summary.get(k) for k in keys}


# -- the scenario's definition ----------------------------------------------------------------------------


def group_id(group: NodeGroupSpec) -> str:
    return f"{group.resource_group}/{group.name}"


def groups(run: Run) -> dict[str, NodeGroupSpec]:
    return {group_id(g): g for g in run.scenario.node_groups}


def initial_nodes(group: NodeGroupSpec) -> list[str]:
    return [computer_name(group.computer_name_prefix, i) for i in range(group.initial)]


def group_of_node(run: Run, node: str) -> str | None:
    """The group whose computer-name prefix the node's name carries (the longest such prefix)."""
    matches = [g for g in run.scenario.node_groups if node.startswith(g.computer_name_prefix)]
    return group_id(max(matches, key=lambda g: len(g.computer_name_prefix))) if matches else None


def boot_quantile(dist: Dist, *, worst: bool) -> float:
    """A boot delay's p95 (worst=False) or its largest value (worst=True), from the scenario's distribution."""
    if dist.kind == "fixed":
        return dist.values[0]
    if dist.kind == "choice":
        return max(dist.values)
    if dist.kind == "uniform" or worst:
        return dist.high
    return min(dist.p95, dist.high)


def _daemonset_on(ds: DaemonSetSpec, group: NodeGroupSpec) -> bool:
    """Whether the DaemonSet runs a pod on the group's nodes: its nodeSelector, and the `In` terms of its required
    node affinity, against the group's labels. Taints are ignored: counting a DaemonSet that would not run
    there makes a node look smaller, so the bound below only gets looser."""
    labels = group.labels
    if any(labels.get(k) != v for k, v in ds.node_selector.items()):
        return False
    terms = (((ds.affinity or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
             or {}).get("nodeSelectorTerms")
    if not terms:
        return True
    return any(all(e.get("operator") != "In" or labels.get(e["key"]) in e.get("values", ())
                   for e in term.get("matchExpressions", ())) for term in terms)


def node_room(run: Run, group: NodeGroupSpec) -> dict[str, int]:
    """What one of the group's nodes holds for workload pods: allocatable less its DaemonSets' requests."""
    room = {"cpu": group.allocatable.cpu_milli, "memory": group.allocatable.memory_bytes,
            **dict(group.allocatable.scalars)}
    for ds in run.scenario.daemonsets:
        if _daemonset_on(ds, group):
            room["cpu"] -= ds.requests.cpu_milli
            room["memory"] -= ds.requests.memory_bytes
    return room


def nodes_needed(run: Run) -> int:
    """Nodes a first-fit-decreasing packing needs for every workload pod that ran, each group's pods on that
    group's node shape, plus the unmanaged groups' nodes (an upper estimate of the peak: it packs as if every
    pod ran at once). A pod bigger than the estimated room gets a node of its own."""
    total = sum(g.initial for g in run.scenario.node_groups if not g.autoscaled)
    by_group: dict[str, list[dict[str, int]]] = {}
    for pod in run.report["pods"]:
        if pod.get("group") and pod.get("bound") is not None:
            by_group.setdefault(pod["group"], []).append(
                {"cpu": pod["cpu_milli"], "memory": pod["memory_bytes"], **pod.get("extended", {})})
    for gid, group in groups(run).items():
        if not group.autoscaled:
            continue
        pods = by_group.get(gid, [])
        room = node_room(run, group)
        bins: list[dict[str, int]] = []
        for pod in sorted(pods, key=lambda p: (p["cpu"], p["memory"]), reverse=True):
            for free in bins:
                if all(free.get(k, 0) >= v for k, v in pod.items()):
                    for k, v in pod.items():
                        free[k] -= v
                    break
            else:
                fresh = dict(room)
                if all(fresh.get(k, 0) >= v for k, v in pod.items()):
                    for k, v in pod.items():
                        fresh[k] -= v
                else:
                    fresh = {}  # does not fit the estimate: a node of its own, which nothing else shares
                bins.append(fresh)
        total += max(len(bins), group.initial)
    return total


def finite_pods(run: Run) -> int:
    """Pods meant to run to completion: every pod of the workloads with a duration, less those never to run."""
    never = run.promises.never_run
    return sum(w.count * w.repeat_times - never.get(f"{w.namespace}/{w.name}", 0)
               for w in run.scenario.workloads if w.duration is not None)


# -- the invariants ---------------------------------------------------------------------------------------


def converged(run: Run) -> None:
    """The scenario reached its done state and the autoscaler settled (no message poisoned); the scenario's
    `expect_at_most` and `expect_at_least` bounds hold; exactly the pods meant to stay Pending do, each reported
    with a reason."""
    s = run.summary
    assert s["converged"] is True, digest(s)
    assert s["runner"]["poisoned"] == 0, s["runner"]  # no action given up on after its retries
    assert [row for row in s["expectations"] if not row["met"]] == [], s["expectations"]
    assert len(s["expectations"]) == len(run.scenario.expect_at_most) + len(run.scenario.expect_at_least)
    assert s["pods_unschedulable_at_end"] == sum(run.promises.never_run.values()), digest(s)
    for listed in s["expected_unschedulable"]:
        assert listed["workload"] in run.promises.never_run and listed["reason"], listed


def workloads_complete(run: Run) -> None:
    """Every pod of every workload ran (those meant never to run excepted) and every finite one completed."""
    s, never = run.summary, run.promises.never_run
    assert s["pods_completed"] == finite_pods(run), digest(s)
    for w in run.scenario.workloads:
        key = f"{w.namespace}/{w.name}"
        wait = s["pod_wait_s_by_workload"].get(key)
        if key in never:
            assert wait is None, (key, wait)  # None: one of its pods never ran
        else:
            assert wait is not None, (key, s["pod_wait_s_by_workload"])


def idle_nodes_removed(run: Run) -> None:
    """Every group settled; no autoscaled group ends holding an idle node above its minimum unless a protection
    keeps it; each ends at its minimum unless the scenario says otherwise; unmanaged groups are untouched."""
    s = run.summary
    protected_by_group: dict[str | None, int] = {}
    for node, why in s["kept_nodes"].items():
        if why.split(":", 1)[0] in demo.PROTECTION_CODES:
            key = group_of_node(run, node)
            protected_by_group[key] = protected_by_group.get(key, 0) + 1
    at_end = s["groups_at_end"]
    assert set(at_end) == set(groups(run)), at_end
    for gid, spec in groups(run).items():
        g = at_end[gid]
        assert g["booting"] == g["deleting"] == 0 and g["ready"] + g["deallocated"] == g["target"], (gid, g)
        assert spec.min_size <= g["ready"] <= max(spec.max_size, spec.initial), (gid, g)
        if not spec.autoscaled:
            assert g["ready"] == spec.initial, (gid, g)
            continue
        idle_above_min = min(g["idle"], g["ready"] - spec.min_size)
        assert idle_above_min <= protected_by_group.get(gid, 0), (gid, g, s["kept_nodes"])
        expected = run.promises.ends_at.get(gid, spec.min_size)
        if expected is not None:
            assert g["ready"] == expected, (gid, g)


def nothing_killed(run: Run) -> None:
    """No pod killed; no running pod evicted but those of the workloads a drain may move."""
    s = run.summary
    assert s["pods_killed"] == 0, digest(s)
    assert set(s["running_pods_evicted_by_workload"]) <= run.promises.may_evict, s["running_pods_evicted_by_workload"]
    if not run.promises.may_evict:
        assert s["running_pods_evicted"] == 0, digest(s)


def node_count_bounds(run: Run) -> None:
    """Never more nodes than the groups' maximums allow, nor more than the pods' requests need plus the stated
    slack; with no scale-up promised, no instance created at all."""
    s = run.summary
    spec = groups(run)
    ceiling = sum(g.max_size if g.autoscaled else g.initial for g in spec.values())
    assert s["nodes_max"] <= ceiling, (s["nodes_max"], ceiling)
    for gid, created in s["instances_created_by_group"].items():
        assert created == 0 or spec[gid].autoscaled, (gid, created)
    if not run.promises.scale_up_for:
        assert set(s["instances_created_by_group"].values()) <= {0}, s["instances_created_by_group"]
        assert s["nodes_max"] == sum(g.initial for g in spec.values()), s["nodes_max"]
        return
    needed = nodes_needed(run)
    assert s["nodes_max"] <= needed + run.promises.node_slack, (s["nodes_max"], needed, run.promises.node_slack)


def wait_bound_s(run: Run, *, worst: bool) -> float:
    """The longest a pod should wait for a node: one pending poll, the boot of the slowest group that grew (its
    p95, or its largest when `worst`), and SCALE_UP_JITTER_S. Without a scale-up, less than one poll: a pod
    lands on capacity that is already there, so it waits for no node."""
    if not run.promises.scale_up_for:
        return POLL_PENDING_S
    grew = [g for gid, g in groups(run).items() if run.summary["instances_created_by_group"].get(gid)]
    assert grew, ("a scale-up was promised, yet no group grew", run.summary["instances_created_by_group"])
    boot = max(boot_quantile(g.boot_delay or run.scenario.boot_delay, worst=worst) for g in grew)
    return POLL_PENDING_S + boot + SCALE_UP_JITTER_S


def wait_bounds(run: Run) -> None:
    """Pods' waits from creation to binding (p95 and max) within `wait_bound_s`."""
    waits = run.summary["pending_wait_s"]
    assert waits["p95"] <= wait_bound_s(run, worst=False), (waits, wait_bound_s(run, worst=False))
    assert waits["max"] <= wait_bound_s(run, worst=True), (waits, wait_bound_s(run, worst=True))


def instances_deleted_once(run: Run) -> None:
    """Each removal deleted its instance exactly once, no delete was refused, and the books balance per group:
    instances at the start plus those created, less those deleted, are the nodes at the end."""
    s = run.summary
    deletes = s["deletes_by_instance"]
    assert set(deletes.values()) <= {1}, deletes
    assert s["api_breakdown"]["arm"].get("instance_deletes_refused", {}) == {}, s["api_breakdown"]["arm"]
    for entry in s["scale_down_order"]:
        if entry.get("delete_started_at") is not None:
            key = f"{groups(run)[entry['group']].name}/{entry['instance_id']}"
            assert deletes.get(key) == 1, (entry, deletes)
    for gid, spec in groups(run).items():
        deleted = sum(1 for key in deletes if key.split("/")[0] == spec.name)
        created = s["instances_created_by_group"].get(gid, 0)
        assert spec.initial + created - deleted == s["groups_at_end"][gid]["ready"], (gid, created, deleted)


def scale_up_events(run: Run) -> None:
    """Events by reason: TriggeredScaleUp on each workload that needed new nodes; on a pod meant never to run,
    NotTriggerScaleUp and never TriggeredScaleUp; without a promised scale-up, no TriggeredScaleUp at all."""
    by_workload = run.summary["events_by_workload"]
    for workload in run.promises.scale_up_for:
        assert "TriggeredScaleUp" in by_workload.get(workload, {}), (workload, by_workload.get(workload))
    for workload in run.promises.never_run:
        events = by_workload.get(workload, {})
        assert "NotTriggerScaleUp" in events and "TriggeredScaleUp" not in events, (workload, events)
    if not run.promises.scale_up_for:
        assert "TriggeredScaleUp" not in run.summary["events"], run.summary["events"]


def scale_down_events(run: Run) -> None:
    """Events by reason: ScaleDown on every node removed (and on every pod a drain evicted); ScaleDownEmpty on
    the status ConfigMap when a node went while empty."""
    s = run.summary
    by_object = s["events_by_workload"]
    for entry in s["scale_down_order"]:
        assert "ScaleDown" in by_object.get(f"default/{entry['node']}", {}), (entry, sorted(by_object))
    if any(entry["pods"] == 0 for entry in s["scale_down_order"]):
        assert "ScaleDownEmpty" in s["events"], s["events"]
    for workload in s["running_pods_evicted_by_workload"]:
        assert "ScaleDown" in by_object.get(workload, {}), (workload, by_object.get(workload))


INVARIANTS: tuple[Invariant, ...] = (
    converged, workloads_complete, idle_nodes_removed, nothing_killed, node_count_bounds, wait_bounds,
    instances_deleted_once, scale_up_events, scale_down_events,
)


def invariant_id(invariant: Invariant) -> str:
    return invariant.__name__
