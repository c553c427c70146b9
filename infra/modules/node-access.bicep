// Rights on ONE node resource group (a resource group holding tagged scale sets). main.bicep deploys this
// module once per entry of NODE_RESOURCE_GROUPS, each at that resource group's scope: the autoscaler never
// holds a right on the subscription, and none on resource groups it was not told about.
//
// nodeRole picks what the scale-set backends (Uniform: shared/adapters/compute.py; Flexible:
// shared/adapters/flex_compute.py) get here: the built-in Virtual Machine Contributor (the default), or a
// custom role with only the actions those adapters call plus the join/assign actions ARM re-checks on the
// resources a scale set links to. docs/deploy.md, "Rights per backend", lists both and what VMC grants beyond.
targetScope = 'resourceGroup'

@description('Principal id of the app\'s user-assigned identity.')
param principalId string

@description('USAGE_SOURCE=vmss-metric: also read the scale sets\' Percentage CPU metric.')
param grantMetricsReader bool = false

@description('STANDBY_POOLS=true: also read and update the VMSS Standby Pools of this resource group (their ready capacity).')
param grantStandbyPools bool = false

@description('VirtualMachineContributor (built-in) or Custom (a role with only the actions the scale-set backends call).')
@allowed([
  'VirtualMachineContributor'
  'Custom'
])
param nodeRole string = 'VirtualMachineContributor'

var roles = {
  virtualMachineContributor: '9980e02c-c2be-4d73-94e8-173b1dc7cf3c'
  monitoringReader: '43d0d8ad-25c7-4714-9337-8ba259a9fe05'
}

// nodeRole=Custom: every ARM action the Uniform and Flexible backends need in this resource group. Names from
// Microsoft's resource provider operations list ("Azure permissions for Compute" and "for Networking").
// Deliberately absent: Microsoft.Compute/skus/read (the resource SKUs list is a subscription-level read,
// which no assignment here can reach; list_vm_sizes then falls back to the shipped size table, as it does
// with Virtual Machine Contributor, which lacks it too), any extensions/write or runCommand/action, and
// deleting whole scale sets, VMs, disks or NICs.
var nodeActions = [
  // Uniform and Flexible: list the scale sets of this resource group (discovery) and get one
  'Microsoft.Compute/virtualMachineScaleSets/read'
  // Uniform and Flexible: PATCH sku.capacity (grow; ARM picks the instances). RBAC cannot narrow it to the capacity
  'Microsoft.Compute/virtualMachineScaleSets/write'
  // Uniform and Flexible: POST deleteInstances with the drained instances' ids (Flexible: VM names)
  'Microsoft.Compute/virtualMachineScaleSets/delete/action'
  // Uniform: POST deallocate with instance ids (SCALE_DOWN_MODE=deallocate)
  'Microsoft.Compute/virtualMachineScaleSets/deallocate/action'
  // Uniform: POST start with instance ids (a deallocated instance brought back on scale-up)
  'Microsoft.Compute/virtualMachineScaleSets/start/action'
  // Uniform: list and get the scale set's instances (instance id, computer name, provisioning state)
  'Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read'
  // Uniform, BATCH_SCALE_IN_PROTECTION: PUT an instance's protectionPolicy.protectFromScaleIn (nodes running batch work)
  'Microsoft.Compute/virtualMachineScaleSets/virtualMachines/write'
  // Uniform, NODE_MAPPING by IP only: the scale set's NICs in one Network RP call (listVirtualMachineScaleSetNetworkInterfaces)
  'Microsoft.Compute/virtualMachineScaleSets/networkInterfaces/read'
  // Uniform and Flexible: poll long-running operations (Azure-AsyncOperation under .../Microsoft.Compute/locations/<region>/operations/<id>)
  'Microsoft.Compute/locations/operations/read'
  // Flexible: list the member VMs (VM list filtered by the scale set's id) and get one
  'Microsoft.Compute/virtualMachines/read'
  // Flexible: deallocate one member VM (SCALE_DOWN_MODE=deallocate; per VM, batch power calls are undocumented for Flexible)
  'Microsoft.Compute/virtualMachines/deallocate/action'
  // Flexible: start one deallocated member VM
  'Microsoft.Compute/virtualMachines/start/action'
  // Flexible, NODE_MAPPING by IP only: list this resource group's NICs (standalone for Flexible members)
  'Microsoft.Network/networkInterfaces/read'
  // Flexible growth creates member VMs from the scale set's profile ("Compute VM Write" per Microsoft; whether ARM checks it on the caller: unverified)
  'Microsoft.Compute/virtualMachines/write'
  // Flexible growth creates each member's NIC ("Network" rights per Microsoft; exact actions unverified)
  'Microsoft.Network/networkInterfaces/write'
  // Flexible growth attaches the new NIC to the new VM (exact network actions unverified)
  'Microsoft.Network/networkInterfaces/join/action'
  // Linked check on a capacity change: the subnet of the scale set's NIC configuration (LinkedAuthorizationFailed without it)
  'Microsoft.Network/virtualNetworks/subnets/join/action'
  // Linked check: a user-assigned identity on the scale set (AKS node sets carry the kubelet identity); VMC lacks it
  'Microsoft.ManagedIdentity/userAssignedIdentities/assign/action'
  // Linked check: a load balancer backend pool in the NIC configuration (AKS's "kubernetes" load balancer, outbound rules)
  'Microsoft.Network/loadBalancers/backendAddressPools/join/action'
  // Linked check: a load balancer inbound NAT pool in the NIC configuration
  'Microsoft.Network/loadBalancers/inboundNatPools/join/action'
  // Linked check: a load balancer health probe named by the scale set's networkProfile.healthProbe
  'Microsoft.Network/loadBalancers/probes/join/action'
  // Linked check: an application gateway backend pool in the NIC configuration
  'Microsoft.Network/applicationGateways/backendAddressPools/join/action'
  // Linked check: a network security group on the NIC configuration
  'Microsoft.Network/networkSecurityGroups/join/action'
  // Linked check: application security groups on the NIC configuration's IP configurations
  'Microsoft.Network/applicationSecurityGroups/joinIpConfiguration/action'
]

// List and resize the tagged scale sets and delete, deallocate or start specific instances; nothing outside this resource group.
resource virtualMachineContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (nodeRole == 'VirtualMachineContributor') {
  name: guid(resourceGroup().id, principalId, roles.virtualMachineContributor)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.virtualMachineContributor)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource nodeRoleDefinition 'Microsoft.Authorization/roleDefinitions@2022-04-01' = if (nodeRole == 'Custom') {
  name: guid(resourceGroup().id, 'vmss-autoscaler-nodes')
  properties: {
    // Role names are unique in the tenant: the resource group's id hash keeps two node resource groups apart.
    roleName: 'VMSS autoscaler node access (${resourceGroup().name}, ${uniqueString(resourceGroup().id)})'
    description: 'Read, resize, delete instances of, deallocate and start the scale sets of ${resourceGroup().name} (Uniform and Flexible), with the join/assign rights a capacity change re-checks: what the VMSS node autoscaler calls.'
    type: 'CustomRole'
    permissions: [
      {
        actions: nodeActions
        notActions: []
        dataActions: []
        notDataActions: []
      }
    ]
    // Assignable only here: the role cannot be granted on another resource group or the subscription.
    assignableScopes: [
      resourceGroup().id
    ]
  }
}

// nodeRole=Custom: the same scale-set work as Virtual Machine Contributor with only the actions above, in this resource group only.
resource nodeRoleAssignment 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (nodeRole == 'Custom') {
  name: guid(resourceGroup().id, principalId, 'vmss-autoscaler-nodes')
  properties: {
    // The subscription-level id: role definitions live in the subscription even when deployed from a resource group.
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', nodeRoleDefinition.name)
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

// STANDBY_POOLS=true: the Standby Pool calls of shared/adapters/standby_pools.py, on this resource group's pools
// (names from Microsoft's resource provider operations, "Microsoft.StandbyPool"). Neither built-in role above
// has them. Deliberately absent: standbyVirtualMachinePools/delete (the autoscaler never creates or removes a
// pool) and runtimeViews/read (it reads a pool's settings, not its live counts).
var standbyPoolActions = [
  // standby_virtual_machine_pools.list_by_resource_group: which Flexible set each pool serves, its elasticity profile
  'Microsoft.StandbyPool/standbyVirtualMachinePools/read'
  // standby_virtual_machine_pools.update: PATCH elasticityProfile (maxReadyCapacity, minReadyCapacity) only
  'Microsoft.StandbyPool/standbyVirtualMachinePools/write'
]

resource standbyPoolRole 'Microsoft.Authorization/roleDefinitions@2022-04-01' = if (grantStandbyPools) {
  name: guid(resourceGroup().id, 'vmss-autoscaler-standby-pools')
  properties: {
    roleName: 'VMSS autoscaler standby pools (${resourceGroup().name}, ${uniqueString(resourceGroup().id)})'
    description: 'Read the VMSS Standby Pools of ${resourceGroup().name} and set their ready capacity: what the VMSS node autoscaler calls with STANDBY_POOLS=true.'
    type: 'CustomRole'
    permissions: [
      {
        actions: standbyPoolActions
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

// STANDBY_POOLS=true keeps each Flexible set's Standby Pool at the standby target: read and PATCH the pools here.
resource standbyPoolAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantStandbyPools) {
  name: guid(resourceGroup().id, principalId, 'vmss-autoscaler-standby-pools')
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', standbyPoolRole.name)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}
