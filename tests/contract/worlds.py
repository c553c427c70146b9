"""The starting world of the Cluster and NodeGroupProvider contracts, and the facts the tests expect of it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

START = datetime(2030, 1, 7, 9, 0, 0, tzinfo=UTC)
SEED = 0

CLUSTER = "contract"
RG = "rg-contract"
RG_TWO = "RG-Two"
POOL_A = f"{RG}/pool-a"
POOL_B = f"{RG_TWO.lower()}/pool-b"
D4, D2 = "Standard_D4s_v5", "Standard_D2s_v5"

_D4 = {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}
_D2 = {"cpu": "1900m", "memory": "6Gi"}

POOL_A_NODES = ["pool-a000000", "pool-a000001"]
MANUAL_NODE = "pool-manual000000"
VIRTUAL_NODE = "virtual-node-aci-linux"

SCENARIO: dict[str, Any] = {
    "name": "contract",
    "cluster_name": CLUSTER,
    "arm_throttling": False,
    "boot_delay": "60s",
    "delete_delay": "20s",
    "node_groups": [
        {
            "resource_group": RG, "name": "pool-a", "vm_size": D4, "allocatable": _D4,
            "min": 1, "max": 5, "initial": 2,
            "mirror_pods": [{"name": "probe", "requests": {"cpu": "10m", "memory": "16Mi"}}],
        },
        # Not ours: untagged, and tagged for another cluster.
        {"resource_group": RG, "name": "pool-manual", "vm_size": D2, "allocatable": _D2, "autoscaled": False,
         "initial": 1},
        {
            "resource_group": RG, "name": "pool-other", "vm_size": D2, "allocatable": _D2, "autoscaled": False,
            "initial": 0,
            "tags": {"cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": "another", "min": "0", "max": "3"},
        },
        {
            "resource_group": RG_TWO, "name": "pool-b", "vm_size": D2, "allocatable": _D2,
            "min": 0, "max": 3, "initial": 0, "zones": ["1", "2"],
        },
    ],
    "daemonsets": [{"name": "kube-proxy", "requests": {"cpu": "100m", "memory": "128Mi"}}],
    "workloads": [
        {"name": "web", "kind": "ReplicaSet", "count": 2, "requests": {"cpu": "500m", "memory": "256Mi"},
         "labels": {"app": "web"}},
        {"name": "batch", "kind": "Job", "count": 2, "requests": {"cpu": "500m", "memory": "256Mi"}, "duration": "60s"},
        {"name": "huge", "kind": "Pod", "count": 1, "requests": {"cpu": "64", "memory": "1Gi"}},
        # One pod for the virtual node only (it selects it): created on ACI, with virtual-kubelet's events.
        {"name": "aci", "kind": "ReplicaSet", "count": 1, "requests": {"cpu": "1", "memory": "1Gi"},
         "node_selector": {"type": "virtual-kubelet"},
         "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}]},
    ],
    "virtual_node": {"start_latency": "20s"},
    # Both web pods must stay up: evicting either is refused.
    "pdbs": [{"name": "web", "selector": {"app": "web"}, "min_available": 2}],
}


def scenario(**changes: Any) -> dict[str, Any]:
    return {**SCENARIO, **changes}


def with_group(group: dict[str, Any]) -> dict[str, Any]:
    """The scenario with one more scale set."""
    return scenario(node_groups=[*SCENARIO["node_groups"], group])
