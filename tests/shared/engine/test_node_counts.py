"""The one definition of each per-group node count (shared/engine/node_counts.py)."""

from __future__ import annotations

from shared.domain import TO_BE_DELETED_TAINT, Node, Taint
from shared.engine.node_counts import present_by_group, registered_by_group
from tests.builders import node

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
