"""The subscription's regional vCPU quota in the world: what every VM counts against, and refusing what exceeds it.

`QuotaPart` owns the scenario's `quotas` (by lower-cased name), the count of capacity increases checked and
refused, and the peak usage of each quota. Counting (shared/facts/burst-and-spot.md, "Quota"):

- a Regular VM counts its vCPUs against `cores` and its size's family (`sandbox.model.quota.vm_family`) from its
  creation until it is gone, deallocated too: "Quota is calculated based on the total number of cores in use both
  allocated and deallocated" (Learn, MicrosoftDocs azure-docs articles/virtual-machines/quotas.md). A stopped
  standby node so holds its cores, and starting it needs no more quota;
- a Spot VM counts against `lowPriorityCores` only (Spot's own pool, neither `cores` nor the family), and keeps
  counting when deallocated (an eviction with policy Deallocate keeps its quota);
- every scale set counts: Uniform, Flexible, AKS pools and unmanaged ones. The k3s flavour's server VM, outside
  every scale set, counts its 2 vCPUs against `cores` (its size, so its family, is unknown);
- `virtualMachines` and `virtualMachineScaleSets` count VMs (deallocated ones too) and scale sets; they are
  shown, never enforced.

Each location counts on its own, with the same limits. A quota the scenario leaves out is unlimited (served as
`sandbox.model.quota.UNLIMITED`). `_check_quota` refuses a capacity increase (a scale set's capacity, an agent pool's
count; starting deallocated instances adds nothing) that would take a quota over its limit: family first, then regional,
with ARM's 409 `OperationNotAllowed` and its message. Nothing changes when refused. `usages` answers the usages
API (`sandbox.api.spot_api`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sandbox.model import quota
from sandbox.model.instance_mix import member_spec
from sandbox.world.compute import ScaleSetSim
from sandbox.world.core import WorldCore
from sandbox.world.errors import ArmError

K3S_SERVER_VCPUS = 2  # sandbox.world.nodes.K3S_SERVER_CAPACITY


class QuotaPart(WorldCore):
    """vCPU quota: usage, limits, refusals. See the module docstring."""

    def _init_quota_state(self) -> None:
        self._quota_limits: dict[str, tuple[str, int]] = {
            name.lower(): (name, limit) for name, limit in self.scenario.quotas.items()
        }
        self._quota_requests = 0  # capacity increases checked
        self._quota_refused = 0  # ... and refused for quota
        self._quota_peaks: dict[str, int] = {}  # by canonical quota name, the most used at any time in any location

    def _quota_limit(self, name: str) -> int:
        entry = self._quota_limits.get(name.lower())
        return entry[1] if entry is not None else quota.UNLIMITED

    def _locations(self) -> list[str]:
        """The locations the world has (lower-cased): the scenario's and its scale sets'."""
        return sorted({self.scenario.location.lower()} | {g.spec.location.lower() for g in self._groups.values()})

    def _quota_usage(self, location: str) -> Counter[str]:
        """What is used now in `location`, by canonical quota name (see the module docstring)."""
        usage: Counter[str] = Counter()
        for group in self._groups.values():
            if group.spec.location.lower() != location.lower():
                continue
            usage[quota.VIRTUAL_MACHINE_SCALE_SETS] += 1
            for inst in group.instances.values():  # alive ones, those being deleted too
                spec = member_spec(group.spec, inst.vm_size)  # an instance-mix member counts at its own size
                cpus, family = quota.vcpus(spec.capacity), quota.vm_family(spec.vm_size)
                usage[quota.VIRTUAL_MACHINES] += 1
                if group.spec.priority == "Spot":
                    usage[quota.LOW_PRIORITY_CORES] += cpus
                else:  # deallocated ones too (see the module docstring)
                    usage[quota.CORES] += cpus
                    usage[family] += cpus
        if self._static_nodes and location.lower() == self.scenario.location.lower():
            usage[quota.VIRTUAL_MACHINES] += len(self._static_nodes)
            usage[quota.CORES] += K3S_SERVER_VCPUS * len(self._static_nodes)
        return usage

    def _check_quota(self, group: ScaleSetSim, cpus: int) -> None:
        """Refuse (409 OperationNotAllowed) adding `cpus` vCPUs of the group's kind when a quota would go over."""
        self._quota_requests += 1
        if cpus <= 0:
            return
        location = group.spec.location
        usage = self._quota_usage(location)
        if group.spec.priority == "Spot":
            names = [quota.LOW_PRIORITY_CORES]
        else:  # the family is checked first, as ARM does
            names = [quota.vm_family(group.spec.vm_size), quota.CORES]
        for name in names:
            if name.lower() not in self._quota_limits:
                continue  # a quota the scenario leaves out is unlimited: UNLIMITED is only what the usages API shows
            limit = self._quota_limit(name)
            if usage[name] + cpus > limit:
                self._quota_refused += 1
                message = quota.quota_message(
                    name, subscription_id=self.subscription_id, location=location, limit=limit, usage=usage[name],
                    required=cpus,
                )
                raise ArmError(409, "OperationNotAllowed", message)

    def _note_quota_peaks(self) -> None:
        """After usage went up (instances created or started): remember the highest usage of each quota."""
        for location in self._locations():
            for name, used in self._quota_usage(location).items():
                self._quota_peaks[name] = max(self._quota_peaks.get(name, 0), used)

    def _quota_names(self) -> list[str]:
        """The quota names a usages answer lists: the fixed ones, then the families of the world's sizes and of the
        scenario's quotas (a quota naming a world family in other letters is that family)."""
        families = {quota.vm_family(g.spec.vm_size).lower(): quota.vm_family(g.spec.vm_size) for g in self._groups.values()}
        fixed = (quota.CORES, quota.LOW_PRIORITY_CORES, quota.VIRTUAL_MACHINES, quota.VIRTUAL_MACHINE_SCALE_SETS)
        for key, (name, _) in self._quota_limits.items():
            if key not in {f.lower() for f in fixed}:
                families.setdefault(key, name)
        return [*fixed, *sorted(families.values(), key=str.lower)]

    # ------------------------------------------------------------------ the usages API and the report

    def usages(self, subscription_id: str, location: str) -> list[dict[str, Any]]:
        """`GET .../locations/{location}/usages`: one Usage per quota name, as ARM lists them."""
        with self.lock:
            if subscription_id.lower() != self.subscription_id.lower():
                raise ArmError(404, "SubscriptionNotFound", f"The subscription '{subscription_id}' could not be found.")
            wanted = location.replace(" ", "").lower()
            if wanted not in self._locations():
                # ARM's wording for a location the resource type is not in; its status (404 here) is unverified.
                raise ArmError(
                    404, "LocationNotAvailableForResourceType",
                    f"The provided location '{location}' is not available for resource type "
                    f"'Microsoft.Compute/locations/usages'. List of available regions for the resource type is "
                    f"'{','.join(self._locations())}'.",
                )
            usage = self._quota_usage(wanted)
            by_lower = {name.lower(): used for name, used in usage.items()}
            return [
                {"unit": "Count", "currentValue": by_lower.get(name.lower(), 0), "limit": self._quota_limit(name),
                 "name": {"value": name, "localizedValue": quota.localized_name(name)}}
                for name in self._quota_names()
            ]

    def quota_report(self) -> dict[str, Any]:
        """The report's `quota`: limits as configured, the peak usage of each quota, capacity increases checked and
        refused for quota."""
        with self.lock:
            peaks = {name: self._quota_peaks.get(name, 0) for name in self._quota_names()}
            for name, used in self._quota_peaks.items():
                peaks.setdefault(name, used)
            return {
                "limits": dict(self.scenario.quotas),
                "peak_usage": peaks,
                "refused_requests": self._quota_refused,
                "requests": self._quota_requests,
            }
