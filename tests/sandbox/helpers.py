"""Small, fast scenarios for sandbox tests: fixed boot and delete delays so times are exact."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

RG = "rg-test"
POOL = "pool-a"
SUB = "11111111-2222-3333-4444-555555555555"  # BASE's subscription
START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
VMSS = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachineScaleSets"
ARM_TOKEN = "arm-token"  # what `grant` issues for ARM in tests of a World without a server
ARM_AUTH = {"Authorization": f"Bearer {ARM_TOKEN}", "Host": "127.0.0.1:8443"}

BASE: dict[str, Any] = {
    "name": "small",
    "cluster_name": "test-cluster",
    "subscription_id": SUB,
    "location": "westeurope",
    "duration": "2h",
    "arm_throttling": False,
    "boot_delay": "60s",
    "start_delay": "60s",  # a start of a deallocated instance as long as a boot here: the tests time both alike
    "provisioning_fraction": 0.5,
    "delete_delay": "30s",
    "node_removal_delay": "10s",
    "termination_grace": "5s",
    "node_groups": [
        {
            "resource_group": RG,
            "name": POOL,
            "vm_size": "Standard_D4s_v5",
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": 110},
            "min": 0,
            "max": 10,
            "initial": 1,
            "labels": {"pool": "a"},
        }
    ],
    "daemonsets": [{"name": "kube-proxy", "requests": {"cpu": "100m", "memory": "128Mi"}}],
    "workloads": [],
}


def scenario(*, workloads: list[dict[str, Any]] | None = None, **overrides: Any) -> dict[str, Any]:
    """BASE with top-level overrides (node_groups, pdbs, ...) and the given workloads."""
    doc = copy.deepcopy(BASE)
    doc.update(copy.deepcopy(overrides))
    if workloads is not None:
        doc["workloads"] = copy.deepcopy(workloads)
    return doc


def job(name: str, count: int = 1, *, cpu: str = "1", memory: str = "1Gi", duration: Any = "10m",
        at: str = "0s", **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "Job", "count": count, "at": at,
            "requests": {"cpu": cpu, "memory": memory}, "duration": duration, **extra}


def grant(world: Any, resource: str, token: str, *, lifetime: float | None = None) -> dict[str, str]:
    """Issue `token` for `resource` from the world's identity; the Authorization header carrying it.

    For tests that call the doubles as functions: ARM, Log Analytics and Key Vault take only tokens
    the identity issued (the Kubernetes API also takes the kubeconfig's static `world.token`).
    """
    world.identity.issue(resource, token=token, lifetime=lifetime)
    return {"Authorization": f"Bearer {token}"}
