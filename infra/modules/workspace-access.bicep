// USAGE_SOURCE=log-analytics: read Container Insights data in the cluster's Log Analytics workspace.
// Deployed at the workspace's own resource group, which is usually not the app's.
targetScope = 'resourceGroup'

@description('Name of the Container Insights workspace, in this resource group.')
param workspaceName string

@description('Principal id of the app\'s user-assigned identity.')
param principalId string

var logAnalyticsReader = '73c42c96-874c-492b-b04d-ab87d138a893'

resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' existing = {
  name: workspaceName
}

// Query the Perf table (K8SNode cpuUsageNanoCores) for measured node CPU; read-only, and only this workspace.
resource logAnalyticsReaderAssignment 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: workspace
  name: guid(workspace.id, principalId, logAnalyticsReader)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', logAnalyticsReader)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

@description('LOG_ANALYTICS_WORKSPACE_ID: the workspace GUID queries are addressed to (not its resource id).')
output customerId string = workspace.properties.customerId
