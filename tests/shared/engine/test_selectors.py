from __future__ import annotations

import pytest

from shared.engine.selectors import SelectorError, parse_label_selector


@pytest.mark.parametrize("text,labels,matches", [
    ("", {"a": "1"}, True),
    ("workload=batch", {"workload": "batch"}, True),
    ("workload==batch", {"workload": "web"}, False),
    ("workload!=web", {}, True),
    ("workload!=web", {"workload": "web"}, False),
    ("gpu", {"gpu": ""}, True),
    ("!gpu", {"gpu": ""}, False),
    ("team in (render, sim),tier", {"team": "sim", "tier": "x"}, True),
    ("team notin (render)", {"team": "render"}, False),
])
def test_parse_label_selector(text: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_label_selector(text).matches(labels) is matches


@pytest.mark.parametrize("text,message", [
    ("a in ()", "needs at least one value"),
    ("a in (x", "unbalanced parentheses"),
    ("a=b,,c", "empty requirement"),
    ("a b c", "unable to parse"),
])
def test_bad_selectors_are_named(text: str, message: str) -> None:
    with pytest.raises(SelectorError, match=message):
        parse_label_selector(text)
