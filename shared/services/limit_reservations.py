"""Room under the cluster-wide limits, reserved by each scale-up before its capacity write and held until it ends.

The limits (MAX_NODES_TOTAL, CORES_TOTAL, MEMORY_TOTAL, a group's max) are checked at execution against the
world as observed; two executors checking at once would each see the room the other is about to take. So the
check and the reservation are one compare-and-swap on the one limits row (`StateStore.get_limit_reservations`,
`swap.read_modify_write`): the reservations of the other scale-ups in flight count against the limits together
with what exists, and a write that lost the race is checked again against the row that won.

The row is read before the cluster is observed, and the observation is taken again when a reservation that was
in the row is gone: a reservation is released only after its capacity write, so an observation taken after
reading a row without it sees that capacity.

A reservation's lifetime is tied to its action: released when the action records its outcome (succeeded,
failed, skipped, rejected: `StepTable.ended`), and worth nothing ACTION_LEASE after it was taken. It holds room
only until the capacity write it precedes is visible (a target the group reached adds nothing), which happens
within the step that took it; a step silent for longer than the lease is taken over by another delivery, which
reserves again under the same action id.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from shared.domain import ClusterSnapshot, LimitReservation, LimitReservations, NodeGroup
from shared.engine.limits import allowed_target, node_cores
from shared.engine.pod_rules import is_virtual_node
from shared.ports import Ports
from shared.services.group_rows import read_group_states
from shared.services.observe import observe, running_sizes
from shared.services.swap import read_modify_write
from shared.settings import Settings

log = logging.getLogger(__name__)


def reserve(ports: Ports, settings: Settings, *, action_id: str, group: NodeGroup, target: int, now: datetime,
            write: bool = True) -> tuple[int, str | None]:
    """The size up to `target` the group may be grown to now, and the limit that capped it; with `write`, the
    room it takes is reserved for `action_id` in the limits row first (a redelivery replaces its own).

    Raises `swap.StateConflict` when other writers won the row every time: the caller tries again later.
    """
    seen: dict[str, LimitReservation] = {}
    observed: list[ClusterSnapshot] = []

    def change(row: LimitReservations) -> tuple[LimitReservations | None, tuple[int, str | None]]:
        if not observed or any(row.reservations.get(key) != held for key, held in seen.items()):
            # First, or a reservation was released since the last observation: observe again (see the module).
            observed[:] = [_observe(ports, settings, now=now)]
            seen.clear()
            seen.update(row.reservations)
        snapshot = observed[0]
        others = [r for key, r in row.reservations.items() if key != action_id and r.live(now)]
        allowed, limit = allowed_target(snapshot, group.id, target, limits=settings.cluster_limits,
                                        max_nodes_per_scale_up=settings.max_nodes_per_scale_up,
                                        exclude={n.name for n in snapshot.nodes if is_virtual_node(n)},
                                        reserved=others)
        current = snapshot.group(group.id)
        running = current.running_target if current is not None else group.running_target
        if not write or allowed <= running:
            return None, (allowed, limit)
        template = snapshot.templates.get(group.id)
        node = template.allocatable if template is not None else None
        mine = LimitReservation(action_id=action_id, group_id=group.id, target=allowed, nodes=allowed - running,
                                cores=node_cores(node) if node else 0,
                                memory_bytes=max(0, node.memory_bytes) if node else 0,
                                until=now + settings.action_lease)
        # Expired reservations go with this write: the row holds only what is in flight.
        kept = {r.action_id: r for r in others}
        return replace(row, reservations={**kept, action_id: mine}), (allowed, limit)

    return read_modify_write(ports.state.get_limit_reservations, ports.state.update_limit_reservations, change,
                             what=f"reserve room under the cluster limits for {action_id}")


def release(ports: Ports, action_id: str, *, now: datetime) -> None:
    """Give back the room `action_id` reserved (nothing to do when it holds none); expired ones go too."""

    def change(row: LimitReservations) -> tuple[LimitReservations | None, None]:
        if action_id not in row.reservations:
            return None, None
        kept = {key: r for key, r in row.reservations.items() if key != action_id and r.live(now)}
        return replace(row, reservations=kept), None

    read_modify_write(ports.state.get_limit_reservations, ports.state.update_limit_reservations, change,
                      what=f"release the limits reservation of {action_id}")


def _observe(ports: Ports, settings: Settings, *, now: datetime) -> ClusterSnapshot:
    """Nodes and groups as they are now, deallocated instances left out of the running sizes; no pod is listed."""
    snapshot = observe(ports, now=now, node_mapping=settings.node_mapping, with_pods=False,
                       gpu_readiness=settings.gpu_readiness)
    states, _ = read_group_states(ports, snapshot.groups)  # an unreadable row counts the group's whole capacity
    return running_sizes(snapshot, states)
