from __future__ import annotations

from datetime import timedelta

import pytest

from shared.ports import LedgerEntry
from shared.services.ledger import decide_claim
from tests.builders import T0

LEASE = timedelta(minutes=5)


def entry(progress=(1, 0), status="started", age=timedelta(0), outcome=""):  # type: ignore[no-untyped-def]
    return LedgerEntry("a", "scale_down", "g", progress, status, T0 - age, outcome=outcome)


@pytest.mark.parametrize(
    "case_id,existing,progress,expected",
    [
        ("first delivery", None, (0, 0), "claim"),
        ("next step", entry((1, 0), "done"), (2, 0), "claim"),
        ("next attempt", entry((1, 0), "done"), (1, 1), "claim"),
        ("redelivered finished step", entry((1, 0), "done"), (1, 0), "duplicate"),
        ("concurrent delivery of running step", entry((1, 0), "started"), (1, 0), "duplicate"),
        ("stale earlier step", entry((2, 0), "started"), (1, 3), "duplicate"),
        ("silent holder past lease", entry((1, 0), "started", age=LEASE), (1, 0), "claim"),
        ("released after an error", entry((1, 0), "released"), (1, 0), "claim"),
        ("action already over", entry((1, 0), "done", outcome="succeeded: x"), (2, 0), "duplicate"),
    ],
)
def test_decide_claim(case_id, existing, progress, expected) -> None:  # type: ignore[no-untyped-def]
    assert decide_claim(existing, progress, now=T0, lease=LEASE) == expected
