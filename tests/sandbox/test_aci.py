"""sandbox/model/aci.py stands below the scenario model: the model imports it, never the reverse."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _imported(path: Path) -> set[str]:
    """Every module the file imports, those under `if TYPE_CHECKING:` included (a type-only import still
    ties the two modules in a circle a reader and a type checker must walk)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


@pytest.mark.parametrize("module", ["sandbox/model/aci.py", "sandbox/model/dists.py"])
def test_it_imports_nothing_of_the_scenario_model(module: str) -> None:
    assert not {name for name in _imported(ROOT / module) if name.startswith("sandbox.model.scenario")}


def test_the_scenario_model_declares_the_virtual_node_aci_defines() -> None:
    from sandbox.model import aci, scenario

    spec = scenario.load_scenario({"node_groups": [_GROUP], "virtual_node": {"quota_cores": 12}}).virtual_node
    assert isinstance(spec, aci.VirtualNodeSpec)
    assert aci.app_settings(spec)["ACI_QUOTA_CORES"] == "12"


_GROUP = {"resource_group": "rg", "name": "pool", "vm_size": "Standard_D4s_v5", "allocatable": {"cpu": "3", "memory": "12Gi"},
          "capacity": {"cpu": "4", "memory": "16Gi"}, "min": 0, "max": 3, "initial": 0}
