"""The ARM request counter's operation names: short, and never an id or a name."""

from __future__ import annotations

import pytest

from shared.adapters.arm_telemetry import ArmTelemetryPolicy, operation_name
from shared.adapters.compute import arm_client_options
from shared.settings import load_settings

SUB = "https://management.azure.com/subscriptions/0000"
VMSS = f"{SUB}/resourceGroups/rg-nodes/providers/Microsoft.Compute/virtualMachineScaleSets/pool-d4"


@pytest.mark.parametrize(("method", "url", "expected"), [
    ("patch", f"{VMSS}?api-version=2024-07-01", "PATCH virtualMachineScaleSets"),
    ("GET", f"{SUB}/resourceGroups/rg-nodes/providers/Microsoft.Compute/virtualMachineScaleSets?api-version=1",
     "GET virtualMachineScaleSets"),
    ("POST", f"{VMSS}/delete?forceDeletion=false&api-version=1", "POST virtualMachineScaleSets/delete"),
    ("POST", f"{VMSS}/deallocate", "POST virtualMachineScaleSets/deallocate"),
    ("GET", f"{VMSS}/virtualMachines?$expand=instanceView", "GET virtualMachineScaleSets/virtualMachines"),
    ("GET", f"{VMSS}/virtualMachines/17", "GET virtualMachineScaleSets/virtualMachines"),
    ("GET", f"{SUB}/providers/Microsoft.Compute/locations/westeurope/operations/5d2f-0a?p=1", "GET locations/operations"),
    ("GET", f"{SUB}/providers/Microsoft.Compute/skus?$filter=location eq 'westeurope'", "GET skus"),
    ("GET", f"{VMSS}/providers/Microsoft.Insights/metrics?metricnames=Percentage CPU", "GET metrics"),
    ("POST", "https://api.loganalytics.io/v1/workspaces/5a4d0b0e-0000/query", "POST workspaces/query"),
    ("GET", "https://127.0.0.1:8443/", "GET"),
])
def test_operation_names(method: str, url: str, expected: str) -> None:
    assert operation_name(method, url) == expected


def test_names_carry_no_resource_name_or_id() -> None:
    assert not any(part in operation_name("POST", f"{VMSS}/virtualMachines/3/restart") for part in ("pool-d4", "rg-nodes", "3"))


def test_every_arm_client_counts_each_attempt() -> None:
    settings = load_settings({"CLUSTER_NAME": "c", "AZURE_SUBSCRIPTION_ID": "0000", "NODE_RESOURCE_GROUPS": "rg",
                              "KUBECONFIG_PATH": "kubeconfig"})
    options = arm_client_options(settings, retry_total=2, retry_backoff_max=4, timeout=90)
    assert [type(p) for p in options["per_retry_policies"]] == [ArmTelemetryPolicy]
