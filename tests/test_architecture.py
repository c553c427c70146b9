"""The layering rules of docs/architecture.md, enforced with import-linter (.importlinter)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--config", str(ROOT / ".importlinter"), "--no-cache"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 4 kept, 0 broken" in result.stdout


def test_function_app_import_is_light() -> None:
    """Cold start: importing function_app loads no Azure management, storage or Kubernetes SDK."""
    code = (
        "import sys, function_app; "
        "heavy = [m for m in sys.modules if m.startswith(('azure.mgmt', 'azure.data', 'azure.storage', 'kubernetes', 'azure.identity'))]; "
        "print(','.join(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
