"""The pending poll grows load-driven groups from measured CPU and a backlog (in-memory ports, a real world)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.domain import Node
from shared.ports import UsageUnavailable
from shared.services.pending import run_pending_poll
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
