"""The pending-pods poll's inputs from the cluster: the priority expander's ConfigMap."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client as k8s

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared.adapters.kubernetes import KubernetesCluster
from shared.services.pending import PRIORITY_CONFIG_MAP, priority_rules
from shared.settings import load_settings
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, kube_api_client

SETTING = '{"10": ["general"]}'


@pytest.fixture
def server(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(clock=ManualClock(SANDBOX_START))


def _put_config_map(server: SandboxServer, data: dict[str, str]) -> None:
    namespace, name = PRIORITY_CONFIG_MAP
    body = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=name, namespace=namespace), data=data)
    with kube_api_client(server) as api:
        k8s.CoreV1Api(api).create_namespaced_config_map(namespace, body)


def _rules(server: SandboxServer, **env: str) -> list[tuple[int, list[str]]]:
    settings = load_settings({**server.env(), "EXPANDER": "priority,least-waste",
                              "PRIORITY_EXPANDER_CONFIG": SETTING, **env})
    cluster = KubernetesCluster.from_settings(settings)
    try:
        ports: Any = SimpleNamespace(cluster=cluster)
        rules = priority_rules(ports, settings)
    finally:
        cluster.close()
    return [(priority, [p.pattern for p in patterns]) for priority, patterns in rules.rules]


CASES = [
    # (id, ConfigMap data or None for no ConfigMap, expected rules, error logged?)
    ("no ConfigMap: the app setting", None, [(10, ["general"])], False),
    ("ConfigMap YAML as cluster-autoscaler reads it", {"priorities": "50:\n  - spot-.*\n10:\n  - .*\n"},
     [(50, ["spot-.*"]), (10, [".*"])], False),
    ("ConfigMap takes precedence even with one rule", {"priorities": "5: [gpu]"}, [(5, ["gpu"])], False),
    ("invalid YAML: the app setting, and an error", {"priorities": "50: [unclosed"}, [(10, ["general"])], True),
    ("not a mapping: the app setting, and an error", {"priorities": "- a\n- b\n"}, [(10, ["general"])], True),
    ("bad regular expression: the app setting, and an error", {"priorities": "50: ['(']"}, [(10, ["general"])], True),
    ("no priorities key: the app setting, and an error", {"other": "x"}, [(10, ["general"])], True),
]


@pytest.mark.parametrize("case_id,data,expected,error", CASES, ids=[c[0] for c in CASES])
def test_priority_rules_come_from_the_config_map_when_present(
    server: SandboxServer, caplog: pytest.LogCaptureFixture, case_id: str, data: dict[str, str] | None,
    expected: list[tuple[int, list[str]]], error: bool,
) -> None:
    if data is not None:
        _put_config_map(server, data)
    with caplog.at_level(logging.ERROR, logger="shared.services.pending"):
        assert _rules(server) == expected
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert bool(errors) == error
    if error:
        assert "cluster-autoscaler-priority-expander" in errors[0]
