from __future__ import annotations

from datetime import timedelta

import pytest

from shared.domain import GroupState
from shared.engine.backoff import after_failure, backoff_reason, backoff_view, provision_timed_out
from tests.builders import T0, group, node, snapshot

M = timedelta(minutes=1)


@pytest.mark.parametrize(
    "case_id,previous,expected_failures,expected_length",
    [
        ("first failure", GroupState("g"), 1, 5 * M),
        ("second in a row doubles", GroupState("g", last_failure=T0 - 10 * M, backoff_failures=1), 2, 10 * M),
        ("third doubles again", GroupState("g", last_failure=T0 - 20 * M, backoff_failures=2), 3, 20 * M),
        ("capped at thirty minutes", GroupState("g", last_failure=T0 - 40 * M, backoff_failures=5), 6, 30 * M),
        ("three healthy hours reset it", GroupState("g", last_failure=T0 - 180 * M, backoff_failures=5), 1, 5 * M),
    ],
)
def test_backoff_grows_and_resets(case_id, previous, expected_failures, expected_length) -> None:  # type: ignore[no-untyped-def]
    state = after_failure(previous, now=T0, code="QuotaExceeded")
    assert state.backoff_failures == expected_failures
    assert state.backoff_until == T0 + expected_length
    assert state.last_failure == T0 and state.backoff_reason == "QuotaExceeded"


def test_backoff_reason_only_while_it_lasts() -> None:
    state = after_failure(GroupState("g"), now=T0, code="SkuNotAvailable")
    assert "SkuNotAvailable" in (backoff_reason(state, now=T0 + 4 * M) or "")
    assert backoff_reason(state, now=T0 + 5 * M) is None


H = timedelta(hours=1)


@pytest.mark.parametrize("case_id,state,present,timed_out", [
    ("nodes missing past the provision time", GroupState("rg/pool", last_scale_up=T0 - H), 1, True),
    ("every node there", GroupState("rg/pool", last_scale_up=T0 - H), 3, False),
    ("still within the provision time", GroupState("rg/pool", last_scale_up=T0 - 5 * M), 1, False),
    ("never scaled up", GroupState("rg/pool"), 1, False),
    ("in backoff already", GroupState("rg/pool", last_scale_up=T0 - H, backoff_until=T0 + M), 1, False),
    ("this timeout recorded already", GroupState("rg/pool", last_scale_up=T0 - H, backoff_reason="ProvisionTimeout"),
     1, False),
])
def test_provision_timed_out(case_id: str, state: GroupState, present: int, timed_out: bool) -> None:
    assert provision_timed_out(group(target=3), state, present=present, now=T0,
                               max_node_provision_time=15 * M) is timed_out


def test_a_provision_timeout_backoff_writes_off_the_missing_nodes_and_nothing_else_does() -> None:
    pool, other = group("pool", target=3), group("other", target=2)
    snap = snapshot(nodes=[node("p0", group_name="pool")], groups=[pool, other])  # pool: 1 of 3 there
    timed_out = after_failure(GroupState(pool.id), now=T0, code="ProvisionTimeout")
    quota = after_failure(GroupState(other.id), now=T0, code="QuotaExceeded")
    view, backed_off = backoff_view(snap, {pool.id: timed_out, other.id: quota}, now=T0)
    assert set(backed_off) == {pool.id, other.id}
    seen = {g.id: g for g in view.groups}
    assert (seen[pool.id].running_target, seen[pool.id].capacity) == (1, 3)  # two written off, capacity untouched
    assert seen[other.id].running_target == 2  # a quota backoff writes nothing off
    again, _ = backoff_view(view, {pool.id: timed_out, other.id: quota}, now=T0)
    assert {g.id: g.running_target for g in again.groups} == {g.id: g.running_target for g in view.groups}
