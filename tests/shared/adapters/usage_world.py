"""The sandbox world the measured-usage adapter tests run against: busy and idle nodes in two scale sets."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sandbox.api.server import SandboxServer
from shared.adapters.kubernetes import KubernetesCluster
from shared.domain import Node
from shared.settings import load_settings

WINDOW = timedelta(minutes=10)

N0, N1, B0 = "pool-a000000", "pool-a000001", "pool-b000000"
RG = "rg-it"


def _on(node: str) -> dict[str, str]:
    return {"kubernetes.io/hostname": node}


def usage_scenario(**changes: Any) -> dict[str, Any]:
    """Three 4-core nodes: N0 runs a 1-CPU service as asked (27.5% with kube-proxy); N1 a pod requesting
    100m that burns 3 CPUs (5% by requests, 77.5% measured); B0, in another scale set, only kube-proxy (2.5%)."""
    d4 = {"cpu": "4", "memory": "16Gi"}
    return {
        "name": "usage",
        "cluster_name": "it",
        "arm_throttling": False,
        "node_groups": [
            {"resource_group": RG, "name": "pool-a", "vm_size": "Standard_D4s_v5", "allocatable": d4,
             "min": 0, "max": 20, "initial": 2},
            {"resource_group": RG, "name": "pool-b", "vm_size": "Standard_D4s_v5", "allocatable": d4,
             "min": 0, "max": 5, "initial": 1},
        ],
        "daemonsets": [{"name": "kube-proxy", "requests": {"cpu": "100m", "memory": "128Mi"}}],
        "workloads": [
            {"name": "web", "kind": "ReplicaSet", "requests": {"cpu": "1", "memory": "1Gi"}, "node_selector": _on(N0)},
            {"name": "crunch", "kind": "Pod", "requests": {"cpu": "100m", "memory": "1Gi"}, "cpu_usage": "3",
             "node_selector": _on(N1)},
        ],
        **changes,
    }


EXPECTED = {N0: 1100 / 4000, N1: 3100 / 4000, B0: 100 / 4000}


def usage_nodes(server: SandboxServer) -> list[Node]:
    """The world's nodes as the Kubernetes adapter reads them: what a usage source is asked about."""
    cluster = KubernetesCluster.from_settings(load_settings(server.env()))
    try:
        return cluster.list_nodes()
    finally:
        cluster.close()
