"""Demand by hour per group, noted by the pending poll, and the forecast of the next hour read from it.

Service module: the demand rows through the StateStore port (one per group, engine.forecast's DemandHistory),
the forecast gauges through telemetry. Each pending poll notes, per group, the nodes asked for and not yet there
(`demand_by_group`); the row is written only when the hour's peak rises or the hour rolls over, by ETag
compare-and-swap (services.swap). So a group with steady demand costs one write an hour.

Rows are kept per store object between polls (the pending poll runs on one instance at a time, its timer's
singleton lock): a poll that changes nothing reads nothing. Callers outside the pending poll (the standby
decision in the utilisation poll and the executor, `get_forecasts`) share those rows and read a row again only
when what they hold is from an earlier hour, so a process that never notes demand sees the pending poll's
notes within the hour (the forecast depends on completed hours only). After a write, the next poll reads the row once
(the port does not hand back the new ETag); a write that loses its race reads the row afresh. Forecasts depend on
completed hours only, so each group's is computed once an hour and kept with the row.

A row that cannot be read (`UnreadableRow`) is reported and the group has no forecast; the others go on and
nothing is written over it. Demand is a forecast's input, never a decision: losing five races in a row is logged
and the next poll notes again.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, replace
from datetime import datetime

from shared import telemetry
from shared.domain import ClusterSnapshot, DemandHistory, NodeGroup
from shared.engine.forecast import Forecast, forecast_error, forecast_next_hour, hour_of, note_demand
from shared.engine.node_counts import present_by_group
from shared.engine.scale_up import ScaleUpPlan
from shared.ports import StateStore, UnreadableRow
from shared.services.swap import StateConflict, read_modify_write

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Known:
    row: DemandHistory | None  # as last read with its ETag; None: read it before the next write
    history: DemandHistory  # the latest content, written or read
    forecast: tuple[tuple[object, ...], Forecast] | None = None  # (what it was computed from, the forecast)
    hour: datetime | None = None  # the hour `history` was last read or noted in (None: unknown, read it again)


# Per store object (a store that goes away takes its rows along): group id -> what this process knows.
_known: MutableMapping[StateStore, dict[str, _Known]] = weakref.WeakKeyDictionary()


def demand_by_group(observed: ClusterSnapshot, groups: Iterable[NodeGroup], plan: ScaleUpPlan) -> dict[str, int]:
    """Per group, the nodes asked for and not yet there: the target the plan grows it to (else its running
    target as planned) less its nodes that registered Ready (or are on their way out) in `observed`.

    Nodes on their way count, so a burst served over several polls is seen whole at its peak; started standby
    instances count too, which is the demand they served.
    """
    present = present_by_group(observed.nodes)
    targets = {group.id: group.running_target for group in groups}
    targets.update({increase.group_id: increase.new_target for increase in plan.increases})
    return {group_id: max(0, target - present.get(group_id, 0)) for group_id, target in targets.items()}


def note_and_forecast(state: StateStore, demand: Mapping[str, float], *, now: datetime) -> dict[str, Forecast]:
    """Note each group's demand in its row (written when its hour's peak rises or the hour rolls over) and return
    each group's forecast for the next hour, also set as gauges. A group whose row cannot be read has none."""
    forecasts: dict[str, Forecast] = {}
    known = _known.setdefault(state, {})
    for group_id, nodes in sorted(demand.items()):
        try:
            history = _note(state, known, group_id, nodes, now=now)
        except UnreadableRow as exc:
            log.error("group %s: %s; no forecast for it until the row is repaired or deleted", group_id, exc)
            known.pop(group_id, None)
            continue
        except StateConflict as exc:
            log.warning("%s; the next poll notes its demand", exc)
            known.pop(group_id, None)
            continue
        forecasts[group_id] = _forecast(known, group_id, history, now=now)
        telemetry.record_forecast(group_id, nodes=forecasts[group_id].nodes, mape=forecasts[group_id].mape)
    return forecasts


def get_forecasts(state: StateStore, group_ids: Iterable[str], *, now: datetime) -> dict[str, Forecast]:
    """Each group's forecast for the next hour without noting demand (for a caller outside the pending poll);
    a row this process knows from the current hour is not read again. A group whose row cannot be read has
    none."""
    known = _known.setdefault(state, {})
    forecasts = {}
    for group_id in group_ids:
        try:
            history = _history(state, known, group_id, now=now)
        except UnreadableRow as exc:
            log.error("group %s: %s; no forecast for it until the row is repaired or deleted", group_id, exc)
            continue
        forecasts[group_id] = _forecast(known, group_id, history, now=now)
    return forecasts


def forecast_errors(state: StateStore, *, now: datetime) -> dict[str, float | None]:
    """Every group's forecast error as of `now`: the MAPE (a fraction) of its one-hour-ahead forecasts over the
    recent hours with demand, None where there was none yet (the replay reports it at the end of a run)."""
    return {history.group_id: forecast_error(history, now=now)[0] for history in state.list_demand()}


def pooled_forecast_error(state: StateStore, *, now: datetime) -> float | None:
    """The MAPE over every group's judged hours together (each hour weighs the same), None with none: one figure
    for a run's report."""
    judged = [forecast_error(history, now=now) for history in state.list_demand()]
    hours = sum(count for _, count in judged)
    return sum(mape * count for mape, count in judged if mape is not None) / hours if hours else None


def _history(state: StateStore, known: dict[str, _Known], group_id: str, *, now: datetime) -> DemandHistory:
    mine = known.get(group_id)
    hour = hour_of(now)
    if mine is not None and mine.hour == hour:
        return mine.history
    row = state.get_demand(group_id)
    known[group_id] = _Known(row, row, mine.forecast if mine is not None else None, hour)
    return row


def _note(state: StateStore, known: dict[str, _Known], group_id: str, nodes: float, *, now: datetime) -> DemandHistory:
    mine = known.get(group_id)
    if mine is not None and note_demand(mine.history, nodes, now=now) == mine.history:
        if mine.hour != hour_of(now):
            known[group_id] = replace(mine, hour=hour_of(now))  # noted this hour: current for get_forecasts
        return mine.history  # nothing new this poll: no read, no write

    def change(row: DemandHistory) -> tuple[DemandHistory | None, tuple[DemandHistory, bool]]:
        noted = note_demand(row, nodes, now=now)
        return (None if noted == row else noted), (noted, noted != row)

    history, wrote = read_modify_write(lambda: state.get_demand(group_id), state.update_demand, change,
                                       what=f"note the demand of group {group_id}",
                                       known=mine.row if mine is not None else None)
    previous = mine.forecast if mine is not None else None
    # After a write the ETag is unknown: the row is read again before the next write.
    known[group_id] = _Known(None if wrote else history, history, previous, hour_of(now))
    return history


def _forecast(known: dict[str, _Known], group_id: str, history: DemandHistory, *, now: datetime) -> Forecast:
    """forecast_next_hour, computed again only when the completed hours or the current hour change."""
    hour = hour_of(now)
    completed = history.peaks[:max(0, int((hour - history.start).total_seconds() // 3600))] if history.start else ()
    basis = (history.start, completed, hour)
    mine = known.get(group_id)
    if mine is not None and mine.forecast is not None and mine.forecast[0] == basis:
        return mine.forecast[1]
    forecast = forecast_next_hour(history, now=now)
    if mine is not None:
        known[group_id] = replace(mine, forecast=(basis, forecast))
    return forecast
