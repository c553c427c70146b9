"""Pending pods keep a node from scale-down only when the scale-up simulation would place them on it.

A loose check (labels, taints, total allocatable) let one pod that can never run anywhere keep
every idle node of the cluster. These cases pin the rule: the nodes kept for pending pods are
exactly the existing nodes the scale-up simulation fills, with every filter and the room the
other pending pods take; a pod that needs a new node, or that no node or group can hold, keeps
none and stays reported as unplaceable with its reason.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.engine import reasons
from shared.engine.scale_down import ScaleDownOptions, plan_scale_down
from shared.engine.scale_up import existing_placements, plan_scale_up, simulate_scale_up
from tests.builders import T0, affinity, daemon_pod, group, node, pod, sel, snapshot, template

OLD = T0 - timedelta(minutes=11)
OPTS = ScaleDownOptions(unneeded_time=timedelta(minutes=10), max_parallelism=10)
ZONE = {"topology.kubernetes.io/zone": "z1"}


def _cluster(pending: list, *, a_pods: list | None = None) -> object:
    """Idle nodes a (labelled tier=x) and b, and c full with a replica of app=solo; one zone; DaemonSet pods everywhere."""
    nodes = [
        node("a", instance=0, labels={**ZONE, "tier": "x"}),
        node("b", instance=1, labels=ZONE),
        node("c", instance=2, labels=ZONE),
    ]
    running = [pod("solo-0", cpu=3.5, node_name="c", labels={"app": "solo"}, owner_name="solo"),
               *(daemon_pod(n.name) for n in nodes), *(a_pods or [])]
    return snapshot(groups=[group(target=3)], nodes=nodes, pods=running + pending,
                    templates={"rg/pool": template(labels=ZONE)})


def _held(snap: object, **kw: object) -> set[str]:
    result = plan_scale_down(snap, unneeded_since={"a": OLD, "b": OLD, "c": OLD}, group_states={}, now=T0,
                             options=OPTS, **kw)  # type: ignore[arg-type]
    return {name for name, why in result.kept.items() if why.code == reasons.PENDING_PODS_COULD_USE}


@pytest.mark.parametrize(
    "case_id,pending,held,unplaceable",
    [
        # Fits a node's allocatable, never its free room once the DaemonSet pods are there.
        ("too large for any node or group", [pod("big", cpu=3.95, pending=True)], set(), {"default/big"}),
        ("anti-affinity with a running replica in the only zone",
         [pod("solo-1", cpu=0.5, pending=True, labels={"app": "solo"}, owner_name="solo",
              anti_affinity=(affinity("topology.kubernetes.io/zone", sel(app="solo")),))],
         set(), {"default/solo-1"}),
        ("a nodeSelector nothing matches", [pod("lost", cpu=0.5, pending=True, selector={"tier": "gone"})],
         set(), {"default/lost"}),
        ("fits a only: holds a, not b", [pod("picky", cpu=1, pending=True, selector={"tier": "x"})], {"a"}, set()),
        ("other pending pods take a's room first: the next one holds b",
         [pod("picky", cpu=3, pending=True, selector={"tier": "x"}), pod("any", cpu=2, pending=True)], {"a", "b"},
         set()),
        ("room left on a after the others: b is not held",
         [pod("picky", cpu=3, pending=True, selector={"tier": "x"}), pod("any", cpu=0.5, pending=True)], {"a"},
         set()),
    ],
)
def test_only_nodes_the_scale_up_simulation_fills_are_held(case_id, pending, held, unplaceable) -> None:  # type: ignore[no-untyped-def]
    snap = _cluster(pending)
    assert _held(snap) == held
    # What holds nothing stays visible: scale-up reports it, with the reason per group.
    reported = plan_scale_up(snap).unplaceable  # type: ignore[arg-type]
    assert set(reported) == unplaceable
    assert all(reported[key].startswith("rg/pool: ") for key in unplaceable), reported


def test_a_pod_that_fits_only_a_new_node_holds_no_existing_node() -> None:
    # a and b are each 40% used: no room for 3 CPUs on either, but a new node takes it.
    half = [pod(f"half-{n}", cpu=1.5, node_name=n) for n in ("a", "b")]
    snap = _cluster([pod("wide", cpu=3, pending=True)], a_pods=half)
    assert _held(snap) == set()
    increase = plan_scale_up(snap).increases  # type: ignore[arg-type]
    assert [(i.group_id, i.pods) for i in increase] == [("rg/pool", ("default/wide",))]


def test_the_callers_simulation_decides() -> None:
    """A caller that ran the scale-up simulation with its own options passes its placements; they are used as given."""
    snap = _cluster([pod("picky", cpu=1, pending=True, selector={"tier": "x"})])
    assert existing_placements(simulate_scale_up(snap)) == {"a": ("default/picky",)}  # type: ignore[arg-type]
    assert _held(snap, pending_placements={"b": ("default/picky",)}) == {"b"}
    assert _held(snap, pending_placements={}) == set()
