"""The Kubernetes API double driven through the official `kubernetes` client, unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, kube_api_client
from tests.sandbox.helpers import job, scenario

WEB = job("web", count=3, cpu="100m", memory="100Mi", duration=None, kind="ReplicaSet", labels={"app": "web", "tier": "front"})
BATCH = job("batch", count=3, cpu="3", memory="1Gi", duration="10m", labels={"app": "batch"})


@pytest.fixture
def server(sandbox_factory: SandboxFactory) -> SandboxServer:
    doc = scenario(workloads=[WEB, BATCH], pdbs=[{"name": "web", "selector": {"app": "web"}, "max_unavailable": 1}])
    doc["node_groups"][0]["initial"] = 2
    return sandbox_factory(doc, clock=ManualClock(SANDBOX_START))


@pytest.fixture
def core(server: SandboxServer) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(kube_api_client(server))


def test_requests_without_the_token_are_unauthorized(server: SandboxServer) -> None:
    configuration = k8s.Configuration(host=server.url)
    configuration.ssl_ca_cert = str(server.ca_path)
    with pytest.raises(ApiException) as caught:
        k8s.CoreV1Api(k8s.ApiClient(configuration)).list_node()
    assert caught.value.status == 401
    assert json.loads(caught.value.body)["reason"] == "Unauthorized"


def test_version_and_discovery(server: SandboxServer) -> None:
    api_client = kube_api_client(server)
    assert k8s.VersionApi(api_client).get_code().git_version.startswith("v1.")
    assert k8s.CoreApi(api_client).get_api_versions().versions == ["v1"]
    groups = k8s.ApisApi(api_client).get_api_versions().groups
    assert [g.name for g in groups] == ["apps", "policy", "autoscaling.x-k8s.io"]


def test_daemonsets_are_listed_at_apps_v1_page_by_page(sandbox_factory: SandboxFactory) -> None:
    doc = scenario(daemonsets=[{"name": f"agent-{i}", "requests": {"cpu": "10m", "memory": "16Mi"}} for i in range(5)])
    apps = k8s.AppsV1Api(kube_api_client(sandbox_factory(doc, clock=ManualClock(SANDBOX_START))))
    first = apps.list_daemon_set_for_all_namespaces(limit=2)
    assert first.kind == "DaemonSetList" and len(first.items) == 2 and first.metadata._continue
    names = [d.metadata.name for d in first.items]
    token = first.metadata._continue
    while token:
        page = apps.list_daemon_set_for_all_namespaces(limit=2, _continue=token)
        names += [d.metadata.name for d in page.items]
        token = page.metadata._continue
    assert names == [f"agent-{i}" for i in range(5)]
    one = apps.read_namespaced_daemon_set("agent-0", "kube-system")
    assert one.spec.template.spec.containers[0].resources.requests == {"cpu": "10m", "memory": "16Mi"}


def test_nodes_list_and_get(core: k8s.CoreV1Api) -> None:
    nodes = core.list_node()
    assert nodes.kind == "NodeList" and int(nodes.metadata.resource_version) > 0
    assert [n.metadata.name for n in nodes.items] == ["pool-a000000", "pool-a000001"]
    node = core.read_node("pool-a000001")
    assert node.spec.provider_id.endswith("/virtualMachineScaleSets/pool-a/virtualMachines/1")
    assert node.status.allocatable == {"cpu": "4", "memory": "16Gi", "pods": "110"}
    with pytest.raises(ApiException) as caught:
        core.read_node("pool-a00000z")
    assert caught.value.status == 404 and json.loads(caught.value.body)["reason"] == "NotFound"


@pytest.mark.parametrize(
    ("label_selector", "field_selector", "count"),
    [
        ("", "", 8),  # 3 web + 3 batch (one does not fit) + 2 kube-proxy
        ("app=web", "", 3),
        ("app in (web,batch)", "", 6),
        ("app notin (web)", "", 5),
        ("tier", "", 3),
        ("!tier,app", "", 5),
        ("", "status.phase=Running", 7),
        ("", "status.phase!=Running", 1),
        ("", "spec.nodeName=pool-a000000,metadata.namespace=kube-system", 1),
        ("app=batch", "status.phase=Pending", 1),
    ],
)
def test_pod_selectors(core: k8s.CoreV1Api, label_selector: str, field_selector: str, count: int) -> None:
    pods = core.list_pod_for_all_namespaces(label_selector=label_selector, field_selector=field_selector)
    assert len(pods.items) == count


def test_unsupported_field_selectors_are_bad_requests(core: k8s.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("default", field_selector="spec.priority=1")
    assert caught.value.status == 400


def test_pagination_walks_every_item_once(core: k8s.CoreV1Api) -> None:
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = core.list_pod_for_all_namespaces(limit=3, _continue=token)
        seen += [p.metadata.name for p in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 8 - len(seen)
    assert pages == 3 and len(seen) == len(set(seen)) == 8


def test_unschedulable_pods_carry_the_scheduler_condition(core: k8s.CoreV1Api) -> None:
    (pending,) = core.list_namespaced_pod("default", field_selector="status.phase=Pending").items
    condition = pending.status.conditions[0]
    assert (condition.type, condition.status, condition.reason) == ("PodScheduled", "False", "Unschedulable")
    assert "Insufficient cpu" in condition.message


def test_strategic_merge_patch_replaces_taints_wholesale(core: k8s.CoreV1Api) -> None:
    core.patch_node("pool-a000000", {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}})
    node = core.patch_node("pool-a000000", {"spec": {"taints": [{"key": "b", "value": "x", "effect": "PreferNoSchedule"}]},
                                            "metadata": {"labels": {"extra": "yes"}}})
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [("b", "x", "PreferNoSchedule")]
    assert node.metadata.labels["extra"] == "yes" and node.metadata.labels["agentpool"] == "pool-a"


def test_merge_patch_can_delete_fields(core: k8s.CoreV1Api) -> None:
    core.patch_node("pool-a000000", {"spec": {"unschedulable": True}})
    node = core.patch_node("pool-a000000", {"spec": {"unschedulable": None}}, _content_type="application/merge-patch+json")
    assert node.spec.unschedulable is None


def test_json_patch_with_a_resource_version_test(core: k8s.CoreV1Api) -> None:
    current = core.read_node("pool-a000001")
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": current.metadata.resource_version},
        {"op": "add", "path": "/spec/taints", "value": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]},
    ]
    patched = core.patch_node("pool-a000001", ops)
    assert patched.spec.taints[0].key == "ToBeDeletedByClusterAutoscaler"
    with pytest.raises(ApiException) as caught:
        core.patch_node("pool-a000001", ops)  # the same test again now fails: the node changed
    assert caught.value.status == 422


def test_a_stale_resource_version_conflicts(core: k8s.CoreV1Api) -> None:
    node = core.read_node("pool-a000000")
    core.patch_node("pool-a000000", {"metadata": {"labels": {"bump": "1"}}})
    node.spec.unschedulable = True
    with pytest.raises(ApiException) as caught:
        core.replace_node("pool-a000000", node)
    assert caught.value.status == 409 and json.loads(caught.value.body)["reason"] == "Conflict"
    with pytest.raises(ApiException) as patched:
        core.patch_node("pool-a000000", {"metadata": {"resourceVersion": node.metadata.resource_version}, "spec": {"unschedulable": True}})
    assert patched.value.status == 409
    fresh = core.read_node("pool-a000000")
    fresh.spec.unschedulable = True
    assert core.replace_node("pool-a000000", fresh).spec.unschedulable is True


def test_cordoned_nodes_take_no_new_pods(server: SandboxServer, core: k8s.CoreV1Api) -> None:
    for node in ("pool-a000000", "pool-a000001"):
        core.patch_node(node, {"spec": {"unschedulable": True}})
    server.clock.advance(1)  # type: ignore[attr-defined]
    web = core.list_namespaced_pod("default", label_selector="app=web").items[0]
    core.delete_namespaced_pod(web.metadata.name, "default", grace_period_seconds=0)
    server.clock.advance(1)  # type: ignore[attr-defined]
    pending = core.list_namespaced_pod("default", label_selector="app=web", field_selector="status.phase=Pending").items
    assert len(pending) == 1
    assert "were unschedulable" in pending[0].status.conditions[0].message


def test_eviction_through_the_client(server: SandboxServer, core: k8s.CoreV1Api) -> None:
    names = [p.metadata.name for p in core.list_namespaced_pod("default", label_selector="app=web").items]
    for node in ("pool-a000000", "pool-a000001"):  # replacements stay pending, so the budget stays spent
        core.patch_node(node, {"spec": {"unschedulable": True}})

    def evict(name: str) -> Any:
        body = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=name, namespace="default"))
        return core.create_namespaced_pod_eviction(name, "default", body)

    evict(names[0])
    with pytest.raises(ApiException) as refused:
        evict(names[1])
    status = json.loads(refused.value.body)
    assert refused.value.status == 429
    assert (status["kind"], status["reason"], status["message"]) == (
        "Status", "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
    with pytest.raises(ApiException) as missing:
        evict("web-nope")
    assert missing.value.status == 404
    assert server.world.report()["running_pods_evicted"] == 1


def test_disruption_budgets_through_the_policy_api(server: SandboxServer) -> None:
    policy = k8s.PolicyV1Api(kube_api_client(server))
    (pdb,) = policy.list_pod_disruption_budget_for_all_namespaces().items
    assert pdb.spec.max_unavailable == 1 and pdb.spec.selector.match_labels == {"app": "web"}
    assert (pdb.status.expected_pods, pdb.status.current_healthy, pdb.status.disruptions_allowed) == (3, 3, 1)
    assert policy.read_namespaced_pod_disruption_budget("web", "default").metadata.name == "web"
    assert policy.list_namespaced_pod_disruption_budget("kube-system").items == []


def test_deleting_a_pod_returns_it_terminating(core: k8s.CoreV1Api) -> None:
    running = core.list_namespaced_pod("default", label_selector="app=batch", field_selector="status.phase=Running").items[0]
    deleted = core.delete_namespaced_pod(running.metadata.name, "default")
    assert deleted.metadata.deletion_timestamp is not None


def test_events_can_be_created_and_listed(core: k8s.CoreV1Api) -> None:
    event = k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(generate_name="pool-a000000."),
        involved_object=k8s.V1ObjectReference(kind="Node", name="pool-a000000"),
        reason="ScaleDown", message="node removed", type="Normal",
        source=k8s.V1EventSource(component="autoscaler"),
    )
    created = core.create_namespaced_event("default", event)
    assert created.metadata.name.startswith("pool-a000000.") and created.metadata.uid
    listed = core.list_namespaced_event("default", field_selector="involvedObject.name=pool-a000000,reason=ScaleDown")
    assert [e.message for e in listed.items] == ["node removed"]
    assert len(core.list_event_for_all_namespaces().items) == 1


def test_configmap_lifecycle(core: k8s.CoreV1Api) -> None:
    body = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="autoscaler-status"), data={"status": "Healthy"})
    created = core.create_namespaced_config_map("kube-system", body)
    with pytest.raises(ApiException) as exists:
        core.create_namespaced_config_map("kube-system", body)
    assert exists.value.status == 409 and json.loads(exists.value.body)["reason"] == "AlreadyExists"
    created.data = {"status": "Degraded"}
    replaced = core.replace_namespaced_config_map("autoscaler-status", "kube-system", created)
    assert replaced.data == {"status": "Degraded"}
    patched = core.patch_namespaced_config_map("autoscaler-status", "kube-system", {"data": {"extra": "1"}})
    assert patched.data == {"status": "Degraded", "extra": "1"}
    assert [c.metadata.name for c in core.list_namespaced_config_map("kube-system").items] == ["autoscaler-status"]
    core.delete_namespaced_config_map("autoscaler-status", "kube-system")
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map("autoscaler-status", "kube-system")
    assert gone.value.status == 404
    with pytest.raises(ApiException) as no_namespace:
        core.create_namespaced_config_map("missing", body)
    assert no_namespace.value.status == 404


def test_injected_faults_fail_the_next_calls(server: SandboxServer, core: k8s.CoreV1Api) -> None:
    # 500, not 503: urllib3 (under the client) retries 429/503 answers that carry Retry-After by itself.
    server.world.inject_fault(("k8s", "GET", "pods"), status=500, count=1, retry_after=2)
    with pytest.raises(ApiException) as caught:
        core.list_pod_for_all_namespaces()
    assert caught.value.status == 500 and caught.value.headers["Retry-After"] == "2"
    assert json.loads(caught.value.body)["reason"] == "InternalError"
    assert len(core.list_pod_for_all_namespaces().items) == 8
    counts = server.world.report()["api_calls"]
    assert counts["k8s_reads"] == 2 and counts["breakdown"]["k8s"]["LIST pods"] == 2 and counts["faults_triggered"] == 1


def test_calls_are_counted_as_reads_and_writes(server: SandboxServer, core: k8s.CoreV1Api) -> None:
    core.list_node()
    core.read_node("pool-a000000")
    core.patch_node("pool-a000000", {"metadata": {"labels": {"x": "y"}}})
    counts = server.world.report()["api_calls"]
    assert (counts["k8s_reads"], counts["k8s_writes"]) == (2, 1)
    assert counts["breakdown"]["k8s"] == {"GET nodes": 1, "LIST nodes": 1, "PATCH nodes": 1}


def test_scheduling_fields_round_trip_through_the_official_client(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory("multi-pool", clock=ManualClock(SANDBOX_START))
    server.clock.advance(60)
    core = k8s.CoreV1Api(kube_api_client(server))
    pods = {p.metadata.name.rsplit("-", 1)[0]: p for p in core.list_namespaced_pod("default").items}
    web = pods["web"].spec.affinity.pod_anti_affinity.required_during_scheduling_ignored_during_execution[0]
    assert (web.topology_key, web.label_selector.match_labels) == ("kubernetes.io/hostname", {"app": "web"})
    training = pods["training"].spec
    assert training.containers[0].resources.requests["nvidia.com/gpu"] == "1"
    assert training.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
    assert (training.tolerations[0].key, training.tolerations[0].operator) == ("nvidia.com/gpu", "Exists")
    assert pods["batch"].spec.containers[0].resources.requests["ephemeral-storage"] == "2Gi"
    (general,) = core.list_node().items
    assert general.status.allocatable["ephemeral-storage"] == "111Gi"

    spread = k8s.V1TopologySpreadConstraint(
        max_skew=1, topology_key="topology.kubernetes.io/zone", when_unsatisfiable="DoNotSchedule",
        label_selector=k8s.V1LabelSelector(match_labels={"app": "probe"}))
    body = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="probe", labels={"app": "probe"}),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(
            name="c", image="busybox", ports=[k8s.V1ContainerPort(container_port=80, host_port=8080)],
            resources=k8s.V1ResourceRequirements(requests={"cpu": "100m"}))], topology_spread_constraints=[spread]))
    core.create_namespaced_pod("default", body)
    probe = core.read_namespaced_pod("probe", "default")
    assert probe.spec.node_name == general.metadata.name
    assert probe.spec.topology_spread_constraints[0].max_skew == 1
    with pytest.raises(ApiException) as refused:
        bad = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="bad"), spec=k8s.V1PodSpec(
            containers=[k8s.V1Container(name="c", image="busybox")], topology_spread_constraints=[
                k8s.V1TopologySpreadConstraint(max_skew=0, topology_key="k", when_unsatisfiable="DoNotSchedule")]))
        core.create_namespaced_pod("default", bad)
    assert refused.value.status == 422 and "maxSkew" in json.loads(refused.value.body)["message"]
