"""Hostile values in a scale-action message: an integer past the Table's Int32 column, text that is not valid Unicode.

Written as someone with write access to the action queue would send them. Each used to fail deep inside a step (the
Table SDK's TypeError for an int of 2**31, its encoder or the kubernetes client for a lone surrogate) with no ledger
row; each is now refused when the message is read: one rejection in the ledger, the message on the poison queue,
nothing touched in ARM or the cluster. On both apps of test_executor.py: `real` (Azurite's Table, the sandbox over
HTTPS) and `memory`.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from shared.actions import MAX_INTEGER, encode_action, new_backfill
from tests.shared.services.test_executor import (  # noqa: F401 (app, make: fixtures)
    GROUP, TTL, App, app, make, scale_down, scale_up)

# What a message can make the executor do in ARM: none of it may happen for a refused message.
ARM_WRITES = ("PATCH virtualMachineScaleSets", "POST delete", "POST deallocate", "POST start",
              "POST deleteInstances", "POST deallocateInstances", "POST startInstances")


def _down(app: App, **changes: Any) -> str:
    return scale_down(app, app.busy_and_idle()[1][0], **changes)


def _down_node(app: App, name: str) -> str:
    """A scale-down of an idle node, with the node's name in the message replaced by `name`."""
    body = json.loads(_down(app))
    body["nodes"][0]["name"] = name
    return json.dumps(body)


def _backfill(app: App, **changes: Any) -> str:
    action = new_backfill(node="virtual-node-aci-linux", namespace="default", pod="web-0", uid="u-1", to=GROUP,
                          now=app.clock.now(), ttl=TTL)
    return json.dumps({**json.loads(encode_action(action)), **changes})


def _raw(text: str) -> bytes:
    """The message's bytes with its `\\ud800` escape written out as the UTF-8 bytes of the surrogate itself."""
    return text.replace("\\ud800", "\\u0000").encode().replace(b"\\u0000", b"\xed\xa0\x80")


LONE = "\ud800"  # a lone surrogate: json.dumps writes it as the escape \ud800, which json.loads reads back

HOSTILE: list[tuple[str, Any, str]] = [
    # Integers: the ledger's ProgressAttempt column is Edm.Int32; sizes are counts no scale set comes near.
    ("attempt 2**31 on a scale-up", lambda app: scale_up(app, 4, attempt=MAX_INTEGER + 1), "attempt must be"),
    ("attempt 2**31 on a removal", lambda app: _down(app, attempt=2**31), "attempt must be"),
    ("attempt 2**63 on a backfill", lambda app: _backfill(app, attempt=2**63), "attempt must be"),
    ("target_size 2**31", lambda app: scale_up(app, 2**31), "target_size must be a positive integer of at most"),
    ("from_size 2**40", lambda app: scale_up(app, 4, from_size=2**40), "from_size must be a non-negative integer"),
    ("resized_to 2**31", lambda app: scale_up(app, 4, resized_to=2**31), "resized_to must be a positive integer"),
    # Text that is not Unicode: a Table key, a Kubernetes API path or a ledger column would fail on it.
    ("surrogate in a scale-up id", lambda app: scale_up(app, 4, id=f"up-{LONE}"), "field 'id' is not valid Unicode"),
    ("surrogate in a group", lambda app: scale_up(app, 4, group=f"{GROUP}{LONE}"), "field 'group' is not valid"),
    ("surrogate in a reason", lambda app: scale_up(app, 4, reason=f"pending {LONE}"), "field 'reason' is not valid"),
    ("surrogate in a removal id", lambda app: _down(app, id=f"scale-down:{LONE}"), "field 'id' is not valid Unicode"),
    ("surrogate in a node name", lambda app: _down_node(app, f"node-{LONE}"), "field 'nodes[0].name' is not valid"),
    ("surrogate in start_instances", lambda app: scale_up(app, 4, start_instances=["1", LONE]),
     "field 'start_instances[1]' is not valid"),
    ("surrogate in a pod uid", lambda app: _backfill(app, pod={"namespace": "default", "name": "web-0", "uid": LONE}),
     "field 'pod.uid' is not valid Unicode"),
    ("surrogate in tracestate", lambda app: scale_up(app, 4, traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01",
                                                     tracestate=f"k={LONE}"), "field 'tracestate' is not valid"),
    ("surrogate in a key", lambda app: scale_up(app, 4, **{f"x{LONE}": 1}), "is not valid Unicode"),
    ("surrogate as raw UTF-8 bytes", lambda app: _raw(scale_up(app, 4, id=f"up-{LONE}")), "field 'id' is not valid"),
]


def _touched(app: App) -> tuple[Any, ...]:
    """What a message could change: ARM writes, nodes, cordons, pods, the group's reservations."""
    pods = sorted(f"{p.namespace}/{p.name}@{p.node_name}" for p in app.context.ports.cluster.list_pods())
    cordoned = sorted(n.name for n in app.context.ports.cluster.list_nodes() if n.unschedulable)
    removing = dict(app.context.ports.state.get_group(GROUP).removing)
    return {op: app.arm_calls(op) for op in ARM_WRITES}, app.node_names(), cordoned, pods, removing


@pytest.mark.parametrize("case_id,build,reason", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_a_hostile_value_is_refused_with_a_ledger_row_and_nothing_touched(
    app: App, case_id: str, build: Any, reason: str
) -> None:
    message = build(app)
    before = _touched(app)

    result = app.run(message)

    assert result.outcome == "rejected" and reason in result.detail, result.detail
    [entry] = app.context.ports.state.list_ledger()  # written: the Table took the row
    assert entry.outcome.startswith("rejected") and reason in entry.outcome
    entry.outcome.encode("utf-8")  # what was stored is text the Table and the logs can carry
    assert len(app.poison()) == 1
    app.clock.advance(timedelta(seconds=5).total_seconds())
    assert _touched(app) == before


@pytest.mark.parametrize("attempt", [0, MAX_INTEGER])
def test_the_bounds_themselves_are_accepted(app: App, attempt: int) -> None:
    """The largest attempt the Int32 column holds is still read and stored; the refusal is only past it."""
    result = app.run(scale_up(app, 4, attempt=attempt))
    assert result.outcome == "waiting", result
    [entry] = app.context.ports.state.list_ledger()
    assert entry.progress == (0, attempt)
