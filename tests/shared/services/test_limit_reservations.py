"""Cluster-wide limits under concurrency: two executors at once never take the same room, on both apps (`real`:
Azurite and the sandbox server; `memory`: the in-memory store, whose compare-and-swap is atomic under threads).

Written as the attack: two scale-ups that each fit alone and together break MAX_NODES_TOTAL, delivered at once to
two threads that both observe the cluster before either writes."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from shared.actions import encode_action, new_scale_up
from shared.context import AppContext
from shared.domain import LimitReservation, LimitReservations
from shared.services.executor import ExecutionResult
from tests.memory_app import memory_app
from tests.shared.services.test_executor import BASE_SETTINGS, MEMORY, REAL, SCENARIO, App, real_app_of

POOL, SPARE = "rg-exec/pool", "rg-exec/spare"
LIMIT = 4
TWO_GROUPS: dict[str, Any] = {
    **SCENARIO,
    "node_groups": [
        {**SCENARIO["node_groups"][0], "min": 1, "max": 5, "initial": 1},
        {**SCENARIO["node_groups"][0], "name": "spare", "min": 0, "max": 5, "initial": 0},
    ],
    "workloads": [w for w in SCENARIO["workloads"] if w["name"] == "web"],
}
SETTINGS = {**BASE_SETTINGS, "MAX_NODES_TOTAL": str(LIMIT)}


@pytest.fixture(params=[REAL, MEMORY])
def app(request: pytest.FixtureRequest) -> App:
    return two_group_app(request, request.param)


def two_group_app(request: pytest.FixtureRequest, kind: str, *, workloads: tuple[dict[str, Any], ...] = ()) -> App:
    """The app of this `kind` on the two groups (the pool with the web node, an empty spare) and the limit."""
    scenario = {**TWO_GROUPS, "workloads": [*TWO_GROUPS["workloads"], *workloads]}
    if kind == MEMORY:
        built = memory_app(scenario, settings=SETTINGS)
        built.clock.advance(5)
        return App(MEMORY, AppContext(built.settings, built.ports), built.clock, built.world, built)
    storage = (request.getfixturevalue(name) for name in ("sandbox_factory", "azurite", "table_name", "queue_name"))
    return real_app_of(*storage, scenario, settings=SETTINGS)


def _scale_up(app: App, action_id: str, group: str, target: int) -> str:
    return encode_action(new_scale_up(action_id=action_id, group=group, target_size=target, now=app.clock.now(),
                                      ttl=timedelta(minutes=5)))


def _running(app: App) -> int:
    """The nodes the groups are to run: every capacity written (no instance is deallocated here)."""
    groups = app.context.ports.provider.list_node_groups()
    return sum(g.capacity for g in groups if g.id in (POOL, SPARE))


def _at_once(app: App, texts: list[str]) -> list[ExecutionResult]:
    """Each text delivered on a thread of its own; each thread's first node list waits for the others', so all of
    them observe the cluster before any of them reserves or writes."""
    cluster = app.context.ports.cluster
    real_list: Callable[[], Any] = cluster.list_nodes
    barrier = threading.Barrier(len(texts), timeout=30)
    waited = threading.local()

    def list_nodes() -> Any:
        nodes = real_list()
        if not getattr(waited, "done", False):
            waited.done = True
            barrier.wait()
        return nodes

    cluster.list_nodes = list_nodes  # type: ignore[method-assign]
    results: list[ExecutionResult | BaseException] = [RuntimeError("not run")] * len(texts)

    def deliver(index: int, text: str) -> None:
        try:
            results[index] = app.executor.execute(text, now=app.clock.now())
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test's thread below
            results[index] = exc

    threads = [threading.Thread(target=deliver, args=(i, t)) for i, t in enumerate(texts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    cluster.list_nodes = real_list  # type: ignore[method-assign]
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


def test_two_concurrent_scale_ups_never_pass_max_nodes_total_together(app: App) -> None:
    """1 node now, the limit 4: +3 for each group fits alone, both together would make 7."""
    assert _running(app) == 1
    texts = [_scale_up(app, "up-pool", POOL, 4), _scale_up(app, "up-spare", SPARE, 3)]

    results = _at_once(app, texts)

    assert _running(app) <= LIMIT, [r.detail for r in results]
    assert _running(app) == LIMIT  # the room there was is used, not lost to the race
    # The loser was shrunk or skipped, with the limit named; nothing ended without a ledger row.
    assert any("max total nodes reached" in r.detail or r.outcome == "waiting" for r in results)
    for text in texts:
        entry = app.context.ports.state.get_ledger_entry(json.loads(text)["id"])
        assert entry is not None and (entry.outcome or entry.status == "done")
    held = app.context.ports.state.get_limit_reservations().reservations
    assert sum(r.nodes for r in held.values()) == LIMIT - 1  # what each action holds until it ends


def test_a_reservation_is_given_back_when_its_action_ends(app: App) -> None:
    assert app.run(_scale_up(app, "up-pool", POOL, 3)).outcome == "waiting"
    assert "up-pool" in app.context.ports.state.get_limit_reservations().reservations

    for _ in range(60):  # the confirm step until the operation ends
        app.clock.advance(10)
        queued = app.take_queued()
        if queued and app.run(queued[0]).outcome != "waiting":
            break
    entry = app.context.ports.state.get_ledger_entry("up-pool")
    assert entry is not None and entry.outcome.startswith("succeeded")
    assert app.context.ports.state.get_limit_reservations().reservations == {}


def test_a_reservation_held_by_another_action_counts_until_it_lapses(app: App) -> None:
    """An action that reserved and died before its capacity write holds its room only for ACTION_LEASE."""
    state = app.context.ports.state
    now = app.clock.now()
    lease = app.context.settings.action_lease
    gone = LimitReservation("up-gone", SPARE, target=3, nodes=3, cores=4, memory_bytes=0, until=now + lease)
    assert state.update_limit_reservations(LimitReservations({"up-gone": gone}))

    held = app.run(_scale_up(app, "up-1", POOL, 4))

    assert held.outcome == "skipped" and "max total nodes reached" in held.detail
    assert _running(app) == 1  # nothing written while the room was held
    assert state.get_ledger_entry("up-1") is not None
    app.clock.advance(lease.total_seconds() + 1)

    later = app.run(_scale_up(app, "up-2", POOL, 4))

    assert later.outcome == "waiting", later.detail
    assert _running(app) == 4
    assert set(state.get_limit_reservations().reservations) == {"up-2"}  # the lapsed one went with the write
