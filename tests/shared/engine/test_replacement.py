"""engine.replacement: when a replacement's capacity is Ready, and which entries are stale."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import DRIFTED, REPLACE, GroupState, Replacement, Taint
from shared.engine.replacement import (
    BACKOFF_OVER,
    GONE,
    TIMED_OUT,
    TOMBSTONE_FACTOR,
    ready_replacements,
    retry_at,
    stale_replacements,
)
from tests.builders import T0, group, node, snapshot

OLD = "rg/old"
NEW = "rg/new"
ASKED = T0 - timedelta(minutes=5)
TIMEOUT = timedelta(minutes=30)


def _new(name: str, instance: int, *, created: timedelta = timedelta(minutes=1), **kw: object):  # type: ignore[no-untyped-def]
    """A node of the `new` group created `created` after the replacement was asked (negative: before)."""
    return replace(node(name, group_name="new", instance=instance, **kw), created_at=ASKED + created)  # type: ignore[arg-type]


def _olds(*names: str) -> list:
    return [node(n, group_name="old", instance=i) for i, n in enumerate(names)]


def _entry(name: str, *, action: str = "up-1", count: int = 1, since=ASKED, to_group: str = NEW,  # type: ignore[no-untyped-def]
           together: tuple[str, ...] = ()) -> Replacement:
    return Replacement(name, REPLACE, to_group, since, action_id=action, count=count, together=together or (name,))


def _states(*entries: Replacement) -> dict[str, GroupState]:
    return {OLD: GroupState(OLD, replacing={e.node: e for e in entries})}


@pytest.mark.parametrize(("case", "new_nodes", "ready"), [
    ("no new node yet", [], False),
    ("a new node, Ready", [_new("fresh", 0)], True),
    ("a new node, not Ready yet", [_new("fresh", 0, ready=False)], False),
    ("a node older than the ask", [_new("fresh", 0, created=-timedelta(minutes=1))], False),
    ("a new node being deleted", [_new("fresh", 0, taints=(Taint("ToBeDeletedByClusterAutoscaler", "1",
                                                                   "NoSchedule"),))], False),
])
def test_one_node_is_ready_once_a_new_ready_node_of_its_target_exists(case, new_nodes, ready) -> None:  # type: ignore[no-untyped-def]
    snap = snapshot(groups=[group("old"), group("new")], nodes=[*_olds("a"), *new_nodes])
    assert set(ready_replacements(snap, _states(_entry("a")))) == ({"a"} if ready else set())


def test_nodes_replaced_together_share_the_count_and_are_ready_together() -> None:
    together = ("a", "b", "c")
    entries = [_entry(n, count=2, together=together) for n in together]
    one = snapshot(groups=[group("old"), group("new")], nodes=[*_olds(*together), _new("x", 0)])
    two = replace(one, nodes=(*one.nodes, _new("y", 1)))
    assert ready_replacements(one, _states(*entries)) == {}
    assert set(ready_replacements(two, _states(*entries))) == set(together)


def test_a_new_node_counts_for_one_replacement_only() -> None:
    # Two drifted nodes of one group, each replaced by one new node of the same group, asked a minute apart.
    first = replace(_entry("a", action="up-1", to_group=OLD), reason=DRIFTED)
    second = replace(_entry("b", action="up-2", to_group=OLD, since=ASKED + timedelta(minutes=1)), reason=DRIFTED)
    grown = replace(node("n-new", group_name="old", instance=9), created_at=ASKED + timedelta(minutes=2))
    snap = snapshot(groups=[group("old")], nodes=[*_olds("a", "b"), grown])
    ready = ready_replacements(snap, _states(first, second))
    assert len(ready) == 1
    # The node created after both asks serves the later ask; the earlier waits for its own.
    assert set(ready) == {"b"}


def test_a_node_being_replaced_is_no_replacement_for_another() -> None:
    # `b` is new enough for `a`'s ask, but is itself being replaced.
    b = replace(node("b", group_name="new", instance=1), created_at=ASKED + timedelta(minutes=1))
    states = {OLD: GroupState(OLD, replacing={"a": _entry("a")}),
              NEW: GroupState(NEW, replacing={"b": _entry("b", action="up-2", to_group=OLD)})}
    snap = snapshot(groups=[group("old"), group("new")], nodes=[*_olds("a"), b])
    assert "a" not in ready_replacements(snap, states)


@pytest.mark.parametrize(("case", "now", "present", "removing", "why"), [
    ("young, present", ASKED + timedelta(minutes=10), True, False, None),
    ("gone", ASKED + timedelta(minutes=10), False, False, GONE),
    ("past the timeout", ASKED + TIMEOUT + timedelta(seconds=1), True, False, TIMED_OUT),
    ("past the timeout but being removed", ASKED + TIMEOUT + timedelta(seconds=1), True, True, None),
    ("gone past the timeout", ASKED + TIMEOUT + timedelta(minutes=1), False, False, GONE),
])
def test_stale_entries(case, now, present, removing, why) -> None:  # type: ignore[no-untyped-def]
    snap = snapshot(groups=[group("old")], nodes=_olds("a") if present else [])
    state = GroupState(OLD, replacing={"a": _entry("a")}, removing={"a": "down-1"} if removing else {})
    stale = stale_replacements(snap, {OLD: state}, now=now, timeout=TIMEOUT)
    if why is None:
        assert stale == []
    else:
        assert [(g, n) for g, n, _ in stale] == [(OLD, "a")]
        assert stale[0][2].startswith(why)


GAVE_UP = ASKED + TIMEOUT + timedelta(minutes=1)


def _tombstone(name: str) -> Replacement:
    return replace(_entry(name), given_up_at=GAVE_UP)


def test_a_tombstone_is_never_forced_though_new_capacity_is_ready() -> None:
    snap = snapshot(groups=[group("old"), group("new")], nodes=[*_olds("a"), _new("fresh", 0)])
    assert set(ready_replacements(snap, _states(_entry("a")))) == {"a"}
    assert ready_replacements(snap, _states(_tombstone("a"))) == {}


def test_a_tombstone_takes_no_new_node_from_a_replacement_under_way() -> None:
    # `a` was asked after `b` and given up; the one new node is b's (a later ask would otherwise be served first).
    gave_up = replace(_entry("a", action="up-2", since=ASKED + timedelta(minutes=1)), given_up_at=GAVE_UP)
    fresh = _new("fresh", 0, created=timedelta(minutes=2))
    snap = snapshot(groups=[group("old"), group("new")], nodes=[*_olds("a", "b"), fresh])
    assert set(ready_replacements(snap, _states(gave_up, _entry("b")))) == {"b"}


def test_retry_at_is_the_give_up_time_plus_the_back_off() -> None:
    assert retry_at(_tombstone("a"), timeout=TIMEOUT) == GAVE_UP + TOMBSTONE_FACTOR * TIMEOUT
    assert retry_at(_tombstone("a"), timeout=TIMEOUT) - GAVE_UP > TIMEOUT  # longer than one try
    with pytest.raises(ValueError, match="not given up"):
        retry_at(_entry("a"), timeout=TIMEOUT)


@pytest.mark.parametrize(("case", "after_give_up", "present", "why"), [
    ("within its back-off", timedelta(minutes=1), True, None),
    ("just before it ends", TOMBSTONE_FACTOR * TIMEOUT - timedelta(seconds=1), True, None),
    ("once it ends", TOMBSTONE_FACTOR * TIMEOUT, True, BACKOFF_OVER),
    ("node gone within it", timedelta(minutes=1), False, GONE),
])
def test_a_tombstone_lasts_its_back_off_or_until_its_node_is_gone(case, after_give_up, present, why) -> None:  # type: ignore[no-untyped-def]
    snap = snapshot(groups=[group("old")], nodes=_olds("a") if present else [])
    stale = stale_replacements(snap, _states(_tombstone("a")), now=GAVE_UP + after_give_up, timeout=TIMEOUT)
    assert stale == ([] if why is None else [(OLD, "a", why)])
    # Never given up twice: a tombstone's only ends are GONE and BACKOFF_OVER.
    assert all(not w.startswith(TIMED_OUT) for _, _, w in stale)
