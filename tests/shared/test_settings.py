from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from shared.settings import SPECS, SettingsError, load_settings, parse_duration

REQUIRED = {
    "CLUSTER_NAME": "c1",
    "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000",
    "NODE_RESOURCE_GROUPS": "rg-a, rg-b",
    "KUBECONFIG_PATH": "/tmp/kubeconfig",
}


def test_defaults_apply() -> None:
    settings = load_settings(REQUIRED)
    assert settings.node_resource_groups == ("rg-a", "rg-b")
    assert settings.scale_down_unneeded_time == timedelta(minutes=10)
    assert settings.queue_name == "scale-actions"


def test_every_problem_is_reported_together_by_name() -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings({"CLUSTER_NAME": "c1", "SCALE_DOWN_UNNEEDED_TIME": "ten minutes", "MAX_SCALE_DOWN_PARALLELISM": "0",
                       "PENDING_POLL_SCHEDULE": "*/30 * * * *", "AZURE_CREDENTIAL": "password"})
    text = str(raised.value)
    for name in ("AZURE_SUBSCRIPTION_ID: missing", "NODE_RESOURCE_GROUPS: missing", "KUBECONFIG_PATH: missing",
                 "SCALE_DOWN_UNNEEDED_TIME: not a duration", "MAX_SCALE_DOWN_PARALLELISM: must be at least 1",
                 "PENDING_POLL_SCHEDULE: must be a six-field", "AZURE_CREDENTIAL: must be one of"):
        assert name in text
    assert len(raised.value.problems) == 7


def test_managed_identity_needs_client_id() -> None:
    with pytest.raises(SettingsError, match="AZURE_CLIENT_ID"):
        load_settings({**REQUIRED, "AZURE_CREDENTIAL": "managed-identity"})


@pytest.mark.parametrize(
    "text,seconds",
    [("10m", 600), ("30s", 30), ("1h30m", 5400), ("90", 90), ("0", 0), ("1.5s", 1.5), ("250ms", 0.25), ("2m30s", 150)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "m", "10x", "5m10", "-5s", "1h 30m"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_readme_table_matches_code() -> None:
    """Every setting is in the README with its default, and the README names no setting the code lacks."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| ([^|]*) \|", readme, flags=re.MULTILINE))
    expected = {spec.name: ("*required*" if spec.default is None else f"`{spec.default}`") for spec in SPECS}
    assert {name: value.strip() for name, value in rows.items()} == expected
