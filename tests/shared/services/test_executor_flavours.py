"""The executor removes nodes that only hostname or IP mapping ties to their instance (k3s, kubeadm), and
refuses a message whose instance is not the one the node maps to now. In-memory ports over a real world."""

from __future__ import annotations

from typing import Any

import pytest

from shared.actions import RemovalTarget, encode_action, new_scale_down
from shared.services.executor import Executor
from shared.services.mapping import map_cluster
from tests.memory_app import MemoryApp, memory_app
from tests.shared.services.decided import as_the_poll_decided

GROUP = "rg-flav/pool"
SETTINGS = {"ARM_OPERATION_WAIT": "0s", "STEP_RETRY_DELAY": "0s", "BATCH_CHECK_INTERVAL": "0s"}


def _app(flavour: str) -> MemoryApp:
    app = memory_app({
        "name": "flavours", "cluster_name": "flav", "flavour": flavour, "arm_throttling": False,
        "boot_delay": "60s", "delete_delay": "20s",
        "node_groups": [{"resource_group": "rg-flav", "name": "pool", "vm_size": "Standard_D4s_v5",
                         "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110},
                         "min": 1, "max": 5, "initial": 3}],
    }, settings=SETTINGS)
    app.clock.advance(5)
    return app


def _mapped(app: MemoryApp) -> dict[str, str]:
    """Node -> instance id, as node mapping finds them now."""
    ports = app.ports
    (group,) = [g for g in ports.provider.list_node_groups() if g.id == GROUP]
    mapped = map_cluster(ports.provider, ports.cluster.list_nodes(), [group], method=app.settings.node_mapping)
    return {n.name: n.instance.instance_id for n in mapped.nodes if n.instance is not None}


def _message(app: MemoryApp, node: str, instance: str) -> str:
    """The removal as the utilisation poll sends it, with the node unneeded and reserved first."""
    found = app.ports.cluster.get_node(node)
    assert found is not None
    action = new_scale_down(action_id=f"down-{node}", group=GROUP, now=app.clock.now(), ttl=app.settings.action_ttl,
                            targets=[RemovalTarget(node, found.provider_id, instance)])
    as_the_poll_decided(app.ports, GROUP, [node], action.id, now=app.clock.now())
    return encode_action(action)


def _run_to_end(app: MemoryApp, text: str) -> list[Any]:
    executor, outcomes = Executor(app.ports, app.settings), []
    for _ in range(30):
        outcomes.append(executor.execute(text, now=app.clock.now()))
        follow = app.take_queued()
        if not follow:
            break
        app.clock.advance(30)
        text = follow[-1]
    return outcomes


@pytest.mark.parametrize("flavour,method", [("k3s", "hostname"), ("kubeadm", "ip")])
def test_a_node_mapped_by_hostname_or_ip_is_removed_with_its_instance(flavour: str, method: str) -> None:
    app = _app(flavour)
    mapped = _mapped(app)
    assert len(mapped) == 3
    node, instance = sorted(mapped.items())[-1]
    outcomes = _run_to_end(app, _message(app, node, instance))
    assert outcomes[-1].outcome == "succeeded", outcomes
    assert app.ports.cluster.get_node(node) is None
    (group,) = [g for g in app.ports.provider.list_node_groups() if g.id == GROUP]
    assert instance not in {i.instance_id for i in app.ports.provider.list_instances(group) if not i.deleting}
    assert set(_mapped(app)) == set(mapped) - {node}  # the others untouched, still mapped


@pytest.mark.parametrize("flavour", ["k3s", "kubeadm"])
def test_a_message_naming_another_instance_than_the_node_maps_to_is_refused(flavour: str) -> None:
    app = _app(flavour)
    mapped = _mapped(app)
    (node, _), (_, other) = sorted(mapped.items())[:2]
    result = Executor(app.ports, app.settings).execute(_message(app, node, other), now=app.clock.now())
    assert result.outcome == "rejected" and f"not the decided instance {other}" in result.detail
    assert _mapped(app) == mapped  # nothing cordoned, deleted or unmapped
    found = app.ports.cluster.get_node(node)
    assert found is not None and not found.unschedulable
