// KUBE_AUTH=key-vault: the vault holding the kubeconfig of a cluster that is not AKS. The secret itself is
// never created here: the operator uploads it (az keyvault secret set), so it never passes through a
// deployment, its parameters or its history.

param name string
param location string
param tags object

@description('Principal id of the app\'s user-assigned identity.')
param principalId string

@description('Enabled: reachable over the internet (Entra ID and RBAC still required). Disabled needs the app on a virtual network with a private endpoint, which this template does not build.')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Object id of a user or group that may upload the kubeconfig; empty grants no one (assign Key Vault Secrets Officer yourself).')
param operatorPrincipalId string = ''

@description('User, Group or ServicePrincipal: the kind of operatorPrincipalId.')
param operatorPrincipalType string = 'User'

@description('Name of the secret the operator uploads.')
param secretName string = 'kubeconfig'

var roles = {
  keyVaultSecretsUser: '4633458b-17de-408a-b874-0445c86b69e6'
  keyVaultSecretsOfficer: 'b86a8fe4-44ce-4948-aee5-eccb2c155cd7'
}

resource vault 'Microsoft.KeyVault/vaults@2023-07-01' = {
  // checkov:skip=CKV_AZURE_109: a Flex Consumption app without a virtual network calls Key Vault from shared outbound addresses no firewall rule can name; RBAC allows one secret read to one identity (publicNetworkAccess=Disabled with a private endpoint is the hardened option, docs/deploy.md)
  // checkov:skip=CKV_AZURE_189: same as CKV_AZURE_109; publicNetworkAccess is the keyVaultPublicNetworkAccess parameter
  name: name
  location: location
  tags: tags
  properties: {
    tenantId: subscription().tenantId
    sku: {
      family: 'A'
      name: 'standard'
    }
    // Azure RBAC, not access policies: the same role assignments (and their audit) as every other right here.
    enableRbacAuthorization: true
    enableSoftDelete: true
    softDeleteRetentionInDays: 90
    // A deleted kubeconfig stays recoverable, and nobody can purge it early.
    enablePurgeProtection: true
    publicNetworkAccess: publicNetworkAccess
    networkAcls: {
      bypass: 'AzureServices'
      defaultAction: (publicNetworkAccess == 'Enabled') ? 'Allow' : 'Deny'
    }
  }
}

// Read the kubeconfig secret at run time (get only; the vault holds nothing else for this app).
resource secretsUser 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: vault
  name: guid(vault.id, principalId, roles.keyVaultSecretsUser)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.keyVaultSecretsUser)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

// Optional: lets the named operator upload or rotate the kubeconfig; RBAC vaults grant data access to no one by default.
resource secretsOfficer 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(operatorPrincipalId)) {
  scope: vault
  name: guid(vault.id, operatorPrincipalId, roles.keyVaultSecretsOfficer)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.keyVaultSecretsOfficer)
    principalId: operatorPrincipalId
    principalType: operatorPrincipalType
  }
}

output name string = vault.name
output id string = vault.id
// vaultUri ends with a slash; KUBECONFIG_SECRET_URI names the secret without a version, so the newest one is read.
output secretUri string = '${vault.properties.vaultUri}secrets/${secretName}'
