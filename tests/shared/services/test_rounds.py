"""Scale-down rounds (issue 14, item 4): a freed slot is handed out without waiting for the next tick.

Against Table storage (Azurite) and the in-memory store alike: one round is pending at a time, only
the pending one runs, a duplicate, stale or forged one is dropped, and a lost one stops counting.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.actions import ScaleAction, ScaleDownRound, decode_message, encode_message, InvalidAction
from shared.ports import Ports, StateStore
from shared.services.memory_state import MemoryStateStore
from shared.services.rounds import request_round, take_round
from shared.settings import load_settings

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
BASE = {"CLUSTER_NAME": "c", "AZURE_SUBSCRIPTION_ID": "s", "NODE_RESOURCE_GROUPS": "rg", "KUBECONFIG_PATH": "/k"}
SETTINGS = load_settings({**BASE, "SCALE_DOWN_ROUND_INTERVAL": "15s", "ACTION_TTL": "5m"})


class _Queue:
    def __init__(self) -> None:
        self.sent: list[tuple[ScaleAction | ScaleDownRound, timedelta]] = []

    def send(self, message: ScaleAction | ScaleDownRound, *, delay: timedelta = timedelta(0)) -> None:
        # Through the wire format, as the host would deliver it.
        decoded = decode_message(encode_message(message))
        self.sent.append((decoded, delay))

    def send_poison(self, text: str) -> None:
        raise AssertionError("rounds never poison")


@pytest.fixture(params=["table", "memory"])
def store(request: pytest.FixtureRequest) -> StateStore:
    if request.param == "memory":
        return MemoryStateStore()
    return request.getfixturevalue("state_store")  # type: ignore[no-any-return]


def _ports(store: StateStore) -> tuple[Ports, _Queue]:
    queue = _Queue()
    return Ports(cluster=None, provider=None, state=store, queue=queue, clock=None, events=None), queue  # type: ignore[arg-type]


def test_one_round_is_pending_at_a_time_and_only_it_runs(store: StateStore) -> None:
    ports, queue = _ports(store)
    first = request_round(ports, SETTINGS, now=NOW)
    assert first is not None and queue.sent == [(first, timedelta(seconds=15))]
    # Another poll meanwhile (the timer's, or a second chain) asks for none: rounds never multiply.
    assert request_round(ports, SETTINGS, now=NOW + timedelta(seconds=5)) is None and len(queue.sent) == 1

    later = NOW + timedelta(seconds=15)
    assert take_round(ports, SETTINGS, first, now=later)
    assert not take_round(ports, SETTINGS, first, now=later)  # its duplicate delivery is dropped
    # Taken, it is no longer pending: the poll it runs may ask for the next one.
    second = request_round(ports, SETTINGS, now=later)
    assert second is not None and second.id != first.id
    assert not take_round(ports, SETTINGS, first, now=later + timedelta(seconds=15))  # a stale round
    forged = ScaleDownRound(id="scale_down_round:forged", created_at=later, expires_at=later + timedelta(minutes=5))
    assert not take_round(ports, SETTINGS, forged, now=later + timedelta(seconds=15))
    assert take_round(ports, SETTINGS, second, now=later + timedelta(seconds=15))


def test_a_lost_round_stops_counting_after_the_action_ttl(store: StateStore) -> None:
    ports, queue = _ports(store)
    lost = request_round(ports, SETTINGS, now=NOW)
    assert lost is not None
    stale = NOW + SETTINGS.scale_down_round_interval + SETTINGS.action_ttl
    assert request_round(ports, SETTINGS, now=stale - timedelta(seconds=1)) is None
    replacement = request_round(ports, SETTINGS, now=stale)
    assert replacement is not None and replacement.id != lost.id
    # The lost one, delivered at last, is not the pending round.
    assert not take_round(ports, SETTINGS, lost, now=stale + timedelta(seconds=1))


def test_a_round_too_long_in_the_queue_is_dropped(store: StateStore) -> None:
    ports, _ = _ports(store)
    round_ = request_round(ports, SETTINGS, now=NOW)
    assert round_ is not None
    late = NOW + SETTINGS.scale_down_round_interval + SETTINGS.action_ttl + timedelta(seconds=1)
    assert not take_round(ports, SETTINGS, round_, now=late)
    assert request_round(ports, SETTINGS, now=late) is not None  # nothing pending any more


def test_rounds_off(store: StateStore) -> None:
    ports, queue = _ports(store)
    off = load_settings({**BASE, "SCALE_DOWN_ROUND_INTERVAL": "0s"})
    assert request_round(ports, off, now=NOW) is None and queue.sent == []


@pytest.mark.parametrize("body, problem", [
    ('{"version":2,"kind":"scale_down_round","id":"r","created_at":"2026-11-25T12:00:00Z",'
     '"expires_at":"2026-11-25T12:05:00Z","group":"rg/pool"}', "has no field(s) group"),
    ('{"version":1,"kind":"scale_down_round","id":"r","created_at":"2026-11-25T12:00:00Z",'
     '"expires_at":"2026-11-25T12:05:00Z"}', "unknown schema version 1"),
    ('{"version":2,"kind":"scale_down_round","created_at":"2026-11-25T12:00:00Z",'
     '"expires_at":"2026-11-25T12:05:00Z"}', "missing field(s): id"),
    ('{"version":2,"kind":"scale_down_round","id":"r","created_at":"2026-11-25T12:00:00Z",'
     '"expires_at":"2026-11-25T11:05:00Z"}', "expires_at is before created_at"),
])
def test_a_malformed_round_is_rejected_naming_the_problem(body: str, problem: str) -> None:
    with pytest.raises(InvalidAction, match=problem.replace("(", r"\(").replace(")", r"\)")):
        decode_message(body)
