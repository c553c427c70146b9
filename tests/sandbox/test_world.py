"""The world in-process, in virtual time: no HTTP, exact times from fixed delays."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox.world import World
from sandbox.world.errors import ArmError, KubeError
from tests.sandbox.helpers import POOL, RG, job, scenario

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
SUB = "11111111-2222-3333-4444-555555555555"


def make(doc: dict[str, Any] | None = None, seed: int = 0) -> World:
    return World(doc or scenario(), seed=seed, start=START)


def pods(world: World, **phase: str) -> list[dict[str, Any]]:
    """Workload pods (not DaemonSet pods), optionally filtered by phase."""
    items = [p for p in world.k8s_list("pods") if p["metadata"]["namespace"] == "default"]
    return [p for p in items if not phase or p["status"]["phase"] == phase["phase"]]


def pool(world: World) -> Any:
    return world.scale_set(SUB, RG, POOL)


def test_initial_nodes_are_ready_with_the_expected_identity() -> None:
    world = make()
    (node,) = world.k8s_list("nodes")
    assert node["metadata"]["name"] == "pool-a000000"
    assert node["spec"]["providerID"] == (
        f"azure:///subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/{POOL}/virtualMachines/0"
    )
    labels = node["metadata"]["labels"]
    expected = {
        "kubernetes.io/hostname": "pool-a000000",
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "Standard_D4s_v5",
        "topology.kubernetes.io/region": "westeurope",
        "topology.kubernetes.io/zone": "0",
        "agentpool": POOL,
        "pool": "a",
    }
    assert {k: labels.get(k) for k in expected} == expected
    assert node["status"]["allocatable"] == {"cpu": "4", "memory": "16Gi", "pods": "110"}
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
    (ds_pod,) = [p for p in world.k8s_list("pods") if p["metadata"]["namespace"] == "kube-system"]
    assert ds_pod["spec"]["nodeName"] == "pool-a000000"
    assert ds_pod["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"


def test_autoscaler_tags_mark_managed_scale_sets_only() -> None:
    doc = scenario()
    doc["node_groups"].append({"resource_group": RG, "name": "system", "vm_size": "Standard_D2s_v5",
                               "allocatable": {"cpu": "2", "memory": "8Gi"}, "initial": 1, "autoscaled": False,
                               "tags": {"team": "platform"}})
    world = make(doc)
    managed, unmanaged = pool(world), world.scale_set(SUB, RG, "system")
    assert {k: managed.tags[k] for k in ("cluster-autoscaler-enabled", "cluster-autoscaler-name", "min", "max")} == {
        "cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": "test-cluster", "min": "0", "max": "10"}
    assert unmanaged.tags == {"team": "platform"}
    assert [g.name for g in world.scale_sets(SUB, RG.upper())] == [POOL, "system"]  # resource groups ignore case


def test_growing_capacity_provisions_then_registers_nodes() -> None:
    world = make()
    op = world.set_capacity(pool(world), 3)
    assert sorted(op.instance_ids) == [1, 2]
    assert [i.state for i in world.instances(pool(world))] == ["Succeeded", "Creating", "Creating"]
    world.advance_by(29)
    assert op.status == "InProgress"
    world.advance_by(1)  # provisioning takes 50% of the 60 s boot delay
    assert [i.state for i in world.instances(pool(world))] == ["Succeeded"] * 3
    assert op.status == "Succeeded" and op.ended_at == 30
    assert len(world.k8s_list("nodes")) == 1  # provisioned is not registered
    world.advance_by(30)
    nodes = world.k8s_list("nodes")
    assert [n["metadata"]["name"] for n in nodes] == ["pool-a000000", "pool-a000001", "pool-a000002"]
    assert nodes[1]["metadata"]["creationTimestamp"] == "2030-01-07T09:01:00Z"
    assert world.state()["groups"][f"{RG}/{POOL}"] | {} == {
        "ready": 3, "booting": 0, "deleting": 0, "deallocated": 0, "target": 3, "min": 0, "max": 10, "idle": 3,
        "autoscaled": True}


def test_pending_pods_report_why_they_do_not_fit() -> None:
    world = make(scenario(workloads=[job("big", cpu="8")]))
    (pod,) = pods(world, phase="Pending")
    (cond,) = pod["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("PodScheduled", "False", "Unschedulable")
    assert cond["message"].startswith("0/1 nodes are available: 1 Insufficient cpu.")
    assert world.report()["pods_unschedulable"] == 1


TAINTED = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("taints", "pod_extra", "bound", "reason"),
    [
        ([], {}, True, None),
        ([TAINTED], {}, False, "node(s) had untolerated taint {dedicated: batch}"),
        ([TAINTED], {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "batch"}]}, True, None),
        ([TAINTED], {"tolerations": [{"operator": "Exists"}]}, True, None),
        ([{**TAINTED, "effect": "PreferNoSchedule"}], {}, True, None),
        ([{**TAINTED, "effect": "NoExecute"}], {"tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]},
         False, "untolerated taint"),
        ([], {"node_selector": {"pool": "a"}}, True, None),
        ([], {"node_selector": {"pool": "b"}}, False, "didn't match Pod's node affinity/selector"),
    ],
)
def test_scheduling_honours_taints_and_node_selectors(
    taints: list[dict[str, str]], pod_extra: dict[str, Any], bound: bool, reason: str | None
) -> None:
    doc = scenario(workloads=[job("w", **pod_extra)])
    doc["node_groups"][0]["taints"] = taints
    world = make(doc)
    (pod,) = pods(world)
    assert (pod["spec"].get("nodeName") is not None) is bound
    if reason:
        assert reason in pod["status"]["conditions"][0]["message"]


@pytest.mark.parametrize(
    ("cpu", "memory", "fits"),
    [("3900m", "1Gi", True), ("3901m", "1Gi", False), ("1", "15.875Gi", True), ("1", "16Gi", False)],
)
def test_requests_fit_allocatable_minus_what_is_bound(cpu: str, memory: str, fits: bool) -> None:
    world = make(scenario(workloads=[job("w", cpu=cpu, memory=memory)]))  # the DaemonSet pod holds 100m / 128Mi
    assert (pods(world)[0]["status"]["phase"] == "Running") is fits


def test_pod_count_limits_scheduling() -> None:
    doc = scenario(workloads=[job("w", count=3, cpu="10m", memory="10Mi")])
    doc["node_groups"][0]["allocatable"]["pods"] = 3  # the DaemonSet pod takes one slot
    world = make(doc)
    assert len(pods(world, phase="Running")) == 2
    assert "Too many pods" in pods(world, phase="Pending")[0]["status"]["conditions"][0]["message"]


def test_the_scheduler_packs_onto_the_most_allocated_node() -> None:
    doc = scenario(workloads=[job("first", cpu="2"), job("second", cpu="1", at="90s")])
    doc["node_groups"][0]["initial"] = 2
    world = make(doc)
    first_node = pods(world)[0]["spec"]["nodeName"]
    world.advance_by(90)
    second = next(p for p in pods(world) if p["metadata"]["name"].startswith("second"))
    assert second["spec"]["nodeName"] == first_node


def test_pods_complete_after_their_duration_and_stay_listed() -> None:
    world = make(scenario(workloads=[job("w", duration="60s")]))
    (pod,) = pods(world)
    assert pod["status"]["phase"] == "Running" and pod["status"]["startTime"] == "2030-01-07T09:00:00Z"
    world.advance_by(59.9)
    assert pods(world)[0]["status"]["phase"] == "Running"
    world.advance_by(0.1)
    (pod,) = pods(world)
    assert pod["status"]["phase"] == "Succeeded"
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "False"
    assert world.report()["pods_completed"] == 1
    assert world.done() == (True, "workload-complete")


def test_workload_pods_carry_annotations_volumes_and_deadline_as_given() -> None:
    volumes = [{"name": "scratch", "emptyDir": {}}, {"name": "cache", "hostPath": {"path": "/var/cache/w"}}]
    annotations = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    world = make(scenario(workloads=[job("w", duration="30m", volumes=volumes, active_deadline="20m",
                                         annotations=annotations)]))
    (pod,) = pods(world)
    assert pod["metadata"]["annotations"] == annotations
    assert pod["spec"]["activeDeadlineSeconds"] == 1200
    assert pod["spec"]["volumes"] == [
        {"name": "scratch", "emptyDir": {}}, {"name": "cache", "hostPath": {"path": "/var/cache/w", "type": ""}},
    ]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "scratch", "mountPath": "/mnt/scratch"}, {"name": "cache", "mountPath": "/mnt/cache"},
    ]
    assert pod["status"]["startTime"] == "2030-01-07T09:00:00Z"
    world.advance_by(25 * 60)  # past the deadline: enforcing it is kubelet's, which the sandbox is not
    assert pods(world)[0]["status"]["phase"] == "Running"
    (plain,) = pods(make(scenario(workloads=[job("p")])))
    assert "volumes" not in plain["spec"] and "activeDeadlineSeconds" not in plain["spec"]
    assert "volumeMounts" not in plain["spec"]["containers"][0]


def test_arrivals_spread_over_the_window() -> None:
    world = make(scenario(workloads=[job("w", count=20, cpu="10m", memory="10Mi", at="30s", spread="60s")]))
    assert pods(world) == []
    world.advance_by(60)
    arrived = len(pods(world))
    assert 0 < arrived < 20
    world.advance_by(30)
    assert len(pods(world)) == 20


PDB_WORKLOAD = job("web", count=2, cpu="100m", memory="100Mi", duration=None, labels={"app": "web"}, kind="ReplicaSet")


@pytest.mark.parametrize(
    ("budget", "allowed_evictions"),
    [({"min_available": 2}, 0), ({"min_available": 1}, 1), ({"max_unavailable": 1}, 1), ({"min_available": "50%"}, 1),
     ({"max_unavailable": "100%"}, 2), ({"max_unavailable": 0}, 0)],
)
def test_evictions_respect_disruption_budgets(budget: dict[str, Any], allowed_evictions: int) -> None:
    world = make(scenario(workloads=[PDB_WORKLOAD], pdbs=[{"name": "web", "selector": {"app": "web"}, **budget}]))
    names = [p["metadata"]["name"] for p in pods(world)]
    outcomes = []
    for name in names:
        try:
            world.evict("default", name)
            outcomes.append("evicted")
        except KubeError as refused:
            assert (refused.code, refused.reason) == (429, "TooManyRequests")
            assert refused.message == "Cannot evict pod as it would violate the pod's disruption budget."
            outcomes.append("refused")
    assert outcomes.count("evicted") == allowed_evictions
    assert world.report()["running_pods_evicted"] == allowed_evictions


def test_an_evicted_pod_terminates_after_its_grace_and_is_replaced() -> None:
    world = make(scenario(workloads=[job("w", duration="10m")]))
    (victim,) = pods(world)
    world.evict("default", victim["metadata"]["name"])
    terminating = world.k8s_get("pods", "default", victim["metadata"]["name"])
    assert terminating["metadata"]["deletionTimestamp"] == "2030-01-07T09:00:05Z"
    replacement = [p for p in pods(world) if p["metadata"]["name"] != victim["metadata"]["name"]]
    assert len(replacement) == 1
    assert replacement[0]["metadata"]["ownerReferences"][0]["kind"] == "Job"
    world.advance_by(5)
    with pytest.raises(KubeError) as gone:
        world.k8s_get("pods", "default", victim["metadata"]["name"])
    assert gone.value.code == 404
    report = world.report()
    assert report["running_pods_evicted"] == 1
    assert [p["outcome"] for p in report["pods"]] == ["evicted", "running"]


def test_evicting_a_missing_pod_is_not_found() -> None:
    with pytest.raises(KubeError) as caught:
        make().evict("default", "nope")
    assert (caught.value.code, caught.value.reason) == (404, "NotFound")


def test_deleting_an_instance_kills_its_pods_and_removes_the_node_later() -> None:
    world = make(scenario(workloads=[job("w", duration="1h")]))
    node_name = pods(world)[0]["spec"]["nodeName"]
    op = world.delete_instances(pool(world), ["0"])
    assert pool(world).capacity == 0
    assert world.instances(pool(world))[0].state == "Deleting"
    node = world.k8s_get("nodes", "", node_name)
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "Unknown"
    assert sorted(p["status"]["phase"] for p in pods(world)) == ["Failed", "Pending"]  # killed, and its replacement
    world.advance_by(30)  # delete delay
    assert world.instances(pool(world)) == [] and op.status == "Succeeded"
    assert world.k8s_get("nodes", "", node_name)  # the node lifecycle controller is 10 s behind
    world.advance_by(10)
    assert world.k8s_list("nodes") == []
    report = world.report()
    assert report["pods_killed"] == 1 and report["running_pods_evicted"] == 0
    assert report["node_seconds"] == 30
    assert report["api_calls"]["breakdown"]["arm"]["instances_deleted"] == {"pool-a/0": 1}


def test_lowering_capacity_deletes_the_highest_instance_ids() -> None:
    doc = scenario()
    doc["node_groups"][0]["initial"] = 4
    world = make(doc)
    world.set_capacity(pool(world), 2)
    assert {i.instance_id: i.state for i in world.instances(pool(world))} == {
        0: "Succeeded", 1: "Succeeded", 2: "Deleting", 3: "Deleting"}
    world.advance_by(45)
    assert [n["metadata"]["name"] for n in world.k8s_list("nodes")] == ["pool-a000000", "pool-a000001"]


def test_instance_ids_are_never_reused() -> None:
    world = make()
    world.delete_instances(pool(world), ["0"])
    world.advance_by(60)
    world.set_capacity(pool(world), 2)
    assert [i.instance_id for i in world.instances(pool(world))] == [1, 2]


@pytest.mark.parametrize(
    ("ids", "message"),
    [(["7"], "instanceId 7 is not an active"), (["x"], "instanceId x is not an active"), ([], "instanceIds is invalid")],
)
def test_deleting_unknown_instances_is_refused(ids: list[str], message: str) -> None:
    world = make()
    with pytest.raises(ArmError, match=message) as caught:
        world.delete_instances(pool(world), ids)
    assert (caught.value.status, caught.value.code) == (400, "InvalidParameter")


def test_an_injected_allocation_failure_fails_the_operation_without_instances() -> None:
    world = make()
    world.fail_next_scale_up(POOL, code="QuotaExceeded")
    op = world.set_capacity(pool(world), 5)
    assert pool(world).capacity == 5 and op.status == "InProgress"
    world.advance_by(5)
    assert op.status == "Failed" and op.error_code == "QuotaExceeded"
    assert "Cores quota" in (op.error_message or "")
    assert pool(world).capacity == 1 and len(world.instances(pool(world))) == 1
    retry = world.set_capacity(pool(world), 2)  # only the next scale-up fails
    assert len(retry.instance_ids) == 1


def test_deleting_a_node_object_leaves_the_instance_running() -> None:
    world = make(scenario(workloads=[job("w")]))
    node = pods(world)[0]["spec"]["nodeName"]
    world.k8s_delete("nodes", "", node)
    assert world.k8s_list("nodes") == []
    assert [i.state for i in world.instances(pool(world))] == ["Succeeded"]  # still paid for
    assert world.report()["pods_killed"] == 1


def test_the_timeline_samples_every_interval() -> None:
    world = make()
    world.set_capacity(pool(world), 2)
    world.advance_by(65)
    timeline = world.report()["timeline"]
    assert [s["t"] for s in timeline] == [0, 10, 20, 30, 40, 50, 60]
    key = f"{RG}/{POOL}"
    assert (timeline[0]["groups"][key]["ready"], timeline[0]["groups"][key]["booting"]) == (1, 0)
    assert (timeline[1]["groups"][key]["booting"], timeline[1]["groups"][key]["target"]) == (1, 2)
    assert timeline[-1]["groups"][key]["ready"] == 2


def test_the_duration_is_a_hard_stop() -> None:
    world = make(scenario(duration="1m"))
    world.advance_by(600)
    assert world.t == 60
    assert world.done() == (True, "duration-reached")
    assert world.report()["node_seconds"] == 60


def _run(seed: int) -> dict[str, Any]:
    world = World("burst", seed=seed, start=START)
    world.advance_by(60)
    world.set_capacity(world.scale_set(world.subscription_id, "rg-sandbox-nodes", "pool-d4"), 12)
    world.advance_by(3000)
    report = world.report()
    report.pop("api_calls")
    return report


def test_the_same_seed_gives_the_same_run() -> None:
    first, second = _run(3), _run(3)
    assert first == second
    assert first["pods_completed"] == 100
    assert first != _run(4)


def test_throttling_buckets_refill_in_sim_time() -> None:
    world = make(scenario(arm_throttling=True))
    results = [world.take_token(pool(world).key, "update") for _ in range(13)]
    assert [r[0] for r in results if r] == [True] * 12 + [False]
    allowed, remaining, retry_after, header = results[-1] or (None, None, None, None)
    assert (remaining, retry_after, header) == (0, 15, "Microsoft.Compute/PutVMScaleSet3Min;0")
    world.advance_by(15)
    assert (world.take_token(pool(world).key, "update") or (False,))[0] is True
    assert world.report()["api_calls"]["arm_throttled"] == 1


def test_injected_faults_are_consumed() -> None:
    world = make()
    world.inject_fault(("k8s", "GET", "pods"), status=500, count=2)
    assert world.take_fault("k8s", "GET", "nodes") is None
    assert [world.take_fault("k8s", "GET", "pods") is not None for _ in range(3)] == [True, True, False]


def test_report_has_the_documented_shape() -> None:
    report = make(scenario(workloads=[job("w")])).report()
    assert {
        "scenario", "seed", "start", "now", "sim_seconds", "duration_seconds", "done", "done_reason", "pods_total",
        "pods_completed", "pods_pending", "pods_running", "pods_unschedulable", "running_pods_evicted", "pods_killed",
        "pod_wait_seconds", "node_seconds", "node_seconds_by_group", "nodes_max", "nodes_by_group", "api_calls",
        "timeline", "pods", "pods_unplaceable", "events_by_reason",
    } <= set(report)
    assert set(report["api_calls"]) >= {"arm_reads", "arm_writes", "k8s_reads", "k8s_writes", "breakdown"}
    assert set(report["pods"][0]) >= {
        "name", "node", "group", "extended", "created", "bound", "started", "finished", "evicted_while_running", "killed"}


def test_the_mixed_scenario_needs_its_tainted_batch_pool() -> None:
    world = World("mixed", seed=0, start=START)
    world.advance_by(200)
    etl = [p for p in world.k8s_list("pods", "batch")]
    assert len(etl) == 20 and all(p["status"]["phase"] == "Pending" for p in etl)
    assert "untolerated taint {CriticalAddonsOnly: true}" in etl[0]["status"]["conditions"][0]["message"]
    world.set_capacity(world.scale_set(world.subscription_id, "rg-sandbox-batch", "batch-f8"), 8)
    world.advance_by(5000)  # the third wave arrives at 62 minutes; the scenario stops at 100
    assert world.done() == (True, "workload-complete")
    report = world.report()
    assert report["pods_completed"] == 70 and report["pods_pending"] == 0
    assert report["nodes_by_group"]["rg-sandbox-nodes/system"]["target"] == 2


_GPU_TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
_BIG_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["big"]}]}]}}}


@pytest.mark.parametrize(
    "daemonset,expected_pools",
    [
        ({}, {"a", "big"}),  # the default tolerates every taint
        ({"tolerations": []}, {"a"}),  # the big pool's taint keeps it off
        ({"node_selector": {"pool": "big"}}, {"big"}),
        ({"affinity": _BIG_AFFINITY, "tolerations": [{"key": "gpu", "operator": "Exists"}]}, {"big"}),
        ({"affinity": _BIG_AFFINITY, "tolerations": []}, set()),  # selected but not tolerated
        ({"node_selector": {"pool": "none"}}, set()),
    ],
)
def test_daemonset_pods_run_only_on_the_nodes_their_daemonset_selects_and_tolerates(
    daemonset: dict[str, Any], expected_pools: set[str]
) -> None:
    doc = scenario()
    doc["node_groups"].append({"resource_group": RG, "name": "pool-big", "vm_size": "Standard_D16s_v5",
                               "allocatable": {"cpu": "16", "memory": "64Gi", "pods": 110}, "min": 0, "max": 3,
                               "initial": 1, "labels": {"pool": "big"}, "taints": [_GPU_TAINT]})
    doc["daemonsets"] = [{"name": "agent", "requests": {"cpu": "1", "memory": "1Gi"}, **daemonset}]
    world = make(doc)
    pool_of = {n["metadata"]["name"]: n["metadata"]["labels"]["pool"] for n in world.k8s_list("nodes")}
    ds_pods = [p for p in world.k8s_list("pods") if p["metadata"]["namespace"] == "kube-system"]
    assert {pool_of[p["spec"]["nodeName"]] for p in ds_pods} == expected_pools
    assert len(ds_pods) == len(expected_pools)  # one per matching node
    for pod in ds_pods:  # the pods carry the DaemonSet's constraints, and the controller's own tolerations
        assert pod["spec"].get("nodeSelector", {}) == daemonset.get("node_selector", {})
        keys = {t.get("key") for t in pod["spec"]["tolerations"]}
        assert {"node.kubernetes.io/not-ready", "node.kubernetes.io/unschedulable"} <= keys
    (listed,) = world.k8s_list("daemonsets")
    template = listed["spec"]["template"]["spec"]
    assert template.get("affinity") == daemonset.get("affinity")
    assert "node.kubernetes.io/not-ready" not in {t.get("key") for t in template.get("tolerations", [])}
