"""Scale-up backoff per node group, as cluster-autoscaler does it but without waiting to find out.

Pure module, no side effects. A failed scale-up (an allocation or quota error from ARM, or nodes
that never became Ready) puts the group in backoff: 5 minutes, doubling with each consecutive
failure up to 30 minutes; three hours without a failure forgets the history. While a group is in
backoff the planner places pending pods onto the next best group at the very next poll, instead of
leaving them pending for the 15 minutes cluster-autoscaler waits on Azure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from shared.domain import ClusterSnapshot, GroupState, NodeGroup
from shared.engine.node_counts import present_by_group

# ARM error codes that mean "this group cannot grow right now"; anything else is retried as transient.
ALLOCATION_FAILURES = frozenset({
    "QuotaExceeded",
    "SkuNotAvailable",
    "AllocationFailed",
    "ZonalAllocationFailed",
    "OverconstrainedAllocationRequest",
    "OverconstrainedZonalAllocationRequest",
    "OperationNotAllowed",
    "LinkedAuthorizationFailed",
    "AuthorizationFailed",
    "ProvisionTimeout",  # ours: nodes not Ready within MAX_NODE_PROVISION_TIME
})


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    initial: timedelta = timedelta(minutes=5)
    maximum: timedelta = timedelta(minutes=30)
    reset_after: timedelta = timedelta(hours=3)


def after_failure(state: GroupState, *, now: datetime, code: str, policy: BackoffPolicy = BackoffPolicy()) -> GroupState:
    """The group's state once a scale-up failed with `code`."""
    healthy_long_enough = state.last_failure is None or now - state.last_failure >= policy.reset_after
    failures = 1 if healthy_long_enough else state.backoff_failures + 1
    length = min(policy.initial * (2 ** (failures - 1)), policy.maximum)
    return replace(state, last_failure=now, backoff_until=now + length, backoff_failures=failures, backoff_reason=code)


def backoff_reason(state: GroupState, *, now: datetime) -> str | None:
    """Why no scale-up may be planned onto the group now, or None."""
    if state.backoff_until is not None and now < state.backoff_until:
        return f"in backoff after {state.backoff_reason or 'a failed scale-up'} until {state.backoff_until.isoformat()}"
    return None


def provision_timed_out(group: NodeGroup, state: GroupState, *, present: int, now: datetime,
                        max_node_provision_time: timedelta) -> bool:
    """Whether the group's scale-up has failed by its nodes not registering in time (ProvisionTimeout).

    Nodes asked for (`running_target`) but not `present` MAX_NODE_PROVISION_TIME after the last scale-up;
    False while the group is in backoff already, or when this very timeout was recorded already.
    """
    missing = group.running_target - present
    overdue = state.last_scale_up is not None and now - state.last_scale_up > max_node_provision_time
    return (missing > 0 and overdue and backoff_reason(state, now=now) is None
            and state.backoff_reason != "ProvisionTimeout")


def backoff_view(snapshot: ClusterSnapshot, states: Mapping[str, GroupState], *,
                 now: datetime) -> tuple[ClusterSnapshot, dict[str, str]]:
    """The groups in backoff (with why), and the snapshot as the planner should see it.

    A group in backoff after a ProvisionTimeout no longer counts its missing nodes as capacity on the
    way (they are written off), so their pods are planned onto another group.
    """
    present = present_by_group(snapshot.nodes)
    groups = []
    backed_off: dict[str, str] = {}
    for group in snapshot.groups:
        state = states[group.id]
        reason = backoff_reason(state, now=now)
        if reason is not None:
            backed_off[group.id] = reason
            if state.backoff_reason == "ProvisionTimeout":
                missing = max(0, group.running_target - present.get(group.id, 0))
                group = replace(group, written_off=group.written_off + missing)
        groups.append(group)
    return replace(snapshot, groups=tuple(groups)), backed_off
