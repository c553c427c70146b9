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
    "modules/node-access.bicep": ["Monitoring Reader", "Virtual Machine Contributor"],
    "modules/storage.bicep": ["Storage Blob Data Owner", "Storage Queue Data Contributor",
                              "Storage Table Data Contributor"],
    "modules/insights.bicep": ["Monitoring Metrics Publisher"],
    "modules/workspace-access.bicep": ["Log Analytics Reader"],
    "modules/aks-access.bicep": ["Azure Kubernetes Service Cluster User Role", CUSTOM_AKS_ROLE],
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
    assert set(files) == {"main.bicep", *EXPECTED_ASSIGNMENTS, "modules/identity.bicep", "modules/functionapp.bicep"}
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
        return CUSTOM_AKS_ROLE
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


def _main_scope(kube_auth: str, usage_source: str) -> Scope:
    main = file_scope("main.bicep", _main_inputs(kube_auth, usage_source), {"rg": {"name": "rg-prod"}},
                      subscription=SUBSCRIPTION)
    main._values.update(_module_scopes(main))
    return main


def deployed_app_settings(kube_auth: str, usage_source: str) -> dict[str, str]:
    """The function app's settings as the deployment would set them for these parameters."""
    main = _main_scope(kube_auth, usage_source)
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
