"""Hibernation through the providers, against the sandbox's ARM double: discovery reads whether a set may hibernate
(`additionalCapabilities.hibernationEnabled` on a Flexible set), `begin_deallocate_instances(hibernate=True)`
hibernates its members there, and a set that cannot hibernate refuses before anything changes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from sandbox.world.compute import InstanceSim
from shared.adapters.compute import VmssCompute
from shared.adapters.flex_compute import FlexCompute
from shared.domain import FLEXIBLE_SCALE_SET, NodeGroup
from shared.ports import ComputeError, NodeGroupProvider
from shared.settings import load_settings
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory

_D4 = {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}


def _scenario(**group: Any) -> dict[str, Any]:
    return {
        "name": "hibernation", "cluster_name": "hibernation", "arm_throttling": False, "boot_delay": "60s",
        "node_groups": [{"resource_group": "rg-h", "name": "farm", "vm_size": "Standard_D4s_v5",
                         "allocatable": _D4, "min": 0, "max": 6, "initial": 2, **group}],
    }


# name: (the group's scenario fields, whether discovery says it may hibernate)
SETS = {
    "flexible, hibernation-enabled": ({"orchestration": "Flexible", "hibernation_enabled": True}, True),
    "flexible, not enabled": ({"orchestration": "Flexible"}, False),
    "uniform": ({}, False),
}


@dataclass
class Side:
    server: SandboxServer
    clock: ManualClock
    provider: NodeGroupProvider
    group: NodeGroup
    may_hibernate: bool

    def instance(self, instance_id: str) -> InstanceSim:
        (scale_set,) = self.server.world._groups.values()  # noqa: SLF001 - the one group's scale set
        (found,) = [i for i in scale_set.instances.values() if instance_id in (i.vm_name, str(i.instance_id))]
        return found


@pytest.fixture(params=sorted(SETS))
def side(request: pytest.FixtureRequest, sandbox_factory: SandboxFactory) -> Iterator[Side]:
    fields, may_hibernate = SETS[request.param]
    clock = ManualClock(SANDBOX_START)
    server = sandbox_factory(_scenario(**fields), clock=clock)
    settings = load_settings({**server.env(), "ARM_OPERATION_WAIT": "0s"})
    lister = VmssCompute.from_settings(settings)  # one listing finds both modes
    try:
        (group,) = [g for g in lister.list_node_groups() if g.name == "farm"]
    finally:
        lister.close()
    provider: NodeGroupProvider = (FlexCompute if group.provider == FLEXIBLE_SCALE_SET else VmssCompute
                                   ).from_settings(settings)
    yield Side(server, clock, provider, group, may_hibernate)
    provider.close()


def test_discovery_reads_whether_the_set_may_hibernate(side: Side) -> None:
    assert side.group.hibernation_enabled == side.may_hibernate
    # get_node_group reads it the same way as the listing
    assert side.provider.get_node_group(side.group.id) == side.group


def test_hibernate_where_the_set_allows_it_and_a_refusal_changes_nothing(side: Side) -> None:
    first, second = sorted(i.instance_id for i in side.provider.list_instances(side.group))
    if not side.may_hibernate:
        with pytest.raises(ComputeError) as refused:
            side.provider.begin_deallocate_instances(side.group, [first], hibernate=True)
        assert refused.value.code == "InvalidParameter" and not refused.value.transient
        assert side.instance(first).power == "running" and not side.instance(first).hibernated
        return
    hibernating = side.provider.begin_deallocate_instances(side.group, [first], hibernate=True)
    side.clock.advance(120)
    assert side.provider.get_deallocate_operation(hibernating.token).status == "Succeeded"
    assert side.instance(first).power == "deallocated" and side.instance(first).hibernated
    # A plain deallocate, on the same set, does not hibernate (no hibernate query parameter sent).
    plain = side.provider.begin_deallocate_instances(side.group, [second])
    side.clock.advance(120)
    assert side.provider.get_deallocate_operation(plain.token).status == "Succeeded"
    assert side.instance(second).power == "deallocated" and not side.instance(second).hibernated
    # A start resumes the hibernated one.
    started = side.provider.begin_start_instances(side.group, [first])
    side.clock.advance(400)
    assert side.provider.get_start_operation(started.token).status == "Succeeded"
    assert side.instance(first).power == "running" and not side.instance(first).hibernated


def test_a_plain_deallocate_works_on_every_set(side: Side) -> None:
    first = min(i.instance_id for i in side.provider.list_instances(side.group))
    operation = side.provider.begin_deallocate_instances(side.group, [first])
    side.clock.advance(120)
    assert side.provider.get_deallocate_operation(operation.token).status == "Succeeded"
    assert side.instance(first).power == "deallocated" and not side.instance(first).hibernated
