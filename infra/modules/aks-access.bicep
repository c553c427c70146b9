// KUBE_AUTH=aks: what the app's identity may do with an AKS cluster that has Microsoft Entra ID
// integration and Azure RBAC for Kubernetes authorization. Deployed at the cluster's resource group.
//
// Azure RBAC for Kubernetes turns each Kubernetes request into a data action
// Microsoft.ContainerService/managedClusters/[<api group>/]<resource>/<read|write|delete>: get, list and
// watch are read; create, update and patch are write. A subresource is not part of the name (pods/exec is
// the one exception), so pods/eviction `create` is checked as pods/write. The built-in "Azure Kubernetes
// Service RBAC Writer" does not cover cluster-scoped objects such as nodes, and Cluster Admin is far more
// than needed, so the role below lists exactly what the autoscaler calls. Names are from Microsoft's
// resource provider operations list; the eviction mapping is from the source of guard, the AKS
// authorization webhook (see docs/deploy.md, "Rights granted").
targetScope = 'resourceGroup'

@description('Name of the AKS cluster, in this resource group.')
param clusterName string

@description('Principal id of the app\'s user-assigned identity.')
param principalId string

@description('Create and assign the custom Kubernetes role. false: bind the identity with Kubernetes RBAC yourself (docs/deploy.md).')
param grantKubernetesRole bool = true

var clusterUserRole = '4abbcc35-e782-43d8-92c5-2d3f1bd2253f'

// Exactly the Kubernetes calls the autoscaler makes (shared/adapters/kubernetes.py, kube_events.py and the status ConfigMap).
var kubernetesDataActions = [
  // get, list: every poll reads all nodes; cordon re-reads one
  'Microsoft.ContainerService/managedClusters/nodes/read'
  // patch: cordon and uncordon (spec.unschedulable), the ToBeDeletedByClusterAutoscaler and DeletionCandidate taints,
  // and a virtual node's quota taint
  'Microsoft.ContainerService/managedClusters/nodes/write'
  // delete: the Node object of an instance the autoscaler removed
  'Microsoft.ContainerService/managedClusters/nodes/delete'
  // list across all namespaces: pending pods and what runs on each node; get one pod before a backfill
  'Microsoft.ContainerService/managedClusters/pods/read'
  // create pods/eviction during a drain or a backfill, and patch the deletion cost of pods on a virtual node;
  // Azure RBAC has no narrower action
  'Microsoft.ContainerService/managedClusters/pods/write'
  // create core/v1 Events (TriggeredScaleUp, NotTriggerScaleUp, scale-down) in the pods' namespaces
  'Microsoft.ContainerService/managedClusters/events/write'
  // get kube-system/cluster-autoscaler-priority-expander and cluster-autoscaler-status
  'Microsoft.ContainerService/managedClusters/configmaps/read'
  // create, update, patch kube-system/cluster-autoscaler-status
  'Microsoft.ContainerService/managedClusters/configmaps/write'
  // list PodDisruptionBudgets (policy/v1) across all namespaces before evicting
  'Microsoft.ContainerService/managedClusters/policy/poddisruptionbudgets/read'
  // list DaemonSets (apps/v1) across all namespaces: what each new node of a group gives away to them
  'Microsoft.ContainerService/managedClusters/apps/daemonsets/read'
]

resource cluster 'Microsoft.ContainerService/managedClusters@2024-05-01' existing = {
  name: clusterName
}

// listClusterUserCredential gives the app the API server address and CA; by itself it grants nothing inside the cluster.
resource clusterUser 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: cluster
  name: guid(cluster.id, principalId, clusterUserRole)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', clusterUserRole)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource autoscalerKubernetesRole 'Microsoft.Authorization/roleDefinitions@2022-04-01' = if (grantKubernetesRole) {
  name: guid(cluster.id, 'vmss-autoscaler-kubernetes')
  properties: {
    // Role names are unique in the tenant: the cluster's id hash keeps two deployments apart.
    roleName: 'VMSS autoscaler Kubernetes access (${clusterName}, ${uniqueString(cluster.id)})'
    description: 'Nodes read/write/delete, pods read and eviction, events create, configmaps read/write, PodDisruptionBudgets read: what the VMSS node autoscaler calls in ${clusterName}.'
    type: 'CustomRole'
    permissions: [
      {
        actions: []
        notActions: []
        dataActions: kubernetesDataActions
        notDataActions: []
      }
    ]
    // Custom roles are assignable at resource group scope or above; the only assignment is on the cluster.
    assignableScopes: [
      resourceGroup().id
    ]
  }
}

// The Kubernetes calls above, cluster-wide (nodes are cluster-scoped; pods, events and budgets span all namespaces).
resource autoscalerKubernetesAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantKubernetesRole) {
  scope: cluster
  name: guid(cluster.id, principalId, 'vmss-autoscaler-kubernetes')
  properties: {
    // The subscription-level id: role definitions live in the subscription even when deployed from a resource group.
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', autoscalerKubernetesRole.name)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

output customRoleName string = grantKubernetesRole ? autoscalerKubernetesRole.properties.roleName : ''
output customRoleId string = grantKubernetesRole ? subscriptionResourceId('Microsoft.Authorization/roleDefinitions', autoscalerKubernetesRole.name) : ''
