"""ReplicaSets that scale over time: the controller's scale-in order (sandbox.world.replicaset), the scenario's
`scale` field, the world growing and shrinking to it, and pod metadata changed through the API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from sandbox.api import kube_api
from sandbox.api.wire import Request
from sandbox.clock import ManualClock
from sandbox.model.scenario import ScaleStep, ScenarioError, load_scenario
from sandbox.model.units import rfc3339
from sandbox.world import World
from sandbox.world.replicaset import DELETION_COST_ANNOTATION, deletion_cost, deletion_order, is_active, scale_in_victims
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, kube_api_client
from tests.sandbox.helpers import job, scenario

T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
AUTH = {"Authorization": "Bearer sandbox-token", "Host": "127.0.0.1:8443"}


# ---------------------------------------------------------------------------- the ranking, rule by rule


def pod_object(uid: str, *, node: str | None = "node-x", phase: str = "Running", ready: bool = True,
               ready_at: float = 0, cost: str | None = None, restarts: int = 0, created: float = 0,
               deleting: bool = False) -> dict[str, Any]:
    """A ReplicaSet pod as the API shows it; times are seconds after T0."""
    meta: dict[str, Any] = {"name": f"web-{uid}", "namespace": "default", "uid": uid,
                            "creationTimestamp": rfc3339(T0 + timedelta(seconds=created))}
    if cost is not None:
        meta["annotations"] = {DELETION_COST_ANNOTATION: cost}
    if deleting:
        meta["deletionTimestamp"] = rfc3339(T0 + timedelta(hours=1))
    conditions = [{"type": "Ready", "status": "True" if ready else "False",
                   "lastTransitionTime": rfc3339(T0 + timedelta(seconds=ready_at))}]
    return {
        "metadata": meta,
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase, "conditions": conditions,
                   "containerStatuses": [{"name": "main", "restartCount": restarts}]},
    }


# Per rule: the field, a value that puts a pod earlier in the order and one that puts it later.
RULES: dict[int, tuple[str, Any, Any]] = {
    1: ("node", None, "node-later"),  # unscheduled first
    2: ("phase", "Pending", "Running"),  # (Unknown sits between; see the phase table)
    3: ("ready", False, True),
    4: ("cost", "-100", "100"),
    5: ("doubled", True, False),  # shares its node with another active pod of the ReplicaSet
    6: ("ready_at", 120, 0),  # Ready for a shorter time
    7: ("restarts", 4, 0),
    8: ("created", 60, 0),  # newer
}


def pair(rule: int) -> list[dict[str, Any]]:
    """Two pods that tie on the rules before `rule`, differ on it, and disagree with it on every rule after:
    only `rule` itself can put "early" before "late". Plus, for rank, the pods sharing their nodes."""
    early: dict[str, Any] = {"node": "node-early"}
    late: dict[str, Any] = {"node": "node-late"}
    for number, (name, first, later) in RULES.items():
        if number == rule:
            early[name], late[name] = first, later
        elif number > rule:
            early[name], late[name] = later, first
    pods = []
    for uid, fields in (("z-early", early), ("a-late", late)):  # the uid, the final tie-break, disagrees too
        doubled = fields.pop("doubled", False)
        pods.append(pod_object(uid, **fields))
        if doubled and fields.get("node"):
            pods.append(pod_object(f"zz-partner-of-{uid}", node=fields["node"]))
    return pods


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_decides_before_the_later_ones(rule: int) -> None:
    pods = pair(rule)
    for given in (pods, pods[::-1]):  # whatever order the pods are listed in
        order = [p["metadata"]["uid"] for p in deletion_order(given)]
        assert order.index("z-early") < order.index("a-late"), order


def test_sidecar_restarts_count_after_app_container_restarts() -> None:
    def with_sidecar(uid: str, app: int, sidecar: int) -> dict[str, Any]:
        pod = pod_object(uid, restarts=app)
        pod["spec"]["initContainers"] = [{"name": "proxy", "restartPolicy": "Always"}, {"name": "setup"}]
        pod["status"]["initContainerStatuses"] = [{"name": "proxy", "restartCount": sidecar},
                                                  {"name": "setup", "restartCount": 9}]  # not a sidecar: ignored
        return pod

    def order(*pods: dict[str, Any]) -> list[str]:
        return [p["metadata"]["uid"] for p in deletion_order(pods)]

    assert order(with_sidecar("a", 0, 0), with_sidecar("b", 0, 3)) == ["b", "a"]
    assert order(with_sidecar("a", 1, 0), with_sidecar("b", 0, 3)) == ["a", "b"]  # app containers first


def test_the_uid_breaks_a_complete_tie() -> None:
    pods = [pod_object("b"), pod_object("a")]
    assert [p["metadata"]["uid"] for p in deletion_order(pods)] == ["a", "b"]


@pytest.mark.parametrize(("phase", "before"), [("Pending", "Unknown"), ("Unknown", "Running"), ("Pending", "Running")])
def test_phases_order_pending_unknown_running(phase: str, before: str) -> None:
    pods = [pod_object("y", phase=before), pod_object("z", phase=phase)]
    assert [p["status"]["phase"] for p in deletion_order(pods)] == [phase, before]


@pytest.mark.parametrize(
    ("annotation", "cost"),
    [(None, 0), ("-100", -100), ("+7", 7), ("2147483647", 2**31 - 1), ("-2147483648", -(2**31)),
     ("2147483648", 0), ("abc", 0), (" 5", 0), ("1_0", 0), ("1.5", 0), ("", 0)],
)
def test_the_deletion_cost_is_an_int32_or_zero(annotation: str | None, cost: int) -> None:
    assert deletion_cost(pod_object("p", cost=annotation)) == cost


def test_only_active_pods_are_ranked_and_victims_leave_the_replicas() -> None:
    pods = [
        pod_object("done", phase="Succeeded"), pod_object("failed", phase="Failed"), pod_object("going", deleting=True),
        pod_object("old", created=0, ready_at=0), pod_object("new", created=60, ready_at=60),
        pod_object("pending", node=None, phase="Pending", ready=False, created=0),
    ]
    assert [is_active(p) for p in pods] == [False, False, False, True, True, True]
    assert [p["metadata"]["uid"] for p in deletion_order(pods)] == ["pending", "new", "old"]
    for replicas, victims in ((3, []), (2, ["pending"]), (1, ["pending", "new"]), (0, ["pending", "new", "old"]), (5, [])):
        assert [p["metadata"]["uid"] for p in scale_in_victims(pods, replicas)] == victims


# ---------------------------------------------------------------------------- the scenario field


def rs(**extra: Any) -> dict[str, Any]:
    return {"name": "web", "kind": "ReplicaSet", "requests": {"cpu": "100m", "memory": "100Mi"}, **extra}


def test_scale_loads_as_steps() -> None:
    loaded = load_scenario(scenario(workloads=[rs(scale=[{"at": 0, "replicas": 1}, {"at": "1m", "replicas": 5},
                                                         {"at": "5m", "replicas": 2}])]))
    (workload,) = loaded.workloads
    assert workload.scale == (ScaleStep(0.0, 1), ScaleStep(60.0, 5), ScaleStep(300.0, 2))
    assert workload.count == 5  # the most replicas any step asks for
    assert load_scenario(scenario(workloads=[rs(count=3)])).workloads[0].scale == ()


@pytest.mark.parametrize(
    ("workload", "path", "problem"),
    [
        (job("web", scale=[{"at": 0, "replicas": 1}]), "$.workloads[0].scale", "only ReplicaSets scale"),
        (rs(scale=[{"at": 0, "replicas": -1}]), "$.workloads[0].scale[0].replicas", "at least 0"),
        (rs(scale=[{"at": 0, "replicas": 1.5}]), "$.workloads[0].scale[0].replicas", "whole number"),
        (rs(scale=[{"at": -5, "replicas": 1}]), "$.workloads[0].scale[0].at", "negative"),
        (rs(scale=[{"at": 60, "replicas": 1}, {"at": 60, "replicas": 2}]), "$.workloads[0].scale[1].at", "later than"),
        (rs(scale=[{"at": 60, "replicas": 1}, {"at": 30, "replicas": 2}]), "$.workloads[0].scale[1].at", "later than"),
        (rs(scale=[{"replicas": 1}]), "$.workloads[0].scale[0].at", "required field is missing"),
        (rs(scale=[{"at": 0, "replicas": 1, "max": 3}]), "$.workloads[0].scale[0].max", "unknown field"),
        (rs(scale=[]), "$.workloads[0].scale", "at least one step"),
        (rs(scale={"at": 0, "replicas": 1}), "$.workloads[0].scale", "must be a list"),
        (rs(count=3, scale=[{"at": 0, "replicas": 1}]), "$.workloads[0].count", "not used with scale"),
        (rs(repeat={"every": "1m", "times": 2}, scale=[{"at": 0, "replicas": 1}]), "$.workloads[0].repeat",
         "not used with scale"),
    ],
)
def test_bad_scales_name_the_path(workload: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(scenario(workloads=[workload]))
    assert caught.value.path == path
    assert problem in caught.value.problem


# ---------------------------------------------------------------------------- the world


def live_pods(world: World) -> list[dict[str, Any]]:
    return [p for p in world.k8s_list("pods", "default") if p["metadata"]["name"].startswith("web-")]


def active(world: World) -> list[dict[str, Any]]:
    return [p for p in live_pods(world) if is_active(p)]


def patch_pod(world: World, name: str, body: Any, content_type: str = "application/strategic-merge-patch+json") -> Any:
    return kube_api.handle(world, Request.build(
        "PATCH", f"/api/v1/namespaces/default/pods/{name}", "", {**AUTH, "Content-Type": content_type}, body))


@pytest.mark.parametrize("annotate_the_oldest", [False, True])
def test_a_replica_set_follows_its_steps_and_scales_in_as_the_controller_does(annotate_the_oldest: bool) -> None:
    world = World(scenario(workloads=[rs(scale=[{"at": 0, "replicas": 1}, {"at": 60, "replicas": 5},
                                                {"at": 300, "replicas": 2}])]), start=T0)
    (oldest,) = active(world)
    world.advance_by(60)
    pods = active(world)
    assert len(pods) == 5 and all(p["spec"].get("nodeName") for p in pods)  # one node holds them all
    newer = sorted(p["metadata"]["uid"] for p in pods if p["metadata"]["uid"] != oldest["metadata"]["uid"])
    world.advance_by(60)
    if annotate_the_oldest:
        response = patch_pod(world, oldest["metadata"]["name"],
                             {"metadata": {"annotations": {DELETION_COST_ANNOTATION: "-100"}}})
        assert response.status == 200
    world.advance_by(180)  # t = 300
    assert len(active(world)) == 2
    world.advance_by(10)  # past the termination grace
    survivors = {p["metadata"]["uid"] for p in live_pods(world)}
    assert len(survivors) == 2
    # All five share a node: with equal costs the oldest (Ready longest) stays, then the four created together
    # tie until the uid (the smaller goes first). A cost of -100 sends the oldest first.
    expected = set(newer[-2:]) if annotate_the_oldest else {oldest["metadata"]["uid"], newer[-1]}
    assert survivors == expected
    assert (oldest["metadata"]["uid"] in survivors) is not annotate_the_oldest
    world.advance_by(600)
    assert {p["metadata"]["uid"] for p in live_pods(world)} == survivors  # scaled-in pods are not replaced
    done, why = world.done()
    assert (done, why) == (True, "workload-complete")


def test_a_dead_pod_is_replaced_up_to_the_current_replicas_only() -> None:
    world = World(scenario(workloads=[rs(scale=[{"at": 0, "replicas": 3}, {"at": 100, "replicas": 1}])]), start=T0)
    victim = active(world)[0]["metadata"]["name"]
    world.k8s_delete("pods", "default", victim)
    assert len(active(world)) == 3  # below the replicas: replaced at once
    world.advance_by(120)
    (last,) = active(world)
    world.k8s_delete("pods", "default", last["metadata"]["name"])
    (replacement,) = active(world)
    assert replacement["metadata"]["name"] != last["metadata"]["name"]


def test_a_replica_set_can_scale_to_zero_and_back() -> None:
    world = World(scenario(workloads=[rs(scale=[{"at": 0, "replicas": 2}, {"at": 60, "replicas": 0},
                                                {"at": 120, "replicas": 3}])]), start=T0)
    counts = []
    for _ in range(3):
        counts.append(len(active(world)))
        world.advance_by(60)
    assert counts == [2, 0, 3]


# ---------------------------------------------------------------------------- pod metadata through the API


def test_pod_annotations_and_labels_can_be_patched_in_every_flavour() -> None:
    world = World(scenario(workloads=[rs(count=1)]), start=T0)
    (pod,) = live_pods(world)
    name = pod["metadata"]["name"]
    flavours = [
        ("application/strategic-merge-patch+json", {"metadata": {"annotations": {"a": "1"}}}),
        ("application/merge-patch+json", {"metadata": {"annotations": {"b": "2"}, "labels": {"tier": "front"}}}),
        ("application/json-patch+json", [{"op": "add", "path": "/metadata/annotations/c", "value": "3"}]),
    ]
    versions = [pod["metadata"]["resourceVersion"]]
    for content_type, body in flavours:
        response = patch_pod(world, name, body, content_type)
        assert response.status == 200, response.json()
        versions.append(response.json()["metadata"]["resourceVersion"])
    stored = world.k8s_get("pods", "default", name)
    assert stored["metadata"]["annotations"] == {"a": "1", "b": "2", "c": "3"}
    assert stored["metadata"]["labels"] == {"app": "web", "tier": "front"}
    assert stored["spec"] == pod["spec"] and stored["status"] == pod["status"]
    assert len({int(v) for v in versions}) == len(versions) and versions == sorted(versions, key=int)
    selected = kube_api.handle(world, Request.build("GET", "/api/v1/namespaces/default/pods", "labelSelector=tier%3Dfront",
                                                    AUTH))
    assert [p["metadata"]["name"] for p in selected.json()["items"]] == [name]


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"spec": {"nodeName": "elsewhere"}}, 422, "Invalid"),
        ({"spec": {"containers": [{"name": "main", "image": "other"}]}}, 422, "Invalid"),
        ({"metadata": {"annotations": {"n": 5}}}, 422, "Invalid"),
        ({"metadata": {"labels": ["a"]}}, 422, "Invalid"),
        ({"metadata": {"resourceVersion": "1"}}, 409, "Conflict"),  # stale: optimistic concurrency still holds
    ],
)
def test_pod_updates_outside_metadata_are_refused(body: dict[str, Any], status: int, reason: str) -> None:
    world = World(scenario(workloads=[rs(count=1)]), start=T0)
    (pod,) = live_pods(world)
    response = patch_pod(world, pod["metadata"]["name"], body, "application/merge-patch+json")
    assert (response.status, response.json()["reason"]) == (status, reason)
    assert world.k8s_get("pods", "default", pod["metadata"]["name"]) == pod  # unchanged


def test_the_status_in_a_pod_update_is_ignored() -> None:
    world = World(scenario(workloads=[rs(count=1)]), start=T0)
    (pod,) = live_pods(world)
    response = patch_pod(world, pod["metadata"]["name"], {"status": {"phase": "Failed"}}, "application/merge-patch+json")
    assert response.status == 200 and response.json()["status"]["phase"] == "Running"


def test_the_official_client_patches_and_replaces_a_pod(sandbox_factory: SandboxFactory) -> None:
    server = sandbox_factory(scenario(workloads=[rs(count=2)]), clock=ManualClock(SANDBOX_START))
    core = k8s.CoreV1Api(kube_api_client(server))
    first, second = (p.metadata.name for p in core.list_namespaced_pod("default").items)
    patched = core.patch_namespaced_pod(first, "default", {"metadata": {"annotations": {DELETION_COST_ANNOTATION: "-5"}}})
    assert patched.metadata.annotations == {DELETION_COST_ANNOTATION: "-5"}
    read = core.read_namespaced_pod(second, "default")
    read.metadata.annotations = {DELETION_COST_ANNOTATION: "7"}
    replaced = core.replace_namespaced_pod(second, "default", read)  # a read-modify-write round trip
    assert replaced.metadata.annotations == {DELETION_COST_ANNOTATION: "7"}
    read.spec.node_name = "elsewhere"
    read.metadata.resource_version = None
    with pytest.raises(ApiException) as caught:
        core.replace_namespaced_pod(second, "default", read)
    assert caught.value.status == 422
