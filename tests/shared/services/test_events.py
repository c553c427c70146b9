from __future__ import annotations

from datetime import timedelta

import pytest

from shared.engine.limits import ClusterLimits
from shared.engine.scale_up import ScaleUpOptions, plan_scale_up
from shared.ports import ClusterEvent
from shared.services.events import EventRecorder, scale_up_events
from tests.builders import GIB, T0, group, node, pod, res, snapshot, template


class ListSink:
    def __init__(self) -> None:
        self.events: list[ClusterEvent] = []

    def emit(self, event: ClusterEvent) -> None:
        self.events.append(event)


def event(reason: str = "TriggeredScaleUp", *, at_minutes: float = 0, name: str = "p0", message: str = "m") -> ClusterEvent:
    return ClusterEvent("default", "Pod", name, f"uid-{name}", reason, message, T0 + timedelta(minutes=at_minutes))


@pytest.mark.parametrize(
    "case_id,sequence,expected_count",
    [
        ("repeat within five minutes is dropped", [event(), event(at_minutes=4)], 1),
        ("repeat after five minutes is written", [event(), event(at_minutes=5)], 2),
        ("another reason is another event", [event(), event("NotTriggerScaleUp")], 2),
        ("another pod is another event", [event(), event(name="p1")], 2),
        ("a changed message is news", [event(), event(message="group 2->3")], 2),
    ],
)
def test_recorder_rate_limits_per_pod_and_reason(case_id, sequence, expected_count) -> None:  # type: ignore[no-untyped-def]
    sink = ListSink()
    recorder = EventRecorder(sink)
    for item in sequence:
        recorder.emit(item)
    assert len(sink.events) == expected_count


def test_scale_up_events_name_the_group_and_the_reasons() -> None:
    snap = snapshot(groups=[group(target=1, max_size=3)], nodes=[node("n0")],
                    pods=[pod("busy", cpu=4, node_name="n0"), pod("wait", pending=True), pod("huge", cpu=64, pending=True)])
    events = {e.name: e for e in scale_up_events(snap, plan_scale_up(snap), now=T0)}
    assert events["wait"].reason == "TriggeredScaleUp"
    assert events["wait"].message == "pod triggered scale-up: [{rg/pool 1->2 (max: 3)}]"
    # As CA's EventingScaleUpStatusProcessor: no NotTriggerScaleUp in a poll that scales up...
    assert "huge" not in events
    # ...and the pod is told why on a poll that grows nothing.
    alone = snapshot(groups=[group(target=1, max_size=3)], nodes=[node("n0")],
                     pods=[pod("busy", cpu=4, node_name="n0"), pod("huge", cpu=64, pending=True)])
    (only,) = scale_up_events(alone, plan_scale_up(alone), now=T0)
    assert only.reason == "NotTriggerScaleUp"
    assert only.message.startswith("pod didn't trigger scale-up: rg/pool: Insufficient cpu")


# Rows from kubernetes/autoscaler cluster-autoscaler/core/scaleup/orchestrator/orchestrator_test.go:
# TestScaleUpMaxCoresLimitHit / TestScaleUpMaxMemoryLimitHit (ng1 nodes of 2 cores, ng2 of 4; n1
# runs 1000m, n2 3000m; two pending 2000m pods; the cluster max is 9 cores, so ng1 grows by 1,
# not 2, and *both* pods are in PodsTriggeredScaleUp), TestMixedScaleUp (a pod no group can hold
# is in PodsRemainUnschedulable, but no NotTriggerScaleUp is written in a loop that scales up) and
# TestScaleUpCapToMaxTotalNodesLimit (MAX_NODES_TOTAL bounds the estimate itself: the pods beyond
# it are not named as triggering).
LIMIT_ROWS = [
    ("max cores hit: both pods triggered, group grows by one", ClusterLimits(cores_total=(0, 9)),
     {"rg/ng1": 1}, {"p-new-1": "TriggeredScaleUp", "p-new-2": "TriggeredScaleUp"}),
    ("max memory hit: both pods triggered, group grows by one", ClusterLimits(memory_total=(0, 16 * GIB)),
     {"rg/ng1": 1}, {"p-new-1": "TriggeredScaleUp", "p-new-2": "TriggeredScaleUp"}),
    ("max total nodes: only the pod the capped estimate holds", ClusterLimits(max_nodes_total=3),
     {"rg/ng1": 1}, {"p-new-1": "TriggeredScaleUp"}),
]


@pytest.mark.parametrize(("case", "limits", "growth", "reasons"), LIMIT_ROWS, ids=[r[0] for r in LIMIT_ROWS])
def test_limit_capped_scale_up_reports_pods_as_cluster_autoscaler(
    case: str, limits: ClusterLimits, growth: dict[str, int], reasons: dict[str, str]
) -> None:
    groups = [group("ng1", target=1, max_size=10), group("ng2", target=1, max_size=10)]
    templates = {"rg/ng1": template(res(2, 4, 110)), "rg/ng2": template(res(4, 8, 110))}
    nodes = [node("n1", group_name="ng1", alloc=res(2, 4, 110)), node("n2", group_name="ng2", alloc=res(4, 8, 110))]
    pods = [pod("p1", cpu=1, mem=0, node_name="n1"), pod("p2", cpu=3, mem=0, node_name="n2"),
            pod("p-new-1", cpu=2, mem=0, pending=True), pod("p-new-2", cpu=2, mem=0, pending=True)]
    snap = snapshot(groups=groups, templates=templates, nodes=nodes, pods=pods)
    plan = plan_scale_up(snap, options=ScaleUpOptions(limits=limits))
    assert {i.group_id: i.delta for i in plan.increases} == growth
    events = scale_up_events(snap, plan, now=T0)
    assert {e.name: e.reason for e in events} == reasons
    assert all(e.message == "pod triggered scale-up: [{rg/ng1 1->2 (max: 10)}]" for e in events)
