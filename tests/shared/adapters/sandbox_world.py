"""The small sandbox world the adapter integration tests run against, and settings pointing at it."""

from __future__ import annotations

from typing import Any

from sandbox.api.server import SandboxServer
from shared.settings import Settings, load_settings

CLUSTER = "it"
GROUPS_RG = "rg-it"

_D4 = {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}
_D2 = {"cpu": "1900m", "memory": "6Gi"}

SCENARIO: dict[str, Any] = {
    "name": "adapters",
    "cluster_name": CLUSTER,
    "arm_throttling": False,  # tests that want throttling turn it on or inject a 429
    "arm_page_size": 2,  # lists span pages, so nextLink is followed
    "boot_delay": "60s",
    "delete_delay": "20s",
    "node_groups": [
        {
            "resource_group": GROUPS_RG, "name": "pool-a", "vm_size": "Standard_D4s_v5", "allocatable": _D4,
            "min": 1, "max": 5, "initial": 2,
            "mirror_pods": [{"name": "probe", "requests": {"cpu": "10m", "memory": "16Mi"}}],
        },
        # Not for us: no tags at all, and tags naming another cluster.
        {"resource_group": GROUPS_RG, "name": "pool-manual", "vm_size": "Standard_D2s_v5", "allocatable": _D2, "autoscaled": False, "initial": 1},
        {
            "resource_group": GROUPS_RG, "name": "pool-other", "vm_size": "Standard_D2s_v5", "allocatable": _D2,
            "autoscaled": False, "initial": 0,
            "tags": {"cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": "another", "min": "0", "max": "3"},
        },
        # Ours, but its min tag is not a number: skipped with a warning.
        {
            "resource_group": GROUPS_RG, "name": "pool-bad", "vm_size": "Standard_D2s_v5", "allocatable": _D2,
            "autoscaled": False, "initial": 0,
            "tags": {"cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": CLUSTER, "min": "one", "max": "3"},
        },
        {
            "resource_group": "RG-Two", "name": "pool-b", "vm_size": "Standard_D2s_v5", "allocatable": _D2,
            "min": 0, "max": 3, "initial": 0, "zones": ["1", "2"],
        },
    ],
    "daemonsets": [{"name": "kube-proxy", "requests": {"cpu": "100m", "memory": "128Mi"}}],
    "workloads": [
        {"name": "web", "kind": "ReplicaSet", "count": 2, "requests": {"cpu": "500m", "memory": "256Mi"}, "labels": {"app": "web"}},
        {"name": "batch", "kind": "Job", "count": 2, "requests": {"cpu": "500m", "memory": "256Mi"}, "duration": "60s"},
        {"name": "huge", "kind": "Pod", "count": 1, "requests": {"cpu": "64", "memory": "1Gi"}},
    ],
    # Both web pods must stay up: evicting either is refused.
    "pdbs": [{"name": "web", "selector": {"app": "web"}, "min_available": 2}],
}


def scenario(**changes: Any) -> dict[str, Any]:
    return {**SCENARIO, **changes}


def settings_for(server: SandboxServer, **env: str) -> Settings:
    return load_settings({**server.env(), **env})
