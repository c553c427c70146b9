"""VmssCompute and FlexCompute over the ARM double: an instance a successful capacity increase left Failed comes back
with its instance view's error code, read for it alone; nothing more is read while no instance is Failed."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared.adapters.compute import VmssCompute, provisioning_error
from shared.adapters.flex_compute import FlexCompute
from shared.domain import NodeGroup
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory
from tests.shared.adapters import sandbox_world

# (provider, scale set, the ARM double's name for one VM GET)
BACKENDS: list[tuple[str, Callable[[Any], VmssCompute], str, str]] = [
    ("uniform", VmssCompute.from_settings, "pool-a", "GET virtualMachines"),
    ("flexible", FlexCompute.from_settings, "pool-flex", "GET virtualMachines (flex)"),
]


def _scenario(code: str) -> dict[str, Any]:
    doc = sandbox_world.scenario(allocation_failures=[{"scale_set": "pool-a", "code": code, "instances": 1},
                                                      {"scale_set": "pool-flex", "code": code, "instances": 1}])
    flex = {**doc["node_groups"][0], "name": "pool-flex", "orchestration": "Flexible", "computer_name_prefix": "flex",
            "mirror_pods": []}
    return {**doc, "node_groups": [*doc["node_groups"], flex]}


def _vm_gets(server: SandboxServer, name: str) -> int:
    return int(server.world.report()["api_calls"]["breakdown"]["arm"].get(name, 0))


@pytest.mark.parametrize(("backend", "make", "name", "vm_get"), BACKENDS, ids=[b[0] for b in BACKENDS])
@pytest.mark.parametrize("code", ["ZonalAllocationFailed", "AllocationFailed", "OverconstrainedAllocationRequest"])
def test_a_failed_instance_carries_its_code_and_costs_one_read(
    sandbox_factory: SandboxFactory, backend: str, make: Callable[[Any], VmssCompute], name: str, vm_get: str,
    code: str,
) -> None:
    server = sandbox_factory(_scenario(code), clock=ManualClock(SANDBOX_START))
    compute = make(sandbox_world.settings_for(server, ARM_OPERATION_WAIT="0s"))
    try:
        group = _group(compute, name)
        before = {i.instance_id for i in compute.list_instances(group)}
        assert _vm_gets(server, vm_get) == 0  # nothing Failed: the list alone
        grown = compute.begin_resize(group, group.capacity + 2)
        server.clock.advance(300)  # past provisioning: one new instance Failed, the other running
        listed = compute.list_instances(group)
        failed = [i for i in listed if i.failed]
        assert len(failed) == 1 and failed[0].instance_id not in before
        assert failed[0].error_code == code
        assert failed[0].error_message  # Azure's words, passed on
        assert failed[0].power_state not in ("running", "starting")  # it never got a host
        assert all(i.error_code == "" for i in listed if not i.failed)
        assert _vm_gets(server, vm_get) == 1  # the Failed instance's view, and nothing for the others
        # The operation that asked for it succeeded all the same: the asynchronous failure.
        assert compute.get_resize_operation(grown.token).status == "Succeeded"
    finally:
        compute.close()


def _group(compute: VmssCompute, name: str) -> NodeGroup:
    groups = compute.list_node_groups()
    found = next((g for g in groups if g.name == name), None)
    if found is None:  # FlexCompute discovers nothing itself: VmssCompute's discovery stamps Flexible sets
        found = compute.get_node_group(f"{sandbox_world.GROUPS_RG.lower()}/{name}")
    assert found is not None, [g.name for g in groups]
    return found


def _status(code: str, message: str = "") -> SimpleNamespace:
    return SimpleNamespace(code=code, message=message)


@pytest.mark.parametrize(("statuses", "expected"), [
    ([_status("ProvisioningState/failed/ZonalAllocationFailed", "no room"), _status("PowerState/deallocated")],
     ("ZonalAllocationFailed", "no room")),
    ([_status("provisioningstate/failed/SkuNotAvailable", "no spot")], ("SkuNotAvailable", "no spot")),
    ([_status("ProvisioningState/succeeded"), _status("PowerState/running")], ("", "")),
    ([], ("", "")),
])
def test_the_failure_is_read_from_the_vms_own_statuses(statuses: list[SimpleNamespace],
                                                         expected: tuple[str, str]) -> None:
    assert provisioning_error(SimpleNamespace(statuses=statuses)) == expected
    assert provisioning_error(None) == ("", "")
