"""Measured CPU in the sandbox: the world's per-node usage, the Log Analytics double and the ARM metrics route."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sandbox.api import arm_api, loganalytics_api
from sandbox.api.wire import Request, Response
from sandbox.model.scenario import ScenarioError, load_scenario
from sandbox.world import CPU_USAGE_ANNOTATION, World
from sandbox.world.errors import KubeError
from sandbox.world.faults import FaultError, make_fault
from sandbox.world.identity import ARM_AUDIENCE, LOG_ANALYTICS_AUDIENCE
from tests.sandbox.helpers import POOL, RG, grant, scenario

START = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
SUB = "11111111-2222-3333-4444-555555555555"
AUTH = {"Authorization": "Bearer la-token"}  # busy_world issues it for Log Analytics
ARM_AUTH = {"Authorization": "Bearer arm-token"}  # and this one for ARM
EXPIRED = {"Authorization": "Bearer expired-token"}  # and this one for Log Analytics, already expired
N0, N1 = "pool-a000000", "pool-a000001"


def on(node: str) -> dict[str, str]:
    return {"kubernetes.io/hostname": node}


def busy_world() -> World:
    """Two 4-core nodes: N0 runs a 1-CPU service as asked; N1 a pod requesting 100m that burns 3 CPUs."""
    doc = scenario(workloads=[
        {"name": "web", "kind": "ReplicaSet", "requests": {"cpu": "1", "memory": "1Gi"}, "node_selector": on(N0)},
        {"name": "crunch", "kind": "Pod", "requests": {"cpu": "100m", "memory": "1Gi"}, "cpu_usage": "3",
         "node_selector": on(N1)},
    ])
    doc["node_groups"][0]["initial"] = 2
    world = World(doc, start=START)
    grant(world, LOG_ANALYTICS_AUDIENCE, "la-token")
    grant(world, ARM_AUDIENCE, "arm-token")
    grant(world, LOG_ANALYTICS_AUDIENCE, "expired-token", lifetime=-1)
    return world


def query(names: list[str]) -> str:
    """The shape of the autoscaler's query that the double recognises (the adapter's own is tested against it too)."""
    quoted = ", ".join(f'"{n}"' for n in names)
    return f"{loganalytics_api.QUERY_MARKER}\nlet nodes = dynamic([{quoted}]);\nPerf | take 1"


def post(world: World, body: Any, *, workspace: str | None = None, headers: dict[str, str] | None = None) -> Response:
    path = f"/loganalytics/v1/workspaces/{workspace or world.workspace_id}/query"
    return loganalytics_api.handle(world, Request.build("POST", path, headers=AUTH if headers is None else headers, body=body))


# --- the world ------------------------------------------------------------------------------


def test_usage_is_the_requests_unless_a_workload_says_otherwise() -> None:
    world = busy_world()
    cpu = world.node_cpu()
    # kube-proxy (100m, used as requested) on both, plus each node's workload.
    assert {name: (c.used_milli, c.capacity_milli) for name, c in cpu.items()} == {N0: (1100, 4000), N1: (3100, 4000)}
    assert cpu[N1].fraction == pytest.approx(0.775)
    assert cpu[N0].since == START - timedelta(hours=1)  # initial nodes registered an hour before the start
    assert world.node_cpu([N1]).keys() == {N1}


def test_daemonsets_and_api_pods_can_be_busy_too_and_a_node_never_exceeds_its_capacity() -> None:
    doc = scenario()
    doc["daemonsets"].append({"name": "agent", "requests": {"cpu": "10m", "memory": "64Mi"}, "cpu_usage": "2500m"})
    world = World(doc, start=START)
    assert world.node_cpu()[N0].used_milli == 100 + 2500
    pod = {"metadata": {"name": "hog", "annotations": {CPU_USAGE_ANNOTATION: "8"}},
           "spec": {"nodeName": N0, "containers": [{"name": "c", "resources": {"requests": {"cpu": "50m"}}}]}}
    world.k8s_create("pods", "default", pod)
    assert world.node_cpu()[N0].used_milli == 4000  # 10.6 CPUs wanted, 4 there
    bad = {"metadata": {"name": "bad", "annotations": {CPU_USAGE_ANNOTATION: "lots"}},
           "spec": {"containers": [{"name": "c"}]}}
    with pytest.raises(KubeError) as refused:
        world.k8s_create("pods", "default", bad)
    assert refused.value.code == 422


def test_finished_pods_use_nothing_and_not_ready_nodes_report_nothing() -> None:
    doc = scenario(workloads=[{"name": "job", "requests": {"cpu": "2", "memory": "1Gi"}, "duration": "1m",
                               "cpu_usage": "1500m"}])
    world = World(doc, start=START)
    assert world.node_cpu()[N0].used_milli == 1600
    world.set_capacity(world.scale_set(SUB, RG, POOL), 2)  # a second node, booting for 60 s
    world.advance_by(61)
    cpu = world.node_cpu()
    assert cpu[N0].used_milli == 100  # the job is done
    assert cpu[N1].since == START + timedelta(seconds=60)
    world.delete_instances(world.scale_set(SUB, RG, POOL), ["1"])
    assert N1 not in world.node_cpu()  # its VM is going away: no agent reports


def test_the_scenario_field_is_validated_and_leaves_other_scenarios_samples_alone() -> None:
    with pytest.raises(ScenarioError, match=r"\$\.workloads\[0\]\.cpu_usage"):
        load_scenario(scenario(workloads=[{"name": "w", "requests": {"cpu": "1", "memory": "1Gi"}, "cpu_usage": "x"}]))
    doc = scenario()
    doc["daemonsets"][0]["cpu_usage"] = "-1"
    with pytest.raises(ScenarioError, match=r"\$\.daemonsets\[0\]\.cpu_usage: must not be negative"):
        load_scenario(doc)
    spread = {"name": "w", "count": 5, "requests": {"cpu": {"min": "100m", "max": "900m"}, "memory": "1Gi"}}
    plain = World(scenario(workloads=[spread]), start=START)
    measured = World(scenario(workloads=[{**spread, "cpu_usage": {"min": "1", "max": "2"}}]), start=START)
    requests = sorted(p["spec"]["containers"][0]["resources"]["requests"]["cpu"] for p in plain.k8s_list("pods"))
    assert requests == sorted(p["spec"]["containers"][0]["resources"]["requests"]["cpu"] for p in measured.k8s_list("pods"))


# --- the Log Analytics double ---------------------------------------------------------------------


def test_the_query_answers_usage_and_capacity_in_nanocores_for_the_named_ready_nodes() -> None:
    world = busy_world()
    response = post(world, {"query": query([N1.upper(), "no-such-node"]), "timespan": "2030-01-07T08:50:00Z/2030-01-07T09:00:00Z"})
    assert response.status == 200
    (table,) = response.json()["tables"]
    assert table["name"] == "PrimaryResult"
    assert [c["name"] for c in table["columns"]] == ["Computer", "UsageNanoCores", "CapacityNanoCores"]
    assert table["rows"] == [[N1, 3.1e9, 4e9]]  # `in~`: names match whatever their case
    report = world.report()["api_calls"]
    assert report["loganalytics_queries"] == 1 and report["breakdown"]["loganalytics"] == {"POST query": 1}


@pytest.mark.parametrize(("body", "headers", "workspace", "status", "code"), [
    ({"query": "Perf | take 1"}, AUTH, None, 400, "BadArgumentError"),
    ({"query": loganalytics_api.QUERY_MARKER + "\nPerf"}, AUTH, None, 400, "BadArgumentError"),
    ({"timespan": "PT600S"}, AUTH, None, 400, "BadArgumentError"),
    ({"query": query([N0]), "timespan": "yesterday"}, AUTH, None, 400, "BadArgumentError"),
    ({"query": query([N0])}, {}, None, 401, "AuthorizationRequiredError"),
    ({"query": query([N0])}, {"Authorization": "Bearer nope"}, None, 401, "AuthorizationRequiredError"),
    ({"query": query([N0])}, {"Authorization": "Bearer sandbox-token"}, None, 401, "AuthorizationRequiredError"),
    ({"query": query([N0])}, EXPIRED, None, 401, "AuthorizationRequiredError"),
    ({"query": query([N0])}, ARM_AUTH, None, 403, "InvalidTokenError"),
    ({"query": query([N0])}, AUTH, "00000000-0000-0000-0000-000000000000", 404, "WorkspaceNotFoundError"),
], ids=["other query", "no node list", "no query", "bad timespan", "no token", "wrong token", "kubeconfig token",
        "expired token", "ARM's token", "unknown workspace"])
def test_the_double_refuses_what_the_service_would(
    body: dict[str, Any], headers: dict[str, str], workspace: str | None, status: int, code: str
) -> None:
    response = post(busy_world(), body, workspace=workspace, headers=headers)
    assert response.status == status
    assert response.json()["error"]["code"] == code


def test_timespans_in_each_form_the_sdk_sends_are_accepted() -> None:
    world = busy_world()
    for timespan in ("PT600.0S", "2030-01-07T08:50:00Z/PT600.0S", "2030-01-07T08:50:00.000Z/2030-01-07T09:00:00.000Z", None):
        assert post(world, {"query": query([N0]), "timespan": timespan}).status == 200


def test_an_injected_fault_answers_in_the_services_error_shape() -> None:
    world = busy_world()
    world.inject_fault(["loganalytics", "POST", "query"], status=429, retry_after=30)
    throttled = post(world, {"query": query([N0])})
    assert throttled.status == 429 and throttled.headers["Retry-After"] == "30"
    assert throttled.json()["error"]["code"] == "ThrottledError"
    assert post(world, {"query": query([N0])}).status == 200
    with pytest.raises(FaultError, match="'k8s', 'arm' or 'loganalytics'"):
        make_fault(["monitor", "*", "*"], status=500)


# --- Percentage CPU through the ARM double ---------------------------------------------------------------


def metrics(world: World, **query: str) -> Response:
    path = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/{POOL}" \
           "/providers/Microsoft.Insights/metrics"
    params = {"api-version": "2024-02-01", "metricnames": "Percentage CPU", "aggregation": "Average",
              "timespan": "2030-01-07T08:57:00Z/2030-01-07T09:00:00Z", "interval": "PT1M", **query}
    return arm_api.handle(world, Request.build("GET", path, {k: v for k, v in params.items() if v}, ARM_AUTH))


def test_percentage_cpu_is_split_per_instance_by_vm_name() -> None:
    world = busy_world()
    response = metrics(world, **{"$filter": "VMName eq '*'"})
    assert response.status == 200
    body = response.json()
    (metric,) = body["value"]
    assert (metric["name"]["value"], metric["unit"], metric["type"]) == ("Percentage CPU", "Percent", "Microsoft.Insights/metrics")
    series = {s["metadatavalues"][0]["value"]: s["data"] for s in metric["timeseries"]}
    assert set(series) == {f"{POOL}_0", f"{POOL}_1"}
    assert [p["timeStamp"] for p in series[f"{POOL}_1"]] == ["2030-01-07T08:57:00Z", "2030-01-07T08:58:00Z", "2030-01-07T08:59:00Z"]
    assert {p["average"] for p in series[f"{POOL}_1"]} == {77.5}
    assert {p["average"] for p in series[f"{POOL}_0"]} == {27.5}
    assert world.report()["api_calls"]["breakdown"]["arm"]["GET metrics"] == 1


def test_unsplit_top_one_name_and_intervals_before_the_node_have_no_value() -> None:
    world = busy_world()
    (whole,) = metrics(world).json()["value"][0]["timeseries"]
    assert whole["metadatavalues"] == [] and {p["average"] for p in whole["data"]} == {52.5}
    assert len(metrics(world, top="1", **{"$filter": "VMName eq '*'"}).json()["value"][0]["timeseries"]) == 1
    (one,) = metrics(world, **{"$filter": f"VMName eq '{POOL}_1'"}).json()["value"][0]["timeseries"]
    assert one["metadatavalues"][0]["value"] == f"{POOL}_1"
    early = metrics(world, timespan="2030-01-07T07:59:00Z/PT2M", **{"$filter": "VMName eq '*'"}).json()
    (first, second) = early["value"][0]["timeseries"][0]["data"]
    assert "average" not in first and second["average"] == 27.5  # the initial nodes came up at 08:00


@pytest.mark.parametrize("query", [
    {"metricnames": "Network In"}, {"aggregation": "Maximum"}, {"interval": "PT30S"}, {"interval": "P1D"},
    {"timespan": "2030-01-07T09:00:00Z/2030-01-07T08:00:00Z"}, {"timespan": "soon"},
    {"$filter": "LUN eq '0'"}, {"top": "many"}, {"timespan": "2030-01-01T00:00:00Z/2030-01-07T00:00:00Z"},
], ids=lambda q: next(iter(q.values())))
def test_metrics_requests_the_double_cannot_answer_are_400(query: dict[str, str]) -> None:
    response = metrics(busy_world(), **query)
    assert response.status == 400 and response.json()["error"]["code"] == "BadRequest"


def test_a_metrics_fault_leaves_the_scale_set_reads_alone() -> None:
    world = busy_world()
    world.inject_fault(["arm", "GET", "metrics"], status=503)
    assert metrics(world).status == 503
    assert metrics(world).status == 200
