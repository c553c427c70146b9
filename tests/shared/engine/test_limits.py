from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.domain import Resources, Taint
from shared.engine.limits import (
    DEFAULT_CORES_TOTAL,
    DEFAULT_MEMORY_TOTAL,
    GIB,
    MAX_CLUSTER_CORES_REACHED,
    MAX_CLUSTER_MEMORY_REACHED,
    MAX_NODES_PER_SCALE_UP_REACHED,
    MAX_SIZE_REACHED,
    MAX_TOTAL_NODES_REACHED,
    MIN_CLUSTER_CORES_REACHED,
    MIN_CLUSTER_MEMORY_REACHED,
    ClusterLimits,
    ClusterTotals,
    allowed_increase,
    balance,
    balance_within_limits,
    cluster_totals,
    node_cores,
    parse_min_max,
    removal_blocked,
    similar_groups,
    templates_similar,
)
from tests.builders import group, node, res, snapshot, template

UNLIMITED = ClusterLimits(0, (0, 0), (0, 0))

ALLOWANCE_CASES = [
    # (id, desired, group (target, max), node, totals, limits, max per scale-up, expected count, expected reason)
    ("room for all", 3, (1, 10), res(4, 16), ClusterTotals(), ClusterLimits(), 1000, 3, None),
    ("nothing wanted", 0, (1, 10), res(4, 16), ClusterTotals(), ClusterLimits(), 1000, 0, None),
    ("group max caps", 5, (8, 10), res(4, 16), ClusterTotals(), ClusterLimits(), 1000, 2, MAX_SIZE_REACHED),
    ("group at max", 1, (10, 10), res(4, 16), ClusterTotals(), ClusterLimits(), 1000, 0, MAX_SIZE_REACHED),
    ("group above max (max lowered)", 1, (12, 10), res(4, 16), ClusterTotals(), ClusterLimits(), 1000, 0,
     MAX_SIZE_REACHED),
    ("max nodes per scale-up caps", 5, (0, 100), res(4, 16), ClusterTotals(), ClusterLimits(), 3, 3,
     MAX_NODES_PER_SCALE_UP_REACHED),
    ("max total nodes caps", 5, (0, 100), res(4, 16), ClusterTotals(nodes=8), ClusterLimits(max_nodes_total=10), 1000,
     2, MAX_TOTAL_NODES_REACHED),
    ("max total nodes already passed", 5, (0, 100), res(4, 16), ClusterTotals(nodes=12),
     ClusterLimits(max_nodes_total=10), 1000, 0, MAX_TOTAL_NODES_REACHED),
    ("max total nodes 0 is unlimited", 5, (0, 100), res(4, 16), ClusterTotals(nodes=5000), ClusterLimits(), 1000, 5,
     None),
    ("max cores caps", 5, (0, 100), res(4, 16), ClusterTotals(nodes=8, cores=32),
     ClusterLimits(cores_total=(0, 40)), 1000, 2, MAX_CLUSTER_CORES_REACHED),
    ("a node counts whole cores, rounded up", 5, (0, 100), res(3.86, 16), ClusterTotals(cores=32),
     ClusterLimits(cores_total=(0, 40)), 1000, 2, MAX_CLUSTER_CORES_REACHED),
    ("max cores 0 is unlimited", 5, (0, 100), res(4, 16), ClusterTotals(cores=10**9), UNLIMITED, 1000, 5, None),
    ("max memory caps", 5, (0, 100), res(4, 16), ClusterTotals(memory_bytes=32 * GIB),
     ClusterLimits(memory_total=(0, 64 * GIB)), 1000, 2, MAX_CLUSTER_MEMORY_REACHED),
    ("max memory already passed", 5, (0, 100), res(4, 16), ClusterTotals(memory_bytes=65 * GIB),
     ClusterLimits(memory_total=(0, 64 * GIB)), 1000, 0, MAX_CLUSTER_MEMORY_REACHED),
    ("the tightest limit names the reason", 9, (0, 100), res(4, 16), ClusterTotals(nodes=0, cores=0),
     ClusterLimits(max_nodes_total=6, cores_total=(0, 20)), 1000, 5, MAX_CLUSTER_CORES_REACHED),
    ("equal limits: the first in order names the reason", 9, (0, 2), res(4, 16), ClusterTotals(nodes=8),
     ClusterLimits(max_nodes_total=10), 1000, 2, MAX_SIZE_REACHED),
    ("a template without cpu is not held by cores", 5, (0, 100), Resources(0, GIB, 0), ClusterTotals(cores=40),
     ClusterLimits(cores_total=(0, 40)), 1000, 5, None),
]


@pytest.mark.parametrize("case_id,desired,sizes,node_res,totals,limits,per_scale_up,count,reason", ALLOWANCE_CASES,
                         ids=[c[0] for c in ALLOWANCE_CASES])
def test_allowed_increase(case_id, desired, sizes, node_res, totals, limits, per_scale_up, count, reason) -> None:
    target, max_size = sizes
    allowance = allowed_increase(desired, group=group(target=target, max_size=max_size), template=template(node_res),
                                 totals=totals, limits=limits, max_nodes_per_scale_up=per_scale_up)
    assert (allowance.count, allowance.reason) == (count, reason)


@given(
    desired=st.integers(-5, 3000),
    target=st.integers(0, 200),
    max_size=st.integers(0, 250),
    per_scale_up=st.integers(1, 1000),
    cpu_milli=st.integers(0, 96_000),
    memory=st.integers(0, 512 * GIB),
    totals=st.builds(ClusterTotals, st.integers(0, 600), st.integers(0, 30_000), st.integers(0, 10_000 * GIB)),
    max_nodes_total=st.integers(0, 700),
    max_cores=st.integers(0, 40_000),
    max_memory=st.integers(0, 12_000 * GIB),
)
def test_allowed_count_never_exceeds_any_limit(desired, target, max_size, per_scale_up, cpu_milli, memory, totals,
                                               max_nodes_total, max_cores, max_memory) -> None:
    limits = ClusterLimits(max_nodes_total, (0, max_cores), (0, max_memory))
    node_res = Resources(cpu_milli, memory, 110)
    allowance = allowed_increase(desired, group=group(target=target, max_size=max_size), template=template(node_res),
                                 totals=totals, limits=limits, max_nodes_per_scale_up=per_scale_up)
    n = allowance.count
    assert 0 <= n <= max(0, desired)
    assert target + n <= max_size or n == 0
    assert n <= per_scale_up

    def within(count: int) -> bool:
        after = totals.plus(count, node_res)
        return ((max_nodes_total == 0 or after.nodes <= max_nodes_total or count == 0)
                and (max_cores == 0 or node_cores(node_res) == 0 or after.cores <= max_cores or count == 0)
                and (max_memory == 0 or memory == 0 or after.memory_bytes <= max_memory or count == 0))

    assert within(n)
    if n < max(0, desired):
        # Capped: a reason is given, and one more node would break a limit.
        assert allowance.reason is not None
        assert not within(n + 1) or target + n + 1 > max_size or n + 1 > per_scale_up
    else:
        assert allowance.reason is None


@pytest.mark.parametrize("node_res,totals,limits,reason", [
    (res(4, 16), ClusterTotals(cores=12, memory_bytes=48 * GIB), ClusterLimits(cores_total=(8, 100)), None),
    (res(4, 16), ClusterTotals(cores=10, memory_bytes=48 * GIB), ClusterLimits(cores_total=(8, 100)),
     MIN_CLUSTER_CORES_REACHED),
    (res(4, 16), ClusterTotals(cores=12, memory_bytes=40 * GIB), ClusterLimits(memory_total=(32 * GIB, 0)),
     MIN_CLUSTER_MEMORY_REACHED),
    (res(4, 16), ClusterTotals(cores=4, memory_bytes=16 * GIB), ClusterLimits(), None),  # CA's default minimums are 0
], ids=["above mins", "min cores", "min memory", "defaults"])
def test_removal_blocked_by_cluster_minimums(node_res, totals, limits, reason) -> None:
    assert removal_blocked(node_res, totals=totals, limits=limits) == reason


def test_cluster_limits_defaults_and_parse_match_cas() -> None:
    assert ClusterLimits() == ClusterLimits(0, DEFAULT_CORES_TOTAL, DEFAULT_MEMORY_TOTAL)
    assert DEFAULT_CORES_TOTAL == (0, 320_000) and DEFAULT_MEMORY_TOTAL == (0, 6_400_000 * GIB)
    assert ClusterLimits.parse() == ClusterLimits()
    assert ClusterLimits.parse(max_nodes_total=50, cores_total="8:200", memory_total_gib="16:1024") == ClusterLimits(
        50, (8, 200), (16 * GIB, 1024 * GIB))


@pytest.mark.parametrize("text,expected", [("0:320000", (0, 320000)), (" 4 : 8 ", (4, 8)), ("5:5", (5, 5))])
def test_parse_min_max(text: str, expected: tuple[int, int]) -> None:
    assert parse_min_max(text) == expected


@pytest.mark.parametrize("text,message", [
    ("320000", "must be min:max"), ("a:b", "must be min:max"), ("-1:5", "must be min:max"), ("1.5:4", "must be min:max"),
    ("9:4", "min 9 is greater than max 4"),
])
def test_parse_min_max_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_min_max(text, name="cores total")


def test_cluster_totals_count_registered_and_upcoming_nodes() -> None:
    snap = snapshot(
        groups=[group("pool", target=3, max_size=10), group("gpu", target=0)],
        nodes=[node("n0", instance=0, alloc=res(3.86, 14)), node("n1", instance=1, alloc=res(3.86, 14)),
               node("system", group_name="system-pool", alloc=res(2, 8)),
               node("vk", group_name="virtual", alloc=res(10_000, 10_000), labels={"type": "virtual-kubelet"})],
        templates={"rg/pool": template(res(3.86, 14)), "rg/gpu": template(res(24, 220))},
    )
    totals = cluster_totals(snap, exclude={"vk"})
    # Three registered nodes (the virtual one is left out) plus one the pool asked for: 4 + 4 + 2 + 4 cores.
    assert totals == ClusterTotals(nodes=4, cores=14, memory_bytes=(14 * 3 + 8) * GIB)


def test_totals_plus_adds_nodes() -> None:
    assert ClusterTotals(1, 4, GIB).plus(2, res(3.5, 2)) == ClusterTotals(3, 12, 5 * GIB)


ZONE_A = {"topology.kubernetes.io/zone": "westeurope-1", "failure-domain.beta.kubernetes.io/zone": "westeurope-1",
          "topology.disk.csi.azure.com/zone": "westeurope-1", "kubernetes.io/hostname": "vmss-a000000"}
ZONE_B = {"topology.kubernetes.io/zone": "westeurope-2", "failure-domain.beta.kubernetes.io/zone": "westeurope-2",
          "topology.disk.csi.azure.com/zone": "westeurope-2", "kubernetes.io/hostname": "vmss-b000000"}
BASE = {"kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "Standard_D4s_v5", "workload": "batch"}
GPU_TAINT = Taint("nvidia.com/gpu", "true", "NoSchedule")

SIMILAR_CASES = [
    # (id, template a, template b, similar?)
    ("identical", template(labels=BASE), template(labels=BASE), True),
    ("zones, disk zone and hostname differ", template(labels={**BASE, **ZONE_A}), template(labels={**BASE, **ZONE_B}),
     True),
    ("azure pool labels differ", template(labels={**BASE, "agentpool": "zone1", "kubernetes.azure.com/agentpool": "z1"}),
     template(labels={**BASE, "agentpool": "zone2", "kubernetes.azure.com/agentpool": "z2"}), True),
    ("aks bookkeeping labels differ", template(labels={**BASE, "kubernetes.azure.com/node-image-version": "v1"}),
     template(labels={**BASE, "kubernetes.azure.com/node-image-version": "v2"}), True),
    ("region differs", template(labels={**BASE, "topology.kubernetes.io/region": "westeurope"}),
     template(labels={**BASE, "topology.kubernetes.io/region": "northeurope"}), True),
    ("another label differs", template(labels=BASE), template(labels={**BASE, "workload": "web"}), False),
    ("a label only on one side", template(labels=BASE), template(labels={**BASE, "spot": "true"}), False),
    ("cpu differs by a millicore", template(res(4, 16)), template(Resources(3999, 16 * GIB, 0)), False),
    ("memory within 1.5%", template(res(4, 16)), template(res(4, 16 * 0.986)), True),
    ("memory beyond 1.5%", template(res(4, 16)), template(res(4, 16 * 0.98)), False),
    ("pod count within 5%", template(res(4, 16, 110)), template(res(4, 16, 106)), True),
    ("pod count beyond 5%", template(res(4, 16, 110)), template(res(4, 16, 30)), False),
    ("taints differ", template(taints=(GPU_TAINT,)), template(), False),
    ("same taints", template(taints=(GPU_TAINT,)), template(taints=(GPU_TAINT,)), True),
    ("same non-empty agentpool: similar outright, as in CA",
     template(res(4, 16), labels={"kubernetes.azure.com/agentpool": "batch"}),
     template(res(8, 32), labels={"kubernetes.azure.com/agentpool": "batch", "x": "y"}), True),
    ("same legacy agentpool label: similar outright", template(res(4, 16), labels={"agentpool": "batch"}),
     template(res(8, 32), labels={"agentpool": "batch"}), True),
]


@pytest.mark.parametrize("case_id,a,b,similar", SIMILAR_CASES, ids=[c[0] for c in SIMILAR_CASES])
def test_templates_similar(case_id, a, b, similar) -> None:
    assert templates_similar(a, b) is similar
    assert templates_similar(b, a) is similar


def test_extra_ignored_labels() -> None:
    a, b = template(labels={**BASE, "team": "x"}), template(labels={**BASE, "team": "y"})
    assert not templates_similar(a, b)
    assert templates_similar(a, b, extra_ignored_labels={"team"})


def test_similar_groups_skips_itself_groups_without_template_and_different_ones() -> None:
    groups = [group("z1"), group("z3"), group("z2"), group("gpu"), group("unknown")]
    templates = {"rg/z1": template(labels={**BASE, **ZONE_A}), "rg/z2": template(labels={**BASE, **ZONE_B}),
                 "rg/z3": template(labels=BASE), "rg/gpu": template(taints=(GPU_TAINT,), labels=BASE)}
    assert [g.name for g in similar_groups(groups[0], groups, templates)] == ["z2", "z3"]
    assert similar_groups(group("unknown"), groups, templates) == []


BALANCE_CASES = [
    # (id, nodes, groups as (name, target, max), room override, expected increases)
    ("smallest first, then evenly", 6, [("a", 1, 10), ("b", 3, 10), ("c", 3, 10)], None, {"a": 4, "b": 1, "c": 1}),
    ("even groups share evenly, lowest id takes the odd one", 5, [("b", 2, 10), ("a", 2, 10)], None, {"a": 3, "b": 2}),
    ("a group's max is respected", 6, [("a", 0, 2), ("b", 0, 10)], None, {"a": 2, "b": 4}),
    ("more than all groups hold is capped", 9, [("a", 4, 5), ("b", 0, 1)], None, {"a": 1, "b": 1}),
    ("groups at max take nothing", 3, [("a", 5, 5), ("b", 1, 10)], None, {"b": 3}),
    ("room override caps further", 4, [("a", 0, 10), ("b", 0, 10)], {"a": 1, "b": 10}, {"a": 1, "b": 3}),
    ("room override never beyond max", 4, [("a", 0, 1), ("b", 0, 10)], {"a": 5, "b": 10}, {"a": 1, "b": 3}),
    ("group missing from room takes nothing", 2, [("a", 0, 10), ("b", 0, 10)], {"a": 5}, {"a": 2}),
    ("zero nodes", 0, [("a", 0, 10)], None, {}),
    ("no groups", 3, [], None, {}),
]


@pytest.mark.parametrize("case_id,count,specs,room,expected", BALANCE_CASES, ids=[c[0] for c in BALANCE_CASES])
def test_balance(case_id, count, specs, room, expected) -> None:
    groups = [group(name, target=target, max_size=max_size) for name, target, max_size in specs]
    room_by_id = None if room is None else {f"rg/{name}": n for name, n in room.items()}
    assert balance(count, groups, room=room_by_id) == {f"rg/{name}": n for name, n in expected.items()}


@given(count=st.integers(0, 300), sizes=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 80)), max_size=8))
def test_balance_fills_evenly_within_room(count: int, sizes: list[tuple[int, int]]) -> None:
    groups = [group(f"g{i}", target=t, max_size=m) for i, (t, m) in enumerate(sizes)]
    added = balance(count, groups)
    room = {g.id: max(0, g.max_size - g.capacity) for g in groups}
    assert sum(added.values()) == min(count, sum(room.values()))
    assert all(0 < n <= room[gid] for gid, n in added.items())
    final = {g.id: g.capacity + added.get(g.id, 0) for g in groups}
    for receiver in added:
        for other in groups:
            if added.get(other.id, 0) < room[other.id]:  # `other` could still have grown
                assert final[receiver] - 1 <= final[other.id]


@given(
    start=st.builds(ClusterTotals, st.integers(0, 100), st.integers(0, 400), st.integers(0, 1600 * GIB)),
    plans=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 30), st.integers(0, 60), st.integers(1, 64_000),
                             st.integers(1, 256 * GIB)), min_size=1, max_size=6),
    max_nodes_total=st.integers(100, 250),
    max_cores=st.integers(400, 2000),
    max_memory=st.integers(1600 * GIB, 8000 * GIB),
)
def test_increases_planned_in_turn_keep_the_cluster_within_its_limits(start, plans, max_nodes_total, max_cores,
                                                                      max_memory) -> None:
    limits = ClusterLimits(max_nodes_total, (0, max_cores), (0, max_memory))
    totals = start
    for i, (desired, target, max_size, cpu_milli, memory) in enumerate(plans):
        node_template = template(Resources(cpu_milli, memory, 110))
        allowance = allowed_increase(desired, group=group(f"g{i}", target=target, max_size=max_size),
                                     template=node_template, totals=totals, limits=limits)
        totals = totals.plus(allowance.count, node_template.allocatable)
    assert totals.nodes <= max_nodes_total
    assert totals.cores <= max_cores
    assert totals.memory_bytes <= max_memory


BALANCE_LIMIT_CASES = [
    # (id, nodes, groups as (name, target, max), totals, limits, per scale-up, expected increases, expected reason)
    ("loose limits: same as balance", 6, [("a", 1, 10), ("b", 3, 10), ("c", 3, 10)], ClusterTotals(), ClusterLimits(),
     1000, {"a": 4, "b": 1, "c": 1}, None),
    ("total nodes stop the split", 6, [("a", 0, 10), ("b", 0, 10)], ClusterTotals(nodes=6),
     ClusterLimits(max_nodes_total=9), 1000, {"a": 2, "b": 1}, MAX_TOTAL_NODES_REACHED),
    ("cores stop the split", 6, [("a", 0, 10), ("b", 0, 10)], ClusterTotals(cores=24),
     ClusterLimits(cores_total=(0, 40)), 1000, {"a": 2, "b": 2}, MAX_CLUSTER_CORES_REACHED),
    ("group maxes stop the split", 6, [("a", 0, 1), ("b", 0, 2)], ClusterTotals(), ClusterLimits(), 1000,
     {"a": 1, "b": 2}, MAX_SIZE_REACHED),
    ("per scale-up max applies per group", 6, [("a", 0, 10), ("b", 0, 10)], ClusterTotals(), ClusterLimits(), 2,
     {"a": 2, "b": 2}, MAX_NODES_PER_SCALE_UP_REACHED),
    ("a group without template takes nothing", 2, [("a", 0, 10), ("none", 0, 10)], ClusterTotals(), ClusterLimits(),
     1000, {"a": 2}, None),
    ("no groups", 2, [], ClusterTotals(), ClusterLimits(), 1000, {}, "no group to grow"),
]


@pytest.mark.parametrize("case_id,count,specs,totals,limits,per_scale_up,expected,reason", BALANCE_LIMIT_CASES,
                         ids=[c[0] for c in BALANCE_LIMIT_CASES])
def test_balance_within_limits(case_id, count, specs, totals, limits, per_scale_up, expected, reason) -> None:
    groups = [group(name, target=target, max_size=max_size) for name, target, max_size in specs]
    templates = {g.id: template(res(4, 16)) for g in groups if g.name != "none"}
    result = balance_within_limits(count, groups, templates, totals=totals, limits=limits,
                                   max_nodes_per_scale_up=per_scale_up)
    assert dict(result.increases) == {f"rg/{name}": n for name, n in expected.items()}
    assert result.reason == reason


@given(count=st.integers(0, 60), sizes=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 30),
                                                           st.integers(1, 16_000)), max_size=5),
       start_nodes=st.integers(0, 40), max_nodes_total=st.integers(0, 80), max_cores=st.integers(0, 400))
def test_balance_within_limits_never_passes_a_limit(count, sizes, start_nodes, max_nodes_total, max_cores) -> None:
    groups = [group(f"g{i}", target=t, max_size=m) for i, (t, m, _) in enumerate(sizes)]
    templates = {g.id: template(Resources(cpu, GIB, 110)) for g, (_, _, cpu) in zip(groups, sizes)}
    totals = ClusterTotals(nodes=start_nodes, cores=start_nodes * 2, memory_bytes=start_nodes * GIB)
    limits = ClusterLimits(max_nodes_total, (0, max_cores), (0, 0))
    result = balance_within_limits(count, groups, templates, totals=totals, limits=limits)
    placed = sum(result.increases.values())
    assert placed <= count
    assert all(g.capacity + result.increases.get(g.id, 0) <= g.max_size or g.id not in result.increases
               for g in groups)
    after = totals
    for g in groups:
        after = after.plus(result.increases.get(g.id, 0), templates[g.id].allocatable)
    if result.increases:
        assert max_nodes_total == 0 or after.nodes <= max_nodes_total
        assert max_cores == 0 or after.cores <= max_cores
    assert (result.reason is None) == (placed == count)


@pytest.mark.parametrize("running,removing,min_size,blocked", [
    (3, 0, 1, False),  # 3 -> 2
    (3, 1, 1, False),  # 2 -> 1: down to the minimum, allowed
    (3, 2, 1, True),  # 1 -> 0 would go below 1
    (1, 0, 1, True),
    (0, 0, 0, True),  # nothing left to remove
])
def test_at_min_size_is_one_rule_for_the_planner_and_the_executor(running: int, removing: int, min_size: int,
                                                                   blocked: bool) -> None:
    from shared.engine.limits import at_min_size
    from tests.builders import group

    assert at_min_size(group(target=running, min_size=min_size), running=running, removing=removing) is blocked
