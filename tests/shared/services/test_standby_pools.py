"""The Standby Pool decision: each Flexible group's pool set to its standby target (max = min = the count), capped
by the room below max and 1,000 VMs, written only when it changed; and the adapter against the sandbox's double."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sandbox.clock import ManualClock
from shared.adapters.standby_pools import AzureStandbyPools
from shared.domain import FLEXIBLE_SCALE_SET, UNIFORM_SCALE_SET, NodeGroup
from shared.ports import StandbyPool
from shared.services.standby_pools import MAX_POOL_AND_SET, plan_pool_writes
from shared.settings import load_settings
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory

BASE = {"AZURE_SUBSCRIPTION_ID": "sub", "CLUSTER_NAME": "c", "NODE_RESOURCE_GROUPS": "rg",
        "KUBECONFIG_PATH": "/dev/null"}


def settings(**extra: str) -> Any:
    return load_settings({**BASE, **extra})


def group(tag: str | None, *, capacity: int = 2, max_size: int = 20, kind: str = FLEXIBLE_SCALE_SET) -> NodeGroup:
    tags = {"autoscaler-standby": tag} if tag is not None else {}
    return NodeGroup("rg", "flex", 1, max_size, capacity, "Standard_D4s_v5", tags=tags, provider=kind)


POOL = StandbyPool("rg", "standby", "RG", "FLEX", "Deallocated", 4, 4)


@pytest.mark.parametrize("g,setting,pool,ready", [
    (group("6"), "0", POOL, 6),  # the tag's count
    (group(None), "3", POOL, 3),  # the setting's
    (group("6", capacity=18), "0", POOL, 2),  # capped by the room below max
    (group("900", capacity=150, max_size=1000), "0", POOL, MAX_POOL_AND_SET - 150),  # pool and set at most 1,000
    (group("auto"), "0", POOL, 0),  # auto without a forecast keeps none
], ids=["tag", "setting", "room below max", "1000 VMs", "auto without forecast"])
def test_the_pool_is_set_to_the_groups_target(g: NodeGroup, setting: str, pool: StandbyPool, ready: int) -> None:
    writes = plan_pool_writes([g], [pool], settings(STANDBY_INSTANCES=setting))
    assert [(w.ready, w.before) for _, w in writes] == [(ready, (4, 4))]
    assert 0 <= ready <= max(0, g.max_size - g.capacity)


@pytest.mark.parametrize("g,pool", [
    (group(None), POOL),  # no tag, STANDBY_INSTANCES 0: the owner's pool is left alone
    (group("4"), POOL),  # already there: no write
    (group("6", kind=UNIFORM_SCALE_SET), POOL),  # a Uniform set has no pool
    (group("6"), replace(POOL, scale_set_name="other")),  # a pool of another set
    (group("six"), POOL),  # a malformed tag: logged, left
], ids=["untagged", "unchanged", "uniform", "another set", "malformed tag"])
def test_nothing_is_written_when_nothing_is_to_change(g: NodeGroup, pool: StandbyPool) -> None:
    assert plan_pool_writes([g], [pool], settings()) == []


def test_the_adapter_lists_and_updates_the_sandbox_pool(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory("flex-standby-pool", clock=ManualClock(SANDBOX_START))
    source = AzureStandbyPools.from_settings(load_settings(server.env()))
    try:
        pools = source.list_standby_pools()
        assert [(p.name, p.scale_set_name, p.vm_state, p.max_ready, p.min_ready) for p in pools] == [
            ("pool-flex-standby", "pool-flex", "Deallocated", 4, 4)]
        updated = source.update_standby_pool(pools[0], max_ready=12, min_ready=12)
        assert (updated.max_ready, updated.min_ready, updated.vm_state) == (12, 12, "Deallocated")
        assert source.list_standby_pools() == [updated]  # the cache holds the write
        report = server.world.standby_pool_report()["rg-flex/pool-flex-standby"]
        assert report["writes"][-1] == {"t": report["writes"][-1]["t"], "max_ready": 12, "min_ready": 12}
    finally:
        source.close()


def test_auto_sizes_a_pool_from_the_forecast_the_poll_computed() -> None:
    """The utilisation poll hands its standby targets (forecast included) to the pools: `auto` is not 0 there."""
    from datetime import timedelta

    from shared.domain import DemandHistory
    from shared.engine.forecast import note_demand
    from shared.services.standby import get_standby_target
    from shared.services.utilization import run_utilization_poll
    from tests.shared.services.test_standby_refill import GROUP, POOL, CountingPools, _app

    source = CountingPools([replace(POOL, max_ready=0, min_ready=0)])
    app = _app(pools=source, settings={"STANDBY_INSTANCES": "auto"}, tag="auto")
    now = app.clock.now()
    history = DemandHistory(GROUP)
    for hours in range(6, 0, -1):
        history = note_demand(history, 3, now=now - timedelta(hours=hours))
    app.ports.state.update_demand(history)
    (group,) = app.ports.provider.list_node_groups()
    target = get_standby_target(app.ports, app.settings, group, now=now)
    assert target.count > 0 and "auto" in target.why
    run_utilization_poll(app.ports, app.settings, now=now)
    assert source.writes == [(POOL.name, target.count, target.count)]
