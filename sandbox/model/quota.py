"""Compute quota as ARM words it: VM size families, vCPU counts, usage names and the quota refusal message.

Pure functions shared by the resource SKUs double (`sandbox.api.arm_api.sku_json`'s `family`), the usages double
(`sandbox.api.spot_api`) and the world's quota checks (`sandbox.world.quota`), so the three always agree on which
family a size belongs to. Facts: shared/facts/burst-and-spot.md, "Quota" and "Spot VMs in scale sets".

The family rule (`vm_family`): a size `Standard_<series><vCPUs><features>[_<accelerator>]_v<N>` belongs to
`standard<SERIES><FEATURES>v<N>Family`, series and feature letters upper-cased, the version as written:
Standard_D4s_v5 and Standard_D2s_v5 -> standardDSv5Family, Standard_D4ds_v5 -> standardDDSv5Family,
Standard_E4s_v5 -> standardESv5Family, Standard_F8s_v2 -> standardFSv2Family, Standard_NC6s_v3 ->
standardNCSv3Family. A size with an accelerator part puts it after the version (Standard_NC4as_T4_v3 ->
standardNCASv3_T4Family, a recollection of the real list); a size without a version drops it (Standard_D4s ->
standardDSFamily). Azure's real list has irregular names this rule does not reproduce (standardA0_A7Family,
standardNCADSA100v4Family): the sandbox's scenarios use none of them.
"""

from __future__ import annotations

import json
import math
import re
from urllib.parse import quote

from sandbox.model.resources import Amounts

# Usage names (`name.value`) with their `localizedValue`, as the usages API lists them.
CORES = "cores"
LOW_PRIORITY_CORES = "lowPriorityCores"
VIRTUAL_MACHINES = "virtualMachines"
VIRTUAL_MACHINE_SCALE_SETS = "virtualMachineScaleSets"
LOCALIZED = {
    CORES: "Total Regional vCPUs",
    LOW_PRIORITY_CORES: "Total Regional Low-priority vCPUs",
    VIRTUAL_MACHINES: "Virtual Machines",
    VIRTUAL_MACHINE_SCALE_SETS: "Virtual Machine Scale Sets",
}
# A quota the scenario leaves out is unlimited (never enforced); the usages API shows it with this limit.
UNLIMITED = 10000

_SIZE = re.compile(
    r"^Standard_(?P<series>[A-Za-z]+?)(?P<cpus>\d+)(?:-\d+)?(?P<features>[a-z]*)"
    r"(?:_(?P<accelerator>(?!v\d)[A-Za-z0-9]+))?(?:_(?P<version>v\d+))?$"
)


def vm_family(vm_size: str) -> str:
    """The quota family of a VM size (the resource SKU's `family`, the usage's `name.value`); see the module
    docstring for the rule. A name the rule cannot read falls back to `standardFamily`."""
    match = _SIZE.match(vm_size)
    if match is None:
        return "standardFamily"
    accelerator = f"_{match['accelerator'].upper()}" if match["accelerator"] else ""
    return f"standard{match['series'].upper()}{match['features'].upper()}{match['version'] or ''}{accelerator}Family"


def localized_name(name: str) -> str:
    """A usage's `localizedValue`: the fixed ones, or for a family `Standard DSv5 Family vCPUs`."""
    if name in LOCALIZED:
        return LOCALIZED[name]
    inner = name.removeprefix("standard").removesuffix("Family")
    return f"Standard {inner} Family vCPUs"


def vcpus(capacity: Amounts) -> int:
    """The vCPUs of one VM of a size: its node's CPU capacity in whole cores (the SKU's `vCPUs` capability)."""
    return math.ceil(capacity.cpu_milli / 1000)


def _what(name: str) -> str:
    """How the refusal names the quota: `standardDSv5Family Cores`, `LowPriorityCores`, `Total Regional Cores`."""
    if name == CORES:
        return "Total Regional Cores"
    if name == LOW_PRIORITY_CORES:
        return "LowPriorityCores"
    return f"{name} Cores"


def _request_link(subscription_id: str, location: str, name: str, target: int) -> str:
    """The portal link the refusal carries to ask for more quota. Its shape (a blade path with URL-encoded JSON
    parameters) is a recollection of real messages, unverified; clients match on the text before it."""
    parameters = {
        "SubscriptionId": subscription_id,
        "Command": "openQuotaApprovalBlade",
        "QuotaItems": [{"SubscriptionId": subscription_id, "ProviderId": "Microsoft.Compute", "ResourceName": name,
                        "LocationId": location, "TargetValue": target, "Operation": "Create"}],
    }
    encoded = quote(json.dumps(parameters, separators=(",", ":")), safe="")
    return f"https://aka.ms/ProdportalCRP/#blade/Microsoft_Azure_Capacity/UsageAndQuota.ReactView/Parameters/{encoded}"


def quota_message(name: str, *, subscription_id: str, location: str, limit: int, usage: int, required: int) -> str:
    """ARM's refusal (code OperationNotAllowed) of a request that would take `name` over its limit. The first
    sentence and the details are the wording Microsoft's karpenter-provider-azure fakes carry
    (pkg/fake/aksmachinesapi.go) and match on ("Family Cores quota", "LowPriorityCores quota")."""
    target = usage + required
    return (
        f"Operation could not be completed as it results in exceeding approved {_what(name)} quota. "
        f"Additional details - Deployment Model: Resource Manager, Location: {location}, Current Limit: {limit}, "
        f"Current Usage: {usage}, Additional Required: {required}, (Minimum) New Limit Required: {target}. "
        f"Submit a request for Quota increase at {_request_link(subscription_id, location, name, target)} "
        "by specifying parameters listed in the 'Details' section for deployment to succeed. Please read more about "
        "quota limits at https://docs.microsoft.com/en-us/azure/azure-supportability/per-vm-quota-requests"
    )
