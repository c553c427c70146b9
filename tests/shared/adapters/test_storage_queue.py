"""StorageActionQueue against a real storage queue (Azurite), read back the way the Functions host reads it."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
from azure.storage.queue import QueueClient, TextBase64DecodePolicy

from shared.actions import RemovalTarget, ScaleAction, decode_action, encode_action, new_scale_down, new_scale_up
from shared.adapters.action_queue import StorageActionQueue, visibility_seconds
from shared.adapters.storage_connection import StorageConnection
from shared.settings import load_settings

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
ACTIONS = [
    pytest.param(
        new_scale_up(action_id="up-1", group="rg/pool", target_size=3, now=T0, ttl=timedelta(minutes=5)), id="scale-up"
    ),
    pytest.param(
        new_scale_down(
            action_id="down-1",
            group="rg/pool",
            targets=[RemovalTarget("node-1", "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/"
                                   "virtualMachineScaleSets/pool/virtualMachines/1")],
            now=T0,
            ttl=timedelta(minutes=5),
            reason="idle: cpu 3%",
        ),
        id="scale-down",
    ),
]


def host_client(connection: StorageConnection, queue_name: str) -> QueueClient:
    """A reader configured as the Functions host is (messageEncoding base64)."""
    return QueueClient.from_connection_string(
        connection.connection_string, queue_name, message_decode_policy=TextBase64DecodePolicy()
    )


def wait_for(condition: Callable[[], bool], *, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.parametrize("action", ACTIONS)
def test_sent_action_reaches_the_host_as_base64_json(
    action_queue: StorageActionQueue, storage_connection: StorageConnection, queue_name: str, action: ScaleAction
) -> None:
    action_queue.send(action)
    with QueueClient.from_connection_string(storage_connection.connection_string, queue_name) as raw:
        stored = [message.content for message in raw.peek_messages()]
    assert stored == [base64.b64encode(encode_action(action).encode()).decode()]
    with host_client(storage_connection, queue_name) as host:
        received = list(host.receive_messages(max_messages=1))
    assert len(received) == 1
    assert decode_action(received[0].content) == action


@pytest.mark.parametrize(
    ("delay", "seconds"),
    [
        (timedelta(0), 0),
        (timedelta(milliseconds=1), 1),
        (timedelta(seconds=2.5), 3),
        (timedelta(seconds=10), 10),
        (timedelta(days=7), 604_800),
    ],
)
def test_visibility_delay_rounds_up_to_whole_seconds(delay: timedelta, seconds: int) -> None:
    assert visibility_seconds(delay) == seconds


@pytest.mark.parametrize("delay", [timedelta(seconds=-1), timedelta(days=7, seconds=1)])
def test_visibility_delay_outside_what_azure_allows_is_refused(
    action_queue: StorageActionQueue, delay: timedelta
) -> None:
    with pytest.raises(ValueError, match="7 days"):
        action_queue.send_raw("x", delay=delay)


def test_delayed_message_is_invisible_then_visible(action_queue: StorageActionQueue) -> None:
    action_queue.send_raw("later", delay=timedelta(seconds=1.5))  # rounded up to 2 s
    sent_at = time.monotonic()
    assert action_queue.peek() == []
    assert action_queue.receive(visibility_timeout=timedelta(seconds=30)) == []
    assert action_queue.count() == 1  # counted while invisible
    assert wait_for(lambda: action_queue.peek() == ["later"], timeout=5)
    assert time.monotonic() - sent_at >= 1.0


def test_receive_hides_then_delete_removes(action_queue: StorageActionQueue) -> None:
    action_queue.send_raw("not json")
    [message] = action_queue.receive(visibility_timeout=timedelta(seconds=30))
    assert (message.body_text, message.dequeue_count, message.well_encoded) == ("not json", 1, True)
    assert message.id and message.pop_receipt
    assert action_queue.receive(visibility_timeout=timedelta(seconds=30)) == []  # taken: hidden from others
    action_queue.delete(message)
    assert action_queue.count() == 0


def test_redelivery_counts_dequeues(action_queue: StorageActionQueue) -> None:
    action_queue.send_raw("flaky")
    first = action_queue.receive(visibility_timeout=timedelta(seconds=1))
    assert wait_for(lambda: action_queue.peek() == ["flaky"], timeout=5)
    second = action_queue.receive(visibility_timeout=timedelta(seconds=30))
    assert [m.dequeue_count for m in first + second] == [1, 2]


def test_receive_takes_at_most_one_batch(action_queue: StorageActionQueue) -> None:
    for index in range(5):
        action_queue.send_raw(f"m{index}")
    batch = action_queue.receive(3, visibility_timeout=timedelta(seconds=30))
    assert len(batch) == 3
    assert action_queue.count() == 5


def test_message_that_is_not_base64_is_received_flagged(action_queue: StorageActionQueue) -> None:
    action_queue.send_raw("{not base64}", base64_encode=False)
    action_queue.send_raw("fine")
    received = action_queue.receive(visibility_timeout=timedelta(seconds=30))
    assert [(m.body_text, m.well_encoded) for m in received] == [("{not base64}", False), ("fine", True)]


@pytest.mark.parametrize(
    ("max_messages", "visibility_timeout"),
    [(0, timedelta(seconds=30)), (33, timedelta(seconds=30)), (1, timedelta(0))],
)
def test_receive_refuses_what_azure_would_reject(
    action_queue: StorageActionQueue, max_messages: int, visibility_timeout: timedelta
) -> None:
    with pytest.raises(ValueError):
        action_queue.receive(max_messages, visibility_timeout=visibility_timeout)


def test_send_poison_goes_to_the_poison_queue_only(
    action_queue: StorageActionQueue, storage_connection: StorageConnection, queue_name: str
) -> None:
    action_queue.send_poison('{"version": 99}')
    assert action_queue.count() == 0
    poison = action_queue.poison()
    assert poison.name == f"{queue_name}-poison"
    assert poison.peek() == ['{"version": 99}']
    with host_client(storage_connection, f"{queue_name}-poison") as host:
        assert [m.content for m in host.peek_messages()] == ['{"version": 99}']


def test_clear_empties_the_queue(action_queue: StorageActionQueue) -> None:
    action_queue.send_raw("a")
    action_queue.send_raw("b", delay=timedelta(seconds=60))
    action_queue.clear()
    assert action_queue.count() == 0


def test_from_settings_uses_the_configured_queue(storage_connection: StorageConnection, queue_name: str) -> None:
    env = {
        "CLUSTER_NAME": "c1",
        "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000",
        "NODE_RESOURCE_GROUPS": "rg",
        "KUBECONFIG_PATH": "/tmp/kubeconfig",
        "SCALE_ACTIONS_QUEUE": queue_name,
        "AzureWebJobsStorage": storage_connection.connection_string,
    }
    with StorageActionQueue.from_settings(load_settings(env), env=env) as queue:
        queue.send_raw("hello")
    with host_client(storage_connection, queue_name) as host:
        assert [m.content for m in host.peek_messages()] == ["hello"]

