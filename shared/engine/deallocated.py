"""The cap on deallocated instances (SCALE_DOWN_MODE=deallocate): which stopped instances to delete.

Pure module. A deallocated instance costs its disks and holds a place in the scale set's
capacity; the group keeps at most `cap` of them, the ones deallocated most recently (the
likeliest to match what the group runs now), and the rest are deleted.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from shared.domain import GroupState, instance_order

_LONG_AGO = datetime.min.replace(tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True)
class DeallocatedTrim:
    delete: tuple[str, ...] = ()  # stopped instances beyond the cap, deallocated longest ago first
    forget: frozenset[str] = frozenset()  # listed as stopped, but gone or being deleted: off the list

    def apply(self, state: GroupState) -> GroupState:
        """The group row without the instances this trim deletes or forgets."""
        dropped = self.forget | set(self.delete)
        return replace(state, stopped=state.stopped - dropped,
                       stopped_at={i: at for i, at in state.stopped_at.items() if i not in dropped})


def trim_deallocated(state: GroupState, *, cap: int, present: Collection[str]) -> DeallocatedTrim:
    """What to delete and what to forget so that at most `cap` of the group's instances stay deallocated.

    `present`: the group's instances that exist and are not being deleted (a fresh ARM list).
    Oldest first by when we deallocated them; an instance without a time (a row written
    before times were kept) counts as the oldest; ties go by instance id, numerically.
    """
    live = [i for i in state.stopped if i in present]
    forget = frozenset(state.stopped - set(live))
    live.sort(key=lambda i: (state.stopped_at.get(i, _LONG_AGO), instance_order(i)), reverse=True)
    excess = live[max(cap, 0):]
    return DeallocatedTrim(delete=tuple(reversed(excess)), forget=forget)
