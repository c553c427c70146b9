"""SCHEDULED_CAPACITY: parsed into windows at load time; a malformed value is refused naming the setting."""

from __future__ import annotations

import json

import pytest

from shared.settings import SettingsError, load_settings
from tests.shared.test_settings import REQUIRED

WINDOW = {"group": "RG/pool", "start": "0 0 8 * * 1-5", "duration": "11h", "min": 10, "timezone": "Europe/Berlin"}


def test_no_windows_by_default() -> None:
    assert load_settings(REQUIRED).scheduled_capacity == ()


def test_windows_are_parsed() -> None:
    settings = load_settings({**REQUIRED, "SCHEDULED_CAPACITY": json.dumps([WINDOW, {**WINDOW, "min": 4}])})
    assert [(w.group_id, w.min_size, w.zone) for w in settings.scheduled_capacity] == [
        ("rg/pool", 10, "Europe/Berlin"), ("rg/pool", 4, "Europe/Berlin")]


@pytest.mark.parametrize(("value", "named"), [
    ("[{", "not valid JSON"),
    ("[" * 40 + "]" * 40, "nested"),
    (json.dumps([{**WINDOW, "timezone": "Berlin/Nowhere"}]), "window 1 (rg/pool): field 'timezone'"),
    (json.dumps({"rg/pool": WINDOW}), "JSON list"),
])
def test_a_malformed_value_is_refused_naming_the_setting(value: str, named: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({**REQUIRED, "SCHEDULED_CAPACITY": value})
    (problem,) = caught.value.problems
    assert problem.startswith("SCHEDULED_CAPACITY: ") and named in problem
