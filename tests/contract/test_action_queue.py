"""The ActionQueue contract: StorageActionQueue on Azurite and the replay's MemoryQueue.

The port only sends; what comes back is read the way each implementation offers (a receive on the
storage queue, `take_due` in sim time), decoded with `shared.actions.decode_message` as the executor does.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from shared.actions import RemovalTarget, ScaleDown, ScaleUp, decode_message, new_scale_down, new_scale_down_round
from tests.contract.sides import QueueSide

T0 = datetime(2030, 1, 7, 9, 0, 0, 250000, tzinfo=UTC)
TTL = timedelta(minutes=10)
PROVIDER_ID = ("azure:///subscriptions/s/resourceGroups/rg-contract/providers/Microsoft.Compute/"
               "virtualMachineScaleSets/pool-a/virtualMachines/1")

SCALE_UP = ScaleUp(
    id="scale-up:rg-contract/pool-a:20300107T090000Z", group="rg-contract/pool-a", created_at=T0,
    expires_at=T0 + TTL, step="confirm", reason="3 pending pods", attempt=2, step_started_at=T0 + timedelta(seconds=30),
    traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", tracestate="congo=t61rcWkgMzE",
    target_size=4, from_size=2, resized_to=5, starting=("3",),
)
SCALE_DOWN = new_scale_down(
    action_id="scale-down:pool-a000001:20300107T090000Z", group="rg-contract/pool-a",
    targets=[RemovalTarget("pool-a000001", PROVIDER_ID)], now=T0, ttl=TTL, reason="idle: cpu 3%", removal_kind="drain",
)
BULK_DOWN = ScaleDown(
    id="scale-down:pool-a000001+1:20300107T090000Z", group="rg-contract/pool-a", created_at=T0, expires_at=T0 + TTL,
    step="delete", targets=(RemovalTarget("pool-a000001", PROVIDER_ID),
                            RemovalTarget("pool-a000002", PROVIDER_ID[:-1] + "2")), removal_kind="empty",
)
ROUND = new_scale_down_round(now=T0, ttl=TTL)
MESSAGES = [pytest.param(SCALE_UP, id="scale-up"), pytest.param(SCALE_DOWN, id="scale-down"),
            pytest.param(BULK_DOWN, id="bulk-scale-down"), pytest.param(ROUND, id="scale-down-round")]


@pytest.mark.parametrize("message", MESSAGES)
def test_what_is_sent_comes_back_decoded_the_same(queue: QueueSide, message: object) -> None:
    queue.port.send(message)  # type: ignore[arg-type]

    [text] = queue.take_visible()

    assert decode_message(text) == message
    assert queue.take_visible() == []  # taken once
    assert queue.poison() == []


def test_every_message_sent_comes_back_once(queue: QueueSide) -> None:
    sent = [SCALE_UP, SCALE_DOWN, ROUND, SCALE_UP]  # the same action twice: two messages (at-least-once)
    for message in sent:
        queue.port.send(message)

    received = [decode_message(text) for text in queue.take_visible()]

    assert Counter(m.id for m in received) == Counter(m.id for m in sent)


def test_a_delayed_message_is_invisible_until_its_delay_has_passed(queue: QueueSide) -> None:
    queue.port.send(SCALE_UP, delay=timedelta(seconds=1))
    queue.port.send(SCALE_DOWN)  # sent after, without delay: visible at once

    assert [decode_message(text) for text in queue.take_visible()] == [SCALE_DOWN]

    later = queue.take_eventually(1, after=timedelta(seconds=1))
    assert [decode_message(text) for text in later] == [SCALE_UP]


def test_a_poison_message_goes_to_the_poison_queue_only(queue: QueueSide) -> None:
    queue.port.send_poison('{"version": 99, "note": "not ours"}')

    assert queue.poison() == ['{"version": 99, "note": "not ours"}']
    assert queue.take_visible() == []


@pytest.mark.parametrize("delay", [timedelta(seconds=-1), timedelta(days=7, seconds=1)], ids=["negative", "over-7-days"])
def test_a_delay_no_storage_queue_can_hold_is_refused(queue: QueueSide, delay: timedelta) -> None:
    with pytest.raises(ValueError, match="7 days"):
        queue.port.send(SCALE_UP, delay=delay)
    assert queue.take_visible() == []  # nothing was sent


def test_the_longest_delay_a_storage_queue_holds_is_taken(queue: QueueSide) -> None:
    queue.port.send(SCALE_UP, delay=timedelta(days=7))

    assert queue.take_visible() == []
