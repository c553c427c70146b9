"""The Bicep under infra/, checked offline: least privilege, identity-only access, every app setting the code
needs (evaluated as the deployment would compute it, then fed to load_settings), alerts and the workbook.
Also azure.yaml, infra/main.parameters.json and .funcignore.
"""

from __future__ import annotations

import fnmatch
import json
import re
from functools import cache
from typing import Any

import pytest
import yaml

from shared.adapters.storage_connection import resolve_storage
from shared.settings import SPECS, SettingsError, load_settings
from tests.infra.bicep import (
    INFRA,
    ROOT,
    Lazy,
    Scope,
    bicep_files,
    comment_above,
    evaluate,
    file_scope,
    module_outputs,
    parse,
    resource_body,
    resources,
    target_scope,
    text,
)

ROLE_ASSIGNMENT = "Microsoft.Authorization/roleAssignments"
ROLE_DEFINITION = "Microsoft.Authorization/roleDefinitions"
CUSTOM_AKS_ROLE = "custom AKS Kubernetes role"
CUSTOM_NODE_ROLE = "custom node role"
CUSTOM_POOL_ROLE = "custom AKS agent-pool role"
CUSTOM_OPERATIONS_ROLE = "custom AKS operation-status role"
CUSTOM_STANDBY_POOL_ROLE = "custom standby pool role"
# Each custom role definition, by file and symbol: what an assignment of it is called below.
CUSTOM_ROLES = {
    ("modules/aks-access.bicep", "autoscalerKubernetesRole"): CUSTOM_AKS_ROLE,
    ("modules/node-access.bicep", "nodeRoleDefinition"): CUSTOM_NODE_ROLE,
    ("modules/aks-pools-access.bicep", "poolRole"): CUSTOM_POOL_ROLE,
    ("modules/aks-pools-access.bicep", "operationStatusRole"): CUSTOM_OPERATIONS_ROLE,
    ("modules/node-access.bicep", "standbyPoolRole"): CUSTOM_STANDBY_POOL_ROLE,
}

# Built-in role ids, as in /work/shared/facts/azure.md (Key Vault Secrets Officer added; both Key Vault ids
# checked against Microsoft's built-in roles list and many published templates).
ROLES = {
    "9980e02c-c2be-4d73-94e8-173b1dc7cf3c": "Virtual Machine Contributor",
    "43d0d8ad-25c7-4714-9337-8ba259a9fe05": "Monitoring Reader",
    "73c42c96-874c-492b-b04d-ab87d138a893": "Log Analytics Reader",
    "3913510d-42f4-4e42-8a64-420c390055eb": "Monitoring Metrics Publisher",
    "b7e6dc6d-f1e8-4753-8033-0f276bb0955b": "Storage Blob Data Owner",
    "974c5e8b-45b9-4653-ba55-5f855dd0fb88": "Storage Queue Data Contributor",
    "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3": "Storage Table Data Contributor",
    "4abbcc35-e782-43d8-92c5-2d3f1bd2253f": "Azure Kubernetes Service Cluster User Role",
    "4633458b-17de-408a-b874-0445c86b69e6": "Key Vault Secrets User",
    "b86a8fe4-44ce-4948-aee5-eccb2c155cd7": "Key Vault Secrets Officer",
}

# Every right the deployment grants, per file. A new assignment fails here until it is reviewed and listed.
EXPECTED_ASSIGNMENTS = {
    # Virtual Machine Contributor (nodeRole's default) or the custom node role, never both (nodeRole)
    # plus, with STANDBY_POOLS (grantStandbyPools), the Standby Pools' read and write
    "modules/node-access.bicep": ["Monitoring Reader", "Virtual Machine Contributor", CUSTOM_NODE_ROLE,
                                  CUSTOM_STANDBY_POOL_ROLE],
    "modules/storage.bicep": ["Storage Blob Data Owner", "Storage Queue Data Contributor",
                              "Storage Table Data Contributor"],
    "modules/insights.bicep": ["Monitoring Metrics Publisher"],
    "modules/workspace-access.bicep": ["Log Analytics Reader"],
    "modules/aks-access.bicep": ["Azure Kubernetes Service Cluster User Role", CUSTOM_AKS_ROLE],
    # the pools on the cluster; the operation-status reads at its resource group
    "modules/aks-pools-access.bicep": [CUSTOM_POOL_ROLE, CUSTOM_OPERATIONS_ROLE],
    "modules/keyvault.bicep": ["Key Vault Secrets Officer", "Key Vault Secrets User"],
    # one per alert rule's own identity, on the Application Insights component
    "modules/monitoring.bicep": ["Monitoring Reader"] * 3,
}

# The Kubernetes calls of shared/adapters (nodes get/list/patch/delete, pods list, pods/eviction create,
# events create, configmaps get/create/update/patch, poddisruptionbudgets list, daemonsets list) as Azure RBAC
# data actions.
AKS_DATA_ACTIONS = {
    "Microsoft.ContainerService/managedClusters/nodes/read",
    "Microsoft.ContainerService/managedClusters/nodes/write",
    "Microsoft.ContainerService/managedClusters/nodes/delete",
    "Microsoft.ContainerService/managedClusters/pods/read",
    "Microsoft.ContainerService/managedClusters/pods/write",  # pods/eviction create is checked as pods/write
    "Microsoft.ContainerService/managedClusters/events/write",
    "Microsoft.ContainerService/managedClusters/configmaps/read",
    "Microsoft.ContainerService/managedClusters/configmaps/write",
    "Microsoft.ContainerService/managedClusters/policy/poddisruptionbudgets/read",
    "Microsoft.ContainerService/managedClusters/apps/daemonsets/read",
}

# Settings the Functions host and its Python worker read (not in shared/settings.py).
HOST_SETTINGS = {
    "AzureWebJobsStorage__credential",
    "AzureWebJobsStorage__clientId",
    "AzureWebJobsStorage__blobServiceUri",
    "AzureWebJobsStorage__queueServiceUri",
    "AzureWebJobsStorage__tableServiceUri",
    "APPLICATIONINSIGHTS_CONNECTION_STRING",
    "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
    "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
}
SPEC_NAMES = {spec.name for spec in SPECS}
SPEC_DEFAULTS = {spec.name: spec.default for spec in SPECS}


def test_every_bicep_file_parses_and_the_layout_is_complete() -> None:
    files = bicep_files()
    assert set(files) == {"main.bicep", *EXPECTED_ASSIGNMENTS, "modules/identity.bicep", "modules/functionapp.bicep",
                          "modules/scheduled-events.bicep"}
    for relative in files:
        assert parse(relative), relative


def test_main_uses_every_module_and_only_existing_ones() -> None:
    paths = {module["detail"]["path"] for module in parse("main.bicep")["modules"].values()}
    assert paths == {relative for relative in bicep_files() if relative.startswith("modules/")}


# --- role assignments ---------------------------------------------------------------------------------------


def _role_assignments() -> list[tuple[str, str, dict[str, Any]]]:
    return [(relative, symbol, res) for relative in bicep_files()
            for symbol, res in resources(relative, ROLE_ASSIGNMENT).items()]


def _role_of(relative: str, assignment: dict[str, Any]) -> str:
    """Name of the role an assignment grants: a known built-in id, or this file's custom role definition."""
    role = resource_body(assignment)["properties"]["roleDefinitionId"]
    function = role["function"]
    assert function["type"] == "subscription_resource_id", "roles are named by subscriptionResourceId()"
    assert function["parameters"]["resource_type"] == ROLE_DEFINITION
    name = function["parameters"]["resource_name_1"]
    custom = resources(relative, ROLE_DEFINITION)
    # This file's custom role, by the name it is created with; otherwise a built-in role's id.
    operands = name.get("operator", {}).get("operands", {}) if isinstance(name, dict) else {}
    if operands.get("operand_1") in custom:
        assert operands["operand_2"] == "name", f"{relative}: {name}"
        return CUSTOM_ROLES[(relative, operands["operand_1"])]
    role_id = evaluate(name, file_scope(relative, {}, {}))
    assert role_id in ROLES, f"{relative}: unknown role definition id {role_id}"
    return ROLES[role_id]


def test_every_role_assignment_grants_an_expected_role_in_the_expected_file() -> None:
    granted: dict[str, list[str]] = {}
    for relative, _symbol, assignment in _role_assignments():
        granted.setdefault(relative, []).append(_role_of(relative, assignment))
    assert {relative: sorted(roles) for relative, roles in granted.items()} == EXPECTED_ASSIGNMENTS


def test_no_role_assignment_reaches_a_subscription_or_management_group() -> None:
    for relative, symbol, assignment in _role_assignments():
        assert target_scope(relative) == "resourceGroup", f"{relative}: assignments only in resource group modules"
        scope = resource_body(assignment).get("scope")
        # Absent: the module's resource group. Otherwise a resource of the same file (account, vault, cluster...).
        if scope is not None:
            assert isinstance(scope, str) and scope in resources(relative), f"{relative}:{symbol} scope {scope!r}"
            assert resources(relative)[scope]["type"] != "Microsoft.Resources/resourceGroups"
    for relative in bicep_files():
        # subscription() and tenant() appear only to read ids, never as a scope.
        assert not re.search(r"scope:\s*(subscription|managementGroup|tenant)\(", text(relative)), relative
        assert target_scope(relative) in ("resourceGroup", "subscription"), relative
    assert [r for r in bicep_files() if target_scope(r) == "subscription"] == ["main.bicep"]


def test_every_role_assignment_says_why_in_a_comment_above_it() -> None:
    for relative, symbol, _assignment in _role_assignments():
        reason = comment_above(relative, "resource", symbol)
        assert len(reason.split()) >= 5, f"{relative}: role assignment {symbol} needs a one-line reason above it"


def test_virtual_machine_contributor_only_on_the_node_resource_groups() -> None:
    vm_contributor = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
    holders = [relative for relative in bicep_files() if vm_contributor in text(relative)]
    assert holders == ["modules/node-access.bicep"]
    assert target_scope("modules/node-access.bicep") == "resourceGroup"

    node_modules = {symbol: module for symbol, module in parse("main.bicep")["modules"].items()
                    if module["detail"]["path"] == "modules/node-access.bicep"}
    assert list(node_modules) == ["nodeAccess"]
    config = node_modules["nodeAccess"]["config"]
    loop = config["loop_type"]["detail"]
    assert loop["array_name"] == "nodeResourceGroupList"
    scope = config["config"]["scope"]["function"]
    assert scope["type"] == "resource_group"
    assert scope["parameters"]["resource_group_name"] == loop["item_name"]
    assert scope["parameters"]["subscription_id"] == "nodeSubscription"

    # The list is NODE_RESOURCE_GROUPS itself: one module per entry, nothing else.
    main = _main_scope(kube_auth="aks", usage_source="none")
    assert main["nodeResourceGroupList"] == ["rg-nodes-a", "rg-nodes-b"]
    assert main["nodeSubscription"] == NODE_SUBSCRIPTION


def test_cross_resource_group_modules_are_deployed_at_resource_group_scope() -> None:
    for symbol, module in parse("main.bicep")["modules"].items():
        body = module["config"].get("config", module["config"])
        scope = body["scope"]
        assert scope == "rg" or scope["function"]["type"] == "resource_group", symbol
    assert [r["type"] for r in resources("main.bicep").values()] == ["Microsoft.Resources/resourceGroups"]


def test_custom_aks_role_has_exactly_the_data_actions_the_code_needs() -> None:
    relative = "modules/aks-access.bicep"
    (definition,) = resources(relative, ROLE_DEFINITION).values()
    properties = resource_body(definition)["properties"]
    (permission,) = properties["permissions"]
    scope = file_scope(relative, {}, {})
    assert set(evaluate(permission["dataActions"], scope)) == AKS_DATA_ACTIONS
    assert len(evaluate(permission["dataActions"], scope)) == len(AKS_DATA_ACTIONS)
    assert permission["actions"] == [] and permission["notDataActions"] == []
    (assignable,) = properties["assignableScopes"]
    assert assignable["operator"]["operands"]["operand_1"]["function"]["type"] == "resource_group"
    # Each data action carries the reason it is needed on the line above it.
    lines = text(relative).splitlines()
    for index, line in enumerate(lines):
        if line.strip().strip("'") in AKS_DATA_ACTIONS:
            assert lines[index - 1].strip().startswith("//"), line
    # Assigned on the cluster, not its resource group.
    custom = [a for a in resources(relative, ROLE_ASSIGNMENT).values() if _role_of(relative, a) == CUSTOM_AKS_ROLE]
    (assignment,) = custom
    cluster = resource_body(assignment)["scope"]
    assert resources(relative)[cluster]["type"] == "Microsoft.ContainerService/managedClusters"


# --- the node role and the AKS agent-pool roles, against the adapters' calls ---------------------------------

ADAPTERS = ROOT / "shared" / "adapters"
# An ARM client call in an adapter: `self._client.<operation group>.<method>` or `network.<group>.<method>`
# (the lazily made Network client), called or passed on (`begin=self._client.virtual_machines.begin_start`).
_SDK_CALL = re.compile(r"(?:self\._client|\bclient|\bnetwork)\.([a-z]\w*)\.([a-z]\w*)")

# Every SDK call of the Uniform (compute.py) and Flexible (flex_compute.py) backends -> the ARM action it needs.
# None: not granted, on purpose (see the comment at it).
SCALE_SET_CALLS: dict[tuple[str, str], str | None] = {
    ("virtual_machine_scale_sets", "list"): "Microsoft.Compute/virtualMachineScaleSets/read",
    ("virtual_machine_scale_sets", "get"): "Microsoft.Compute/virtualMachineScaleSets/read",
    ("virtual_machine_scale_sets", "begin_update"): "Microsoft.Compute/virtualMachineScaleSets/write",
    ("virtual_machine_scale_sets", "begin_delete_instances"): "Microsoft.Compute/virtualMachineScaleSets/delete/action",
    ("virtual_machine_scale_sets", "begin_deallocate"): "Microsoft.Compute/virtualMachineScaleSets/deallocate/action",
    ("virtual_machine_scale_sets", "begin_start"): "Microsoft.Compute/virtualMachineScaleSets/start/action",
    ("virtual_machine_scale_set_vms", "list"): "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
    ("virtual_machine_scale_set_vms", "get"): "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
    ("virtual_machine_scale_set_vms", "begin_update"): "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/write",
    ("network_interfaces", "list_virtual_machine_scale_set_network_interfaces"):
        "Microsoft.Compute/virtualMachineScaleSets/networkInterfaces/read",
    # A subscription-level read no resource-group assignment reaches: list_vm_sizes falls back to its table.
    ("resource_skus", "list"): None,
    ("virtual_machines", "list"): "Microsoft.Compute/virtualMachines/read",
    ("virtual_machines", "get"): "Microsoft.Compute/virtualMachines/read",
    ("virtual_machines", "begin_deallocate"): "Microsoft.Compute/virtualMachines/deallocate/action",
    ("virtual_machines", "begin_start"): "Microsoft.Compute/virtualMachines/start/action",
    ("network_interfaces", "list"): "Microsoft.Network/networkInterfaces/read",
}
# Not a call of ours, but what ARM checks on our identity while serving them.
SCALE_SET_EXTRAS = {
    # polling every long-running operation above (Azure-AsyncOperation)
    "Microsoft.Compute/locations/operations/read",
    # a Flexible set's growth creates member VMs and their NICs from its profile (exact checks unverified)
    "Microsoft.Compute/virtualMachines/write",
    "Microsoft.Network/networkInterfaces/write",
    "Microsoft.Network/networkInterfaces/join/action",
    # linked checks on what the scale set's model references (LinkedAuthorizationFailed without them)
    "Microsoft.Network/virtualNetworks/subnets/join/action",
    "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action",
    "Microsoft.Network/loadBalancers/backendAddressPools/join/action",
    "Microsoft.Network/loadBalancers/inboundNatPools/join/action",
    "Microsoft.Network/loadBalancers/probes/join/action",
    "Microsoft.Network/applicationGateways/backendAddressPools/join/action",
    "Microsoft.Network/networkSecurityGroups/join/action",
    "Microsoft.Network/applicationSecurityGroups/joinIpConfiguration/action",
}
NODE_ACTIONS = [
    "Microsoft.Compute/virtualMachineScaleSets/read",
    "Microsoft.Compute/virtualMachineScaleSets/write",
    "Microsoft.Compute/virtualMachineScaleSets/delete/action",
    "Microsoft.Compute/virtualMachineScaleSets/deallocate/action",
    "Microsoft.Compute/virtualMachineScaleSets/start/action",
    "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
    "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/write",
    "Microsoft.Compute/virtualMachineScaleSets/networkInterfaces/read",
    "Microsoft.Compute/locations/operations/read",
    "Microsoft.Compute/virtualMachines/read",
    "Microsoft.Compute/virtualMachines/deallocate/action",
    "Microsoft.Compute/virtualMachines/start/action",
    "Microsoft.Network/networkInterfaces/read",
    "Microsoft.Compute/virtualMachines/write",
    "Microsoft.Network/networkInterfaces/write",
    "Microsoft.Network/networkInterfaces/join/action",
    "Microsoft.Network/virtualNetworks/subnets/join/action",
    "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action",
    "Microsoft.Network/loadBalancers/backendAddressPools/join/action",
    "Microsoft.Network/loadBalancers/inboundNatPools/join/action",
    "Microsoft.Network/loadBalancers/probes/join/action",
    "Microsoft.Network/applicationGateways/backendAddressPools/join/action",
    "Microsoft.Network/networkSecurityGroups/join/action",
    "Microsoft.Network/applicationSecurityGroups/joinIpConfiguration/action",
]
# What Virtual Machine Contributor allows that the custom role must not (facts/cluster-shapes.md).
NOT_IN_NODE_ROLE = [
    "Microsoft.Compute/skus/read",
    "Microsoft.Compute/virtualMachineScaleSets/delete",
    "Microsoft.Compute/virtualMachineScaleSets/extensions/write",
    "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/runCommand/action",
    "Microsoft.Compute/virtualMachines/delete",
    "Microsoft.Compute/virtualMachines/extensions/write",
    "Microsoft.Compute/virtualMachines/runCommand/action",
    "Microsoft.Compute/disks/delete",
    "Microsoft.Network/networkInterfaces/delete",
    "Microsoft.Network/publicIPAddresses/join/action",
]

# Every SDK call of the agent-pool backend (aks_pools.py) -> its action, all on the cluster.
AKS_POOL_CALLS = {
    ("managed_clusters", "get"): "Microsoft.ContainerService/managedClusters/read",
    ("agent_pools", "list"): "Microsoft.ContainerService/managedClusters/agentPools/read",
    ("agent_pools", "get"): "Microsoft.ContainerService/managedClusters/agentPools/read",
    ("agent_pools", "begin_create_or_update"): "Microsoft.ContainerService/managedClusters/agentPools/write",
    ("agent_pools", "begin_delete_machines"):
        "Microsoft.ContainerService/managedClusters/agentPools/deleteMachines/action",
    ("machines", "list"): "Microsoft.ContainerService/managedClusters/agentPools/machines/read",
    ("machines", "get"): "Microsoft.ContainerService/managedClusters/agentPools/machines/read",
}
AKS_POOL_ACTIONS = [
    "Microsoft.ContainerService/managedClusters/read",
    "Microsoft.ContainerService/managedClusters/agentPools/read",
    "Microsoft.ContainerService/managedClusters/agentPools/write",
    "Microsoft.ContainerService/managedClusters/agentPools/deleteMachines/action",
    "Microsoft.ContainerService/managedClusters/agentPools/machines/read",
]
# Every SDK call of the Standby Pool adapter (standby_pools.py) -> its action, on the node resource groups' pools.
STANDBY_POOL_CALLS = {
    "list_by_resource_group": "Microsoft.StandbyPool/standbyVirtualMachinePools/read",
    "update": "Microsoft.StandbyPool/standbyVirtualMachinePools/write",
}
STANDBY_POOL_ACTIONS = [
    "Microsoft.StandbyPool/standbyVirtualMachinePools/read",
    "Microsoft.StandbyPool/standbyVirtualMachinePools/write",
]
# KUBE_AUTH=aks without manageAksPools: the listing every poll makes (AksAgentPools.list_node_groups).
# Polling the pool's PUT and deleteMachines (Azure-AsyncOperation, then Location), at the resource group.
AKS_OPERATION_ACTIONS = [
    "Microsoft.ContainerService/locations/operations/read",
    "Microsoft.ContainerService/locations/operationresults/read",
]


def _sdk_calls(*files: str) -> set[tuple[str, str]]:
    return {match.groups() for name in files for match in _SDK_CALL.finditer((ADAPTERS / name).read_text())}


def _custom_role(relative: str, symbol: str, params: dict[str, Any] | None = None) -> tuple[list[str], dict[str, Any]]:
    """(evaluated actions, properties) of a custom role definition, its permissions checked for shape."""
    properties = resource_body(resources(relative, ROLE_DEFINITION)[symbol])["properties"]
    assert properties["type"] == "CustomRole"
    (permission,) = properties["permissions"]
    assert permission["notActions"] == [] and permission["dataActions"] == [] and permission["notDataActions"] == []
    actions = evaluate(permission["actions"], file_scope(relative, params or {}, {}))
    assert actions and all(isinstance(a, str) for a in actions)
    assert len(actions) == len(set(actions)), f"{relative}:{symbol} lists an action twice"
    assert not any("*" in action for action in actions), f"{relative}:{symbol} has a wildcard"
    # Assignable only at the resource group the module is deployed to, never the subscription.
    (assignable,) = properties["assignableScopes"]
    assert assignable["operator"]["operands"]["operand_1"]["function"]["type"] == "resource_group"
    assert assignable["operator"]["operands"]["operand_2"] == "id"
    return actions, properties


def _each_action_has_a_reason(relative: str, actions: list[str]) -> None:
    lines = text(relative).splitlines()
    for action in actions:
        found = [i for i, line in enumerate(lines) if line.strip().strip("'") == action]
        assert found, f"{relative}: {action} is not on a line of its own"
        for index in found:
            assert lines[index - 1].strip().startswith("//"), f"{relative}: {action} needs a reason above it"


def _condition(relative: str, symbol: str, params: dict[str, Any]) -> bool:
    config = resources(relative)[symbol]["config"]
    return "condition" not in config or bool(evaluate(config["condition"], file_scope(relative, params, {})))


def test_the_adapters_call_only_what_the_scale_set_roles_are_checked_against() -> None:
    """A new SDK call in an adapter fails here until its action is decided (granted, or not and why)."""
    assert _sdk_calls("compute.py", "flex_compute.py") == set(SCALE_SET_CALLS)
    assert _sdk_calls("aks_pools.py") == set(AKS_POOL_CALLS)
    granted = {action for action in SCALE_SET_CALLS.values() if action is not None}
    assert granted | SCALE_SET_EXTRAS == set(NODE_ACTIONS)
    assert set(AKS_POOL_CALLS.values()) == set(AKS_POOL_ACTIONS)


def test_custom_node_role_has_exactly_the_scale_set_actions() -> None:
    relative = "modules/node-access.bicep"
    actions, _ = _custom_role(relative, "nodeRoleDefinition")
    assert actions == NODE_ACTIONS
    assert not set(actions) & set(NOT_IN_NODE_ROLE)
    _each_action_has_a_reason(relative, actions)


def test_virtual_machine_contributor_stays_the_default_and_never_both() -> None:
    relative = "modules/node-access.bicep"
    node_role = parse(relative)["parameters"]["nodeRole"]
    assert node_role["default"] == "VirtualMachineContributor"
    main = parse("main.bicep")
    assert main["parameters"]["nodeRole"]["default"] == "VirtualMachineContributor"
    assert sorted(_allowed("nodeRole")) == ["Custom", "VirtualMachineContributor"]
    (allowed,) = [d["argument"] for d in node_role["decorators"] if d["type"] == "allowed"]
    assert sorted(allowed) == sorted(_allowed("nodeRole"))
    params = main["modules"]["nodeAccess"]["config"]["config"]["params"]
    assert params["nodeRole"] == "nodeRole"
    parameters = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert parameters["nodeRole"]["value"] == "${NODE_ROLE=VirtualMachineContributor}"

    assignments = resources(relative, ROLE_ASSIGNMENT)
    granted = {value: {_role_of(relative, assignment) for symbol, assignment in assignments.items()
                       if _condition(relative, symbol, {"nodeRole": value, "grantMetricsReader": False})}
               for value in ("VirtualMachineContributor", "Custom")}
    assert granted == {"VirtualMachineContributor": {"Virtual Machine Contributor"}, "Custom": {CUSTOM_NODE_ROLE}}
    assert _condition(relative, "nodeRoleDefinition", {"nodeRole": "Custom"})
    assert not _condition(relative, "nodeRoleDefinition", {"nodeRole": "VirtualMachineContributor"})
    # The custom role is assigned at the node resource group itself, like Virtual Machine Contributor.
    for symbol, assignment in resources(relative, ROLE_ASSIGNMENT).items():
        assert "scope" not in resource_body(assignment), symbol


def test_standby_pool_role_is_granted_exactly_with_standby_pools() -> None:
    relative = "modules/node-access.bicep"
    actions, _ = _custom_role(relative, "standbyPoolRole", {"grantStandbyPools": True})
    assert actions == STANDBY_POOL_ACTIONS
    _each_action_has_a_reason(relative, actions)
    # The adapter's calls on the pools' operations (`self._client.standby_virtual_machine_pools`, or it held as
    # `operations`).
    calls = set(re.findall(r"(?:\.standby_virtual_machine_pools|\boperations)\.(\w+)\(",
                           (ADAPTERS / "standby_pools.py").read_text()))
    assert calls == set(STANDBY_POOL_CALLS) and set(STANDBY_POOL_CALLS.values()) == set(actions)
    assignments = resources(relative, ROLE_ASSIGNMENT)
    for grant in (False, True):
        for value in ("VirtualMachineContributor", "Custom"):
            params = {"nodeRole": value, "grantMetricsReader": False, "grantStandbyPools": grant}
            granted = {_role_of(relative, a) for symbol, a in assignments.items() if _condition(relative, symbol, params)}
            assert (CUSTOM_STANDBY_POOL_ROLE in granted) is grant
            assert _condition(relative, "standbyPoolRole", params) is grant
    assert "scope" not in resource_body(assignments["standbyPoolAccess"])  # the node resource group's pools only
    # main.bicep: the parameter (off by default) grants the role on every node resource group and sets the setting.
    assert parse("main.bicep")["parameters"]["standbyPools"]["default"] is False
    assert parse("main.bicep")["modules"]["nodeAccess"]["config"]["config"]["params"]["grantStandbyPools"] == "standbyPools"
    parameters = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert parameters["standbyPools"]["value"] == "${STANDBY_POOLS=false}"
    for enabled in (False, True):
        env = deployed_app_settings("aks", "none", standbyPools=enabled)
        assert env["STANDBY_POOLS"] == ("true" if enabled else "false")
        assert load_settings(env).standby_pools is enabled


def test_aks_pool_role_has_exactly_the_agent_pool_actions_on_the_cluster_only() -> None:
    relative = "modules/aks-pools-access.bicep"
    managing, _ = _custom_role(relative, "poolRole")
    assert managing == AKS_POOL_ACTIONS
    operations, _ = _custom_role(relative, "operationStatusRole")
    assert operations == AKS_OPERATION_ACTIONS
    for actions in (managing, operations):
        _each_action_has_a_reason(relative, actions)
    # Nothing to delete a pool or the cluster, no credentials, no Kubernetes data actions.
    assert not {a for a in managing if a.endswith("/delete") or "Credential" in a or "runCommand" in a}

    assignments = resources(relative, ROLE_ASSIGNMENT)
    by_role = {_role_of(relative, a): symbol for symbol, a in assignments.items()}
    assert set(by_role) == {CUSTOM_POOL_ROLE, CUSTOM_OPERATIONS_ROLE}
    # The pools role: on the cluster.
    pool_assignment = resource_body(assignments[by_role[CUSTOM_POOL_ROLE]])
    assert resources(relative)[pool_assignment["scope"]]["type"] == "Microsoft.ContainerService/managedClusters"
    # The operation-status reads: at the cluster's resource group (ARM checks them there).
    assert "scope" not in resource_body(assignments[by_role[CUSTOM_OPERATIONS_ROLE]])
    for symbol in assignments:
        assert "condition" not in assignments[symbol]["config"]


@pytest.mark.parametrize("kube_auth,manage", [
    ("aks", False),  # AKS_CLUSTER_ID for the Kubernetes connection only: the agentPools API is never called
    ("aks", True),
    ("key-vault", True),  # the agent-pool backend does not need KUBE_AUTH=aks
    ("key-vault", False),
])
def test_aks_pools_access_is_deployed_exactly_when_the_app_manages_pools(kube_auth: str, manage: bool) -> None:
    extra = {"manageAksPools": manage, "aksClusterId": AKS_ID if (kube_auth == "aks" or manage) else ""}
    main = _main_scope(kube_auth, "none", **extra)
    module = parse("main.bicep")["modules"]["aksPoolsAccess"]
    assert module["detail"]["path"] == "modules/aks-pools-access.bicep"
    assert bool(evaluate(module["config"]["condition"], main)) is manage
    env = deployed_app_settings(kube_auth, "none", **extra)
    assert env["MANAGE_AKS_POOLS"] == ("true" if manage else "false")
    assert (env["AKS_CLUSTER_ID"] == AKS_ID) is (kube_auth == "aks" or manage)
    if manage:
        child = main["aksPoolsAccess"]["scope"]()
        assert child["clusterName"] == "prod-aks"
        scope = module["config"]["config"]["scope"]["function"]
        assert scope["type"] == "resource_group"
        assert evaluate(scope["parameters"]["subscription_id"], main) == "99999999-0000-0000-0000-000000000000"
        assert evaluate(scope["parameters"]["resource_group_name"], main) == "rg-aks"


def test_aks_node_pools_setting_is_passed_and_loads() -> None:
    pools = "render:0:20,batch:1:5"
    env = deployed_app_settings("key-vault", "none", manageAksPools=True, aksClusterId=AKS_ID, aksNodePools=pools)
    assert env["AKS_NODE_POOLS"] == pools and env["AKS_CLUSTER_ID"] == AKS_ID
    settings = load_settings(env)
    assert dict(settings.aks_node_pools) == {"render": (0, 20), "batch": (1, 5)}
    assert settings.kube_auth == "key-vault" and settings.aks_cluster_id == AKS_ID
    # Without manageAksPools the pools are not passed on, whatever the parameter says.
    env = deployed_app_settings("aks", "none", aksNodePools=pools)
    assert env["AKS_NODE_POOLS"] == ""
    assert dict(load_settings(env).aks_node_pools) == {}
    parameters = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert parameters["manageAksPools"]["value"] == "${MANAGE_AKS_POOLS=false}"
    assert parameters["aksNodePools"]["value"] == "${AKS_NODE_POOLS=}"
    assert parse("main.bicep")["parameters"]["manageAksPools"]["default"] is False


# --- resources ------------------------------------------------------------------------------------------------


def test_storage_account_accepts_entra_id_only_over_tls() -> None:
    (account,) = resources("modules/storage.bicep", "Microsoft.Storage/storageAccounts").values()
    properties = account["config"]["properties"]
    assert properties["allowSharedKeyAccess"] is False
    assert properties["minimumTlsVersion"] == "TLS1_2"
    assert properties["allowBlobPublicAccess"] is False
    assert properties["supportsHttpsTrafficOnly"] is True
    assert properties["defaultToOAuthAuthentication"] is True


def test_application_insights_takes_entra_id_telemetry_only() -> None:
    (component,) = resources("modules/insights.bicep", "Microsoft.Insights/components").values()
    properties = component["config"]["properties"]
    assert properties["DisableLocalAuth"] is True
    assert properties["WorkspaceResourceId"]


def test_key_vault_uses_rbac_and_keeps_deleted_secrets() -> None:
    (vault,) = resources("modules/keyvault.bicep", "Microsoft.KeyVault/vaults").values()
    properties = vault["config"]["properties"]
    assert properties["enableRbacAuthorization"] is True
    assert properties["enableSoftDelete"] is True
    assert properties["enablePurgeProtection"] is True
    assert properties["publicNetworkAccess"] == "publicNetworkAccess"  # the parameter
    # The kubeconfig never passes through a deployment: no secret resource, no secure parameter.
    for relative in bicep_files():
        assert "Microsoft.KeyVault/vaults/secrets" not in text(relative), relative
        assert "@secure()" not in text(relative), relative


def test_flex_consumption_plan_and_function_app() -> None:
    relative = "modules/functionapp.bicep"
    (plan,) = resources(relative, "Microsoft.Web/serverfarms").values()
    assert plan["config"]["sku"] == {"name": "FC1", "tier": "FlexConsumption"}
    assert plan["config"]["properties"]["reserved"] is True
    (site,) = resources(relative, "Microsoft.Web/sites").values()
    config = site["config"]
    assert config["kind"] == "functionapp,linux"
    assert config["identity"]["type"] == "UserAssigned"
    app = config["properties"]["functionAppConfig"]
    assert app["runtime"] == {"name": "python", "version": "3.11"}
    assert app["scaleAndConcurrency"]["instanceMemoryMB"] == 2048
    storage = app["deployment"]["storage"]
    assert storage["type"] == "blobContainer"
    assert storage["authentication"] == {"type": "UserAssignedIdentity", "userAssignedIdentityResourceId": "identityId"}
    assert config["properties"]["httpsOnly"] is True
    max_instances = parse("main.bicep")["parameters"]["maximumInstanceCount"]["default"]
    assert 1 <= max_instances <= 10


def test_queue_and_table_created_are_the_ones_the_app_uses() -> None:
    main = parse("main.bicep")
    assert main["parameters"]["scaleActionsQueue"]["default"] == SPEC_DEFAULTS["SCALE_ACTIONS_QUEUE"] == "scale-actions"
    assert main["parameters"]["stateTable"]["default"] == SPEC_DEFAULTS["STATE_TABLE"] == "autoscalerstate"
    assert main["parameters"]["pendingPollSchedule"]["default"] == SPEC_DEFAULTS["PENDING_POLL_SCHEDULE"]
    assert main["parameters"]["utilizationPollSchedule"]["default"] == SPEC_DEFAULTS["UTILIZATION_POLL_SCHEDULE"]
    assert main["parameters"]["stateSweepSchedule"]["default"] == SPEC_DEFAULTS["STATE_SWEEP_SCHEDULE"]
    storage_params = main["modules"]["storage"]["config"]["params"]
    assert storage_params["queueName"] == "scaleActionsQueue" and storage_params["tableName"] == "stateTable"

    relative = "modules/storage.bicep"
    scope = file_scope(relative, {"queueName": "scale-actions", "tableName": "autoscalerstate",
                                  "deploymentContainerName": "app-package-x"}, {})
    queues = {evaluate(q["config"]["name"], scope)
              for q in resources(relative, "Microsoft.Storage/storageAccounts/queueServices/queues").values()}
    tables = {evaluate(t["config"]["name"], scope)
              for t in resources(relative, "Microsoft.Storage/storageAccounts/tableServices/tables").values()}
    assert queues == {"scale-actions", "scale-actions-poison"}
    assert tables == {"autoscalerstate"}


# --- app settings, as the deployment computes them -------------------------------------------------------

NODE_SUBSCRIPTION = "11111111-2222-3333-4444-555555555555"
CLIENT_ID = "aaaaaaaa-0000-0000-0000-000000000001"
AKS_ID = ("/subscriptions/99999999-0000-0000-0000-000000000000/resourceGroups/rg-aks/providers/"
          "Microsoft.ContainerService/managedClusters/prod-aks")
WORKSPACE_ID = ("/subscriptions/99999999-0000-0000-0000-000000000000/resourceGroups/rg-logs/providers/"
                "Microsoft.OperationalInsights/workspaces/ci-logs")
WORKSPACE_GUID = "bbbbbbbb-0000-0000-0000-000000000002"
SUBSCRIPTION = {"subscriptionId": NODE_SUBSCRIPTION, "id": f"/subscriptions/{NODE_SUBSCRIPTION}",
                "tenantId": "cccccccc-0000-0000-0000-000000000003"}

# Runtime properties of resources, which only Azure knows; everything else is evaluated from the templates.
RESOURCE_VALUES: dict[str, dict[str, Any]] = {
    "modules/identity.bicep": {"identity": {
        "id": "/subscriptions/x/resourceGroups/rg-prod/providers/Microsoft.ManagedIdentity/userAssignedIdentities/id-a",
        "name": "id-a",
        "properties": {"clientId": CLIENT_ID, "principalId": "dddddddd-0000-0000-0000-000000000004"}}},
    "modules/storage.bicep": {"storage": {
        "name": "stabc", "id": "/subscriptions/x/storageAccounts/stabc",
        "properties": {"primaryEndpoints": {"blob": "https://stabc.blob.core.windows.net/",
                                            "queue": "https://stabc.queue.core.windows.net/",
                                            "table": "https://stabc.table.core.windows.net/"}}}},
    "modules/insights.bicep": {
        "applicationInsights": {"name": "appi-abc", "id": "/subscriptions/x/components/appi-abc", "properties": {
            "ConnectionString": "InstrumentationKey=00000000-0000-0000-0000-000000000000;"
                                "IngestionEndpoint=https://westeurope-5.in.applicationinsights.azure.com/"}},
        "workspace": {"name": "log-abc"}},
    "modules/keyvault.bicep": {"vault": {"name": "kv-abc", "id": "/subscriptions/x/vaults/kv-abc",
                                         "properties": {"vaultUri": "https://kv-abc.vault.azure.net/"}}},
    "modules/workspace-access.bicep": {"workspace": {"id": WORKSPACE_ID, "properties": {"customerId": WORKSPACE_GUID}}},
}


def _main_inputs(kube_auth: str, usage_source: str) -> dict[str, Any]:
    return {
        "environmentName": "prod",
        "location": "westeurope",
        "clusterName": "prod-1",
        "nodeResourceGroups": "rg-nodes-a, rg-nodes-b",
        "nodeSubscriptionId": "",
        "kubeAuth": kube_auth,
        "aksClusterId": AKS_ID if kube_auth == "aks" else "",
        "usageSource": usage_source,
        "containerInsightsWorkspaceId": WORKSPACE_ID if usage_source == "log-analytics" else "",
    }


def _module_scopes(main: Scope) -> dict[str, Any]:
    """Module symbol -> {"outputs": ...}, each module evaluated on first access with main's values."""
    modules: dict[str, Any] = {}
    for symbol, module in parse("main.bicep")["modules"].items():
        relative = module["detail"]["path"]
        body = module["config"].get("config", module["config"])

        @cache
        def child(relative: str = relative, params: dict[str, Any] = body["params"]) -> Scope:
            lazy_params = Lazy({name: (lambda value=value: evaluate(value, main)) for name, value in params.items()})
            return file_scope(relative, lazy_params, RESOURCE_VALUES.get(relative, {}), subscription=SUBSCRIPTION)

        outputs = parse(relative).get("outputs", {})
        modules[symbol] = {
            "outputs": Lazy({name: (lambda name=name, child=child, relative=relative:
                                    module_outputs(relative, child())[name]) for name in outputs}),
            "scope": child,
        }
    return modules


def _main_scope(kube_auth: str, usage_source: str, **extra: Any) -> Scope:
    """main.bicep's names for these modes; `extra` sets more of its parameters (e.g. manageAksPools)."""
    main = file_scope("main.bicep", {**_main_inputs(kube_auth, usage_source), **extra}, {"rg": {"name": "rg-prod"}},
                      subscription=SUBSCRIPTION)
    main._values.update(_module_scopes(main))
    return main


def deployed_app_settings(kube_auth: str, usage_source: str, **extra: Any) -> dict[str, str]:
    """The function app's settings as the deployment would set them for these parameters."""
    main = _main_scope(kube_auth, usage_source, **extra)
    function_app: Scope = main["functionApp"]["scope"]()
    settings = function_app["appSettings"]
    assert all(isinstance(value, str) for value in settings.values()), settings
    return settings


def _allowed(param: str) -> list[str]:
    decorators = parse("main.bicep")["parameters"][param]["decorators"]
    (allowed,) = [d["argument"] for d in decorators if d["type"] == "allowed"]
    return allowed


MODES = [(auth, usage) for auth in ("aks", "key-vault") for usage in ("none", "log-analytics", "vmss-metric")]


def test_modes_offered_are_the_ones_that_work_in_azure() -> None:
    # kubeconfig (a file path) has no file to point at in a function app.
    assert sorted(_allowed("kubeAuth")) == ["aks", "key-vault"]
    assert sorted(_allowed("usageSource")) == ["log-analytics", "none", "vmss-metric"]
    assert {auth for auth, _ in MODES} == set(_allowed("kubeAuth"))
    assert {usage for _, usage in MODES} == set(_allowed("usageSource"))


@pytest.mark.parametrize("kube_auth,usage_source", MODES)
def test_deployed_settings_load_for_every_mode(kube_auth: str, usage_source: str) -> None:
    env = deployed_app_settings(kube_auth, usage_source)
    settings = load_settings(env)  # raises SettingsError naming anything required and missing
    assert settings.cluster_name == "prod-1"
    assert settings.node_resource_groups == ("rg-nodes-a", "rg-nodes-b")
    assert settings.subscription_id == NODE_SUBSCRIPTION
    assert settings.kube_auth == kube_auth and settings.usage_source == usage_source
    assert settings.azure_credential == "managed-identity" and settings.azure_client_id == CLIENT_ID
    assert settings.dry_run is False  # the template's default; azd's parameters file starts with true
    if kube_auth == "aks":
        assert settings.aks_cluster_id == AKS_ID
    else:
        assert settings.kubeconfig_secret_uri == "https://kv-abc.vault.azure.net/secrets/kubeconfig"
    if usage_source == "log-analytics":
        assert settings.log_analytics_workspace_id == WORKSPACE_GUID
    # The trigger bindings' %NAME% expressions resolve only from app settings, never from code defaults.
    for name in ("SCALE_ACTIONS_QUEUE", "PENDING_POLL_SCHEDULE", "UTILIZATION_POLL_SCHEDULE", "STATE_SWEEP_SCHEDULE"):
        assert env[name] == SPEC_DEFAULTS[name]


@pytest.mark.parametrize("kube_auth,usage_source", MODES)
def test_settings_required_for_the_mode_are_set(kube_auth: str, usage_source: str) -> None:
    """What load_settings demands for this mode (asked of the code itself, not listed here) is all present."""
    env = deployed_app_settings(kube_auth, usage_source)
    with pytest.raises(SettingsError) as raised:
        load_settings({"KUBE_AUTH": kube_auth, "USAGE_SOURCE": usage_source, "AZURE_CREDENTIAL": "managed-identity"})
    demanded = {problem.split(":", 1)[0] for problem in raised.value.problems}
    assert demanded >= {spec.name for spec in SPECS if spec.default is None}
    assert demanded <= set(env), demanded - set(env)


def test_every_setting_is_a_real_setting_and_none_holds_a_key() -> None:
    env = deployed_app_settings("key-vault", "log-analytics")
    unknown = set(env) - SPEC_NAMES - HOST_SETTINGS
    assert not unknown, f"not in shared/settings.py SPECS nor a host setting: {unknown}"
    assert HOST_SETTINGS <= set(env)
    assert "AzureWebJobsStorage" not in env  # a connection string would win over the identity settings
    assert env["AzureWebJobsStorage__credential"] == "managedidentity"
    assert env["AzureWebJobsStorage__clientId"] == env["AZURE_CLIENT_ID"] == CLIENT_ID
    assert env["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"] == f"ClientId={CLIENT_ID};Authorization=AAD"
    assert env["PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"] == "true"
    # Every trace kept, on purpose (docs/observability.md, "Sampling"): the distro's default would rate-limit them.
    assert (env["OTEL_TRACES_SAMPLER"], env["OTEL_TRACES_SAMPLER_ARG"]) == ("microsoft.fixed_percentage", "1.0")
    for name, value in env.items():
        if name != "APPLICATIONINSIGHTS_CONNECTION_STRING":
            assert "AccountKey=" not in value and "InstrumentationKey=" not in value, name
    for relative in bicep_files():
        assert "listKeys(" not in text(relative) and "AccountKey=" not in text(relative), relative
    # Our own storage adapter resolves the same settings to identity-based table and queue access.
    connection = resolve_storage(env, credential=object())
    assert connection.uses_identity
    assert connection.table_service_uri.startswith("https://stabc.table.")
    assert connection.queue_service_uri.startswith("https://stabc.queue.")


def test_extra_settings_cannot_override_the_identity_settings() -> None:
    extra = {"SCALE_DOWN_UNNEEDED_TIME": "15m", "AZURE_CREDENTIAL": "default", "KUBE_AUTH": "kubeconfig"}
    main = _main_scope("aks", "none")
    main._values["extraAppSettings"] = extra
    env = main["functionApp"]["scope"]()["appSettings"]
    assert env["SCALE_DOWN_UNNEEDED_TIME"] == "15m"
    assert env["AZURE_CREDENTIAL"] == "managed-identity" and env["KUBE_AUTH"] == "aks"


def test_function_app_takes_the_evaluated_settings_from_one_place() -> None:
    (site,) = resources("modules/functionapp.bicep", "Microsoft.Web/sites").values()
    loop = site["config"]["properties"]["siteConfig"]["appSettings"]
    items = {"type": "items", "parameters": {"arg_1": "appSettings"}}
    assert loop["loop_type"]["detail"]["array_name"]["function"] == items
    assert not resources("modules/functionapp.bicep", "Microsoft.Web/sites/config")
    params = parse("main.bicep")["modules"]["functionApp"]["config"]["params"]
    assert params["autoscalerSettings"] == "autoscalerSettings"


# --- alerts and workbook -----------------------------------------------------------------------------------

ALERTS = {
    # rule symbol: (query fragments, operator, threshold, window, frequency)
    "failedScaleUps": (['customEvents', 'name == "ScaleUp"', 'tostring(customDimensions.outcome) == "failed"'],
                       "GreaterThanOrEqual", 3, "PT30M", "PT5M"),
    "poisonMessages": (['tostring(customDimensions.poison) == "true"', 'traces', 'message has "MaxDequeueCount"'],
                       "GreaterThan", 0, "PT15M", "PT5M"),
    "noSuccessfulPoll": (['customMetrics', 'name == "cluster_autoscaler_last_activity"',
                          'tostring(customDimensions.activity) == "main"', "isnull(last_success)",
                          "datetime_diff('second', now(), datetime(1970-01-01)) - 600"],
                         "GreaterThanOrEqual", 1, "PT15M", "PT5M"),
}


def test_three_log_alerts_on_the_telemetry_contract() -> None:
    relative = "modules/monitoring.bicep"
    rules = resources(relative, "Microsoft.Insights/scheduledQueryRules")
    assert set(rules) == set(ALERTS)
    scope = file_scope(relative, {}, {})
    readers = {resource_body(a)["properties"]["principalId"]["operator"]["operands"]["operand_1"]
               for a in resources(relative, ROLE_ASSIGNMENT).values()}
    for symbol, (fragments, operator, threshold, window, frequency) in ALERTS.items():
        config = rules[symbol]["config"]
        properties = config["properties"]
        (criterion,) = properties["criteria"]["allOf"]
        for fragment in fragments:
            assert fragment in criterion["query"], (symbol, fragment)
        assert criterion["operator"] == operator and criterion["timeAggregation"] == "Count"
        assert evaluate(criterion["threshold"], scope) == threshold
        assert properties["windowSize"] == window and properties["evaluationFrequency"] == frequency
        assert properties["scopes"] == [{"operator": {"type": "property_accessor", "operands": {
            "operand_1": "applicationInsights", "operand_2": "id"}}}]
        # Its own identity runs the query, with read access to the component only.
        assert config["identity"] == {"type": "SystemAssigned"}
        assert symbol in readers
        assert properties["actions"] == {"actionGroups": "actionGroups"}


def test_alert_mail_goes_out_only_when_an_address_is_given() -> None:
    relative = "modules/monitoring.bicep"
    (group,) = resources(relative, "Microsoft.Insights/actionGroups").values()
    assert group["config"]["condition"]["operator"]["type"] == "not"
    no_mail = file_scope(relative, {"alertEmail": ""}, {"actionGroup": {"id": "ag-id"}})
    mail = file_scope(relative, {"alertEmail": "ops@example.com"}, {"actionGroup": {"id": "ag-id"}})
    assert no_mail["actionGroups"] == [] and mail["actionGroups"] == ["ag-id"]


def test_workbook_is_loaded_from_a_valid_json_file() -> None:
    (workbook,) = resources("modules/monitoring.bicep", "Microsoft.Insights/workbooks").values()
    load = workbook["config"]["properties"]["serializedData"]["function"]
    assert load["type"] == "load_text_content"
    path = (INFRA / "modules" / load["parameters"]["file_path"]).resolve()
    assert path == INFRA / "workbook.json"
    content = json.loads(path.read_text())
    assert content["version"].startswith("Notebook/")
    assert workbook["config"]["kind"] == "shared"


# --- azd, parameters, package ------------------------------------------------------------------------------


def test_azure_yaml_deploys_the_app_with_this_infra() -> None:
    config = yaml.safe_load((ROOT / "azure.yaml").read_text())
    assert config["infra"]["path"] == "infra" and config["infra"].get("module", "main") == "main"
    (service,) = config["services"]
    assert config["services"][service] | {"remoteBuild": True} == {
        "project": ".", "language": "python", "host": "function", "remoteBuild": True}
    # azd deploys the service to the resource tagged azd-service-name=<service>.
    assert f"'azd-service-name': '{service}'" in text("modules/functionapp.bicep")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", config["name"])


def test_parameters_file_feeds_every_required_parameter_from_azd() -> None:
    parameters = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    declared = parse("main.bicep")["parameters"]
    assert set(parameters) <= set(declared), set(parameters) - set(declared)
    required = {name for name, param in declared.items() if param.get("default") is None}
    assert required <= set(parameters), required - set(parameters)
    assert parameters["environmentName"]["value"] == "${AZURE_ENV_NAME}"
    assert parameters["location"]["value"] == "${AZURE_LOCATION}"
    for name, entry in parameters.items():
        assert re.fullmatch(r"\$\{[A-Z_]+(=[^}]*)?\}", entry["value"]), (name, entry)


def _funcignore_patterns() -> list[str]:
    lines = [line.strip() for line in (ROOT / ".funcignore").read_text().splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    assert not any(p.startswith("!") for p in patterns), "negations are not modelled by this test"
    return patterns


def funcignored(path: str) -> bool:
    """Whether .funcignore (gitignore syntax, without negation) keeps `path` out of the package."""
    parts = path.split("/")
    for pattern in _funcignore_patterns():
        directory_only = pattern.endswith("/")
        body = pattern.strip("/")
        anchored = "/" in body
        for depth in range(1, len(parts) + 1):
            if directory_only and depth == len(parts) and not (ROOT / path).is_dir():
                continue
            candidate = "/".join(parts[:depth]) if anchored else parts[depth - 1]
            if fnmatch.fnmatchcase(candidate, body):
                return True
    return False


def test_funcignore_ships_the_app_and_nothing_else() -> None:
    deployed = {"function_app.py", "host.json", "requirements.txt", "shared"}
    for name in deployed:
        assert not funcignored(name), name
    for path in (ROOT / "shared").rglob("*.py"):
        assert not funcignored(str(path.relative_to(ROOT))), path
    for name in ("tests/test_function_app.py", "sandbox/__main__.py", "devtools/__init__.py", "docs/architecture.md",
                 "infra/main.bicep", "scripts/bootstrap.sh", "requirements-dev.txt", "local.settings.json",
                 "local.settings.example.json", "README.md", ".venv/bin/python", "out/burst/summary.json",
                 "node_modules/.bin/azurite", ".azure/prod/.env"):  # files inside: the directories may not exist yet
        assert funcignored(name), name
    shipped = {entry.name for entry in ROOT.iterdir() if not funcignored(entry.name)}
    assert shipped == deployed, shipped - deployed
