// enableScheduledEvents: Azure's Scheduled Events (the spot Preempt notice, 30 s ahead) delivered to the app's
// Event Grid-triggered function `on_scheduled_event` (shared/services/preemption.py). No role is granted here:
// Event Grid delivers to the function with its own system key; the function acts with the app's identity.
// The system topic type is a preview feature; its name as written here is unverified against a live
// subscription (docs/spot-and-quota.md).
targetScope = 'resourceGroup'

@description('Azure region of the system topic.')
param location string

@description('Tags for the system topic.')
param tags object

@description('Resource id of the function app that takes the events.')
param functionAppId string

@description('Name of the system topic.')
param topicName string

resource topic 'Microsoft.EventGrid/systemTopics@2022-06-15' = {
  name: topicName
  location: location
  tags: tags
  properties: {
    // The subscription's VMs: the events name the VM, and the function ignores VMs that are not ours.
    source: subscription().id
    topicType: 'Microsoft.Maintenance.ScheduledEvents'
  }
}

resource toFunction 'Microsoft.EventGrid/systemTopics/eventSubscriptions@2022-06-15' = {
  parent: topic
  name: 'autoscaler-preempt'
  properties: {
    destination: {
      endpointType: 'AzureFunction'
      properties: {
        resourceId: '${functionAppId}/functions/on_scheduled_event'
        maxEventsPerBatch: 1
      }
    }
    eventDeliverySchema: 'EventGridSchema'
    // A notice is worth something for 30 s: retry briefly, then drop (the next poll sees the eviction anyway).
    retryPolicy: {
      maxDeliveryAttempts: 5
      eventTimeToLiveInMinutes: 1
    }
  }
}
