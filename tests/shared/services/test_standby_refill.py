"""When the utilisation poll refills a warm standby: never for a group its VMSS Standby Pool serves (the pool is
its standby, listed once per poll, nothing read without the port), and not while its last scale-up's nodes may
still go idle into it (`quiet_until`)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from devtools.replay.world_ports import WorldCompute
from shared.domain import FLEXIBLE_SCALE_SET
from shared.ports import StandbyPool
from shared.services.providers import ProviderRouter
from shared.services.standby_refill import quiet_until
from shared.services.utilization import run_utilization_poll
from tests.shared.services.standby_world import GROUP, standby_scenario
from tests.memory_app import MemoryApp, memory_app

STANDBY = 2


class CountingPools:
    """A StandbyPoolSource holding `pools`, counting its lists and keeping its writes."""

    def __init__(self, pools: list[StandbyPool]) -> None:
        self.pools, self.lists, self.writes = pools, 0, []  # type: ignore[var-annotated]

    def list_standby_pools(self) -> list[StandbyPool]:
        self.lists += 1
        return list(self.pools)

    def update_standby_pool(self, pool: StandbyPool, *, max_ready: int, min_ready: int) -> StandbyPool:
        self.writes.append((pool.name, max_ready, min_ready))
        updated = replace(pool, max_ready=max_ready, min_ready=min_ready)
        self.pools = [updated if p.name == pool.name else p for p in self.pools]
        return updated


POOL = StandbyPool("rg-sb", "pool-standby", "rg-sb", "pool", "Deallocated", 0, 0)
OTHER_SET = replace(POOL, name="other-standby", scale_set_name="other")


def _app(*, pools: CountingPools | None, flexible: bool = True, settings: dict[str, str] | None = None,
         tag: str = str(STANDBY)) -> MemoryApp:
    app = memory_app(standby_scenario({"autoscaler-standby": tag}),
                     settings={"STEP_RETRY_DELAY": "10s", **(settings or {})})
    if flexible:  # the world's set read as a Flexible one: what the pool decision looks at
        compute = WorldCompute(app.world, cluster_name="standby", resource_groups=["rg-sb"], kind=FLEXIBLE_SCALE_SET)
        app.ports = replace(app.ports, provider=ProviderRouter([compute]))
    app.ports = replace(app.ports, standby_pools=pools)
    return app


def _refills(app: MemoryApp) -> list[dict[str, Any]]:
    run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    return [body for body in map(json.loads, app.queued()) if body.get("kind") == "refill_standby"]


@pytest.mark.parametrize("pools,flexible,refilled", [
    (None, True, True),  # STANDBY_POOLS=false: our standby
    ([], True, True),  # no pool in the resource groups
    ([OTHER_SET], True, True),  # a pool of another set
    ([POOL], False, True),  # a Uniform set has no pool (its name matched or not)
    ([POOL], True, False),  # the set's pool is its standby
], ids=["no port", "no pool", "another set's pool", "uniform", "pooled"])
def test_a_group_served_by_its_standby_pool_gets_no_refill(pools: list[StandbyPool] | None, flexible: bool,
                                                           refilled: bool) -> None:
    source = CountingPools(pools) if pools is not None else None
    app = _app(pools=source, flexible=flexible)
    refills = _refills(app)
    assert bool(refills) is refilled
    if source is not None:
        # Only with a Flexible group; once for the poll's decisions and once for its status (the adapter caches the
        # list, so that is one ARM read at most).
        assert (1 <= source.lists <= 2) if flexible else source.lists == 0
        pooled = not refilled
        # The pool follows the group's target instead, at the same poll.
        assert source.writes == ([(POOL.name, STANDBY, STANDBY)] if pooled else [])


def test_a_pooled_group_keeps_no_stopped_instances_through_the_polls() -> None:
    source = CountingPools([POOL])
    app = _app(pools=source)
    for _ in range(12):
        app.tick(30)
    assert app.ports.state.get_group(GROUP).stopped == frozenset()
    assert source.lists >= 12 and len(source.writes) == 1  # one write: the target did not change


@pytest.mark.parametrize("pools,pooled", [([POOL], True), ([OTHER_SET], False)], ids=["pooled", "another set's pool"])
def test_status_and_plan_say_when_a_standby_pool_holds_the_groups_standby(pools: list[StandbyPool],
                                                                          pooled: bool) -> None:
    from shared.services.standby import standby_report

    app = _app(pools=CountingPools(pools))
    (group,) = app.ports.provider.list_node_groups()
    report = standby_report(app.ports, app.settings, group, app.ports.state.get_group(GROUP), now=app.clock.now())
    assert report is not None and report.pooled is pooled
    assert ("standbyPool" in report.as_dict()) is pooled
    assert ("Standby Pool" in report.line(GROUP)) is pooled


WAITS = {"STANDBY_REFILL_WAITS_FOR_IDLE": "true"}


@pytest.mark.parametrize("settings", [WAITS, {**WAITS, "SCALE_DOWN_IDLE_MODE": "fixed"}], ids=["break-even", "fixed"])
def test_no_refill_creates_while_the_last_scale_up_may_still_feed_it(settings: dict[str, str]) -> None:
    app = _app(pools=None, flexible=False, settings=settings)
    (group,) = app.ports.provider.list_node_groups()
    state = app.ports.state.get_group(GROUP)
    scaled_up = app.clock.now()
    assert app.ports.state.update_group(replace(state, last_scale_up=scaled_up))
    until = quiet_until(app.settings, group, app.ports.state.get_group(GROUP))
    assert until is not None and until > scaled_up
    assert _refills(app) == []
    app.clock.advance((until - app.clock.now()).total_seconds() - 5)
    assert _refills(app) == []  # just before: still held back
    app.clock.advance(10)
    (refill,) = _refills(app)  # past it: refilled
    assert refill["group"] == GROUP


def test_the_quiet_time_is_as_long_as_scale_down_needs_to_take_an_idle_node() -> None:
    """Fixed idle mode: the settings' two times; none without a scale-up, none with the setting off."""
    app = _app(pools=None, flexible=False, settings={**WAITS, "SCALE_DOWN_IDLE_MODE": "fixed",
                                                     "SCALE_DOWN_DELAY_AFTER_ADD": "7m",
                                                     "SCALE_DOWN_UNNEEDED_TIME": "4m"})
    (group,) = app.ports.provider.list_node_groups()
    state = replace(app.ports.state.get_group(GROUP), last_scale_up=app.clock.now())
    assert quiet_until(app.settings, group, state) == app.clock.now() + timedelta(minutes=11)
    assert quiet_until(app.settings, group, replace(state, last_scale_up=None)) is None
    assert quiet_until(replace(app.settings, standby_refill_waits_for_idle=False), group, state) is None


def test_by_default_a_refill_does_not_wait_for_the_last_scale_up() -> None:
    app = _app(pools=None, flexible=False)
    state = app.ports.state.get_group(GROUP)
    assert app.ports.state.update_group(replace(state, last_scale_up=app.clock.now()))
    (refill,) = _refills(app)
    assert refill["group"] == GROUP


def test_a_utilisation_poll_that_changes_nothing_reads_no_demand_row_again() -> None:
    app = _app(pools=None, flexible=False, settings={"STANDBY_INSTANCES": "auto"}, tag="auto")
    reads: list[str] = []
    original = app.ports.state.get_demand
    app.ports.state.get_demand = lambda group_id: (reads.append(group_id), original(group_id))[1]  # type: ignore[method-assign]
    run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert reads == [GROUP]  # the group's row, once
    for _ in range(3):
        app.clock.advance(60)
        run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert reads == [GROUP]
