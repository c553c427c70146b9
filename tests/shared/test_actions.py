from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest

from shared.actions import InvalidAction, RemovalTarget, ScaleUp, decode_action, encode_action, new_scale_down, new_scale_up
from tests.builders import T0


def up() -> dict:
    return json.loads(encode_action(new_scale_up(action_id="a1", group="rg/pool", target_size=3, now=T0, ttl=timedelta(minutes=5))))


def test_round_trip_both_kinds() -> None:
    action = new_scale_down(action_id="d1", group="rg/pool", targets=[RemovalTarget("n0", "azure:///x")], now=T0,
                            ttl=timedelta(minutes=5), reason="idle")
    moved = action.at_step("drain", now=T0 + timedelta(seconds=5)).retried()
    assert decode_action(encode_action(moved)) == moved
    scale_up = new_scale_up(action_id="a1", group="rg/pool", target_size=3, now=T0, ttl=timedelta(minutes=5))
    assert decode_action(encode_action(scale_up)) == scale_up


BAD = [
    ("not json", "{nope", "not JSON"),
    ("json array", "[1]", "not a JSON object"),
    ("unknown version", {**up(), "version": 4}, "unknown schema version"),
    ("unknown kind", {**up(), "kind": "scale_sideways"}, "unknown kind"),
    ("missing group", {k: v for k, v in up().items() if k != "group"}, "missing field(s): group"),
    ("zero target", {**up(), "target_size": 0}, "target_size must be a positive integer"),
    ("bool target", {**up(), "target_size": True}, "target_size must be a positive integer"),
    ("string target", {**up(), "target_size": "3"}, "target_size must be a positive integer"),
    ("bad time", {**up(), "created_at": "yesterday"}, "not an ISO 8601 time"),
    ("naive time", {**up(), "created_at": "2026-11-21T12:00:00"}, "no time zone"),
    ("expires before created", {**up(), "expires_at": "2026-11-21T11:00:00Z"}, "before created_at"),
    ("unknown step", {**up(), "step": "drain"}, "unknown step"),
    ("v1 scale_down without node", {**up(), "version": 1, "kind": "scale_down", "step": "cordon", "provider_id": "x"},
     "missing field(s): node"),
    ("v2 scale_down without nodes", {**up(), "kind": "scale_down", "step": "cordon"}, "missing field(s): nodes"),
    ("v2 scale_down with empty nodes", {**up(), "kind": "scale_down", "step": "cordon", "nodes": []},
     "missing field(s): nodes"),
    ("nodes not a list", {**up(), "kind": "scale_down", "step": "cordon", "nodes": "n0"}, "must be a list"),
    ("node entry with a stray field",
     {**up(), "kind": "scale_down", "step": "cordon", "nodes": [{"name": "n0", "provider_id": "p", "x": 1}]},
     "nodes[0] must be an object with exactly"),
    ("v2 node entry with an empty name",
     {**up(), "version": 2, "kind": "scale_down", "step": "cordon", "nodes": [{"name": "", "provider_id": "p"}]},
     "nodes[0]: 'name' and 'provider_id' must be strings, 'name' and 'provider_id' non-empty"),
    ("v3 node entry without its instance",
     {**up(), "kind": "scale_down", "step": "cordon", "nodes": [{"name": "n0", "provider_id": "p"}]},
     "nodes[0] must be an object with exactly 'name', 'instance' and 'provider_id'"),
    ("v3 node entry with an empty instance",
     {**up(), "kind": "scale_down", "step": "cordon", "nodes": [{"name": "n0", "instance": "", "provider_id": ""}]},
     "'name' and 'instance' non-empty"),
    ("v3 node entry with a providerID not a string",
     {**up(), "kind": "scale_down", "step": "cordon", "nodes": [{"name": "n0", "instance": "1", "provider_id": None}]},
     "must be strings"),
    ("a node named twice",
     {**up(), "version": 2, "kind": "scale_down", "step": "cordon",
      "nodes": [{"name": "n0", "provider_id": "p"}, {"name": "n0", "provider_id": "q"}]}, "names a node twice"),
    ("too many nodes",
     {**up(), "kind": "scale_down", "step": "cordon",
      "nodes": [{"name": f"n{i}", "provider_id": "p"} for i in range(101)]}, "at most 100 per action"),
    ("negative attempt", {**up(), "attempt": -1}, "attempt"),
]


@pytest.mark.parametrize("case_id,body,message", BAD, ids=[b[0] for b in BAD])
def test_bad_messages_are_named(case_id, body, message) -> None:  # type: ignore[no-untyped-def]
    text = body if isinstance(body, str) else json.dumps(body)
    with pytest.raises(InvalidAction, match=re.escape(message)):
        decode_action(text)


def test_progress_orders_steps_then_attempts() -> None:
    action = new_scale_down(action_id="d", group="g", targets=[RemovalTarget("n", "p")], now=T0,
                            ttl=timedelta(minutes=1))
    drain = action.at_step("drain", now=T0)
    assert action.progress < drain.progress < drain.retried().progress < drain.at_step("delete", now=T0).progress


def test_version_1_scale_down_messages_are_still_read() -> None:
    body = {**up(), "version": 1, "kind": "scale_down", "step": "drain", "node": "n0", "provider_id": "azure:///x/7"}
    del body["target_size"]
    action = decode_action(json.dumps(body))
    assert action.targets == (RemovalTarget("n0", "azure:///x/7"),) and action.targets[0].instance_id == "7"
    assert json.loads(encode_action(action))["nodes"] == [{"name": "n0", "instance": "7", "provider_id": "azure:///x/7"}]


def test_version_3_names_the_instance_of_a_node_without_a_providerid() -> None:
    action = new_scale_down(action_id="d", group="rg/pool", targets=[RemovalTarget("worker-1", "", "pool_1a2b3c4d")],
                            now=T0, ttl=timedelta(minutes=1))
    body = json.loads(encode_action(action))
    assert body["version"] == 3 and body["nodes"] == [{"name": "worker-1", "instance": "pool_1a2b3c4d", "provider_id": ""}]
    assert decode_action(json.dumps(body)).targets[0].instance_id == "pool_1a2b3c4d"


def test_keeping_drops_the_nodes_given_back() -> None:
    action = new_scale_down(action_id="d", group="g", targets=[RemovalTarget("a", "pa"), RemovalTarget("b", "pb")],
                            now=T0, ttl=timedelta(minutes=1))
    assert action.keeping(["b"]).nodes == ("b",)
    assert decode_action(encode_action(action)) == action


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_the_decisions_trace_context_travels_with_every_step() -> None:
    action = new_scale_down(action_id="d", group="g", targets=[RemovalTarget("a", "pa"), RemovalTarget("b", "pb")],
                            now=T0, ttl=timedelta(minutes=1), reason="2 empty nodes", removal_kind="empty",
                            traceparent=TRACEPARENT, tracestate="congo=t61rcWkgMzE")
    body = json.loads(encode_action(action))
    assert (body["traceparent"], body["tracestate"], body["removal_kind"]) == (TRACEPARENT, "congo=t61rcWkgMzE", "empty")
    following = action.keeping(["b"]).at_step("drain", now=T0).retried()
    decoded = decode_action(encode_action(following))
    assert decoded == following
    assert (decoded.traceparent, decoded.tracestate, decoded.removal_kind) == (TRACEPARENT, "congo=t61rcWkgMzE", "empty")


def test_messages_without_trace_context_still_read_and_write_none() -> None:
    body = up()
    assert not {"traceparent", "tracestate", "removal_kind"} & body.keys()  # nothing traced: nothing written
    action = decode_action(json.dumps(body))
    assert (action.traceparent, action.tracestate) == ("", "")
    traced = decode_action(json.dumps({**body, "traceparent": TRACEPARENT}))
    assert traced.traceparent == TRACEPARENT and "tracestate" not in json.loads(encode_action(traced))


@pytest.mark.parametrize("field,value", [
    ("traceparent", "not-a-traceparent"),
    ("traceparent", 42),
    ("traceparent", "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"),  # W3C: lowercase hex only
    ("tracestate", "x" * 600),
])
def test_malformed_trace_context_is_dropped_never_a_rejection(field: str, value: object) -> None:
    body = {**up(), "traceparent": TRACEPARENT, field: value}
    action = decode_action(json.dumps(body))
    assert action.tracestate == ""
    assert action.traceparent == ("" if field == "traceparent" else TRACEPARENT)


def test_removal_kind_is_informational() -> None:
    down = json.loads(encode_action(new_scale_down(action_id="d", group="g", targets=[RemovalTarget("a", "pa")],
                                                   now=T0, ttl=timedelta(minutes=1), removal_kind="drain")))
    assert decode_action(json.dumps(down)).removal_kind == "drain"
    assert decode_action(json.dumps({**down, "removal_kind": ["drain"]})).removal_kind == ""
    scale_up = decode_action(json.dumps({**up(), "removal_kind": "empty"}))
    assert isinstance(scale_up, ScaleUp) and not hasattr(scale_up, "removal_kind")  # scale-ups have none


# --- backfill (issue 17): one pod moved off a virtual node --------------------------------------------------------

def _backfill_body(**changes: object) -> dict[str, object]:
    from shared.actions import new_backfill
    action = new_backfill(node="virtual-node-aci-linux", namespace="web", pod="web-0", uid="u-1", to="pool-0",
                          now=T0, ttl=timedelta(minutes=5), reason="why")
    body = json.loads(encode_action(action))
    body.update(changes)
    return body


def test_a_backfill_round_trips() -> None:
    from shared.actions import Backfill
    decoded = decode_action(json.dumps(_backfill_body()))
    assert isinstance(decoded, Backfill)
    assert (decoded.group, decoded.pod_key, decoded.uid, decoded.to, decoded.step) == (
        "virtual-node-aci-linux", "web/web-0", "u-1", "pool-0", "evict")
    assert json.loads(encode_action(decoded)) == _backfill_body()


@pytest.mark.parametrize("changes,problem", [
    ({"pod": {"namespace": "web", "name": "web-0"}}, "exactly 'namespace', 'name' and 'uid'"),
    ({"pod": {"namespace": "web", "name": "", "uid": "u"}}, "non-empty strings"),
    ({"pod": {"namespace": "Web!", "name": "web-0", "uid": "u"}}, "is not a Kubernetes name"),
    ({"step": "drain"}, "unknown step 'drain' for backfill"),
    ({"version": 2}, "a backfill is a version 3 message"),
    ({"nodes": []}, "a backfill has no field(s) nodes"),
    ({"group": "x" * 300}, "at most 253"),
])
def test_a_malformed_backfill_is_refused_naming_what_is_wrong(changes: dict[str, object], problem: str) -> None:
    with pytest.raises(InvalidAction, match=re.escape(problem)):
        decode_action(json.dumps(_backfill_body(**changes)))
