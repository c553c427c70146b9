"""The server as a whole: TLS files, kubeconfig, env(), /sandbox/ controls and the command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client as k8s

from sandbox.api.server import SandboxServer
from sandbox.world.identity import ARM_AUDIENCE
from tests.fixtures.sandbox import kube_api_client

ROOT = Path(__file__).resolve().parents[2]


def control(server: SandboxServer, method: str, path: str, body: Any = None) -> requests.Response:
    return requests.request(method, f"{server.url}{path}", json=body, verify=str(server.ca_path), timeout=10)


def test_tls_material_and_kubeconfig_are_written(sandbox: SandboxServer) -> None:
    assert sandbox.ca_path.read_text().startswith("-----BEGIN CERTIFICATE-----")
    config = json.loads(sandbox.kubeconfig_path.read_text())
    (cluster,) = config["clusters"]
    assert cluster["cluster"] == {"server": sandbox.url, "certificate-authority": str(sandbox.ca_path)}
    assert config["users"][0]["user"] == {"token": "sandbox-token"}
    assert config["current-context"] == config["contexts"][0]["name"]
    assert sandbox.url.startswith("https://127.0.0.1:")


def test_env_points_the_autoscaler_at_the_sandbox(sandbox: SandboxServer) -> None:
    assert sandbox.env() == {
        "CLUSTER_NAME": "sandbox",
        "AZURE_SUBSCRIPTION_ID": sandbox.subscription_id,
        "NODE_RESOURCE_GROUPS": "rg-sandbox-nodes",
        "KUBECONFIG_PATH": str(sandbox.kubeconfig_path),
        "ARM_ENDPOINT": sandbox.url,
        "ARM_CA_BUNDLE": str(sandbox.ca_path),
        "AZURE_CREDENTIAL": "sandbox",
        "SANDBOX_IDENTITY_ENDPOINT": f"{sandbox.url}/msi/token",
        "USAGE_SOURCE": "log-analytics",
        "LOG_ANALYTICS_ENDPOINT": f"{sandbox.url}/loganalytics",
        "LOG_ANALYTICS_WORKSPACE_ID": sandbox.world.workspace_id,
        "RETAIL_PRICES_ENDPOINT": sandbox.url,
    }


def test_the_certificate_is_valid_for_localhost_too(sandbox: SandboxServer) -> None:
    response = requests.get(f"https://localhost:{sandbox.port}/sandbox/clock", verify=str(sandbox.ca_path), timeout=10)
    assert response.status_code == 200


def test_clock_state_and_report_follow_the_manual_clock(sandbox: SandboxServer) -> None:
    clock = control(sandbox, "GET", "/sandbox/clock").json()
    assert clock == {"now": "2030-01-07T09:00:00+00:00", "sim_seconds": 0.0, "speed": 1.0}
    sandbox.clock.advance(120)  # type: ignore[attr-defined]
    state = control(sandbox, "GET", "/sandbox/state").json()
    assert state["sim_seconds"] == 120 and state["done"] is False
    assert state["groups"]["rg-sandbox-nodes/pool-d4"] == {"ready": 1, "booting": 0, "deleting": 0, "deallocated": 0, "target": 1, "min": 1, "max": 60, "idle": 0, "autoscaled": True}
    assert state["pending"] + state["running"] == 100
    report = control(sandbox, "GET", "/sandbox/report").json()
    assert report["scenario"] == "burst" and report["pods_total"] == 100
    assert report["pods_unschedulable"] == state["pending"] > 0
    assert len(report["timeline"]) == 13 and report["node_seconds"] == 120 and report["nodes_max"] == 1


def test_the_manual_clock_can_be_advanced_over_http(sandbox: SandboxServer) -> None:
    assert control(sandbox, "POST", "/sandbox/clock/advance", {"seconds": 30}).json()["sim_seconds"] == 30


def test_requests_advance_the_world(sandbox: SandboxServer) -> None:
    core = k8s.CoreV1Api(kube_api_client(sandbox))
    assert core.list_namespaced_pod("default").items == []
    sandbox.clock.advance(95)  # type: ignore[attr-defined]
    assert len(core.list_namespaced_pod("default").items) == 100  # arrivals over 30-90 s, seen at once


@pytest.mark.parametrize(
    ("body", "check"),
    [
        ({"target": ["k8s", "GET", "nodes"], "status": 500, "count": 1},
         lambda s: _status(s, f"{s.url}/api/v1/nodes") == 500),
        ({"target": ["arm", "GET", "pool-d4"], "status": 503, "code": "ServerBusy"},
         lambda s: _status(s, f"{s.url}/subscriptions/{s.subscription_id}/resourceGroups/rg-sandbox-nodes/providers/"
                              f"Microsoft.Compute/virtualMachineScaleSets/pool-d4?api-version=2024-11-01") == 503),
        ({"kind": "scale_up_failure", "scale_set": "pool-d4", "code": "SkuNotAvailable"},
         lambda s: s.world.scale_set(s.subscription_id, "rg-sandbox-nodes", "pool-d4").scale_up_failures[0].code == "SkuNotAvailable"),
    ],
)
def test_faults_can_be_injected_over_http(sandbox: SandboxServer, body: dict[str, Any], check: Any) -> None:
    assert control(sandbox, "POST", "/sandbox/faults", body).status_code == 201
    assert check(sandbox)


def _status(server: SandboxServer, url: str) -> int:
    # The kubeconfig's static token for the Kubernetes API, an identity token for ARM.
    token = server.world.identity.issue(ARM_AUDIENCE).token if "/subscriptions/" in url else server.world.token
    return requests.get(url, headers={"Authorization": f"Bearer {token}"}, verify=str(server.ca_path), timeout=10).status_code


@pytest.mark.parametrize(
    "body", [{"target": ["db", "GET", "x"], "status": 500}, {"target": ["k8s", "GET", "pods"], "status": 200}, ["x"], {}]
)
def test_bad_faults_are_refused(sandbox: SandboxServer, body: Any) -> None:
    response = control(sandbox, "POST", "/sandbox/faults", body)
    assert response.status_code == 400 and "invalid fault" in response.json()["error"]


def test_unknown_paths_are_not_found(sandbox: SandboxServer) -> None:
    assert control(sandbox, "GET", "/sandbox/nothing").status_code == 404
    assert control(sandbox, "GET", "/elsewhere").status_code == 404


def test_serve_prints_one_json_line_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "serve", "--scenario", "burst", "--speed", "50", "--seed", "1",
         "--port", "0", "--workdir", str(tmp_path / "out")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        assert set(info) == {"url", "ca_path", "kubeconfig_path", "env", "identity_endpoint", "identity_header",
                             "aks_cluster_id", "kubeconfig_secret_uri"}
        assert info["env"]["ARM_ENDPOINT"] == info["url"] and Path(info["kubeconfig_path"]).exists()
        assert info["env"]["SANDBOX_IDENTITY_ENDPOINT"] == info["identity_endpoint"] == f"{info['url']}/msi/token"
        assert info["kubeconfig_secret_uri"] == f"{info['url']}/secrets/kubeconfig"
        assert info["aks_cluster_id"].endswith("/resourceGroups/rg-sandbox/providers/Microsoft.ContainerService/managedClusters/sandbox")
        state = requests.get(f"{info['url']}/sandbox/state", verify=info["ca_path"], timeout=10).json()
        assert state["groups"]["rg-sandbox-nodes/pool-d4"]["target"] == 1
        clock = requests.get(f"{info['url']}/sandbox/clock", verify=info["ca_path"], timeout=10).json()
        assert clock["speed"] == 50
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


def test_validate_reports_bad_scenarios(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"node_groups": []}))
    result = subprocess.run([sys.executable, "-m", "sandbox", "validate", "burst", str(bad)], cwd=ROOT,
                            capture_output=True, text=True, timeout=30, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 1
    assert "ok: " in result.stdout and "burst" in result.stdout
    assert "bad.json: $.node_groups: must name at least one scale set" in result.stderr


def test_a_running_clock_is_held_and_released_over_http(sandbox_factory: Any) -> None:
    server = sandbox_factory("burst", speed=1000)
    held = control(server, "POST", "/sandbox/clock/hold", {"holder": "runner", "until": None, "lease_seconds": 60}).json()
    assert held["bound"] == held["sim_seconds"]
    stood = control(server, "GET", "/sandbox/clock").json()["sim_seconds"]
    assert stood == pytest.approx(held["sim_seconds"], abs=0.001)  # 1000 sim seconds a wall second, and not one of them passed
    released = control(server, "POST", "/sandbox/clock/release", {"holder": "runner"}).json()
    assert released["bound"] is None


@pytest.mark.parametrize("body", [
    {}, {"holder": ""}, {"holder": 7}, {"holder": "r", "until": "soon"}, {"holder": "r", "until": True},
    {"holder": "r", "lease_seconds": "10"}, {"holder": "r", "lease_seconds": -1}, ["r"],
])
def test_a_malformed_hold_is_refused_naming_the_field_and_holds_nothing(sandbox_factory: Any, body: Any) -> None:
    server = sandbox_factory("burst", speed=1000)
    response = control(server, "POST", "/sandbox/clock/hold", body)
    assert response.status_code == 400 and "invalid clock hold" in response.json()["error"]
    assert server.clock.bound() is None


def test_a_manual_clock_cannot_be_held(sandbox: SandboxServer) -> None:
    response = control(sandbox, "POST", "/sandbox/clock/hold", {"holder": "runner"})
    assert response.status_code == 409
