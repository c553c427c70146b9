"""Scale-in protection in the utilisation poll (shared/services/protection.py) over the sandbox world.

A busy batch node's instance is protected, so a capacity decrease someone else makes (the portal, Azure
autoscale) takes idle nodes instead; the protection is lifted once the node is idle; ARM's write budget holds;
a backend without instance protection is neither read nor written, and says so once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from shared.domain import Instance, NodeGroup
from shared.ports import SCALE_IN_PROTECTION_UNSUPPORTED, ComputeError
from shared.services.protection import apply_scale_in_protection
from shared.services.providers import ProviderRouter
from shared.services.utilization import run_utilization_poll
from tests.memory_app import MemoryApp, memory_app

RG = "rg-batch"
GROUP = f"{RG}/pool"
PUT = "PUT virtualMachines"


def _app(jobs: int = 1, *, initial: int = 3, **settings: str) -> MemoryApp:
    # One 3-CPU Job pod per node (a node has 3.86 CPU): `jobs` busy nodes, the rest idle. The minimum is the
    # initial size and nodes are unneeded only after an hour, so the autoscaler itself removes nothing here.
    return memory_app({
        "name": "protection", "cluster_name": "protection", "arm_throttling": True, "delete_delay": "20s",
        "node_groups": [{"resource_group": RG, "name": "pool", "vm_size": "Standard_D4s_v5",
                         "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110},
                         "min": initial, "max": 10, "initial": initial}],
        "workloads": [{"name": "render", "kind": "Job", "count": jobs, "at": "5s", "spread": "0s", "duration": "10m",
                       "requests": {"cpu": "3", "memory": "2Gi"}}] if jobs else [],
    # Drift off: its own instance reads (engine.drift's model state) are not protection's, which these tests count.
    }, settings={"SCALE_DOWN_UNNEEDED_TIME": "1h", "DRIFT_REPLACEMENT": "false", **settings})


def _poll(app: MemoryApp, seconds: float = 60) -> None:
    app.clock.advance(seconds)
    run_utilization_poll(app.ports, app.settings, now=app.clock.now())


def _group(app: MemoryApp) -> NodeGroup:
    found = app.ports.provider.get_node_group(GROUP)
    assert found is not None
    return found


def _protected(app: MemoryApp) -> set[str]:
    """The instances the scale set reports protected from scale-in (read through the port, as the app reads it)."""
    return {i.instance_id for i in app.ports.provider.list_instances(_group(app)) if i.protected_from_scale_in}


def _busy_instances(app: MemoryApp) -> set[str]:
    """The instances whose node runs a render Job pod now."""
    nodes = {p.node_name for p in app.ports.cluster.list_pods() if p.name.startswith("render") and p.node_name}
    return {ref.instance_id for n in app.ports.cluster.list_nodes() if n.name in nodes and (ref := n.instance)}


def _puts(app: MemoryApp) -> int:
    return int(app.world.report()["api_calls"]["breakdown"]["arm"].get(PUT, 0))


def test_a_manual_capacity_decrease_takes_idle_nodes_and_leaves_the_busy_batch_node() -> None:
    app = _app(jobs=1)
    _poll(app, 30)
    busy = _busy_instances(app)
    assert len(busy) == 1 and _protected(app) == busy

    # Someone scales the set to zero behind the autoscaler's back (the portal, a script, Azure autoscale).
    sim = app.world.scale_set(app.world.subscription_id, RG, "pool")
    app.world.set_capacity(sim, 0)
    app.clock.advance(60)

    assert {i.instance_id for i in app.ports.provider.list_instances(_group(app))} == busy
    assert _busy_instances(app) == busy  # the Job pod still runs where it ran
    assert app.world.report()["running_pods_evicted"] == 0


def test_the_protection_is_lifted_when_the_node_goes_idle() -> None:
    app = _app(jobs=1)
    _poll(app, 30)
    assert len(_protected(app)) == 1

    _poll(app, 11 * 60)  # the Job has finished

    assert _busy_instances(app) == set() and _protected(app) == set()
    writes = _puts(app)
    _poll(app)
    assert _puts(app) == writes  # nothing changed, nothing written


def test_arms_write_budget_holds_and_every_busy_node_is_protected_in_the_end() -> None:
    app = _app(jobs=5, initial=5)
    _poll(app, 30)
    busy = _busy_instances(app)
    assert len(busy) == 5
    assert _puts(app) == 2 and len(_protected(app)) == 2  # two writes per group and poll, no more

    _poll(app)
    _poll(app)
    assert _protected(app) == busy and _puts(app) == 5  # each instance written once
    _poll(app)
    assert _puts(app) == 5  # nothing rewritten


def test_switched_off_nothing_is_read_or_written() -> None:
    app = _app(jobs=1, BATCH_SCALE_IN_PROTECTION="false")
    _poll(app, 30)
    assert _puts(app) == 0 and _protected(app) == set()


def test_a_dry_run_writes_nothing() -> None:
    app = _app(jobs=1, DRY_RUN="true")
    _poll(app, 30)
    assert _puts(app) == 0 and _protected(app) == set()


# --- backends without protection, refusals, throttling: a provider that records its calls --------------------


@dataclass
class _Recording:
    """Wraps the world's provider: records protection calls, answers `supports` as told, refuses as told."""

    inner: Any
    kind: str
    supported: bool = True
    refuse: str = ""  # an ARM code every write is refused with
    writes: list[tuple[str, bool]] = field(default_factory=list)
    lists: int = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def list_instances(self, group: NodeGroup, *, power_state: bool = False) -> list[Instance]:
        self.lists += 1
        return self.inner.list_instances(group, power_state=power_state)

    def supports_scale_in_protection(self, group: NodeGroup) -> bool:
        return self.supported

    def set_scale_in_protection(self, group: NodeGroup, instance_id: str, *, protect: bool) -> None:
        self.writes.append((instance_id, protect))
        if not self.supported:
            raise ComputeError("no protection here", code=SCALE_IN_PROTECTION_UNSUPPORTED)
        if self.refuse:
            raise ComputeError(f"refused: {self.refuse}", code=self.refuse)
        self.inner.set_scale_in_protection(group, instance_id, protect=protect)


def _recorded(app: MemoryApp, **options: Any) -> _Recording:
    (inner,) = app.ports.provider.providers  # type: ignore[attr-defined]
    recording = _Recording(inner, inner.kind, **options)
    app.ports = replace(app.ports, provider=ProviderRouter([recording]))  # type: ignore[list-item]
    return recording


def test_a_group_without_protection_is_neither_read_nor_written_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """An AKS-managed pool or a Flexible set: its batch nodes cannot be protected; no error, one line."""
    app = _app(jobs=1)
    provider = _recorded(app, supported=False)
    with caplog.at_level(logging.INFO, logger="shared.services.protection"):
        for _ in range(3):
            _poll(app, 30)
    assert provider.writes == [] and provider.lists == 0
    said = [r for r in caplog.records if "has no instance protection" in r.getMessage()]
    assert len(said) == 1 and GROUP in said[0].getMessage() and said[0].levelno == logging.INFO
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "shared.services.protection"]


@pytest.mark.parametrize("code", ["TooManyRequests", "AuthorizationFailed"])
def test_a_refused_write_is_tried_again_next_poll_and_never_stops_the_poll(code: str) -> None:
    app = _app(jobs=3)
    provider = _recorded(app, refuse=code)
    _poll(app, 30)
    # Throttled: the group gets no second write this poll; refused otherwise: each change is tried once.
    assert len(provider.writes) == (1 if code == "TooManyRequests" else 2)
    provider.refuse = ""
    _poll(app)
    _poll(app)
    assert _protected(app) == _busy_instances(app) and len(_protected(app)) == 3


def test_the_step_reuses_a_listing_that_carries_protection() -> None:
    """A poll that listed the instances for node mapping needs no second list call."""
    app = _app(jobs=1)
    provider = _recorded(app)
    app.clock.advance(30)
    from shared.services.observe import observe

    snapshot = observe(app.ports, now=app.clock.now())
    listed = tuple(provider.inner.list_instances(snapshot.groups[0]))
    snapshot = replace(snapshot, groups=(replace(snapshot.groups[0], instances=listed),))
    result = apply_scale_in_protection(app.ports, app.settings, snapshot, now=app.clock.now())
    assert provider.lists == 0 and len(result.written) == 1
