"""The ARM double driven through azure-mgmt-compute, unchanged (LROs, paging, errors, throttling)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError
from azure.mgmt.compute.models import (
    Sku,
    VirtualMachineScaleSetUpdate,
    VirtualMachineScaleSetVMInstanceIDs,
    VirtualMachineScaleSetVMInstanceRequiredIDs,
)

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from sandbox.world.identity import ARM_AUDIENCE, KEY_VAULT_AUDIENCE
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, compute_client
from tests.sandbox.helpers import POOL, RG, scenario

FAST = 600.0  # sim seconds per wall second: a 60 s boot takes 0.1 s


def with_unmanaged(**overrides: Any) -> dict[str, Any]:
    doc = scenario(**overrides)
    doc["node_groups"][0]["zones"] = ["1", "2", "3"]
    doc["node_groups"].append({"resource_group": RG, "name": "system", "vm_size": "Standard_D2s_v5",
                               "allocatable": {"cpu": "2", "memory": "8Gi"}, "initial": 2, "autoscaled": False})
    return doc


def arm_auth(server: SandboxServer) -> dict[str, str]:
    """An Authorization header with a fresh token for ARM from the server's identity."""
    return {"Authorization": f"Bearer {server.world.identity.issue(ARM_AUDIENCE).token}"}


def grow(capacity: int) -> VirtualMachineScaleSetUpdate:
    return VirtualMachineScaleSetUpdate(sku=Sku(name="Standard_D4s_v5", tier="Standard", capacity=capacity))


@pytest.fixture
def fast(sandbox_factory: SandboxFactory) -> SandboxServer:
    # A long duration: at this speed the default 2 h would freeze the world after 12 wall seconds.
    return sandbox_factory(with_unmanaged(duration="48h"), speed=FAST)


@pytest.fixture
def still(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(with_unmanaged(arm_throttling=True), clock=ManualClock(SANDBOX_START))


def test_list_and_get_scale_sets(still: SandboxServer) -> None:
    compute = compute_client(still)
    listed = {s.name: s for s in compute.virtual_machine_scale_sets.list(RG)}
    assert sorted(listed) == [POOL, "system"]
    pool = compute.virtual_machine_scale_sets.get(RG, POOL)
    assert pool.id == (f"/subscriptions/{still.subscription_id}/resourceGroups/{RG}"
                       f"/providers/Microsoft.Compute/virtualMachineScaleSets/{POOL}")
    assert (pool.sku.name, pool.sku.tier, pool.sku.capacity) == ("Standard_D4s_v5", "Standard", 1)
    assert pool.orchestration_mode == "Uniform" and pool.provisioning_state == "Succeeded"
    assert pool.zones == ["1", "2", "3"] and pool.location == "westeurope" and pool.unique_id
    assert pool.virtual_machine_profile.os_profile.computer_name_prefix == "pool-a"
    assert pool.tags["cluster-autoscaler-enabled"] == "true" and pool.tags["min"] == "0" and pool.tags["max"] == "10"
    assert "cluster-autoscaler-enabled" not in (listed["system"].tags or {})


def test_lists_page_with_next_links(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory(with_unmanaged(arm_page_size=1), clock=ManualClock(SANDBOX_START))
    compute = compute_client(server)
    assert [s.name for s in compute.virtual_machine_scale_sets.list(RG)] == [POOL, "system"]
    assert [v.instance_id for v in compute.virtual_machine_scale_set_vms.list(RG, "system")] == ["0", "1"]
    assert server.world.report()["api_calls"]["breakdown"]["arm"]["LIST virtualMachineScaleSets"] == 2


def test_scale_set_vms_look_like_uniform_instances(still: SandboxServer) -> None:
    (vm,) = compute_client(still).virtual_machine_scale_set_vms.list(RG, POOL)
    assert (vm.instance_id, vm.name, vm.os_profile.computer_name) == ("0", "pool-a_0", "pool-a000000")
    assert vm.provisioning_state == "Succeeded" and vm.latest_model_applied is True
    assert vm.id.endswith(f"/virtualMachineScaleSets/{POOL}/virtualMachines/0") and vm.zones == ["1"]


def test_growing_through_begin_update(fast: SandboxServer) -> None:
    compute = compute_client(fast)
    result = compute.virtual_machine_scale_sets.begin_update(RG, POOL, grow(3)).result()
    assert result.sku.capacity == 3 and result.provisioning_state == "Succeeded"
    vms = list(compute.virtual_machine_scale_set_vms.list(RG, POOL))
    assert [(v.instance_id, v.provisioning_state) for v in vms] == [("0", "Succeeded"), ("1", "Succeeded"), ("2", "Succeeded")]
    assert [v.zones for v in vms] == [["1"], ["2"], ["3"]]
    breakdown = fast.world.report()["api_calls"]["breakdown"]["arm"]
    assert breakdown["PATCH virtualMachineScaleSets"] == 1 and breakdown["GET operations"] >= 1


def test_an_update_can_be_resumed_from_its_continuation_token(fast: SandboxServer) -> None:
    compute = compute_client(fast)
    token = compute.virtual_machine_scale_sets.begin_update(RG, POOL, grow(2)).continuation_token()
    resumed = compute.virtual_machine_scale_sets.begin_update(RG, POOL, grow(2), continuation_token=token)
    assert resumed.result().sku.capacity == 2


def test_deleting_specific_instances(fast: SandboxServer) -> None:
    compute = compute_client(fast)
    compute.virtual_machine_scale_sets.begin_update(RG, POOL, grow(3)).result()
    poller = compute.virtual_machine_scale_sets.begin_delete_instances(
        RG, POOL, VirtualMachineScaleSetVMInstanceRequiredIDs(instance_ids=["1"])
    )
    assert poller.result() is None
    assert [v.instance_id for v in compute.virtual_machine_scale_set_vms.list(RG, POOL)] == ["0", "2"]
    assert compute.virtual_machine_scale_sets.get(RG, POOL).sku.capacity == 2
    assert fast.world.report()["api_calls"]["breakdown"]["arm"]["instances_deleted"] == {"pool-a/1": 1}


def test_deleting_an_unknown_instance_is_a_bad_request(still: SandboxServer) -> None:
    with pytest.raises(HttpResponseError) as caught:
        compute_client(still).virtual_machine_scale_sets.begin_delete_instances(
            RG, POOL, VirtualMachineScaleSetVMInstanceRequiredIDs(instance_ids=["42"])
        )
    assert caught.value.status_code == 400 and caught.value.error.code == "InvalidParameter"


def power_state(compute: Any, instance_id: str) -> tuple[str, list[str]]:
    vm = compute.virtual_machine_scale_set_vms.get(RG, POOL, instance_id, expand="instanceView")
    return vm.provisioning_state, [s.code for s in vm.instance_view.statuses]


def ids(*instance_ids: str) -> VirtualMachineScaleSetVMInstanceIDs:
    return VirtualMachineScaleSetVMInstanceIDs(instance_ids=list(instance_ids))


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_deallocating_and_starting_specific_instances(fast: SandboxServer) -> None:
    compute = compute_client(fast)
    compute.virtual_machine_scale_sets.begin_update(RG, POOL, grow(2)).result()
    wait_for(lambda: fast.world.state()["groups"][f"{RG}/{POOL}"]["ready"] == 2)  # its node registered
    assert compute.virtual_machine_scale_sets.begin_deallocate(RG, POOL, ids("1")).result() is None
    assert compute.virtual_machine_scale_sets.get(RG, POOL).sku.capacity == 2  # still in the scale set
    assert power_state(compute, "1") == ("Succeeded", ["ProvisioningState/succeeded", "PowerState/deallocated"])
    assert power_state(compute, "0") == ("Succeeded", ["ProvisioningState/succeeded", "PowerState/running"])
    listed = list(compute.virtual_machine_scale_set_vms.list(RG, POOL, expand="instanceView"))
    assert [v.instance_view.statuses[1].display_status for v in listed] == ["VM running", "VM deallocated"]
    assert compute.virtual_machine_scale_set_vms.get(RG, POOL, "1").instance_view is None  # only when expanded
    node = fast.world.k8s_get("nodes", "", "pool-a000001")
    assert "node.cloudprovider.kubernetes.io/shutdown" in [t["key"] for t in node["spec"]["taints"]]

    assert compute.virtual_machine_scale_sets.begin_start(RG, POOL, ids("1")).result() is None
    assert power_state(compute, "1") == ("Succeeded", ["ProvisioningState/succeeded", "PowerState/running"])
    wait_for(lambda: fast.world.state()["groups"][f"{RG}/{POOL}"]["ready"] == 2)
    assert fast.world.state()["groups"][f"{RG}/{POOL}"]["deallocated"] == 0
    arm = fast.world.report()["api_calls"]["breakdown"]["arm"]
    assert (arm["POST deallocate"], arm["POST start"]) == (1, 1)
    assert (arm["instances_deallocated"], arm["instances_started"]) == ({"pool-a/1": 1}, {"pool-a/1": 1})


def test_a_deallocation_and_a_start_can_be_resumed_from_their_continuation_tokens(fast: SandboxServer) -> None:
    compute = compute_client(fast)
    scale_sets = compute.virtual_machine_scale_sets
    token = scale_sets.begin_deallocate(RG, POOL, ids("0")).continuation_token()
    assert scale_sets.begin_deallocate("", "", None, continuation_token=token).result() is None
    assert power_state(compute, "0")[1][1] == "PowerState/deallocated"
    token = scale_sets.begin_start(RG, POOL, ids("0")).continuation_token()
    assert scale_sets.begin_start("", "", None, continuation_token=token).result() is None
    assert power_state(compute, "0")[1][1] == "PowerState/running"


def test_starting_a_running_instance_succeeds_at_once(fast: SandboxServer) -> None:
    compute = compute_client(fast)
    assert compute.virtual_machine_scale_sets.begin_start(RG, POOL, ids("0")).result() is None
    assert power_state(compute, "0") == ("Succeeded", ["ProvisioningState/succeeded", "PowerState/running"])


@pytest.mark.parametrize("verb", ["deallocate", "start"])
def test_deallocating_or_starting_an_unknown_instance_is_a_bad_request(still: SandboxServer, verb: str) -> None:
    begin = getattr(compute_client(still).virtual_machine_scale_sets, f"begin_{verb}")
    with pytest.raises(HttpResponseError) as caught:
        begin(RG, POOL, ids("0", "42"))
    assert caught.value.status_code == 400 and caught.value.error.code == "InvalidParameter"
    assert caught.value.error.target == "instanceIds" and "instanceId 42 " in caught.value.error.message
    assert [i.power for i in still.world.instances(still.world.scale_set(still.subscription_id, RG, POOL))] == ["running"]


@pytest.mark.parametrize(("verb", "bucket"), [("deallocate", "DeleteVMScaleSet3Min"), ("start", "PutVMScaleSet3Min")])
def test_deallocate_and_start_answer_202_and_spend_their_buckets(still: SandboxServer, verb: str, bucket: str) -> None:
    url = (f"{still.url}/subscriptions/{still.subscription_id}/resourceGroups/{RG}/providers/Microsoft.Compute"
           f"/virtualMachineScaleSets/{POOL}/{verb}?api-version=2024-11-01")
    response = requests.post(url, json={"instanceIds": ["0"]}, headers=arm_auth(still), verify=str(still.ca_path), timeout=10)
    assert response.status_code == 202 and response.content == b""
    assert "/operations/" in response.headers["Azure-AsyncOperation"]
    assert response.headers["Location"].endswith("&monitor=true") and response.headers["Retry-After"] == "10"
    assert response.headers["x-ms-ratelimit-remaining-resource"] == f"Microsoft.Compute/{bucket};11"


def test_an_allocation_failure_fails_the_long_running_operation(fast: SandboxServer) -> None:
    fast.world.fail_next_scale_up(POOL, code="QuotaExceeded")
    compute = compute_client(fast)
    with pytest.raises(HttpResponseError) as caught:
        compute.virtual_machine_scale_sets.begin_update(RG, POOL, grow(4)).result()
    assert "QuotaExceeded" in str(caught.value)
    assert compute.virtual_machine_scale_sets.get(RG, POOL).sku.capacity == 1
    assert len(list(compute.virtual_machine_scale_set_vms.list(RG, POOL))) == 1


@pytest.mark.parametrize(
    ("resource_group", "scale_set", "code"),
    [("rg-missing", POOL, "ResourceGroupNotFound"), (RG, "pool-missing", "ResourceNotFound")],
)
def test_missing_resources_are_not_found(still: SandboxServer, resource_group: str, scale_set: str, code: str) -> None:
    with pytest.raises(ResourceNotFoundError) as caught:
        compute_client(still).virtual_machine_scale_sets.get(resource_group, scale_set)
    assert caught.value.error.code == code


@pytest.mark.parametrize(
    ("query", "token", "status", "code", "message"),
    [
        ("", "arm", 400, "MissingApiVersionParameter", "api-version"),
        ("?api-version=2024-11-01", None, 401, "AuthenticationFailed", "'Authorization' header is missing"),
        ("?api-version=2024-11-01", "someone-else", 401, "InvalidAuthenticationToken", "The access token is invalid."),
        # The kubeconfig's static token is the Kubernetes API's, never ARM's.
        ("?api-version=2024-11-01", "sandbox-token", 401, "InvalidAuthenticationToken", "The access token is invalid."),
        ("?api-version=2024-11-01", "expired", 401, "ExpiredAuthenticationToken", "is earlier than current UTC time"),
        ("?api-version=2024-11-01", "key vault's", 401, "InvalidAuthenticationTokenAudience",
         "obtained for wrong audience or resource 'https://vault.azure.net'. It should exactly match with one of the "
         "allowed audiences "),
    ],
    ids=["no api-version", "no token", "unknown token", "kubeconfig token", "expired token", "wrong audience"],
)
def test_requests_need_an_api_version_and_an_unexpired_token_for_arm(
    still: SandboxServer, query: str, token: str | None, status: int, code: str, message: str
) -> None:
    issuer = still.world.identity
    value = {
        "arm": lambda: issuer.issue(ARM_AUDIENCE).token,
        "expired": lambda: issuer.issue(f"{ARM_AUDIENCE}/", lifetime=-1).token,
        "key vault's": lambda: issuer.issue(KEY_VAULT_AUDIENCE).token,
    }.get(token or "", lambda: token)()
    headers = {"Authorization": f"Bearer {value}"} if value else {}
    url = f"{still.url}/subscriptions/{still.subscription_id}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachineScaleSets{query}"
    response = requests.get(url, headers=headers, verify=str(still.ca_path), timeout=10)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code and message in response.json()["error"]["message"]
    assert response.headers["x-ms-request-id"] and response.headers["x-ms-correlation-request-id"]
    if code == "InvalidAuthenticationTokenAudience":
        assert "'https://management.azure.com/','https://management.azure.com'" in response.json()["error"]["message"]
    if status == 401:
        assert response.headers["WWW-Authenticate"].startswith('Bearer authorization_uri="https://login.microsoftonline.com/')
        assert ('error_description="The access token has expired."' in response.headers["WWW-Authenticate"]) == (token == "expired")


def test_the_sdk_reports_authentication_failures(still: SandboxServer) -> None:
    class WrongCredential:
        def get_token(self, *scopes: str, **kwargs: Any) -> Any:
            from azure.core.credentials import AccessToken
            return AccessToken("wrong", 4102444800)

    from azure.mgmt.compute import ComputeManagementClient
    compute = ComputeManagementClient(WrongCredential(), still.subscription_id, base_url=still.url,
                                      connection_verify=str(still.ca_path))
    with pytest.raises(ClientAuthenticationError):
        compute.virtual_machine_scale_sets.get(RG, POOL)


def test_updates_are_throttled_per_scale_set(still: SandboxServer) -> None:
    compute = compute_client(still, retry_total=0)
    for capacity in range(2, 14):  # the bucket holds 12 updates
        compute.virtual_machine_scale_sets.begin_update(RG, POOL, grow(capacity), polling=False)
    with pytest.raises(HttpResponseError) as caught:
        compute.virtual_machine_scale_sets.begin_update(RG, POOL, grow(14), polling=False)
    response = caught.value.response
    assert caught.value.status_code == 429 and caught.value.error.code == "OperationNotAllowed"
    assert response.headers["Retry-After"] == "15"  # one token every 15 s at 4 per minute
    assert response.headers["x-ms-ratelimit-remaining-resource"] == "Microsoft.Compute/PutVMScaleSet3Min;0"
    compute.virtual_machine_scale_sets.begin_update(RG, "system", VirtualMachineScaleSetUpdate(tags={"a": "b"}), polling=False)
    still.clock.advance(15)  # type: ignore[attr-defined]
    compute.virtual_machine_scale_sets.begin_update(RG, POOL, grow(14), polling=False)
    assert still.world.report()["api_calls"]["arm_throttled"] == 1


def test_successful_calls_report_the_remaining_budget(still: SandboxServer) -> None:
    url = f"{still.url}/subscriptions/{still.subscription_id}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/{POOL}?api-version=2024-11-01"
    response = requests.get(url, headers=arm_auth(still), verify=str(still.ca_path), timeout=10)
    assert response.headers["x-ms-ratelimit-remaining-resource"] == "Microsoft.Compute/GetVMScaleSet3Min;35"


def test_throttling_can_be_turned_off(fast: SandboxServer) -> None:
    compute = compute_client(fast, retry_total=0)
    for _ in range(40):
        compute.virtual_machine_scale_sets.get(RG, POOL)
    assert fast.world.report()["api_calls"]["arm_throttled"] == 0


def test_injected_faults_answer_with_arm_errors(still: SandboxServer) -> None:
    still.world.inject_fault(("arm", "PATCH", POOL), status=409, code="OperationNotAllowed", message="busy", count=1)
    compute = compute_client(still, retry_total=0)
    with pytest.raises(HttpResponseError) as caught:
        compute.virtual_machine_scale_sets.begin_update(RG, POOL, grow(2), polling=False)
    assert caught.value.status_code == 409 and caught.value.error.code == "OperationNotAllowed"
    assert caught.value.error.message == "busy"
    compute.virtual_machine_scale_sets.begin_update(RG, POOL, grow(2), polling=False)  # only once
    assert still.world.scale_set(still.subscription_id, RG, POOL).capacity == 2


# --- resource SKUs ----------------------------------------------------------------------------


def with_gpu_pool(**overrides: Any) -> dict[str, Any]:
    doc = with_unmanaged(**overrides)
    doc["node_groups"].append({
        "resource_group": RG, "name": "gpu", "vm_size": "Standard_NC4as_T4_v3", "location": "northeurope",
        "allocatable": {"cpu": "3860m", "memory": "24.5Gi", "nvidia.com/gpu": 1},
        "capacity": {"cpu": "4", "memory": "28Gi", "nvidia.com/gpu": 1}, "min": 0, "max": 3, "zones": ["1"],
    })
    return doc


def test_resource_skus_describe_the_scenarios_vm_sizes_per_location(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory(with_gpu_pool(), clock=ManualClock(SANDBOX_START))
    skus = list(compute_client(server).resource_skus.list(filter="location eq 'northeurope'"))
    assert sorted((s.resource_type, s.name) for s in skus) == [
        ("availabilitySets", "Aligned"), ("disks", "Premium_LRS"),
        ("virtualMachines", "Standard_D2s_v5"), ("virtualMachines", "Standard_D4s_v5"),
        ("virtualMachines", "Standard_NC4as_T4_v3"),
    ]
    gpu = next(s for s in skus if s.name == "Standard_NC4as_T4_v3")
    assert (gpu.tier, gpu.size, gpu.locations) == ("Standard", "NC4as_T4_v3", ["northeurope"])
    assert gpu.location_info[0].location == "northeurope" and gpu.location_info[0].zones == ["1", "2", "3"]
    capabilities = {c.name: c.value for c in gpu.capabilities}
    assert (capabilities["vCPUs"], capabilities["MemoryGB"], capabilities["GPUs"]) == ("4", "28", "1")
    assert gpu.restrictions == []
    # Without a capacity, a pool's size is described by its allocatable; sizes without GPUs list none.
    d2 = {c.name: c.value for c in next(s for s in skus if s.name == "Standard_D2s_v5").capabilities}
    assert (d2["vCPUs"], d2["MemoryGB"], "GPUs" in d2) == ("2", "8", False)
    assert server.world.report()["api_calls"]["breakdown"]["arm"]["LIST skus"] == 1


SKU_FILTERS = [
    ("the scenario's location", "location eq 'westeurope'", ["westeurope"]),
    ("locations compare case-insensitively", "Location eq 'WestEurope'", ["westeurope"]),
    ("a location without scale sets lists nothing", "location eq 'japaneast'", []),
    ("no filter lists every location", None, ["northeurope", "westeurope"]),
]


@pytest.mark.parametrize(("query", "locations"), [c[1:] for c in SKU_FILTERS], ids=[c[0] for c in SKU_FILTERS])
def test_resource_skus_filter_by_location(sandbox_factory: SandboxFactory, query: str | None, locations: list[str]) -> None:
    server = sandbox_factory(with_gpu_pool(), clock=ManualClock(SANDBOX_START))
    skus = list(compute_client(server).resource_skus.list(filter=query))
    assert sorted({loc for s in skus for loc in s.locations}) == locations


def test_resource_skus_accept_only_a_location_filter(still: SandboxServer) -> None:
    with pytest.raises(HttpResponseError) as caught:
        list(compute_client(still).resource_skus.list(filter="name eq 'Standard_D4s_v5'"))
    assert caught.value.status_code == 400 and caught.value.error.code == "InvalidParameter"


def test_a_restricted_size_is_listed_so_and_cannot_grow(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory(with_unmanaged(restricted_vm_sizes=["standard_d4s_v5"]), clock=ManualClock(SANDBOX_START))
    compute = compute_client(server, retry_total=0)
    skus = {s.name: s for s in compute.resource_skus.list(filter="location eq 'westeurope'")}
    (restriction,) = skus["Standard_D4s_v5"].restrictions
    assert (restriction.type, restriction.values_property, restriction.reason_code) == (
        "Location", ["westeurope"], "NotAvailableForSubscription"
    )
    assert restriction.restriction_info.locations == ["westeurope"]
    assert skus["Standard_D2s_v5"].restrictions == []
    with pytest.raises(HttpResponseError) as caught:
        compute.virtual_machine_scale_sets.begin_update(RG, POOL, grow(2), polling=False)
    assert caught.value.status_code == 409 and caught.value.error.code == "SkuNotAvailable"
    compute.virtual_machine_scale_sets.begin_update(RG, POOL, grow(0), polling=False)  # shrinking is fine


def test_resource_skus_can_fail_on_purpose(still: SandboxServer) -> None:
    still.world.inject_fault(("arm", "GET", "skus"), status=503, code="ServiceUnavailable")
    with pytest.raises(HttpResponseError) as caught:
        list(compute_client(still, retry_total=0).resource_skus.list(filter="location eq 'westeurope'"))
    assert caught.value.status_code == 503
