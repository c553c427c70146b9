"""metav1.Condition and timestamps between the API's JSON and domain values, for the custom resources we read and
write (CapacityBuffers, ProvisioningRequests).

Adapter module, no I/O: a condition we cannot read is dropped (we write our own afresh), one we write carries every
field the API requires, lastTransitionTime in RFC 3339 UTC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from shared.domain import Condition

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def timestamp(text: Any) -> datetime | None:
    """An RFC 3339 time as the API writes it; None when absent or unreadable (a naive one is taken as UTC)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def conditions_from_json(raw: Any) -> tuple[Condition, ...]:
    """A status's `conditions`; items without a type are dropped."""
    conditions = []
    for item in raw or ():
        if isinstance(item, Mapping) and item.get("type"):
            generation = item.get("observedGeneration")
            conditions.append(Condition(
                str(item["type"]), str(item.get("status") or "Unknown"), str(item.get("reason") or ""),
                str(item.get("message") or ""), timestamp(item.get("lastTransitionTime")),
                generation if isinstance(generation, int) and not isinstance(generation, bool) else 0))
    return tuple(conditions)


def conditions_json(conditions: Sequence[Condition]) -> list[dict[str, Any]]:
    """metav1.Conditions as the API takes them: every required field, lastTransitionTime in RFC 3339 UTC."""
    return [{"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
             "lastTransitionTime": (c.since or _EPOCH).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
             "observedGeneration": c.observed_generation}
            for c in conditions]
