"""Per-node registration times: the world's report (`node_registration`) and `make demo`'s summary.json
(`node_registration_s`, `node_registration_s_by_group`, `node_registrations`), bounded like any other figure."""

from __future__ import annotations

from types import SimpleNamespace

from devtools.demo import build_summary, check_expectations
from sandbox.world import World
from tests.sandbox.helpers import POOL, RG, START, SUB, scenario

OTHER = "pool-b"


def _world() -> World:
    """Two pools with fixed boots: 60 s for `pool-a` (the scenario's), 120 s for `pool-b` (its own)."""
    doc = scenario()
    doc["node_groups"].append({**doc["node_groups"][0], "name": OTHER, "computer_name_prefix": "poolb",
                               "boot_delay": "120s", "labels": {"pool": "b"}})
    return World(doc, seed=0, start=START)


def _summary(world: World) -> dict:
    runner = SimpleNamespace(stats=SimpleNamespace(timer_invocations=0, queue_invocations=0, failures=0, poisoned=0))
    return build_summary("two", world.report(), [], converged=True, wall_seconds=1.0, runner=runner)  # type: ignore[arg-type]


def test_each_new_node_is_timed_from_the_increase_that_made_its_vm_to_its_registration() -> None:
    world = _world()
    world.advance_by(10)
    world.set_capacity(world.scale_set(SUB, RG, POOL), 3)  # two new instances at t=10
    world.set_capacity(world.scale_set(SUB, RG, OTHER), 2)  # one at t=10
    world.advance_by(20)
    world.set_capacity(world.scale_set(SUB, RG, POOL), 4)  # one more at t=30
    world.advance_by(300)
    block = world.report()["node_registration"]
    rows = [(r["group"], r["requested"], r["registered"], r["seconds"]) for r in block["nodes"]]
    a, b = f"{RG}/{POOL}", f"{RG}/{OTHER}"
    assert rows == [(a, 10.0, 70.0, 60.0), (a, 10.0, 70.0, 60.0), (a, 30.0, 90.0, 60.0), (b, 10.0, 130.0, 120.0)]
    # The initial nodes were never asked for: none of them is timed.
    initial = {i.node_name for g in (POOL, OTHER) for i in world.instances(world.scale_set(SUB, RG, g))
               if i.instance_id == 0}
    assert not initial & {r["node"] for r in block["nodes"]}
    assert block["seconds"] == {"nodes": 4, "p50": 60.0, "p95": 120.0, "max": 120.0}
    assert block["seconds_by_group"] == {a: {"nodes": 3, "p50": 60.0, "p95": 60.0, "max": 60.0},
                                         b: {"nodes": 1, "p50": 120.0, "p95": 120.0, "max": 120.0}}


def test_an_instance_deleted_before_its_node_registered_is_not_timed() -> None:
    world = _world()
    pool = world.scale_set(SUB, RG, POOL)
    world.set_capacity(pool, 2)
    world.advance_by(40)  # provisioned at 30 s, its node not yet registered
    world.delete_instances(pool, ["1"])
    world.advance_by(300)
    assert world.report()["node_registration"]["nodes"] == []


def test_the_summary_carries_them_and_a_bound_on_them_is_checked() -> None:
    world = _world()
    world.set_capacity(world.scale_set(SUB, RG, OTHER), 2)
    world.advance_by(300)
    summary = _summary(world)
    assert summary["node_registration_s"] == {"nodes": 1, "p50": 120.0, "p95": 120.0, "max": 120.0}
    assert summary["node_registration_s_by_group"][f"{RG}/{OTHER}"]["max"] == 120.0
    assert [r["seconds"] for r in summary["node_registrations"]] == [120.0]
    met, missed = check_expectations(summary, [("node_registration_s.max", 150.0), ("node_registration_s.p95", 90.0)])
    assert met["met"] and not missed["met"] and missed["problem"] == "node_registration_s.p95 is 120, more than 90"
