"""`ActionQueue` on an Azure Storage queue, plus the receive side the dev runner and tests need.

Adapter module: every method does network I/O through azure-storage-queue.

Messages are base64 text, as the Functions host's queue trigger expects. The send side
uses the SDK's TextBase64EncodePolicy. The receive side (`receive`, `peek`) decodes by
hand instead of with TextBase64DecodePolicy: that policy fails the whole batch on one
message that is not base64 (azure-storage-queue 12.18 even raises AttributeError there),
while the host moves such a message to the poison queue; `ReceivedMessage.well_encoded`
lets a runner do the same.

`send` and `send_poison` are the port; `receive`, `delete`, `send_raw`, `peek`, `count`,
`clear` and `poison` are for development and tests only.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from azure.core.exceptions import ResourceExistsError
from azure.storage.queue import QueueClient, QueueMessage

from shared.actions import ScaleAction, ScaleDownRound, encode_message
from shared.adapters.storage_connection import (
    StorageConnection,
    queue_client,
    resolve_storage_connection,
    storage_errors,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from azure.core.credentials import TokenCredential

    from shared.actions import ScaleAction
    from shared.settings import Settings

POISON_SUFFIX = "-poison"  # the Functions host's name for a queue's poison queue
MAX_DELAY = timedelta(days=7)  # Azure's limit on a message's visibility timeout
MAX_BATCH = 32  # Azure's limit on messages per receive or peek


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """One delivery. `body_text` is the decoded text, or the raw text when `well_encoded` is False."""

    id: str
    pop_receipt: str
    body_text: str
    dequeue_count: int
    well_encoded: bool = True  # False: the stored text was not base64 of UTF-8; the host would poison it


class StorageActionQueue:
    """`shared.ports.ActionQueue` on one storage queue; the queue is created on first send if missing."""

    def __init__(
        self, connection: StorageConnection, queue_name: str, *, create_queue: bool = True, **client_options: Any
    ) -> None:
        """`client_options` go to the SDK's QueueClient (e.g. retry_total=0 to fail fast in tests)."""
        self._connection = connection
        self._client_options = client_options
        self._create_queue = create_queue
        self._name = queue_name
        # Writes go through the base64 policy; reads use a plain client and decode by hand (see module doc).
        self._client: QueueClient = queue_client(connection, queue_name, **client_options)
        self._raw: QueueClient = queue_client(connection, queue_name, base64=False, **client_options)
        self._endpoint = self._client.url
        self._queue_ready = not create_queue

    @classmethod
    def from_settings(
        cls, settings: Settings, *, env: Mapping[str, str], credential: TokenCredential | None = None
    ) -> StorageActionQueue:
        """The queue `settings.queue_name` on the host's storage connection."""
        return cls(resolve_storage_connection(settings, env, credential=credential), settings.queue_name)

    @property
    def name(self) -> str:
        return self._name

    def close(self) -> None:
        self._client.close()
        self._raw.close()

    def __enter__(self) -> StorageActionQueue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- the port --------------------------------------------------------------------

    def send(self, action: ScaleAction | ScaleDownRound, *, delay: timedelta = timedelta(0)) -> str:
        """Enqueue the action's JSON, invisible for `delay` (rounded up to whole seconds, at most 7 days);
        returns the queue's id of the message."""
        step = f" ({action.step})" if isinstance(action, ScaleAction) else ""
        return self._send(encode_message(action), delay=delay, what=f"send {action.id!r}{step}")

    def send_poison(self, text: str) -> None:
        """Put `text` on `<queue>-poison`, base64-encoded as the host writes poison messages."""
        with self.poison() as poison:
            poison.send_raw(text)

    # --- development and test helpers ----------------------------------------------------

    def send_raw(self, text: str, *, delay: timedelta = timedelta(0), base64_encode: bool = True) -> str:
        """Enqueue arbitrary text (malformed-message tests); base64_encode=False stores it as is. Returns its id."""
        if base64_encode:
            return self._send(text, delay=delay, what="send raw message")
        self._ensure_queue()
        with storage_errors("send unencoded message", endpoint=self._endpoint):
            return str(self._raw.send_message(text, visibility_timeout=visibility_seconds(delay)).id)

    def receive(self, max_messages: int = MAX_BATCH, *, visibility_timeout: timedelta) -> list[ReceivedMessage]:
        """Take up to `max_messages` visible messages, hidden from others for `visibility_timeout`."""
        if not 1 <= max_messages <= MAX_BATCH:
            raise ValueError(f"max_messages must be 1..{MAX_BATCH}, got {max_messages}")
        seconds = visibility_seconds(visibility_timeout)
        if seconds < 1:
            raise ValueError("a receive's visibility_timeout must be at least one second")
        self._ensure_queue()
        with storage_errors("receive messages", endpoint=self._endpoint):
            messages = self._raw.receive_messages(
                max_messages=max_messages,
                messages_per_page=max_messages,
                visibility_timeout=seconds,
            )
            # The pager fetches page after page; stop after one batch, as one host poll would.
            batch: list[QueueMessage] = list(next(messages.by_page(), []))
        received = []
        for message in batch:
            text, well_encoded = _decode(message.content)
            receipt, count = message.pop_receipt or "", message.dequeue_count or 0
            received.append(ReceivedMessage(message.id, receipt, text, count, well_encoded))
        return received

    def delete(self, message: ReceivedMessage) -> None:
        """Delete a received message (the host does this after the function succeeds)."""
        with storage_errors(f"delete message {message.id}", endpoint=self._endpoint):
            self._raw.delete_message(message.id, message.pop_receipt)

    def peek(self, max_messages: int = MAX_BATCH) -> list[str]:
        """The decoded texts of up to `max_messages` visible messages, without taking them."""
        self._ensure_queue()
        with storage_errors("peek messages", endpoint=self._endpoint):
            return [_decode(message.content)[0] for message in self._raw.peek_messages(max_messages=max_messages)]

    def count(self) -> int:
        """Approximate number of messages, invisible (delayed or in flight) ones included."""
        self._ensure_queue()
        with storage_errors("count messages", endpoint=self._endpoint):
            return self._raw.get_queue_properties().approximate_message_count or 0

    def clear(self) -> None:
        """Delete every message."""
        self._ensure_queue()
        with storage_errors("clear messages", endpoint=self._endpoint):
            self._raw.clear_messages()

    def poison(self) -> StorageActionQueue:
        """The `<queue>-poison` queue, with the same helpers."""
        return StorageActionQueue(
            self._connection,
            self._name + POISON_SUFFIX,
            create_queue=self._create_queue,
            **self._client_options,
        )

    # --- plumbing --------------------------------------------------------------------

    def _send(self, text: str, *, delay: timedelta, what: str) -> str:
        seconds = visibility_seconds(delay)
        self._ensure_queue()
        with storage_errors(what, endpoint=self._endpoint):
            return str(self._client.send_message(text, visibility_timeout=seconds).id)

    def _ensure_queue(self) -> None:
        # Once per instance, like the table: one request per worker, not per message.
        if self._queue_ready:
            return
        # The SDK raises ResourceExistsError for an existing queue, even on the service's 204.
        creating = storage_errors(f"create queue {self._name!r}", endpoint=self._endpoint)
        with creating, contextlib.suppress(ResourceExistsError):
            self._client.create_queue()
        self._queue_ready = True


def visibility_seconds(delay: timedelta) -> int:
    """The whole seconds of visibility timeout for `delay`: rounded up, 0 to 7 days."""
    if delay < timedelta(0) or delay > MAX_DELAY:
        raise ValueError(f"a queue visibility delay must be between 0 and 7 days, got {delay}")
    # Round up: a step told to wait 2.5 s must not run after 2.
    return math.ceil(delay.total_seconds())


def _decode(content: str | bytes | None) -> tuple[str, bool]:
    if isinstance(content, bytes):
        content = content.decode("utf-8", errors="replace")
    text = content or ""
    try:
        return base64.b64decode(text, validate=True).decode("utf-8"), True
    except (binascii.Error, UnicodeDecodeError):
        return text, False
