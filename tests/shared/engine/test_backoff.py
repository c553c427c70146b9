from __future__ import annotations

from datetime import timedelta

import pytest

from shared.domain import GroupState
from shared.engine.backoff import after_failure, backoff_reason
from tests.builders import T0

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
