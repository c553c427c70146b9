from __future__ import annotations

from datetime import timedelta

import pytest

from shared.engine.scale_up import plan_scale_up
from shared.ports import ClusterEvent
from shared.services.events import EventRecorder, scale_up_events
from tests.builders import T0, group, node, pod, snapshot


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
    assert events["huge"].reason == "NotTriggerScaleUp"
    assert events["huge"].message.startswith("pod didn't trigger scale-up: rg/pool: Insufficient cpu")
