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
    assert "Contracts: 7 kept, 0 broken" in result.stdout


def test_the_layers_contracts_cover_every_module() -> None:
    """A module missing from a `layers` contract is not checked by it: every top-level module of `shared`,
    every engine module and every top-level module or folder of `sandbox` must be named in its layers
    (add a new one where it belongs)."""
    import configparser

    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    for section, package in (("importlinter:contract:layers", ROOT / "shared"),
                             ("importlinter:contract:engine-layers", ROOT / "shared" / "engine"),
                             ("importlinter:contract:sandbox-layers", ROOT / "sandbox")):
        named = {name.strip() for line in config[section]["layers"].splitlines() for name in line.split("|")} - {""}
        present = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
        present |= {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
        assert present <= named, f"{section}: not in any layer: {sorted(present - named)}"


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
