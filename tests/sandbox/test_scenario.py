from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from sandbox.model.scenario import SCENARIO_DIR, ScenarioError, load_scenario, resolve_scenario_path
from tests.sandbox.helpers import scenario


def test_burst_is_the_documented_demo() -> None:
    burst = load_scenario("burst")
    (group,) = burst.node_groups
    assert (group.resource_group, group.name, group.vm_size) == ("rg-sandbox-nodes", "pool-d4", "Standard_D4s_v5")
    assert (group.min_size, group.max_size, group.initial) == (1, 60, 1)
    assert group.allocatable.cpu_milli == 3860
    assert group.allocatable.memory_bytes == 14470348 * 1024  # 13.8Gi in whole Ki, as kubelet reports it
    assert group.allocatable.pods == 110
    assert [d.name for d in burst.daemonsets] == ["kube-proxy", "log-agent"]
    assert sum(w.count for w in burst.workloads) == 100
    assert all(w.cpu.values == (1000.0, 1500.0, 2000.0) for w in burst.workloads)
    assert all(w.at == 30 and w.spread == 60 for w in burst.workloads)
    assert burst.duration == 3600


def test_burst_boot_delays_have_the_documented_shape() -> None:
    dist = load_scenario("burst").boot_delay
    rng = random.Random(7)
    samples = sorted(dist.sample(rng) for _ in range(4000))
    assert 85 <= samples[len(samples) // 2] <= 115  # median about 100 s
    assert 240 <= samples[int(len(samples) * 0.95)] <= 360  # p95 about 300 s
    assert samples[-1] <= 900


def test_a_bare_name_resolves_into_the_scenarios_directory() -> None:
    assert resolve_scenario_path("burst") == SCENARIO_DIR / "burst.json"
    assert resolve_scenario_path("some/dir/x.json") == Path("some/dir/x.json")


def test_defaults_fill_what_a_file_leaves_out() -> None:
    loaded = load_scenario({"node_groups": [{"resource_group": "rg", "name": "p", "vm_size": "Standard_D2s_v5",
                                             "allocatable": {"cpu": "2", "memory": "8Gi"}, "max": 3}]})
    assert loaded.name == "inline" and loaded.cluster_name == "sandbox" and loaded.arm_throttling is True
    assert loaded.timeline_interval == 10 and loaded.termination_grace == 5
    assert loaded.node_groups[0].allocatable.pods == 110
    assert loaded.node_groups[0].computer_name_prefix == "p"


def _with(path: list[str | int], value: Any) -> dict[str, Any]:
    doc = scenario(workloads=[{"name": "w", "requests": {"cpu": "1", "memory": "1Gi"}}],
                   pdbs=[{"name": "b", "selector": {"app": "w"}, "min_available": 1}])
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "where", "problem"),
    [
        (["node_groups"], [], "$.node_groups", "at least one scale set"),
        (["node_groups", 0, "max"], -1, "$.node_groups[0].max", "at least 0"),
        (["node_groups", 0, "initial"], 11, "$.node_groups[0].initial", "between min (0) and max (10)"),
        (["node_groups", 0, "allocatable", "cpu"], "lots", "$.node_groups[0].allocatable.cpu", "not a quantity"),
        (["node_groups", 0, "vm_size"], _DELETE, "$.node_groups[0].vm_size", "required field is missing"),
        (["node_groups", 0, "taints"], [{"key": "k", "effect": "Sometimes"}], "$.node_groups[0].taints[0].effect", "must be one of"),
        (["node_groups", 0, "colour"], "blue", "$.node_groups[0].colour", "unknown field"),
        (["duration"], "forever", "$.duration", "not a duration"),
        (["provisioning_fraction"], 1.5, "$.provisioning_fraction", "(0, 1]"),
        (["boot_delay"], {"median": "100s", "p95": "50s"}, "$.boot_delay.p95", "must not be below the median"),
        (["workloads", 0, "kind"], "Deployment", "$.workloads[0].kind", "Job, ReplicaSet or Pod"),
        (["workloads", 0, "requests", "cpu"], [], "$.workloads[0].requests.cpu", "must not be empty"),
        (["workloads", 0, "count"], 0, "$.workloads[0].count", "at least 1"),
        (["workloads", 0, "name"], "Bad_Name", "$.workloads[0].name", "not a valid workload name"),
        (["pdbs", 0, "max_unavailable"], 1, "$.pdbs[0]", "exactly one of"),
        (["pdbs", 0, "min_available"], "150%", "$.pdbs[0].min_available", "percentage"),
        (["arm_throttling"], "yes", "$.arm_throttling", "true or false"),
        (["workloads", 0, "requests", "gpu"], 1, "$.workloads[0].requests.gpu", "unknown resource"),
        (["workloads", 0, "requests", "nvidia.com/gpu"], "0.5", "$.workloads[0].requests.nvidia.com/gpu", "whole number"),
        (["workloads", 0, "requests", "ephemeral-storage"], "lots", "$.workloads[0].requests.ephemeral-storage", "not a quantity"),
        (["workloads", 0, "affinity"], {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
         "$.workloads[0].affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms", "at least one"),
        (["workloads", 0, "affinity"], {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": ""}]}},
         "$.workloads[0].affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey", "non-empty"),
        (["workloads", 0, "topology_spread_constraints"], [{"maxSkew": 1, "topologyKey": "k"}],
         "$.workloads[0].topology_spread_constraints[0].whenUnsatisfiable", "DoNotSchedule or ScheduleAnyway"),
        (["workloads", 0, "host_ports"], [70000], "$.workloads[0].host_ports[0]", "up to 65535"),
        (["workloads", 0, "host_ports"], [{"port": 53, "protocol": "ICMP"}], "$.workloads[0].host_ports[0].protocol", "TCP, UDP, SCTP"),
        (["workloads", 0, "priority"], "high", "$.workloads[0].priority", "whole number"),
        (["workloads", 0, "tolerations"], [{"operator": "Equal", "value": "x"}], "$.workloads[0].tolerations[0].operator", "must be Exists"),
        (["node_groups", 0, "allocatable", "gpu"], 1, "$.node_groups[0].allocatable.gpu", "unknown resource"),
        (["node_groups", 0, "annotations"], ["a"], "$.node_groups[0].annotations", "must be an object of strings"),
        (["node_groups", 0, "annotations"], {"cluster-autoscaler.kubernetes.io/scale-down-disabled": True},
         "$.node_groups[0].annotations.cluster-autoscaler.kubernetes.io/scale-down-disabled", "must be a string"),
        (["node_groups", 0, "annotations"], {"bad key": "x"}, "$.node_groups[0].annotations.bad key",
         "not a valid annotation key"),
        (["node_groups", 0, "annotations"], {"Example.COM/x": "y"}, "$.node_groups[0].annotations.Example.COM/x",
         "not a valid annotation key"),
        (["workloads", 0, "volumes"], {"name": "v"}, "$.workloads[0].volumes", "must be a list"),
        (["workloads", 0, "volumes"], [{"name": "v"}], "$.workloads[0].volumes[0]", "exactly one of hostPath and emptyDir"),
        (["workloads", 0, "volumes"], [{"name": "v", "emptyDir": {}, "hostPath": {"path": "/x"}}],
         "$.workloads[0].volumes[0]", "exactly one of hostPath and emptyDir"),
        (["workloads", 0, "volumes"], [{"name": "v", "configMap": {"name": "c"}}],
         "$.workloads[0].volumes[0].configMap", "unknown field"),
        (["workloads", 0, "volumes"], [{"name": "Bad_Name", "emptyDir": {}}], "$.workloads[0].volumes[0].name",
         "not a valid volume name"),
        (["workloads", 0, "volumes"], [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}],
         "$.workloads[0].volumes[1].name", "duplicate volume name"),
        (["workloads", 0, "volumes"], [{"name": "v", "hostPath": {}}], "$.workloads[0].volumes[0].hostPath.path",
         "required field is missing"),
        (["workloads", 0, "volumes"], [{"name": "v", "hostPath": {"path": "/a/../etc"}}],
         "$.workloads[0].volumes[0].hostPath.path", "must not contain '..'"),
        (["workloads", 0, "volumes"], [{"name": "v", "hostPath": {"path": "/x", "type": "Folder"}}],
         "$.workloads[0].volumes[0].hostPath.type", "DirectoryOrCreate"),
        (["workloads", 0, "volumes"], [{"name": "v", "emptyDir": {"medium": "HugePages"}}],
         "$.workloads[0].volumes[0].emptyDir.medium", "or Memory"),
        (["workloads", 0, "volumes"], [{"name": "v", "emptyDir": {"sizeLimit": "lots"}}],
         "$.workloads[0].volumes[0].emptyDir.sizeLimit", "not a quantity"),
        (["workloads", 0, "volumes"], [{"name": "v", "emptyDir": {"sizeLimit": "-1Gi"}}],
         "$.workloads[0].volumes[0].emptyDir.sizeLimit", "must not be negative"),
        (["workloads", 0, "active_deadline"], "soon", "$.workloads[0].active_deadline", "not a duration"),
        (["workloads", 0, "active_deadline"], 0, "$.workloads[0].active_deadline", "between 1s and"),
        (["workloads", 0, "active_deadline"], "1.5s", "$.workloads[0].active_deadline", "whole seconds"),
        (["workloads", 0, "annotations"], {"a": 1}, "$.workloads[0].annotations.a", "must be a string"),
        (["scale_up_failures"], [{"scale_set": "nope"}], "$.scale_up_failures[0].scale_set", "names no scale set"),
        (["scale_up_failures"], [{"scale_set": "pool-a", "count": 0}], "$.scale_up_failures[0].count", "at least 1"),
        (["allocation_failures"], [{"scale_set": "nope"}], "$.allocation_failures[0].scale_set", "names no scale set"),
        (["allocation_failures"], [{"scale_set": "pool-a", "instances": 0}], "$.allocation_failures[0].instances",
         "at least 1"),
        (["allocation_failures"], [{"scale_set": "pool-a", "count": 0}], "$.allocation_failures[0].count", "at least 1"),
        (["allocation_failures"], [{"scale_set": "pool-a", "zone": "1"}], "$.allocation_failures[0].zone",
         "unknown field"),
        (["restricted_vm_sizes"], "Standard_D4s_v5", "$.restricted_vm_sizes", "must be a list"),
        (["restricted_vm_sizes"], [4], "$.restricted_vm_sizes[0]", "non-empty string"),
        (["expect_unschedulable"], ["nope"], "$.expect_unschedulable[0]", "names no workload"),
        (["expect_unschedulable"], ["other/w"], "$.expect_unschedulable[0]", "names no workload"),
        (["expect_unschedulable"], [{"count": 1}], "$.expect_unschedulable[0].workload", "required field is missing"),
        (["expect_unschedulable"], [{"workload": "w", "count": 2}], "$.expect_unschedulable[0].count", "more than the 1"),
        (["expect_unschedulable"], [{"workload": "w", "count": 0}], "$.expect_unschedulable[0].count", "at least 1"),
        (["expect_unschedulable"], ["w", {"workload": "default/w"}], "$.expect_unschedulable[1]", "named twice"),
        (["expect_at_most"], [900], "$.expect_at_most", "must be an object of numbers"),
        (["expect_at_most"], {"removal_lag_s.max": "15m"}, "$.expect_at_most.removal_lag_s.max", "a number at least 0"),
        (["expect_at_most"], {"pods_killed": -1}, "$.expect_at_most.pods_killed", "a number at least 0"),
        (["expect_at_most"], {"pods_killed": True}, "$.expect_at_most.pods_killed", "a number at least 0"),
        (["expect_at_most"], {"Removal lag": 1}, "$.expect_at_most.Removal lag", "not a valid summary.json path"),
    ],
)
def test_invalid_scenarios_name_the_json_path_and_the_problem(
    path: list[str | int], value: Any, where: str, problem: str
) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(_with(path, value))
    assert caught.value.path == where
    assert problem in caught.value.problem
    assert str(caught.value).startswith("<memory>: " + where)


def test_extended_resources_in_allocatable_need_room_in_capacity() -> None:
    doc = scenario()
    doc["node_groups"][0]["allocatable"]["nvidia.com/gpu"] = 1
    loaded = load_scenario(doc)  # capacity defaults to allocatable
    assert loaded.node_groups[0].capacity.scalar("nvidia.com/gpu") == 1
    doc["node_groups"][0]["capacity"] = {"cpu": "4", "memory": "16Gi"}
    with pytest.raises(ScenarioError, match=r"\$\.node_groups\[0\]\.allocatable: must not exceed capacity"):
        load_scenario(doc)


def test_new_workload_fields_default_to_nothing() -> None:
    (workload,) = load_scenario(scenario(workloads=[{"name": "w", "requests": {"cpu": "1", "memory": "1Gi"}}])).workloads
    assert (workload.ephemeral_storage, dict(workload.extended), workload.affinity) == (None, {}, None)
    assert (workload.topology_spread_constraints, workload.host_ports, workload.priority) == ((), (), None)
    assert load_scenario(scenario()).scale_up_failures == ()
    assert (workload.volumes, workload.active_deadline_seconds) == ((), None)
    assert load_scenario(scenario()).restricted_vm_sizes == ()


def test_volumes_and_the_active_deadline_as_the_api_server_stores_them() -> None:
    (workload,) = load_scenario(scenario(workloads=[{
        "name": "w", "requests": {"cpu": "1", "memory": "1Gi"}, "active_deadline": "1h30m",
        "volumes": [{"name": "scratch", "emptyDir": {}}, {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                    {"name": "logs", "hostPath": {"path": "/var/log"}},
                    {"name": "sock", "hostPath": {"path": "/run/x.sock", "type": "Socket"}}],
    }])).workloads
    assert workload.active_deadline_seconds == 5400
    assert list(workload.volumes) == [
        {"name": "scratch", "emptyDir": {}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        {"name": "logs", "hostPath": {"path": "/var/log", "type": ""}},  # the API server defaults type to ""
        {"name": "sock", "hostPath": {"path": "/run/x.sock", "type": "Socket"}},
    ]


def test_node_group_annotations_default_to_none_and_keep_what_is_given() -> None:
    assert dict(load_scenario(scenario()).node_groups[0].annotations) == {}
    doc = scenario()
    given = {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true", "team": "", "a.b_c-d": "x"}
    doc["node_groups"][0]["annotations"] = given
    assert dict(load_scenario(doc).node_groups[0].annotations) == given


def test_duplicate_scale_sets_are_refused() -> None:
    doc = scenario()
    doc["node_groups"].append(dict(doc["node_groups"][0]))
    with pytest.raises(ScenarioError, match=r"\$\.node_groups\[1\]\.name: scale set 'pool-a' appears twice"):
        load_scenario(doc)


def test_computer_name_prefixes_must_differ() -> None:
    doc = scenario()
    doc["node_groups"].append({**doc["node_groups"][0], "resource_group": "rg-other"})
    with pytest.raises(ScenarioError, match=r"\$\.node_groups\[1\]\.computer_name_prefix: 'pool-a' is used by another"):
        load_scenario(doc)


def test_errors_in_files_name_the_file(tmp_path: Path) -> None:
    bad_json = tmp_path / "broken.json"
    bad_json.write_text("{ not json")
    with pytest.raises(ScenarioError, match=r"broken\.json: \$: not valid JSON"):
        load_scenario(bad_json)
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps(_with(["node_groups", 0, "max"], "ten")))
    with pytest.raises(ScenarioError, match=r"invalid\.json: \$\.node_groups\[0\]\.max: must be a whole number"):
        load_scenario(invalid)
    with pytest.raises(ScenarioError, match="cannot read the file"):
        load_scenario(tmp_path / "missing.json")


def test_every_shipped_scenario_is_valid() -> None:
    files = sorted(SCENARIO_DIR.glob("*.json"))
    assert files
    for file in files:
        assert load_scenario(file).node_groups


def test_the_documented_example_is_valid() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "scenarios.md").read_text()
    example = docs.split("## Example", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    loaded = load_scenario(json.loads(example))
    assert loaded.name == "tainted-batch"
    assert [g.name for g in loaded.node_groups] == ["general", "batch"]
    assert loaded.workloads[1].repeat_times == 2
