// Alerts and the workbook on the app's Application Insights component, over the telemetry the app emits:
// custom events ScaleUp/ScaleDown/ScaleActionRejected (customDimensions.outcome, .poison, ...) and the
// cluster_autoscaler_* custom metrics (docs/deploy.md, "Verify").
//
// Each log alert rule runs its query as its own system-assigned identity with Monitoring Reader on the
// component, and nothing else. Not the app's identity: that one can resize scale sets and drain nodes, which
// an alert query has no business holding. And not the deploying user's rights: a rule without an identity
// depends on whoever last saved it. Whether a component with local auth disabled strictly requires an
// identity on its log alerts is not stated in Microsoft's docs (unverified); with one it works either way.

param location string
param tags object

@description('Name of the Application Insights component the alerts watch (this resource group).')
param applicationInsightsName string

@description('Shown in alert and workbook names, so that several autoscalers stay apart.')
param clusterName string

@description('Address mailed when an alert fires; empty creates no action group (alerts still show in the portal).')
param alertEmail string = ''

@description('Failed scale-ups within 30 minutes that raise the alert.')
@minValue(1)
param failedScaleUpThreshold int = 3

var monitoringReader = '43d0d8ad-25c7-4714-9337-8ba259a9fe05'
var actionGroups = empty(alertEmail) ? [] : [actionGroup.id]

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource actionGroup 'Microsoft.Insights/actionGroups@2023-01-01' = if (!empty(alertEmail)) {
  name: 'ag-vmss-autoscaler-${clusterName}'
  location: 'Global'
  tags: tags
  properties: {
    groupShortName: 'autoscaler'
    enabled: true
    emailReceivers: [
      {
        name: 'operator'
        emailAddress: alertEmail
        useCommonAlertSchema: true
      }
    ]
  }
}

resource failedScaleUps 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: 'vmss-autoscaler-failed-scale-ups-${clusterName}'
  location: location
  tags: tags
  identity: {
    type: 'SystemAssigned'
  }
  properties: {
    displayName: 'Autoscaler ${clusterName}: repeated failed scale-ups'
    description: 'At least ${failedScaleUpThreshold} scale-ups failed in 30 minutes (quota, SKU or allocation errors; the group backs off). See customDimensions.error_code.'
    severity: 2
    enabled: true
    scopes: [
      applicationInsights.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT30M'
    criteria: {
      allOf: [
        {
          query: 'customEvents | where name == "ScaleUp" and tostring(customDimensions.outcome) == "failed"'
          timeAggregation: 'Count'
          operator: 'GreaterThanOrEqual'
          threshold: failedScaleUpThreshold
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    autoMitigate: true
    actions: {
      actionGroups: actionGroups
    }
  }
}

resource poisonMessages 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: 'vmss-autoscaler-poison-messages-${clusterName}'
  location: location
  tags: tags
  identity: {
    type: 'SystemAssigned'
  }
  properties: {
    displayName: 'Autoscaler ${clusterName}: scale action gave up (poison)'
    description: 'A scale action message was rejected or retried until the host moved it to the poison queue; its node may stay cordoned until the next utilisation poll gives it back.'
    severity: 2
    enabled: true
    scopes: [
      applicationInsights.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    criteria: {
      allOf: [
        {
          query: 'union (customEvents | where tostring(customDimensions.poison) == "true"), (traces | where message has "MaxDequeueCount")'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    autoMitigate: true
    actions: {
      actionGroups: actionGroups
    }
  }
}

resource noSuccessfulPoll 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: 'vmss-autoscaler-no-successful-poll-${clusterName}'
  location: location
  tags: tags
  identity: {
    type: 'SystemAssigned'
  }
  properties: {
    displayName: 'Autoscaler ${clusterName}: no successful poll in 10 minutes'
    description: 'cluster_autoscaler_last_activity{activity=main} is older than 10 minutes or absent: the polls fail (settings, credentials, RBAC) or do not run.'
    severity: 1
    enabled: true
    scopes: [
      applicationInsights.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    criteria: {
      allOf: [
        {
          // The gauge holds the Unix time of the last successful main loop; no sample at all also returns a row.
          query: '''
customMetrics
| where timestamp > ago(15m) and name == "cluster_autoscaler_last_activity" and tostring(customDimensions.activity) == "main"
| summarize last_success = max(valueMax)
| where isnull(last_success) or last_success < datetime_diff('second', now(), datetime(1970-01-01)) - 600
'''
          timeAggregation: 'Count'
          operator: 'GreaterThanOrEqual'
          threshold: 1
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    autoMitigate: true
    actions: {
      actionGroups: actionGroups
    }
  }
}

// The failed scale-up rule's own identity runs its query on the component; read-only.
resource failedScaleUpsReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: applicationInsights
  name: guid(failedScaleUps.id, monitoringReader)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringReader)
    principalId: failedScaleUps.identity.principalId
    principalType: 'ServicePrincipal'
  }
}

// The poison rule's own identity runs its query on the component; read-only.
resource poisonMessagesReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: applicationInsights
  name: guid(poisonMessages.id, monitoringReader)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringReader)
    principalId: poisonMessages.identity.principalId
    principalType: 'ServicePrincipal'
  }
}

// The no-successful-poll rule's own identity runs its query on the component; read-only.
resource noSuccessfulPollReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  scope: applicationInsights
  name: guid(noSuccessfulPoll.id, monitoringReader)
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringReader)
    principalId: noSuccessfulPoll.identity.principalId
    principalType: 'ServicePrincipal'
  }
}

resource workbook 'Microsoft.Insights/workbooks@2023-06-01' = {
  // Workbook names must be GUIDs; this one is stable per component, so redeploying updates it in place.
  name: guid(applicationInsights.id, 'vmss-autoscaler-workbook')
  location: location
  tags: tags
  kind: 'shared'
  properties: {
    displayName: 'VMSS autoscaler (${clusterName})'
    category: 'workbook'
    sourceId: applicationInsights.id
    serializedData: loadTextContent('../workbook.json')
  }
}

output workbookId string = workbook.id
output alertRuleNames array = [
  failedScaleUps.name
  poisonMessages.name
  noSuccessfulPoll.name
]
