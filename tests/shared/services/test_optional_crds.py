"""An optional CRD's read: a failure is skipped for the poll, its absence said once (and again after it came back)."""

from __future__ import annotations

import logging

import pytest

from shared.ports import ClusterError
from shared.services.optional_crds import OptionalCrd


def _raise() -> list[int] | None:
    raise ClusterError("list widgets: HTTP 500")


def test_a_failed_read_is_none_and_warned(caplog: pytest.LogCaptureFixture) -> None:
    crd = OptionalCrd("widgets.example.com", "widgets")
    with caplog.at_level(logging.WARNING):
        assert crd.read(_raise) is None
    assert "widgets not read (list widgets: HTTP 500)" in caplog.text


def test_absence_is_said_once_until_the_crd_is_served_again(caplog: pytest.LogCaptureFixture) -> None:
    crd = OptionalCrd("widgets.example.com", "widgets")
    with caplog.at_level(logging.INFO):
        answers: list[list[int] | None] = [None, None, [1, 2], None]
        seen = [crd.read(lambda answer=answer: answer) for answer in answers]
    assert seen == [None, None, [1, 2], None]
    assert caplog.text.count("widgets.example.com is not served: widgets are off") == 2
