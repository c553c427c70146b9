"""The cap on deallocated instances: which stopped instances are deleted, oldest first, and which are forgotten."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.domain import GroupState
from shared.engine.deallocated import trim_deallocated
from shared.engine.scale_down import ScaleDownOptions, group_rules
from tests.builders import T0, group

TAG = "k8s.io_cluster-autoscaler_node-template_autoscaling-options_scaledowndeallocatedmax"


def _state(**stopped_minutes_ago: int | None) -> GroupState:
    """Instances `i<id>=<minutes since we deallocated it>` (None: no time recorded, a row from before times were kept)."""
    ids = {name[1:]: ago for name, ago in stopped_minutes_ago.items()}
    return GroupState("rg/pool", stopped=frozenset(ids),
                      stopped_at={i: T0 - timedelta(minutes=ago) for i, ago in ids.items() if ago is not None})


@pytest.mark.parametrize(
    "case_id,state,cap,present,delete,forget",
    [
        ("under the cap: nothing", _state(i1=30, i2=10), 2, {"1", "2"}, (), set()),
        ("over the cap: the oldest go, oldest first", _state(i1=5, i2=50, i3=20, i4=1), 2, {"1", "2", "3", "4"},
         ("2", "3"), set()),
        ("no recorded time counts as oldest", _state(i7=None, i1=40, i2=20), 1, {"1", "2", "7"}, ("7", "1"), set()),
        ("same time: lower instance id first", _state(i10=5, i9=5, i2=5), 1, {"2", "9", "10"}, ("2", "9"), set()),
        ("cap 0: every stopped instance", _state(i1=5, i2=50), 0, {"1", "2"}, ("2", "1"), set()),
        ("gone or being deleted: forgotten, never deleted again, and not counted",
         _state(i1=60, i2=50, i3=5), 1, {"2", "3"}, ("2",), {"1"}),
    ],
)
def test_trim_keeps_the_most_recently_deallocated(case_id, state, cap, present, delete, forget) -> None:  # type: ignore[no-untyped-def]
    trim = trim_deallocated(state, cap=cap, present=present)
    assert trim.delete == delete
    assert trim.forget == forget
    after = trim.apply(state)
    assert len(after.stopped) == min(cap, len(state.stopped - forget))
    assert after.stopped == state.stopped - forget - set(delete)
    assert set(after.stopped_at) <= after.stopped


@pytest.mark.parametrize(
    "case_id,tags,cap",
    [
        ("the setting", {}, 3),
        ("the scale set's tag overrides it", {TAG: "1"}, 1),
        ("tag names are case-insensitive, as CA's", {TAG.upper(): " 0 "}, 0),
    ],
)
def test_the_cap_per_group(case_id, tags, cap) -> None:  # type: ignore[no-untyped-def]
    assert group_rules(group(tags=tags), ScaleDownOptions(deallocated_max=3)).deallocated_max == cap


@pytest.mark.parametrize("value", ["-1", "two", "1.5", ""])
def test_a_malformed_cap_tag_names_the_tag_and_group(value: str) -> None:
    with pytest.raises(ValueError, match=f"scale set rg/pool: tag {TAG}"):
        group_rules(group(tags={TAG: value}), ScaleDownOptions())
