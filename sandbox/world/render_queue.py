"""A render manager handing frames to a DaemonSet's workers: the load behind a DaemonSet render farm.

`RenderQueuePart` owns the scenario's `render_queue`: a backlog of frames, the frame each node renders
now, and what came of them. It plays a render manager that pulls work onto registered workers:

- frames join the backlog in the scenario's batches (events `frames`);
- every node that is Ready and schedulable (not cordoned) and runs the DaemonSet's pod (Running, not
  terminating) takes one frame from the front of the backlog when it renders none, nodes in name order;
- a frame takes its `frame_time` (its batch's, else the queue's), drawn per frame when the scenario is loaded from a stream of its own
  (so adding a render queue changes no other draw, and a frame takes the same time whichever node
  renders it, whatever an autoscaler does); its end is an event (`frame_done`);
- while a node renders, its worker pod's measured CPU (`PodSim.cpu_usage_milli`, what `node_cpu` and the
  Azure Monitor doubles report) is `busy_cpu`, else `idle_cpu`;
- when a rendering worker stops (its node deleted, NotReady because its VM is deleted, deallocated or
  lost, the pod evicted or deleted), the frame is interrupted: counted, and put back at the front of the
  backlog, to start over on the next free node. A cordoned node keeps rendering the frame it has.

The world is not `done` while frames are due, waiting or rendering.

The backlog can be published (`publish_backlog`): a listener hears of each frame joining it (`arrived`, a put-back
frame again) and leaving it for a worker (`taken`), in order, under the world's lock, so it must not block:
sandbox.api.storage_backlog mirrors them as messages in the Storage queue the scenario's `storage_queue` names.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Protocol

from sandbox.model.scenario import DaemonSetSpec, RenderQueueSpec
from sandbox.world import kobjects
from sandbox.world.core import WorldCore
from sandbox.world.pods import PodSim


@dataclass(frozen=True, slots=True)
class Frame:
    number: int  # 0, 1, ... in the order the scenario's batches list them
    seconds: float  # how long it takes to render (the same on any node, and again after an interruption)


@dataclass(frozen=True, slots=True)
class Rendering:
    """One node at work on one frame."""

    frame: Frame
    pod_uid: str  # the worker pod rendering it: another pod on the node (a replacement) did not
    started: float
    token: int  # matches the `frame_done` event pushed for this assignment


class BacklogListener(Protocol):
    """Hears the backlog change, frame by frame, under the world's lock (so it only takes notes)."""

    def arrived(self, frame: int) -> None: ...

    def taken(self, frame: int) -> None: ...


class RenderQueuePart(WorldCore):
    """Frames, the backlog and the workers rendering them. See the module docstring."""

    def _init_render_state(self) -> None:
        self._render_spec: RenderQueueSpec | None = self.scenario.render_queue
        self._backlog: deque[Frame] = deque()
        self._rendering: dict[str, Rendering] = {}  # by node name
        self._frame_batches_due = 0
        self._frames_arrived = 0
        self._frames_done = 0
        self._frames_interrupted = 0
        self._frames_by_node: Counter[str] = Counter()
        self._render_tokens = 0
        self._frame_arrivals: dict[int, float] = {}  # frames not yet started once: when they arrived
        self._frame_waits: list[float] = []  # each started frame's wait from its arrival to its first start
        self._backlog_listener: BacklogListener | None = None

    def _init_render_queue(self) -> None:
        """Each frame's time, drawn now in the scenario's order from the queue's own stream; each batch an event."""
        spec = self._render_spec
        if spec is None:
            return
        rng = self._rng("render-queue", spec.daemonset)
        number = 0
        for batch in spec.frames:
            frame_time = batch.frame_time or spec.frame_time
            frames = []
            for _ in range(batch.count):
                frames.append(Frame(number, max(0.001, round(frame_time.sample(rng), 3))))
                number += 1
            self._push(batch.at, "frames", tuple(frames))
            self._frame_batches_due += 1

    def publish_backlog(self, listener: BacklogListener) -> None:
        """Tell `listener` of every frame waiting now, then of each frame joining or leaving the backlog."""
        with self.lock:
            self._backlog_listener = listener
            for frame in self._backlog:
                listener.arrived(frame.number)

    def _is_render_daemonset(self, ds: DaemonSetSpec) -> bool:
        return self._render_spec is not None and self._render_spec.daemonset == f"{ds.namespace}/{ds.name}"

    def _daemon_cpu_usage(self, ds: DaemonSetSpec) -> int | None:
        """A new DaemonSet pod's measured CPU: a render worker starts idle."""
        if self._render_spec is not None and self._is_render_daemonset(ds):
            return self._render_spec.idle_cpu_milli
        return ds.cpu_usage_milli

    # ------------------------------------------------------------------ events

    def _on_frames(self, frames: tuple[Frame, ...]) -> None:
        self._frame_batches_due -= 1
        self._frames_arrived += len(frames)
        self._backlog.extend(frames)
        for frame in frames:
            self._frame_arrivals[frame.number] = self._t
            if self._backlog_listener is not None:
                self._backlog_listener.arrived(frame.number)

    def _on_frame_done(self, payload: tuple[str, int]) -> None:
        node, token = payload
        current = self._rendering.get(node)
        if current is None or current.token != token:
            return  # interrupted meanwhile: that frame went back to the backlog
        if self._render_worker_lost(node, current):
            self._interrupt(node)  # lost in the same instant, before a reconcile noticed
            return
        del self._rendering[node]
        self._frames_done += 1
        self._frames_by_node[node] += 1
        self._set_worker_cpu(current.pod_uid, busy=False)

    # ------------------------------------------------------------------ reconcile

    def _render_frames(self) -> None:
        """Interrupt frames whose worker stopped, then hand the backlog to free workers (nodes in name order)."""
        if self._render_spec is None:
            return
        for node in sorted(self._rendering):
            if self._render_worker_lost(node, self._rendering[node]):
                self._interrupt(node)
        if not self._backlog:
            return
        for node in sorted(self._candidate_workers()):
            if not self._backlog:
                break
            if node in self._rendering:
                continue
            pod = self._worker_pod(node)
            if pod is None:
                continue
            frame = self._backlog.popleft()
            if self._backlog_listener is not None:
                self._backlog_listener.taken(frame.number)
            if frame.number in self._frame_arrivals:
                self._frame_waits.append(self._t - self._frame_arrivals.pop(frame.number))
            self._render_tokens += 1
            self._rendering[node] = Rendering(frame, pod.uid, self._t, self._render_tokens)
            pod.cpu_usage_milli = self._render_spec.busy_cpu_milli
            self._push(self._t + frame.seconds, "frame_done", (node, self._render_tokens))

    def _candidate_workers(self) -> list[str]:
        return [*self._by_node, *self._static_nodes]

    def _worker_pod(self, node: str, *, taking: bool = True) -> PodSim | None:
        """The DaemonSet's pod on `node` when it can render: the node Ready (and, to take a frame, not cordoned),
        its VM not going away, the pod live, Running and not terminating."""
        assert self._render_spec is not None
        obj = self._store.get("nodes", "", node)
        if obj is None or not kobjects.is_ready(obj):
            return None
        if taking and (obj.get("spec") or {}).get("unschedulable"):
            return None
        inst = self._by_node.get(node)
        if inst is not None and (inst.state == "Deleting" or inst.power in ("deallocating", "deallocated")):
            return None
        uid = self._node_pods.get((f"ds/{self._render_spec.daemonset}", node))
        pod = self._pods.get(uid) if uid else None
        if pod is None or self._live.get(pod.key) is not pod or pod.terminating or pod.node != node:
            return None
        pod_obj = self._pod_obj(pod)
        if pod_obj["status"].get("phase") != "Running" or pod_obj["metadata"].get("deletionTimestamp"):
            return None
        return pod

    def _render_worker_lost(self, node: str, rendering: Rendering) -> bool:
        pod = self._worker_pod(node, taking=False)
        return pod is None or pod.uid != rendering.pod_uid

    def _interrupt(self, node: str) -> None:
        rendering = self._rendering.pop(node)
        self._frames_interrupted += 1
        self._backlog.appendleft(rendering.frame)
        if self._backlog_listener is not None:
            self._backlog_listener.arrived(rendering.frame.number)
        self._set_worker_cpu(rendering.pod_uid, busy=False)
        self._dirty = True

    def _set_worker_cpu(self, uid: str, *, busy: bool) -> None:
        assert self._render_spec is not None
        pod = self._pods.get(uid)
        if pod is not None:
            pod.cpu_usage_milli = self._render_spec.busy_cpu_milli if busy else self._render_spec.idle_cpu_milli

    # ------------------------------------------------------------------ reports

    def _render_work_left(self) -> bool:
        """Frames still due, waiting or rendering."""
        return self._render_spec is not None and bool(self._frame_batches_due or self._backlog or self._rendering)

    def render_queue_report(self) -> dict[str, Any] | None:
        """`frames_total` (arrived so far), `frames_done`, `frames_interrupted` (times a frame was put back),
        `backlog`, `rendering`, `frames_by_node` (frames each node finished), `frame_wait_s` (`p50`, `p95`, `max`
        seconds from a frame's arrival to its first start, over the frames started; None before one started), and
        `storage_queue` with the scenario's `storage_queue`; None without a render queue."""
        with self.lock:
            if self._render_spec is None:
                return None
            return {
                "frames_total": self._frames_arrived,
                "frames_done": self._frames_done,
                "frames_interrupted": self._frames_interrupted,
                "backlog": len(self._backlog),
                "rendering": len(self._rendering),
                "frames_by_node": dict(sorted(self._frames_by_node.items())),
                "frame_wait_s": _spread(self._frame_waits),
                **({"storage_queue": self._render_spec.storage_queue} if self._render_spec.storage_queue else {}),
            }


def _spread(values: list[float]) -> dict[str, float] | None:
    """Nearest-rank p50 and p95, and the max, rounded to the second's tenth; None for no values."""
    if not values:
        return None
    ordered = sorted(values)

    def rank(pct: float) -> float:
        return round(ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)], 1)

    return {"p50": rank(50), "p95": rank(95), "max": round(ordered[-1], 1)}
