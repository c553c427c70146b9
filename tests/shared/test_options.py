"""Settings to engine options: what each drain setting becomes in the rules the polls, the executor and the replay use."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.engine.drainability import Disposition, classify
from shared.options import drain_rules, scale_down_options, virtual_node_options
from shared.settings import SettingsError, load_settings
from tests.builders import T0, pod

REQUIRED = {
    "CLUSTER_NAME": "c1",
    "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000",
    "NODE_RESOURCE_GROUPS": "rg-a",
    "KUBECONFIG_PATH": "/tmp/kubeconfig",
}
COREDNS = pod("coredns", node_name="n1", namespace="kube-system")


@pytest.mark.parametrize("given,timeout,age,disposition", [
    # cluster-autoscaler's default (--blocking-system-pod-distruption-timeout=1h).
    ({}, timedelta(hours=1), timedelta(minutes=59), Disposition.PIN),
    ({}, timedelta(hours=1), timedelta(minutes=61), Disposition.MOVE),
    ({"BLOCKING_SYSTEM_POD_DISRUPTION_TIMEOUT": "24h"}, timedelta(hours=24), timedelta(hours=2), Disposition.PIN),
    ({"BLOCKING_SYSTEM_POD_DISRUPTION_TIMEOUT": "0s"}, timedelta(0), timedelta(seconds=1), Disposition.MOVE),
    # The rule off: the timeout does not matter.
    ({"SKIP_NODES_WITH_SYSTEM_PODS": "false", "BLOCKING_SYSTEM_POD_DISRUPTION_TIMEOUT": "24h"}, timedelta(hours=24),
     timedelta(seconds=1), Disposition.MOVE),
])
def test_the_system_pod_disruption_timeout_reaches_the_drain_rules(
        given: dict[str, str], timeout: timedelta, age: timedelta, disposition: Disposition) -> None:
    settings = load_settings(REQUIRED | given)
    rules = drain_rules(settings)
    assert rules.system_pod_disruption_timeout == timeout
    assert scale_down_options(settings).drain == rules  # the planner and the executor read the same rules
    assert classify(replace(COREDNS, created_at=T0 - age), rules, now=T0).disposition is disposition


@pytest.mark.parametrize("text", ["-1h", "an hour", "1 fortnight"])
def test_a_malformed_system_pod_disruption_timeout_is_refused_by_name(text: str) -> None:
    with pytest.raises(SettingsError, match="BLOCKING_SYSTEM_POD_DISRUPTION_TIMEOUT"):
        load_settings(REQUIRED | {"BLOCKING_SYSTEM_POD_DISRUPTION_TIMEOUT": text})


@pytest.mark.parametrize("given,groups", [({}, 100), ({"ACI_MAX_CONTAINER_GROUPS": "250"}, 250),
                                          ({"ACI_MAX_CONTAINER_GROUPS": " 0 "}, 0)])
def test_the_container_group_limit_reaches_the_virtual_node_gate(given: dict[str, str], groups: int) -> None:
    limits = virtual_node_options(load_settings(REQUIRED | given)).limits
    assert limits.container_groups == groups
    assert limits.cores == load_settings(REQUIRED).aci_quota_cores  # the other limits keep their own settings


@pytest.mark.parametrize("text,says", [("-1", "must be at least 0"), ("1.5", "'1.5'"), ("lots", "'lots'")])
def test_a_malformed_container_group_limit_is_refused_by_name(text: str, says: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(REQUIRED | {"ACI_MAX_CONTAINER_GROUPS": text})
    (problem,) = caught.value.problems
    assert problem.startswith("ACI_MAX_CONTAINER_GROUPS: ") and says in problem, problem
