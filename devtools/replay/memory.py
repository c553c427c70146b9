"""In-memory StateStore and ActionQueue for the replay.

The replay measures decisions, not storage (the Azurite-backed adapters have their own tests), so
state lives in dicts. Both keep the contracts the services rely on: etag compare-and-swap on group
rows and ledger entries, first-writer-wins ledger creation, and queue messages that stay invisible
for their delay, come back after a failed delivery and go to poison after `max_dequeue_count`.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from shared.actions import ScaleAction, encode_action
from shared.domain import GroupState
from shared.ports import LedgerEntry


class MemoryStateStore:
    def __init__(self) -> None:
        self._groups: dict[str, GroupState] = {}
        self._unneeded: dict[str, datetime] = {}
        self._ledger: dict[str, LedgerEntry] = {}
        self._etags = itertools.count(1)

    def _etag(self) -> str:
        return f'W/"{next(self._etags)}"'

    def get_group(self, group_id: str) -> GroupState:
        return self._groups.get(group_id) or GroupState(group_id=group_id)

    def update_group(self, state: GroupState) -> bool:
        current = self._groups.get(state.group_id)
        if (current.etag if current else None) != state.etag:
            return False
        self._groups[state.group_id] = replace(state, etag=self._etag())
        return True

    def list_unneeded(self) -> dict[str, datetime]:
        return dict(self._unneeded)

    def set_unneeded(self, node_name: str, since: datetime) -> None:
        self._unneeded[node_name] = since

    def clear_unneeded(self, node_name: str) -> None:
        self._unneeded.pop(node_name, None)

    def get_ledger_entry(self, action_id: str) -> LedgerEntry | None:
        return self._ledger.get(action_id)

    def create_ledger_entry(self, entry: LedgerEntry) -> bool:
        if entry.action_id in self._ledger:
            return False
        self._ledger[entry.action_id] = replace(entry, etag=self._etag())
        return True

    def update_ledger_entry(self, entry: LedgerEntry) -> bool:
        current = self._ledger.get(entry.action_id)
        if current is None or entry.etag is None or current.etag != entry.etag:
            return False
        self._ledger[entry.action_id] = replace(entry, etag=self._etag())
        return True

    def list_ledger(self) -> list[LedgerEntry]:
        return list(self._ledger.values())


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

    def send(self, action: ScaleAction, *, delay: timedelta = timedelta(0)) -> None:
        self.sent += 1
        self._push(self._clock.now() + delay, Message(encode_action(action)))  # type: ignore[attr-defined]

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
