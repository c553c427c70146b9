// Rights on ONE node resource group (a resource group holding tagged scale sets). main.bicep deploys this
// module once per entry of NODE_RESOURCE_GROUPS, each at that resource group's scope: the autoscaler never
// holds a right on the subscription, and none on resource groups it was not told about.
targetScope = 'resourceGroup'

@description('Principal id of the app\'s user-assigned identity.')
param principalId string

@description('USAGE_SOURCE=vmss-metric: also read the scale sets\' Percentage CPU metric.')
param grantMetricsReader bool = false

var roles = {
  virtualMachineContributor: '9980e02c-c2be-4d73-94e8-173b1dc7cf3c'
  monitoringReader: '43d0d8ad-25c7-4714-9337-8ba259a9fe05'
}

// List and resize the tagged scale sets and delete, deallocate or start specific instances; nothing outside this resource group.
resource virtualMachineContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(resourceGroup().id, principalId, roles.virtualMachineContributor)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.virtualMachineContributor)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

// USAGE_SOURCE=vmss-metric reads each scale set's Percentage CPU per instance; read-only.
resource monitoringReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantMetricsReader) {
  name: guid(resourceGroup().id, principalId, roles.monitoringReader)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.monitoringReader)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}
