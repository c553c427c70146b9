"""The action queue against the sandbox: a delay the app asks for is sim seconds, as it is real seconds in Azure.

Storage hides a message for whole wall seconds. Against the sandbox, whose clock runs at `speed` and stands
still while the runner holds it, a step told to wait d seconds would run anywhere from d to d * speed sim
seconds later, depending on how busy the machine is: a scenario's figures would measure the machine. So,
only when the runner runs on a sandbox's clock:

- a delayed message is hidden for d / speed wall seconds (rounded up to a whole second by Storage), and its
  due time in sim seconds is kept;
- the runner lets the clock run no further than the earliest due time of a message it can take
  (`next_due`), so a step never lands late because Storage rounds or the machine is slow;
- a message received before its due time (the clock was held while its wall delay ran) is sent again,
  hidden for what remains, and the early copy deleted, so a step never lands early either.

What is tracked is only what this process sent: after a runner restart, or for a message that never shows
up (another consumer took it), the queue's own wall-time delay applies, and the entry lapses after a
few wall seconds so it cannot stop the clock.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from devtools.sandbox_clock import SandboxClock

log = logging.getLogger("devtools.sim_time_queue")

# A message received this close before its due time runs: resending it would cost a whole wall second.
EARLY_TOLERANCE = timedelta(seconds=1)
# Wall seconds past its expected visibility after which an untaken message no longer bounds the clock.
LAPSE_WALL_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class _Pending:
    due: datetime  # sim time the app asked for
    visible_by: float  # time.monotonic() by which Storage shows it


class SimTimeQueue:
    """A StorageActionQueue whose delays are in the sandbox's sim time (everything else passes through)."""

    def __init__(self, inner: Any, clock: SandboxClock) -> None:
        self._inner = inner
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}
        self.resent = 0  # early deliveries sent again for what remained of their delay

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def send(self, action: Any, *, delay: timedelta = timedelta(0)) -> str:
        if delay <= timedelta(0):
            return str(self._inner.send(action, delay=delay))
        due = self._clock.now() + delay
        wall = self._wall(delay)
        message_id = str(self._inner.send(action, delay=wall))
        self._track(message_id, due, wall)
        return message_id

    def next_due(self) -> datetime | None:
        """The earliest sim time a delayed message this process sent is due (None: none outstanding)."""
        now = time.monotonic()
        with self._lock:
            for message_id in [m for m, p in self._pending.items() if now > p.visible_by + LAPSE_WALL_SECONDS]:
                log.debug("message %s did not show up in time; its wall delay applies", message_id)
                del self._pending[message_id]
            return min((p.due for p in self._pending.values()), default=None)

    def receive(self, max_messages: int, *, visibility_timeout: timedelta) -> list[Any]:
        """The received messages that are due; those received early go back for what remains."""
        messages = self._inner.receive(max_messages, visibility_timeout=visibility_timeout)
        now = self._clock.now()
        ready = []
        for message in messages:
            with self._lock:
                pending = self._pending.pop(message.id, None)
            if pending is None or pending.due - now <= EARLY_TOLERANCE:
                ready.append(message)
                continue
            remaining = pending.due - now
            wall = self._wall(remaining)
            # Send the copy before deleting the original: a crash in between delivers twice, never never.
            self._track(str(self._inner.send_raw(message.body_text, delay=wall)), pending.due, wall)
            self._inner.delete(message)
            self.resent += 1
        return ready

    def _wall(self, delay: timedelta) -> timedelta:
        return timedelta(seconds=delay.total_seconds() / self._clock.speed)

    def _track(self, message_id: str, due: datetime, wall: timedelta) -> None:
        # Storage rounds the visibility up to a whole second.
        visible_by = time.monotonic() + max(1.0, -(-wall.total_seconds() // 1))
        with self._lock:
            self._pending[message_id] = _Pending(due, visible_by)
