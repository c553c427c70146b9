"""The sandbox's ProvisioningRequest API (autoscaling.x-k8s.io/v1) through the official client: discovery, list and
get, the schema's 422s, an immutable spec, a status subresource that writes status only and a main resource that
keeps it, delete."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from sandbox.world import provisioning_requests as store
from sandbox.world.provisioning_requests import create_provisioning_request, get_provisioning_request
from shared.domain import ATOMIC_SCALE_UP_CLASS, CHECK_CAPACITY_CLASS
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, kube_api_client
from tests.sandbox.helpers import scenario

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
MERGE = "application/merge-patch+json"


@pytest.fixture
def server(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(scenario(workloads=[]), clock=ManualClock(SANDBOX_START))


@pytest.fixture
def custom(server: SandboxServer) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(kube_api_client(server))


def _request(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ProvisioningRequest", "metadata": {"name": name},
            "spec": spec}


def _spec(count: int = 4, *, class_name: str = ATOMIC_SCALE_UP_CLASS, **extra: Any) -> dict[str, Any]:
    return {"provisioningClassName": class_name, "podSets": [{"count": count, "podTemplateRef": {"name": "worker"}}],
            **extra}


def _condition(type_: str, status: str = "True", reason: str = "CapacityIsFound") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": "",
            "lastTransitionTime": "2030-01-07T09:00:00Z", "observedGeneration": 1}


def _refused(call: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as caught:
        call()
    return caught.value.status, json.loads(caught.value.body)


def test_discovery_lists_the_group_with_v1_preferred(server: SandboxServer) -> None:
    api = kube_api_client(server)
    group = next(g for g in k8s.ApisApi(api).get_api_versions().groups if g.name == GROUP)
    assert group.preferred_version.version == "v1" and {v.version for v in group.versions} == {"v1", "v1beta1"}
    resources = k8s.CustomObjectsApi(api).get_api_resources(GROUP, VERSION).resources
    assert {r.name for r in resources} == {PLURAL, f"{PLURAL}/status"}


def test_create_list_get_and_delete(custom: k8s.CustomObjectsApi) -> None:
    created = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, _request(
        "gang", _spec() | {"parameters": {"ValidUntilSeconds": "600"}}) | {"status": {"conditions": [
            _condition("Provisioned")]}})
    assert created["metadata"]["generation"] == 1 and created["metadata"]["uid"]
    assert "status" not in created  # a subresource: a create sets none
    listed = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert listed["kind"] == "ProvisioningRequestList" and [i["metadata"]["name"] for i in listed["items"]] == ["gang"]
    assert custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "gang")["spec"] == created["spec"]
    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "gang")
    status, body = _refused(lambda: custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "gang"))
    assert status == 404 and body["reason"] == "NotFound"


@pytest.mark.parametrize(("spec", "field"), [
    (None, "spec"),
    ({"podSets": [{"count": 1, "podTemplateRef": {"name": "worker"}}]}, "spec.provisioningClassName"),
    (_spec(class_name="Not_A_Name"), "spec.provisioningClassName"),
    ({"provisioningClassName": CHECK_CAPACITY_CLASS}, "spec.podSets"),
    (_spec() | {"podSets": []}, "spec.podSets"),
    (_spec() | {"podSets": [{"count": 1, "podTemplateRef": {"name": "w"}}] * 33}, "spec.podSets"),
    (_spec(0), "spec.podSets[0].count"),
    (_spec() | {"podSets": [{"count": "4", "podTemplateRef": {"name": "worker"}}]}, "spec.podSets[0].count"),
    (_spec() | {"podSets": [{"podTemplateRef": {"name": "worker"}}]}, "spec.podSets[0].count"),
    (_spec() | {"podSets": [{"count": 1}]}, "spec.podSets[0].podTemplateRef"),
    (_spec() | {"podSets": [{"count": 1, "podTemplateRef": {}}]}, "spec.podSets[0].podTemplateRef.name"),
    (_spec() | {"podSets": [{"count": 1, "podTemplateRef": {"name": "Bad Name"}}]},
     "spec.podSets[0].podTemplateRef.name"),
    (_spec(parameters={"noRetry": True}), "spec.parameters.noRetry"),
    (_spec(parameters={"long": "x" * 256}), "spec.parameters.long"),
])
def test_the_api_refuses_what_the_crd_schema_refuses(custom: k8s.CustomObjectsApi, spec: Any, field: str) -> None:
    body = _request("bad", spec)
    if spec is None:
        del body["spec"]
    status, refusal = _refused(lambda: custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body))
    assert status == 422 and refusal["reason"] == "Invalid"
    assert refusal["message"].startswith(f'ProvisioningRequest.{GROUP} "bad" is invalid: ')
    assert field in [cause["field"] for cause in refusal["details"]["causes"]]
    assert custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"] == []  # nothing stored


@pytest.mark.parametrize("change", [
    {"provisioningClassName": CHECK_CAPACITY_CLASS},
    {"podSets": [{"count": 3, "podTemplateRef": {"name": "worker"}}]},
    {"parameters": {"noRetry": "true"}},
])
def test_the_spec_is_immutable(custom: k8s.CustomObjectsApi, change: dict[str, Any]) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, _request("gang", _spec()))
    status, refusal = _refused(lambda: custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "gang", {"spec": change}, _content_type=MERGE))
    assert status == 422 and "Value is immutable" in refusal["message"]
    [field] = change
    assert refusal["details"]["causes"][0]["field"] == f"spec.{field}"
    assert custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "gang")["spec"] == _spec()


def test_status_writes_change_status_only_and_main_writes_keep_it(custom: k8s.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, _request("gang", _spec()))
    written = custom.patch_namespaced_custom_object_status(GROUP, VERSION, "default", PLURAL, "gang", {
        "metadata": {"labels": {"ignored": "yes"}}, "spec": {"podSets": []},
        "status": {"conditions": [_condition("Provisioned")], "provisioningClassDetails": {"k": "v"}}},
        _content_type=MERGE)
    assert written["status"]["conditions"] == [_condition("Provisioned")]
    assert written["spec"] == _spec() and "labels" not in written["metadata"]  # a status write: status only
    assert written["metadata"]["generation"] == 1

    labelled = custom.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "gang", {
        "metadata": {"labels": {"team": "ml"}}, "status": {"conditions": []}}, _content_type=MERGE)
    assert labelled["metadata"]["labels"] == {"team": "ml"}
    assert labelled["status"] == written["status"]  # a main write keeps status
    assert int(labelled["metadata"]["resourceVersion"]) > int(written["metadata"]["resourceVersion"])

    stale = dict(written, metadata=dict(written["metadata"]))
    status, refusal = _refused(lambda: custom.replace_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "gang", stale))
    assert status == 409 and refusal["reason"] == "Conflict"  # optimistic concurrency on resourceVersion


@pytest.mark.parametrize(("condition", "field"), [
    (_condition("Provisioned", reason=""), "status.conditions[0].reason"),
    (_condition("Provisioned", status="Yes"), "status.conditions[0].status"),
    ({k: v for k, v in _condition("Provisioned").items() if k != "lastTransitionTime"},
     "status.conditions[0].lastTransitionTime"),
    (_condition("Provisioned") | {"lastTransitionTime": "yesterday"}, "status.conditions[0].lastTransitionTime"),
    (_condition("Provisioned") | {"observedGeneration": -1}, "status.conditions[0].observedGeneration"),
])
def test_the_api_refuses_a_status_the_schema_refuses(custom: k8s.CustomObjectsApi, condition: dict[str, Any],
                                                     field: str) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, _request("gang", _spec()))
    status, refusal = _refused(lambda: custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "gang", {"status": {"conditions": [condition]}}, _content_type=MERGE))
    assert status == 422 and field in [cause["field"] for cause in refusal["details"]["causes"]]


def test_two_conditions_of_one_type_are_refused(custom: k8s.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, _request("gang", _spec()))
    status, _ = _refused(lambda: custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "gang",
        {"status": {"conditions": [_condition("Accepted"), _condition("Accepted", status="False")]}},
        _content_type=MERGE))
    assert status == 422


def test_the_world_functions_store_what_the_api_serves(server: SandboxServer, custom: k8s.CustomObjectsApi) -> None:
    world = server.world
    created = create_provisioning_request(world, "default", _request("gang", _spec()))
    assert get_provisioning_request(world, "default", "gang") == created
    assert get_provisioning_request(world, "default", "missing") is None
    served = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "gang")
    assert served["metadata"]["uid"] == created["metadata"]["uid"]


def test_the_sandbox_checks_the_limits_of_the_crd_we_ship() -> None:
    """The sandbox's rules and infra/kubernetes/provisioningrequest-v1.yaml's v1 schema say the same."""
    crd = yaml.safe_load((Path(__file__).parents[2] / "infra/kubernetes/provisioningrequest-v1.yaml").read_text())
    assert crd["spec"]["group"] == GROUP and crd["spec"]["names"]["plural"] == PLURAL
    v1 = next(v for v in crd["spec"]["versions"] if v["name"] == VERSION)
    assert v1["storage"] and v1["served"] and v1["subresources"] == {"status": {}}
    schema = v1["schema"]["openAPIV3Schema"]["properties"]
    spec, status = schema["spec"], schema["status"]["properties"]
    assert sorted(spec["required"]) == ["podSets", "provisioningClassName"]
    assert (spec["properties"]["podSets"]["minItems"], spec["properties"]["podSets"]["maxItems"]) == (
        1, store.MAX_POD_SETS)
    pod_set = spec["properties"]["podSets"]["items"]
    assert sorted(pod_set["required"]) == ["count", "podTemplateRef"] and pod_set["properties"]["count"]["minimum"] == 1
    assert pod_set["properties"]["podTemplateRef"]["properties"]["name"]["pattern"] == store._DNS_SUBDOMAIN.pattern
    assert spec["properties"]["provisioningClassName"]["pattern"] == store._DNS_SUBDOMAIN.pattern
    parameters = spec["properties"]["parameters"]
    assert (parameters["maxProperties"], parameters["additionalProperties"]["maxLength"]) == (
        store.MAX_PARAMETERS, store.MAX_PARAMETER_LENGTH)
    immutable = [field for field, rule in spec["properties"].items()
                 if {"message": "Value is immutable", "rule": "self == oldSelf"} in rule.get("x-kubernetes-validations", [])]
    assert sorted(immutable) == ["parameters", "podSets", "provisioningClassName"]
    condition = status["conditions"]["items"]["properties"]
    assert condition["reason"]["pattern"] == store._REASON.pattern and condition["type"]["pattern"] == (
        store._CONDITION_TYPE.pattern)
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    details = status["provisioningClassDetails"]
    assert (details["maxProperties"], details["additionalProperties"]["maxLength"]) == (
        store.MAX_DETAILS, store.MAX_DETAIL_LENGTH)
