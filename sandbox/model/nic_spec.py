"""Scenario fields for a scale set's network interfaces: what the scenario file says, checked and frozen.

A node group may declare the NICs each of its VMs has (the scale set model's `networkInterfaceConfigurations`):

- `nics`: `[{"name", "subnet", "primary"?}]`, one entry per NIC, in the model's order; exactly one is `primary`
  (a single NIC is primary without saying so). `subnet` is an IPv4 CIDR of at least a /16: each VM takes one
  address in every NIC's subnet, derived from its world-wide index as the default subnet's are, so two NICs
  of one VM (or of two VMs) never share an address. Left out: one primary NIC named after the scale set (as
  AKS names it) in `10.224.0.0/16`.
- `node_ip`: the name of the NIC whose address kubelet registers as the Node's InternalIP (`--node-ip`),
  default the primary's. A kubeadm node told to use its secondary NIC is `"node_ip": "<that NIC's name>"`.

Subnets of different NICs must be the same or disjoint across every scale set, and keep out of the virtual
node's subnet and the pod CIDR. This module imports nothing of `sandbox.model.scenario`, which imports it: problems
are raised as `FieldError` (JSON path and problem), which the scenario parser reports as its own.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sandbox.model.spec_fields import FieldError, listed, obj, typename

FIELDS = ("nics", "node_ip")

DEFAULT_SUBNET = ipaddress.IPv4Network("10.224.0.0/16")  # AKS's default node subnet
# Address ranges the world already uses for something else: the virtual node's subnet (sandbox.model.aci) and pod IPs.
_RESERVED = (ipaddress.IPv4Network("10.241.0.0/16"), ipaddress.IPv4Network("10.244.0.0/16"))
_NIC_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,78}[A-Za-z0-9_]$|^[A-Za-z0-9]$")  # a Network RP resource name


@dataclass(frozen=True, slots=True)
class NicSpec:
    """One NIC configuration of a scale set: every VM gets a NIC of this name with one address in `subnet`."""

    name: str
    subnet: ipaddress.IPv4Network = DEFAULT_SUBNET
    primary: bool = True


def default_nics(scale_set: str) -> tuple[NicSpec, ...]:
    return (NicSpec(scale_set),)


def group_nics(nics: tuple[NicSpec, ...], scale_set: str) -> tuple[NicSpec, ...]:
    """A node group's NICs as declared, or the default one when it declares none (a spec built in code)."""
    return nics or default_nics(scale_set)


def subnet_name(subnet: ipaddress.IPv4Network) -> str:
    """The name of the cluster VNet's subnet holding these addresses: `nodes` for the default, else derived."""
    return "nodes" if subnet == DEFAULT_SUBNET else "nodes-" + str(subnet).replace(".", "-").replace("/", "-")


def address(subnet: ipaddress.IPv4Network, ip_index: int) -> str:
    """The address of the VM with this world-wide index in `subnet`: 250 per /24 from `.4` (Azure keeps the
    first four), so the default subnet's are `10.224.<index // 250>.<index % 250 + 4>`."""
    return str(subnet.network_address + (ip_index // 250) * 256 + ip_index % 250 + 4)


def parse_nics(group: Mapping[str, Any], path: str, *, scale_set: str, agent_pool: bool) -> tuple[tuple[NicSpec, ...], str]:
    """The group's NICs as declared (() when it declares none: the default one, `group_nics`) and the name of
    the one its nodes register with."""
    if agent_pool and "nics" in group:
        raise FieldError(f"{path}.nics", "an AKS agent pool's VMs have the one NIC AKS gives them")
    if "nics" not in group:
        nics: tuple[NicSpec, ...] = ()
    else:
        items = listed(group["nics"], f"{path}.nics")
        if not items:
            raise FieldError(f"{path}.nics", "must name at least one NIC")
        nics = tuple(_nic(item, f"{path}.nics[{i}]", alone=len(items) == 1) for i, item in enumerate(items))
        _check_group(nics, f"{path}.nics")
    named = group_nics(nics, scale_set)
    node_ip = group.get("node_ip", next(n.name for n in named if n.primary))
    if not isinstance(node_ip, str) or node_ip not in {n.name for n in named}:
        shown = repr(node_ip) if isinstance(node_ip, str) else typename(node_ip)
        raise FieldError(f"{path}.node_ip", f"{shown} names no NIC of the scale set "
                                            f"(its NICs: {', '.join(n.name for n in named)})")
    return nics, node_ip


def check_subnets(groups: Sequence[tuple[str, tuple[NicSpec, ...]]]) -> tuple[str, str] | None:
    """(path, problem) when two NICs' subnets overlap without being the same subnet; None when they do not."""
    seen: list[tuple[str, ipaddress.IPv4Network]] = []
    for path, nics in groups:
        for i, nic in enumerate(nics):
            for where, other in seen:
                if other != nic.subnet and other.overlaps(nic.subnet):
                    return (f"{path}[{i}].subnet", f"{nic.subnet} overlaps {other} ({where}) without being the same "
                                                   "subnet: addresses would collide")
            seen.append((f"{path}[{i}]", nic.subnet))
    return None


def _nic(value: Any, path: str, *, alone: bool) -> NicSpec:
    item = obj(value, path, {"name", "subnet", "primary"}, {"name", "subnet"})
    name = item["name"]
    if not isinstance(name, str) or not _NIC_NAME.match(name):
        raise FieldError(f"{path}.name", f"must be a NIC name (letters, digits, '.', '-', '_', up to 80), "
                                         f"got {name!r}" if isinstance(name, str) else f"got {typename(name)}")
    primary = item.get("primary", alone)
    if not isinstance(primary, bool):
        raise FieldError(f"{path}.primary", f"must be true or false, got {typename(primary)}")
    return NicSpec(name, _subnet(item["subnet"], f"{path}.subnet"), primary)


def _subnet(value: Any, path: str) -> ipaddress.IPv4Network:
    if not isinstance(value, str):
        raise FieldError(path, f"must be an IPv4 CIDR such as '10.225.0.0/16', got {typename(value)}")
    try:
        subnet = ipaddress.IPv4Network(value)
    except ValueError as exc:
        raise FieldError(path, f"{value!r} is not an IPv4 CIDR with no host bits set: {exc}") from None
    if subnet.prefixlen > 16:
        raise FieldError(path, f"must be a /16 or wider (room for every VM of the world), got /{subnet.prefixlen}")
    for reserved in _RESERVED:
        if subnet.overlaps(reserved):
            raise FieldError(path, f"{subnet} overlaps {reserved}, which the sandbox uses for virtual node or pod IPs")
    return subnet


def _check_group(nics: tuple[NicSpec, ...], path: str) -> None:
    primaries = [i for i, n in enumerate(nics) if n.primary]
    if len(primaries) != 1:
        raise FieldError(path, f"exactly one NIC must be primary, got {len(primaries)}")
    for i, nic in enumerate(nics):
        earlier = nics[:i]
        if any(n.name.lower() == nic.name.lower() for n in earlier):
            raise FieldError(f"{path}[{i}].name", f"{nic.name!r} is named twice (NIC names are case-insensitive)")
        if any(n.subnet == nic.subnet for n in earlier):
            raise FieldError(f"{path}[{i}].subnet", f"another NIC of the scale set is in {nic.subnet}: give each "
                                                    "NIC a subnet of its own")
