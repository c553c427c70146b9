"""engine.buffers: the chunk count follows the upstream API's rule, placeholders are never real pods' keys, and a
status keeps its transition times while nothing changes."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from shared.domain import BufferTemplate, CapacityBuffer, Pod, Resources, ScalableRef
from shared.engine.buffers import (
    LIMITED_BY_QUOTAS,
    buffer_of,
    buffer_status,
    chunks_within,
    placeholders,
    ready_counts,
    resolve,
)

NOW = datetime(2030, 1, 7, 9, tzinfo=UTC)
SHAPE = BufferTemplate(Pod("", "", Resources(cpu_milli=500, memory_bytes=2 << 30, pods=1), NOW), "chunk", 3)
DEPLOY = ScalableRef("apps", "Deployment", "web")


@pytest.mark.parametrize(("replicas", "percentage", "scalable", "limits"), [
    (3, None, 10, {}), (None, 20, 10, {}), (1, 25, 10, {}), (5, 10, 7, {}), (None, 0, 10, {}),
    (None, None, None, {"cpu": 2000}), (10, None, None, {"cpu": 2000}), (2, None, None, {"memory": 5 << 30}),
    (4, 50, 9, {"cpu": 1200, "memory": 100 << 30}), (3, None, None, {"nvidia.com/gpu": 0}),
])
def test_chunks_are_the_larger_of_replicas_and_percentage_capped_by_limits(
        replicas: int | None, percentage: int | None, scalable: int | None, limits: dict[str, int]) -> None:
    buffer = CapacityBuffer("ns", "b", replicas=replicas, percentage=percentage, limits=limits,
                            pod_template=None if percentage is not None else "chunk",
                            scalable=DEPLOY if percentage is not None else None)
    resolved = resolve(buffer, SHAPE, scalable_replicas=scalable)
    asked = [n for n in (replicas, math.ceil((percentage or 0) * (scalable or 0) / 100) if percentage is not None
                         else None) if n is not None]
    allowed, _ = chunks_within(limits, SHAPE.pod.requests)
    assert not resolved.problem
    assert resolved.replicas == min(max(asked) if asked else allowed, allowed if allowed is not None else 10**9)
    assert bool(resolved.limited) == (allowed is not None and bool(asked) and allowed < max(asked))
    # The chunks' total stays within every limit on a resource they request.
    for name, amount in limits.items():
        per = {"cpu": SHAPE.pod.requests.cpu_milli, "memory": SHAPE.pod.requests.memory_bytes}.get(name, 0)
        assert per == 0 or resolved.replicas * per <= amount


@pytest.mark.parametrize(("buffer", "template"), [
    (CapacityBuffer("ns", "b", pod_template="gone", replicas=2), None),
    (CapacityBuffer("ns", "b", pod_template="chunk"), SHAPE),  # neither replicas, percentage nor limits
    (CapacityBuffer("ns", "b", pod_template="chunk", scalable=DEPLOY, replicas=1), SHAPE),
    (CapacityBuffer("ns", "b", replicas=1), SHAPE),
    (CapacityBuffer("ns", "b", pod_template="chunk", replicas=1, problem="spec.replicas must be an integer"), SHAPE),
    (CapacityBuffer("ns", "b", pod_template="chunk", replicas=1, strategy="example.com/other"), SHAPE),
])
def test_a_buffer_that_cannot_be_provisioned_plans_nothing_and_says_why(buffer: CapacityBuffer,
                                                                      template: BufferTemplate | None) -> None:
    resolved = resolve(buffer, template, scalable_replicas=None)
    assert resolved.replicas == 0 and resolved.problem
    assert placeholders([resolved], now=NOW) == ()
    status = buffer_status(resolved, ready=0, scaling_up=False, now=NOW)
    assert any(c.status == "False" and c.message == resolved.problem for c in status.conditions)


def test_placeholders_are_pending_in_memory_pods_that_name_their_buffer() -> None:
    resolved = resolve(CapacityBuffer("ns", "b", pod_template="chunk", replicas=3), SHAPE, scalable_replicas=None)
    pods = placeholders([resolved], now=NOW)
    assert len(pods) == 3 and len({p.key for p in pods}) == 3
    for pod in pods:
        assert pod.unschedulable and pod.node_name is None and pod.requests == SHAPE.pod.requests
        assert buffer_of(pod.key) == "ns/b" and ":" in pod.name  # a colon: no real pod can have this name
    assert buffer_of("ns/web-7d9c") is None
    assert ready_counts({"node-a": [pods[0].key, "ns/web-1"], "node-b": [pods[1].key]}) == {"ns/b": 2}


@pytest.mark.parametrize("ready", [0, 2, 3, 5])
def test_status_keeps_its_transition_times_until_a_condition_flips(ready: int) -> None:
    buffer = CapacityBuffer("ns", "b", pod_template="chunk", replicas=3, limits={"cpu": 1000})
    first = buffer_status(resolve(buffer, SHAPE, scalable_replicas=None), ready=ready, scaling_up=False, now=NOW)
    assert first.ready_replicas == min(ready, first.replicas or 0) and first.replicas == 2
    assert {c.type: c.status for c in first.conditions}[LIMITED_BY_QUOTAS] == "True"
    later = NOW + timedelta(minutes=5)
    again = buffer_status(resolve(CapacityBuffer("ns", "b", pod_template="chunk", replicas=3, limits={"cpu": 1000},
                                                 status=first), SHAPE, scalable_replicas=None),
                          ready=ready, scaling_up=False, now=later)
    assert again == first  # nothing changed: nothing to write
    flipped = buffer_status(resolve(CapacityBuffer("ns", "b", pod_template="chunk", replicas=3, status=first), SHAPE,
                                    scalable_replicas=None), ready=ready, scaling_up=False, now=later)
    assert {c.type: c.since for c in flipped.conditions}[LIMITED_BY_QUOTAS] == later
