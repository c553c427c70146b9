from __future__ import annotations

import json
from datetime import timedelta

import pytest

from shared.actions import InvalidAction, decode_action, encode_action, new_scale_down, new_scale_up
from tests.builders import T0


def up() -> dict:
    return json.loads(encode_action(new_scale_up(action_id="a1", group="rg/pool", target_size=3, now=T0, ttl=timedelta(minutes=5))))


def test_round_trip_both_kinds() -> None:
    action = new_scale_down(action_id="d1", group="rg/pool", node="n0", provider_id="azure:///x", now=T0,
                            ttl=timedelta(minutes=5), reason="idle")
    moved = action.at_step("drain", now=T0 + timedelta(seconds=5)).retried()
    assert decode_action(encode_action(moved)) == moved
    scale_up = new_scale_up(action_id="a1", group="rg/pool", target_size=3, now=T0, ttl=timedelta(minutes=5))
    assert decode_action(encode_action(scale_up)) == scale_up


BAD = [
    ("not json", "{nope", "not JSON"),
    ("json array", "[1]", "not a JSON object"),
    ("unknown version", {**up(), "version": 2}, "unknown schema version"),
    ("unknown kind", {**up(), "kind": "scale_sideways"}, "unknown kind"),
    ("missing group", {k: v for k, v in up().items() if k != "group"}, "missing field(s): group"),
    ("zero target", {**up(), "target_size": 0}, "target_size must be a positive integer"),
    ("bool target", {**up(), "target_size": True}, "target_size must be a positive integer"),
    ("string target", {**up(), "target_size": "3"}, "target_size must be a positive integer"),
    ("bad time", {**up(), "created_at": "yesterday"}, "not an ISO 8601 time"),
    ("naive time", {**up(), "created_at": "2026-11-21T12:00:00"}, "no time zone"),
    ("expires before created", {**up(), "expires_at": "2026-11-21T11:00:00Z"}, "before created_at"),
    ("unknown step", {**up(), "step": "drain"}, "unknown step"),
    ("scale_down without node", {**up(), "kind": "scale_down", "step": "cordon", "provider_id": "x"}, "node"),
    ("negative attempt", {**up(), "attempt": -1}, "attempt"),
]


@pytest.mark.parametrize("case_id,body,message", BAD, ids=[b[0] for b in BAD])
def test_bad_messages_are_named(case_id, body, message) -> None:  # type: ignore[no-untyped-def]
    text = body if isinstance(body, str) else json.dumps(body)
    with pytest.raises(InvalidAction, match=message.replace("(", r"\(").replace(")", r"\)")):
        decode_action(text)


def test_progress_orders_steps_then_attempts() -> None:
    action = new_scale_down(action_id="d", group="g", node="n", provider_id="p", now=T0, ttl=timedelta(minutes=1))
    drain = action.at_step("drain", now=T0)
    assert action.progress < drain.progress < drain.retried().progress < drain.at_step("delete", now=T0).progress
