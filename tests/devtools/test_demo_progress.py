"""A run gives up by its sim time, never because a busy machine made it slow in wall time."""

from __future__ import annotations

import pytest

from devtools.demo import SimProgress

# (sim seconds read at each wall second 0, 1, 2, ...; wall second it gives up at, or None)
CASES = [
    pytest.param([0, 100, 200, 300, 400], None, id="moving-under-budget"),
    pytest.param([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], None, id="slow-but-moving"),  # a busy machine: slow is fine
    pytest.param([0, 500, 1000], 2, id="budget-reached"),
    pytest.param([0, 10, 10, 10, 10, 10], 4, id="stood-still"),
    pytest.param([None, None, None, None], 3, id="never-read"),
    pytest.param([0, 10, None, None, 11, 11], None, id="unread-states-are-no-stall-once-it-moves-again"),
]


@pytest.mark.parametrize(("sims", "gives_up_at"), CASES)
def test_a_run_gives_up_only_when_its_sim_time_is_spent_or_stands_still(sims: list[float | None],
                                                                       gives_up_at: int | None) -> None:
    progress = SimProgress(sim_budget=1000, stall_wall_seconds=3)
    ended = [wall for wall, sim in enumerate(sims) if progress.exhausted(sim, wall=float(wall))]
    assert (ended[0] if ended else None) == gives_up_at
    assert bool(progress.ended_by) == (gives_up_at is not None)
