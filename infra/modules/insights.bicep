// Where the autoscaler's telemetry goes: a Log Analytics workspace and a workspace-based Application
// Insights component that accepts Entra ID-authenticated telemetry only (no instrumentation-key ingestion).

param logAnalyticsName string
param applicationInsightsName string
param location string
param tags object

@description('Days the workspace keeps logs.')
@minValue(30)
@maxValue(730)
param retentionInDays int = 30

@description('Principal id of the app\'s user-assigned identity, which sends the telemetry.')
param principalId string

var monitoringMetricsPublisher = '3913510d-42f4-4e42-8a64-420c390055eb'

resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: logAnalyticsName
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: retentionInDays
    features: {
      // Queries on the app's telemetry are authorized by rights on the component, not the whole workspace.
      enableLogAccessUsingOnlyResourcePermissions: true
    }
  }
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: applicationInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: workspace.id
    // The connection string alone is then no credential: ingestion needs an Entra ID token.
    DisableLocalAuth: true
    publicNetworkAccessForIngestion: 'Enabled'
    publicNetworkAccessForQuery: 'Enabled'
  }
}

// The app's OpenTelemetry exporter authenticates with the identity (APPLICATIONINSIGHTS_AUTHENTICATION_STRING); local auth is disabled, so this role is what lets telemetry in.
resource metricsPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: applicationInsights
  name: guid(applicationInsights.id, principalId, monitoringMetricsPublisher)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringMetricsPublisher)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

output applicationInsightsName string = applicationInsights.name
output applicationInsightsId string = applicationInsights.id
// Not a secret: with local auth disabled the instrumentation key in it admits nothing.
output connectionString string = applicationInsights.properties.ConnectionString
output workspaceName string = workspace.name
