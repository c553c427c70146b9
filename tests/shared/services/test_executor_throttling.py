"""Scale-down under ARM's per-scale-set budgets: one list per step, and throttled steps that back off.

Found by replaying the Alibaba batch trace: 60 idle nodes removed ten at a time made a GET per node
per step; the budget ran dry, every throttled step retried as soon as one token came back, and the
actions starved one another for hours with the nodes left running.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from devtools.replay.harness import ReplayConfig
from devtools.replay.pools import CPU_POOL
from devtools.replay.run import replay
from devtools.replay.traces import Trace, TracePod
from shared.services.executor import MAX_THROTTLED_DELAY, throttled_delay


@pytest.mark.parametrize(("retry_after", "step_delay", "attempt", "expected"), [
    (5.0, 10, 0, 10),  # never sooner than STEP_RETRY_DELAY
    (20.0, 10, 0, 20),  # nor than ARM asks
    (20.0, 10, 2, 80),  # longer each time in a row
    (None, 0, 0, 1),  # at least a second, even with test delays of zero
    (30.0, 10, 50, MAX_THROTTLED_DELAY.total_seconds()),  # capped
])
def test_throttled_delay(retry_after: float | None, step_delay: int, attempt: int, expected: float) -> None:
    assert throttled_delay(retry_after, timedelta(seconds=step_delay), attempt=attempt) == timedelta(seconds=expected)


def test_a_burst_of_nodes_goes_again_without_throttling() -> None:
    # 60 nodes' worth of one-minute pods at once, then nothing: every node becomes idle together.
    pods = tuple(TracePod(at=0.0, duration=60.0, cpu_milli=15_000, memory_bytes=1 << 30, job="burst") for _ in range(60))
    outcome = replay(Trace("burst", "<test>", pods, "one burst"), "ours", ReplayConfig(pools=(CPU_POOL,), tail_s=3600))
    result = outcome.result
    assert result["pods_completed"] == 60
    assert outcome.series["nodes"][-1] == 0  # all of them removed within the hour after
    assert result["throttle_violations"] == 0
    # About 1,150 with the pending poll every 10 s (each poll lists the scale set: 360 an hour) and one list per
    # step; the per-node GETs this guards against made one read per node per step on top, thousands.
    assert result["arm_reads"] < 1500
