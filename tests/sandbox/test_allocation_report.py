"""The report's allocation section: the fallback lag runs from an increase's first failed instance to the next
growth of another scale set; a later instance of the same increase needs no growth of its own (its pods may fit the
room that fallback asked for)."""

from __future__ import annotations

from sandbox.world import World
from tests.sandbox.helpers import POOL, RG, SUB, scenario

OTHER = "pool-b"


def _world() -> World:
    a = {**scenario()["node_groups"][0], "initial": 0, "name": POOL}
    b = {**a, "name": OTHER}
    doc = scenario(node_groups=[a, b], boot_delay={"min": "60s", "max": "180s"},
                   allocation_failures=[{"scale_set": POOL, "code": "ZonalAllocationFailed"}])
    return World(doc, seed=3)


def test_the_fallback_lag_is_per_increase_from_its_first_failure() -> None:
    world = _world()
    world.set_capacity(world.scale_set(SUB, RG, POOL), 3)  # every new instance will fail, each at its own time
    failed: list[float] = []
    grown_at = None
    for _ in range(200):
        world.advance_by(1)
        failed = [entry["t"] for entry in world.allocation_report()["log"]]
        if failed and grown_at is None:
            world.set_capacity(world.scale_set(SUB, RG, OTHER), 2)  # the fallback, the second after the first
            grown_at = world.t
        if len(failed) == 3:
            break
    assert len(failed) == 3 and max(failed) > min(failed), "the three fail at different times"
    world.advance_by(300)  # long after: a per-instance measure would run the later failures to now
    report = world.allocation_report()
    assert grown_at is not None
    assert report["fallback_lag_s_max"] == round(grown_at - min(failed), 3)
