"""cluster-autoscaler's discovery tags, read one way by every provider (shared/discovery_tags.py)."""

from __future__ import annotations

import pytest

from shared.discovery_tags import is_ours, limits, usable_limits

OURS = {"cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": "farm"}


@pytest.mark.parametrize("tags, ours", [
    (OURS, True),
    ({"Cluster-Autoscaler-Enabled": " TRUE ", "CLUSTER-AUTOSCALER-NAME": "farm"}, True),  # names in any case
    ({**OURS, "cluster-autoscaler-name": "Farm"}, False),  # values are compared as written
    ({**OURS, "cluster-autoscaler-enabled": "false"}, False),
    ({"cluster-autoscaler-name": "farm"}, False),
])
def test_is_ours(tags: dict[str, str], ours: bool) -> None:
    assert is_ours(tags, "farm") is ours


@pytest.mark.parametrize("tags, expected", [
    ({"min": "1", "max": "5"}, (1, 5)),
    ({"MIN": " 0 ", "Max": "0"}, (0, 0)),
    ({"max": "5"}, "tag 'min' is missing"),
    ({"min": "one", "max": "5"}, "tag 'min' is 'one', not an integer"),
    ({"min": "6", "max": "5"}, "tags min=6 max=5 do not make a range"),
    ({"min": "-1", "max": "5"}, "tags min=-1 max=5 do not make a range"),
])
def test_limits_or_why_not(tags: dict[str, str], expected: tuple[int, int] | str) -> None:
    found = limits(tags)
    if isinstance(expected, tuple):
        assert found == expected
    else:
        assert isinstance(found, str) and found.startswith(expected)


def test_usable_limits_says_why_a_group_is_skipped() -> None:
    said: list[str] = []
    assert usable_limits("rg/pool", {"min": "1", "max": "3"}, warn=said.append) == (1, 3) and said == []
    assert usable_limits("rg/pool", {"min": "x", "max": "3"}, warn=said.append) is None
    assert said == ["scale set rg/pool skipped: tag 'min' is 'x', not an integer"]
