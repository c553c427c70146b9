"""VMSS Standby Pools (`Microsoft.StandbyPool/standbyVirtualMachinePools`) with azure-mgmt-standbypool.

Adapter module (`shared.ports.StandbyPoolSource`): lists the pools of the node resource groups and sets a
pool's `elasticityProfile` (maxReadyCapacity, minReadyCapacity) by PATCH, the spec's synchronous Update,
sending only that profile so the pool's state and attachment are left as their owner set them. The list is
cached for `cache_seconds` (one LIST per resource group at most that often, as discovery is); a write updates
the cached entry, so the next poll does not see its own change as stale. Errors become `ComputeError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError

from shared.adapters.compute import arm_client_options, compute_error
from shared.ports import StandbyPool
from shared.settings import Settings

T = TypeVar("T")
DEFAULT_CACHE_SECONDS = 300.0


class AzureStandbyPools:
    """`shared.ports.StandbyPoolSource` over the Standby Pool resource provider (see the module docstring)."""

    def __init__(self, client: Any, *, resource_groups: Sequence[str], cache_seconds: float = DEFAULT_CACHE_SECONDS,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._resource_groups = tuple(resource_groups)
        self._cache_seconds = cache_seconds
        self._monotonic = monotonic
        self._cached: list[StandbyPool] | None = None
        self._read_at = 0.0

    @classmethod
    def from_settings(cls, settings: Settings, *, credential: TokenCredential | None = None) -> AzureStandbyPools:
        from azure.mgmt.standbypool import StandbyPoolMgmtClient

        if credential is None:
            from shared.adapters.credentials import make_azure_credential

            credential = make_azure_credential(settings)
        client = StandbyPoolMgmtClient(
            credential, settings.subscription_id,
            **arm_client_options(settings, retry_total=2, retry_backoff_max=4, timeout=60),
        )
        return cls(client, resource_groups=settings.node_resource_groups)

    def close(self) -> None:
        self._client.close()

    def list_standby_pools(self) -> list[StandbyPool]:
        """Every pool of the node resource groups, from the cache while it is fresh."""
        if self._cached is not None and self._monotonic() - self._read_at < self._cache_seconds:
            return list(self._cached)
        pools: list[StandbyPool] = []
        operations = self._client.standby_virtual_machine_pools
        for rg in self._resource_groups:
            listed = self._arm(f"list standby pools in resource group {rg}",
                               lambda rg=rg: list(operations.list_by_resource_group(rg)))
            pools.extend(pool_from_resource(rg, resource) for resource in listed)
        self._cached, self._read_at = pools, self._monotonic()
        return list(pools)

    def update_standby_pool(self, pool: StandbyPool, *, max_ready: int, min_ready: int) -> StandbyPool:
        """PATCH the pool's elasticity profile; the pool as ARM returns it."""
        if not 0 <= min_ready <= max_ready:
            raise ValueError(f"standby pool {pool.resource_group}/{pool.name}: minReadyCapacity {min_ready} must be "
                             f"between 0 and maxReadyCapacity {max_ready}")
        body = {"properties": {"elasticityProfile": {"maxReadyCapacity": max_ready, "minReadyCapacity": min_ready}}}
        updated = self._arm(
            f"update standby pool {pool.resource_group}/{pool.name}",
            lambda: self._client.standby_virtual_machine_pools.update(pool.resource_group, pool.name, body),
        )
        result = pool_from_resource(pool.resource_group, updated)
        if self._cached is not None:
            self._cached = [result if (p.resource_group, p.name) == (pool.resource_group, pool.name) else p
                            for p in self._cached]
        return result

    def _arm(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except AzureError as exc:
            raise compute_error(what, exc) from exc


def pool_from_resource(resource_group: str, resource: Any) -> StandbyPool:
    """The port's view of a StandbyVirtualMachinePoolResource (the SDK model, read by attribute)."""
    props = getattr(resource, "properties", None)
    profile = getattr(props, "elasticity_profile", None)
    attached = str(getattr(props, "attached_virtual_machine_scale_set_id", None) or "")
    set_rg, set_name = scale_set_of(attached)
    return StandbyPool(
        resource_group=resource_group,
        name=str(resource.name),
        scale_set_resource_group=set_rg,
        scale_set_name=set_name,
        vm_state=_enum_text(getattr(props, "virtual_machine_state", None)),
        max_ready=int(getattr(profile, "max_ready_capacity", None) or 0),
        min_ready=int(getattr(profile, "min_ready_capacity", None) or 0),
    )


def _enum_text(value: Any) -> str:
    """An SDK enum's wire text (`VirtualMachineState.DEALLOCATED` -> `Deallocated`), or a plain string as sent."""
    return str(getattr(value, "value", value) or "")


def scale_set_of(resource_id: str) -> tuple[str, str]:
    """(resource group, name) of a `.../resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{name}`
    id; ("", "") for anything else."""
    parts = resource_id.strip("/").split("/")
    lowered = [p.lower() for p in parts]
    if len(parts) == 8 and lowered[2] == "resourcegroups" and lowered[5:7] == ["microsoft.compute",
                                                                               "virtualmachinescalesets"]:
        return parts[3], parts[7]
    return "", ""
