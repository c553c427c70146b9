"""A render queue's backlog mirrored in an Azure Storage queue, so that LOAD_BACKLOG_QUEUE reads the world's.

A render farm's jobs are messages in a Storage queue: the render manager enqueues one per frame as it
arrives, and the agent that takes a frame removes its message. `StorageBacklog` plays that on a real queue
(Azurite's, in the demo and tests): the world tells it, under the world's lock, which frame arrived and which
was taken (`arrived`, `taken`: a note in memory, no I/O), and a thread of its own sends and deletes the
messages in rounds, so the world's ticker never waits on storage. The world stays the truth; the queue's
length (its `approximate_message_count`, what the autoscaler's backlog adapter reads) follows it within a
round.

Each frame's message is deleted by the id and pop receipt its send returned (nothing else receives from the
queue), so a take removes that frame's own message, once. A frame arrived and taken within one round is never
sent. The notes are bounded: at most one send and one delete per frame wait at any time. A failed call is
logged and tried again in the next round, a second later.

The queue is part of the world, so sim time should not run on while it is behind: `on_pending(True)` is called
when notes start waiting and `on_pending(False)` when a round has caught up (or failed: a Storage outage must
not stop the world), which the server uses to hold its clock for those wall milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from azure.core.exceptions import AzureError, ResourceExistsError, ResourceNotFoundError
from azure.storage.queue import QueueClient

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0  # wall seconds between rounds after a failed call


class StorageBacklog:
    """The backlog of frames as messages in one Storage queue. `start()` it, feed it, `stop()` it."""

    def __init__(self, connection_string: str, queue_name: str, *, retry_seconds: float = RETRY_SECONDS,
                 on_pending: Callable[[bool], None] | None = None) -> None:
        """`on_pending`: told True when notes start waiting, False once they reached the queue or a round failed."""
        self.queue_name = queue_name
        self._on_pending = on_pending
        self._pending_told = False
        self._client = QueueClient.from_connection_string(connection_string, queue_name, retry_total=1)
        self._retry_seconds = retry_seconds
        self._changed = threading.Condition()
        # Notes from the world, under `_changed`: frames to send (in arrival order) and frames to delete.
        self._to_send: dict[int, None] = {}
        self._to_delete: dict[int, None] = {}
        self._in_round = False
        self._stopping = False
        # The thread's own: each frame's message in the queue, (id, pop receipt), and messages whose delete failed.
        self._messages: dict[int, tuple[str, str]] = {}
        self._undeleted: list[tuple[str, str]] = []
        self._sent = self._deleted = self._failures = 0
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> StorageBacklog:
        """Create the queue if needed and empty it (the world's backlog is the truth), then mirror in the background.

        Raises AzureError when the queue cannot be reached: a sandbox asked to publish must say so at start."""
        with contextlib.suppress(ResourceExistsError):
            self._client.create_queue()
        self._client.clear_messages()
        self._thread = threading.Thread(target=self._run, name=f"backlog-{self.queue_name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, *, flush_seconds: float = 2.0) -> None:
        """Let the notes already taken reach the queue (for at most `flush_seconds`), then end the thread."""
        if self._thread is None:
            return
        self.flush(timeout=flush_seconds)
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._thread.join(timeout=5)
        self._thread = None
        self._client.close()

    def flush(self, *, timeout: float) -> bool:
        """Wait until every note has reached the queue; False when `timeout` wall seconds were not enough."""
        with self._changed:
            return self._changed.wait_for(
                lambda: not (self._to_send or self._to_delete or self._undeleted or self._in_round), timeout=timeout)

    # ------------------------------------------------------------------ notes from the world (no I/O)

    def arrived(self, frame: int) -> None:
        """Frame `frame` joined the backlog (new, or put back after its worker stopped): its message is to be sent."""
        with self._changed:
            self._to_send[frame] = None
            self._noted()

    def taken(self, frame: int) -> None:
        """A worker took frame `frame`: its message is to be deleted (or, not sent yet, never sent)."""
        with self._changed:
            if frame in self._to_send:
                del self._to_send[frame]  # arrived and taken within one round: nothing reached the queue
                return
            self._to_delete[frame] = None
            self._noted()

    def _noted(self) -> None:
        """Wake the thread; tell `on_pending` the queue is behind. Call with `_changed` held."""
        if self._on_pending is not None and not self._pending_told:
            self._pending_told = True
            self._on_pending(True)
        self._changed.notify_all()

    def stats(self) -> dict[str, Any]:
        """`queue`, messages `sent` and `deleted` so far, calls that `failed`, notes `pending`."""
        with self._changed:
            return {"queue": self.queue_name, "sent": self._sent, "deleted": self._deleted, "failed": self._failures,
                    "pending": len(self._to_send) + len(self._to_delete) + len(self._undeleted)}

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._stopping or self._to_send or self._to_delete or self._undeleted)
                if self._stopping:
                    return
                deletes, sends = list(self._to_delete), list(self._to_send)
                self._to_delete.clear()
                self._to_send.clear()
                self._in_round = True
            # Deletes before sends: a frame put back after its take gets a new message once the old one is gone.
            failed = self._delete(deletes) + self._send(sends)
            with self._changed:
                self._in_round = False
                caught_up = not (self._to_send or self._to_delete or self._undeleted)
                if (caught_up or failed) and self._pending_told and self._on_pending is not None:
                    self._pending_told = False
                    self._on_pending(False)
                self._changed.notify_all()
                if failed:
                    self._changed.wait_for(lambda: self._stopping, timeout=self._retry_seconds)

    def _delete(self, frames: list[int]) -> int:
        """Delete these frames' messages, and again those whose delete failed before. Failures."""
        messages, self._undeleted = self._undeleted, []
        messages += [self._messages.pop(frame) for frame in frames if frame in self._messages]
        failed = 0
        for message in messages:
            try:
                self._client.delete_message(*message)
            except ResourceNotFoundError:
                log.warning("backlog queue %s: message %s was already gone", self.queue_name, message[0])
            except AzureError as exc:
                failed += 1
                log.warning("backlog queue %s: deleting message %s failed, will retry: %s",
                            self.queue_name, message[0], exc)
                self._undeleted.append(message)
                with self._changed:
                    self._failures += 1
                continue
            with self._changed:
                self._deleted += 1
        return failed

    def _send(self, frames: list[int]) -> int:
        """One message per frame, `{"frame": <number>}`. Failures."""
        failed = 0
        for frame in frames:
            try:
                sent = self._client.send_message(json.dumps({"frame": frame}))
            except AzureError as exc:
                failed += 1
                log.warning("backlog queue %s: sending frame %d failed, will retry: %s", self.queue_name, frame, exc)
                with self._changed:
                    self._failures += 1
                    if frame in self._to_delete:
                        del self._to_delete[frame]  # taken meanwhile: it need never be sent
                    else:
                        self._to_send[frame] = None
                continue
            self._messages[frame] = (sent.id, sent.pop_receipt)
            with self._changed:
                self._sent += 1
        return failed
