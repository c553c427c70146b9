"""`python -m shared.cli plan` against the sandbox: it says what would happen and changes nothing."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared.adapters.table_state import TableStateStore
from shared.cli import main
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory
from tests.shared.adapters import sandbox_world

_D4 = {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}
SCENARIO: dict[str, Any] = sandbox_world.scenario(
    name="plan",
    node_groups=[
        {"resource_group": "rg-it", "name": "pool-a", "vm_size": "Standard_D4s_v5", "allocatable": _D4,
         "min": 0, "max": 5, "initial": 2},
        {"resource_group": "rg-it", "name": "pool-idle", "vm_size": "Standard_D4s_v5", "allocatable": _D4,
         "min": 0, "max": 3, "initial": 1,
         # Only wide pods may use pool-a's room: the idle pool stays empty.
         "taints": [{"key": "dedicated", "value": "idle", "effect": "NoSchedule"}]},
    ],
    daemonsets=[],
    # Two fit on pool-a's two nodes, two are pending: a scale-up of pool-a by two.
    workloads=[{"name": "wide", "kind": "ReplicaSet", "count": 4, "requests": {"cpu": "3", "memory": "1Gi"}}],
    pdbs=[],
)
FLAG_SETTINGS = ("KUBECONFIG_PATH", "AZURE_SUBSCRIPTION_ID", "NODE_RESOURCE_GROUPS", "CLUSTER_NAME")


@pytest.fixture
def server(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(SCENARIO, clock=ManualClock(SANDBOX_START))


def _argv(server: SandboxServer, *extra: str) -> list[str]:
    env = server.env()
    return ["plan", "--kubeconfig", env["KUBECONFIG_PATH"], "--subscription", env["AZURE_SUBSCRIPTION_ID"],
            "--resource-group", "rg-it", "--cluster-name", env["CLUSTER_NAME"], *extra]


def _environ(server: SandboxServer, **more: str) -> dict[str, str]:
    """The sandbox's endpoints and credential, as an operator's shell would export them."""
    return {k: v for k, v in server.env().items() if k not in FLAG_SETTINGS} | more


def _untouched(server: SandboxServer) -> None:
    counters = server.world.counters
    assert not any(op.startswith(("PATCH", "PUT", "POST", "DELETE")) for op in counters.arm), counters.arm
    assert not any(op.split()[0] in ("CREATE", "UPDATE", "PATCH", "DELETE", "POST") for op in counters.k8s), counters.k8s


def test_plan_prints_the_scale_up_and_the_idle_node_and_changes_nothing(
        server: SandboxServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_argv(server), environ=_environ(server), now=SANDBOX_START) == 0
    out = capsys.readouterr().out
    assert "nothing below has been done" in out
    assert "pending pods: 2" in out
    assert "rg-it/pool-a: 2 -> 4 for 2 pending pod(s)" in out
    assert "scale down: none now" in out
    # A D4s_v5 group in the default idle mode (auto: break-even on a size without GPUs), no boot measured yet:
    # kept idle for the default boot estimate, 180 s.
    assert "pool-idle000000: unneeded since 2030-01-07T09:00:00+00:00, removable from 2030-01-07T09:03:00+00:00" in out
    _untouched(server)


def test_plan_json_with_state_removes_a_node_unneeded_long_enough(
        server: SandboxServer, azurite: str, table_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    from shared.adapters.storage_connection import StorageConnection

    with TableStateStore(StorageConnection.from_string(azurite, name="azurite"), table_name) as store:
        store.set_unneeded("pool-idle000000", SANDBOX_START - timedelta(minutes=20))
        environ = _environ(server, AzureWebJobsStorage=azurite, STATE_TABLE=table_name)
        assert main(_argv(server, "--with-state", "--json"), environ=environ, now=SANDBOX_START) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["scale_up"] == [{"group": "rg-it/pool-a", "from": 2, "to": 4, "pods": report["scale_up"][0]["pods"]}]
        assert len(report["scale_up"][0]["pods"]) == 2
        assert [(r["node"], r["kind"]) for r in report["scale_down"]] == [("pool-idle000000", "empty")]
        assert {a["kind"] for a in report["actions"]} == {"scale_up", "scale_down"}
        # Read, never written: the row is as we left it, and no ledger or group rows appeared.
        assert store.list_unneeded() == {"pool-idle000000": SANDBOX_START - timedelta(minutes=20)}
        assert store.list_ledger() == []
    _untouched(server)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["plan", "--setting", "oops"], "--setting takes NAME=VALUE, got 'oops'"),
    ],
)
def test_bad_flags_are_named(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        main(argv, environ={})


def test_missing_settings_are_named_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--kubeconfig", "/nowhere"], environ={}) == 2
    err = capsys.readouterr().err
    assert "CLUSTER_NAME: missing" in err and "AZURE_SUBSCRIPTION_ID: missing" in err


def test_a_kubeconfig_that_is_not_there_is_a_settings_problem_named_at_once(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-kubeconfig"
    argv = ["plan", "--kubeconfig", str(missing), "--subscription", "s", "--resource-group", "rg", "--cluster-name", "c"]
    assert main(argv, environ={}) == 2
    err = capsys.readouterr().err
    assert f"KUBECONFIG_PATH: no such file: '{missing}'" in err and "Traceback" not in err


def test_an_unreadable_kubeconfig_is_named_without_a_traceback(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("this is not a kubeconfig")
    argv = ["plan", "--kubeconfig", str(broken), "--subscription", "s", "--resource-group", "rg", "--cluster-name", "c"]
    assert main(argv, environ={}) == 1
    err = capsys.readouterr().err
    assert err.startswith("plan: load kubeconfig") and str(broken) in err and "Traceback" not in err


def test_plan_warns_of_a_setting_that_looks_misspelt(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--kubeconfig", str(tmp_path / "none"), "--subscription", "s", "--resource-group", "rg",
            "--cluster-name", "c"]
    main(argv, environ={"SCALE_DOWN_UNEEDED_TIME": "5m"})
    err = capsys.readouterr().err
    assert "SCALE_DOWN_UNEEDED_TIME: not a setting of ours; did you mean SCALE_DOWN_UNNEEDED_TIME?" in err


@pytest.mark.parametrize("scenario,groups,nodes", [
    ("k3s-render-farm", {"rg-farm-k3s/agents": "vmss-uniform"},
     {"agents000000": "hostname", "k3s-server": None}),
    ("kubeadm-ip", {"rg-kubeadm/workers": "vmss-uniform"}, {"worker-workers-1": "ip"}),
    ("flex-burst", {"rg-flex/pool-flex": "vmss-flexible"}, {}),
    ("aks-pools", {"rg-aks/batch": "aks-agentpool", "rg-aks/web": "refused"},
     {"aks-batch-78511822-vmss000000": "provider-id", "aks-web-78511822-vmss000000": None}),
])
def test_plan_names_each_group_s_backend_and_each_node_s_mapping(
        sandbox_factory: SandboxFactory, capsys: pytest.CaptureFixture[str], scenario: str,
        groups: dict[str, str], nodes: dict[str, str | None]) -> None:
    server = sandbox_factory(scenario, clock=ManualClock(SANDBOX_START))
    assert main(["plan", "--json"], environ=server.env(), now=SANDBOX_START) == 0
    report = json.loads(capsys.readouterr().out)
    found = {g["group"]: g.get("backend", "refused" if "refused" in g else None) for g in report["groups"]}
    assert found == groups
    assert report["nodes"] and all(n["mapping"] in ("provider-id", "hostname", "ip") or n.get("why")
                                   for n in report["nodes"].values())
    for name, method in nodes.items():
        entry = report["nodes"][name]
        assert entry["mapping"] == (method or "none")
    if scenario == "aks-pools":  # the refused pool's node says why it is left alone
        assert "rg-aks/web, which is refused: the AKS cluster autoscaler is on" in (
            report["nodes"]["aks-web-78511822-vmss000000"]["why"])
    if scenario == "flex-burst":  # every node is a member VM, by its plain-VM providerID
        assert {n["mapping"] for n in report["nodes"].values()} == {"provider-id"}
    _untouched(server)
