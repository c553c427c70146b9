"""The scenario's AKS virtual node (virtual-kubelet + Azure Container Instances): its Node, the provider creating
or refusing container groups, start latency, quota and creation rate, billing and the report."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox.model import aci
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world import World, pod_lifecycle
from sandbox.world.compute import private_ip
from tests.sandbox.helpers import job, scenario

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
V1 = "virtual-node-aci-linux"
TOLERATE = [{"key": "virtual-kubelet.io/provider", "operator": "Exists", "effect": "NoSchedule"}]
ON_ACI = {"tolerations": TOLERATE, "node_selector": {"type": "virtual-kubelet"}}  # only the virtual node fits
QUOTA_MESSAGE = ("ContainerGroupQuotaReached: Resource type 'Microsoft.ContainerInstance/containerGroups' container group "
                 "quota 'StandardCores' exceeded in region 'westeurope'. Limit: '4', Usage: '4' Requested: '1'.")


def make(workloads: list[dict[str, Any]] | None = None, seed: int = 0, **virtual_node: Any) -> World:
    virtual = {"start_latency": "30s", **virtual_node}
    return World(scenario(workloads=workloads or [], virtual_node=virtual), seed=seed, start=START)


def replicas(name: str, count: int, *, cpu: str = "1", memory: str = "1Gi", **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "ReplicaSet", "count": count, "requests": {"cpu": cpu, "memory": memory}, **extra}


def workload_pods(world: World) -> list[dict[str, Any]]:
    return [p for p in world.k8s_list("pods", "default")]


def by_phase(world: World) -> dict[str, list[str]]:
    phases: dict[str, list[str]] = {}
    for pod in workload_pods(world):
        phases.setdefault(pod["status"]["phase"], []).append(pod["metadata"]["name"])
    return phases


def refused(world: World) -> list[dict[str, Any]]:
    return [p for p in workload_pods(world) if p["status"].get("reason") == "ProviderFailed"]


def api_pod(name: str, *, cpu: str = "1", restart: str = "Always", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
                 "restartPolicy": restart, "tolerations": TOLERATE, "nodeSelector": {"type": "virtual-kubelet"}, **spec},
    }


# ---------------------------------------------------------------------------- the Node


def test_the_v1_node_is_ready_from_the_start_with_virtual_kubelets_labels_taint_and_capacity() -> None:
    world = make()
    node = world.k8s_get("nodes", "", V1)
    assert node["metadata"]["labels"] == {
        "type": "virtual-kubelet",
        "kubernetes.io/role": "agent",
        "kubernetes.io/hostname": V1,
        "kubernetes.io/os": "linux",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.azure.com/managed": "false",
        "node.kubernetes.io/exclude-from-external-load-balancers": "true",
        "alpha.service-controller.kubernetes.io/exclude-balancer": "true",
    }
    assert node["spec"]["taints"] == [{"key": "virtual-kubelet.io/provider", "value": "azure", "effect": "NoSchedule"}]
    assert node["status"]["capacity"] == node["status"]["allocatable"] == {"cpu": "10000", "memory": "4Ti", "pods": "5000"}
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    # Nothing ties it to a scale set instance: no providerID, an InternalIP no VM has.
    assert "providerID" not in node["spec"]
    (address,) = node["status"]["addresses"]
    assert address["type"] == "InternalIP"
    assert address["address"] not in {private_ip(i) for i in range(0, 2000)}
    assert world.scale_down_order() == [] and V1 not in world.state()["idle_nodes"].get("rg-test/pool-a", [])


def test_the_v2_node_selects_by_virtualization_and_holds_200_pods() -> None:
    world = make(version=2)
    node = world.k8s_get("nodes", "", "virtual-node-v2-0")
    labels = node["metadata"]["labels"]
    assert labels["virtualization"] == "virtualnode2" and "type" not in labels
    assert labels["kubernetes.io/hostname"] == "virtual-node-v2-0" and labels["kubernetes.azure.com/managed"] == "false"
    assert node["spec"]["taints"] == [{"key": "virtual-kubelet.io/provider", "value": "azure", "effect": "NoSchedule"}]
    assert node["status"]["capacity"]["pods"] == "200"


def test_no_daemonset_or_mirror_pod_ever_runs_on_the_virtual_node() -> None:
    doc = scenario(virtual_node={})
    doc["node_groups"][0]["mirror_pods"] = [{"name": "kube-proxy-static"}]
    world = World(doc, start=START)  # kube-proxy tolerates every taint, as node agents commonly do
    world.advance_by(600)
    system = [p for p in world.k8s_list("pods", "kube-system")]
    assert system and all(p["spec"]["nodeName"] == "pool-a000000" for p in system)


def test_a_client_can_cordon_and_taint_the_virtual_node_and_the_scheduler_honours_it() -> None:
    world = make()
    node = world.k8s_get("nodes", "", V1)
    node["spec"]["unschedulable"] = True
    world.k8s_replace("nodes", "", V1, node)
    world.k8s_create("pods", "default", api_pod("cordoned"))
    pod = world.k8s_get("pods", "default", "cordoned")
    assert "nodeName" not in pod["spec"] and pod["status"]["phase"] == "Pending"
    # Not a write to a node an autoscaler must leave alone: it may gate a virtual node (a taint) and move pods off.
    assert world.report()["unmanaged_nodes_touched"] == {}
    node = world.k8s_get("nodes", "", V1)
    node["spec"]["unschedulable"] = False
    world.k8s_replace("nodes", "", V1, node)
    world.advance_by(1)
    assert world.k8s_get("pods", "default", "cordoned")["spec"]["nodeName"] == V1
    assert world.k8s_get("nodes", "", V1)["metadata"]["labels"]["type"] == "virtual-kubelet"


# ---------------------------------------------------------------------------- running pods on ACI


@pytest.mark.parametrize("bill_start_latency, billed_seconds", [(True, 130), (False, 100)])
def test_a_tolerating_pod_runs_after_the_start_latency_and_is_billed_from_creation_or_start_to_end(
    bill_start_latency: bool, billed_seconds: int,
) -> None:
    world = make([job("burst", cpu="1500m", memory="2Gi", duration="100s", **ON_ACI)],
                 bill_start_latency=bill_start_latency)
    (pod,) = workload_pods(world)
    assert pod["spec"]["nodeName"] == V1
    assert pod["status"]["phase"] == "Pending"  # bound, container group being created
    assert pod["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert "startTime" not in pod["status"]
    world.advance_by(29.9)
    assert by_phase(world) == {"Pending": [pod["metadata"]["name"]]}
    assert world.virtual_node_usage().creating == (f"default/{pod['metadata']['name']}",)
    world.advance_by(0.1)
    running = workload_pods(world)[0]
    assert running["status"]["phase"] == "Running" and running["status"]["startTime"] == "2030-01-07T09:00:30Z"
    assert {c["type"]: c["status"] for c in running["status"]["conditions"]}["Ready"] == "True"
    world.advance_by(99.9)
    assert by_phase(world) == {"Running": [pod["metadata"]["name"]]}  # the duration counts from the start
    world.advance_by(0.1)
    assert by_phase(world) == {"Succeeded": [pod["metadata"]["name"]]}
    report = world.report()
    vn = report["virtual_node"]
    # ACI sizes 1500m as 1.5 vCPU and 2Gi (2147483648 bytes) as 2.1 GB (floored to tenths of 10^9 bytes).
    # Billed from the creation (the start latency included: ACI bills from the image pull) or from the start.
    assert (vn["vcpu_seconds"], vn["gb_seconds"]) == pytest.approx((1.5 * billed_seconds, 2.1 * billed_seconds))
    assert vn["cost_usd"] == pytest.approx(1.5 * billed_seconds * aci.DEFAULT_PRICE_VCPU_SECOND
                                           + 2.1 * billed_seconds * aci.DEFAULT_PRICE_GB_SECOND, abs=1e-6)
    assert vn["bill_start_latency"] is bill_start_latency
    assert (vn["pods_started"], vn["start_latency_p50"], vn["start_latency_p95"]) == (1, 30.0, 30.0)
    assert (vn["peak_cores"], vn["cores_in_use"]) == (1.5, 0.0)
    assert vn["pods_ran"] == [f"default/{pod['metadata']['name']}"]
    assert vn["placements"] == {"default/burst": {"virtual": 1, "refused": 0, "vm": 0, "none": 0}}
    # The wait runs until the container runs on ACI, not until the bind.
    (summary,) = report["pods"]
    assert (summary["bound"], summary["started"], summary["finished"]) == (0.0, 30.0, 130.0)
    assert report["pod_wait_seconds"]["max"] == 30.0
    assert report["done"] and report["done_reason"] == "workload-complete"


def test_a_pod_running_on_aci_is_billed_up_to_now_and_released_at_once_when_deleted() -> None:
    world = make([replicas("web", 2, cpu="2", memory="1Gi", **ON_ACI)])
    world.advance_by(90)  # created 90 s ago, running for 60 s: billed from the creation
    vn = world.report()["virtual_node"]
    assert (vn["vcpu_seconds"], vn["gb_seconds"], vn["cores_in_use"]) == (2 * 2 * 90, 2 * 1.0 * 90, 4.0)
    assert (vn["container_groups"], vn["peak_container_groups"]) == (2, 2)
    name = workload_pods(world)[0]["metadata"]["name"]
    world.k8s_delete("pods", "default", name)  # graceful: virtual-kubelet deletes the group, then the pod
    assert name not in [p["metadata"]["name"] for p in workload_pods(world)]
    assert world.virtual_node_usage().cores_in_use == 2.0  # its cores are back at once
    world.advance_by(0)  # the ReplicaSet's replacement, bound at the next pass
    usage = world.virtual_node_usage()
    assert usage.cores_in_use == 4.0 and len(usage.running) == 1 and len(usage.creating) == 1
    world.advance_by(60)
    vn = world.report()["virtual_node"]
    assert vn["vcpu_seconds"] == 2 * 90 + 2 * 150 + 2 * 60  # the deleted one stopped at 90 s, its replacement began


def test_a_pod_that_does_not_tolerate_the_taint_never_goes_to_the_virtual_node() -> None:
    world = make([job("picky", node_selector={"type": "virtual-kubelet"}), job("plain", cpu="8")])
    world.advance_by(600)
    for pod in workload_pods(world):
        assert pod["spec"].get("nodeName") != V1
        assert pod["status"]["phase"] == "Pending"
        (scheduled,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert scheduled["status"] == "False"
    assert world.report()["virtual_node"]["pods_started"] == 0


def test_a_pod_created_naming_the_virtual_node_goes_through_the_provider() -> None:
    world = make()
    body = api_pod("pinned")
    body["spec"]["nodeName"] = V1
    world.k8s_create("pods", "default", body)
    assert world.k8s_get("pods", "default", "pinned")["status"]["phase"] == "Pending"
    world.advance_by(30)
    assert world.k8s_get("pods", "default", "pinned")["status"]["phase"] == "Running"


def test_start_latencies_are_drawn_per_pod_from_the_seed() -> None:
    def latencies(seed: int) -> list[float]:
        doc = scenario(workloads=[job("burst", 20, **ON_ACI)], virtual_node={})
        world = World(doc, seed=seed, start=START)
        world.advance_by(400)
        return [p["started"] - p["bound"] for p in world.report()["pods"]]

    first = latencies(1)
    assert first == latencies(1) and first != latencies(2)
    assert all(10.0 <= value <= 180.0 for value in first) and len(set(first)) > 10  # the default lognormal


# ---------------------------------------------------------------------------- refusals


def test_the_regional_core_quota_leaves_a_deployments_extra_pod_pending_with_provider_failed() -> None:
    world = make([replicas("web", 5, **ON_ACI)], quota_cores=4)
    (stuck,) = refused(world)
    assert stuck["spec"]["nodeName"] == V1  # bound, and left there: nothing retries it
    assert (stuck["status"]["phase"], stuck["status"]["message"]) == ("Pending", QUOTA_MESSAGE)
    events = [e for e in world.k8s_list("events", "default") if e["involvedObject"]["name"] == stuck["metadata"]["name"]]
    assert [(e["type"], e["reason"], e["message"]) for e in events] == [("Warning", "ProviderCreateFailed", QUOTA_MESSAGE)]
    world.advance_by(600)
    assert len(workload_pods(world)) == 5  # still counted by its ReplicaSet: no replacement
    assert refused(world)[0]["status"]["phase"] == "Pending"
    # It never runs, so it does not hold up `done`; it is reported as stuck instead.
    state = world.state()
    assert state["done"] and state["pending_provider_failed"] == 1 and state["pending"] == 1
    vn = world.report()["virtual_node"]
    assert vn["pods_refused"] == {"quota": 1, "rate": 0, "unsupported": 0}
    assert (vn["pods_stuck"], vn["pods_stuck_names"]) == (1, [f"default/{stuck['metadata']['name']}"])
    assert vn["placements"] == {"default/web": {"virtual": 4, "refused": 1, "vm": 0, "none": 0}}
    assert world.virtual_node_usage().stuck == (f"default/{stuck['metadata']['name']}",)


def test_under_restart_policy_never_the_refused_pod_fails_and_a_new_pod_starts_once_cores_are_released() -> None:
    world = make([job("batch", 4, duration="100s", **ON_ACI)], quota_cores=4)
    world.k8s_create("pods", "default", api_pod("one-off", restart="Never"))
    pod = world.k8s_get("pods", "default", "one-off")
    assert (pod["status"]["phase"], pod["status"]["reason"], pod["status"]["message"]) == (
        "Failed", "ProviderFailed", QUOTA_MESSAGE)
    assert world.report()["pods"][-1]["outcome"] == "failed"
    world.advance_by(130)  # the four Jobs ran 30..130 s
    assert world.virtual_node_usage().cores_in_use == 0.0
    world.k8s_create("pods", "default", api_pod("later", restart="Never"))
    assert world.k8s_get("pods", "default", "later")["status"]["phase"] == "Pending"
    world.advance_by(30)
    assert world.k8s_get("pods", "default", "later")["status"]["phase"] == "Running"
    assert world.report()["virtual_node"]["pods_refused"]["quota"] == 1


def test_a_jobs_refused_pod_is_replaced_after_the_job_controllers_back_off() -> None:
    world = make([job("batch", 5, duration="100s", **ON_ACI)], quota_cores=4)
    (failed,) = refused(world)
    assert failed["status"]["phase"] == "Failed"
    # Replacements at 10 s, then 20 s and 40 s later (10 s doubled per failure): refused while the first four run.
    world.advance_by(149)
    assert world.report()["virtual_node"]["pods_refused"]["quota"] == 4
    world.advance_by(2)  # the fourth replacement comes at 150 s, after the first four finished at about 130 s
    assert world.report()["virtual_node"]["pods_refused"]["quota"] == 4
    world.advance_by(400)
    report = world.report()
    assert report["pods_completed"] == 5 and report["done"]


def test_the_creation_rate_limits_refuse_with_the_window_they_exceed() -> None:
    world = make([replicas("web", 3, **ON_ACI)], creates_per_5min=2)
    (stuck,) = refused(world)
    assert stuck["status"]["message"] == "The number of container group creations exceeded the limit of '2' in 5 minutes"
    assert world.report()["virtual_node"]["pods_refused"] == {"quota": 0, "rate": 1, "unsupported": 0}
    world.advance_by(299)
    world.k8s_create("pods", "default", api_pod("early"))
    assert world.k8s_get("pods", "default", "early")["status"]["reason"] == "ProviderFailed"
    world.advance_by(1)  # the first two creations are 300 s old
    world.k8s_create("pods", "default", api_pod("in-time"))
    assert world.k8s_get("pods", "default", "in-time")["status"].get("reason") is None
    usage = world.virtual_node_usage()
    assert (usage.creates_last_5min, usage.creates_last_hour) == (1, 3)

    hourly = make([replicas("web", 3, **ON_ACI)], creates_per_hour=2)
    (stuck,) = refused(hourly)
    assert stuck["status"]["message"] == "The number of container group creations exceeded the limit of '2' in 1 hour"


def test_the_container_group_count_is_a_concurrent_limit_refused_with_acis_quota_error() -> None:
    # Small pods: the count binds long before the 100 cores do.
    world = make([replicas("web", 3, cpu="100m", **ON_ACI)], max_container_groups=2)
    (stuck,) = refused(world)
    assert stuck["status"]["message"] == (
        "ContainerGroupQuotaReached: Resource type 'Microsoft.ContainerInstance/containerGroups' container group quota "
        "'ContainerGroups' exceeded in region 'westeurope'. Limit: '2', Usage: '2' Requested: '1'.")
    vn = world.report()["virtual_node"]
    assert vn["pods_refused"]["quota"] == sum(vn["pods_refused_by_quota"].values()) == 1
    assert vn["pods_refused_by_quota"] == {"StandardCores": 0, "ContainerGroups": 1}
    assert (vn["max_container_groups"], vn["container_groups"], vn["peak_container_groups"]) == (2, 2, 2)
    usage = world.virtual_node_usage()
    assert (usage.container_groups, usage.max_container_groups) == (2, 2) and usage.cores_in_use == 0.2
    # Concurrent, not a rate: once a group is deleted, the next creation (the ReplicaSet's replacement) succeeds.
    world.k8s_delete("pods", "default", usage.creating[0].split("/")[1])
    world.advance_by(0)
    assert [p["metadata"]["name"] for p in refused(world)] == [stuck["metadata"]["name"]]
    vn = world.report()["virtual_node"]
    assert (vn["container_groups"], vn["peak_container_groups"], vn["pods_refused"]["quota"]) == (2, 2, 1)


def test_a_job_fails_once_more_than_its_backoff_limit_of_pods_failed_and_makes_no_more() -> None:
    volumes = [{"name": "data", "hostPath": {"path": "/var/data"}}]  # every pod of it is refused
    world = make([job("batch", volumes=volumes, **ON_ACI)])
    world.advance_by(3600)  # back-offs of 10, 20, 40, 80, 160, 320 s: far less than an hour
    jobs = world.report()["virtual_node"]["jobs"]
    assert jobs["backoff_limit"] == pod_lifecycle.JOB_BACKOFF_LIMIT
    # The first pod and backoff_limit replacements failed; the last failure failed the Job, which made no more.
    assert len(workload_pods(world)) == jobs["backoff_limit"] + 1 == len(refused(world))
    assert (jobs["failed"], jobs["failed_names"]) == (1, ["default/batch"])
    assert (jobs["tasks_of_failed_jobs"], jobs["tasks_never_run"], jobs["tasks_never_created"]) == (1, 1, 0)
    assert jobs["assumptions"] and world.state()["done"]


def test_a_failed_job_deletes_its_active_pods_and_its_later_work_never_gets_a_pod() -> None:
    # Two pods fit the 2-core quota and run; the other eight are refused, past the backoff limit of 6.
    spec = job("batch", 10, duration="1000s", repeat={"every": "600s", "times": 2}, **ON_ACI)
    world = make([spec, job("other", duration="100s", **ON_ACI)], quota_cores=3)
    world.advance_by(60)
    jobs = world.report()["virtual_node"]["jobs"]
    assert jobs["failed_names"] == ["default/batch"]
    live = [p for p in workload_pods(world) if p["metadata"]["labels"]["app"] == "batch"]
    assert all(p["status"]["phase"] == "Failed" for p in live)  # the refused ones; the running ones were deleted
    assert {p["metadata"]["labels"]["app"] for p in workload_pods(world) if p["status"]["phase"] == "Running"} == {"other"}
    world.advance_by(1200)  # the second wave arrives for a failed Job: no pods
    jobs = world.report()["virtual_node"]["jobs"]
    assert (jobs["tasks_of_failed_jobs"], jobs["tasks_never_run"], jobs["tasks_never_created"]) == (20, 20, 10)
    assert world.report()["pods_completed"] == 1  # "other", whose Job never failed
    assert world.virtual_node_usage().cores_in_use == 0.0


def test_a_job_failing_inside_a_scheduling_pass_leaves_its_pods_still_queued_in_that_pass_unbound_or_gone() -> None:
    # One core of quota: the first pod runs, the next seven are refused in the same pass (the seventh fails the
    # Job), and the last four are still queued in that pass when it does.
    world = make([job("batch", 12, duration="100s", **ON_ACI)], quota_cores=1)
    world.advance_by(1)
    jobs = world.report()["virtual_node"]["jobs"]
    assert jobs["failed"] == 1 and jobs["tasks_never_run"] == 12
    assert {p["status"]["phase"] for p in workload_pods(world)} == {"Failed"}
    assert len(refused(world)) == len(workload_pods(world)) <= jobs["backoff_limit"] + 1 + 4


def test_a_host_path_volume_is_refused_as_unsupported() -> None:
    volumes = [{"name": "data", "hostPath": {"path": "/var/data"}}]
    world = make([replicas("web", 1, volumes=volumes, **ON_ACI), job("batch", volumes=volumes, **ON_ACI)])
    by_workload = {p["metadata"]["labels"]["app"]: p for p in refused(world)}
    assert by_workload["web"]["status"]["phase"] == "Pending" and by_workload["batch"]["status"]["phase"] == "Failed"
    name = by_workload["web"]["metadata"]["name"]
    assert by_workload["web"]["status"]["message"] == f"pod {name} requires volume data which is of an unsupported type hostPath"
    assert world.report()["virtual_node"]["pods_refused"]["unsupported"] == 2
    assert world.virtual_node_usage().cores_in_use == 0.0  # refused pods hold no ACI cores


def test_no_virtual_node_means_no_accessor_data_and_a_null_report_block() -> None:
    world = World(scenario(workloads=[job("w")]), start=START)
    assert world.virtual_node_usage() is None and world.report()["virtual_node"] is None
    assert "pending_provider_failed" not in world.state()
    assert [n["metadata"]["name"] for n in world.k8s_list("nodes")] == ["pool-a000000"]


# ---------------------------------------------------------------------------- the pure rules


def pod_json(**spec: Any) -> dict[str, Any]:
    containers = spec.pop("containers", [{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}])
    return {"metadata": {"name": "p"}, "spec": {"containers": containers, **spec}}


@pytest.mark.parametrize(
    ("spec", "version", "problem"),
    [
        ({"hostNetwork": True}, 1, "pod p sets hostNetwork, which virtual nodes do not support"),
        ({"hostPID": True}, 2, "pod p sets hostPID, which virtual nodes do not support"),
        ({"volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": "x"}}]}, 1,
         "pod p requires volume c which is of an unsupported type persistentVolumeClaim"),
        ({"volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": "x"}}]}, 2, None),
        ({"volumes": [{"name": "d", "csi": {"driver": "disk.csi.azure.com"}}]}, 1,
         "pod p requires volume d which is of an unsupported type disk.csi.azure.com"),
        ({"volumes": [{"name": "f", "csi": {"driver": "file.csi.azure.com"}}, {"name": "e", "emptyDir": {}},
                      {"name": "s", "secret": {"secretName": "s"}}, {"name": "m", "configMap": {"name": "m"}},
                      {"name": "p", "projected": {"sources": []}}, {"name": "a", "azureFile": {"shareName": "x"}},
                      {"name": "g", "gitRepo": {"repository": "r"}}]}, 1, None),
        ({"volumes": [{"name": "d", "downwardAPI": {"items": []}}]}, 1,
         "pod p requires volume d which is of an unsupported type downwardAPI"),
        ({"initContainers": [{"name": "setup"}]}, 1, "pod p has init container setup, which virtual nodes do not support"),
        ({"initContainers": [{"name": "setup"}]}, 2, None),
        ({"containers": [{"name": "main", "securityContext": {"privileged": True}}]}, 1,
         "pod p has privileged container main, which virtual nodes do not support"),
        ({"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}, 1,
         "the pod requires GPU resource, but ACI doesn't provide GPU enabled container group in region westeurope"),
        ({"containers": [{"name": "a", "resources": {"requests": {"cpu": "16"}}},
                         {"name": "b", "resources": {"requests": {"cpu": "16"}}}]}, 1,
         "The container group of pod p requests 32 CPU and 3 GB, more than the 31 CPU and 240 GB a container group "
         "may have in region 'westeurope'."),
        ({"containers": [{"name": "a", "resources": {"requests": {"cpu": "31", "memory": "240G"}}}]}, 1, None),
    ],
)
def test_what_the_provider_cannot_run(spec: dict[str, Any], version: int, problem: str | None) -> None:
    assert aci.unsupported(pod_json(**spec), version, "westeurope") == problem


def test_container_groups_are_sized_as_the_provider_converts_requests() -> None:
    size = aci.container_group_size(pod_json(containers=[
        {"name": "a", "resources": {"requests": {"cpu": "1505m", "memory": "2Gi"}}},  # 1.50 vCPU, 2.1 GB
        {"name": "b", "resources": {"limits": {"cpu": "250m", "memory": "100M"}}},  # limits stand in: 0.25, 0.1
        {"name": "c"},  # nothing asked: 1 vCPU, 1.5 GB
        {"name": "d", "resources": {"requests": {"cpu": "1m", "memory": "1Ki"}}},  # the minimums: 0.01, 0.1
    ]))
    assert (size.centicores, size.decigb) == (150 + 25 + 100 + 1, 21 + 1 + 15 + 1)


def test_checks_come_in_the_order_the_calls_fail() -> None:
    def check(pod: dict[str, Any], held: int, creates: list[float]) -> aci.Refusal | None:
        return aci.check_create(pod, version=1, region="westeurope", quota_cores=4, creates_per_5min=2,
                                creates_per_hour=3, held_centicores=held, creates=creates, now=4000.0)

    host = pod_json(hostIPC=True)
    assert check(host, 400, [3999.0, 3999.0]).kind == "unsupported"  # type: ignore[union-attr]
    assert check(pod_json(), 400, [3999.0, 3999.0]).kind == "rate"  # type: ignore[union-attr]
    assert check(pod_json(), 400, [3000.0, 3500.0, 3999.0]).kind == "rate"  # type: ignore[union-attr]
    assert check(pod_json(), 400, [300.0, 3000.0, 3999.0]).kind == "quota"  # type: ignore[union-attr]
    assert check(pod_json(), 300, [300.0, 3000.0, 3999.0]) is None


# ---------------------------------------------------------------------------- the scenario field


@pytest.mark.parametrize(
    ("field", "path", "problem"),
    [
        ({"version": 3}, "$.virtual_node.version", "must be 1 (the AKS add-on) or 2 (Virtual Nodes v2), got 3"),
        ({"version": True}, "$.virtual_node.version", "must be 1 (the AKS add-on) or 2 (Virtual Nodes v2), got True"),
        ({"zone": "1"}, "$.virtual_node.zone", "unknown field"),
        ({"name": "Virtual_Node"}, "$.virtual_node.name", "'Virtual_Node' is not a valid node name"),
        ({"name": "pool-a-virtual"}, "$.virtual_node.name", "could be the name of a node of scale set 'pool-a'"),
        ({"quota_cores": -1}, "$.virtual_node.quota_cores", "must be at least 0, got -1"),
        ({"creates_per_hour": "300"}, "$.virtual_node.creates_per_hour", "must be a whole number"),
        ({"price_gb_second": -0.1}, "$.virtual_node.price_gb_second", "must be a number of USD at least 0"),
        ({"price_vcpu_second": "cheap"}, "$.virtual_node.price_vcpu_second", "must be a number of USD at least 0"),
        ({"start_latency": {"median": "30s"}}, "$.virtual_node.start_latency.p95", "required field is missing"),
        ({"start_latency": "soon"}, "$.virtual_node.start_latency", "soon"),
        ([], "$.virtual_node", "must be an object"),
    ],
)
def test_a_bad_virtual_node_field_is_reported_with_its_path(field: Any, path: str, problem: str) -> None:
    with pytest.raises(ScenarioError) as error:
        load_scenario(scenario(virtual_node=field))
    assert error.value.path == path and problem in error.value.problem


def test_the_virtual_node_field_defaults_to_the_aks_add_on() -> None:
    spec = load_scenario(scenario(virtual_node={})).virtual_node
    assert spec is not None
    assert (spec.name, spec.version, spec.quota_cores, spec.creates_per_5min, spec.creates_per_hour) == (
        V1, 1, 100, 100, 300)
    assert (spec.start_latency.kind, spec.start_latency.median, spec.start_latency.p95) == ("lognormal", 30.0, 60.0)
    assert (spec.start_latency.low, spec.start_latency.high) == (10.0, 180.0)
    assert load_scenario(scenario()).virtual_node is None
    k3s = scenario(flavour="k3s", virtual_node={"name": "k3s-server"})
    with pytest.raises(ScenarioError, match="k3s server"):
        load_scenario(k3s)
