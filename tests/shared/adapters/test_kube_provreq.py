"""ProvisioningRequests between JSON and the domain (kube_provreq) and through KubernetesCluster against the sandbox:
every field decoded, an unreadable spec reported on the request (never raised), status writes that the API server
takes (RFC 3339, observedGeneration, conditions replacing the old, details kept unless given), a missing request
a no-op, and a cluster without the CRD asked again only after the recheck time."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from sandbox.api.patching import JSON_PATCH, MERGE_PATCH, apply_patch
from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared.adapters import kube_provreq
from shared.adapters.kubernetes import CRD_ABSENT_RECHECK, KubernetesCluster
from shared.domain import ATOMIC_SCALE_UP_CLASS, CHECK_CAPACITY_CLASS, Condition, PodSet
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, kube_api_client
from tests.sandbox.helpers import scenario

CREATED = "2030-01-07T09:00:00Z"


def _obj(spec: Any = None, *, status: Any = None, **meta: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"namespace": "ml", "name": "gang", "uid": "u-1", "generation": 1,
                                        "creationTimestamp": CREATED, **meta}}
    if spec is not None:
        obj["spec"] = spec
    if status is not None:
        obj["status"] = status
    return obj


SPEC = {"provisioningClassName": ATOMIC_SCALE_UP_CLASS, "parameters": {"noRetry": "true"},
        "podSets": [{"count": 4, "podTemplateRef": {"name": "worker"}},
                    {"count": 1, "podTemplateRef": {"name": "launcher"}}]}
STATUS = {"conditions": [{"type": "Provisioned", "status": "False", "reason": "ScaleUpInProgress", "message": "asked",
                          "lastTransitionTime": "2030-01-07T09:01:00Z", "observedGeneration": 1}],
          "provisioningClassDetails": {"group": "gpu-a"}}


def test_every_field_is_decoded() -> None:
    request = kube_provreq.request_from_json(_obj(SPEC, status=STATUS))
    assert (request.namespace, request.name, request.key, request.uid, request.generation) == (
        "ml", "gang", "ml/gang", "u-1", 1)
    assert request.class_name == ATOMIC_SCALE_UP_CLASS and request.created_at == SANDBOX_START
    assert request.pod_sets == (PodSet("worker", 4), PodSet("launcher", 1))
    assert dict(request.parameters) == {"noRetry": "true"} and dict(request.details) == {"group": "gpu-a"}
    assert request.conditions == (Condition("Provisioned", "False", "ScaleUpInProgress", "asked",
                                            SANDBOX_START + timedelta(minutes=1), 1),)
    assert request.is_true("Provisioned") is False and request.condition("Provisioned") is not None
    assert request.problem == ""


@pytest.mark.parametrize(("spec", "named"), [
    (None, "spec is missing"),
    ({"podSets": SPEC["podSets"]}, "provisioningClassName"),
    (SPEC | {"podSets": []}, "spec.podSets"),
    (SPEC | {"podSets": "four"}, "spec.podSets"),
    (SPEC | {"podSets": [{"count": 0, "podTemplateRef": {"name": "w"}}]}, "spec.podSets[0].count"),
    (SPEC | {"podSets": [{"count": True, "podTemplateRef": {"name": "w"}}]}, "spec.podSets[0].count"),
    (SPEC | {"podSets": [{"count": 1, "podTemplateRef": {"name": "w"}}, {"count": 1}]},
     "spec.podSets[1].podTemplateRef"),
    (SPEC | {"parameters": {"noRetry": True}}, "spec.parameters.noRetry"),
    (SPEC | {"parameters": ["noRetry"]}, "spec.parameters"),
])
def test_an_unreadable_spec_is_reported_on_the_request(spec: Any, named: str) -> None:
    request = kube_provreq.request_from_json(_obj(spec, status=STATUS))
    assert request.problem.startswith("spec cannot be read") and named in request.problem
    assert request.pod_sets == () and request.key == "ml/gang" and request.uid == "u-1"
    assert request.conditions and request.created_at == SANDBOX_START  # still there for the status write
    if isinstance(spec, dict) and spec.get("provisioningClassName"):
        assert request.class_name == ATOMIC_SCALE_UP_CLASS  # so another class's request is still left alone


def test_an_odd_status_or_metadata_does_not_stop_the_read() -> None:
    request = kube_provreq.request_from_json({"metadata": {"name": "x", "generation": True,
                                                           "creationTimestamp": "soon"},
                                              "spec": SPEC, "status": {"conditions": "none",
                                                                       "provisioningClassDetails": {"n": 1}}})
    assert request.problem == "" and request.generation == 0 and request.created_at is None
    assert request.conditions == () and dict(request.details) == {}


CONDITIONS = (Condition("Accepted", "True", "Accepted", "", SANDBOX_START, 1),
              Condition("Provisioned", "True", "CapacityIsFound", "fits on 2 nodes",
                        datetime(2030, 1, 7, 10, 30, tzinfo=UTC).astimezone(), 1))


@pytest.mark.parametrize("details", [None, {}, {"group": "gpu-b"}])
def test_a_status_patch_replaces_the_conditions_and_the_details_only_when_given(
        details: dict[str, str] | None) -> None:
    content_type, patch = kube_provreq.status_patch(CONDITIONS, details)
    before = _obj(SPEC, status=STATUS)
    after = apply_patch(content_type, before, patch)
    assert content_type in (MERGE_PATCH, JSON_PATCH) and after["spec"] == SPEC
    written = kube_provreq.request_from_json(after)
    assert written.conditions == CONDITIONS  # the old list replaced, times back in UTC
    assert dict(written.details) == (STATUS["provisioningClassDetails"] if details is None else details)
    assert [c["lastTransitionTime"] for c in after["status"]["conditions"]] == [
        "2030-01-07T09:00:00Z", "2030-01-07T10:30:00Z"]
    assert kube_provreq.status_json(CONDITIONS, details, current=STATUS) == after["status"]


def test_a_status_patch_applies_to_a_request_without_a_status() -> None:
    for details in (None, {"k": "v"}):
        content_type, patch = kube_provreq.status_patch(CONDITIONS, details)
        assert kube_provreq.request_from_json(apply_patch(content_type, _obj(SPEC), patch)).conditions == CONDITIONS


# --- through the sandbox's API ---------------------------------------------------------------------------------


@pytest.fixture
def server(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(scenario(workloads=[]), clock=ManualClock(SANDBOX_START))


def test_requests_round_trip_through_the_adapter(server: SandboxServer) -> None:
    api = kube_api_client(server)
    custom = k8s.CustomObjectsApi(api)
    for name, spec in (("gang", SPEC), ("check", SPEC | {"provisioningClassName": CHECK_CAPACITY_CLASS,
                                                          "parameters": {}})):
        custom.create_namespaced_custom_object("autoscaling.x-k8s.io", "v1", "default", "provisioningrequests",
                                               {"metadata": {"name": name}, "spec": spec})
    cluster = KubernetesCluster(api, page_size=1)  # pages: one request a page
    listed = {r.name: r for r in cluster.list_provisioning_requests() or []}
    assert sorted(listed) == ["check", "gang"] and all(not r.problem and r.uid for r in listed.values())
    assert listed["gang"].pod_sets == (PodSet("worker", 4), PodSet("launcher", 1))
    assert listed["check"].class_name == CHECK_CAPACITY_CLASS and listed["check"].conditions == ()

    cluster.update_provisioning_request_status("default", "gang", conditions=CONDITIONS, details={"group": "a"})
    cluster.update_provisioning_request_status("default", "gang", conditions=CONDITIONS[1:])
    cluster.update_provisioning_request_status("default", "gone", conditions=CONDITIONS)  # missing: a no-op
    read = {r.name: r for r in cluster.list_provisioning_requests() or []}["gang"]
    assert read.conditions == CONDITIONS[1:] and dict(read.details) == {"group": "a"}
    assert read.generation == 1 and read.pod_sets == listed["gang"].pod_sets  # a status write is no spec change


def test_a_status_the_api_refuses_raises_naming_the_call(server: SandboxServer) -> None:
    api = kube_api_client(server)
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", "default", "provisioningrequests", {"metadata": {"name": "gang"}, "spec": SPEC})
    cluster = KubernetesCluster(api)
    with pytest.raises(Exception, match="update provisioningrequest default/gang status") as caught:
        cluster.update_provisioning_request_status(
            "default", "gang", conditions=[Condition("Provisioned", "True", "", "", SANDBOX_START, 1)])
    assert getattr(caught.value, "status", None) == 422  # an empty reason: refused, and not retried as transient
    assert not getattr(caught.value, "transient", True)


class _Response:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()

    def release_conn(self) -> None:
        pass


class _NoCrd:
    """Answers the list with 404 (no CRD) until `served`, counting the calls."""

    def __init__(self) -> None:
        self.calls, self.served = 0, False

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **kwargs: Any) -> _Response:
        assert (group, version, plural) == ("autoscaling.x-k8s.io", "v1", "provisioningrequests")
        self.calls += 1
        if not self.served:
            raise ApiException(status=404, reason="Not Found")
        return _Response({"items": [_obj(SPEC)], "metadata": {}})


def test_a_cluster_without_the_crd_is_asked_again_only_after_the_recheck_time() -> None:
    cluster = KubernetesCluster(ApiClient(Configuration()))
    custom, now = _NoCrd(), [1000.0]
    cluster._custom = custom  # type: ignore[assignment]  # stand-in for the generated CustomObjectsApi
    cluster._monotonic = lambda: now[0]
    assert cluster.list_provisioning_requests() is None and custom.calls == 1
    now[0] += CRD_ABSENT_RECHECK / 2
    assert cluster.list_provisioning_requests() is None and custom.calls == 1  # believed: no call per poll
    custom.served = True
    now[0] += CRD_ABSENT_RECHECK / 2
    assert [r.key for r in cluster.list_provisioning_requests() or []] == ["ml/gang"] and custom.calls == 2
    assert cluster.list_provisioning_requests() is not None and custom.calls == 3  # served: listed every poll
