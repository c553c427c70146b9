"""Preempt Scheduled Events as the Event Grid system topic would deliver them to an outside controller.

Azure publishes a Spot VM's eviction notice as a Scheduled Event of type `Preempt`, at least 30 s before
the eviction. Inside the VM it is read from IMDS; outside, the same events reach the (preview) Event Grid
system topic `Microsoft.Maintenance.ScheduledEvents` (shared/facts/burst-and-spot.md, "Spot VMs in scale
sets"). The Event Grid envelope here is Event Grid's own schema; the `data` of that preview topic is
unverified, so it is inferred from the IMDS Scheduled Events document (`EventId`, `EventType`,
`ResourceType`, `Resources`, `EventStatus`, `NotBefore` in RFC 1123, `Description`, `EventSource`,
`DurationInSeconds`). The world keeps the events in order (`sandbox.world.spot`); the server's control API
hands them out (`GET /sandbox/eventgrid/events?after=<seq>`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from sandbox.model.units import rfc3339

EVENT_TYPE = "Microsoft.Maintenance.ScheduledEventCreated"
PREEMPT_DESCRIPTION = "The virtual machine is being preempted by Azure."


def rfc1123(moment: datetime) -> str:
    """`Mon, 19 Sep 2016 18:29:47 GMT`, as IMDS writes `NotBefore`."""
    return format_datetime(moment.astimezone(UTC).replace(microsecond=0), usegmt=True)


def preempt_event(
    *, event_id: str, topic: str, subject: str, resource: str, published: datetime, not_before: datetime
) -> dict[str, Any]:
    """One Event Grid event announcing that the VM `subject` (its ARM id; `resource` its IMDS name: a Uniform
    instance `<vmss>_<instance id>`, a Flexible member its VM name) will be preempted at `not_before`.
    `topic` is its scale set's ARM id."""
    return {
        "id": event_id,
        "topic": topic,
        "subject": subject,
        "eventType": EVENT_TYPE,
        "eventTime": rfc3339(published),
        "dataVersion": "1.0",
        "metadataVersion": "1",
        "data": {
            "EventId": event_id,
            "EventType": "Preempt",
            "ResourceType": "VirtualMachine",
            "Resources": [resource],
            "EventStatus": "Scheduled",
            "NotBefore": rfc1123(not_before),
            "Description": PREEMPT_DESCRIPTION,
            "EventSource": "Platform",
            "DurationInSeconds": -1,
        },
    }
