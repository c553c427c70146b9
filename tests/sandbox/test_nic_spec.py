"""Declaring a scale set's NICs in a scenario (sandbox/model/nic_spec.py): what is taken, and each mistake named."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world.compute import nic_addresses
from tests.sandbox.helpers import scenario

TWO = [{"name": "nodes", "subnet": "10.224.0.0/16", "primary": True}, {"name": "storage", "subnet": "10.225.0.0/16"}]


def _load(group: dict[str, Any], *more: dict[str, Any]) -> Any:
    """The helpers' one-pool scenario with `group` merged into its pool, and a further pool per `more`."""
    doc = scenario()
    base = dict(doc["node_groups"][0])
    doc["node_groups"][0].update(group)
    doc["node_groups"] += [{**base, "name": f"other-{i}", "computer_name_prefix": f"o{i}", **extra}
                           for i, extra in enumerate(more)]
    return load_scenario(doc)


def test_a_declared_secondary_nic_gets_an_address_of_its_own_in_its_subnet() -> None:
    (group,) = _load({"nics": TWO, "node_ip": "storage"}).node_groups
    assert group.node_ip == "storage" and [n.primary for n in group.nics] == [True, False]
    addresses = [ip for _, ip in nic_addresses(group, 7)]
    assert addresses == ["10.224.0.11", "10.225.0.11"]
    assert ipaddress.ip_address(addresses[1]) in ipaddress.ip_network("10.225.0.0/16")


def test_without_nics_a_group_has_the_one_primary_nic_it_always_had() -> None:
    (group,) = _load({}).node_groups
    assert group.nics == () and group.node_ip == group.name
    ((nic, ip),) = nic_addresses(group, 7)
    assert (nic.name, nic.primary, ip) == (group.name, True, "10.224.0.11")


@pytest.mark.parametrize("group,path,problem", [
    ({"nics": []}, "nics", "at least one NIC"),
    ({"nics": [{"name": "a", "subnet": "10.224.0.0/16"}, {"name": "b", "subnet": "10.225.0.0/16"}]}, "nics",
     "exactly one NIC must be primary, got 0"),
    ({"nics": [{**TWO[0]}, {**TWO[1], "primary": True}]}, "nics", "exactly one NIC must be primary, got 2"),
    ({"nics": [TWO[0], {**TWO[1], "name": "NODES"}]}, "nics[1].name", "named twice"),
    ({"nics": [TWO[0], {**TWO[1], "subnet": "10.224.0.0/16"}]}, "nics[1].subnet", "a subnet of its own"),
    ({"nics": [TWO[0], {**TWO[1], "subnet": "10.225.0.0/24"}]}, "nics[1].subnet", "/16 or wider"),
    ({"nics": [TWO[0], {**TWO[1], "subnet": "10.225.0.1/16"}]}, "nics[1].subnet", "no host bits set"),
    ({"nics": [TWO[0], {**TWO[1], "subnet": "fd00::/8"}]}, "nics[1].subnet", "IPv4 CIDR"),
    ({"nics": [TWO[0], {**TWO[1], "subnet": "10.244.0.0/16"}]}, "nics[1].subnet", "pod IPs"),
    ({"nics": [TWO[0], {**TWO[1], "primary": "no"}]}, "nics[1].primary", "true or false"),
    ({"nics": [TWO[0], {"name": "-bad", "subnet": "10.225.0.0/16"}]}, "nics[1].name", "NIC name"),
    ({"nics": [TWO[0], {"name": "x"}]}, "nics[1].subnet", "required"),
    ({"nics": TWO, "node_ip": "backend"}, "node_ip", "'backend' names no NIC of the scale set (its NICs: nodes, storage)"),
    ({"node_ip": "storage"}, "node_ip", "names no NIC"),
])
def test_each_mistake_is_named_with_its_path(group: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        _load(group)
    assert caught.value.path.startswith(f"$.node_groups[0].{path}") and problem in caught.value.problem


def test_subnets_of_two_scale_sets_are_the_same_or_disjoint() -> None:
    shared = _load({"nics": TWO}, {"nics": [{"name": "n", "subnet": "10.225.0.0/16"}]})
    assert len(shared.node_groups) == 2
    with pytest.raises(ScenarioError) as caught:
        _load({"nics": TWO}, {"nics": [{"name": "n", "subnet": "10.0.0.0/8"}]})
    assert caught.value.path == "$.node_groups[1].nics[0].subnet" and "overlaps" in caught.value.problem


def test_an_aks_agent_pool_keeps_the_one_nic_aks_gives_it() -> None:
    doc = scenario(node_groups=[{"agent_pool": "batch", "vm_size": "Standard_D4s_v5", "min": 0, "max": 3,
                                 "allocatable": {"cpu": "4", "memory": "16Gi"}, "nics": TWO}])
    with pytest.raises(ScenarioError) as caught:
        load_scenario(doc)
    assert "nics" in caught.value.path and "one NIC AKS gives them" in caught.value.problem
