"""DRY_RUN=true, on both apps of test_executor.py: every decision is made, logged and recorded; nothing changes."""

from __future__ import annotations

from typing import Any

import pytest

from shared.services.executor import Executor
from shared.services.pending import run_pending_poll
from shared.services.utilization import run_utilization_poll
from tests.shared.services.test_executor import (  # noqa: F401 (make: fixture)
    GROUP, App, MakeApp, make, scale_down, scale_up)

WRITES = ("PATCH virtualMachineScaleSets", "POST delete", "POST deallocate", "POST start",
          "PUT virtualMachineScaleSets")


@pytest.fixture
def dry(make: MakeApp) -> App:
    return make(settings={"DRY_RUN": "true", "SCALE_DOWN_UNNEEDED_TIME": "0s", "SCALE_DOWN_DELAY_AFTER_ADD": "0s"})


def _no_cluster_writes(app: App) -> None:
    k8s = app.world.report()["api_calls"]["breakdown"]["k8s"]
    written = {op: n for op, n in k8s.items() if op.split()[0] in ("PATCH", "UPDATE", "DELETE", "POST")
               or op.startswith("CREATE configmaps")}
    assert written == {}, written


def test_a_dry_scale_up_is_recorded_and_the_scale_set_keeps_its_size(dry: App) -> None:
    result = dry.run(scale_up(dry, 5))
    assert (result.outcome, result.detail) == ("dry-run", "would grow rg-exec/pool 3 -> 5 (starting 0 deallocated instance(s))")
    entry = dry.context.ports.state.get_ledger_entry("up-1")
    assert entry is not None and entry.status == "done"
    assert entry.outcome == "dry-run: would grow rg-exec/pool 3 -> 5 (starting 0 deallocated instance(s))"
    assert all(dry.arm_calls(op) == 0 for op in WRITES)
    group = dry.context.ports.provider.get_node_group(GROUP)
    assert group is not None and group.capacity == 3
    assert dry.queued() == []  # no follow-up step: nothing to confirm


def test_a_dry_scale_down_neither_cordons_nor_deletes(dry: App) -> None:
    _, idle = dry.busy_and_idle()
    result = dry.run(scale_down(dry, idle[0]))
    assert (result.outcome, result.detail) == ("dry-run", f"would remove node(s) {idle[0]}")
    node = dry.context.ports.cluster.get_node(idle[0])
    assert node is not None and not node.unschedulable and node.taints == ()
    assert dry.node_names() == sorted([*idle, dry.busy_and_idle()[0]])
    # The reservation taken to validate the removal is given back: a real run may take the node later.
    assert idle[0] not in dry.context.ports.state.get_group(GROUP).removing
    assert all(dry.arm_calls(op) == 0 for op in WRITES)
    _no_cluster_writes(dry)


def test_dry_polls_decide_and_enqueue_but_leave_the_cluster_alone(dry: App) -> None:
    ports, settings = dry.context.ports, dry.context.settings
    executor = Executor(ports, settings)
    down = run_utilization_poll(ports, settings, now=dry.clock.now())
    assert down.enqueued, "idle nodes above the minimum are decided for removal"
    outcomes = [executor.execute(message["text"], now=dry.clock.now()).outcome for message in _drain(dry)]
    dry.clock.advance(3600 + 5)  # the burst Job arrives: four pods that need new nodes
    up = run_pending_poll(ports, settings, now=dry.clock.now())
    assert up.enqueued and up.plan.increases[0].new_target > 3
    outcomes += [executor.execute(message["text"], now=dry.clock.now()).outcome for message in _drain(dry)]
    assert outcomes == ["dry-run", "dry-run"]
    assert all(dry.arm_calls(op) == 0 for op in WRITES)
    _no_cluster_writes(dry)  # no soft taint, no cordon, no status ConfigMap
    assert ports.cluster.get_config_map("kube-system", "cluster-autoscaler-status") is None


def _drain(app: App) -> list[dict[str, Any]]:
    """Every queued message's text, removed from the queue."""
    return [{"text": text} for text in app.take_queued()]
