"""In-memory StateStore (shared.services.memory_state's, also the `plan` command's) and ActionQueue for the replay.

The replay measures decisions, not storage (the Azurite-backed adapters have their own tests), so
state lives in dicts. Both keep the contracts the services rely on: etag compare-and-swap on group
rows and ledger entries, first-writer-wins ledger creation, and queue messages that stay invisible
for their delay, come back after a failed delivery and go to poison after `max_dequeue_count`. What
the Azure adapters refuse, they refuse too (tests/contract): here, a delay no storage queue can hold.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from shared.actions import ScaleAction, ScaleDownRound, encode_message
from shared.services.memory_state import MemoryStateStore

__all__ = ["MemoryQueue", "MemoryStateStore", "Message"]

# A storage queue's longest visibility timeout. StorageActionQueue (shared.adapters.action_queue, not
# imported: it would load the queue SDK into every replay) refuses a delay outside 0 to 7 days.
MAX_DELAY = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class Message:
    text: str
    dequeue_count: int = 0


class MemoryQueue:
    """A storage queue in sim time: `clock` says when `send` happens, `take_due` hands out visible messages."""

    def __init__(self, clock: object, *, max_dequeue_count: int = 5, visibility_timeout: timedelta = timedelta(0)) -> None:
        self._clock = clock
        self._heap: list[tuple[datetime, int, Message]] = []
        self._seq = itertools.count()
        self.max_dequeue_count = max_dequeue_count
        self.visibility_timeout = visibility_timeout
        self.poison: list[str] = []
        self.sent = 0

    def send(self, action: ScaleAction | ScaleDownRound, *, delay: timedelta = timedelta(0)) -> None:
        if delay < timedelta(0) or delay > MAX_DELAY:
            raise ValueError(f"a queue visibility delay must be between 0 and 7 days, got {delay}")
        self.sent += 1
        self._push(self._clock.now() + delay, Message(encode_message(action)))  # type: ignore[attr-defined]

    def send_poison(self, text: str) -> None:
        self.poison.append(text)

    def _push(self, visible_at: datetime, message: Message) -> None:
        heapq.heappush(self._heap, (visible_at, next(self._seq), message))

    def next_visible(self) -> datetime | None:
        return self._heap[0][0] if self._heap else None

    def take_due(self, now: datetime) -> Message | None:
        if self._heap and self._heap[0][0] <= now:
            return heapq.heappop(self._heap)[2]
        return None

    def failed(self, message: Message, now: datetime) -> None:
        """The delivery raised: the host makes the message visible again, or poisons it after the last try."""
        tries = message.dequeue_count + 1
        if tries >= self.max_dequeue_count:
            self.poison.append(message.text)
        else:
            self._push(now + self.visibility_timeout, replace(message, dequeue_count=tries))

    def __len__(self) -> int:
        return len(self._heap)
