"""Observe: read the cluster and the scale sets into one snapshot for the engine."""

from __future__ import annotations

from datetime import datetime

from shared.domain import ClusterSnapshot
from shared.engine.templates import build_templates
from shared.ports import Ports


def observe(ports: Ports, *, now: datetime) -> ClusterSnapshot:
    """One consistent-enough view: groups first, so nodes booting meanwhile count as upcoming, not missing."""
    groups = ports.compute.list_node_groups()
    nodes = ports.cluster.list_nodes()
    pods = ports.cluster.list_pods()
    return ClusterSnapshot(
        taken_at=now,
        nodes=tuple(nodes),
        pods=tuple(pods),
        groups=tuple(groups),
        templates=build_templates(groups, nodes),
    )
