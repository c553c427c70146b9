"""The API doubles as pure functions of (world, request): routing and error shapes, no sockets."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox.api import arm_api, kube_api
from sandbox.api.wire import Request
from sandbox.world import World
from sandbox.world.identity import ARM_AUDIENCE
from tests.sandbox.helpers import POOL, RG, grant, job, scenario

AUTH = {"Authorization": "Bearer sandbox-token", "Host": "127.0.0.1:8443"}  # the kubeconfig's static token
ARM_TOKEN = "arm-token"  # issued for ARM by the world fixture
ARM_AUTH = {"Authorization": f"Bearer {ARM_TOKEN}", "Host": "127.0.0.1:8443"}
SUB = "11111111-2222-3333-4444-555555555555"
VMSS = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/{POOL}"


@pytest.fixture
def world() -> World:
    world = World(scenario(workloads=[job("w")]), start=datetime(2030, 1, 7, 9, tzinfo=UTC))
    grant(world, ARM_AUDIENCE, ARM_TOKEN)
    return world


@pytest.mark.parametrize(
    ("method", "path", "query", "headers", "body", "status", "reason"),
    [
        ("GET", "/api/v1/nodes", "", {}, b"", 401, "Unauthorized"),
        ("GET", "/api/v1/widgets", "", AUTH, b"", 404, "NotFound"),
        ("GET", "/api/v1/poddisruptionbudgets", "", AUTH, b"", 404, "NotFound"),  # wrong group
        ("GET", "/api/v1/pods/some-pod", "", AUTH, b"", 404, "NotFound"),  # namespaced objects need a namespace
        ("PUT", "/api/v1/namespaces/default/events/x", "", AUTH, b"{}", 405, "MethodNotAllowed"),
        ("PUT", "/api/v1/namespaces/default/pods/x", "", AUTH, b"{}", 404, "NotFound"),
        ("POST", "/api/v1/nodes", "", AUTH, b"{}", 405, "MethodNotAllowed"),
        ("GET", "/api/v1/pods", "watch=true", AUTH, b"", 405, "MethodNotAllowed"),
        ("GET", "/api/v1/pods", "labelSelector=a+in+(b", AUTH, b"", 400, "BadRequest"),
        ("GET", "/api/v1/pods", "continue=garbage", AUTH, b"", 400, "BadRequest"),
        ("PATCH", "/api/v1/nodes/pool-a000000", "", {**AUTH, "Content-Type": "application/apply-patch+yaml"}, b"{}", 415,
         "UnsupportedMediaType"),
        ("PATCH", "/api/v1/nodes/pool-a000000", "", {**AUTH, "Content-Type": "application/merge-patch+json"}, b"{not json",
         400, "BadRequest"),
        ("PATCH", "/api/v1/nodes/pool-a000000", "", {**AUTH, "Content-Type": "application/merge-patch+json"},
         b'{"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}}', 422, "Invalid"),
        ("PUT", "/api/v1/nodes/pool-a000000", "", AUTH, b'{"metadata": {"name": "other"}}', 400, "BadRequest"),
        ("POST", "/api/v1/namespaces/default/pods/nope/eviction", "", AUTH, b"{}", 404, "NotFound"),
    ],
)
def test_kube_errors_are_status_objects(
    world: World, method: str, path: str, query: str, headers: dict[str, str], body: bytes, status: int, reason: str
) -> None:
    response = kube_api.handle(world, Request.build(method, path, query, headers, body))
    assert response.status == status
    payload = response.json()
    assert (payload["kind"], payload["apiVersion"], payload["status"], payload["reason"], payload["code"]) == (
        "Status", "v1", "Failure", reason, status)
    assert payload["message"]


def test_kube_pods_can_be_created_with_a_duration(world: World) -> None:
    pod = {"metadata": {"name": "manual", "annotations": {"sandbox.autoscaler/duration": "30s"}},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}]}}
    created = kube_api.handle(world, Request.build("POST", "/api/v1/namespaces/default/pods", "", AUTH, pod))
    assert created.status == 201 and created.json()["status"]["phase"] == "Running"
    world.advance_by(30)
    fetched = kube_api.handle(world, Request.build("GET", "/api/v1/namespaces/default/pods/manual", "", AUTH))
    assert fetched.json()["status"]["phase"] == "Succeeded"


def test_kube_deleting_a_node_answers_a_success_status(world: World) -> None:
    response = kube_api.handle(world, Request.build("DELETE", "/api/v1/nodes/pool-a000000", "", AUTH))
    assert response.status == 200 and response.json()["status"] == "Success"
    assert kube_api.handle(world, Request.build("GET", "/api/v1/nodes", "", AUTH)).json()["items"] == []


@pytest.mark.parametrize(
    ("method", "path", "query", "headers", "status", "code"),
    [
        ("GET", VMSS, "", ARM_AUTH, 400, "MissingApiVersionParameter"),
        ("GET", VMSS, "api-version=2024-11-01", {}, 401, "AuthenticationFailed"),
        ("DELETE", VMSS, "api-version=2024-11-01", ARM_AUTH, 405, "MethodNotAllowed"),
        ("GET", f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/virtualNetworks", "api-version=1", ARM_AUTH,
         404, "InvalidResourceType"),
        ("GET", VMSS.replace(SUB, "99999999-0000-0000-0000-000000000000"), "api-version=1", ARM_AUTH, 404, "SubscriptionNotFound"),
        ("GET", f"{VMSS}/virtualMachines/9", "api-version=1", ARM_AUTH, 404, "ResourceNotFound"),
        ("GET", f"/subscriptions/{SUB}/providers/Microsoft.Compute/locations/westeurope/operations/nope", "api-version=1", ARM_AUTH,
         404, "NotFound"),
    ],
)
def test_arm_errors(world: World, method: str, path: str, query: str, headers: dict[str, str], status: int, code: str) -> None:
    response = arm_api.handle(world, Request.build(method, path, query, headers))
    assert response.status == status and response.json()["error"]["code"] == code
    assert response.headers["x-ms-request-id"]


def _patch(world: World, body: Any) -> Any:
    return arm_api.handle(world, Request.build("PATCH", VMSS, "api-version=2024-11-01", ARM_AUTH, body))


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"sku": {"capacity": 1001}}, 400, "InvalidParameter"),
        ({"sku": {"capacity": -1}}, 400, "InvalidParameter"),
        ({"sku": {"capacity": "3"}}, 400, "InvalidParameter"),
        ({"sku": {"name": "Standard_E4s_v5", "capacity": 3}}, 409, "OperationNotAllowed"),
        ({"tags": {"a": 1}}, 400, "InvalidParameter"),
        ("not an object", 400, "InvalidRequestContent"),
    ],
)
def test_arm_refuses_bad_updates(world: World, body: Any, status: int, code: str) -> None:
    response = _patch(world, body)
    assert response.status == status and response.json()["error"]["code"] == code


def test_arm_update_then_poll_the_operation(world: World) -> None:
    response = _patch(world, {"sku": {"capacity": 2}})
    assert response.status == 200 and response.json()["properties"]["provisioningState"] == "Updating"
    async_url = response.headers["Azure-AsyncOperation"]
    assert async_url.startswith(f"https://127.0.0.1:8443/subscriptions/{SUB}/providers/Microsoft.Compute/locations/westeurope/operations/")
    assert response.headers["Retry-After"] == str(arm_api.LRO_RETRY_AFTER)
    path, _, query = async_url.removeprefix("https://127.0.0.1:8443").partition("?")

    def poll() -> Any:
        return arm_api.handle(world, Request.build("GET", path, query, ARM_AUTH)).json()

    assert poll()["status"] == "InProgress"
    world.advance_by(30)
    done = poll()
    assert done["status"] == "Succeeded" and done["endTime"] and done["startTime"]


def test_arm_put_changes_capacity_and_tags(world: World) -> None:
    response = arm_api.handle(world, Request.build("PUT", VMSS, "api-version=1", ARM_AUTH,
                                                   {"sku": {"capacity": 3}, "tags": {"team": "x"}}))
    assert response.status == 200 and response.json()["sku"]["capacity"] == 3
    assert response.json()["tags"] == {"team": "x"}


def test_arm_delete_monitor_location(world: World) -> None:
    response = arm_api.handle(world, Request.build("POST", f"{VMSS}/delete", "api-version=1", ARM_AUTH, {"instanceIds": ["0"]}))
    assert response.status == 202 and response.body == b""
    path, _, query = response.headers["Location"].removeprefix("https://127.0.0.1:8443").partition("?")
    assert "monitor=true" in query
    assert arm_api.handle(world, Request.build("GET", path, query, ARM_AUTH)).status == 202
    world.advance_by(30)
    assert arm_api.handle(world, Request.build("GET", path, query, ARM_AUTH)).status == 200
