"""sandbox/model/aci.py stands below the scenario model: the model imports it, never the reverse."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _imported(path: Path) -> set[str]:
    """Every module the file imports, those under `if TYPE_CHECKING:` included (a type-only import still
    ties the two modules in a circle a reader and a type checker must walk)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


@pytest.mark.parametrize("module", ["sandbox/model/aci.py", "sandbox/model/dists.py"])
def test_it_imports_nothing_of_the_scenario_model(module: str) -> None:
    assert not {name for name in _imported(ROOT / module) if name.startswith("sandbox.model.scenario")}


def test_the_scenario_model_declares_the_virtual_node_aci_defines() -> None:
    from sandbox.model import aci, scenario

    spec = scenario.load_scenario({"node_groups": [_GROUP], "virtual_node": {"quota_cores": 12}}).virtual_node
    assert isinstance(spec, aci.VirtualNodeSpec)
    assert aci.app_settings(spec)["ACI_QUOTA_CORES"] == "12"


def test_the_scenarios_container_group_limit_configures_ours_as_an_operator_would() -> None:
    from sandbox.model import aci, scenario
    from shared.options import virtual_node_options
    from shared.settings import load_settings

    spec = scenario.load_scenario({"node_groups": [_GROUP], "virtual_node": {"max_container_groups": 7}}).virtual_node
    required = {"CLUSTER_NAME": "c1", "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000",
                "NODE_RESOURCE_GROUPS": "rg", "KUBECONFIG_PATH": "/tmp/kubeconfig"}
    limits = virtual_node_options(load_settings(required | aci.app_settings(spec))).limits
    assert spec is not None and limits.container_groups == spec.max_container_groups == 7
    assert limits.cores == spec.quota_cores


_GROUP = {"resource_group": "rg", "name": "pool", "vm_size": "Standard_D4s_v5", "allocatable": {"cpu": "3", "memory": "12Gi"},
          "capacity": {"cpu": "4", "memory": "16Gi"}, "min": 0, "max": 3, "initial": 0}


# ---------------------------------------------------------------------------- prices: one source for API and world


def _aci_rows(filter_text: str) -> list[dict[str, object]]:
    from sandbox.api import prices_api
    from sandbox.api.wire import Request

    response = prices_api.handle(Request.build("GET", prices_api.PREFIX, {"$filter": filter_text}), base_url="https://x")
    assert response.status == 200
    return response.json()["Items"]


@pytest.mark.parametrize("region", ["eastus", "westeurope"])
def test_the_retail_prices_double_serves_one_container_instances_row_per_meter(region: str) -> None:
    from sandbox.model import aci

    rows = _aci_rows(f"serviceName eq 'Container Instances' and armRegionName eq '{region}' and priceType eq 'Consumption'")
    assert sorted(row["meterName"] for row in rows) == sorted(meter.meter_name for meter in aci.ACI_METERS)
    for row in rows:
        assert (row["productName"], row["skuName"], row["armSkuName"], row["type"]) == (
            "Container Instances", "Standard", "", "Consumption")
    # A client narrowing to one meter, as public clients do, gets exactly that row.
    (vcpu,) = _aci_rows(f"serviceName eq 'Container Instances' and armRegionName eq '{region}' "
                        "and meterName eq 'Standard vCPU Duration'")
    assert vcpu["unitOfMeasure"] == "1 Hour"


def test_the_world_bills_aci_at_the_price_the_retail_prices_double_serves() -> None:
    from sandbox.model import aci, scenario

    by_meter = {row["meterName"]: row for row in _aci_rows("serviceName eq 'Container Instances' and armRegionName eq 'eastus'")}
    spec = scenario.load_scenario({"node_groups": [_GROUP], "virtual_node": {}}).virtual_node
    assert spec is not None
    assert spec.price_vcpu_second * 3600 == pytest.approx(by_meter["Standard vCPU Duration"]["unitPrice"])
    assert spec.price_gb_second * 3600 == pytest.approx(by_meter["Standard Memory Duration"]["unitPrice"])
    assert aci.app_settings(spec)["ACI_PRICE_VCPU_SECOND"] == repr(spec.price_vcpu_second)


def test_vm_filters_never_see_the_container_instances_rows() -> None:
    rows = _aci_rows("serviceName eq 'Virtual Machines' and armRegionName eq 'eastus' and armSkuName eq 'Standard_D4s_v5'")
    assert rows and all(row["serviceName"] == "Virtual Machines" for row in rows)


# ---------------------------------------------------------------------------- the container-group quota


@pytest.mark.parametrize("live_groups, max_groups, refused", [(0, 1, False), (99, 100, False), (100, 100, True),
                                                              (5, 0, True)])
def test_the_container_group_count_refuses_at_its_limit_whatever_the_cores(live_groups: int, max_groups: int,
                                                                          refused: bool) -> None:
    from sandbox.model import aci

    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "10m"}}}]}}
    refusal = aci.check_create(pod, version=1, region="eastus", quota_cores=1000, creates_per_5min=1000,
                               creates_per_hour=1000, held_centicores=0, creates=(), now=0.0,
                               max_container_groups=max_groups, live_groups=live_groups)
    assert (refusal is not None) is refused
    if refusal is not None:
        assert (refusal.kind, refusal.quota) == ("quota", aci.QUOTA_GROUPS)
        assert refusal.message.startswith(aci.QUOTA_ERROR_CODE)
        assert f"quota '{aci.QUOTA_GROUPS}'" in refusal.message and f"Limit: '{max_groups}'" in refusal.message


def test_the_scenario_reads_the_container_group_limit_and_the_billing_choice() -> None:
    from sandbox.model import scenario

    spec = scenario.load_scenario({"node_groups": [_GROUP], "virtual_node": {
        "max_container_groups": 7, "bill_start_latency": False}}).virtual_node
    assert spec is not None and (spec.max_container_groups, spec.bill_start_latency) == (7, False)
    with pytest.raises(scenario.ScenarioError, match="bill_start_latency"):
        scenario.load_scenario({"node_groups": [_GROUP], "virtual_node": {"bill_start_latency": "yes"}})
