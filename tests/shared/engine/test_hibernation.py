"""engine.hibernation: hibernate only when the setting or the group's tag asks for it and the set allows it."""

from __future__ import annotations

import pytest

from shared.domain import FLEXIBLE_SCALE_SET, UNIFORM_SCALE_SET, NodeGroup
from shared.engine.hibernation import HIBERNATE_TAG, hibernation_choice, parse_hibernate, wants_hibernation


def _group(*, enabled: bool, tag: str | None = None, key: str = HIBERNATE_TAG) -> NodeGroup:
    tags = {} if tag is None else {key: tag}
    return NodeGroup("rg", "pool", 0, 10, 2, "Standard_D4s_v5", tags=tags,
                     provider=FLEXIBLE_SCALE_SET if enabled else UNIFORM_SCALE_SET, hibernation_enabled=enabled)


@pytest.mark.parametrize("setting,tag,wanted", [
    (False, None, False),
    (True, None, True),
    (False, "true", True),    # the tag wins over the setting ...
    (True, "false", False),   # ... both ways
    (True, " FALSE ", False),
    (False, "yes", True),
])
@pytest.mark.parametrize("enabled", [True, False], ids=["set allows", "set cannot"])
def test_hibernate_exactly_when_wanted_and_allowed(setting: bool, tag: str | None, wanted: bool, enabled: bool) -> None:
    group = _group(enabled=enabled, tag=tag)
    assert wants_hibernation(group, setting=setting) == wanted
    choice = hibernation_choice(group, setting=setting)
    assert choice.hibernate == (wanted and enabled)
    assert choice.why  # always says why, hibernating or not
    if wanted and not enabled:
        assert "cannot hibernate" in choice.why


def test_the_tag_key_is_read_in_any_case() -> None:
    assert wants_hibernation(_group(enabled=True, tag="true", key=HIBERNATE_TAG.upper()), setting=False)


@pytest.mark.parametrize("text", ["", "maybe", "2", "truefalse"])
def test_a_malformed_value_is_an_error_naming_the_group_and_the_tag(text: str) -> None:
    with pytest.raises(ValueError, match="must be true or false"):
        parse_hibernate(text)
    with pytest.raises(ValueError) as caught:
        hibernation_choice(_group(enabled=True, tag=text), setting=True)
    assert "rg/pool" in str(caught.value) and HIBERNATE_TAG in str(caught.value)
