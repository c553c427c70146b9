// The Flex Consumption plan and the function app, with every app setting the autoscaler and the Functions
// host need. No setting holds a secret: storage, telemetry, ARM, Key Vault and AKS are all reached with
// the user-assigned identity.

param planName string
param appName string
param location string
param tags object

@description('Resource id of the user-assigned identity.')
param identityId string

@description('Client id of the user-assigned identity (identity-based connections name it by client id).')
param identityClientId string

param blobEndpoint string
param queueEndpoint string
param tableEndpoint string
param deploymentContainerName string

@description('Application Insights connection string: the ingestion endpoint; it admits nothing without an Entra ID token.')
param applicationInsightsConnectionString string

@description('Most instances the plan may run; the timers run on one instance, only the queue executor scales out.')
@minValue(1)
@maxValue(1000)
param maximumInstanceCount int

@description('Settings the autoscaler reads (shared/settings.py), as name to string value.')
param autoscalerSettings object

@description('Any other setting of shared/settings.py; the settings built here win over these.')
param extraAppSettings object = {}

// Later objects win: extraAppSettings cannot override the settings built here.
var appSettings = union(extraAppSettings, autoscalerSettings, {
  // The host's storage (and ours: shared/adapters/storage_connection.py) through the identity, by service URI.
  AzureWebJobsStorage__credential: 'managedidentity'
  AzureWebJobsStorage__clientId: identityClientId
  AzureWebJobsStorage__blobServiceUri: blobEndpoint
  AzureWebJobsStorage__queueServiceUri: queueEndpoint
  AzureWebJobsStorage__tableServiceUri: tableEndpoint
  APPLICATIONINSIGHTS_CONNECTION_STRING: applicationInsightsConnectionString
  APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'ClientId=${identityClientId};Authorization=AAD'
  // The Python worker configures azure-monitor-opentelemetry itself (host.json telemetryMode OpenTelemetry).
  PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY: 'true'
  // Keep every trace (docs/observability.md, "Sampling"): unset, the distro samples at 5 traces a second, which a
  // burst of actions exceeds, and a sampled-out step breaks the trace from the poll to ARM. Our volume is a few
  // traces a minute; metrics and custom events are never sampled.
  OTEL_TRACES_SAMPLER: 'microsoft.fixed_percentage'
  OTEL_TRACES_SAMPLER_ARG: '1.0'
  AZURE_CREDENTIAL: 'managed-identity'
  AZURE_CLIENT_ID: identityClientId
})

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  // checkov:skip=CKV_AZURE_225: zone redundancy of Flex Consumption depends on the region, and the locally redundant storage it runs on is in one datacenter anyway; a zone outage pauses autoscaling and the cluster keeps its current size
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    // Linux: Flex Consumption has no Windows workers.
    reserved: true
  }
}

resource functionApp 'Microsoft.Web/sites@2024-04-01' = {
  // checkov:skip=CKV_AZURE_222: azd and func publish through the app's SCM endpoint, which this setting would close too; the app has no HTTP-triggered function and basic-auth publishing is off (below)
  // checkov:skip=CKV_AZURE_17: no HTTP-triggered function, so no client ever authenticates to this app over HTTP; requiring client certificates would protect nothing and could block the platform's own calls
  // checkov:skip=CKV_AZURE_212: Flex Consumption starts instances on timer and queue triggers; always-ready instances would bill around the clock for polls that run twice a minute
  // checkov:skip=CKV_AZURE_213: health checks probe an HTTP path the app does not serve; the no-successful-poll alert (monitoring.bicep) is its liveness check
  name: appName
  location: location
  // azd finds the app to deploy the `autoscaler` service of azure.yaml to by this tag.
  tags: union(tags, { 'azd-service-name': 'autoscaler' })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    clientAffinityEnabled: false
    siteConfig: {
      minTlsVersion: '1.2'
      scmMinTlsVersion: '1.2'
      ftpsState: 'Disabled'
      http20Enabled: true
      // Set with the site (not a separate config resource) so that the host starts with identity-based storage.
      appSettings: [for setting in items(appSettings): {
        name: setting.key
        value: setting.value
      }]
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${blobEndpoint}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        instanceMemoryMB: 2048
        maximumInstanceCount: maximumInstanceCount
      }
      runtime: {
        name: 'python'
        version: '3.11'
      }
    }
  }
}

// Publishing goes through the Flex deployment container with Entra ID; basic-auth FTP and SCM credentials stay off.
resource ftpCredentials 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: functionApp
  name: 'ftp'
  properties: {
    allow: false
  }
}

resource scmCredentials 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: functionApp
  name: 'scm'
  properties: {
    allow: false
  }
}

output name string = functionApp.name
output id string = functionApp.id
output defaultHostName string = functionApp.properties.defaultHostName
