"""Read-modify-write of one Table row by ETag compare-and-swap: the one retry loop every service uses.

Each attempt reads the row, asks `change` what it should become, and writes only if nobody wrote the row
since the read (the store's update answers False on an ETag mismatch; the row is then read again).
`change` returns `(new_row, result)`: `new_row` None (or the row unchanged) means there is nothing to
write, and `result` is returned at once.

Giving up is the same everywhere: after `ATTEMPTS` lost races in a row, `StateConflict` is raised. Five
races in a row mean several writers hammer one row; the caller's work is retried as a whole (a poll on
its next schedule, an executor step by the queue's redelivery), never half-applied. A caller for which
losing has a better answer catches it and says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from shared.domain import GroupState
from shared.ports import StateStore

ATTEMPTS = 5

Row = TypeVar("Row")
Result = TypeVar("Result")


class StateConflict(RuntimeError):
    """A read-modify-write lost the race for its row ATTEMPTS times in a row."""


def read_modify_write(read: Callable[[], Row], write: Callable[[Row], bool],
                      change: Callable[[Row], tuple[Row | None, Result]], *, what: str,
                      known: Row | None = None) -> Result:
    """`change` applied to the row as read, written by compare-and-swap; its result once written (or not needed).

    `known` is a row the caller read a moment ago (with its ETag): the first attempt starts from it
    instead of reading again.
    """
    for attempt in range(ATTEMPTS):
        row = known if attempt == 0 and known is not None else read()
        new, result = change(row)
        if new is None or new == row or write(new):
            return result
    raise StateConflict(f"{what}: lost the race for the row {ATTEMPTS} times in a row")


def swap_group(state: StateStore, group_id: str, change: Callable[[GroupState], tuple[GroupState | None, Result]],
               *, what: str) -> Result:
    """read_modify_write of a group's state row."""
    return read_modify_write(lambda: state.get_group(group_id), state.update_group, change,
                             what=f"{what} (group {group_id})")


def update_group(state: StateStore, group_id: str, change: Callable[[GroupState], GroupState], *, what: str) -> None:
    """swap_group for a change that always applies and returns nothing."""
    swap_group(state, group_id, lambda s: (change(s), None), what=what)
