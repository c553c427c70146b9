"""ProvisioningRequest conditions: their types and reasons as cluster-autoscaler writes them, and how one is set.

Pure: no SDK, no I/O, `now` passed in. The planner (engine.provisioning) and the executor (the atomic scale-up's
steps) both write a request's status; this module is the one vocabulary they share, so Kueue and `kubectl` read
the same words from us as from cluster-autoscaler. A condition keeps its lastTransitionTime while its status holds,
so rewriting an unchanged status changes nothing and is never sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from shared.domain import Condition, ProvisioningRequest

# Condition types (autoscaling.x-k8s.io/v1).
ACCEPTED = "Accepted"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"

# Reasons cluster-autoscaler writes, and ours where it has none (a partial grant given back, a quota refusal).
CAPACITY_IS_FOUND = "CapacityIsFound"  # check-capacity: the pods fit the nodes there are
CAPACITY_IS_NOT_FOUND = "CapacityIsNotFound"  # they do not (retried later, or Failed with noRetry)
CAPACITY_IS_PROVISIONED = "CapacityIsProvisioned"  # atomic: every node asked for came
BOOKING_EXPIRED_REASON = "CapacityReservationTimeExpired"  # CA's reason for BookingExpired=True
EXPIRED_REASON = "Expired"  # CA: Failed for a check-capacity request not provisioned within a week
CAPACITY_REVOKED_REASON = "CapacityRevoked"
ACCEPTED_REASON = "Accepted"
NOT_SUPPORTED_CLASS = "NotSupportedClass"
SCALE_UP_IN_PROGRESS = "ScaleUpInProgress"  # ours: the whole request was asked for; nodes on their way
PARTIAL_CAPACITY_RETURNED = "PartialCapacityReturned"  # ours: Azure granted part; every added instance given back
QUOTA_EXCEEDED = "QuotaExceeded"  # ours: the quota or a group's max cannot hold it: nothing was asked for
INVALID_REQUEST = "InvalidRequest"  # ours: the spec or a PodTemplate could not be read
SCALE_UP_EXPIRED = "ScaleUpExpired"  # ours: the atomic scale-up expired on the queue before it ran: nothing asked

# spec.parameters key: "true" makes a capacity miss Failed (Kueue retries on Failed) instead of Provisioned=False.
NO_RETRY = "noRetry"

# A request in one of these states is finished: nothing more is done for it.
FINAL = (FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED)


def with_condition(conditions: Sequence[Condition], type_: str, status: str, reason: str, message: str = "", *,
                   now: datetime, generation: int = 0) -> tuple[Condition, ...]:
    """`conditions` with `type_` set: its transition time kept when the status does not change, the others kept."""
    old = next((c for c in conditions if c.type == type_), None)
    since = old.since if old is not None and old.status == status and old.since is not None else now
    new = Condition(type_, status, reason, message, since, generation)
    return (*(c for c in conditions if c.type != type_), new) if old is None else tuple(
        new if c.type == type_ else c for c in conditions)


def is_final(request: ProvisioningRequest) -> bool:
    """Failed, expired or revoked: the request asks for nothing more."""
    return any(request.is_true(type_) for type_ in FINAL)


def conditions_changed(old: Sequence[Condition], new: Sequence[Condition]) -> bool:
    """Whether writing `new` over `old` would change anything a reader sees (order aside)."""
    def key(c: Condition) -> tuple[str, str, str, str]:
        return (c.type, c.status, c.reason, c.message)
    return sorted(map(key, old)) != sorted(map(key, new))
