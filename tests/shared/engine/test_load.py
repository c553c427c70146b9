"""engine.load: which groups are load-driven, and how far measured CPU and a backlog grow them."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import TO_BE_DELETED_TAINT, GroupState, Node, Taint
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


# A DaemonSet render farm whose two idle agents the autoscaler itself decided to remove, while the three others
# finish the last frames at full CPU. Removing them is the right call; growing the farm meanwhile is not.
BUSY = [node(f"farm-{i}", group_name="farm", instance=i) for i in range(3)]
REMOVING = {"farm-3": "sd-1", "farm-4": "sd-1"}


def leaving(name: str, i: int, *, instance_gone: bool = False) -> Node:
    """An agent being removed: cordoned and tainted by the cordon step; once its instance has left the scale set
    the node no longer maps to the group (its Node object lingers until the kubelet's lease runs out)."""
    cordoned = replace(node(name, group_name="farm", instance=i, cordoned=True),
                       taints=(Taint(TO_BE_DELETED_TAINT, "1700000000", "NoSchedule"),))
    return replace(cordoned, mapped=True, mapped_to=None) if instance_gone else cordoned


@pytest.mark.parametrize("case_id,target,extra_nodes,removing,rule,backlog", [
    ("cordoned, instances still in the scale set", 5, [leaving("farm-3", 3), leaving("farm-4", 4)], REMOVING,
     LoadRule(0.5, 0), None),
    ("instances deleted, the action not finished yet", 3,
     [leaving("farm-3", 3, instance_gone=True), leaving("farm-4", 4, instance_gone=True)], REMOVING,
     DEFAULT, None),
    ("Node objects gone too, the action not finished yet", 3, [], REMOVING, DEFAULT, None),
    ("decided, the message still queued: reserved, not cordoned, not measured", 5,
     [node("farm-3", group_name="farm", instance=3), node("farm-4", group_name="farm", instance=4)], REMOVING,
     LoadRule(0.5, 0), None),
    ("tainted by a removal not in our state", 5, [leaving("farm-3", 3), leaving("farm-4", 4)], {},
     LoadRule(0.5, 0), None),
    ("an empty backlog the group is not sized by", 3, [], REMOVING, DEFAULT, 0),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_removal_under_way_vetoes_growth_on_cpu(case_id, target, extra_nodes, removing, rule, backlog) -> None:  # type: ignore[no-untyped-def]
    g = group("farm", target=target)
    measured = {n.name: 1.0 for n in BUSY}
    result = plan_load(snapshot(nodes=[*BUSY, *extra_nodes], groups=[g]), rules={g.id: rule}, measured=measured,
                       backlog=backlog, states={g.id: GroupState(g.id, removing=removing)}, now=T0,
                       cooldown=timedelta(minutes=5))
    assert result.increases == ()
    assert "farm-3 and 1 more being removed as idle" in result.waiting[g.id]
    # Without the removal the same load grows the farm: the veto is what keeps it.
    busy_only = plan_load(snapshot(nodes=BUSY, groups=[group("farm", target=3)]), rules={g.id: rule},
                          measured=measured, backlog=None, states={}, now=T0, cooldown=timedelta(minutes=5))
    assert busy_only.increases and busy_only.increases[0].new_target > 3


def test_a_backlog_still_grows_a_farm_with_a_removal_under_way() -> None:
    g = group("farm", target=3)
    result = plan_load(snapshot(nodes=BUSY, groups=[g]), rules={g.id: LoadRule(0.7, 4)},
                       measured={n.name: 1.0 for n in BUSY}, backlog=20, states={g.id: GroupState(g.id, removing=REMOVING)},
                       now=T0, cooldown=timedelta(minutes=5))
    (increase,) = result.increases
    assert increase.new_target == 5 and "backlog of 20" in increase.why
