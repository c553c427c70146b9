"""services.demand: the pending poll's demand noted per group and hour (cheaply), and the forecasts read back."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from shared.domain import DemandHistory
from shared.engine.forecast import forecast_next_hour
from shared.engine.scale_up import GroupIncrease, ScaleUpPlan
from shared.ports import UnreadableRow
from shared.services import demand
from shared.services.memory_state import MemoryStateStore
from tests.builders import group, node, snapshot
from tests.shared.services.telemetry_capture import Telemetry, telemetry  # noqa: F401  (the fixture)

T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
POLL = timedelta(seconds=10)
A, B = "rg/pool-a", "rg/pool-b"


class CountingStore(MemoryStateStore):
    """A memory store that counts the demand rows read and written, and can make one group's row unreadable."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.writes = 0
        self.unreadable: set[str] = set()
        self._writing = False

    def get_demand(self, group_id: str) -> DemandHistory:
        self.reads += not self._writing  # not the store's own read for its compare-and-swap
        if group_id in self.unreadable:
            raise UnreadableRow(table="state", partition_key="demand", row_key=group_id, column="Peaks",
                                problem="not JSON")
        return super().get_demand(group_id)

    def update_demand(self, history: DemandHistory) -> bool:
        self.writes += 1
        self._writing = True
        try:
            return super().update_demand(history)
        finally:
            self._writing = False


def polls(store: CountingStore, demands: list[dict[str, float]], *, start: datetime = T0) -> dict[str, object]:
    forecasts: dict[str, object] = {}
    for i, per_group in enumerate(demands):
        forecasts = demand.note_and_forecast(store, per_group, now=start + i * POLL)
    return forecasts


def test_steady_demand_writes_once_an_hour_and_reads_once_after_each_write() -> None:
    store = CountingStore()
    hour = 360  # polls in an hour
    polls(store, [{A: 2}] * (3 * hour))
    assert store.writes == 3  # the first hour, then each roll-over
    assert store.reads == 3  # the first read, then once after each write (the port hands back no ETag)
    assert store.get_demand(A).peaks == (2, 2, 2)


def test_each_rise_of_the_hours_peak_is_written_and_nothing_else() -> None:
    store = CountingStore()
    demands = [0, 3, 1, 3, 5, 5, 2, 0]
    polls(store, [{A: d} for d in demands])
    assert store.writes == 3  # 0, then 3, then 5
    assert store.get_demand(A).peaks == (5,)


def test_an_hour_without_demand_is_written_as_zero_once() -> None:
    store = CountingStore()
    polls(store, [{A: 4}])
    polls(store, [{A: 0}] * 360, start=T0 + timedelta(hours=1))
    assert store.get_demand(A).peaks == (4, 0) and store.writes == 2


def test_a_row_written_by_another_instance_is_read_again_and_its_peak_kept() -> None:
    store = CountingStore()
    polls(store, [{A: 2}] * 3)
    other = store.get_demand(A)  # another writer raises the hour's peak meanwhile
    assert store.update_demand(DemandHistory(A, start=other.start, peaks=(9,), etag=other.etag))
    polls(store, [{A: 3}], start=T0 + timedelta(minutes=5))  # above 2 as known here: read, 9 kept, nothing written
    assert store.get_demand(A).peaks == (9,)
    again = store.get_demand(A)  # and again, after this process read the row
    assert store.update_demand(DemandHistory(A, start=again.start, peaks=(12,), etag=again.etag))
    writes = store.writes
    polls(store, [{A: 0}], start=T0 + timedelta(hours=1))  # the roll-over loses its first race, reads, wins
    assert store.get_demand(A).peaks == (12, 0) and store.writes == writes + 2


def test_an_unreadable_row_leaves_its_group_without_forecast_and_the_others_go_on(
        caplog: pytest.LogCaptureFixture) -> None:
    store = CountingStore()
    store.unreadable.add(B)
    with caplog.at_level(logging.ERROR):
        forecasts = polls(store, [{A: 1, B: 4}] * 2)
    assert set(forecasts) == {A}
    assert B in caplog.text and "Peaks" in caplog.text
    assert store.list_demand()[0].group_id == A and len(store.list_demand()) == 1  # nothing written over B's row


def test_the_forecasts_are_the_engines_and_readable_without_noting() -> None:
    store = CountingStore()
    hours = [3, 6, 4, 8]
    for h, peak in enumerate(hours):
        polls(store, [{A: peak, B: 1}], start=T0 + timedelta(hours=h))
    now = T0 + timedelta(hours=len(hours), minutes=1)
    noted = demand.note_and_forecast(store, {A: 0, B: 0}, now=now)
    assert noted[A] == forecast_next_hour(store.get_demand(A), now=now)
    assert noted[A].nodes == pytest.approx((6 + 4 + 8) / 3)
    writes = store.writes
    assert demand.get_forecasts(store, [A, B], now=now) == noted
    assert store.writes == writes


def test_each_forecast_and_its_error_are_gauges_per_group(telemetry: Telemetry) -> None:  # noqa: F811
    store = CountingStore()
    for h, (a, b) in enumerate([(2, 0), (4, 0), (2, 0)]):
        polls(store, [{A: a, B: b}], start=T0 + timedelta(hours=h))
    noted = polls(store, [{A: 0, B: 0}], start=T0 + timedelta(hours=3))
    assert telemetry.last("vmss_autoscaler_demand_forecast_nodes", node_group=A) == pytest.approx(noted[A].nodes)
    assert telemetry.last("vmss_autoscaler_demand_forecast_error", node_group=A) == pytest.approx(noted[A].mape)
    assert telemetry.last("vmss_autoscaler_demand_forecast_nodes", node_group=B) == 0
    assert telemetry.points("vmss_autoscaler_demand_forecast_error", node_group=B) == []  # no hour with demand


def test_forecast_errors_per_group_and_pooled() -> None:
    store = CountingStore()
    for h, (a, b) in enumerate([(2, 0), (4, 0), (2, 0), (4, 0)]):
        polls(store, [{A: a, B: b}], start=T0 + timedelta(hours=h))
    now = T0 + timedelta(hours=4, minutes=1)
    errors = demand.forecast_errors(store, now=now)
    assert errors[B] is None  # no hour with demand
    # One hour ahead: 2 against 4, 3 against 2, 8/3 against 4 (hour 0 has nothing before it).
    expected = [abs(2 - 4) / 4, abs(3 - 2) / 2, abs(8 / 3 - 4) / 4]
    assert errors[A] == pytest.approx(sum(expected) / 3)
    assert demand.pooled_forecast_error(store, now=now) == pytest.approx(errors[A])
    assert demand.pooled_forecast_error(MemoryStateStore(), now=now) is None


def test_demand_is_the_nodes_asked_for_and_not_yet_there() -> None:
    groups = [group("pool-a", target=3), group("pool-b", target=2), group("pool-c", target=1)]
    nodes = [node("a0", group_name="pool-a", instance=0), node("a1", group_name="pool-a", instance=1),
             node("b0", group_name="pool-b", instance=0), node("b1", group_name="pool-b", instance=1),
             node("b2", group_name="pool-b", instance=2),  # more than the target: never negative
             node("c0", group_name="pool-c", instance=0, ready=False)]  # registered, not Ready: on its way
    plan = ScaleUpPlan(increases=(GroupIncrease("rg/pool-a", 3, 7, ("default/p",)),))
    observed = snapshot(nodes=nodes, groups=groups)
    assert demand.demand_by_group(observed, observed.groups, plan) == {"rg/pool-a": 5, "rg/pool-b": 0,
                                                                       "rg/pool-c": 1}
