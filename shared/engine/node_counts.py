"""Counting a snapshot's nodes per node group: the one definition of each count the planners use.

Pure module: no I/O, no side effects.

- `present`: nodes that registered and are Ready, or on their way out (tainted for deletion): the
  group's nodes that are there. A group's `running_target` less its present nodes are the nodes on their way.
- `registered`: every node the group's instances registered, Ready or not: what the cluster-wide
  limits already pay for.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from shared.domain import Node


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
