"""The AtomicScaleUp message: it round-trips at every step, its id is the request's, and a malformed or forged one is
refused naming what is wrong."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest

from shared.actions import (ATOMIC_ID_PREFIX, ATOMIC_SCALE_UP_STEPS, MAX_NODES_PER_ACTION, AtomicScaleUp,
                            InvalidAction, decode_action, decode_message, encode_action, encode_message,
                            new_atomic_scale_up)
from shared.ports import LedgerEntry
from shared.services.ledger import contradiction, record_of
from tests.builders import T0

UID = "3f2b9c1e-7d4a-4b8e-9a51-0c6d2e8f1a77"


def _atomic(**changes: object) -> AtomicScaleUp:
    action = new_atomic_scale_up(request="training/gang-a", request_uid=UID, parts=[("rg/gpu-a", 4)], now=T0,
                                 ttl=timedelta(minutes=5), reason="ProvisioningRequest training/gang-a: 4 pods")
    return replace(action, **changes)  # type: ignore[arg-type]


def _body(**changes: object) -> dict[str, object]:
    body = json.loads(encode_action(_atomic(step="confirm", attempt=2)))
    body.update(changes)
    return body


@pytest.mark.parametrize("action", [
    _atomic(),
    _atomic(step="resize"),
    _atomic(step="confirm", attempt=3, step_started_at=T0),
    _atomic(step="ready", parts=(("rg/gpu-a", 2), ("rg/gpu-b", 2))),
    _atomic(step="rollback", traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01", tracestate="k=v"),
], ids=ATOMIC_SCALE_UP_STEPS)
def test_an_atomic_scale_up_round_trips_at_every_step(action: AtomicScaleUp) -> None:
    text = encode_action(action)
    assert decode_action(text) == action == decode_message(text)
    assert encode_message(action) == text
    assert decode_action(text).progress[0] == ATOMIC_SCALE_UP_STEPS.index(action.step)


def test_its_id_is_the_requests_uid_so_every_polls_decision_is_one_action() -> None:
    first = _atomic()
    later = new_atomic_scale_up(request="training/gang-a", request_uid=UID, parts=[("rg/gpu-b", 4)],
                                now=T0 + timedelta(minutes=3), ttl=timedelta(minutes=5))
    other = new_atomic_scale_up(request="training/gang-a", request_uid=UID.replace("3f", "4f"),
                                parts=[("rg/gpu-a", 4)], now=T0, ttl=timedelta(minutes=5))
    assert first.id == later.id == f"{ATOMIC_ID_PREFIX}{UID}" != other.id
    assert first.group == "rg/gpu-a" and later.group == "rg/gpu-b"  # the first part's group
    assert first.nodes_asked == 4 and first.is_first_step


def test_the_rollback_is_the_last_step_so_progress_only_moves_forward_into_it() -> None:
    rollback = ATOMIC_SCALE_UP_STEPS.index("rollback")
    assert all(ATOMIC_SCALE_UP_STEPS.index(step) < rollback for step in ("resize", "confirm", "ready"))


@pytest.mark.parametrize("changes,problem", [
    ({"request": "gang-a"}, "not <namespace>/<name>"),
    ({"request": "Training/gang-a"}, "not <namespace>/<name>"),
    ({"request_uid": ""}, "not a Kubernetes uid"),
    ({"request_uid": "a/b"}, "not a Kubernetes uid"),
    ({"parts": []}, "at least one"),
    ({"parts": [("rg/a", 0)]}, "at least one node"),
    ({"parts": [("rg/a", True)]}, "at least one node"),
    ({"parts": [("", 2)]}, "non-empty string"),
    ({"parts": [("rg/a", 2), ("rg/a", 1)]}, "names a group twice"),
    ({"parts": [("rg/a", MAX_NODES_PER_ACTION), ("rg/b", 1)]}, f"at most {MAX_NODES_PER_ACTION}"),
])
def test_a_malformed_atomic_scale_up_is_never_built(changes: dict[str, object], problem: str) -> None:
    arguments: dict[str, object] = dict(request="training/gang-a", request_uid=UID, parts=[("rg/gpu-a", 4)], now=T0,
                                        ttl=timedelta(minutes=5))
    arguments.update(changes)
    with pytest.raises(ValueError, match=problem.replace("(", r"\(")):
        new_atomic_scale_up(**arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize("changes,problem", [
    ({"version": 2}, "version 3 message"),
    ({"extra": 1}, "has no field(s) extra"),
    ({"request": None}, "missing field(s): request"),
    ({"parts": None}, "missing field(s): parts"),
    ({"request": "training/gang-a"}, "request must be an object"),
    ({"request": {"name": "training/gang-a"}}, "request must be an object"),
    ({"request": {"name": "training/gang-a", "uid": UID, "x": 1}}, "request must be an object"),
    ({"request": {"name": "gang-a", "uid": UID}}, "not <namespace>/<name>"),
    ({"request": {"name": "training/gang-a", "uid": 7}}, "not a Kubernetes uid"),
    ({"parts": []}, "parts must be a non-empty list"),
    ({"parts": {"group": "rg/gpu-a", "count": 4}}, "parts must be a non-empty list"),
    ({"parts": [["rg/gpu-a", 4]]}, "parts[0] must be an object"),
    ({"parts": [{"group": "rg/gpu-a"}]}, "parts[0] must be an object"),
    ({"parts": [{"group": 5, "count": 4}]}, "parts[0].group must be"),
    ({"parts": [{"group": "rg/gpu-a", "count": 0}]}, "count must be a positive integer"),
    ({"parts": [{"group": "rg/gpu-a", "count": "4"}]}, "count must be a positive integer"),
    ({"parts": [{"group": "rg/gpu-a", "count": 2}, {"group": "rg/gpu-a", "count": 2}]}, "names a group twice"),
    ({"parts": [{"group": "rg/gpu-a", "count": 101}]}, f"at most {MAX_NODES_PER_ACTION} nodes"),
    ({"parts": [{"group": "g" * 300, "count": 1}]}, "parts[0].group' is 300 characters"),
    ({"id": "provreq:someone-else"}, "is not provreq:<request uid>"),
    ({"group": "rg/gpu-b"}, "is not the first part's group"),
    ({"step": "grow"}, "unknown step 'grow' for atomic_scale_up"),
    ({"attempt": -1}, "attempt must be a non-negative integer"),
    ({"created_at": "yesterday"}, "not an ISO 8601 time"),
])
def test_a_malformed_or_forged_message_is_refused_naming_what_is_wrong(changes: dict[str, object],
                                                                        problem: str) -> None:
    with pytest.raises(InvalidAction) as refused:
        decode_action(json.dumps(_body(**changes)))
    assert problem in str(refused.value)


def _entry(action: AtomicScaleUp) -> LedgerEntry:
    return LedgerEntry(action.id, action.kind, action.group, (1, 0), "done", T0, record=record_of(action))


@pytest.mark.parametrize("changes", [
    {"request": "training/gang-b"},
    {"request_uid": UID.replace("3f", "4f")},
    {"parts": (("rg/gpu-a", 5),)},
    {"parts": (("rg/gpu-a", 2), ("rg/gpu-b", 2))},
    {"created_at": T0 - timedelta(seconds=1)},
])
def test_a_later_step_that_names_another_request_or_parts_contradicts_the_ledger(changes: dict[str, object]) -> None:
    decided = _atomic()
    assert contradiction(_entry(decided), _atomic(step="confirm")) is None
    assert contradiction(_entry(decided), _atomic(step="confirm", **changes)) is not None
