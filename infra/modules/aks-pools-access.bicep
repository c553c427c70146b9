// MANAGE_AKS_POOLS=true: what the app's identity may do with the AKS cluster's agent pools
// (shared/adapters/aks_pools.py), whatever KUBE_AUTH is. Deployed at the cluster's resource group: read the
// pools named in AKS_NODE_POOLS or tagged like scale sets and their machines, PUT a new count, deleteMachines;
// on the cluster. Polling those long-running operations needs a read at the resource group ("If you only have
// permission at the resource level, you can start the operation, but you can't track its status": Microsoft's
// "Track asynchronous Azure operations"), so a second role holds only the operation-status reads, assigned at
// this resource group. Without MANAGE_AKS_POOLS the app never calls the agentPools API, and this is not deployed.
//
// Names from Microsoft's resource provider operations list ("Azure permissions for Containers") except
// deleteMachines/action and machines/read, which that list's snapshots lack: they are from public custom roles
// (ARO-HCP's Bicep) and the "AKS Flex Node Agent Role" docs (docs/deploy.md, "Rights per backend").
targetScope = 'resourceGroup'

@description('Name of the AKS cluster, in this resource group.')
param clusterName string

@description('Principal id of the app\'s user-assigned identity.')
param principalId string

// Exactly the agent-pool calls of shared/adapters/aks_pools.py.
var poolActions = [
  // managed_clusters.get: the cluster's location, stamped on each pool's group (prices, VM sizes)
  'Microsoft.ContainerService/managedClusters/read'
  // agent_pools.list every poll (which pools are marked); agent_pools.get before a scale and for one group
  'Microsoft.ContainerService/managedClusters/agentPools/read'
  // agent_pools.begin_create_or_update: PUT the pool back with a new count (what `az aks nodepool scale` does)
  'Microsoft.ContainerService/managedClusters/agentPools/write'
  // agent_pools.begin_delete_machines: remove the drained nodes by machine (node) name; the count drops with them
  'Microsoft.ContainerService/managedClusters/agentPools/deleteMachines/action'
  // machines.list and machines.get: each machine's name (= node name), VM id and IPs
  'Microsoft.ContainerService/managedClusters/agentPools/machines/read'
]

// The long-running operations above are polled here, outside the cluster's id.
var operationStatusActions = [
  // Azure-AsyncOperation of a PUT or deleteMachines: .../Microsoft.ContainerService/locations/<region>/operations/<id>
  'Microsoft.ContainerService/locations/operations/read'
  // Location header of the same operations: .../Microsoft.ContainerService/locations/<region>/operationresults/<id>
  'Microsoft.ContainerService/locations/operationresults/read'
]

resource cluster 'Microsoft.ContainerService/managedClusters@2024-05-01' existing = {
  name: clusterName
}

resource poolRole 'Microsoft.Authorization/roleDefinitions@2022-04-01' = {
  name: guid(cluster.id, 'vmss-autoscaler-agent-pools')
  properties: {
    // Role names are unique in the tenant: the cluster's id hash keeps two deployments apart.
    roleName: 'VMSS autoscaler agent pools (${clusterName}, ${uniqueString(cluster.id)})'
    description: 'Read the agent pools of ${clusterName} and their machines, change a pool\'s count, delete machines: what the VMSS node autoscaler calls.'
    type: 'CustomRole'
    permissions: [
      {
        actions: poolActions
        notActions: []
        dataActions: []
        notDataActions: []
      }
    ]
    // Custom roles are assignable at resource group scope or above; the only assignment is on the cluster.
    assignableScopes: [
      resourceGroup().id
    ]
  }
}

// The agent-pool calls above, on this cluster only (not its resource group: no other cluster's pools).
resource poolAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: cluster
  name: guid(cluster.id, principalId, 'vmss-autoscaler-agent-pools')
  properties: {
    // The subscription-level id: role definitions live in the subscription even when deployed from a resource group.
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', poolRole.name)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource operationStatusRole 'Microsoft.Authorization/roleDefinitions@2022-04-01' = {
  name: guid(resourceGroup().id, 'vmss-autoscaler-aks-operations')
  properties: {
    roleName: 'VMSS autoscaler AKS operation status (${resourceGroup().name}, ${uniqueString(resourceGroup().id)})'
    description: 'Read the status of Microsoft.ContainerService long-running operations: how the VMSS node autoscaler follows its agent-pool scale and deleteMachines calls.'
    type: 'CustomRole'
    permissions: [
      {
        actions: operationStatusActions
        notActions: []
        dataActions: []
        notDataActions: []
      }
    ]
    assignableScopes: [
      resourceGroup().id
    ]
  }
}

// Follow the pool's scale and deleteMachines operations; reads of operation status only, which ARM checks at the resource group.
resource operationStatusAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(resourceGroup().id, principalId, 'vmss-autoscaler-aks-operations')
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', operationStatusRole.name)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}
