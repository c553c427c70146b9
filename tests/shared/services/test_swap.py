"""The one compare-and-swap loop (shared/services/swap.py): retried on a lost race, skipped when nothing
changes, and one way of giving up, StateConflict, after ATTEMPTS lost races in a row."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.domain import GroupState
from shared.services.memory_state import MemoryStateStore
from shared.services.swap import ATTEMPTS, StateConflict, read_modify_write, swap_group, update_group

GROUP = "rg/pool"


class Racing(MemoryStateStore):
    """A store in which another writer wins the next `losses` writes: each writes the row just before ours."""

    def __init__(self, losses: int) -> None:
        super().__init__()
        self.losses, self.writes = losses, 0

    def update_group(self, state: GroupState) -> bool:
        self.writes += 1
        if self.losses:
            self.losses -= 1
            current = super().get_group(state.group_id)
            assert super().update_group(replace(current, backoff_failures=current.backoff_failures + 1))
        return super().update_group(state)


def _reserve(node: str):  # type: ignore[no-untyped-def]
    def change(state: GroupState) -> tuple[GroupState | None, bool]:
        if node in state.removing:
            return None, False
        return replace(state, removing={**state.removing, node: "a1"}), True
    return change


@pytest.mark.parametrize("losses", [0, 1, ATTEMPTS - 1])
def test_a_lost_race_reads_again_and_applies_the_change_to_the_winner_s_row(losses: int) -> None:
    store = Racing(losses)
    assert swap_group(store, GROUP, _reserve("n1"), what="reserve n1") is True
    state = store.get_group(GROUP)
    assert state.removing == {"n1": "a1"} and state.backoff_failures == losses  # both writers' changes stand
    assert store.writes == losses + 1


def test_nothing_to_write_returns_the_result_without_writing() -> None:
    store = Racing(0)
    assert swap_group(store, GROUP, _reserve("n1"), what="reserve n1")
    writes = store.writes
    assert swap_group(store, GROUP, _reserve("n1"), what="reserve n1") is False
    update_group(store, GROUP, lambda s: s, what="no change")
    assert store.writes == writes


def test_losing_every_race_raises_state_conflict_naming_what_and_the_row() -> None:
    store = Racing(ATTEMPTS)
    with pytest.raises(StateConflict, match=r"reserve n1 \(group rg/pool\): lost the race for the row 5 times"):
        swap_group(store, GROUP, _reserve("n1"), what="reserve n1")
    assert "n1" not in store.get_group(GROUP).removing


def test_a_known_row_saves_the_first_read_and_a_stale_one_is_read_again() -> None:
    store = Racing(0)
    reads: list[str] = []

    def read() -> GroupState:
        reads.append("read")
        return store.get_group(GROUP)

    fresh = store.get_group(GROUP)
    assert read_modify_write(read, store.update_group, _reserve("n1"), what="reserve n1", known=fresh) is True
    assert reads == []  # the known row was current: written without a read
    # `fresh` is stale now (its ETag predates the write): the swap fails once, then reads the row.
    assert read_modify_write(read, store.update_group, _reserve("n2"), what="reserve n2", known=fresh) is True
    assert reads == ["read"] and set(store.get_group(GROUP).removing) == {"n1", "n2"}
