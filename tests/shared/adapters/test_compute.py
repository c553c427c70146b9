"""VmssCompute: discovery rules, retry and token handling without a server, then the real wire against the sandbox."""

from __future__ import annotations

import base64
import inspect
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from azure.core.pipeline import PipelineResponse
from azure.core.rest import HttpRequest
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute.models import ResourceSku, VirtualMachineScaleSet, VirtualMachineScaleSetVM

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared import ports
from shared.adapters.compute import ThrottleAwareRetryPolicy, VmssCompute, _compact_token, _vm_size
from shared.adapters.credentials import StaticTokenCredential
from shared.domain import NodeGroup, VmSizeCapacity
from shared.ports import CHANGED_SINCE_READ, ComputeError, Operation
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, compute_client
from tests.shared.adapters import sandbox_world

CLUSTER = "demo"
OURS = {"cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": CLUSTER, "min": "1", "max": "10"}


def _vmss(name: str = "pool1", tags: dict[str, str] | None = None, **properties: Any) -> VirtualMachineScaleSet:
    return VirtualMachineScaleSet(
        {
            "id": f"/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/{name}",
            "name": name,
            "location": "westeurope",
            "tags": OURS if tags is None else tags,
            "sku": {"name": "Standard_D4s_v5", "tier": "Standard", "capacity": 3},
            "zones": ["1", "2"],
            "properties": {"orchestrationMode": "Uniform", **properties},
        }
    )


@pytest.fixture
def offline() -> VmssCompute:
    """A VmssCompute whose client is never asked to send anything."""
    client = ComputeManagementClient(StaticTokenCredential(), "sub", base_url="https://127.0.0.1:1")
    return VmssCompute(client, cluster_name=CLUSTER, resource_groups=["RG"], operation_wait=0)


DISCOVERY_CASES: list[tuple[str, dict[str, str], dict[str, Any], tuple[int, int] | None, str]] = [
    ("tagged for this cluster", OURS, {}, (1, 10), ""),
    ("tag names compare case-insensitively", {"Cluster-Autoscaler-Enabled": "True", "CLUSTER-AUTOSCALER-NAME": CLUSTER, "Min": "0", "MAX": "5"}, {}, (0, 5), ""),
    ("min equal to max", {**OURS, "min": "4", "max": "4"}, {}, (4, 4), ""),
    ("another cluster's", {**OURS, "cluster-autoscaler-name": "other"}, {}, None, ""),
    ("cluster name compares exactly", {**OURS, "cluster-autoscaler-name": "Demo"}, {}, None, ""),
    ("autoscaling disabled", {**OURS, "cluster-autoscaler-enabled": "false"}, {}, None, ""),
    ("untagged", {}, {}, None, ""),
    ("no min tag", {k: v for k, v in OURS.items() if k != "min"}, {}, None, "tag 'min' is missing"),
    ("no max tag", {k: v for k, v in OURS.items() if k != "max"}, {}, None, "tag 'max' is missing"),
    ("min not an integer", {**OURS, "min": "one"}, {}, None, "tag 'min' is 'one', not an integer"),
    ("max not an integer", {**OURS, "max": "1.5"}, {}, None, "tag 'max' is '1.5', not an integer"),
    ("min above max", {**OURS, "min": "5", "max": "2"}, {}, None, "min=5 max=2"),
    ("negative min", {**OURS, "min": "-1"}, {}, None, "min=-1"),
]


def test_a_flexible_scale_set_is_discovered_as_a_group_of_the_flexible_kind(offline: VmssCompute) -> None:
    group = offline._as_group("RG", _vmss(tags=OURS, orchestrationMode="Flexible"))
    uniform = offline._as_group("RG", _vmss(tags=OURS))
    assert group is not None and uniform is not None
    assert (group.provider, uniform.provider) == ("vmss-flexible", "vmss-uniform")


@pytest.mark.parametrize(
    ("tags", "properties", "limits", "warning"),
    [c[1:] for c in DISCOVERY_CASES],
    ids=[c[0] for c in DISCOVERY_CASES],
)
def test_discovery_rules(
    offline: VmssCompute,
    caplog: pytest.LogCaptureFixture,
    tags: dict[str, str],
    properties: dict[str, Any],
    limits: tuple[int, int] | None,
    warning: str,
) -> None:
    with caplog.at_level(logging.WARNING, logger="shared.adapters.compute"):
        group = offline._as_group("RG", _vmss(tags=tags, **properties))
    if limits is None:
        assert group is None
    else:
        assert group == NodeGroup(
            resource_group="RG",
            name="pool1",
            min_size=limits[0],
            max_size=limits[1],
            capacity=3,
            vm_size="Standard_D4s_v5",
            tags=tags,
            zones=("1", "2"),
            location="westeurope",
        )
        assert group.id == "rg/pool1"
    if warning:
        assert any("RG/pool1" in r.getMessage() and warning in r.getMessage() for r in caplog.records), caplog.text
    else:
        assert not caplog.records


def _response(status: int, headers: dict[str, str] | None = None, method: str = "GET") -> PipelineResponse[Any, Any]:
    request = HttpRequest(method, "https://127.0.0.1/x")
    return PipelineResponse(request, SimpleNamespace(status_code=status, headers=headers or {}, request=request), None)  # type: ignore[arg-type]


RETRY_CASES = [
    ("429 is never waited out", 429, {"Retry-After": "1"}, "GET", False),
    ("429 without Retry-After either", 429, {}, "GET", False),
    ("a long Retry-After on a 503 is the caller's business", 503, {"Retry-After": "30"}, "GET", False),
    ("a short Retry-After on a 503 is retried", 503, {"Retry-After": "1"}, "GET", True),
    ("a 500 on a GET is retried", 500, {}, "GET", True),
    ("a 500 on a PATCH is retried (setting a capacity is idempotent)", 500, {}, "PATCH", True),
    ("a 400 is not retried", 400, {}, "GET", False),
    ("a 202 with Retry-After is a success, not a retry", 202, {"Retry-After": "30"}, "GET", False),
]


@pytest.mark.parametrize(
    ("status", "headers", "method", "retried"), [c[1:] for c in RETRY_CASES], ids=[c[0] for c in RETRY_CASES]
)
def test_retry_policy(status: int, headers: dict[str, str], method: str, retried: bool) -> None:
    policy = ThrottleAwareRetryPolicy(retry_total=2)
    settings = policy.configure_retries({})
    assert bool(policy.is_retry(settings, _response(status, headers, method))) is retried


def _token(headers: dict[str, str], content: bytes = b'{"big": "model"}', version: int = 1) -> str:
    state = {
        "request": {"method": "PATCH", "url": "https://127.0.0.1/vmss", "headers": {}},
        "response": {"status_code": 200, "headers": headers, "content": base64.b64encode(content).decode()},
        "context": {"deserialized_data": {"big": "model"}},
    }
    return base64.b64encode(json.dumps({"version": version, "data": state}).encode()).decode()


def _decoded(token: str) -> dict[str, Any]:
    return json.loads(base64.b64decode(token))["data"]


def test_tokens_drop_the_body_when_headers_suffice_to_poll() -> None:
    token = _token({"Azure-AsyncOperation": "https://127.0.0.1/op/1", "Retry-After": "1"})
    compact = _decoded(_compact_token(token))
    assert compact["response"]["content"] == ""
    assert compact["context"]["deserialized_data"] is None
    assert compact["response"]["headers"]["Azure-AsyncOperation"] == "https://127.0.0.1/op/1"
    assert compact["request"]["url"] == "https://127.0.0.1/vmss"


@pytest.mark.parametrize(
    "token",
    [
        _token({}),  # polled from the body's provisioningState: the body must stay
        _token({"Location": "https://127.0.0.1/op"}, version=2),  # a format we do not know
        "not base64 at all!",
        base64.b64encode(b"[1, 2]").decode(),
    ],
    ids=["body polling", "unknown version", "garbage", "not an object"],
)
def test_tokens_we_cannot_compact_are_left_alone(token: str) -> None:
    assert _compact_token(token) == token


# --- against the sandbox's ARM over HTTPS ---------------------------------------------------


@pytest.fixture
def world(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(sandbox_world.scenario(), clock=ManualClock(SANDBOX_START))


def _compute(server: SandboxServer, wait: str = "0s") -> VmssCompute:
    return VmssCompute.from_settings(sandbox_world.settings_for(server, ARM_OPERATION_WAIT=wait))


@pytest.fixture
def compute(world: SandboxServer) -> Iterator[VmssCompute]:
    adapter = _compute(world)
    yield adapter
    adapter.close()


def _group(compute: VmssCompute, name: str) -> NodeGroup:
    return next(g for g in compute.list_node_groups() if g.name == name)


def test_discovery_keeps_only_scale_sets_tagged_for_this_cluster(
    compute: VmssCompute, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="shared.adapters.compute"):
        groups = {g.id: g for g in compute.list_node_groups()}
    assert sorted(groups) == ["rg-it/pool-a", "rg-two/pool-b"]
    pool_a = groups["rg-it/pool-a"]
    assert (pool_a.min_size, pool_a.max_size, pool_a.capacity, pool_a.vm_size) == (1, 5, 2, "Standard_D4s_v5")
    assert pool_a.location == "westeurope"
    assert pool_a.instances == ()  # listing instances is high-cost: discovery does not
    assert [(i.instance_id, i.provisioning_state, i.computer_name) for i in compute.list_instances(pool_a)] == [
        ("0", "Succeeded", "pool-a000000"),
        ("1", "Succeeded", "pool-a000001"),
    ]
    pool_b = groups["rg-two/pool-b"]
    assert (pool_b.resource_group, pool_b.capacity, pool_b.zones) == ("RG-Two", 0, ("1", "2"))
    assert compute.list_instances(pool_b) == []
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == ["scale set rg-it/pool-bad skipped: tag 'min' is 'one', not an integer"]


def test_get_node_group(compute: VmssCompute) -> None:
    listed = _group(compute, "pool-a")
    assert compute.get_node_group("rg-it/pool-a") == listed
    assert compute.get_node_group("RG-IT/pool-a") == listed  # resource groups compare case-insensitively
    assert compute.get_node_group("rg-it/pool-gone") is None  # 404
    assert compute.get_node_group("rg-it/pool-manual") is None  # not tagged for us
    assert compute.get_node_group("rg-it/pool-bad") is None  # malformed tags
    assert compute.get_node_group("rg-elsewhere/pool-a") is None  # not a configured resource group


def test_resize_grows_capacity_and_finishes_via_the_continuation_token(world: SandboxServer, compute: VmssCompute) -> None:
    group = _group(compute, "pool-a")
    started = compute.begin_resize(group, 4)
    assert started.status == "InProgress" and started.token
    assert world.world.counters.arm["PATCH virtualMachineScaleSets"] == 1

    assert compute.get_resize_operation(started.token).status == "InProgress"
    world.clock.advance(300)  # boot takes 60 s in this world
    finished = compute.get_resize_operation(started.token)
    assert finished == Operation(token=started.token, status="Succeeded")
    grown = compute.get_node_group(group.id)
    assert grown is not None and grown.capacity == 4
    assert [i.instance_id for i in compute.list_instances(grown)] == ["0", "1", "2", "3"]


def test_a_resize_from_a_stale_read_is_refused_by_if_match_and_changes_nothing(
        world: SandboxServer, compute: VmssCompute) -> None:
    read = _group(compute, "pool-a")
    assert read.etag  # ARM's etag of the scale set, as read
    compute.begin_resize(read, 4)  # another writer's change: the etag moves on
    with pytest.raises(ComputeError) as caught:
        compute.begin_resize(read, 3)  # computed from the older read: would remove an instance
    assert caught.value.code == CHANGED_SINCE_READ and "412" in str(caught.value)
    fresh = compute.get_node_group(read.id)
    assert fresh is not None and fresh.capacity == 4 and fresh.etag != read.etag
    assert compute.begin_resize(fresh, 5).status in ("InProgress", "Succeeded")  # the fresh read's etag matches
    assert compute.get_node_group(read.id).capacity == 5  # type: ignore[union-attr]
    assert compute.begin_resize(replace(read, etag=""), 5).token  # no etag: no condition, as before


def test_resize_can_finish_within_the_wait(sandbox_factory: SandboxFactory) -> None:
    # 50x speed: a 60 s boot takes 1.2 s of wall time, within a 10 s wait.
    server = sandbox_factory(sandbox_world.scenario(), speed=50)
    compute = _compute(server, wait="10s")
    started = time.monotonic()
    operation = compute.begin_resize(_group(compute, "pool-a"), 3)
    assert operation.status == "Succeeded"
    assert time.monotonic() - started < 10


def test_delete_a_specific_instance(world: SandboxServer, compute: VmssCompute) -> None:
    group = _group(compute, "pool-a")
    started = compute.begin_delete_instances(group, ["1"])
    assert started.status == "InProgress"
    world.clock.advance(120)
    assert compute.get_delete_operation(started.token).status == "Succeeded"
    shrunk = compute.get_node_group(group.id)
    assert shrunk is not None and shrunk.capacity == 1
    assert [i.instance_id for i in compute.list_instances(shrunk)] == ["0"]
    assert compute.get_instance(shrunk, "1") is None
    assert compute.get_instance(shrunk, "0") is not None
    assert world.world.counters.instances_deleted["pool-a/1"] == 1


def test_an_allocation_failure_is_a_failed_operation(world: SandboxServer, compute: VmssCompute) -> None:
    world.world.fail_next_scale_up("pool-a", code="QuotaExceeded")
    started = compute.begin_resize(_group(compute, "pool-a"), 5)
    assert started.status == "InProgress"
    world.clock.advance(30)
    failed = compute.get_resize_operation(started.token)
    assert (failed.status, failed.error_code) == ("Failed", "QuotaExceeded")
    assert "quota" in failed.error_message
    assert failed.done


def test_a_throttled_call_raises_at_once_with_the_delay(world: SandboxServer, compute: VmssCompute) -> None:
    world.world.inject_fault(("arm", "PATCH", "pool-a"), status=429, retry_after=120)
    group = _group(compute, "pool-a")
    started = time.monotonic()
    with pytest.raises(ComputeError) as caught:
        compute.begin_resize(group, 3)
    assert time.monotonic() - started < 5  # not 120 s of sleeping
    assert (caught.value.code, caught.value.retry_after) == ("TooManyRequests", 120)
    assert world.world.counters.arm["PATCH virtualMachineScaleSets"] == 1  # and not retried


def test_the_token_bucket_surfaces_as_too_many_requests(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory(sandbox_world.scenario(arm_throttling=True), clock=ManualClock(SANDBOX_START))
    compute = _compute(server)
    group = replace(_group(compute, "pool-a"), etag="")  # unconditional: the same PATCH each time
    with pytest.raises(ComputeError) as caught:
        for _ in range(20):  # the scale set's update bucket holds 12
            compute.begin_resize(group, group.capacity)
    assert caught.value.code == "TooManyRequests"
    assert caught.value.retry_after is not None and caught.value.retry_after > 0
    assert server.world.counters.arm_throttled == 1


def test_a_throttled_status_check(world: SandboxServer, compute: VmssCompute) -> None:
    started = compute.begin_resize(_group(compute, "pool-a"), 3)
    world.world.inject_fault(("arm", "GET", "operations"), status=429, retry_after=30)
    with pytest.raises(ComputeError) as caught:
        compute.get_resize_operation(started.token)
    assert (caught.value.code, caught.value.retry_after) == ("TooManyRequests", 30)
    world.clock.advance(300)
    assert compute.get_resize_operation(started.token).status == "Succeeded"  # the token survived


def test_a_throttled_poll_after_an_accepted_change_still_returns_the_operation(world: SandboxServer) -> None:
    compute = _compute(world, wait="2s")
    world.world.inject_fault(("arm", "GET", "operations"), status=429, retry_after=30)
    started = time.monotonic()
    operation = compute.begin_resize(_group(compute, "pool-a"), 3)
    assert operation.status == "InProgress" and operation.token
    assert time.monotonic() - started < 5


def test_a_transient_server_error_is_retried(world: SandboxServer, compute: VmssCompute) -> None:
    world.world.inject_fault(("arm", "GET", "virtualMachineScaleSets"), status=500)
    assert len(compute.list_node_groups()) == 2


def test_a_lasting_server_error_is_a_compute_error_naming_the_call(world: SandboxServer, compute: VmssCompute) -> None:
    world.world.inject_fault(("arm", "GET", "virtualMachineScaleSets"), status=503, count=10, code="ServiceUnavailable")
    with pytest.raises(ComputeError, match="list scale sets in resource group rg-it") as caught:
        compute.list_node_groups()
    assert caught.value.code == "ServiceUnavailable"
    assert caught.value.__cause__ is not None


def test_a_rejected_change_is_a_compute_error_with_the_arm_code(world: SandboxServer, compute: VmssCompute) -> None:
    world.world.inject_fault(
        ("arm", "POST", "pool-a"), status=409, code="OperationNotAllowed", message="The scale set is being deleted."
    )
    with pytest.raises(ComputeError, match="delete instances 1 of scale set rg-it/pool-a") as caught:
        compute.begin_delete_instances(_group(compute, "pool-a"), ["1"])
    assert caught.value.code == "OperationNotAllowed"


def test_a_token_that_is_not_one(compute: VmssCompute) -> None:
    with pytest.raises(ComputeError) as caught:
        compute.get_resize_operation("not-a-token")
    assert caught.value.code == "InvalidContinuationToken"


def test_waiting_is_bounded_and_leaves_no_polling_thread_behind(world: SandboxServer) -> None:
    compute = _compute(world, wait="1s")  # the world's clock stands still: the operation never ends
    started = time.monotonic()
    operation = compute.begin_resize(_group(compute, "pool-a"), 3)
    elapsed = time.monotonic() - started
    assert operation.status == "InProgress"
    assert 1 <= elapsed < 3
    assert not [t for t in threading.enumerate() if t.name.startswith("LROPoller") and t.is_alive()]


def test_a_failing_status_check_is_a_compute_error_and_the_token_survives(world: SandboxServer, compute: VmssCompute) -> None:
    started = compute.begin_delete_instances(_group(compute, "pool-a"), ["0"])
    world.world.inject_fault(("arm", "GET", "operations"), status=503, count=3, code="ServiceUnavailable")
    with pytest.raises(ComputeError, match="check delete-instances operation: status check") as caught:
        compute.get_delete_operation(started.token)
    assert caught.value.code == "ServiceUnavailable"
    world.clock.advance(120)
    assert compute.get_delete_operation(started.token).status == "Succeeded"


def _port_methods(protocol: type) -> list[str]:
    return [name for name in vars(protocol) if not name.startswith("_") and callable(vars(protocol)[name])]


@pytest.mark.parametrize("method", _port_methods(ports.NodeGroupProvider))
def test_implements_the_node_group_provider_port(method: str) -> None:
    expected = inspect.signature(getattr(ports.NodeGroupProvider, method))
    actual = inspect.signature(getattr(VmssCompute, method))
    assert [(p.name, p.kind, p.default) for p in actual.parameters.values()] == [
        (p.name, p.kind, p.default) for p in expected.parameters.values()
    ]


# --- VM sizes from the resource SKUs API ---------------------------------------------------------

GIB = 1024**3
_VM = {"resourceType": "virtualMachines", "name": "Standard_D4s_v5", "locations": ["westeurope"]}


def _caps(**values: str) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in values.items()]


def _restriction(kind: str, where: str, reason: str = "NotAvailableForSubscription", zones: list[str] | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {"locations": [where]}
    if zones:
        info["zones"] = zones
    return {"type": kind, "values": [where], "restrictionInfo": info, "reasonCode": reason}


SKU_CASES: list[tuple[str, dict[str, Any], VmSizeCapacity | None]] = [
    ("vCPUs, MemoryGB (GiB) and GPUs", {**_VM, "capabilities": _caps(vCPUs="4", MemoryGB="16", GPUs="1", PremiumIO="True")},
     VmSizeCapacity("Standard_D4s_v5", 4, 16 * GIB, 1)),
    ("fractional memory", {**_VM, "capabilities": _caps(vCPUs="1", MemoryGB="0.75")},
     VmSizeCapacity("Standard_D4s_v5", 1, int(0.75 * GIB))),
    ("constrained cores: the guest sees vCPUsAvailable", {**_VM, "capabilities": _caps(vCPUs="4", vCPUsAvailable="2", MemoryGB="32")},
     VmSizeCapacity("Standard_D4s_v5", 2, 32 * GIB)),
    ("a share of a GPU is no whole GPU", {**_VM, "capabilities": _caps(vCPUs="6", MemoryGB="55", GPUs="0.1667")},
     VmSizeCapacity("Standard_D4s_v5", 6, 55 * GIB, 0)),
    ("capability names compare case-insensitively", {**_VM, "capabilities": _caps(vcpus="4", memorygb="16")},
     VmSizeCapacity("Standard_D4s_v5", 4, 16 * GIB)),
    ("restricted in the location", {**_VM, "capabilities": _caps(vCPUs="4", MemoryGB="16"),
                                    "restrictions": [_restriction("Location", "westeurope")]},
     VmSizeCapacity("Standard_D4s_v5", 4, 16 * GIB, restriction="NotAvailableForSubscription")),
    ("restricted in some zones only: still deployable", {**_VM, "capabilities": _caps(vCPUs="4", MemoryGB="16"),
                                                        "restrictions": [_restriction("Zone", "westeurope", zones=["1"])]},
     VmSizeCapacity("Standard_D4s_v5", 4, 16 * GIB)),
    ("restricted elsewhere", {**_VM, "capabilities": _caps(vCPUs="4", MemoryGB="16"),
                              "restrictions": [_restriction("Location", "northeurope", "QuotaId")]},
     VmSizeCapacity("Standard_D4s_v5", 4, 16 * GIB)),
    ("not a VM size", {**_VM, "resourceType": "disks", "name": "Premium_LRS", "capabilities": _caps(MaxSizeGiB="4")}, None),
    ("listed for another location", {**_VM, "locations": ["northeurope"], "capabilities": _caps(vCPUs="4", MemoryGB="16")}, None),
    ("no memory capability", {**_VM, "capabilities": _caps(vCPUs="4")}, None),
    ("a vCPU count that is not a number", {**_VM, "capabilities": _caps(vCPUs="many", MemoryGB="16")}, None),
    ("nor an infinite one", {**_VM, "capabilities": _caps(vCPUs="inf", MemoryGB="16")}, None),
]


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in SKU_CASES], ids=[c[0] for c in SKU_CASES])
def test_reading_a_resource_sku(body: dict[str, Any], expected: VmSizeCapacity | None) -> None:
    assert _vm_size(ResourceSku(body), "westeurope") == expected


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _sized_compute(server: SandboxServer, clock: FakeMonotonic) -> VmssCompute:
    # No retries, so one injected fault is one failed listing.
    return VmssCompute(
        compute_client(server, retry_total=0),
        cluster_name=sandbox_world.CLUSTER,
        resource_groups=[sandbox_world.GROUPS_RG],
        operation_wait=0,
        vm_sizes_ttl=3600,
        vm_sizes_retry=300,
        monotonic=clock,
    )


def _sku_calls(server: SandboxServer) -> int:
    return int(server.world.report()["api_calls"]["breakdown"]["arm"].get("LIST skus", 0))


def test_vm_sizes_are_the_locations_vm_skus_as_the_sandbox_describes_its_nodes(world: SandboxServer) -> None:
    compute = _sized_compute(world, FakeMonotonic())
    sizes = {s.name: s for s in compute.list_vm_sizes("WestEurope")}
    assert sorted(sizes) == ["Standard_D2s_v5", "Standard_D4s_v5"]  # the disk and availability-set SKUs are left out
    assert sizes["Standard_D4s_v5"].vcpus == 4
    assert sizes["Standard_D2s_v5"] == VmSizeCapacity("Standard_D2s_v5", 2, 6 * GIB, family="standardDSv5Family")
    assert compute.list_vm_sizes("japaneast") == []


def test_vm_sizes_are_cached_per_location_until_the_ttl(world: SandboxServer) -> None:
    clock = FakeMonotonic()
    compute = _sized_compute(world, clock)
    first = compute.list_vm_sizes("westeurope")
    assert compute.list_vm_sizes("westeurope") == first
    assert _sku_calls(world) == 1  # the second call asked no one
    compute.list_vm_sizes("northeurope")
    assert _sku_calls(world) == 2  # another location is another listing
    clock.now += 3599
    compute.list_vm_sizes("westeurope")
    assert _sku_calls(world) == 2
    clock.now += 1
    assert compute.list_vm_sizes("westeurope") == first
    assert _sku_calls(world) == 3


def test_a_failed_listing_falls_back_without_raising_and_is_not_retried_every_poll(
    world: SandboxServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeMonotonic()
    compute = _sized_compute(world, clock)
    world.world.inject_fault(("arm", "GET", "skus"), status=503, code="ServiceUnavailable")
    with caplog.at_level(logging.WARNING, logger="shared.adapters.compute"):
        assert compute.list_vm_sizes("westeurope") == []
    assert "HTTP 503 ServiceUnavailable" in caplog.text and "templates use the shipped table" in caplog.text
    clock.now += 299
    assert compute.list_vm_sizes("westeurope") == []
    assert _sku_calls(world) == 1
    clock.now += 1
    assert len(compute.list_vm_sizes("westeurope")) == 2  # ARM is back
    assert _sku_calls(world) == 2


def test_a_failed_refresh_keeps_the_stale_sizes_and_honours_a_long_retry_after(
    world: SandboxServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeMonotonic()
    compute = _sized_compute(world, clock)
    listed = compute.list_vm_sizes("westeurope")
    clock.now += 3600
    world.world.inject_fault(("arm", "GET", "skus"), status=429, retry_after=900)
    with caplog.at_level(logging.WARNING, logger="shared.adapters.compute"):
        assert compute.list_vm_sizes("westeurope") == listed
    assert "throttled by ARM" in caplog.text and "keeping the 2 sizes listed before" in caplog.text
    clock.now += 899  # the throttling's Retry-After, longer than the usual 300 s, is respected
    assert compute.list_vm_sizes("westeurope") == listed
    assert _sku_calls(world) == 2
    clock.now += 1
    assert compute.list_vm_sizes("westeurope") == listed
    assert _sku_calls(world) == 3


# --- Listed instances without an instance id ---------------------------------------------------------------------

_SET_ID = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/pool1"
# VirtualMachineScaleSetVMs_List as azure-rest-api-specs' MinimumSet example answers it: no instanceId, only the id.
_ONLY_ARM_ID = {"location": "westus", "id": f"{_SET_ID}/virtualMachines/0"}
_FULL = {"location": "westus", "id": f"{_SET_ID}/virtualMachines/7", "instanceId": "7", "name": "pool1_7",
         "properties": {"provisioningState": "Succeeded", "osProfile": {"computerName": "pool1000007"}}}
_NO_ID_AT_ALL = {"location": "westus", "name": "pool1_9", "properties": {"osProfile": {"computerName": "pool1000009"}}}


def _listing(offline: VmssCompute, entries: list[dict[str, Any]]) -> VmssCompute:
    vms = [VirtualMachineScaleSetVM(e) for e in entries]  # the SDK's model over the wire's JSON
    offline._client = SimpleNamespace(  # type: ignore[assignment]
        virtual_machine_scale_set_vms=SimpleNamespace(list=lambda rg, name, **kw: vms))
    return offline


@pytest.mark.parametrize("entries,ids,warned", [
    ([_ONLY_ARM_ID, _FULL], ["0", "7"], False),  # the id read from the ARM id's last segment
    ([_NO_ID_AT_ALL, _FULL], ["7"], True),  # neither: left out, with a warning naming it
    ([{**_NO_ID_AT_ALL, "id": f"{_SET_ID}/virtualMachines/"}], [], True),  # an id naming no instance
    ([{**_NO_ID_AT_ALL, "id": _SET_ID}], [], True),  # the scale set's own id
], ids=["only an ARM id", "no id at all", "an ARM id ending in a slash", "the scale set's id"])
def test_a_listed_instance_without_an_instance_id_is_read_from_its_arm_id_or_left_out(
    offline: VmssCompute, caplog: pytest.LogCaptureFixture, entries: list[dict[str, Any]], ids: list[str], warned: bool
) -> None:
    group = NodeGroup("rg", "pool1", 0, 10, 2, "Standard_D4s_v5")
    with caplog.at_level(logging.WARNING, logger="shared.adapters.compute"):
        listed = _listing(offline, entries).list_instances(group)
    assert [i.instance_id for i in listed] == ids and all(i.instance_id for i in listed)
    message = "rg/pool1: a listed VM has no instance id and no ARM id to read one from"
    assert (message in caplog.text) == warned
    if warned:
        assert "pool1_9" in caplog.text and "pool1000009" in caplog.text  # the operator can find the entry
