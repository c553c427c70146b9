// The one user-assigned managed identity of the autoscaler. Every right the app has is granted to it,
// so removing it (or its role assignments) takes every right away in one place.

param name string
param location string
param tags object

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: name
  location: location
  tags: tags
}

output id string = identity.id
output name string = identity.name
output clientId string = identity.properties.clientId
output principalId string = identity.properties.principalId
