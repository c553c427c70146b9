"""`vmss-cpu`: Azure Monitor autoscale on each scale set, as it is commonly configured.

Per scale set, evaluated every minute on the `Percentage CPU` metric averaged over the last
5 minutes across its running instances: above 70% add one instance, below 30% remove one, then
wait 5 minutes (the cooldown) before acting again. Scale-in uses the scale set's Default policy:
the highest instance id goes, without cordoning or draining, so the pods on it are killed and
their controllers recreate them elsewhere. Blind to pods: pending pods do not count, and a scale
set with no running instance reports no CPU, so each profile's minimum is 1 instance.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from datetime import datetime, timedelta

from devtools.replay.harness import Replay, every
from shared.domain import NodeGroup
from shared.ports import ComputeError

EVALUATION = timedelta(minutes=1)
WINDOW = timedelta(minutes=5)
COOLDOWN = timedelta(minutes=5)
SCALE_OUT_ABOVE = 0.70
SCALE_IN_BELOW = 0.30
MINIMUM = 1


class VmssCpuAutoscale:
    name = "vmss-cpu"

    def __init__(self, replay: Replay) -> None:
        self._replay = replay
        self._start = replay.world.now
        self._samples: dict[str, deque[tuple[datetime, float]]] = {}
        self._last_action: dict[str, datetime] = {}
        self._actions = 0
        self.removed_nodes: dict[str, str] = {}  # node -> "scale-in": devtools.replay.disruptions

    def next_wakeup(self, now: datetime) -> datetime:
        return every(EVALUATION, self._start, now)

    def scale_actions(self) -> int:
        return self._actions

    def wake(self, now: datetime) -> None:
        world = self._replay.world
        cpu = world.node_cpu()
        for group in self._replay.compute.list_node_groups():
            sim = world.scale_set(world.subscription_id, group.resource_group, group.name)
            running = [i for i in world.instances(sim) if i.state != "Deleting" and i.power == "running"]
            measured = [cpu[i.computer_name].fraction for i in running if i.computer_name in cpu]
            samples = self._samples.setdefault(group.id, deque())
            if measured:
                samples.append((now, sum(measured) / len(measured)))
            while samples and now - samples[0][0] >= WINDOW:
                samples.popleft()
            self._decide(group, {i.instance_id: i.node_name for i in running}, samples, now)

    def _decide(self, group: NodeGroup, nodes: Mapping[int, str], samples: deque[tuple[datetime, float]],
                now: datetime) -> None:
        """`nodes`: the group's running instances (instance id -> node name)."""
        last = self._last_action.get(group.id)
        if last is not None and now - last < COOLDOWN:
            return
        floor = max(MINIMUM, group.min_size)
        compute = self._replay.compute
        try:
            if len(nodes) < floor:
                compute.begin_resize(group, floor)  # the profile's minimum
            elif samples and sum(v for _, v in samples) / len(samples) > SCALE_OUT_ABOVE and group.capacity < group.max_size:
                compute.begin_resize(group, group.capacity + 1)
            elif samples and sum(v for _, v in samples) / len(samples) < SCALE_IN_BELOW and len(nodes) > floor:
                victim = max(nodes)
                compute.begin_delete_instances(group, [str(victim)])
                self.removed_nodes[nodes[victim]] = "scale-in"
            else:
                return
        except ComputeError:
            return
        self._actions += 1
        self._last_action[group.id] = now
