"""Events that tell users what the autoscaler decided about their pods, without flooding the API.

cluster-autoscaler's conventions: `TriggeredScaleUp` on each pod a scale-up is for, naming the
group and its new size; `NotTriggerScaleUp` on pods no group can take, with the reason per group.
The same event about the same pod is written at most once per interval (5 minutes), remembered
for the life of the function instance (a cold start may repeat one, as CA's restarts do). Scale-ups
and removals of empty nodes are also recorded on the status ConfigMap (`status_event`), as CA does.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Literal

from shared.domain import ClusterSnapshot, NodeGroup
from shared.engine.scale_up import ScaleUpPlan
from shared.ports import ClusterEvent, EventSink
from shared.settings import Settings

REPEAT_INTERVAL = timedelta(minutes=5)


class EventRecorder:
    """An EventSink that drops repeats of the same (object, reason, message) within the interval."""

    def __init__(self, sink: EventSink, *, interval: timedelta = REPEAT_INTERVAL) -> None:
        self._sink = sink
        self._interval = interval
        self._last: dict[tuple[str, str, str, str], datetime] = {}

    def emit(self, event: ClusterEvent) -> None:
        key = (event.namespace, event.name, event.uid, event.reason + "\x00" + event.message)
        last = self._last.get(key)
        if last is not None and event.at - last < self._interval:
            return
        self._last[key] = event.at
        if len(self._last) > 50_000:  # forget the oldest half rather than grow without bound
            for stale in sorted(self._last, key=self._last.__getitem__)[: len(self._last) // 2]:
                del self._last[stale]
        self._sink.emit(event)


def scale_up_events(snapshot: ClusterSnapshot, plan: ScaleUpPlan, *, now: datetime) -> list[ClusterEvent]:
    """cluster-autoscaler's pod events for one scale-up decision (its EventingScaleUpStatusProcessor).

    `TriggeredScaleUp` goes to every pod the scale-up was estimated for, those a CORES_TOTAL or
    MEMORY_TOTAL cap left without room included (CA caps the node count after estimating).
    `NotTriggerScaleUp` is written only in a poll that grows nothing: while a scale-up is under way
    the pods it could not take are reported on a later poll, as CA skips them in a loop with a scale-up.
    """
    pods = {pod.key: pod for pod in snapshot.pods}
    groups: Mapping[str, NodeGroup] = {group.id: group for group in snapshot.groups}
    events = []
    for increase in plan.increases:
        group = groups[increase.group_id]
        message = (f"pod triggered scale-up: [{{{increase.group_id} {increase.current_target}->{increase.new_target} "
                   f"(max: {group.max_size})}}]")
        limited = [key for key, group_id in plan.limited.items() if group_id == increase.group_id]
        for key in (*increase.pods, *limited):
            pod = pods[key]
            events.append(ClusterEvent(pod.namespace, "Pod", pod.name, pod.uid, "TriggeredScaleUp", message, now))
    if plan.increases:
        return events
    for key, reason in plan.unplaceable.items():
        pod = pods[key]
        events.append(ClusterEvent(pod.namespace, "Pod", pod.name, pod.uid, "NotTriggerScaleUp",
                                   f"pod didn't trigger scale-up: {reason}", now))
    return events


def status_event(settings: Settings, reason: str, message: str, *, now: datetime,
                 type: Literal["Normal", "Warning"] = "Normal") -> ClusterEvent | None:
    """An event about the status ConfigMap, as cluster-autoscaler's LogRecorder writes them (ScaledUpGroup,
    FailedToScaleUpGroup, ScaleDownEmpty), so tools that watch CA's events read ours. None where no status
    is written (STATUS_CONFIGMAP empty, or DRY_RUN: a trial beside CA must not add to CA's record)."""
    if settings.status_configmap is None or settings.dry_run:
        return None
    namespace, name = settings.status_configmap
    return ClusterEvent(namespace, "ConfigMap", name, "", reason, message, now, type)
