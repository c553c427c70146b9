"""Hibernated standby on in-memory ports over a real world: with STANDBY_HIBERNATE a hibernation-enabled Flexible
group's refill parks its instances hibernated, a Uniform group's deallocated; a refusal deallocates them plainly
and the refill still ends with its instances stopped and no node left behind; throttling is not a refusal. A
hibernated instance keeps its Node, out of the planners' view and the status' counts, and a scale-up that resumes it
uncordons it; with the Node deleted (as before) the resumed VM never registers again."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from shared.domain import NodeGroup
from shared.engine.hibernation import HIBERNATE_TAG
from shared.ports import ComputeError, Operation
from shared.services.hibernation import begin_stop_instances
from shared.services.utilization import run_utilization_poll
from sandbox.world.compute import InstanceSim
from tests.shared.services.standby_world import run_executor
from tests.memory_app import MemoryApp, memory_app

GROUP = "rg-h/pool"
STANDBY = 2


def _app(*, flexible: bool, enabled: bool, setting: str = "true", tags: dict[str, str] | None = None) -> MemoryApp:
    group: dict[str, Any] = {
        "resource_group": "rg-h", "name": "pool", "vm_size": "Standard_D4s_v5",
        "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}, "min": 1, "max": 10, "initial": 1,
        "tags": {"autoscaler-standby": str(STANDBY), **(tags or {})},
    }
    if flexible:
        group["orchestration"] = "Flexible"
    if enabled:
        group["hibernation_enabled"] = True
    scenario = {"name": "hibernate", "cluster_name": "hibernate", "arm_throttling": False,
                "boot_delay": {"min": "40s", "max": "60s"}, "node_groups": [group]}
    # Hostname mapping: the in-memory ports stamp every group Uniform, and a Flexible member's providerID names a
    # plain VM, which provider-id mapping without an instance list cannot place.
    return memory_app(scenario, settings={"STEP_RETRY_DELAY": "10s", "SCALE_DOWN_UNNEEDED_TIME": "10m",
                                          "STANDBY_HIBERNATE": setting, "NODE_MAPPING": "hostname"})


def _refill(app: MemoryApp, seconds: float = 300, step: float = 10) -> list[str]:
    """One utilisation poll (it enqueues the refill), then the executor on every message until `seconds` pass."""
    run_utilization_poll(app.ports, app.settings, now=app.clock.now())
    assert any(json.loads(t).get("kind") == "refill_standby" for t in app.queued())
    return run_executor(app, seconds=seconds, step=step)


def _stopped(app: MemoryApp) -> list[InstanceSim]:
    """The world's instances the group's row lists as stopped."""
    stopped = app.ports.state.get_group(GROUP).stopped
    (scale_set,) = app.world._groups.values()  # noqa: SLF001 - the one group's scale set
    found = [i for i in scale_set.instances.values() if i.vm_name in stopped or str(i.instance_id) in stopped]
    assert len(found) == len(stopped) == STANDBY
    return found


@pytest.mark.parametrize("flexible,enabled,setting,tag,hibernated", [
    (True, True, "true", None, True),     # allowed and asked for
    (True, True, "false", None, False),   # allowed, not asked for
    (True, True, "false", "true", True),  # the tag asks for it
    (True, True, "true", "false", False),  # the tag declines it
    (True, False, "true", None, False),   # asked for, the Flexible set is not hibernation-enabled
    (False, False, "true", None, False),  # asked for, a Uniform set cannot hibernate
], ids=["flex enabled", "not asked", "tag asks", "tag declines", "flex not enabled", "uniform"])
def test_the_refill_parks_its_instances_hibernated_exactly_where_asked_and_allowed(
    flexible: bool, enabled: bool, setting: str, tag: str | None, hibernated: bool
) -> None:
    app = _app(flexible=flexible, enabled=enabled, setting=setting,
               tags=None if tag is None else {HIBERNATE_TAG: tag})
    outcomes = _refill(app)
    assert outcomes and outcomes[-1] == "succeeded", outcomes
    stopped = _stopped(app)
    assert all(i.power in ("deallocating", "deallocated") for i in stopped)
    assert all(i.hibernated == hibernated for i in stopped)
    # A hibernated instance keeps its Node (its kubelet resumes, and would not register a deleted one), cordoned
    # with our taint; a deallocated one leaves none behind.
    nodes = app.ports.cluster.list_nodes()
    assert len(nodes) == 1 + (STANDBY if hibernated else 0)
    assert sum(n.is_being_deleted and n.unschedulable for n in nodes) == (STANDBY if hibernated else 0)


def test_a_refused_hibernation_deallocates_plainly_and_the_refill_still_ends(caplog: pytest.LogCaptureFixture) -> None:
    app = _app(flexible=True, enabled=True)
    deallocate = app.ports.provider.begin_deallocate_instances
    refused: list[list[str]] = []

    def refusing(group: NodeGroup, ids: list[str], *, hibernate: bool = False) -> Operation:
        if hibernate:
            refused.append(list(ids))
            raise ComputeError("HTTP 400 InvalidParameter: the image cannot hibernate", code="InvalidParameter")
        return deallocate(group, ids)

    app.ports.provider.begin_deallocate_instances = refusing  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="shared.services.hibernation"):
        outcomes = _refill(app)
    assert refused and outcomes[-1] == "succeeded", outcomes
    stopped = _stopped(app)
    assert all(i.power in ("deallocating", "deallocated") and not i.hibernated for i in stopped)
    assert "was refused" in caplog.text and GROUP in caplog.text
    assert len(app.ports.cluster.list_nodes()) == 1


class _Failing:
    """A provider whose hibernating deallocate fails with `error`; plain ones are recorded."""

    def __init__(self, error: ComputeError) -> None:
        self.error, self.plain = error, 0

    def begin_deallocate_instances(self, group: NodeGroup, ids: list[str], *, hibernate: bool = False) -> Operation:
        if hibernate:
            raise self.error
        self.plain += 1
        return Operation(token="t", status="InProgress")


@pytest.mark.parametrize("error,falls_back", [
    (ComputeError("400", code="InvalidParameter"), True),
    (ComputeError("409", code="OperationNotAllowed"), True),
    (ComputeError("429", code="TooManyRequests", retry_after=30), False),
    (ComputeError("503", code="ServiceUnavailable", transient=True), False),
], ids=["invalid parameter", "not allowed", "throttled", "server fault"])
def test_only_a_refusal_falls_back_to_a_plain_deallocate(error: ComputeError, falls_back: bool) -> None:
    app = _app(flexible=True, enabled=True)
    (group,) = app.ports.provider.list_node_groups()
    assert group.hibernation_enabled
    provider = _Failing(error)
    if falls_back:
        assert begin_stop_instances(provider, app.settings, group, ["a"]).token == "t"  # type: ignore[arg-type]
        assert provider.plain == 1
    else:
        with pytest.raises(ComputeError) as caught:
            begin_stop_instances(provider, app.settings, group, ["a"])  # type: ignore[arg-type]
        assert caught.value is error and provider.plain == 0


def test_a_malformed_tag_deallocates_plainly_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    app = _app(flexible=True, enabled=True, tags={HIBERNATE_TAG: "sometimes"})
    (group,) = app.ports.provider.list_node_groups()
    provider = _Failing(ComputeError("unused"))
    with caplog.at_level(logging.WARNING, logger="shared.services.hibernation"):
        begin_stop_instances(provider, app.settings, group, ["a"])  # type: ignore[arg-type]
    assert provider.plain == 1 and HIBERNATE_TAG in caplog.text


@pytest.mark.parametrize("hibernation_enabled", [True, False], ids=["enabled", "not enabled"])
def test_an_idle_node_removed_into_the_standby_is_hibernated_where_the_set_allows_it(hibernation_enabled: bool) -> None:
    """The scale-down's deallocation goes the same way as the refill's: hibernated on a hibernation-enabled set."""
    from tests.shared.services.test_executor import GROUP as EXECUTOR_GROUP
    from tests.shared.services.test_executor import make_memory_app, scale_down, walk

    app = make_memory_app(settings={"STANDBY_INSTANCES": "1", "STANDBY_HIBERNATE": "true", "NODE_MAPPING": "hostname"},
                          orchestration="Flexible", hibernation_enabled=hibernation_enabled)
    _, (idle, *_) = app.busy_and_idle()
    vm = app.provider_id(idle).rsplit("/", 1)[-1]
    assert walk(app, scale_down(app, idle), step_seconds=30)[-1] == "succeeded"
    assert app.context.ports.state.get_group(EXECUTOR_GROUP).stopped == frozenset({vm})
    (scale_set,) = app.world._groups.values()  # noqa: SLF001 - the one group's scale set
    (stopped,) = [i for i in scale_set.instances.values() if i.vm_name == vm]
    assert stopped.power in ("deallocating", "deallocated") and stopped.hibernated == hibernation_enabled
    kept = app.context.ports.cluster.get_node(idle)
    assert (kept is not None) == hibernation_enabled  # kept, for the kubelet that resumes
    assert kept is None or (kept.is_being_deleted and kept.unschedulable)


@pytest.mark.parametrize("flexible,enabled,setting,hibernated", [
    (True, True, "true", True), (True, True, "false", False), (True, False, "true", False), (False, False, "true", False),
], ids=["hibernating", "not asked", "flex not enabled", "uniform"])
def test_the_status_and_plan_say_hibernated_exactly_when_the_group_hibernates(
    flexible: bool, enabled: bool, setting: str, hibernated: bool
) -> None:
    from shared.domain import GroupState
    from shared.services.plan import _standby_text
    from shared.services.standby import standby_report

    app = _app(flexible=flexible, enabled=enabled, setting=setting)
    (group,) = app.ports.provider.list_node_groups()
    report = standby_report(app.ports, app.settings, group, GroupState(GROUP), now=app.clock.now())
    assert report is not None and report.hibernated == hibernated
    assert report.as_dict().get("hibernated", False) == hibernated
    assert (f"/{STANDBY} hibernated" in report.line(GROUP)) == hibernated
    assert (f"of {STANDBY} hibernated" in _standby_text(report.as_dict())) == hibernated


# -- a hibernated standby resumed by a scale-up: the kept Node comes back, and no node stays cordoned -------------

def _burst_app() -> MemoryApp:
    """A hibernation-enabled Flexible group with a standby of STANDBY, and a burst at 6 minutes that needs all of it
    (one pod a node: one on the group's running node, the rest on the standby)."""
    scenario = {"name": "hibernate", "cluster_name": "hibernate", "arm_throttling": False,
                "boot_delay": {"min": "40s", "max": "60s"},
                "node_groups": [{"resource_group": "rg-h", "name": "pool", "vm_size": "Standard_D4s_v5",
                                 "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}, "min": 1,
                                 "max": 10, "initial": 1, "tags": {"autoscaler-standby": str(STANDBY)},
                                 "orchestration": "Flexible", "hibernation_enabled": True}],
                "workloads": [{"name": "burst", "kind": "Job", "count": 1 + STANDBY, "at": "6m",
                               "requests": {"cpu": "3", "memory": "1Gi"}, "duration": "20m"}]}
    return memory_app(scenario, settings={"STEP_RETRY_DELAY": "10s", "SCALE_DOWN_UNNEEDED_TIME": "10m",
                                          "STANDBY_HIBERNATE": "true", "NODE_MAPPING": "hostname"})


def _burst_pods(app: MemoryApp) -> list[Any]:
    return [p for p in app.ports.cluster.list_pods() if p.namespace == "default" and p.name.startswith("burst")]


def test_a_hibernated_standby_keeps_its_node_out_of_the_planners_and_a_scale_up_resumes_it_schedulable() -> None:
    from shared.engine.status import group_counts
    from shared.services.observe import observe, running_sizes

    app = _burst_app()
    for _ in range(33):  # to 5.5 minutes: the standby refilled (hibernated) before the burst
        app.tick(10)
    state = app.ports.state.get_group(GROUP)
    parked = [i for i in _stopped(app) if i.hibernated]
    assert len(parked) == STANDBY
    nodes = {n.name: n for n in app.ports.cluster.list_nodes()}
    assert len(nodes) == 1 + STANDBY  # kept: one per hibernated instance
    kept = [nodes[i.node_name] for i in parked]
    assert all(n.is_being_deleted and n.unschedulable and not n.ready for n in kept)
    # Out of the planners' snapshot (no capacity, no node on its way, no unready node to remove) ...
    observed = observe(app.ports, now=app.clock.now(), node_mapping="hostname")
    assert {n.name for n in kept} <= {n.name for n in observed.nodes if n.instance is not None}
    snapshot = running_sizes(observed, {GROUP: state})
    assert {n.name for n in snapshot.nodes}.isdisjoint(n.name for n in kept)
    (group,) = snapshot.groups
    # ... and out of the status' counts, even long after: no unready node, nothing unregistered.
    later = app.clock.now() + 2 * app.settings.max_node_provision_time
    counts = group_counts(group, list(observed.nodes), state, now=later,
                          max_node_provision_time=app.settings.max_node_provision_time)
    assert counts.unready == 0 and counts.unregistered == 0 and counts.total == 1

    for _ in range(24):  # the burst at 6 minutes: the scale-up resumes the standby
        app.tick(10)
    resumed = [i for i in parked if i.power == "running"]
    assert len(resumed) == STANDBY and all(i.resumed and not i.lost_node for i in resumed)
    nodes_after = app.ports.cluster.list_nodes()
    assert {i.node_name for i in resumed} <= {n.name for n in nodes_after if n.ready}  # the same Nodes, Ready
    # No node stays cordoned or tainted by us once its instance runs again (but a new refill's, reserved by it).
    held = app.ports.state.get_group(GROUP).removing
    assert all(not n.unschedulable and not n.is_being_deleted for n in nodes_after if n.name not in held)
    assert {i.node_name for i in resumed}.isdisjoint(held)
    pods = _burst_pods(app)
    assert len(pods) == 1 + STANDBY and all(p.node_name for p in pods)
    # Pods land on the resumed nodes (a refill's new node, Ready first, may take one before our cordon reaches it).
    assert {i.node_name for i in resumed} & {p.node_name for p in pods}


def test_with_the_node_deleted_as_before_a_resumed_vm_never_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The risk the kept Node removes: the old stop path deleted the Node, and a resumed kubelet does not register
    it again, so the started VMs never become nodes (the burst's pods go to whatever else the group brings)."""
    from shared.services import standby_steps

    monkeypatch.setattr(standby_steps, "keeps_node", lambda kind: False)
    app = _burst_app()
    for _ in range(33):
        app.tick(10)
    parked = [i for i in _stopped(app) if i.hibernated]
    assert len(parked) == STANDBY and len(app.ports.cluster.list_nodes()) == 1
    for _ in range(24):
        app.tick(10)
    resumed = [i for i in parked if i.power == "running"]
    assert resumed and all(i.lost_node for i in resumed)
    names = {n.name for n in app.ports.cluster.list_nodes()}
    assert names.isdisjoint(i.node_name for i in resumed)  # running, billed, and never a node
    assert all(p.node_name not in {i.node_name for i in resumed} for p in _burst_pods(app))


def test_a_kept_node_is_never_removed_as_an_unready_node() -> None:
    """Past SCALE_DOWN_UNREADY_TIME a NotReady node is removable; a hibernated standby's kept Node is not one."""
    scenario = {"name": "hibernate", "cluster_name": "hibernate", "arm_throttling": False,
                "boot_delay": {"min": "40s", "max": "60s"},
                "node_groups": [{"resource_group": "rg-h", "name": "pool", "vm_size": "Standard_D4s_v5",
                                 "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}, "min": 1,
                                 "max": 10, "initial": 1, "tags": {"autoscaler-standby": str(STANDBY)},
                                 "orchestration": "Flexible", "hibernation_enabled": True}]}
    app = memory_app(scenario, settings={"STEP_RETRY_DELAY": "10s", "SCALE_DOWN_UNREADY_TIME": "5m",
                                          "STANDBY_HIBERNATE": "true", "NODE_MAPPING": "hostname"})
    for _ in range(30):  # the standby refilled, hibernated
        app.tick(10)
    parked = {i.node_name for i in _stopped(app) if i.hibernated}
    assert len(parked) == STANDBY
    for _ in range(60):  # 10 minutes more: twice the unready time
        app.tick(10)
    nodes = {n.name: n for n in app.ports.cluster.list_nodes()}
    assert parked <= set(nodes) and all(not nodes[n].ready and nodes[n].is_being_deleted for n in parked)
    assert {i.node_name for i in _stopped(app)} == parked  # still the standby: none deleted, none started
    assert not any(e.reason == "ScaleDown" and e.name in parked for e in app.events())


def test_a_hibernated_standby_trimmed_by_the_cap_takes_its_kept_node_with_it() -> None:
    """The cap's trim deletes stopped instances beyond the target: a hibernated one's kept Node goes with it (no
    kubelet will come back for it), and the standby instances it keeps keep theirs."""
    from shared.services.deallocated import enforce_deallocated_max

    app = _burst_app()
    for _ in range(30):  # the standby refilled, hibernated, before the burst
        app.tick(10)
    parked = [i for i in _stopped(app) if i.hibernated]
    assert len(parked) == STANDBY
    (scale_set,) = app.world._groups.values()  # noqa: SLF001 - the one group's scale set
    scale_set.tags["autoscaler-standby"] = "1"  # the operator lowers the target: one instance too many

    deleted = enforce_deallocated_max(app.ports, app.settings, GROUP)

    assert len(deleted) == 1
    gone = [i for i in parked if i.vm_name in deleted or str(i.instance_id) in deleted]
    kept = [i for i in parked if i not in gone]
    names = {n.name for n in app.ports.cluster.list_nodes()}
    assert len(gone) == 1 and gone[0].node_name not in names
    assert kept and all(i.node_name in names for i in kept)
    assert app.ports.state.get_group(GROUP).stopped.isdisjoint(deleted)
