"""The utilisation poll keeps a node for pending pods only where the pending poll's simulation would put them."""

from __future__ import annotations

from shared.engine import reasons
from shared.engine.placement import PlacementState
from shared.engine.scale_up import initial_state, pending_pods
from shared.services.observe import observe
from shared.services.pending import pending_placements, run_pending_poll
from shared.services.utilization import run_utilization_poll
from tests.shared.services.test_executor import MakeApp, make  # noqa: F401 (make: fixture; on both apps)

# Fits a node's allocatable (3860m), never its free room once kube-proxy (100m) runs there, nor a new node's.
TOO_BIG = {"name": "big", "kind": "ReplicaSet", "count": 1, "requests": {"cpu": "3800m", "memory": "1Gi"}}


def test_a_pod_no_node_or_group_can_hold_keeps_no_idle_node(make: MakeApp) -> None:
    app = make(workloads=(TOO_BIG,), settings={"SCALE_DOWN_UNNEEDED_TIME": "10m"})
    ports, settings = app.context.ports, app.context.settings
    _, idle = app.busy_and_idle()
    pending = run_pending_poll(ports, settings, now=app.clock.now())
    assert pending.pending == 1 and not pending.plan.increases
    (why,) = pending.plan.unplaceable.values()  # reported, with the reason per group
    assert why.startswith("rg-exec/pool: ") and "Insufficient cpu" in why, why

    result = run_utilization_poll(ports, settings, now=app.clock.now())
    assert set(idle) <= set(result.plan.unneeded)
    assert not [n for n, r in result.plan.kept.items() if r.code == reasons.PENDING_PODS_COULD_USE], result.plan.kept


def test_the_poll_builds_one_placement_state_for_the_simulation_and_the_plan(make: MakeApp, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    app = make(workloads=(TOO_BIG,), settings={"SCALE_DOWN_UNNEEDED_TIME": "10m"})
    ports, settings = app.context.ports, app.context.settings
    snap = observe(ports, now=app.clock.now(), with_budgets=True)
    assert pending_pods(snap)  # so the poll runs the scale-up simulation
    states = {g.id: ports.state.get_group(g.id) for g in snap.groups}
    own = pending_placements(snap, states, settings, now=app.clock.now())
    state = initial_state(snap)
    shared = pending_placements(snap, states, settings, now=app.clock.now(), state=state)
    assert shared == own
    fresh = initial_state(snap)  # the simulation left the shared state as found
    assert state.checkpoint() == 0 and set(state.nodes) == set(fresh.nodes)
    assert all(list(state.pods_on(n)) == list(fresh.pods_on(n)) for n in fresh.nodes)

    built = []
    from_cluster = PlacementState.from_cluster.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(PlacementState, "from_cluster",
                        classmethod(lambda cls, *a, **k: built.append(1) or from_cluster(cls, *a, **k)))
    run_utilization_poll(ports, settings, now=app.clock.now())
    assert len(built) == 1
