"""Settings checked at start, every problem at once (issue 14, item 11).

Schedules are real NCRONTAB, durations are bounded (by a year, and by the queue's 7 days where they become
queue delays), ARM_ENDPOINT is https, file settings name files, the storage connection is checked by the code
that will use it, and a setting that looks misspelt is named.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from shared.adapters.storage_connection import storage_problems
from shared.context import validated_settings
from shared.settings import SettingsError, load_settings, misspelt_settings

REQUIRED = {
    "CLUSTER_NAME": "c1",
    "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000",
    "NODE_RESOURCE_GROUPS": "rg-a",
    "KUBECONFIG_PATH": "/tmp/kubeconfig",
}


def _problems(env: Mapping[str, str], **options: object) -> list[str]:
    with pytest.raises(SettingsError) as caught:
        load_settings({**REQUIRED, **env}, **options)  # type: ignore[arg-type]
    return caught.value.problems


@pytest.mark.parametrize(("name", "value", "says"), [
    ("PENDING_POLL_SCHEDULE", "*/30 * * * *", "six-field NCRONTAB"),
    ("PENDING_POLL_SCHEDULE", "*/30 * * * * * *", "six-field NCRONTAB"),
    ("PENDING_POLL_SCHEDULE", "*/30 * 25 * * *", "not a valid NCRONTAB"),
    ("UTILIZATION_POLL_SCHEDULE", "0 * * 31 2 L", "'L' is not NCRONTAB"),
    ("UTILIZATION_POLL_SCHEDULE", "0 0 0 * * 1#2", "'#' is not NCRONTAB"),
    ("UTILIZATION_POLL_SCHEDULE", "every minute please", "six-field NCRONTAB"),
    # Valid to croniter, yet never due: the runner (and the Functions host) would wait for ever or crash on it.
    ("PENDING_POLL_SCHEDULE", "0 0 0 31 2 *", "never fires within a year"),
    ("UTILIZATION_POLL_SCHEDULE", "0 0 0 31 4,6,9,11 *", "never fires within a year"),
    ("STATE_SWEEP_SCHEDULE", "0 0 0 30 2 *", "never fires within a year"),
    ("STATE_SWEEP_SCHEDULE", "0 0 3 29 2 *", "never fires within a year"),  # once in four years
    # JSON nested past any price list or priority rule: refused by depth, not a RecursionError from json.loads.
    ("VM_PRICES", "[" * 100_000 + "]" * 100_000, "nested 100000 levels deep; at most 32"),
    ("VM_PRICES", '{"Standard_D4s_v5": ' + "[" * 40 + "]" * 40 + "}", "nested 41 levels deep"),
    ("PRIORITY_EXPANDER_CONFIG", '{"10": ' * 50_000 + "1" + "}" * 50_000, "nested 50000 levels deep; at most 32"),
    ("PRIORITY_EXPANDER_CONFIG", "[" * 5_000, "nested 5000 levels deep"),  # not even closed
    ("SCALE_DOWN_UNNEEDED_TIME", "99999999999999999999h", "far too long"),
    ("SCALE_DOWN_UNNEEDED_TIME", "9000h", "at most 365d"),
    ("ACTION_TTL", "192h", "at most 7d (a queue message stays invisible for at most 7 days)"),
    ("ACTION_LEASE", "169h", "at most 7d"),
    ("STEP_RETRY_DELAY", "604801", "at most 7d"),
    ("BATCH_CHECK_INTERVAL", "200h", "at most 7d"),
    ("ARM_OPERATION_WAIT", "10m", "at most 4m"),
    ("ARM_ENDPOINT", "http://management.azure.com", "must be an https:// URL"),
    ("ARM_ENDPOINT", "management.azure.com", "must be an https:// URL"),
    ("SCALE_DOWN_UTILIZATION_THRESHOLD", "50", "must be a fraction from 0 to 1"),
    ("SCALE_DOWN_UTILIZATION_THRESHOLD", "-0.1", "must be a fraction from 0 to 1"),
    ("UNAVAILABLE_OFFERING_TTL", "spot=1h", "with a kind among spot-capacity"),
    ("UNAVAILABLE_OFFERING_TTL", "family-quota=never", "family-quota=never"),
    ("UNAVAILABLE_OFFERING_TTL", "allocation=0s", "must be longer than zero"),
    ("SPOT_EVICTION_SIGNAL", "label:evict", "expected taint:<key> or condition:<type>"),
    ("QUOTA_CACHE", "0s", "must be longer than zero"),
    ("ON_DEMAND_POD_SELECTOR", "tier in (db", "ON_DEMAND_POD_SELECTOR"),
])
def test_a_bad_value_is_named_with_what_is_wrong(name: str, value: str, says: str) -> None:
    problems = _problems({name: value})
    assert len(problems) == 1 and problems[0].startswith(f"{name}: ") and says in problems[0], problems


@pytest.mark.parametrize(("name", "value"), [
    ("PENDING_POLL_SCHEDULE", "*/10 * * * * *"),
    ("UTILIZATION_POLL_SCHEDULE", "0 */2 * * * Mon-Fri"),
    ("ACTION_TTL", "168h"),  # exactly the queue's limit
    ("ARM_OPERATION_WAIT", "4m"),
    ("SCALE_DOWN_UNNEEDED_TIME", "8760h"),
    ("ARM_ENDPOINT", "https://management.usgovcloudapi.net/"),
    ("SCALE_DOWN_UTILIZATION_THRESHOLD", "0"),  # as cluster-autoscaler's: no node is a candidate
    ("SCALE_DOWN_GPU_UTILIZATION_THRESHOLD", "1"),
    ("UNAVAILABLE_OFFERING_TTL", "spot-capacity=30m, family-quota-zero=2h"),
    ("SPOT_EVICTION_SIGNAL", "condition:PreemptScheduled"),
    ("ON_DEMAND_POD_SELECTOR", "tier in (db,ledger)"),
    ("STATE_SWEEP_SCHEDULE", "59 59 23 31 12 *"),  # once a year, on its last second
    ("STATE_SWEEP_SCHEDULE", "0 0 0 29 2 Mon"),  # 29 February or any Monday of February: every year
    ("UTILIZATION_POLL_SCHEDULE", "0 0 0 31 4,5 *"),  # 31 May exists
    # Brackets inside strings are not nesting: 2 levels, though the text holds 40 `[{]`.
    ("PRIORITY_EXPANDER_CONFIG", '{"50": ["^spot-' + "[{]" * 40 + '"], "10": [".*"]}'),
])
def test_values_at_the_limits_are_accepted(name: str, value: str) -> None:
    load_settings({**REQUIRED, name: value})


def test_file_settings_that_name_no_file_are_named(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    env = {"KUBECONFIG_PATH": str(tmp_path / "kubeconfig"), "ARM_CA_BUNDLE": str(bundle)}
    problems = _problems(env, file_exists=lambda path: Path(path).is_file())
    assert problems == [f"KUBECONFIG_PATH: no such file: '{tmp_path / 'kubeconfig'}'",
                        f"ARM_CA_BUNDLE: no such file: '{bundle}'"]
    bundle.write_text("pem")
    (tmp_path / "kubeconfig").write_text("kubeconfig")
    load_settings({**REQUIRED, **env}, file_exists=lambda path: Path(path).is_file())


@pytest.mark.parametrize(("env", "says"), [
    ({}, "AzureWebJobsStorage: missing"),
    ({"AzureWebJobsStorage": "AccountName=x;not a connection string"}, "not a usable storage connection string"),
    ({"AzureWebJobsStorage__tableServiceUri": "https://a.table.core.windows.net"},
     "AzureWebJobsStorage__queueServiceUri: missing"),
])
def test_the_storage_connection_is_checked_by_the_code_that_uses_it(env: dict[str, str], says: str) -> None:
    problems = storage_problems(env)
    assert len(problems) == 1 and says in problems[0], problems
    assert "AccountKey" not in problems[0]  # never echo a secret


@pytest.mark.parametrize("env", [
    {"AzureWebJobsStorage": "UseDevelopmentStorage=true"},
    {"AzureWebJobsStorage__accountName": "autoscalerstate"},
    {"AzureWebJobsStorage__tableServiceUri": "https://a.table.core.windows.net",
     "AzureWebJobsStorage__queueServiceUri": "https://a.queue.core.windows.net"},
])
def test_good_storage_connections_pass(env: dict[str, str]) -> None:
    assert storage_problems(env) == []


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    env = {"CLUSTER_NAME": "", "AZURE_SUBSCRIPTION_ID": "s", "NODE_RESOURCE_GROUPS": "rg",
           "KUBECONFIG_PATH": str(tmp_path / "missing"), "PENDING_POLL_SCHEDULE": "* * * * *",
           "ACTION_TTL": "720h", "ARM_ENDPOINT": "http://arm"}
    with pytest.raises(SettingsError) as caught:
        validated_settings(env)
    named = sorted(problem.split(":")[0] for problem in caught.value.problems)
    assert named == ["ACTION_TTL", "ARM_ENDPOINT", "AzureWebJobsStorage", "CLUSTER_NAME", "KUBECONFIG_PATH",
                     "PENDING_POLL_SCHEDULE"]


@pytest.mark.parametrize(("name", "suggestion"), [
    ("SCALE_DOWN_UNEEDED_TIME", "SCALE_DOWN_UNNEEDED_TIME"),
    ("MAX_NODE_TOTAL", "MAX_NODES_TOTAL"),
    ("SCALE_DOWN_UTILISATION_THRESHOLD", "SCALE_DOWN_UTILIZATION_THRESHOLD"),
    ("CLUSTERNAME", "CLUSTER_NAME"),
    ("SCALE_DOWN_UNNEEDED_TIME", None),  # ours
    ("FUNCTIONS_WORKER_RUNTIME", None),  # the platform's
    ("WEBSITE_RUN_FROM_PACKAGE", None),
    ("AzureWebJobsStorage__accountName", None),
    ("OTEL_TRACES_SAMPLER", None),
    ("PATH", None),
    ("HOME", None),
    ("MY_TEAMS_OWN_SETTING", None),  # unrelated: nothing close
    # Settings are read case-sensitively: these are ignored as surely as a typo is.
    ("max_nodes_total", "MAX_NODES_TOTAL"),
    ("Dry_Run", "DRY_RUN"),
    ("scale_down_uneeded_time", "SCALE_DOWN_UNNEEDED_TIME"),
    ("Kubeconfig_Allow_Exec", "KUBECONFIG_ALLOW_EXEC"),
    ("azureWebJobsStorage", None),  # the platform's, in any case
    ("path", None),
])
def test_a_setting_that_looks_like_ours_but_is_not_is_named_with_the_likely_one(
    name: str, suggestion: str | None
) -> None:
    warnings = misspelt_settings({name: "x"})
    if suggestion is None:
        assert warnings == []
    else:
        assert warnings == [f"{name}: not a setting of ours; did you mean {suggestion}? (it is ignored)"]
