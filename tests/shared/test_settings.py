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


@pytest.mark.parametrize("given,mode", [
    ({}, "auto"),  # the default: break-even on plain VM sizes, fixed on GPU sizes (engine.idle)
    ({"SCALE_DOWN_UNNEEDED_TIME": "20m"}, "fixed"),  # an idle time written down is meant
    ({"SCALE_DOWN_DELAY_AFTER_ADD": "5m"}, "fixed"),
    ({"SCALE_DOWN_UNNEEDED_TIME": "  "}, "auto"),  # blank is unset
    ({"SCALE_DOWN_IDLE_MODE": "auto", "SCALE_DOWN_UNNEEDED_TIME": "20m"}, "auto"),  # an explicit mode wins
    ({"SCALE_DOWN_IDLE_MODE": "break-even", "SCALE_DOWN_DELAY_AFTER_ADD": "5m"}, "break-even"),
    ({"SCALE_DOWN_IDLE_MODE": "fixed"}, "fixed"),
])
def test_the_idle_mode_is_auto_unless_an_idle_time_is_written_down(given: dict[str, str], mode: str) -> None:
    assert load_settings(REQUIRED | given).scale_down_idle_mode == mode


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


def test_settings_table_matches_code() -> None:
    """Every setting is in docs/settings.md with its default, and it names no setting the code lacks."""
    readme = (Path(__file__).parents[2] / "docs" / "settings.md").read_text()
    rows = dict(re.findall(r"^\| `([A-Z0-9_]+)` \| ([^|]*) \|", readme, flags=re.MULTILINE))
    expected = {spec.name: ("*required*" if spec.default is None else f"`{spec.default}`") for spec in SPECS}
    assert {name: value.strip() for name, value in rows.items()} == expected


# --- Scale-up settings: expanders, cluster limits, pod rules (issue 3) -------------------------

GIB = 1024**3


def test_scale_up_defaults_match_cluster_autoscalers() -> None:
    settings = load_settings(REQUIRED)
    assert settings.expander == ("least-waste",)
    assert dict(settings.priority_expander_config) == {}
    assert settings.max_nodes_total == 0
    assert settings.cores_total == (0, 320_000)
    assert settings.memory_total == (0, 6_400_000 * GIB)
    assert settings.balance_similar_node_groups is False
    assert settings.expendable_pods_priority_cutoff == -10
    assert settings.new_pod_scale_up_delay == timedelta(0)
    assert settings.max_node_provision_time == timedelta(minutes=15)


def test_aks_pools_are_managed_only_when_asked_and_name_their_cluster() -> None:
    aks = "/subscriptions/s/resourceGroups/rg-aks/providers/Microsoft.ContainerService/managedClusters/prod"
    settings = load_settings({**REQUIRED, "MANAGE_AKS_POOLS": "true", "AKS_CLUSTER_ID": aks,
                              "AKS_NODE_POOLS": "render:0:20, batch:1:5"})
    assert dict(settings.aks_node_pools) == {"render": (0, 20), "batch": (1, 5)} and settings.manage_aks_pools
    pools_only = {k: v for k, v in REQUIRED.items() if k != "NODE_RESOURCE_GROUPS"}
    assert load_settings({**pools_only, "MANAGE_AKS_POOLS": "true", "AKS_CLUSTER_ID": aks}).node_resource_groups == ()
    for env, problem in [
        ({**REQUIRED, "MANAGE_AKS_POOLS": "true"}, "AKS_CLUSTER_ID: missing (required when MANAGE_AKS_POOLS=true"),
        ({**REQUIRED, "AKS_NODE_POOLS": "render:0:2"}, "AKS_NODE_POOLS: names pools, but MANAGE_AKS_POOLS is not true"),
        (pools_only, "NODE_RESOURCE_GROUPS: missing (required unless MANAGE_AKS_POOLS=true)"),
    ]:
        with pytest.raises(SettingsError, match=re.escape(problem)):
            load_settings(env)


@pytest.mark.parametrize("name,text,attr,value", [
    ("EXPANDER", "Priority, least-waste", "expander", ("priority", "least-waste")),
    ("EXPANDER", "most-pods,least-nodes,random", "expander", ("most-pods", "least-nodes", "random")),
    ("PRIORITY_EXPANDER_CONFIG", '{"50": ["^spot-.*"], "10": [".*"]}', "priority_expander_config",
     {50: ("^spot-.*",), 10: (".*",)}),
    ("PRIORITY_EXPANDER_CONFIG", '{"-1": "solo"}', "priority_expander_config", {-1: ("solo",)}),
    ("MAX_NODES_TOTAL", "50", "max_nodes_total", 50),
    ("CORES_TOTAL", "8:100", "cores_total", (8, 100)),
    ("MEMORY_TOTAL", "4:64", "memory_total", (4 * GIB, 64 * GIB)),
    ("BALANCE_SIMILAR_NODE_GROUPS", "true", "balance_similar_node_groups", True),
    ("EXPENDABLE_PODS_PRIORITY_CUTOFF", "-100", "expendable_pods_priority_cutoff", -100),
    ("EXPENDABLE_PODS_PRIORITY_CUTOFF", "0", "expendable_pods_priority_cutoff", 0),
    ("NEW_POD_SCALE_UP_DELAY", "30s", "new_pod_scale_up_delay", timedelta(seconds=30)),
    ("MAX_NODE_PROVISION_TIME", "20m", "max_node_provision_time", timedelta(minutes=20)),
    ("EXPANDER", "priority,price", "expander", ("priority", "price")),
    ("VM_PRICES", '{"Standard_D4s_v5": 0.192, "standard_e8s_v5": 1}', "vm_prices",
     {"standard_d4s_v5": 0.192, "standard_e8s_v5": 1.0}),
    ("NODE_MAPPING", " Hostname ", "node_mapping", "hostname"),
    ("NODE_MAPPING", "", "node_mapping", "auto"),
])
def test_scale_up_settings_parse(name: str, text: str, attr: str, value: object) -> None:
    parsed = getattr(load_settings({**REQUIRED, name: text}), attr)
    mappings = ("priority_expander_config", "vm_prices", "aks_node_pools")
    assert (dict(parsed) if attr in mappings else parsed) == value


@pytest.mark.parametrize("name,text,message", [
    ("EXPANDER", "least-waste,fewest", "EXPANDER: unknown expander 'fewest' (known: least-waste, most-pods"),
    ("EXPANDER", "least-waste,least-waste", "EXPANDER: expander 'least-waste' is named twice"),
    ("EXPANDER", "random,priority", "EXPANDER: expander 'priority' follows 'random'"),
    ("EXPANDER", "grpc", "EXPANDER: expander 'grpc' is not supported"),
    ("VM_PRICES", '{"Standard_D4s_v5": "cheap"}', "VM_PRICES: Standard_D4s_v5: price must be a number"),
    ("VM_PRICES", "[0.1]", "VM_PRICES: must be a JSON object of VM size to USD per hour"),
    ("NODE_MAPPING", "mac", "NODE_MAPPING: 'mac' is not a node mapping method; use one of auto, "
     "provider-id, hostname, ip"),
    ("AKS_NODE_POOLS", "render", "AKS_NODE_POOLS: 'render' is not `pool:min:max`"),
    ("AKS_NODE_POOLS", "Render:0:2", "AKS_NODE_POOLS: 'Render:0:2' is not `pool:min:max`"),
    ("AKS_NODE_POOLS", "render:5:2", "AKS_NODE_POOLS: 'render:5:2': min 5 is greater than max 2"),
    ("AKS_NODE_POOLS", "a:0:1,a:0:2", "AKS_NODE_POOLS: pool a is named twice"),
    ("EXPANDER", "priority,,random", "EXPANDER: empty expander name in 'priority,,random'"),
    ("PRIORITY_EXPANDER_CONFIG", "{10: [a]}", "PRIORITY_EXPANDER_CONFIG: not valid JSON"),
    ("PRIORITY_EXPANDER_CONFIG", '["a"]', "PRIORITY_EXPANDER_CONFIG: must be a JSON object"),
    ("PRIORITY_EXPANDER_CONFIG", '{"high": ["a"]}', "PRIORITY_EXPANDER_CONFIG: priority 'high' is not an integer"),
    ("PRIORITY_EXPANDER_CONFIG", '{"10": ["(a"]}', "PRIORITY_EXPANDER_CONFIG: priority 10: bad regular expression"),
    ("PRIORITY_EXPANDER_CONFIG", '{"10": [5]}', "PRIORITY_EXPANDER_CONFIG: priority 10: expected a list"),
    ("MAX_NODES_TOTAL", "-1", "MAX_NODES_TOTAL: must be at least 0"),
    ("CORES_TOTAL", "100:8", "CORES_TOTAL: min 100 is greater than max 8"),
    ("CORES_TOTAL", "320000", "CORES_TOTAL: must be min:max"),
    ("MEMORY_TOTAL", "0:lots", "MEMORY_TOTAL: must be min:max"),
    ("BALANCE_SIMILAR_NODE_GROUPS", "sometimes", "BALANCE_SIMILAR_NODE_GROUPS: not a boolean"),
    ("EXPENDABLE_PODS_PRIORITY_CUTOFF", "low", "EXPENDABLE_PODS_PRIORITY_CUTOFF: not a whole number"),
    ("NEW_POD_SCALE_UP_DELAY", "soon", "NEW_POD_SCALE_UP_DELAY: not a duration"),
    ("MAX_NODE_PROVISION_TIME", "0s", "MAX_NODE_PROVISION_TIME: must be longer than zero"),
])
def test_scale_up_settings_reject(name: str, text: str, message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings({**REQUIRED, name: text})
    assert message in str(raised.value)
    assert len(raised.value.problems) == 1


def test_scale_up_problems_are_reported_together() -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings({**REQUIRED, "EXPANDER": "cheapest", "PRIORITY_EXPANDER_CONFIG": "{", "CORES_TOTAL": "9:1",
                       "MEMORY_TOTAL": "2:1", "MAX_NODE_PROVISION_TIME": "0"})
    assert [p.split(":")[0] for p in raised.value.problems] == [
        "EXPANDER", "PRIORITY_EXPANDER_CONFIG", "CORES_TOTAL", "MEMORY_TOTAL", "MAX_NODE_PROVISION_TIME"]


@pytest.mark.parametrize("text", [
    "least-waste", "priority,least-waste", "most-pods,random", "random,priority", "fewest", "price", "grpc",
    "least-waste,least-waste", " Priority , Least-Waste ", "least-nodes,most-pods,priority,least-waste,random",
])
def test_settings_and_engine_agree_on_expander_chains(text: str) -> None:
    """Settings validate EXPANDER with the engine's parser; both must accept and reject alike."""
    from shared.engine.expanders import EXPANDERS, ExpanderError, parse_expander_chain
    from shared.settings import EXPANDER_NAMES

    assert set(EXPANDER_NAMES) == set(EXPANDERS)
    try:
        engine: object = parse_expander_chain(text)
    except ExpanderError:
        engine = "rejected"
    try:
        settings: object = load_settings({**REQUIRED, "EXPANDER": text}).expander
    except SettingsError:
        settings = "rejected"
    assert settings == engine


@pytest.mark.parametrize("text", ['{"50": ["^spot-"], "10": [".*", "b"]}', '{"1": "a", "01": ["b"]}', "{}"])
def test_settings_priority_config_feeds_the_engine(text: str) -> None:
    from shared.engine.expanders import parse_priorities

    from_settings = parse_priorities(load_settings({**REQUIRED, "PRIORITY_EXPANDER_CONFIG": text}).priority_expander_config)
    assert from_settings == parse_priorities(text)


# --- Measured usage as a second opinion for scale-down ----------------------------------------

WORKSPACE = "5a4d0b0e-0000-4000-8000-00000000c0de"


def test_measured_usage_is_off_by_default_with_an_operators_defaults() -> None:
    settings = load_settings(REQUIRED)
    assert settings.usage_source == "none"
    assert settings.scale_down_measured_cpu_threshold == 0.5
    assert settings.usage_window == timedelta(minutes=10)
    assert settings.log_analytics_workspace_id == ""
    assert settings.log_analytics_endpoint == "https://api.loganalytics.io"


@pytest.mark.parametrize("env,attr,value", [
    ({"USAGE_SOURCE": "Log-Analytics", "LOG_ANALYTICS_WORKSPACE_ID": WORKSPACE}, "usage_source", "log-analytics"),
    ({"USAGE_SOURCE": "vmss-metric"}, "usage_source", "vmss-metric"),
    ({"SCALE_DOWN_MEASURED_CPU_THRESHOLD": "0.75"}, "scale_down_measured_cpu_threshold", 0.75),
    ({"SCALE_DOWN_MEASURED_CPU_THRESHOLD": "1"}, "scale_down_measured_cpu_threshold", 1.0),
    ({"USAGE_WINDOW": "5m"}, "usage_window", timedelta(minutes=5)),
    ({"USAGE_WINDOW": "60"}, "usage_window", timedelta(minutes=1)),
    ({"LOG_ANALYTICS_WORKSPACE_ID": f" {WORKSPACE.upper()} "}, "log_analytics_workspace_id", WORKSPACE.upper()),
    ({"LOG_ANALYTICS_ENDPOINT": "https://api.loganalytics.azure.cn/"}, "log_analytics_endpoint",
     "https://api.loganalytics.azure.cn"),
    ({"LOG_ANALYTICS_ENDPOINT": "https://127.0.0.1:8443/loganalytics"}, "log_analytics_endpoint",
     "https://127.0.0.1:8443/loganalytics"),
])
def test_usage_settings_parse(env: dict[str, str], attr: str, value: object) -> None:
    assert getattr(load_settings({**REQUIRED, **env}), attr) == value


@pytest.mark.parametrize("env,message", [
    ({"USAGE_SOURCE": "prometheus"}, "USAGE_SOURCE: must be one of none, log-analytics, vmss-metric"),
    ({"USAGE_SOURCE": "log-analytics"}, "LOG_ANALYTICS_WORKSPACE_ID: required when USAGE_SOURCE=log-analytics"),
    ({"SCALE_DOWN_MEASURED_CPU_THRESHOLD": "50%"}, "SCALE_DOWN_MEASURED_CPU_THRESHOLD: not a number: '50%'"),
    ({"SCALE_DOWN_MEASURED_CPU_THRESHOLD": "50"}, "SCALE_DOWN_MEASURED_CPU_THRESHOLD: must be a fraction above 0"),
    ({"SCALE_DOWN_MEASURED_CPU_THRESHOLD": "0"}, "SCALE_DOWN_MEASURED_CPU_THRESHOLD: must be a fraction above 0"),
    ({"USAGE_WINDOW": "30s"}, "USAGE_WINDOW: must be at least 1m"),
    ({"USAGE_WINDOW": "a while"}, "USAGE_WINDOW: not a duration"),
    ({"LOG_ANALYTICS_WORKSPACE_ID": "my-workspace"}, "LOG_ANALYTICS_WORKSPACE_ID: must be the workspace's GUID"),
    ({"LOG_ANALYTICS_ENDPOINT": "http://api.loganalytics.io"}, "LOG_ANALYTICS_ENDPOINT: must be an https:// URL"),
])
def test_usage_settings_are_refused_by_name(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings({**REQUIRED, **env})
    assert raised.value.problems == [next(p for p in raised.value.problems if p.startswith(message))]


def test_a_malformed_workspace_id_is_reported_once() -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings({**REQUIRED, "USAGE_SOURCE": "log-analytics", "LOG_ANALYTICS_WORKSPACE_ID": "nope"})
    assert [p.split(":")[0] for p in raised.value.problems] == ["LOG_ANALYTICS_WORKSPACE_ID"]
