// The VMSS node autoscaler on Azure Functions (Flex Consumption), with least-privilege rights for its one
// user-assigned identity. `azd up` deploys this with infra/main.parameters.json; docs/deploy.md has the
// commands, the rights and why each is needed.
//
// Subscription scope only so that the app's resource group can be created here; every right is granted by
// a module at a resource group, resource or cluster scope, never on the subscription itself.
targetScope = 'subscription'

@minLength(1)
@maxLength(64)
@description('azd environment name: names the resource group and tags every resource.')
param environmentName string

@minLength(1)
@description('Region of the app and its resources; it must offer the Flex Consumption plan.')
param location string

@description('Resource group for the app; empty: rg-<environmentName>.')
param resourceGroupName string = ''

// --- The cluster --------------------------------------------------------------------------------------

@minLength(1)
@description('CLUSTER_NAME: scale sets tagged cluster-autoscaler-name=<this> and cluster-autoscaler-enabled=true are managed.')
param clusterName string

@minLength(1)
@description('NODE_RESOURCE_GROUPS: comma-separated resource groups holding the tagged scale sets; each gets nodeRole.')
param nodeResourceGroups string

@description('Role of the identity on each node resource group: VirtualMachineContributor (built-in) or Custom (a role with only the actions the Uniform and Flexible scale-set backends call; docs/deploy.md, "Rights per backend").')
@allowed([
  'VirtualMachineContributor'
  'Custom'
])
param nodeRole string = 'VirtualMachineContributor'

@description('AZURE_SUBSCRIPTION_ID: subscription of the node resource groups; empty: the subscription deployed to.')
param nodeSubscriptionId string = ''

@description('KUBE_AUTH: aks (Entra ID + Azure RBAC AKS cluster, reached with the app\'s identity) or key-vault (a kubeconfig the operator uploads to Key Vault).')
@allowed([
  'aks'
  'key-vault'
])
param kubeAuth string

@description('AKS_CLUSTER_ID: resource id of the AKS cluster; required with kubeAuth=aks or manageAksPools.')
param aksClusterId string = ''

@description('Manage node pools of aksClusterId through the AKS agent-pool API (count, deleteMachines): a custom role on the cluster with exactly those actions. Works with either kubeAuth; needs aksClusterId.')
param manageAksPools bool = false

@description('AKS_NODE_POOLS, with manageAksPools: pools to manage as pool:min:max, comma-separated (e.g. render:0:20,batch:1:5); pools tagged cluster-autoscaler-enabled/-name, min, max are managed too.')
param aksNodePools string = ''

@description('kubeAuth=aks: create and assign the custom Kubernetes role; false if you bind the identity with Kubernetes RBAC yourself.')
param aksGrantKubernetesRole bool = true

@description('kubeAuth=key-vault: public network access of the vault (Disabled needs virtual network integration, not built here).')
@allowed([
  'Enabled'
  'Disabled'
])
param keyVaultPublicNetworkAccess string = 'Enabled'

@description('kubeAuth=key-vault: object id of who uploads the kubeconfig (Key Vault Secrets Officer on the vault); empty grants no one.')
param operatorPrincipalId string = ''

@description('Kind of operatorPrincipalId: User, Group or ServicePrincipal.')
@allowed([
  'User'
  'Group'
  'ServicePrincipal'
])
param operatorPrincipalType string = 'User'

@description('USAGE_SOURCE: none, log-analytics (Container Insights) or vmss-metric (scale set Percentage CPU).')
@allowed([
  'none'
  'log-analytics'
  'vmss-metric'
])
param usageSource string = 'none'

@description('usageSource=log-analytics: resource id of the Container Insights Log Analytics workspace.')
param containerInsightsWorkspaceId string = ''

// --- The app ----------------------------------------------------------------------------------------------

@description('DRY_RUN: log and record every action without changing the cluster or Azure. Start with true.')
param dryRun bool = false

@description('SCALE_ACTIONS_QUEUE (shared/settings.py default).')
param scaleActionsQueue string = 'scale-actions'

@description('STATE_TABLE (shared/settings.py default).')
param stateTable string = 'autoscalerstate'

@description('PENDING_POLL_SCHEDULE: six-field NCRONTAB.')
param pendingPollSchedule string = '*/10 * * * * *'

@description('UTILIZATION_POLL_SCHEDULE: six-field NCRONTAB.')
param utilizationPollSchedule string = '0 * * * * *'

@description('STATE_SWEEP_SCHEDULE: six-field NCRONTAB of the state retention sweep (the host resolves it from app settings).')
param stateSweepSchedule string = '0 7 * * * *'

@description('Any other setting of shared/settings.py (name: string value), e.g. {"SCALE_DOWN_UNNEEDED_TIME": "15m"}.')
param extraAppSettings object = {}

@description('Most Flex Consumption instances; the timers run on one, only the queue executor scales out.')
@minValue(1)
@maxValue(1000)
param maximumInstanceCount int = 4

@description('Days the app\'s Log Analytics workspace keeps logs.')
@minValue(30)
@maxValue(730)
param logRetentionDays int = 30

@description('Address mailed when an alert fires; empty: alerts only show in the portal.')
param alertEmail string = ''

@description('Failed scale-ups within 30 minutes that raise an alert.')
@minValue(1)
param failedScaleUpThreshold int = 3

@description('STANDBY_POOLS: keep each Flexible set\'s VMSS Standby Pool at the group\'s standby target; grants read and write on the Standby Pools of the node resource groups (docs/standby-pools.md).')
param standbyPools bool = false

@description('Deliver Azure Scheduled Events (the spot Preempt notice, preview) to the app through an Event Grid system topic, so a spot node is drained in the 30 s before its VM goes.')
param enableScheduledEvents bool = false

// --- Names ----------------------------------------------------------------------------------------------

var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = {
  'azd-env-name': environmentName
  'vmss-autoscaler-cluster': clusterName
}
var names = {
  resourceGroup: empty(resourceGroupName) ? 'rg-${environmentName}' : resourceGroupName
  identity: 'id-autoscaler-${resourceToken}'
  storage: 'st${resourceToken}'
  deploymentContainer: 'app-package-${resourceToken}'
  logAnalytics: 'log-${resourceToken}'
  applicationInsights: 'appi-${resourceToken}'
  plan: 'plan-${resourceToken}'
  functionApp: 'func-autoscaler-${resourceToken}'
  keyVault: 'kv-${resourceToken}'
}

var nodeSubscription = empty(nodeSubscriptionId) ? subscription().subscriptionId : nodeSubscriptionId
// Resource group names cannot contain spaces, so dropping them all trims each entry (no lambdas: checkov's
// Bicep parser does not read them).
var nodeResourceGroupList = split(replace(nodeResourceGroups, ' ', ''), ',')

// /subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.ContainerService/managedClusters/<name>.
// Placeholders keep the skipped modules' scope expressions valid when there is no such resource.
// The app has AKS_CLUSTER_ID with kubeAuth=aks or manageAksPools; it calls the agentPools API only with manageAksPools.
var aksClusterInUse = (kubeAuth == 'aks') || manageAksPools
var aksIdParts = split(empty(aksClusterId) ? '/subscriptions/${subscription().subscriptionId}/resourceGroups/unused/providers/Microsoft.ContainerService/managedClusters/unused' : aksClusterId, '/')
var workspaceIdParts = split(empty(containerInsightsWorkspaceId) ? '/subscriptions/${subscription().subscriptionId}/resourceGroups/unused/providers/Microsoft.OperationalInsights/workspaces/unused' : containerInsightsWorkspaceId, '/')

resource rg 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: names.resourceGroup
  location: location
  tags: tags
}

module identity 'modules/identity.bicep' = {
  name: 'identity'
  scope: rg
  params: {
    name: names.identity
    location: location
    tags: tags
  }
}

module storage 'modules/storage.bicep' = {
  name: 'storage'
  scope: rg
  params: {
    name: names.storage
    location: location
    tags: tags
    deploymentContainerName: names.deploymentContainer
    queueName: scaleActionsQueue
    tableName: stateTable
    principalId: identity.outputs.principalId
  }
}

module insights 'modules/insights.bicep' = {
  name: 'insights'
  scope: rg
  params: {
    logAnalyticsName: names.logAnalytics
    applicationInsightsName: names.applicationInsights
    location: location
    tags: tags
    retentionInDays: logRetentionDays
    principalId: identity.outputs.principalId
  }
}

module keyVault 'modules/keyvault.bicep' = if (kubeAuth == 'key-vault') {
  name: 'key-vault'
  scope: rg
  params: {
    name: names.keyVault
    location: location
    tags: tags
    principalId: identity.outputs.principalId
    publicNetworkAccess: keyVaultPublicNetworkAccess
    operatorPrincipalId: operatorPrincipalId
    operatorPrincipalType: operatorPrincipalType
  }
}

// One deployment per node resource group, at that resource group: nodeRole there and nowhere else.
module nodeAccess 'modules/node-access.bicep' = [for nodeResourceGroup in nodeResourceGroupList: {
  // Deployment names are per resource group: the environment in the hash keeps two autoscalers' apart.
  name: 'node-access-${uniqueString(environmentName, nodeSubscription, nodeResourceGroup)}'
  scope: resourceGroup(nodeSubscription, nodeResourceGroup)
  params: {
    principalId: identity.outputs.principalId
    grantMetricsReader: usageSource == 'vmss-metric'
    grantStandbyPools: standbyPools
    nodeRole: nodeRole
  }
}]

module workspaceAccess 'modules/workspace-access.bicep' = if (usageSource == 'log-analytics') {
  name: 'workspace-access-${resourceToken}'
  scope: resourceGroup(workspaceIdParts[2], workspaceIdParts[4])
  params: {
    workspaceName: workspaceIdParts[8]
    principalId: identity.outputs.principalId
  }
}

module aksAccess 'modules/aks-access.bicep' = if (kubeAuth == 'aks') {
  name: 'aks-access-${resourceToken}'
  scope: resourceGroup(aksIdParts[2], aksIdParts[4])
  params: {
    clusterName: aksIdParts[8]
    principalId: identity.outputs.principalId
    grantKubernetesRole: aksGrantKubernetesRole
  }
}

// manageAksPools: read the cluster's agent pools and their machines, scale them, delete machines.
module aksPoolsAccess 'modules/aks-pools-access.bicep' = if (manageAksPools) {
  name: 'aks-pools-access-${resourceToken}'
  scope: resourceGroup(aksIdParts[2], aksIdParts[4])
  params: {
    clusterName: aksIdParts[8]
    principalId: identity.outputs.principalId
  }
}

// Every setting shared/settings.py requires (default None) or requires for the chosen KUBE_AUTH and
// USAGE_SOURCE, the agent-pool backend's (AKS_NODE_POOLS), plus the ones the Functions host resolves as
// %NAME% in the trigger bindings.
var autoscalerSettings = {
  CLUSTER_NAME: clusterName
  AZURE_SUBSCRIPTION_ID: nodeSubscription
  NODE_RESOURCE_GROUPS: join(nodeResourceGroupList, ',')
  KUBE_AUTH: kubeAuth
  AKS_CLUSTER_ID: aksClusterInUse ? aksClusterId : ''
  MANAGE_AKS_POOLS: manageAksPools ? 'true' : 'false'
  AKS_NODE_POOLS: manageAksPools ? aksNodePools : ''
  KUBECONFIG_SECRET_URI: (kubeAuth == 'key-vault') ? keyVault.outputs.secretUri : ''
  USAGE_SOURCE: usageSource
  LOG_ANALYTICS_WORKSPACE_ID: (usageSource == 'log-analytics') ? workspaceAccess.outputs.customerId : ''
  SCALE_ACTIONS_QUEUE: scaleActionsQueue
  STATE_TABLE: stateTable
  PENDING_POLL_SCHEDULE: pendingPollSchedule
  UTILIZATION_POLL_SCHEDULE: utilizationPollSchedule
  STATE_SWEEP_SCHEDULE: stateSweepSchedule
  DRY_RUN: dryRun ? 'true' : 'false'
  STANDBY_POOLS: standbyPools ? 'true' : 'false'
}

module functionApp 'modules/functionapp.bicep' = {
  name: 'function-app'
  scope: rg
  params: {
    planName: names.plan
    appName: names.functionApp
    location: location
    tags: tags
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    blobEndpoint: storage.outputs.blobEndpoint
    queueEndpoint: storage.outputs.queueEndpoint
    tableEndpoint: storage.outputs.tableEndpoint
    deploymentContainerName: names.deploymentContainer
    applicationInsightsConnectionString: insights.outputs.connectionString
    maximumInstanceCount: maximumInstanceCount
    autoscalerSettings: autoscalerSettings
    extraAppSettings: extraAppSettings
  }
}

module scheduledEvents 'modules/scheduled-events.bicep' = if (enableScheduledEvents) {
  name: 'scheduled-events'
  scope: rg
  params: {
    location: location
    tags: tags
    functionAppId: functionApp.outputs.id
    topicName: 'evgt-scheduled-events-${resourceToken}'
  }
}

module monitoring 'modules/monitoring.bicep' = {
  name: 'monitoring'
  scope: rg
  params: {
    location: location
    tags: tags
    applicationInsightsName: insights.outputs.applicationInsightsName
    clusterName: clusterName
    alertEmail: alertEmail
    failedScaleUpThreshold: failedScaleUpThreshold
  }
}

// azd stores these in .azure/<env>/.env; docs/deploy.md uses them.
output AZURE_LOCATION string = location
output AZURE_TENANT_ID string = tenant().tenantId
output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_FUNCTION_APP_NAME string = functionApp.outputs.name
output SERVICE_AUTOSCALER_NAME string = functionApp.outputs.name
output AZURE_STORAGE_ACCOUNT string = storage.outputs.name
output AZURE_IDENTITY_NAME string = identity.outputs.name
output AZURE_IDENTITY_CLIENT_ID string = identity.outputs.clientId
output AZURE_IDENTITY_PRINCIPAL_ID string = identity.outputs.principalId
output APPLICATIONINSIGHTS_NAME string = insights.outputs.applicationInsightsName
output AZURE_KEY_VAULT_NAME string = (kubeAuth == 'key-vault') ? keyVault.outputs.name : ''
output KUBECONFIG_SECRET_URI string = (kubeAuth == 'key-vault') ? keyVault.outputs.secretUri : ''
output AKS_CUSTOM_ROLE_NAME string = (kubeAuth == 'aks') ? aksAccess.outputs.customRoleName : ''
output NODE_RESOURCE_GROUPS string = join(nodeResourceGroupList, ',')
