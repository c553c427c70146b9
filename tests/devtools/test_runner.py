"""The local runner: start-up validation and host semantics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from devtools.runner import HostQueueConfig, resolve_expression

ROOT = Path(__file__).resolve().parents[2]


def test_missing_required_setting_fails_at_start_up_naming_it(tmp_path: Path) -> None:
    settings = tmp_path / "local.settings.json"
    settings.write_text(json.dumps({"IsEncrypted": False, "Values": {
        "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000",
        "NODE_RESOURCE_GROUPS": "rg", "KUBECONFIG_PATH": "/nonexistent", "AzureWebJobsStorage": "UseDevelopmentStorage=true",
        "SCALE_DOWN_UNNEEDED_TIME": "soon",
    }}))
    env = {k: v for k, v in os.environ.items() if k not in ("CLUSTER_NAME", "SCALE_DOWN_UNNEEDED_TIME")}
    result = subprocess.run([sys.executable, "-m", "devtools.runner", "--settings", str(settings), "--once"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "CLUSTER_NAME: missing (required)" in result.stderr
    assert "SCALE_DOWN_UNNEEDED_TIME: not a duration" in result.stderr


def test_example_settings_file_names_every_required_setting() -> None:
    from shared.settings import SPECS

    values = json.loads((ROOT / "local.settings.example.json").read_text())["Values"]
    required = {spec.name for spec in SPECS if spec.default is None}
    assert required <= values.keys()
    assert {"FUNCTIONS_WORKER_RUNTIME", "AzureWebJobsStorage", "PENDING_POLL_SCHEDULE", "UTILIZATION_POLL_SCHEDULE",
            "STATE_SWEEP_SCHEDULE",
            "SCALE_ACTIONS_QUEUE"} <= values.keys()  # the host resolves %NAME% bindings from these


def test_host_json_queue_settings_are_honoured() -> None:
    config = HostQueueConfig.from_host_json(ROOT / "host.json")
    assert config.max_dequeue_count == 5
    assert config.visibility_timeout.total_seconds() == 10


def test_binding_expressions_use_settings_then_documented_defaults() -> None:
    assert resolve_expression("%SCALE_ACTIONS_QUEUE%", {}) == "scale-actions"
    assert resolve_expression("%SCALE_ACTIONS_QUEUE%", {"SCALE_ACTIONS_QUEUE": "q"}) == "q"
    assert resolve_expression("literal", {}) == "literal"
