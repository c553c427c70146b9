"""The pending poll grows load-driven groups from measured CPU and a backlog (in-memory ports, a real world)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.domain import Node
from shared.ports import UsageUnavailable
from shared.services.executor import Executor
from shared.services.pending import run_pending_poll
from shared.services.utilization import run_utilization_poll
from tests.memory_app import memory_app

SCENARIO: dict[str, Any] = {
    "name": "farm",
    "cluster_name": "farm",
    "flavour": "k3s",
    "arm_throttling": False,
    "node_groups": [
        {"resource_group": "rg-farm", "name": "render", "vm_size": "Standard_D4s_v5",
         "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}, "min": 1, "max": 10, "initial": 3,
         "tags": {"autoscaler-load-cpu": "0.7"}},
        {"resource_group": "rg-farm", "name": "web", "vm_size": "Standard_D4s_v5",
         "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}, "min": 1, "max": 10, "initial": 1},
    ],
    "daemonsets": [{"name": "renderer", "requests": {"cpu": "100m", "memory": "128Mi"}}],
}


class Usage:
    name = "fixed"

    def __init__(self, by_prefix: Mapping[str, float] | None) -> None:
        self.by_prefix = by_prefix
        self.asked: list[str] = []

    def get_node_cpu_usage(self, nodes: Sequence[Node], *, window: timedelta, now: datetime) -> Mapping[str, float]:
        self.asked = [n.name for n in nodes]
        if self.by_prefix is None:
            raise UsageUnavailable("workspace unreachable")
        return {n.name: value for n in nodes for prefix, value in self.by_prefix.items() if n.name.startswith(prefix)}


class Backlog:
    name = "queue frames"

    def __init__(self, length: int | None) -> None:
        self.length = length

    def get_backlog(self) -> int:
        if self.length is None:
            raise UsageUnavailable("queue gone")
        return self.length


def poll(usage: Usage | None, backlog: Backlog | None = None, **settings: str) -> tuple[list[dict[str, Any]], Any]:
    app = memory_app(SCENARIO, settings=settings)
    app.clock.advance(5)
    ports = replace(app.ports, usage=usage, backlog=backlog)
    result = run_pending_poll(ports, app.settings, now=app.clock.now())
    return [json.loads(text) for text in app.take_queued()], result


def test_a_busy_render_farm_grows_and_the_other_group_is_not_measured() -> None:
    usage = Usage({"render": 0.95})
    actions, result = poll(usage)
    (action,) = actions
    assert action["group"] == "rg-farm/render" and action["target_size"] == 5  # ceil(3 x 0.95 / 0.7)
    assert action["reason"].startswith("load: CPU 95%")
    assert usage.asked and all(name.startswith("render") for name in usage.asked)
    assert result.plan.increases[0].pods == ()


def test_an_idle_farm_is_not_grown() -> None:
    actions, _ = poll(Usage({"render": 0.2}))
    assert actions == []


def test_without_measurements_only_a_backlog_grows_the_farm(caplog: pytest.LogCaptureFixture) -> None:
    actions, _ = poll(Usage(None), Backlog(24), LOAD_BACKLOG_PER_NODE="4")
    (action,) = actions
    assert action["target_size"] == 6 and "backlog of 24" in action["reason"]
    assert "follow their backlog alone" in caplog.text


def test_an_unreadable_backlog_leaves_cpu_in_charge(caplog: pytest.LogCaptureFixture) -> None:
    actions, _ = poll(Usage({"render": 0.95}), Backlog(None), LOAD_BACKLOG_PER_NODE="4")
    assert [a["target_size"] for a in actions] == [5]
    assert "follow CPU alone" in caplog.text


def test_the_cluster_node_limit_caps_a_load_scale_up() -> None:
    # 3 render + 1 web + the k3s server, and room for 1 more
    actions, _ = poll(Usage({"render": 1.0}), MAX_NODES_TOTAL="6")
    assert [a["target_size"] for a in actions] == [4]


def test_a_group_named_in_the_setting_is_load_driven_too() -> None:
    actions, _ = poll(Usage({"web": 1.0}), LOAD_DRIVEN_GROUPS="RG-FARM/web")
    assert {(a["group"], a["target_size"]) for a in actions} == {("rg-farm/web", 2)}


def test_a_farm_whose_idle_agents_are_being_removed_is_not_grown_back(caplog: pytest.LogCaptureFixture) -> None:
    """Five agents: three finish the last frames at full CPU, two are idle. The utilisation poll decides to remove
    the idle two, the executor cordons them and asks ARM to delete them (the group's size drops to 3 before the
    action ends). The next pending poll sees three busy agents at 100 %, no work waiting, and must not grow the
    farm back to five: the removal under way is idle capacity, and the scale-down cooldown runs from its decision."""
    farm = {**SCENARIO, "node_groups": [{**SCENARIO["node_groups"][0], "initial": 5}, SCENARIO["node_groups"][1]]}
    app = memory_app(farm, settings={"SCALE_DOWN_UNNEEDED_TIME": "1m", "USAGE_SOURCE": "vmss-metric"})
    agents = sorted(n.name for n in app.ports.cluster.list_nodes() if n.name.startswith("render"))
    busy, idle = agents[:3], agents[3:]
    ports = replace(app.ports, usage=Usage({**{n: 1.0 for n in busy}, **{n: 0.02 for n in idle}}))
    decided = ()
    for _ in range(4):
        app.clock.advance(40)
        decided = decided or run_utilization_poll(ports, app.settings, now=app.clock.now()).enqueued
    assert decided, "the utilisation poll should have decided to remove the idle agents"
    executor = Executor(ports, app.settings)
    for message in app.take_queued():
        executor.execute(message, now=app.clock.now())  # cordon, drain, delete: the confirm step is yet to come
    (render,) = [g for g in ports.provider.list_node_groups() if g.name == "render"]
    assert render.capacity == 3 and set(ports.state.get_group(render.id).removing) == set(idle)
    app.clock.advance(17)
    with caplog.at_level(logging.INFO, logger="shared.services.load"):
        run_pending_poll(ports, app.settings, now=app.clock.now())
    # Only the removal's own next step is queued (it comes due meanwhile): no scale-up.
    assert [m["id"] for m in map(json.loads, app.take_queued())] == list(decided)
    assert f"node {idle[0]} and 1 more being removed as idle" in caplog.text
