"""The render queue: frames a render manager hands to a DaemonSet's workers, one per free Ready node, the
CPU their pods report while they render, interruptions when a worker stops, determinism, validation, reports."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from devtools.demo import build_summary, check_expectations
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world import World
from tests.sandbox.helpers import POOL, RG, job, scenario

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
SUB = "11111111-2222-3333-4444-555555555555"
NODE0, NODE1, NODE2 = "pool-a000000", "pool-a000001", "pool-a000002"
KUBE_PROXY_MILLI = 100
BUSY, IDLE = 3600, 20

DAEMONSETS = [
    {"name": "kube-proxy", "requests": {"cpu": "100m", "memory": "128Mi"}},
    {"name": "renderer", "namespace": "render", "requests": {"cpu": "100m", "memory": "256Mi"}},
]


def farm(*, frames: list[dict[str, Any]] | None = None, frame_time: Any = "5m", initial: int = 2,
         **queue: Any) -> dict[str, Any]:
    """Two Ready nodes (boot 60 s, delete 30 s) running kube-proxy and the renderer, and a render queue."""
    doc = scenario(daemonsets=DAEMONSETS, render_queue={
        "daemonset": "renderer", "frames": frames if frames is not None else [{"at": "1m", "count": 5}],
        "frame_time": frame_time, "busy_cpu": f"{BUSY}m", "idle_cpu": f"{IDLE}m", **queue})
    doc["node_groups"][0]["initial"] = initial
    return doc


def make(doc: dict[str, Any], seed: int = 0) -> World:
    return World(doc, seed=seed, start=START)


def pool(world: World) -> Any:
    return world.scale_set(SUB, RG, POOL)


def queue(world: World) -> dict[str, Any]:
    """The render queue's report but its frame waits, which the tests about waits read themselves."""
    report = world.render_queue_report()
    assert report is not None
    report.pop("frame_wait_s")
    return report


def rendering_nodes(world: World) -> set[str]:
    return {node for node, cpu in world.node_cpu().items() if cpu.used_milli == BUSY + KUBE_PROXY_MILLI}


def cordon(world: World, name: str) -> None:
    node = world.k8s_get("nodes", "", name)
    node["spec"]["unschedulable"] = True
    world.k8s_replace("nodes", "", name, node)


def worker_pod(world: World, node: str) -> dict[str, Any]:
    (pod,) = [p for p in world.k8s_list("pods", "render") if p["spec"]["nodeName"] == node
              and not p["metadata"].get("deletionTimestamp")]
    return pod


# ---------------------------------------------------------------------------- taking frames


def test_free_ready_nodes_take_one_frame_each_and_the_rest_wait() -> None:
    world = make(farm())
    assert queue(world) == {"frames_total": 0, "frames_done": 0, "frames_interrupted": 0, "backlog": 0,
                            "rendering": 0, "frames_by_node": {}}
    world.advance_by(59)
    assert rendering_nodes(world) == set()
    world.advance_by(1)  # the batch arrives at 1m
    assert queue(world) | {"frames_by_node": None} == {
        "frames_total": 5, "frames_done": 0, "frames_interrupted": 0, "backlog": 3, "rendering": 2, "frames_by_node": None}
    assert rendering_nodes(world) == {NODE0, NODE1}
    world.advance_by(300)  # the first frames end at 6m; each node takes the next at once
    assert queue(world)["frames_done"] == 2 and queue(world)["backlog"] == 1 and queue(world)["rendering"] == 2
    world.advance_by(600)
    assert queue(world) == {"frames_total": 5, "frames_done": 5, "frames_interrupted": 0, "backlog": 0,
                            "rendering": 0, "frames_by_node": {NODE0: 3, NODE1: 2}}
    assert rendering_nodes(world) == set()
    # Frames arrived at 1m started at 1m, 1m, 6m, 6m and 11m: each one's wait from its arrival.
    assert (world.render_queue_report() or {})["frame_wait_s"] == {"p50": 300.0, "p95": 600.0, "max": 600.0}


def test_a_booting_node_takes_no_frame_until_it_is_ready() -> None:
    world = make(farm(frames=[{"at": "1m", "count": 4}], frame_time="20m"))
    world.advance_by(60)
    world.set_capacity(pool(world), 3)
    world.advance_by(59)  # the new instance is provisioned, its node not registered yet
    assert queue(world)["rendering"] == 2 and queue(world)["backlog"] == 2
    world.advance_by(1)
    assert queue(world)["rendering"] == 3 and queue(world)["backlog"] == 1
    assert rendering_nodes(world) == {NODE0, NODE1, NODE2}


def test_busy_and_idle_workers_report_their_cpu_to_the_monitoring_doubles() -> None:
    world = make(farm(frames=[{"at": "1m", "count": 1}]))
    world.advance_by(60)
    cpu = world.node_cpu()
    assert cpu[NODE0].used_milli == BUSY + KUBE_PROXY_MILLI  # node-name order: the first free node takes it
    assert cpu[NODE1].used_milli == IDLE + KUBE_PROXY_MILLI
    assert cpu[NODE0].capacity_milli == 4000
    world.advance_by(300)
    assert world.node_cpu()[NODE0].used_milli == IDLE + KUBE_PROXY_MILLI
    # The worker's request is unchanged: a render farm's nodes look alike by requests.
    requests = worker_pod(world, NODE0)["spec"]["containers"][0]["resources"]["requests"]
    assert requests["cpu"] == "100m"


def test_the_idle_cpu_defaults_to_the_daemonsets_own_usage() -> None:
    doc = farm()
    del doc["render_queue"]["idle_cpu"]
    doc["daemonsets"][1]["cpu_usage"] = "70m"
    assert load_scenario(doc).render_queue.idle_cpu_milli == 70  # type: ignore[union-attr]
    del doc["daemonsets"][1]["cpu_usage"]
    assert load_scenario(doc).render_queue.idle_cpu_milli == 100  # type: ignore[union-attr]  # its request


def test_a_cordoned_node_takes_no_new_frame_but_finishes_the_one_it_has() -> None:
    world = make(farm(frames=[{"at": "1m", "count": 4}]))
    cordon(world, NODE1)
    world.advance_by(60)
    assert rendering_nodes(world) == {NODE0}
    cordon(world, NODE0)  # while it renders
    world.advance_by(1)
    assert rendering_nodes(world) == {NODE0} and queue(world)["frames_interrupted"] == 0
    world.advance_by(600)
    assert queue(world) | {"frames_by_node": None} == {
        "frames_total": 4, "frames_done": 1, "frames_interrupted": 0, "backlog": 3, "rendering": 0, "frames_by_node": None}
    assert queue(world)["frames_by_node"] == {NODE0: 1}
    assert world.done() == (False, None)  # frames wait


# ---------------------------------------------------------------------------- interruptions


def test_a_deleted_vm_interrupts_its_frame_which_goes_back_to_the_front_of_the_backlog() -> None:
    # frame 0 (10m) and frame 1 (10m) at 1m, frame 2 (1m) at 2m. Node 0's VM goes at 5m: frame 0 waits
    # ahead of frame 2, so the new node takes it (done at 16m) and node 1 renders frame 2 after frame 1.
    world = make(farm(frames=[{"at": "1m", "count": 2}, {"at": "2m", "count": 1, "frame_time": "1m"}],
                      frame_time="10m"))
    world.advance_by(300)
    world.delete_instances(pool(world), ["0"])
    world.set_capacity(pool(world), 2)
    world.advance_by(1)
    assert queue(world) | {"frames_by_node": None} == {
        "frames_total": 3, "frames_done": 0, "frames_interrupted": 1, "backlog": 2, "rendering": 1, "frames_by_node": None}
    assert NODE0 not in world.node_cpu()  # its VM is going: no agent reports
    world.advance_by(119)  # the new node (boot 60 s from 5m... its instance id 2) is Ready: it takes frame 0
    assert queue(world)["backlog"] == 1 and queue(world)["frames_done"] == 0
    world.advance_by(60)  # 8m: had it taken frame 2 (1m), it would be done by now
    assert queue(world)["frames_done"] == 0
    world.advance_by(1200)
    assert queue(world) == {"frames_total": 3, "frames_done": 3, "frames_interrupted": 1, "backlog": 0,
                            "rendering": 0, "frames_by_node": {NODE1: 2, NODE2: 1}}
    assert world.done() == (True, "workload-complete")
    assert world.report()["pods_killed"] == 0  # a DaemonSet pod's interrupted frame is not a killed pod


@pytest.mark.parametrize("how", ["node deleted", "vm deallocated", "worker pod deleted", "worker pod evicted"])
def test_every_way_a_worker_stops_interrupts_its_frame(how: str) -> None:
    world = make(farm(frames=[{"at": "1m", "count": 1}], initial=1))
    world.advance_by(120)
    assert rendering_nodes(world) == {NODE0}
    if how == "node deleted":
        world.k8s_delete("nodes", "", NODE0)
    elif how == "vm deallocated":
        world.deallocate_instances(pool(world), ["0"])
    elif how == "worker pod deleted":
        world.k8s_delete("pods", "render", worker_pod(world, NODE0)["metadata"]["name"])
    else:
        world.evict("render", worker_pod(world, NODE0)["metadata"]["name"])
    world.advance_by(1)
    assert queue(world) | {"frames_by_node": None} == {
        "frames_total": 1, "frames_done": 0, "frames_interrupted": 1, "backlog": 1, "rendering": 0, "frames_by_node": None}
    assert world.done() == (False, None)
    world.advance_by(310)
    if how.startswith("worker pod"):
        # Once the old pod is gone (5 s of grace) the DaemonSet controller replaces it; the node is Ready, so the
        # new worker takes the frame and renders it from the start.
        assert queue(world)["frames_done"] == 1 and queue(world)["frames_by_node"] == {NODE0: 1}
    else:
        assert queue(world)["frames_done"] == 0 and queue(world)["backlog"] == 1


def test_a_worker_lost_in_the_instant_its_frame_ends_does_not_finish_it() -> None:
    world = make(farm(frames=[{"at": "1m", "count": 1}], initial=1))
    world.advance_by(359.9)  # the frame ends at 6m
    world.delete_instances(pool(world), ["0"])  # no reconcile until the next advance
    world.advance_by(0.2)
    assert queue(world) | {"frames_by_node": None} == {
        "frames_total": 1, "frames_done": 0, "frames_interrupted": 1, "backlog": 1, "rendering": 0, "frames_by_node": None}


# ---------------------------------------------------------------------------- determinism


def _scripted(doc: dict[str, Any], seed: int) -> tuple[Any, ...]:
    world = make(doc, seed)
    world.advance_by(90)
    world.set_capacity(pool(world), 4)
    world.advance_by(400)
    world.delete_instances(pool(world), ["1"])
    samples = []
    for _ in range(40):
        world.advance_by(60)
        samples.append((queue(world)["frames_done"], tuple(sorted(rendering_nodes(world)))))
    return queue(world), tuple(samples)


def test_the_same_seed_gives_the_same_frames_and_another_seed_other_frame_times() -> None:
    doc = farm(frames=[{"at": "1m", "count": 20}, {"at": "5m", "count": 10}], frame_time={"min": "3m", "max": "6m"})
    first = _scripted(doc, 7)
    assert first == _scripted(doc, 7)
    assert first[0]["frames_interrupted"] == 1  # instance 1 was rendering when its VM went
    assert _scripted(doc, 8) != first


def test_a_render_queue_changes_no_other_draw() -> None:
    without = farm()
    del without["render_queue"]
    with_queue = farm(frames=[{"at": "1m", "count": 3}], frame_time={"min": "3m", "max": "6m"})
    for doc in (without, with_queue):
        doc["workloads"] = [job("batch", 6, cpu={"min": "500m", "max": "1500m"}, duration={"min": "2m", "max": "9m"},
                                spread="1m")]
    a, b = make(without, 3), make(with_queue, 3)
    a.set_capacity(pool(a), 4)
    b.set_capacity(pool(b), 4)
    a.advance_by(3600)
    b.advance_by(3600)
    keys = ("name", "node", "cpu_milli", "memory_bytes", "created", "started", "finished")
    assert [{k: p[k] for k in keys} for p in a.report()["pods"]] == [{k: p[k] for k in keys} for p in b.report()["pods"]]
    assert queue(b)["frames_done"] == 3 and a.render_queue_report() is None


# ---------------------------------------------------------------------------- done and reports


def test_the_world_is_not_done_while_frames_are_due_wait_or_render() -> None:
    world = make(farm(frames=[{"at": "1m", "count": 3}], initial=1))
    assert world.done() == (False, None)  # due
    world.advance_by(60)
    assert world.done() == (False, None)  # waiting and rendering
    world.advance_by(600)
    assert queue(world)["rendering"] == 1 and world.done() == (False, None)
    world.advance_by(300)
    assert world.done() == (True, "workload-complete")
    assert world.state()["done"] and world.state()["render_queue"]["frames_done"] == 3


def test_reports_timeline_and_demo_summary_carry_the_queue() -> None:
    world = make(farm(frames=[{"at": "1m", "count": 3}], initial=1))
    world.advance_by(1200)
    report = world.report()
    assert report["render_queue"] == {"frames_total": 3, "frames_done": 3, "frames_interrupted": 0, "backlog": 0,
                                      "rendering": 0, "frames_by_node": {NODE0: 3},
                                      "frame_wait_s": {"p50": 300.0, "p95": 600.0, "max": 600.0}}
    sample = next(s for s in report["timeline"] if s["t"] == 60)
    assert (sample["frames_backlog"], sample["frames_rendering"]) == (2, 1)
    runner = SimpleNamespace(stats=SimpleNamespace(timer_invocations=0, queue_invocations=0, failures=0, poisoned=0))
    summary = build_summary("farm", report, [], converged=True, wall_seconds=1.0, runner=runner)  # type: ignore[arg-type]
    assert summary["frames_interrupted"] == 0 and summary["render_queue"] == report["render_queue"]
    assert check_expectations(summary, [("frames_interrupted", 0.0), ("render_queue.frames_done", 3.0)])[0]["met"]
    assert not check_expectations(summary, [("render_queue.frame_wait_s.max", 599.0)])[0]["met"]

    plain = copy.deepcopy(farm())
    del plain["render_queue"]
    bare = make(plain).report()
    assert bare["render_queue"] is None and "frames_backlog" not in bare["timeline"][0]
    assert "render_queue" not in make(plain).state()
    summary = build_summary("plain", bare, [], converged=True, wall_seconds=1.0, runner=runner)  # type: ignore[arg-type]
    assert summary["frames_interrupted"] == 0 and summary["render_queue"] is None


def test_the_k3s_server_renders_too_and_the_shipped_farm_is_loaded_as_described() -> None:
    loaded = load_scenario("k3s-daemonset-farm")
    assert loaded.flavour == "k3s" and loaded.render_queue is not None
    (group,) = loaded.node_groups
    assert (group.min_size, group.max_size, group.initial, group.tags["autoscaler-load-cpu"]) == (1, 10, 2, "0.7")
    assert loaded.render_queue.daemonset == "render/renderer"
    assert "Expected:" in loaded.description
    assert dict(loaded.expect_at_most) == {"frames_interrupted": 0, "pods_killed": 0, "unmanaged_nodes_touched": 0}
    world = World(loaded, seed=0, start=START)
    world.advance_by(60)
    cpu = world.node_cpu()
    # The agents run near full (what makes the load-driven group grow); the 2-CPU server is capped at its capacity.
    agents = [c.fraction for name, c in cpu.items() if name.startswith("agents")]
    assert len(agents) == 2 and all(f > 0.7 for f in agents)
    assert cpu["k3s-server"].used_milli == cpu["k3s-server"].capacity_milli == 2000


# ---------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("change", "path", "problem"),
    [
        ({"daemonset": "painter"}, "$.render_queue.daemonset", "names no DaemonSet of daemonsets"),
        ({"daemonset": "kube-system/renderer"}, "$.render_queue.daemonset", "names no DaemonSet"),
        ({"frames": [{"at": "1m", "count": -3}]}, "$.render_queue.frames[0].count", "must be at least 0, got -3"),
        ({"frames": [{"at": "1m", "count": 2.5}]}, "$.render_queue.frames[0].count", "must be a whole number"),
        ({"frames": [{"at": -60, "count": 1}]}, "$.render_queue.frames[0].at", "must be a non-negative number"),
        ({"frames": [{"count": 1}]}, "$.render_queue.frames[0].at", "required field is missing"),
        ({"frames": []}, "$.render_queue.frames", "at least one batch"),
        ({"frame_time": "0s"}, "$.render_queue.frame_time", "longer than zero"),
        ({"frame_time": {"min": "0s", "max": "1m"}}, "$.render_queue.frame_time", "longer than zero"),
        ({"frames": [{"at": "1m", "count": 1, "frame_time": ["1m", "0s"]}]}, "$.render_queue.frames[0].frame_time",
         "longer than zero"),
        ({"busy_cpu": "-1"}, "$.render_queue.busy_cpu", "must not be negative"),
        ({"idle_cpu": "lots"}, "$.render_queue.idle_cpu", ""),
        ({"colour": "red"}, "$.render_queue.colour", "unknown field"),
    ],
)
def test_bad_render_queues_are_reported_with_their_path(change: dict[str, Any], path: str, problem: str) -> None:
    doc = farm()
    doc["render_queue"].update(change)
    with pytest.raises(ScenarioError) as error:
        load_scenario(doc)
    assert error.value.path == path and problem in error.value.problem


def test_a_render_queue_needs_busy_cpu_and_an_unambiguous_daemonset() -> None:
    doc = farm()
    del doc["render_queue"]["busy_cpu"]
    with pytest.raises(ScenarioError, match=r"\$\.render_queue\.busy_cpu: required field is missing"):
        load_scenario(doc)
    doc = farm()
    doc["daemonsets"].append({"name": "renderer", "namespace": "other", "requests": {"cpu": "100m", "memory": "1Mi"}})
    with pytest.raises(ScenarioError, match="ambiguous: write <namespace>/renderer"):
        load_scenario(doc)
    doc["render_queue"]["daemonset"] = "other/renderer"
    assert load_scenario(doc).render_queue.daemonset == "other/renderer"  # type: ignore[union-attr]
    with pytest.raises(ScenarioError, match=r"\$\.render_queue: must be an object"):
        load_scenario(farm() | {"render_queue": []})
