"""The one definition of each per-group node count (shared/engine/node_counts.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import TO_BE_DELETED_TAINT, LimitReservation, Node, Taint
from shared.engine.node_counts import present_by_group, registered_by_group, with_scale_ups_in_flight
from tests.builders import T0, group, node

LEAVING = (Taint(TO_BE_DELETED_TAINT, "1", "NoSchedule"),)
NODES: list[Node] = [
    node("a0", group_name="a", instance=0),  # Ready
    node("a1", group_name="a", instance=1, ready=False),  # booting: registered, not present
    node("a2", group_name="a", instance=2, ready=False, taints=LEAVING),  # unready but leaving: present
    node("b0", group_name="b", instance=0),
    Node("server", node("x").allocatable, node("x").created_at, "k3s://server"),  # no scale-set instance
]


def test_present_counts_ready_nodes_and_nodes_on_their_way_out() -> None:
    assert present_by_group(NODES) == {"rg/a": 2, "rg/b": 1}


def test_registered_counts_every_node_of_an_instance_but_the_excluded() -> None:
    assert registered_by_group(NODES) == {"rg/a": 3, "rg/b": 1}
    assert registered_by_group(NODES, exclude={"a0", "b0"}) == {"rg/a": 2}


def test_present_is_never_more_than_registered() -> None:
    present, registered = present_by_group(NODES), registered_by_group(NODES)
    assert all(present[g] <= registered[g] for g in present)


# --- Scale-ups in flight that the capacity does not show ------------------------------------------------------------

def _reservation(target: int, nodes: int, *, group_id: str = "rg/pool", lapses_in: int = 300,
                 action: str = "scale-up:a") -> LimitReservation:
    return LimitReservation(action, group_id, target, nodes, 4, 16 << 30, T0 + timedelta(seconds=lapses_in))


@pytest.mark.parametrize(("capacity", "stopped", "reservations", "planned"), [
    # Grown 3 -> 5: ARM took the write back after a failed allocation (or it is not made yet): 2 on their way.
    (3, 0, [_reservation(5, 2)], 5),
    # The write shows: nothing to add (the nodes are on their way by the capacity itself).
    (5, 0, [_reservation(5, 2)], 5),
    # Shown, then one node lost since (a spot eviction): the loss stays visible, its replacement is planned.
    (4, 0, [_reservation(5, 2)], 4),
    # Not shown and one lost besides: the action's own 2 count, the loss is still visible.
    (2, 0, [_reservation(5, 2)], 4),
    # Deallocated instances are capacity, not running nodes: running 3 of capacity 5 shows none of 3 -> 5.
    (5, 2, [_reservation(5, 2)], 7),
    # Two actions for one group: targets are absolute, the larger covers the other.
    (3, 0, [_reservation(4, 1, action="scale-up:a"), _reservation(6, 3, action="scale-up:b")], 6),
    # A reservation past its lifetime holds nothing.
    (3, 0, [_reservation(5, 2, lapses_in=-1)], 3),
    # Another group's reservation changes nothing here.
    (3, 0, [_reservation(5, 2, group_id="rg/other")], 3),
])
def test_nodes_of_a_scale_up_in_flight_count_only_while_the_capacity_shows_none_of_them(
        capacity: int, stopped: int, reservations: list[LimitReservation], planned: int) -> None:
    pool = replace(group("pool", target=capacity), stopped=stopped)
    [seen] = with_scale_ups_in_flight([pool], reservations, now=T0)
    assert seen.capacity == planned
    assert seen.running_target <= pool.max_size  # a reservation's target is within the group's max
    assert replace(seen, capacity=pool.capacity) == pool  # nothing but the capacity changes
