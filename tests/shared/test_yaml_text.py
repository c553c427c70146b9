"""shared.yaml_text: libyaml where available, the same documents either way, and never arbitrary objects."""

from __future__ import annotations

import pytest
import yaml

from shared import yaml_text

DOC = {"time": "2026-01-01T00:00:00Z", "autoscalerStatus": "Running",
       "nodeGroups": [{"name": "rg/pool", "health": {"status": "Healthy", "minSize": 2}, "note": "ümlaut: yes"}]}


def test_uses_libyaml_when_pyyaml_has_it() -> None:
    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML built without libyaml: the pure-Python classes are used")
    assert yaml_text._LOADER is yaml.CSafeLoader and yaml_text._DUMPER is yaml.CSafeDumper


@pytest.mark.parametrize("options", [{}, {"sort_keys": False, "default_flow_style": False, "width": 1_000_000}])
def test_writes_what_the_pure_python_dumper_writes_and_reads_it_back(options: dict[str, object]) -> None:
    text = yaml_text.safe_dump(DOC, **options)
    assert text == yaml.safe_dump(DOC, **options)
    assert yaml_text.safe_load(text) == DOC


def test_refuses_python_objects_like_safe_load() -> None:
    with pytest.raises(yaml_text.YAMLError):
        yaml_text.safe_load("!!python/object/apply:os.system ['true']")
