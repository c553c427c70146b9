"""Observe: read the cluster and the scale sets into one snapshot for the engine."""

from __future__ import annotations

import logging
from datetime import datetime

from shared.domain import ClusterSnapshot
from shared.engine.templates import build_templates
from shared.ports import ComputeError, Ports

log = logging.getLogger(__name__)


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


def observe_or_skip(ports: Ports, *, now: datetime) -> ClusterSnapshot | None:
    """observe(), or None when ARM throttles us: a skipped tick is harmless, a retry storm is not."""
    try:
        return observe(ports, now=now)
    except ComputeError as exc:
        if exc.code != "TooManyRequests":
            raise
        log.warning("ARM is throttling discovery (retry after %ss): skipping this poll", exc.retry_after)
        return None
