from __future__ import annotations

from datetime import datetime, timezone

import pytest

from shared.schedules import parse_ncrontab

T = datetime(2026, 11, 21, 12, 0, 7, tzinfo=timezone.utc)  # a Saturday


@pytest.mark.parametrize(
    "expression,expected",
    [
        ("*/30 * * * * *", datetime(2026, 11, 21, 12, 0, 30, tzinfo=timezone.utc)),
        ("0 * * * * *", datetime(2026, 11, 21, 12, 1, 0, tzinfo=timezone.utc)),
        ("0 */5 * * * *", datetime(2026, 11, 21, 12, 5, 0, tzinfo=timezone.utc)),
        ("15,45 * * * * *", datetime(2026, 11, 21, 12, 0, 15, tzinfo=timezone.utc)),
        ("0 0 9-17 * * 1-5", datetime(2026, 11, 23, 9, 0, 0, tzinfo=timezone.utc)),
        ("0 30 2 1 * *", datetime(2026, 12, 1, 2, 30, 0, tzinfo=timezone.utc)),
        ("0 0 9 * * Mon-Fri", datetime(2026, 11, 23, 9, 0, 0, tzinfo=timezone.utc)),  # names, as NCRONTAB takes them
        ("0 0 0 1 Jul *", datetime(2027, 7, 1, 0, 0, 0, tzinfo=timezone.utc)),
        ("0 0 12 * * Wed", datetime(2026, 11, 25, 12, 0, 0, tzinfo=timezone.utc)),
    ],
)
def test_next_after(expression: str, expected: datetime) -> None:
    assert parse_ncrontab(expression).next_after(T) == expected


@pytest.mark.parametrize("expression", [
    "* * * * *",  # five fields: cron's, not NCRONTAB's
    "0 * * * * * 2026",  # seven
    "61 * * * * *", "0 60 * * * *", "0 0 24 * * *", "0 0 0 32 * *", "0 0 0 * 13 *", "0 0 0 * * 8",
    "*/0 * * * * *", "a * * * * *", "0 0 0 L * *", "0 0 0 15W * *", "0 0 0 * * 5#2", "0 0 0 ? * *",
    "", "every 5 minutes",
    # croniter accepts these, then cannot step to a next time (or finds one years away): they never fire in a year.
    "0 0 0 31 2 *", "0 0 0 30 2 *", "0 0 0 31 4 *", "0 0 0 31 4,6,9,11 *", "0 0 0 29 2 *",
])
def test_rejects(expression: str) -> None:
    with pytest.raises(ValueError):
        parse_ncrontab(expression)
