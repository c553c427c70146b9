"""The executor and the polls, on both apps: `real` (Azurite for state and queue, the sandbox server over HTTPS
for cluster and ARM) and `memory` (the same services on in-memory ports over an in-process world,
tests/memory_app.py). Tests about what only the real adapters do (faults injected into the sandbox server's
HTTP answers) take `real_app` and say why."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, Protocol

import pytest

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from sandbox.world import World
from shared.actions import (
    RemovalTarget,
    ScaleDownRound,
    decode_action,
    encode_action,
    encode_message,
    new_scale_down,
    new_scale_up,
)
from shared.adapters.kube_events import COMPONENT
from shared.context import AppContext, build_context
from shared.ports import ClusterError, ClusterEvent, ComputeError, LedgerEntry
from shared.services.executor import Executor
from shared.services.pending import run_pending_poll
from shared.services.reconcile import orphan_after, reserve_decided
from shared.services.scale_up_steps import _return_capacity
from shared.services.rounds import ROUND_ROW
from shared.services.utilization import run_utilization_poll
from tests.fixtures.sandbox import SANDBOX_START
from tests.shared.services.decided import as_the_poll_decided
from tests.memory_app import memory_app

GROUP = "rg-exec/pool"
TTL = timedelta(minutes=5)
REAL, MEMORY = "real", "memory"

SCENARIO: dict[str, Any] = {
    "name": "executor",
    "cluster_name": "exec",
    "arm_throttling": False,
    "boot_delay": "60s",
    "delete_delay": "20s",
    "node_groups": [
        {"resource_group": "rg-exec", "name": "pool", "vm_size": "Standard_D4s_v5",
         "allocatable": {"cpu": "3860m", "memory": "13.8Gi", "pods": 110}, "min": 1, "max": 5, "initial": 3},
    ],
    "daemonsets": [{"name": "kube-proxy", "requests": {"cpu": "100m", "memory": "128Mi"}}],
    "workloads": [
        # The web pod may not be evicted, so its node is never removable.
        {"name": "web", "kind": "ReplicaSet", "count": 1, "requests": {"cpu": "3", "memory": "1Gi"},
         "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}},
        # Arrives after the other tests are done with the world: four pods that need new nodes.
        {"name": "burst", "kind": "Job", "count": 4, "at": "1h", "duration": "10m", "requests": {"cpu": "2", "memory": "1Gi"}},
    ],
}

# Settings both apps run with: no waiting inside a step, so each step's follow-up is visible at once.
BASE_SETTINGS = {"ARM_OPERATION_WAIT": "0s", "STEP_RETRY_DELAY": "0s", "BATCH_CHECK_INTERVAL": "0s"}


class Inspect(Protocol):
    """What a test reads besides the ports; each app's own way (tests/memory_app.py's MemoryApp is one)."""

    def queued(self) -> list[str]: ...  # the texts visible now, left on the queue

    def take_queued(self) -> list[str]: ...  # the same, taken off it

    def clear_queue(self) -> None: ...  # every message, delayed ones included

    def poison(self) -> list[str]: ...

    def events(self) -> list[ClusterEvent]: ...  # the Kubernetes Events the app wrote


class RealInspect:
    """`Inspect` over Azurite's queue and the sandbox server's Event objects."""

    def __init__(self, context: AppContext, server: SandboxServer) -> None:
        self._queue: Any = context.ports.queue  # StorageActionQueue: its development helpers
        self._server = server

    def queued(self) -> list[str]:
        return self._queue.peek()

    def take_queued(self) -> list[str]:
        taken = []
        for message in self._queue.receive(32, visibility_timeout=timedelta(seconds=30)):
            taken.append(message.body_text)
            self._queue.delete(message)
        return taken

    def clear_queue(self) -> None:
        self._queue.clear()

    def poison(self) -> list[str]:
        with self._queue.poison() as poison:
            return poison.peek()

    def events(self) -> list[ClusterEvent]:
        return [
            ClusterEvent(namespace=e["metadata"]["namespace"], kind=e["involvedObject"]["kind"],
                         name=e["involvedObject"]["name"], uid=e["involvedObject"].get("uid", ""), reason=e["reason"],
                         message=e["message"], at=datetime.fromisoformat(e["firstTimestamp"].replace("Z", "+00:00")),
                         type=e["type"])
            for e in sorted(self._server.world.k8s_list("events"), key=lambda e: e["metadata"]["resourceVersion"])
            if (e.get("source") or {}).get("component") == COMPONENT
        ]


@dataclass
class App:
    kind: str  # REAL or MEMORY
    context: AppContext
    clock: ManualClock
    world: World  # to arrange what no port call can (an allocation failure) and read the sandbox's report
    inspect: Inspect
    server: SandboxServer | None = None  # the real app's sandbox server

    @property
    def executor(self) -> Executor:
        return Executor(self.context.ports, self.context.settings)

    def run(self, text: str) -> Any:
        return self.executor.execute(text, now=self.clock.now())

    def poison(self) -> list[str]:
        return self.inspect.poison()

    def queued(self) -> list[dict[str, Any]]:
        return [json.loads(text) for text in self.inspect.queued()]

    def take_queued(self) -> list[str]:
        return self.inspect.take_queued()

    def clear_queue(self) -> None:
        self.inspect.clear_queue()

    def events(self, namespace: str | None = None) -> list[ClusterEvent]:
        return [e for e in self.inspect.events() if namespace is None or e.namespace == namespace]

    def node_names(self) -> list[str]:
        return sorted(n.name for n in self.context.ports.cluster.list_nodes())

    def busy_and_idle(self) -> tuple[str, list[str]]:
        pods = self.context.ports.cluster.list_pods()
        busy = next(p.node_name for p in pods if p.name.startswith("web") and p.node_name)
        assert busy is not None
        return busy, [n for n in self.node_names() if n != busy]

    def provider_id(self, node: str) -> str:
        found = self.context.ports.cluster.get_node(node)
        assert found is not None
        return found.provider_id

    def arm(self) -> dict[str, Any]:
        """The world's count of ARM calls by operation, with the instances deleted, deallocated and started."""
        return dict(self.world.report()["api_calls"]["breakdown"]["arm"])

    def arm_calls(self, operation: str) -> int:
        return int(self.arm().get(operation, 0))


def _scenario(workloads: tuple[dict[str, Any], ...], group: dict[str, Any]) -> dict[str, Any]:
    return {**SCENARIO, "node_groups": [{**SCENARIO["node_groups"][0], **group}],
            "workloads": [*SCENARIO["workloads"], *workloads]}


def make_app(sandbox_factory: Any, azurite: str, table_name: str, queue_name: str, *,
             workloads: tuple[dict[str, Any], ...] = (), settings: dict[str, str] | None = None, **group: Any) -> App:
    """The real app: the sandbox server over HTTPS and Azurite, through the SDK adapters shared.context builds."""
    return real_app_of(sandbox_factory, azurite, table_name, queue_name, _scenario(workloads, group),
                       settings={**BASE_SETTINGS, **(settings or {})})


def real_app_of(sandbox_factory: Any, azurite: str, table_name: str, queue_name: str, scenario: dict[str, Any], *,
                settings: dict[str, str]) -> App:
    """The real app on any scenario, with exactly these settings (beside the sandbox's and the storage's)."""
    clock = ManualClock(SANDBOX_START)
    server = sandbox_factory(scenario, clock=clock)
    clock.advance(5)  # let the scheduler place the workload
    env = {**server.env(), "AzureWebJobsStorage": azurite, "STATE_TABLE": table_name,
           "SCALE_ACTIONS_QUEUE": queue_name, **settings}
    context = build_context(env, clock=clock)
    return App(REAL, context, clock, server.world, RealInspect(context, server), server)


def make_memory_app(*, workloads: tuple[dict[str, Any], ...] = (), settings: dict[str, str] | None = None,
                    **group: Any) -> App:
    """The same app on in-memory ports over an in-process world of the same scenario (tests/memory_app.py)."""
    built = memory_app(_scenario(workloads, group), settings={**BASE_SETTINGS, **(settings or {})})
    built.clock.advance(5)  # let the scheduler place the workload
    return App(MEMORY, AppContext(built.settings, built.ports), built.clock, built.world, built)


MakeApp = Callable[..., App]


@pytest.fixture(params=[REAL, MEMORY])
def make(request: pytest.FixtureRequest) -> MakeApp:
    """Builds the app of this test's kind (`make(workloads=..., settings=..., **group)`), once per test.

    Azurite and a sandbox server start only for `real`.
    """
    if request.param == MEMORY:
        return make_memory_app
    factory, azurite, table, queue = (request.getfixturevalue(name)
                                      for name in ("sandbox_factory", "azurite", "table_name", "queue_name"))
    return lambda **kwargs: make_app(factory, azurite, table, queue, **kwargs)


@pytest.fixture
def app(make: MakeApp) -> App:
    return make()


@pytest.fixture
def real_app(sandbox_factory: Any, azurite: str, table_name: str, queue_name: str) -> App:
    """The real app only: for tests that inject faults into the sandbox server's HTTP answers (a 5xx, a 429, a
    refused PATCH), which the in-process ports never see."""
    return make_app(sandbox_factory, azurite, table_name, queue_name)


def scale_up(app: App, target: int, **changes: Any) -> str:
    body = json.loads(encode_action(new_scale_up(action_id="up-1", group=GROUP, target_size=target,
                                                 now=app.clock.now(), ttl=TTL)))
    return json.dumps({**body, **changes})


def scale_down(app: App, *nodes: str, provider_id: str | None = None, decided: bool = True, **changes: Any) -> str:
    """The message removing these nodes (one action); `provider_id` overrides the first node's.

    `decided`: written as the utilisation poll does before it sends one (the nodes unneeded and reserved
    for the action); False: a message no poll decided, as an attacker with access to the queue would send.
    """
    targets = [RemovalTarget(n, app.provider_id(n)) for n in nodes]
    if provider_id is not None:
        targets[0] = RemovalTarget(nodes[0], provider_id)
    action = new_scale_down(action_id=f"down-{nodes[0]}", group=GROUP, targets=targets, now=app.clock.now(), ttl=TTL)
    if decided:
        as_the_poll_decided(app.context.ports, GROUP, nodes, action.id, now=app.clock.now())
    return json.dumps({**json.loads(encode_action(action)), **changes})


# -- bad input -------------------------------------------------------------------------------------------

POISONED = [
    ("not json", lambda app: "{definitely not json", "not JSON"),
    ("unknown version", lambda app: scale_up(app, 4, version=7), "unknown schema version"),
    ("missing fields", lambda app: json.dumps({"version": 1, "kind": "scale_up", "id": "x"}), "missing field(s)"),
    ("not a discovered group", lambda app: scale_up(app, 4, group="rg-exec/elsewhere"), "not a discovered node group"),
    ("count above max", lambda app: scale_up(app, 6), "outside the group's limits 1..5"),
    ("count below min", lambda app: scale_up(app, 1, group=GROUP, target_size=0), "target_size must be a positive"),
    ("follow-up without ledger", lambda app: scale_up(app, 4, step="confirm"), "no ledger entry"),
    ("providerID of another instance",
     lambda app: scale_down(app, app.busy_and_idle()[1][0], provider_id=app.provider_id(app.busy_and_idle()[1][1])),
     "is not the decided instance"),
]


@pytest.mark.parametrize("case_id,build,reason", POISONED, ids=[c[0] for c in POISONED])
def test_bad_messages_are_rejected_to_poison_and_never_executed(app: App, case_id: str, build: Any, reason: str) -> None:
    text = build(app)
    result = app.run(text)
    assert result.outcome == "rejected"
    assert reason in result.detail
    assert len(app.poison()) == 1
    assert app.arm_calls("PATCH virtualMachineScaleSets") == 0 and app.arm_calls("POST delete") == 0
    assert not any(n.unschedulable for n in app.context.ports.cluster.list_nodes())
    entries = app.context.ports.state.list_ledger()
    assert [e.outcome.startswith("rejected") for e in entries] == [True]


def test_expired_message_is_dropped_not_poisoned(app: App) -> None:
    text = scale_up(app, 4)
    app.clock.advance(TTL.total_seconds() + 1)
    result = app.run(text)
    assert result.outcome == "rejected" and "expired" in result.detail
    assert app.poison() == []
    assert app.arm_calls("PATCH virtualMachineScaleSets") == 0


# -- scale-up --------------------------------------------------------------------------------------------

def test_scale_up_runs_once_under_duplicate_delivery(app: App) -> None:
    text = scale_up(app, 4)
    first, second = app.run(text), app.run(text)
    assert first.outcome == "waiting"  # the resize operation is still running
    assert second.outcome == "duplicate"
    assert app.arm_calls("PATCH virtualMachineScaleSets") == 1
    [entry] = app.context.ports.state.list_ledger()
    assert entry.duplicates == 1 and entry.operation
    [confirm] = app.queued()
    assert confirm["step"] == "confirm"
    app.clock.advance(300)
    assert app.run(json.dumps(confirm)).outcome == "succeeded"
    assert app.context.ports.state.get_group(GROUP).last_scale_up is not None


def test_scale_up_to_a_size_already_reached_is_skipped(app: App) -> None:
    result = app.run(scale_up(app, 3))
    assert result.outcome == "skipped" and "already at 3" in result.detail
    assert app.arm_calls("PATCH virtualMachineScaleSets") == 0


# -- scale-down ------------------------------------------------------------------------------------------

def test_scale_down_of_a_node_that_became_unremovable_is_skipped(app: App) -> None:
    """Decided and reserved, but busy by the time its cordon step runs: the poll's utilisation rule, checked
    again, turns it down before the drainability one would."""
    busy, _ = app.busy_and_idle()
    result = app.run(scale_down(app, busy))
    assert result.outcome == "skipped" and "no longer underutilised: cpu utilization 0.80" in result.detail
    assert busy not in app.context.ports.state.get_group(GROUP).removing
    node = app.context.ports.cluster.get_node(busy)
    assert node is not None and not node.unschedulable


def test_scale_down_walks_every_step_and_deletes_that_instance_once(app: App) -> None:
    _, idle = app.busy_and_idle()
    target = idle[0]
    instance = app.provider_id(target).rsplit("/", 1)[-1]
    text = scale_down(app, target)
    outcomes = []
    for _ in range(12):
        outcomes.append(app.run(text).outcome)
        app.run(text)  # every delivery twice
        if outcomes[-1] not in ("waiting",):
            break
        [text] = [json.dumps(m) for m in app.queued()]
        app.clear_queue()
        app.clock.advance(30)
    assert outcomes[-1] == "succeeded", outcomes
    assert target not in app.node_names()
    assert app.arm()["instances_deleted"] == {f"pool/{instance}": 1}
    state = app.context.ports.state.get_group(GROUP)
    assert state.removing == {} and state.last_scale_down is not None


def test_scale_down_never_goes_below_min_counting_removals_in_flight(make: MakeApp) -> None:
    app = make(min=2)
    _, idle = app.busy_and_idle()
    assert app.run(scale_down(app, idle[0])).outcome == "waiting"  # 3 -> 2 nodes: allowed
    second = app.run(scale_down(app, idle[1]))  # 2 -> 1 while the first is in flight: refused
    assert second.outcome == "skipped" and "below its minimum 2" in second.detail
    assert app.context.ports.state.get_group(GROUP).removing == {idle[0]: f"down-{idle[0]}"}
    node = app.context.ports.cluster.get_node(idle[1])
    assert node is not None and not node.unschedulable


def test_a_node_turned_down_before_its_cordon_keeps_its_unneeded_clock(make: MakeApp) -> None:
    """Refused for a group rule, never cordoned: the node is as unneeded as before, so the next round may take
    it as soon as the rule allows, not SCALE_DOWN_UNNEEDED_TIME later."""
    app = make(min=2)
    state = app.context.ports.state
    _, idle = app.busy_and_idle()
    since = app.clock.now() - timedelta(minutes=20)
    for name in idle[:2]:
        state.set_unneeded(name, since)
    assert app.run(scale_down(app, idle[0])).outcome == "waiting"
    assert reserve_decided(app.context.ports, GROUP, [idle[1]], f"down-{idle[1]}") == {idle[1]}  # as the poll does

    second = app.run(scale_down(app, idle[1]))

    assert second.outcome == "skipped" and "below its minimum 2" in second.detail
    assert idle[1] not in state.get_group(GROUP).removing
    assert state.list_unneeded().get(idle[1]) == since


def walk(app: App, text: str, *, step_seconds: float, limit: int = 200) -> list[str]:
    """Run an action and every continuation it enqueues, moving the clock between them; the outcomes."""
    outcomes = []
    for _ in range(limit):
        result = app.run(text)
        outcomes.append(result.detail if result.outcome == "waiting" else result.outcome)
        if result.outcome != "waiting":
            break
        [text] = [json.dumps(m) for m in app.queued()]
        app.clear_queue()
        app.clock.advance(step_seconds)
    return outcomes


def _render(duration: str) -> dict[str, Any]:
    """A render Job too big to share the web pod's node."""
    return {"name": "render", "kind": "Job", "count": 1, "duration": duration, "requests": {"cpu": "1", "memory": "1Gi"}}


def _node_of(app: App, prefix: str) -> str:
    return next(p.node_name for p in app.context.ports.cluster.list_pods() if p.name.startswith(prefix) and p.node_name)


def test_a_drain_waits_for_batch_pods_and_evicts_only_the_movable_ones(make: MakeApp) -> None:
    app = make(workloads=(_render("20m"),))
    node = _node_of(app, "render")
    outcomes = walk(app, scale_down(app, node), step_seconds=60)
    assert outcomes[-1] == "succeeded", outcomes
    assert "waiting for 1 batch pod(s)" in outcomes
    report = app.world.report()
    assert report["running_pods_evicted"] == 0
    assert node not in app.node_names()


def test_batch_drain_timeout_evicts_what_is_left(make: MakeApp) -> None:
    app = make(workloads=(_render("2h"),), settings={"BATCH_DRAIN_TIMEOUT": "5m"})
    node = _node_of(app, "render")
    outcomes = walk(app, scale_down(app, node), step_seconds=60)
    assert outcomes[-1] == "succeeded", outcomes
    assert len([o for o in outcomes if "batch" in o]) <= 6  # about 5 minutes of one-minute looks
    assert app.world.report()["running_pods_evicted"] == 1


def test_batch_protection_off_evicts_job_pods_at_once(make: MakeApp) -> None:
    app = make(workloads=(_render("2h"),), settings={"BATCH_PROTECTION": "false"})
    node = _node_of(app, "render")
    outcomes = walk(app, scale_down(app, node), step_seconds=30)
    assert outcomes[-1] == "succeeded", outcomes
    assert not [o for o in outcomes if "batch" in o]


# -- polls -----------------------------------------------------------------------------------------------

def test_kubernetes_500_means_no_scale_down_in_that_tick(real_app: App) -> None:
    # Real only: the 500 is injected into the sandbox server's HTTP answers.
    app = real_app
    settings = app.context.settings
    run_utilization_poll(app.context.ports, settings, now=app.clock.now())  # idle nodes become unneeded
    unneeded = app.context.ports.state.list_unneeded()
    assert unneeded
    app.clock.advance(settings.scale_down_unneeded_time.total_seconds() + 60)
    fault = app.world.inject_fault(("k8s", "GET", "pods"), status=500, count=100)
    with pytest.raises(ClusterError):
        run_utilization_poll(app.context.ports, settings, now=app.clock.now())
    assert app.queued() == []
    assert app.context.ports.state.list_unneeded() == unneeded
    fault.remaining = 0  # the API is healthy again: the same decision now goes through
    result = run_utilization_poll(app.context.ports, settings, now=app.clock.now())
    assert result.enqueued


def test_a_slot_freed_by_a_committed_delete_goes_out_in_a_round_before_the_next_tick(make: MakeApp) -> None:
    app = make(settings={"MAX_SCALE_DOWN_PARALLELISM": "1", "SCALE_DOWN_ROUND_INTERVAL": "15s"})
    settings, ports = app.context.settings, app.context.ports
    _, idle = app.busy_and_idle()
    assert len(idle) == 2
    run_utilization_poll(ports, settings, now=app.clock.now())
    app.clock.advance(settings.scale_down_unneeded_time.total_seconds() + 60)
    [first] = run_utilization_poll(ports, settings, now=app.clock.now()).enqueued  # one slot, one node
    [removal] = app.queued()  # the round is sent with its delay: not visible yet
    app.clear_queue()
    pending = ports.state.get_ledger_entry(ROUND_ROW)
    assert pending is not None and pending.operation
    round_text = encode_message(ScaleDownRound(pending.operation, app.clock.now(), app.clock.now() + TTL))

    outcomes = walk(app, json.dumps(removal), step_seconds=5)
    assert outcomes[-1] == "succeeded", outcomes
    app.clock.advance(15)  # the round is due: well before the next minute's tick
    assert app.run(round_text).outcome == "succeeded"
    [second] = app.queued()
    assert second["kind"] == "scale_down" and [n["name"] for n in second["nodes"]] == [
        n for n in idle if n not in {t["name"] for t in removal["nodes"]}]
    assert app.run(round_text).outcome == "skipped"  # its duplicate delivery runs nothing


# -- from the polls through the executor, as the host runs them --------------------------------------------

# Pods that need new nodes, arriving early enough for the nodes to boot within the scenario's hour.
WAVE = {"name": "wave", "kind": "Job", "count": 4, "at": "2m", "duration": "10m", "requests": {"cpu": "2", "memory": "1Gi"}}
# Too big to share the web pod's node, so it lands on an otherwise idle one, which it may not leave.
GUARDED = {"name": "guarded", "kind": "ReplicaSet", "count": 1, "requests": {"cpu": "1", "memory": "1Gi"},
           "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}}


def deliver(app: App, *, step_seconds: float, limit: int = 100) -> list[Any]:
    """Run every message as it becomes visible, as the queue trigger does, moving the clock between rounds."""
    results = []
    for _ in range(limit):
        texts = app.take_queued()
        if not texts:
            break
        results += [app.run(text) for text in texts]
        app.clock.advance(step_seconds)
    return results


def test_pending_pods_get_new_nodes_through_the_poll_and_the_executor(make: MakeApp) -> None:
    app = make(workloads=(WAVE,))
    app.clock.advance(120)  # the wave arrives: two pods fit the idle nodes, two need new ones
    [increase] = run_pending_poll(app.context.ports, app.context.settings, now=app.clock.now()).plan.increases
    assert (increase.group_id, increase.current_target) == (GROUP, 3) and increase.new_target > 3

    results = deliver(app, step_seconds=30)

    assert results and results[-1].outcome == "succeeded", results
    group = app.context.ports.provider.get_node_group(GROUP)
    assert group is not None and group.capacity == increase.new_target
    app.clock.advance(120)  # the new nodes boot and the scheduler binds the pods
    assert len(app.node_names()) == increase.new_target
    wave = [p for p in app.context.ports.cluster.list_pods() if p.name.startswith("wave")]
    assert len(wave) == 4 and all(p.node_name for p in wave)
    assert [e.outcome.split(":")[0] for e in app.context.ports.state.list_ledger()] == ["succeeded"]


def test_an_idle_node_is_removed_by_the_polls_and_the_executor_and_a_protected_pod_keeps_its_node(
    make: MakeApp,
) -> None:
    from shared.engine import reasons

    app = make(workloads=(GUARDED,))
    ports, settings = app.context.ports, app.context.settings
    busy, _ = app.busy_and_idle()
    guarded = _node_of(app, "guarded")
    [idle] = [n for n in app.node_names() if n not in (busy, guarded)]
    first = run_utilization_poll(ports, settings, now=app.clock.now())
    assert idle in first.plan.unneeded and guarded not in first.plan.unneeded and first.enqueued == ()

    app.clock.advance(settings.scale_down_unneeded_time.total_seconds() + 60)
    second = run_utilization_poll(ports, settings, now=app.clock.now())
    assert [r.node for r in second.plan.removals] == [idle]
    assert second.plan.kept[guarded].code == reasons.NOT_SAFE_TO_EVICT
    results = deliver(app, step_seconds=30)

    assert results and results[-1].outcome == "succeeded", results
    app.clock.advance(60)  # the instance's delete completes
    assert app.node_names() == sorted([busy, guarded])
    group = app.context.ports.provider.get_node_group(GROUP)
    assert group is not None and group.capacity == 2
    assert [e.outcome.split(":")[0] for e in ports.state.list_ledger() if e.kind == "scale_down"] == ["succeeded"]
    assert app.world.report()["running_pods_evicted"] == 0
    assert ports.state.get_group(GROUP).last_scale_down is not None


def test_pending_poll_enqueues_one_scale_up(app: App) -> None:
    app.clock.advance(3600)  # the burst workload arrives
    result = run_pending_poll(app.context.ports, app.context.settings, now=app.clock.now())
    assert len(result.enqueued) == 1
    [message] = app.queued()
    assert message["kind"] == "scale_up" and message["group"] == GROUP and message["target_size"] > 3
    triggered = [e for e in app.events("default") if e.reason == "TriggeredScaleUp"]
    [increase] = result.plan.increases  # pods that fit the free space of existing nodes trigger nothing
    assert sorted(e.name for e in triggered) == sorted(k.split("/")[1] for k in increase.pods)
    assert all(e.kind == "Pod" for e in triggered)
    assert f"{GROUP} 3->{message['target_size']}" in triggered[0].message


def test_a_second_action_for_a_reserved_node_is_refused_but_its_own_retry_resumes(app: App) -> None:
    _, idle = app.busy_and_idle()
    first = scale_down(app, idle[0])
    assert app.run(first).outcome == "waiting"
    app.clear_queue()
    other = json.loads(scale_down(app, idle[0]))
    other["id"] = "down-again"
    refused = app.run(json.dumps(other))
    assert refused.outcome == "skipped" and f"in progress by action down-{idle[0]}" in refused.detail
    # The first action's own redelivery after losing its claim (released) may take the step again.
    entry = app.context.ports.state.get_ledger_entry(f"down-{idle[0]}")
    assert entry is not None
    from dataclasses import replace

    app.context.ports.state.update_ledger_entry(replace(entry, progress=(0, 0), status="released"))
    assert app.run(first).outcome == "waiting"


def test_a_skipped_decision_does_not_block_the_next_one(app: App) -> None:
    """Regression: decisions once had ids derived from the node, so a skip blocked that node for good."""
    settings = app.context.settings
    run_utilization_poll(app.context.ports, settings, now=app.clock.now())
    app.clock.advance(settings.scale_down_unneeded_time.total_seconds() + 60)
    first = run_utilization_poll(app.context.ports, settings, now=app.clock.now()).enqueued
    app.clock.advance(60)
    # Reserved for the first decision while its message may still start: not decided twice.
    assert first and not run_utilization_poll(app.context.ports, settings, now=app.clock.now()).enqueued
    app.clock.advance(settings.action_ttl.total_seconds() + 60)  # it never started: the reservation lapses
    second = run_utilization_poll(app.context.ports, settings, now=app.clock.now()).enqueued
    assert second and not set(first) & set(second)


# -- failures and backoff ----------------------------------------------------------------------------------

def test_failed_scale_up_marks_its_offering_and_returns_capacity(app: App) -> None:
    """A family quota refusal marks the family unavailable (10 minutes) instead of backing the group off."""
    app.world.fail_next_scale_up("pool", code="QuotaExceeded")
    result = app.run(scale_up(app, 5))
    while result.outcome == "waiting":
        app.clock.advance(30)
        [message] = app.queued()
        app.clear_queue()
        result = app.run(json.dumps(message))
    assert result.outcome == "failed" and "QuotaExceeded" in result.detail
    state = app.context.ports.state.get_group(GROUP)
    assert state.backoff_reason == "QuotaExceeded" and state.backoff_failures == 0 and state.backoff_until is None
    [mark] = app.context.ports.state.list_offerings()
    assert (mark.key.scope, mark.key.name, mark.kind, mark.group) == (
        "family", "standarddsv5family", "family-quota", GROUP)
    assert mark.until == mark.since + timedelta(minutes=10) and mark.live(app.clock.now())
    group = app.context.ports.provider.get_node_group(GROUP)
    assert group is not None and group.capacity == 3  # the un-provisioned capacity is not kept
    assert app.poison() == []  # a quota error is an outcome, not a poison message


@pytest.mark.parametrize(("code", "raises"), [("PreconditionFailed", False), ("InternalServerError", True)])
def test_capacity_is_given_back_only_from_an_unchanged_group(app: App, code: str, raises: bool) -> None:
    """After a failed scale-up the capacity asked for is given back with If-Match on the read that found the group
    at it: a group changed in between (412) keeps its capacity, since lowering it could remove another's instances."""
    group = app.context.ports.provider.get_node_group(GROUP)
    assert group is not None
    asked = replace(group, capacity=5)
    lowered: list[int] = []

    def refuse(read: Any, capacity: int) -> None:
        lowered.append(capacity)
        raise ComputeError(f"HTTP 4xx {code}", code=code)

    provider = SimpleNamespace(get_node_group=lambda group_id: asked, begin_resize=refuse)
    action = replace(decode_action(scale_up(app, 5)), from_size=3, resized_to=5)
    run = SimpleNamespace(ports=SimpleNamespace(provider=provider))
    if raises:
        with pytest.raises(ComputeError):
            _return_capacity(run, action)  # type: ignore[arg-type]
    else:
        _return_capacity(run, action)  # type: ignore[arg-type]
    assert lowered == [3]  # asked once, from the read that found the group at 5


def test_arm_refusing_a_resize_at_once_is_a_failure_not_a_retry(real_app: App) -> None:
    # Real only: the 409 is injected into the sandbox server's HTTP answer to the PATCH.
    app = real_app
    app.world.inject_fault(("arm", "PATCH", "pool"), status=409, code="OperationNotAllowed",
                           message="Operation could not be completed as it results in exceeding approved quota.")
    result = app.run(scale_up(app, 5))
    assert result.outcome == "failed" and "OperationNotAllowed" in result.detail
    assert app.context.ports.state.get_group(GROUP).backoff_reason == "OperationNotAllowed"


def test_pending_poll_plans_nothing_onto_a_group_in_backoff(app: App) -> None:
    from shared.engine.backoff import after_failure

    app.clock.advance(3600)  # the burst arrives: it needs new nodes, but the only group is backed off
    state = app.context.ports.state.get_group(GROUP)
    assert app.context.ports.state.update_group(after_failure(state, now=app.clock.now(), code="QuotaExceeded"))
    assert run_pending_poll(app.context.ports, app.context.settings, now=app.clock.now()).enqueued == ()
    app.clock.advance(5 * 60)  # backoff over: the same pods are planned again
    assert run_pending_poll(app.context.ports, app.context.settings, now=app.clock.now()).enqueued


def test_nodes_that_never_become_ready_back_the_group_off(app: App) -> None:
    """MAX_NODE_PROVISION_TIME: capacity asked for long ago but still missing is a failed scale-up."""
    from dataclasses import replace as replace_state

    app.clock.advance(3600)  # the burst arrives
    state = app.context.ports.state.get_group(GROUP)
    # The group was asked for 5 nodes 20 minutes ago and 3 exist (the manual clock stands still, so the
    # two new instances never boot):
    assert app.context.ports.state.update_group(replace_state(state, last_scale_up=app.clock.now() - timedelta(minutes=20)))
    group = app.context.ports.provider.get_node_group(GROUP)
    assert group is not None
    app.context.ports.provider.begin_resize(group, 5)  # target 5, only 3 nodes ever arrive
    result = run_pending_poll(app.context.ports, app.context.settings, now=app.clock.now())
    assert app.context.ports.state.get_group(GROUP).backoff_reason == "ProvisionTimeout"
    assert result.enqueued == ()  # the only group is backed off: nothing is asked of it


# -- pending pods take a draining node back ----------------------------------------------------------------

LATE = {"name": "late", "kind": "ReplicaSet", "count": 2, "at": "2m", "requests": {"cpu": "2", "memory": "1Gi"}}


def _draining(make: MakeApp) -> tuple[App, str, str]:
    """A node cordoned and waiting for its render Job; the message of its next drain step."""
    app = make(workloads=(_render("20m"), LATE))
    node = _node_of(app, "render")
    assert app.run(scale_down(app, node)).outcome == "waiting"  # cordon
    [text] = [json.dumps(m) for m in app.queued()]
    app.clear_queue()
    assert "batch pod" in app.run(text).detail  # drain: the Job keeps it
    [text] = [json.dumps(m) for m in app.queued()]
    app.clear_queue()
    return app, node, text


def test_pending_pods_take_back_a_draining_node_instead_of_a_new_one(make: MakeApp) -> None:
    app, node, drain_step = _draining(make)
    app.clock.advance(150)  # the two late pods arrive; one fits the idle node, the other only the draining one
    result = run_pending_poll(app.context.ports, app.context.settings, now=app.clock.now())
    assert list(result.plan.reclaimed) == [node] and result.enqueued == ()
    assert node in app.context.ports.state.get_group(GROUP).reclaim

    outcome = app.run(drain_step)
    assert outcome.outcome == "skipped" and "cancelled: pending pods can use the node" in outcome.detail
    state = app.context.ports.state.get_group(GROUP)
    assert (state.removing, state.reclaim, state.committed) == ({}, {}, frozenset())
    back = app.context.ports.cluster.get_node(node)
    assert back is not None and not back.unschedulable and not back.is_being_deleted
    app.clock.advance(10)
    assert sum(1 for p in app.context.ports.cluster.list_pods() if p.name.startswith("late") and p.node_name == node) == 1
    assert app.arm_calls("POST delete") == 0 and app.world.report()["running_pods_evicted"] == 0


def test_a_committed_delete_wins_over_a_later_reclaim(make: MakeApp) -> None:
    app, node, _ = _draining(make)
    state = app.context.ports.state.get_group(GROUP)
    assert app.context.ports.state.update_group(replace(state, committed=frozenset({node})))
    app.clock.advance(150)
    result = run_pending_poll(app.context.ports, app.context.settings, now=app.clock.now())
    assert result.plan.reclaimed == {} and len(result.enqueued) == 1  # the pod waits for a new node
    assert app.context.ports.state.get_group(GROUP).reclaim == {}


def test_a_reclaim_that_arrives_first_stops_the_delete(make: MakeApp) -> None:
    app, node, drain_step = _draining(make)
    delete_step = json.dumps({**json.loads(drain_step), "step": "delete", "attempt": 0})
    state = app.context.ports.state.get_group(GROUP)
    assert app.context.ports.state.update_group(replace(state, reclaim={node: app.clock.now()}))
    outcome = app.run(delete_step)
    assert outcome.outcome == "skipped" and "cancelled" in outcome.detail
    assert app.arm_calls("POST delete") == 0
    back = app.context.ports.cluster.get_node(node)
    assert back is not None and not back.unschedulable


# -- removals whose action was lost ------------------------------------------------------------------------

def test_a_removal_whose_action_was_lost_is_given_back_by_the_next_poll(app: App) -> None:
    _, idle = app.busy_and_idle()
    assert app.run(scale_down(app, idle[0])).outcome == "waiting"  # cordoned and reserved; then the message is lost
    app.clear_queue()
    settings = app.context.settings
    run_utilization_poll(app.context.ports, settings, now=app.clock.now())
    assert app.context.ports.state.get_group(GROUP).removing == {idle[0]: f"down-{idle[0]}"}  # alive: left alone

    app.clock.advance(orphan_after(settings).total_seconds() + 1)
    run_utilization_poll(app.context.ports, settings, now=app.clock.now())
    # Released (other idle nodes may be reserved by this poll's own decisions, never the lost action's).
    assert f"down-{idle[0]}" not in app.context.ports.state.get_group(GROUP).removing.values()
    node = app.context.ports.cluster.get_node(idle[0])
    assert node is not None and not node.unschedulable and not node.is_being_deleted


def test_a_reservation_left_by_a_finished_action_is_released_at_once(app: App) -> None:
    _, idle = app.busy_and_idle()
    state = app.context.ports.state.get_group(GROUP)
    assert app.context.ports.state.update_group(replace(state, removing={idle[0]: "gone-1"}))
    app.context.ports.state.create_ledger_entry(LedgerEntry("gone-1", "scale_down", GROUP, (3, 0), "done",
                                                            app.clock.now(), outcome="succeeded: removed"))
    run_utilization_poll(app.context.ports, app.context.settings, now=app.clock.now())
    assert app.context.ports.state.get_group(GROUP).removing == {}


# -- SCALE_DOWN_MODE=deallocate ------------------------------------------------------------------------------

def test_deallocate_mode_stops_the_instance_and_the_next_scale_up_starts_it_again(make: MakeApp) -> None:
    app = make(settings={"SCALE_DOWN_MODE": "deallocate"})
    _, idle = app.busy_and_idle()
    target = idle[0]
    instance = app.provider_id(target).rsplit("/", 1)[-1]
    outcomes = walk(app, scale_down(app, target), step_seconds=30)
    assert outcomes[-1] == "succeeded", outcomes
    arm = app.arm()
    assert arm["instances_deallocated"] == {f"pool/{instance}": 1} and "POST delete" not in arm
    group = app.context.ports.provider.get_node_group(GROUP)
    assert group is not None and group.capacity == 3  # capacity keeps the deallocated instance
    state = app.context.ports.state.get_group(GROUP)
    assert state.stopped == frozenset({instance}) and state.removing == {}
    assert target not in app.node_names()

    # The group now runs 2: asking for 3 starts the deallocated instance instead of adding one.
    outcomes = walk(app, scale_up(app, 3), step_seconds=30)
    assert outcomes[-1] == "succeeded", outcomes
    arm = app.arm()
    assert arm["instances_started"] == {f"pool/{instance}": 1} and arm.get("PATCH virtualMachineScaleSets", 0) == 0
    assert app.context.ports.state.get_group(GROUP).stopped == frozenset()
    app.clock.advance(120)  # the boot delay
    back = app.context.ports.cluster.get_node(target)
    assert back is not None and back.ready


def test_deallocated_instances_do_not_count_toward_the_running_size(make: MakeApp) -> None:
    app = make(settings={"SCALE_DOWN_MODE": "deallocate"}, min=2)
    _, idle = app.busy_and_idle()
    assert walk(app, scale_down(app, idle[0]), step_seconds=30)[-1] == "succeeded"
    second = app.run(scale_down(app, idle[1]))  # 2 running, min 2: refused although capacity is 3
    assert second.outcome == "skipped" and "below its minimum 2" in second.detail


def test_an_empty_node_is_cordoned_and_deleted_in_one_step_with_the_fewest_reads(app: App) -> None:
    """The empty-node path deletes in the cordon step itself, reusing that step's reads (ARM budgets GETs)."""
    _, idle = app.busy_and_idle()
    target = idle[0]
    instance = app.provider_id(target).rsplit("/", 1)[-1]
    before = dict(app.arm())

    result = app.run(scale_down(app, target, removal_kind="empty"))

    arm = app.arm()
    reads = {op: arm.get(op, 0) - before.get(op, 0) for op in arm if op.startswith(("GET", "LIST")) and op != "GET operations"}
    assert result.outcome == "waiting", result
    assert arm["instances_deleted"] == {f"pool/{instance}": 1}
    assert reads == {"GET virtualMachineScaleSets": 1, "GET virtualMachines": 1}, reads
    # Its only kube-system pod is kube-proxy's, a DaemonSet pod: no PodDisruptionBudget is worth listing.
    pods = app.context.ports.cluster.list_pods()
    assert any(p.node_name == target and p.namespace == "kube-system" and p.is_daemonset for p in pods)
    k8s = app.world.report()["api_calls"]["breakdown"]["k8s"]
    assert not any("poddisruptionbudgets" in op for op in k8s), k8s


def test_a_throttled_delete_of_an_empty_node_retries_the_delete_not_the_cordon(
    real_app: App, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ARM's per-scale-set delete budget answers 429: the nodes are cordoned once, their events written
    once, and the next message is the delete step (the cordon step again re-cordoned and re-announced).

    Real only: the 429 is injected into the sandbox server's HTTP answer to the delete."""
    app = real_app
    _, idle = app.busy_and_idle()
    target = idle[0]
    app.world.inject_fault(("arm", "POST", "pool"), status=429, code="TooManyRequests", retry_after=20)
    sent: list[tuple[Any, timedelta]] = []
    queue = app.context.ports.queue
    monkeypatch.setattr(queue, "send", lambda action, *, delay=timedelta(0): sent.append((action, delay)))

    result = app.run(scale_down(app, target, removal_kind="empty"))

    assert result.outcome == "waiting" and "throttled by ARM" in result.detail, result
    [(retry, delay)] = sent
    assert retry.step == "delete" and retry.nodes == (target,) and delay >= timedelta(seconds=20)
    # Until then the planner gives the group's slots to other groups.
    assert app.context.ports.state.get_group(GROUP).throttled_until == app.clock.now() + delay
    assert app.arm().get("instances_deleted", {}) == {}
    app.clock.advance(30)
    assert app.run(encode_action(retry)).outcome == "waiting"  # the delete went out; confirm follows
    assert app.arm()["instances_deleted"] == {f"pool/{app.provider_id(target).rsplit('/', 1)[-1]}": 1}
    events = [e for e in app.events("default") if e.name == target and e.reason == "ScaleDown"]
    assert len(events) == 1, events


@pytest.mark.parametrize(("target", "other_reaches"), [(4, 5), (5, 4)])
def test_a_scale_up_never_lowers_a_capacity_another_action_raised_meanwhile(app: App, target: int,
                                                                            other_reaches: int) -> None:
    """Another scale-up PATCHes the group between this step's read and its own PATCH (the queue runs actions side
    by side): growing from the older read would set a capacity below the group's, which removes instances."""
    provider = app.context.ports.provider
    real = provider.get_node_group
    reads = {"n": 0}

    def racing(group_id: str) -> Any:
        reads["n"] += 1
        if reads["n"] == 2:  # after the step's first read, before its PATCH: the other action's resize lands
            scale_set = app.world.scale_set(app.world.subscription_id, GROUP.split("/")[0], GROUP.split("/")[1])
            app.world.set_capacity(scale_set, other_reaches)
        return real(group_id)

    provider.get_node_group = racing  # type: ignore[method-assign]
    result = app.run(scale_up(app, target))  # from 3
    scale_set = app.world.scale_set(app.world.subscription_id, GROUP.split("/")[0], GROUP.split("/")[1])
    assert scale_set.capacity == max(target, other_reaches)  # never lowered: 4 would have removed an instance
    if other_reaches >= target:
        assert result.outcome == "skipped" and f"reached {target} meanwhile" in result.detail
        assert app.arm_calls("PATCH virtualMachineScaleSets") == 0
    else:
        assert app.arm_calls("PATCH virtualMachineScaleSets") == 1


def test_the_scale_up_step_checks_the_limits_without_listing_pods(app: App) -> None:
    """The cluster-wide limits count nodes and groups: the step reads no pod list (most of a poll's read)."""
    cluster = app.context.ports.cluster
    real = cluster.list_pods
    listed = {"n": 0}

    def counting() -> Any:
        listed["n"] += 1
        return real()

    cluster.list_pods = counting  # type: ignore[method-assign]
    result = app.run(scale_up(app, 4))
    assert result.outcome in {"waiting", "succeeded"}, result
    assert listed["n"] == 0
    assert app.arm_calls("PATCH virtualMachineScaleSets") == 1


@pytest.mark.parametrize(("target", "other_reaches"), [(4, 5), (5, 4), (5, 2)])
def test_a_change_between_the_last_read_and_the_patch_is_refused_by_if_match_and_read_again(
        app: App, target: int, other_reaches: int) -> None:
    """The other action's resize lands in the round trip between the step's last read and its PATCH: the PATCH
    carries that read's etag, ARM refuses it (412), and the step reads the group again before deciding."""
    provider = app.context.ports.provider
    real = provider.begin_resize
    sent: list[tuple[str, int]] = []
    scale_set = app.world.scale_set(app.world.subscription_id, GROUP.split("/")[0], GROUP.split("/")[1])

    def racing(group: Any, capacity: int) -> Any:
        sent.append((group.etag, capacity))
        if len(sent) == 1:
            app.world.set_capacity(scale_set, other_reaches)  # lands after the read, before the PATCH
        return real(group, capacity)

    provider.begin_resize = racing  # type: ignore[method-assign]
    result = app.run(scale_up(app, target))  # from 3
    assert sent[0][0], "the PATCH is sent with the etag of the read it was computed from"
    # Never lowered below what the other writer set; grown to the target when the other stayed below it.
    assert scale_set.capacity == max(target, other_reaches)
    if other_reaches >= target:
        assert result.outcome == "skipped" and f"reached {target} meanwhile" in result.detail
        assert len(sent) == 1
    else:
        assert result.outcome in {"waiting", "succeeded"} and len(sent) == 2 and sent[1][0] != sent[0][0]
