"""Counting a snapshot's nodes per node group: the one definition of each count the planners use.

Pure module: no I/O, no side effects.

- `present`: nodes that registered and are Ready, or on their way out (tainted for deletion): the
  group's nodes that are there. A group's `running_target` less its present nodes are the nodes on their way.
- `registered`: every node the group's instances registered, Ready or not: what the cluster-wide
  limits already pay for.
- `with_scale_ups_in_flight`: the nodes a scale-up in flight asked for that the group's capacity does not
  show (its write not made yet, or reverted by ARM after a failed allocation), counted as on their way.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from shared.domain import LimitReservation, Node, NodeGroup


def present_by_group(nodes: Iterable[Node]) -> dict[str, int]:
    """Per group id, the nodes that registered and are Ready or on their way out."""
    present: dict[str, int] = {}
    for node in nodes:
        ref = node.instance
        if ref is not None and (node.ready or node.is_being_deleted):
            present[ref.group_id] = present.get(ref.group_id, 0) + 1
    return present


def registered_by_group(nodes: Iterable[Node], *, exclude: Collection[str] = ()) -> dict[str, int]:
    """Per group id, every node its instances registered (Ready or not), but those named in `exclude`."""
    registered: dict[str, int] = {}
    for node in nodes:
        ref = node.instance
        if ref is not None and node.name not in exclude:
            registered[ref.group_id] = registered.get(ref.group_id, 0) + 1
    return registered


def with_scale_ups_in_flight(groups: Sequence[NodeGroup], reservations: Iterable[LimitReservation], *,
                             now: datetime) -> tuple[NodeGroup, ...]:
    """The groups with the nodes their scale-ups in flight asked for counted in where the capacity shows none.

    `reservations`: those of scale-up actions that have no outcome yet. A scale-up holds one (its target running
    size, and the nodes it adds to the running size it saw) from before its capacity write until its action
    records its outcome. A group whose running size (capacity less stopped instances) is still at or below the
    size that action grew from shows none of its increase: the write is not made yet, or ARM made it and took it
    back when the allocation failed, before the executor recorded the failure (no offering mark, no backoff yet).
    Either way those nodes are still the action's to bring or to fail; a planner that saw room there would ask
    for them again, only to be refused again. So the group's capacity is raised by them (planning only): they
    count as nodes on their way, and growth beyond them is planned as usual. A group whose capacity shows the
    increase is left as it is, so a node lost since (a spot eviction) is still replaced at once.
    """
    largest: dict[str, LimitReservation] = {}
    for reservation in reservations:
        known = largest.get(reservation.group_id)
        if reservation.live(now) and (known is None or reservation.target > known.target):
            largest[reservation.group_id] = reservation
    if not largest:
        return tuple(groups)
    out = []
    for group in groups:
        reservation = largest.get(group.id)
        if reservation is not None and reservation.nodes > 0 \
                and group.capacity - group.stopped <= reservation.target - reservation.nodes:
            group = replace(group, capacity=group.capacity + reservation.nodes)
        out.append(group)
    return tuple(out)
