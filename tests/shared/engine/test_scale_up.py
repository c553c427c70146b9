from __future__ import annotations

import pytest

from shared.domain import HostPort, Taint, Toleration
from shared.engine import scale_up
from shared.engine.expanders import parse_priorities
from shared.engine.limits import ClusterLimits
from shared.engine.scale_up import ScaleUpOptions, plan_scale_up, simulate_scale_up
from tests.builders import affinity, daemon_pod, group, node, pod, req, res, sel, snapshot, spread, template, term


def pending(n: int, **kw: object) -> list:
    return [pod(f"p{i}", pending=True, **kw) for i in range(n)]  # type: ignore[arg-type]


CASES = [
    # (id, snapshot, expected {group: new_target}, expected absorbed count, expected unplaceable count)
    ("no pending pods", snapshot(groups=[group(target=1)], nodes=[node("n0")]), {}, 0, 0),
    ("fits on free space of a ready node",
     snapshot(groups=[group(target=1)], nodes=[node("n0")], pods=pending(3)), {}, 3, 0),
    ("4 cpu node: 8 one-cpu pods need 2 more nodes beyond a full node",
     snapshot(groups=[group(target=1)], nodes=[node("n0")],
              pods=[pod("busy", cpu=4, node_name="n0")] + pending(8)), {"rg/pool": 3}, 0, 0),
    ("booting nodes absorb pods: never ask twice",
     snapshot(groups=[group(target=3)], nodes=[node("n0")],
              pods=[pod("busy", cpu=4, node_name="n0")] + pending(8)), {}, 8, 0),
    ("max size caps the increase, the rest stays unplaceable",
     snapshot(groups=[group(target=1, max_size=2)], nodes=[node("n0")],
              pods=[pod("busy", cpu=4, node_name="n0")] + pending(8)), {"rg/pool": 2}, 0, 4),
    ("pod bigger than any node triggers nothing",
     snapshot(groups=[group(target=0)], pods=pending(1, cpu=64)), {}, 0, 1),
    ("node selector picks the matching group",
     snapshot(groups=[group("a", target=0), group("b", target=0)],
              templates={"rg/a": template(labels={"pool": "a"}), "rg/b": template(labels={"pool": "b"})},
              pods=pending(2, selector={"pool": "b"})), {"rg/b": 1}, 0, 0),
    ("untolerated taint blocks a group; toleration admits it",
     snapshot(groups=[group("gpu", target=0)],
              templates={"rg/gpu": template(taints=(Taint("nvidia.com/gpu", "true", "NoSchedule"),))},
              pods=pending(1) + [pod("tol", pending=True, tolerations=(Toleration("nvidia.com/gpu", "Exists"),))]),
     {"rg/gpu": 1}, 0, 1),
    ("cordoned and deleting nodes offer no free space",
     snapshot(groups=[group(target=2)],
              nodes=[node("n0", cordoned=True), node("n1", instance=1, taints=(Taint("ToBeDeletedByClusterAutoscaler"),))],
              pods=pending(1)), {"rg/pool": 3}, 0, 0),
    ("daemonset overhead shrinks new nodes",
     snapshot(groups=[group(target=1)], nodes=[node("n0")],
              pods=[daemon_pod("n0", cpu=0.5), pod("busy", cpu=3.5, node_name="n0")] + pending(4)), {"rg/pool": 3}, 0, 0),
    ("memory-bound pods",
     snapshot(groups=[group(target=0)], pods=pending(4, cpu=0.1, mem=7)), {"rg/pool": 2}, 0, 0),
]


@pytest.mark.parametrize("case_id,snap,expected,absorbed,unplaceable", CASES, ids=[c[0] for c in CASES])
def test_plan_scale_up(case_id, snap, expected, absorbed, unplaceable) -> None:
    plan = plan_scale_up(snap)
    assert {i.group_id: i.new_target for i in plan.increases} == expected
    assert len(plan.absorbed) == absorbed
    assert len(plan.unplaceable) == unplaceable


def test_least_waste_prefers_the_snugger_group() -> None:
    snap = snapshot(
        groups=[group("big", target=0), group("small", target=0)],
        templates={"rg/big": template(res(16, 64, 110)), "rg/small": template(res(2, 8, 110))},
        pods=pending(2, cpu=1, mem=4),
    )
    plan = plan_scale_up(snap)
    assert [(i.group_id, i.delta) for i in plan.increases] == [("rg/small", 1)]


def test_max_nodes_per_scale_up() -> None:
    snap = snapshot(groups=[group(target=0, max_size=100)], pods=pending(20, cpu=4))
    plan = plan_scale_up(snap, options=ScaleUpOptions(max_nodes_per_scale_up=5))
    assert [i.delta for i in plan.increases] == [5]
    assert len(plan.unplaceable) == 15


def test_unplaceable_reasons_name_each_group() -> None:
    snap = snapshot(groups=[group("a", target=0), group("b", target=0, max_size=0)],
                    templates={"rg/a": template(labels={"x": "1"}), "rg/b": template()},
                    pods=pending(1, selector={"x": "2"}))
    reason = plan_scale_up(snap).unplaceable["default/p0"]
    assert "rg/a: node(s) didn't match Pod's node affinity/selector" in reason  # the scheduler's wording
    assert "rg/b:" in reason


def test_group_without_template_is_skipped_with_reason() -> None:
    snap = snapshot(groups=[group(target=0, vm_size="Standard_Unknown")], templates={}, pods=pending(1))
    plan = plan_scale_up(snap)
    assert plan.increases == ()
    assert "no node template" in plan.unplaceable["default/p0"]


# --- Scheduler-faithful placement -------------------------------------------------------------

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
GPU_TAINT = Taint("nvidia.com/gpu", "true", "NoSchedule")
GPU_TOLERATION = Toleration("nvidia.com/gpu", "Exists")
WEB = {"app": "web"}


def replicas(n: int, prefix: str = "web", **kw: object) -> list:
    """n pending replicas of one controller."""
    return [pod(f"{prefix}-{i}", pending=True, owner_name=prefix, **kw) for i in range(n)]  # type: ignore[arg-type]


def gpu_groups() -> tuple[list, dict]:
    groups = [group("cpu", target=0), group("gpu", target=0)]
    templates = {"rg/cpu": template(res(4, 16, 110)),
                 "rg/gpu": template(res(8, 64, 110, gpu=2), taints=(GPU_TAINT,))}
    return groups, templates


def test_gpu_pods_go_to_the_gpu_group_and_others_are_told_why_not() -> None:
    groups, templates = gpu_groups()
    pods = (replicas(3, "train", requests=res(1, 4, gpu=1), tolerations=(GPU_TOLERATION,))
            + replicas(1, "lost", requests=res(1, 4, gpu=1)))
    plan = plan_scale_up(snapshot(groups=groups, templates=templates, pods=pods))
    assert [(i.group_id, i.delta) for i in plan.increases] == [("rg/gpu", 2)]  # two GPUs per node
    assert plan.unplaceable == {
        "default/lost-0": "rg/cpu: Insufficient nvidia.com/gpu; rg/gpu: node(s) had untolerated taint {nvidia.com/gpu: true}"
    }


def test_hostname_anti_affinity_puts_one_replica_per_new_node() -> None:
    pods = replicas(5, labels=WEB, cpu=0.5, anti_affinity=(affinity(HOST, sel(app="web")),))
    plan = plan_scale_up(snapshot(groups=[group(target=0)], pods=pods))
    assert [i.delta for i in plan.increases] == [5]


def test_anti_affinity_keeps_pods_off_free_nodes_that_hold_their_peers() -> None:
    pods = [pod("web-old", node_name="n0", labels=WEB, cpu=0.5)] + replicas(
        2, labels=WEB, cpu=0.5, anti_affinity=(affinity(HOST, sel(app="web")),))
    plan = plan_scale_up(snapshot(groups=[group(target=1)], nodes=[node("n0")], pods=pods))
    assert plan.absorbed == ()
    assert [i.delta for i in plan.increases] == [2]


def test_existing_pods_anti_affinity_rules_out_a_zone() -> None:
    guard = pod("guard", node_name="n0", cpu=0.1, anti_affinity=(affinity(ZONE, sel(app="web")),))
    groups = [group("z1", target=1, zones=("1",)), group("z2", target=0, zones=("2",))]
    templates = {"rg/z1": template(labels={ZONE: "westeurope-1"}), "rg/z2": template(labels={ZONE: "westeurope-2"})}
    snap = snapshot(groups=groups, templates=templates, nodes=[node("n0", group_name="z1", zone="westeurope-1")],
                    pods=[guard] + replicas(2, labels=WEB, cpu=1))
    plan = plan_scale_up(snap)
    assert plan.absorbed == ()  # n0 has room, but the guard's anti-affinity covers its zone
    assert [(i.group_id, i.delta) for i in plan.increases] == [("rg/z2", 1)]


def test_pod_affinity_follows_the_peers_zone() -> None:
    cache = pod("cache", node_name="n0", labels={"app": "cache"}, cpu=4)  # n0 is full
    groups = [group("z1", target=1, zones=("1",)), group("z2", target=0, zones=("2",))]
    # z2's nodes would be the snugger fit; affinity rules it out.
    templates = {"rg/z1": template(res(8, 32, 110), labels={ZONE: "westeurope-1"}),
                 "rg/z2": template(res(2, 8, 110), labels={ZONE: "westeurope-2"})}
    snap = snapshot(groups=groups, templates=templates, nodes=[node("n0", group_name="z1", zone="westeurope-1")],
                    pods=[cache] + replicas(2, cpu=1, pod_affinity=(affinity(ZONE, sel(app="cache")),)))
    plan = plan_scale_up(snap)
    assert [(i.group_id, i.delta) for i in plan.increases] == [("rg/z1", 1)]


def full_nodes(groups_and_zones: list[tuple[str, str]]) -> tuple[list, list]:
    """One full node per (group, zone): the zones exist as domains, as in any running cluster."""
    nodes = [node(f"n{i}", group_name=g, instance=i, zone=f"westeurope-{z}") for i, (g, z) in enumerate(groups_and_zones)]
    return nodes, [pod(f"busy{i}", node_name=n.name, cpu=4) for i, n in enumerate(nodes)]


def test_zone_spread_over_a_multi_zone_group_uses_the_balanced_zones() -> None:
    nodes, busy = full_nodes([("pool", "1"), ("pool", "2"), ("pool", "3")])
    pods = replicas(6, labels=WEB, cpu=1, spread=(spread(ZONE, sel(app="web")),))
    snap = snapshot(groups=[group(target=3, zones=("1", "2", "3"))], nodes=nodes, pods=busy + pods,
                    templates={"rg/pool": template(res(4, 16, 110))})
    simulation = simulate_scale_up(snap)
    assert [i.delta for i in simulation.plan.increases] == [3]
    per_zone: dict[str, int] = {}
    for step in simulation.steps:
        if step.pod is not None:
            zone = step.node.labels[ZONE]
            per_zone[zone] = per_zone.get(zone, 0) + 1
    assert per_zone == {"westeurope-1": 2, "westeurope-2": 2, "westeurope-3": 2}


def test_zone_spread_across_single_zone_groups_grows_each() -> None:
    nodes, busy = full_nodes([("z1", "1"), ("z2", "2"), ("z3", "3")])
    groups = [group(f"z{z}", target=1, zones=(str(z),)) for z in (1, 2, 3)]
    templates = {f"rg/z{z}": template(res(4, 16, 110), labels={ZONE: f"westeurope-{z}"}) for z in (1, 2, 3)}
    pods = replicas(6, labels=WEB, cpu=1, spread=(spread(ZONE, sel(app="web")),))
    plan = plan_scale_up(snapshot(groups=groups, templates=templates, nodes=nodes, pods=busy + pods))
    assert sorted((i.group_id, len(i.pods)) for i in plan.increases) == [("rg/z1", 2), ("rg/z2", 2), ("rg/z3", 2)]


def test_zone_spread_only_knows_the_zones_that_exist_as_the_scheduler() -> None:
    # No node anywhere yet: the one zone a new node brings is the only domain, so nothing skews.
    groups = [group(f"z{z}", target=0, zones=(str(z),)) for z in (1, 2)]
    templates = {f"rg/z{z}": template(res(4, 16, 110), labels={ZONE: f"westeurope-{z}"}) for z in (1, 2)}
    pods = replicas(4, labels=WEB, cpu=1, spread=(spread(ZONE, sel(app="web")),))
    plan = plan_scale_up(snapshot(groups=groups, templates=templates, pods=pods))
    assert [(i.group_id, len(i.pods)) for i in plan.increases] == [("rg/z1", 4)]


def test_host_ports_one_pod_per_node_and_daemonset_ports_taken() -> None:
    ports = (HostPort(8080),)
    plan = plan_scale_up(snapshot(groups=[group(target=0)], pods=replicas(3, cpu=0.5, ports=ports)))
    assert [i.delta for i in plan.increases] == [3]
    exporter = pod("exporter", node_name="n0", owner="DaemonSet", owner_name="exporter", cpu=0.1,
                   ports=(HostPort(9100),))
    snap = snapshot(groups=[group(target=1)], nodes=[node("n0")],
                    pods=[exporter, pod("busy", node_name="n0", cpu=3.9)] + replicas(1, cpu=0.5, ports=(HostPort(9100),)))
    plan = plan_scale_up(snap)
    assert plan.increases == ()
    assert plan.unplaceable["default/web-0"] == "rg/pool: node(s) didn't have free ports for the requested pod ports"


def test_upcoming_nodes_are_distinct_hosts() -> None:
    # Target 3, one Ready and full: two nodes are on their way, each takes one anti-affine replica.
    snap = snapshot(groups=[group(target=3)], nodes=[node("n0")],
                    pods=[pod("busy", node_name="n0", cpu=4)]
                    + replicas(3, labels=WEB, cpu=0.5, anti_affinity=(affinity(HOST, sel(app="web")),)))
    plan = plan_scale_up(snap)
    assert len(plan.absorbed) == 2
    assert [i.delta for i in plan.increases] == [1]


def test_unsupported_pods_are_reported_not_placed() -> None:
    pods = replicas(1, unsupported=("volume topology of persistentVolumeClaim data-web-0",))
    plan = plan_scale_up(snapshot(groups=[group(target=1)], nodes=[node("n0")], pods=pods))
    assert plan.absorbed == () and plan.increases == ()
    assert plan.unplaceable == {"default/web-0": "unsupported: volume topology of persistentVolumeClaim data-web-0"}


UNPLACEABLE_REASONS = [
    ("ephemeral storage", replicas(1, requests=res(1, 1, eph_gib=64)), {}, "rg/pool: Insufficient ephemeral-storage"),
    ("node affinity", replicas(1, node_affinity=(term(req("pool", "In", "gpu")),)), {},
     "rg/pool: node(s) didn't match Pod's node affinity/selector"),
    ("max size", replicas(12, cpu=4), {}, "rg/pool: max size reached"),
    ("max nodes per scale-up", replicas(12, cpu=4), {"max_nodes_per_scale_up": 5},
     "rg/pool: max nodes per scale-up (5) reached"),
]


@pytest.mark.parametrize(("pods", "opts", "reason"), [c[1:] for c in UNPLACEABLE_REASONS],
                         ids=[c[0] for c in UNPLACEABLE_REASONS])
def test_unplaceable_reasons_name_the_filter(pods: list, opts: dict, reason: str) -> None:
    plan = plan_scale_up(snapshot(groups=[group(target=0)], pods=pods,
                                  templates={"rg/pool": template(res(4, 16, 110, eph_gib=30))}),
                         options=ScaleUpOptions(**opts))
    assert reason in set(plan.unplaceable.values())


def test_equivalent_replicas_are_evaluated_about_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    real = scale_up._verdict

    def counting(*args: object) -> int:
        nonlocal calls
        calls += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(scale_up, "_verdict", counting)
    nodes = [node(f"n{i}", instance=i) for i in range(50)]
    busy = [pod(f"busy-{i}", node_name=f"n{i}", cpu=4) for i in range(50)]
    snap = snapshot(groups=[group(target=50, max_size=1000)], nodes=nodes, pods=busy + replicas(2000, cpu=1))
    plan = plan_scale_up(snap)
    assert [i.delta for i in plan.increases] == [500]
    # 50 full nodes tried once for the class, then one check per replica on the node it lands on
    # plus one per node it fills: nowhere near 2,000 x 550.
    assert calls < 2 * (50 + 2000 + 500)


# --- Where more capacity places fewer pods, as in the scheduler -------------------------------

def test_an_untolerated_node_still_counts_as_a_spread_domain() -> None:
    # nodeTaintsPolicy defaults to Ignore: the GPU node nobody may use holds the hostname
    # minimum at 0, so each new node takes one replica, where without it one node took both.
    pods = replicas(2, labels=WEB, cpu=0.25, spread=(spread(HOST, sel(app="web")),))
    groups = [group("cpu", target=0, max_size=1), group("gpu", target=1)]
    templates = {"rg/cpu": template(res(2, 8, 110)), "rg/gpu": template(res(2, 8, 110), taints=(GPU_TAINT,))}
    without = plan_scale_up(snapshot(groups=[groups[0], group("gpu", target=0)], templates=templates, pods=pods))
    gpu_node = node("gpu0", group_name="gpu", taints=(GPU_TAINT,))
    with_gpu_node = plan_scale_up(snapshot(groups=groups, templates=templates, nodes=[gpu_node], pods=pods))
    assert (len(without.unplaceable), len(with_gpu_node.unplaceable)) == (0, 1)


def test_a_self_affine_first_replica_pins_its_peers_to_the_zone_it_lands_in() -> None:
    pods = replicas(2, labels=WEB, cpu=0.25, mem=6, pod_affinity=(affinity(ZONE, sel(app="web")),))
    groups = [group("small", target=1, max_size=1, zones=("1",)), group("big", target=0, max_size=1, zones=("3",))]
    templates = {"rg/small": template(res(2, 8, 110), labels={ZONE: "westeurope-1"}),
                 "rg/big": template(res(2, 16, 110), labels={ZONE: "westeurope-3"})}
    small_node = node("s0", group_name="small", alloc=res(2, 8, 110), zone="westeurope-1")
    without = plan_scale_up(snapshot(groups=[groups[1]], templates=templates, pods=pods))
    with_small = plan_scale_up(snapshot(groups=groups, templates=templates, nodes=[small_node], pods=pods))
    assert len(without.unplaceable) == 0  # both on one big node in zone 3
    assert len(with_small.unplaceable) == 1  # the first lands on s0 in zone 1; its peer has no room there


# -- expanders, limits and demand rules, through the planner --------------------------------------------

def _two_groups_snapshot():  # type: ignore[no-untyped-def]
    from tests.builders import group as g, pod as p, snapshot as snap, template as t
    return snap(
        groups=[g("big", target=0, max_size=50), g("small", target=0, max_size=50)],
        templates={"rg/big": t(res(16, 64, 110)), "rg/small": t(res(2, 8, 110))},
        pods=[p(f"w{i}", cpu=1, mem=1, pending=True) for i in range(8)],
    )


@pytest.mark.parametrize(
    "case_id,options,expected_group",
    [
        ("least-waste by default", ScaleUpOptions(), None),
        ("least-nodes prefers the big group", ScaleUpOptions(expander=("least-nodes",)), "rg/big"),
        ("priority overrides waste",
         ScaleUpOptions(expander=("priority", "least-waste"), priorities=parse_priorities({10: ["small"], 20: ["big"]})),
         "rg/big"),
    ],
)
def test_the_expander_chain_picks_the_group(case_id, options, expected_group) -> None:  # type: ignore[no-untyped-def]
    plan = plan_scale_up(_two_groups_snapshot(), options=options)
    groups = {i.group_id for i in plan.increases}
    if expected_group is None:
        assert len(groups) == 1  # one group takes all eight pods
    else:
        assert groups == {expected_group}


@pytest.mark.parametrize("prices,expected_group", [
    ({"rg/big": 0.3, "rg/small": 0.096}, "rg/big"),  # one big node at 0.3 beats the 4 small ones it takes (0.384)
    ({"rg/big": 0.768, "rg/small": 0.096}, "rg/small"),  # 16 idle-ish cores at list price lose to 4 snug nodes
    ({"rg/small": 0.096}, "rg/small"),  # the group without a price ranks last
])
def test_the_price_expander_grows_the_group_that_places_the_pods_for_less(prices, expected_group) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    plan = plan_scale_up(replace(_two_groups_snapshot(), prices=prices), options=ScaleUpOptions(expander=("price",)))
    assert {i.group_id for i in plan.increases} == {expected_group}
    assert sum(len(i.pods) for i in plan.increases) == 8


def test_cluster_node_limit_caps_the_plan_and_says_so() -> None:
    plan = plan_scale_up(_two_groups_snapshot(), options=ScaleUpOptions(expander=("least-nodes",),
                                                                       limits=ClusterLimits(max_nodes_total=0)))
    assert sum(i.delta for i in plan.increases) >= 1
    capped = plan_scale_up(_two_groups_snapshot(), options=ScaleUpOptions(limits=ClusterLimits(max_nodes_total=1)))
    assert sum(i.delta for i in capped.increases) == 1
    assert any("max total nodes reached" in reason for reason in capped.unplaceable.values())


def test_expendable_pods_trigger_nothing() -> None:
    from dataclasses import replace as replace_pod

    from tests.builders import group as g, pod as p, snapshot as snap

    low = replace_pod(p("batch-low", cpu=1, pending=True), priority=-100)
    plan = plan_scale_up(snap(groups=[g(target=0)], pods=[low]))
    assert plan.increases == () and plan.unplaceable == {}
    assert "default/batch-low" in plan.ignored


def test_a_group_in_backoff_takes_nothing_and_pods_are_told_why() -> None:
    snap = _two_groups_snapshot()
    plan = plan_scale_up(snap, options=ScaleUpOptions(unavailable={"rg/small": "in backoff after QuotaExceeded"}))
    assert {i.group_id for i in plan.increases} == {"rg/big"}
    stuck = plan_scale_up(snap, options=ScaleUpOptions(unavailable={"rg/small": "in backoff after QuotaExceeded",
                                                                    "rg/big": "in backoff after SkuNotAvailable"}))
    assert stuck.increases == ()
    assert all("rg/small: in backoff after QuotaExceeded" in r and "rg/big: in backoff after SkuNotAvailable" in r
               for r in stuck.unplaceable.values())


# --- BALANCE_SIMILAR_NODE_GROUPS ------------------------------------------------------------

def _zonal_groups(targets: dict[str, int], **kw: object) -> tuple[list, dict]:
    groups = [group(name, target=t, zones=(name[-1],), **kw) for name, t in targets.items()]  # type: ignore[arg-type]
    templates = {f"rg/{name}": template(labels={"topology.kubernetes.io/zone": f"westeurope-{name[-1]}",
                                                "agentpool": name})
                 for name in targets}
    return groups, templates


BALANCE_CASES = [
    # (id, group targets, max sizes, pending pods (1 cpu each, 4 per node), balance on?, expected new targets)
    ("off: the expander's one group takes all", {"z1": 0, "z2": 0, "z3": 0}, 10, 12, False,
     {"rg/z1": 3}),
    ("on: even split over three zonal groups", {"z1": 0, "z2": 0, "z3": 0}, 10, 12, True,
     {"rg/z1": 1, "rg/z2": 1, "rg/z3": 1}),
    # z1's two requested nodes absorb 8 pods; the other 20 need 5 nodes, given smallest group first.
    ("on: smallest group first evens the sizes", {"z1": 2, "z2": 0, "z3": 0}, 10, 28, True,
     {"rg/z1": 3, "rg/z2": 2, "rg/z3": 2}),
    ("on: a group at its max takes no share", {"z1": 0, "z2": 0, "z3": 0}, 1, 12, True,
     {"rg/z1": 1, "rg/z2": 1, "rg/z3": 1}),
]


@pytest.mark.parametrize("case_id,targets,max_size,count,balance,expected", BALANCE_CASES,
                         ids=[c[0] for c in BALANCE_CASES])
def test_balance_similar_node_groups(case_id, targets, max_size, count, balance, expected) -> None:
    groups, templates = _zonal_groups(targets, max_size=max_size)
    snap = snapshot(groups=groups, templates=templates, pods=pending(count))
    plan = plan_scale_up(snap, options=ScaleUpOptions(balance_similar=balance))
    got = {i.group_id: i.new_target for i in plan.increases}
    assert got == expected
    placed = [p for i in plan.increases for p in i.pods]
    new_nodes = sum(expected[g] - targets[g[3:]] for g in expected)
    assert len(placed) == len(set(placed)) == min(count - len(plan.absorbed), 4 * new_nodes)


def test_balancing_skips_groups_that_cannot_run_the_pods() -> None:
    groups, templates = _zonal_groups({"z1": 0, "z2": 0})
    templates["rg/z2"] = template(labels={"topology.kubernetes.io/zone": "westeurope-2", "agentpool": "z2"},
                                  taints=(Taint("dedicated", "batch", "NoSchedule"),))
    plan = plan_scale_up(snapshot(groups=groups, templates=templates, pods=pending(8)),
                         options=ScaleUpOptions(balance_similar=True))
    assert {i.group_id: i.new_target for i in plan.increases} == {"rg/z1": 2}


def test_balancing_ignores_extra_labels_only_when_told() -> None:
    groups, templates = _zonal_groups({"z1": 0, "z2": 0})
    templates["rg/z1"] = template(labels={**templates["rg/z1"].labels, "team": "a"})
    snap = snapshot(groups=groups, templates=templates, pods=pending(8))
    plain = plan_scale_up(snap, options=ScaleUpOptions(balance_similar=True))
    ignoring = plan_scale_up(snap, options=ScaleUpOptions(balance_similar=True, balancing_ignored_labels=("team",)))
    assert len(plain.increases) == 1
    assert {i.group_id: i.delta for i in ignoring.increases} == {"rg/z1": 1, "rg/z2": 1}


def test_balancing_respects_cluster_limits() -> None:
    groups, templates = _zonal_groups({"z1": 0, "z2": 0, "z3": 0})
    plan = plan_scale_up(snapshot(groups=groups, templates=templates, pods=pending(40)),
                         options=ScaleUpOptions(balance_similar=True, limits=ClusterLimits(max_nodes_total=5)))
    assert sum(i.delta for i in plan.increases) == 5
    assert sorted(i.delta for i in plan.increases) == [1, 2, 2]


# -- taking back nodes being drained ---------------------------------------------------------------

DRAINING = (Taint("ToBeDeletedByClusterAutoscaler", "1", "NoSchedule"), Taint("DeletionCandidateOfClusterAutoscaler"))


def _draining_world(pending_pods: list, *, free_elsewhere: float = 0) -> object:
    nodes = [node("n0"), node("d1", instance=1, cordoned=True, taints=DRAINING)]
    pods = [pod("busy", cpu=4 - free_elsewhere, node_name="n0"), pod("job", cpu=1, node_name="d1")]
    return snapshot(groups=[group(target=2)], nodes=nodes, pods=pods + pending_pods)


RECLAIM_CASES = [
    # (id, pending pods, reclaimable nodes, free cpu on n0, expected reclaimed {node: pods}, expected increase)
    ("a reclaimable draining node takes pods instead of a new node", pending(2), {"d1"}, 0, {"d1": 2}, {}),
    ("not reclaimable (its delete is under way): a new node", pending(2), set(), 0, {}, {"rg/pool": 3}),
    ("free room on other nodes comes first", pending(2), {"d1"}, 2, {}, {}),
    ("what the draining node cannot hold goes to new nodes", pending(5), {"d1"}, 0, {"d1": 3}, {"rg/pool": 3}),
]


@pytest.mark.parametrize("case_id,pods,reclaimable,free,reclaimed,increase", RECLAIM_CASES,
                         ids=[c[0] for c in RECLAIM_CASES])
def test_draining_nodes_are_taken_back_after_free_room_and_before_new_nodes(
    case_id, pods, reclaimable, free, reclaimed, increase,
) -> None:  # type: ignore[no-untyped-def]
    snap = _draining_world(pods, free_elsewhere=free)
    result = plan_scale_up(snap, options=ScaleUpOptions(reclaimable=frozenset(reclaimable)))  # type: ignore[arg-type]
    assert {n: len(p) for n, p in result.reclaimed.items()} == reclaimed
    assert {i.group_id: i.new_target for i in result.increases} == increase


# --- Topology spread in the estimate, as cluster-autoscaler's binpacking estimator -----------
# Rows from kubernetes/autoscaler cluster-autoscaler/estimator/binpacking_estimator_test.go
# (TestBinpackingEstimate): a template of 1000m / 5000Mi / 10 pods in zone-mars, and an
# existing "oldnode" of 100m / 100Mi / 10 pods in zone-jupiter that carries its hostname.
# (pods, millicores, memory bytes, maxSkew, topology key, minDomains, oldnode millicores,
#  expected new nodes at most, expected pods placed)
MI = 1 / 1024
CA_SPREAD_ROWS = [
    ("hostname topology spreading with maxSkew=2 forces 2 pods/node", 8, 200, 200, 2, HOST, 1, 100, 4, 8),
    # The estimator only simulates new nodes (pods fitting oldnode were handled before it),
    # so oldnode is full here: only 2 pods may go to zone-mars while zone-jupiter has none.
    ("zonal topology spreading with maxSkew=2 only allows 2 pods to schedule", 8, 20, 100, 2, ZONE, 1, 0, 1, 2),
    # CA expects 3 nodes for 12 pods: once new nodes raise the spread's minimum, pods go back
    # to the other nodes, oldnode included. Without that we asked for 6; we get 2 (oldnode
    # takes 4 pods here, as in CA's own placement rules), never more than CA.
    ("hostname topology spreading with maxSkew=1 with a large scaleup handles scheduling pods retroactively",
     12, 20, 100, 1, HOST, 3, 100, 3, 12),
]


@pytest.mark.parametrize(("case", "n", "milli", "mem", "skew", "key", "min_domains", "old_milli", "nodes", "placed"),
                         CA_SPREAD_ROWS, ids=[r[0] for r in CA_SPREAD_ROWS])
def test_spread_estimate_matches_cluster_autoscaler(
    case: str, n: int, milli: int, mem: int, skew: int, key: str, min_domains: int, old_milli: int, nodes: int,
    placed: int,
) -> None:
    constraint = spread(key, sel(app="estimatee"), skew, min_domains=min_domains)
    pods = replicas(n, "estimatee", labels={"app": "estimatee"}, cpu=milli / 1000, mem=mem / 2**30, spread=(constraint,))
    old = node("oldnode", group_name="other", alloc=res(old_milli / 1000, 100 * MI, 10), zone="zone-jupiter")
    snap = snapshot(groups=[group(target=0, max_size=1000, zones=("mars",)), group("other", target=1, max_size=1)],
                    templates={"rg/pool": template(res(1, 5000 * MI, 10), labels={ZONE: "zone-mars"})},
                    nodes=[old], pods=pods)
    plan = plan_scale_up(snap)
    new_nodes = sum(i.delta for i in plan.increases)
    assert 0 < new_nodes <= nodes
    assert len(plan.absorbed) + sum(len(i.pods) for i in plan.increases) == placed
    assert len(plan.unplaceable) == n - placed

