"""engine.load: which groups are load-driven, and how far measured CPU and a backlog grow them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.domain import GroupState
from shared.engine.load import LoadRule, load_rules, plan_load
from tests.builders import T0, group, node, snapshot

DEFAULT = LoadRule(0.7, 0)


@pytest.mark.parametrize("tags,named,expected,problem", [
    ({}, (), None, None),
    ({}, ("rg/farm",), DEFAULT, None),
    ({}, ("RG/farm",), DEFAULT, None),  # resource groups compare case-insensitively
    ({"autoscaler-load-cpu": "0.8"}, (), LoadRule(0.8, 0), None),
    ({"autoscaler-load-backlog-per-node": "4"}, (), LoadRule(0.7, 4), None),
    ({"autoscaler-load-cpu": "80"}, (), None, "must be a fraction above 0 and at most 1"),
    ({"autoscaler-load-cpu": "busy"}, (), None, "is not a number"),
    ({"autoscaler-load-backlog-per-node": "0"}, (), None, "must be a whole number from 1"),
])
def test_load_rules_come_from_tags_over_the_settings(tags, named, expected, problem) -> None:  # type: ignore[no-untyped-def]
    rules, problems = load_rules([group("farm", tags=tags), group("other")], named=named, default=DEFAULT)
    assert rules.get("rg/farm") == expected and "rg/other" not in rules
    if problem is None:
        assert problems == {}
    else:
        assert problem in problems["rg/farm"] and "autoscaler-load" in problems["rg/farm"]


def farm(n: int, *, target: int | None = None, max_size: int = 10) -> tuple:  # type: ignore[type-arg]
    nodes = [node(f"farm-{i}", group_name="farm", instance=i) for i in range(n)]
    return group("farm", target=n if target is None else target, max_size=max_size), nodes


def plan(n: int, cpu: list[float] | None, *, backlog: int | None = None, rule: LoadRule = DEFAULT,
         target: int | None = None, max_size: int = 10, last_up: timedelta | None = None,
         last_down: timedelta | None = None):  # type: ignore[no-untyped-def]
    g, nodes = farm(n, target=target, max_size=max_size)
    measured = None if cpu is None else {f"farm-{i}": c for i, c in enumerate(cpu)}
    states = {g.id: GroupState(g.id, last_scale_up=T0 - last_up if last_up is not None else None,
                               last_scale_down=T0 - last_down if last_down is not None else None)}
    return plan_load(snapshot(nodes=nodes, groups=[g]), rules={g.id: rule}, measured=measured, backlog=backlog,
                     states=states, now=T0, cooldown=timedelta(minutes=5))


@pytest.mark.parametrize("case_id,kwargs,target,waiting", [
    ("busy farm grows in proportion to its load", dict(n=4, cpu=[0.95, 0.9, 1.0, 0.95]), 6, None),
    ("at the threshold nothing happens", dict(n=4, cpu=[0.7] * 4), None, None),
    ("idle farm is left to scale-down", dict(n=4, cpu=[0.05] * 4), None, None),
    ("capped at max", dict(n=4, cpu=[1.0] * 4, max_size=5), 5, None),
    ("at max already: waits, says why", dict(n=5, cpu=[1.0] * 5, max_size=5), None, "at its max size 5"),
    ("nodes booting: their load is not measured yet", dict(n=4, cpu=[1.0] * 4, target=6), None, "not registered yet"),
    ("cooldown after a scale-up", dict(n=4, cpu=[1.0] * 4, last_up=timedelta(minutes=2)), None, "cooldown"),
    ("past the cooldown", dict(n=4, cpu=[1.0] * 4, last_up=timedelta(minutes=6)), 6, None),
    ("no measurement: CPU cannot grow it", dict(n=4, cpu=None), None, None),
    ("nodes without a sample do not count", dict(n=4, cpu=[1.0, 1.0]), 6, None),
    ("backlog grows an empty farm from zero", dict(n=0, cpu=None, backlog=10, rule=LoadRule(0.7, 4)), 3, None),
    ("backlog larger than CPU asks", dict(n=2, cpu=[0.9, 0.9], backlog=20, rule=LoadRule(0.7, 4)), 5, None),
    ("CPU larger than backlog asks", dict(n=4, cpu=[1.0] * 4, backlog=4, rule=LoadRule(0.7, 4)), 6, None),
    ("a backlog is ignored by a group not sized by one", dict(n=1, cpu=[0.1], backlog=50), None, None),
    # CPU cannot tell new work from the last frames of a draining farm: what vetoes it.
    ("an idle node: the farm has room", dict(n=4, cpu=[1.0, 1.0, 1.0, 0.1]), None, "farm-3 is idle"),
    ("an idle node was just removed", dict(n=3, cpu=[1.0] * 3, last_down=timedelta(minutes=2)), None,
     "removed an idle node 120s ago"),
    ("past that cooldown", dict(n=3, cpu=[1.0] * 3, last_down=timedelta(minutes=6)), 5, None),
    ("an empty backlog: the busy nodes are finishing", dict(n=3, cpu=[1.0] * 3, backlog=0, rule=LoadRule(0.7, 4)),
     None, "the backlog is empty"),
    ("a backlog still grows a farm whose CPU is vetoed", dict(n=3, cpu=[1.0, 1.0, 0.1], backlog=20,
                                                             rule=LoadRule(0.7, 4)), 5, None),
])
def test_load_plan(case_id, kwargs, target, waiting) -> None:  # type: ignore[no-untyped-def]
    result = plan(**kwargs)
    if target is None:
        assert result.increases == ()
    else:
        (increase,) = result.increases
        assert increase.new_target == target and increase.new_target > increase.current_target and increase.why
    if waiting is None:
        assert "rg/farm" not in result.waiting
    else:
        assert waiting in result.waiting["rg/farm"]


def test_a_load_plan_never_shrinks_and_never_passes_max() -> None:
    for n in range(0, 8):
        for load in (0.0, 0.5, 0.71, 1.0):
            for backlog in (None, 0, 3, 100):
                result = plan(n, [load] * n, backlog=backlog, rule=LoadRule(0.7, 2), max_size=6)
                for increase in result.increases:
                    assert increase.current_target < increase.new_target <= 6
