"""The RefillStandby message: it round-trips at every step, and a malformed one is refused naming what is wrong."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta

import pytest

from shared.actions import (MAX_NODES_PER_ACTION, REFILL_STANDBY_STEPS, InvalidAction, RefillStandby, decode_action,
                            decode_message, encode_action, new_refill_standby)
from shared.services.ledger import contradiction, record_of
from shared.ports import LedgerEntry
from tests.builders import T0


def _refill(**changes: object) -> RefillStandby:
    action = new_refill_standby(group="rg/pool", count=3, now=T0, ttl=timedelta(minutes=5), reason="standby 0 of 3")
    return replace(action, **changes)  # type: ignore[arg-type]


def _body(**changes: object) -> dict[str, object]:
    body = json.loads(encode_action(_refill(from_capacity=2, instances=("7", "8"), step="registered")))
    body.update(changes)
    return body


@pytest.mark.parametrize("action", [
    _refill(),
    _refill(step="registered", from_capacity=2, instances=("7", "8", "9")),
    _refill(step="park", from_capacity=0, instances=("pool_1a2b3c4d",), attempt=4),
], ids=REFILL_STANDBY_STEPS)
def test_a_refill_round_trips_at_every_step(action: RefillStandby) -> None:
    text = encode_action(action)
    assert decode_action(text) == action == decode_message(text)
    assert decode_action(text).progress[0] == REFILL_STANDBY_STEPS.index(action.step)


def test_its_id_names_the_group_and_the_decision_time_so_a_repeated_decision_is_one_action() -> None:
    first, again = _refill(), _refill()
    later = new_refill_standby(group="rg/pool", count=3, now=T0 + timedelta(seconds=60), ttl=timedelta(minutes=5))
    assert first.id == again.id != later.id
    assert "rg/pool" in first.id


@pytest.mark.parametrize("count", [0, -1, MAX_NODES_PER_ACTION + 1])
def test_a_refill_of_no_instances_or_too_many_is_never_built(count: int) -> None:
    with pytest.raises(ValueError, match="standby refill adds 1 to"):
        new_refill_standby(group="rg/pool", count=count, now=T0, ttl=timedelta(minutes=5))


@pytest.mark.parametrize("changes,problem", [
    ({"count": 0}, "count must be a positive integer"),
    ({"count": True}, "count must be a positive integer"),
    ({"count": MAX_NODES_PER_ACTION + 1}, f"at most {MAX_NODES_PER_ACTION} instances"),
    ({"count": None}, "missing field(s): count"),
    ({"instances": "7"}, "instances must be a list"),
    ({"instances": ["7", ""]}, "instances must be a list"),
    ({"instances": ["7", "7"]}, "names an instance twice"),
    ({"instances": ["1", "2", "3", "4"]}, "at most its count 3"),
    ({"instances": ["x" * 65]}, "at most 64"),
    ({"from_capacity": -1}, "from_capacity must be a non-negative integer"),
    ({"from_capacity": None}, "instances without from_capacity"),
    ({"step": "drain"}, "unknown step 'drain' for refill_standby"),
    ({"version": 2}, "a refill_standby is a version 3 message"),
    ({"nodes": []}, "a refill_standby has no field(s) nodes"),
    ({"group": "x" * 300}, "at most 256"),
])
def test_a_malformed_refill_is_refused_naming_what_is_wrong(changes: dict[str, object], problem: str) -> None:
    body = _body(**changes)
    body = {k: v for k, v in body.items() if v is not None}
    with pytest.raises(InvalidAction, match=re.escape(problem)):
        decode_action(json.dumps(body))


def _entry(action: RefillStandby) -> LedgerEntry:
    return LedgerEntry(action.id, action.kind, action.group, action.progress, "done", T0, record=record_of(action))


def test_the_ledger_holds_later_steps_to_what_the_grow_step_recorded() -> None:
    grown = _refill(step="registered", from_capacity=2, instances=("7", "8"))
    entry = _entry(grown)
    assert contradiction(entry, grown) is None
    assert contradiction(entry, replace(grown, instances=("7",), step="park")) is None  # fewer: dropped ones
    problems = [
        contradiction(entry, replace(grown, instances=("7", "99"))),  # an instance it never created
        contradiction(entry, replace(grown, from_capacity=5)),
        contradiction(entry, replace(grown, count=50)),
        contradiction(_entry(_refill()), grown),  # sizes the first step never recorded
    ]
    assert all(problems), problems
