"""One scale-down plan at a time (issue 14, item 4): a round and the timer's poll never share out the same slots.

Against Table storage (Azurite) and the in-memory store alike, and through the utilisation poll itself.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.ports import Ports, StateStore
from shared.services.memory_state import MemoryStateStore
from shared.services.plan_lease import LEASE_ROW, LEASE_TIME, plan_lease
from shared.services.utilization import run_utilization_poll
from shared.settings import load_settings

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
BASE = {"CLUSTER_NAME": "c", "AZURE_SUBSCRIPTION_ID": "s", "NODE_RESOURCE_GROUPS": "rg", "KUBECONFIG_PATH": "/k"}


@pytest.fixture(params=["table", "memory"])
def store(request: pytest.FixtureRequest) -> StateStore:
    if request.param == "memory":
        return MemoryStateStore()
    return request.getfixturevalue("state_store")  # type: ignore[no-any-return]


def _ports(store: StateStore) -> Ports:
    return Ports(cluster=None, provider=None, state=store, queue=None, clock=None, events=None)  # type: ignore[arg-type]


def test_the_lease_is_held_by_one_plan_at_a_time(store: StateStore) -> None:
    ports = _ports(store)
    with plan_lease(ports, now=NOW) as first:
        with plan_lease(ports, now=NOW + timedelta(seconds=1)) as second:
            assert (first, second) == (True, False)
    # Given back at the end: the next plan takes it (a row that exists now, by compare-and-swap).
    with plan_lease(ports, now=NOW + timedelta(seconds=2)) as third:
        assert third
    entry = store.get_ledger_entry(LEASE_ROW)
    assert entry is not None and entry.operation == ""


def test_a_lease_whose_holder_died_is_taken_over_after_the_lease_time(store: StateStore) -> None:
    ports = _ports(store)
    dead = plan_lease(ports, now=NOW)
    assert dead.__enter__()  # taken, never given back: the invocation died
    with plan_lease(ports, now=NOW + LEASE_TIME - timedelta(seconds=1)) as early:
        assert not early
    with plan_lease(ports, now=NOW + LEASE_TIME) as late:
        assert late
        entry = store.get_ledger_entry(LEASE_ROW)
        assert entry is not None and entry.operation and entry.updated_at == NOW + LEASE_TIME
    dead.__exit__(None, None, None)  # the old holder coming back gives back nothing that is no longer its own
    with plan_lease(ports, now=NOW + LEASE_TIME + timedelta(seconds=1)) as after:
        assert after


def test_a_poll_that_finds_the_lease_held_plans_nothing_and_touches_nothing() -> None:
    """The poll returns before it reads the cluster: ports it would call are absent here, so any call fails."""
    store = MemoryStateStore()
    ports = _ports(store)
    settings = load_settings(BASE)
    with plan_lease(ports, now=NOW) as held:
        assert held
        result = run_utilization_poll(ports, settings, now=NOW)
    assert result.enqueued == () and not result.plan.removals and not result.plan.unneeded
    assert store.list_unneeded() == {}
