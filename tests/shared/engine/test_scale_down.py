from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import DisruptionBudget, GroupState, Pod, Taint
from shared.engine import reasons
from shared.engine.cooldowns import ScaleDownDelays, scale_down_blocked
from shared.engine.drainability import DO_NOT_DISRUPT, SAFE_TO_EVICT, SAFE_TO_EVICT_LOCAL_VOLUMES, DrainRules
from shared.engine.limits import ClusterLimits
from shared.engine.scale_down import ScaleDownOptions, plan_scale_down
from tests.builders import T0, daemon_pod, group, node, pod, res, sel, snapshot, spread

OLD = T0 - timedelta(minutes=11)
OPTS = ScaleDownOptions(unneeded_time=timedelta(minutes=10), max_parallelism=10)


def three_nodes(**group_kw: object) -> list:
    return [group(target=3, **group_kw)], [node(f"n{i}", instance=i) for i in range(3)]  # type: ignore[arg-type]


def plan(snap, since=None, states=None, options=OPTS):  # type: ignore[no-untyped-def]
    return plan_scale_down(snap, unneeded_since=since or {}, group_states=states or {}, now=T0, options=options)


def test_new_idle_node_becomes_unneeded_now() -> None:
    groups, nodes = three_nodes()
    result = plan(snapshot(groups=groups, nodes=nodes))
    assert result.unneeded == {"n0": T0, "n1": T0, "n2": T0}
    assert result.removals == ()


@pytest.mark.parametrize(
    "case_id,extra_pods,expected_removed",
    [
        ("only daemonset pods: removable", [daemon_pod("n0")], {"n0"}),
        ("a small replica moves to the other node", [pod("web", node_name="n0")], {"n0"}),
        ("a busy node stays", [pod("web", cpu=3, node_name="n0")], set()),
        ("a finished pod does not", [pod("done", node_name="n0", phase="Succeeded")], {"n0"}),
        ("pending pod that fits keeps it", [pod("wait", pending=True)], set()),
        ("pending pod that fits nowhere here does not", [pod("huge", cpu=64, pending=True)], {"n0"}),
    ],
)
def test_idle_rules(case_id, extra_pods, expected_removed) -> None:  # type: ignore[no-untyped-def]
    groups = [group(target=2, min_size=1)]
    nodes = [node("n0"), node("n1", instance=1)]
    busy = [pod("keep", node_name="n1")]
    result = plan(snapshot(groups=groups, nodes=nodes, pods=busy + extra_pods), since={"n0": OLD})
    assert {r.node for r in result.removals} == expected_removed


@pytest.mark.parametrize(
    "case_id,node_kw,reason_part",
    [
        ("annotation opt-out", {"annotations": {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}}, ("disabled", reasons.SCALE_DOWN_DISABLED_ANNOTATION)),
        ("not ready: waits for the unready time", {"ready": False}, ("unready for 660s of 1200s", reasons.NOT_UNREADY_LONG_ENOUGH)),
        ("cordoned by someone", {"cordoned": True}, ("cordoned", reasons.CORDONED_BY_OTHERS)),
    ],
)
def test_kept_with_reason(case_id, node_kw, reason_part) -> None:  # type: ignore[no-untyped-def]
    result = plan(snapshot(groups=[group(target=2)], nodes=[node("n0", **node_kw)]), since={"n0": OLD})
    text, code = reason_part
    assert result.removals == ()
    assert text in result.kept["n0"] and result.kept["n0"].code == code


def test_removal_waits_for_unneeded_time() -> None:
    groups, nodes = three_nodes()
    result = plan(snapshot(groups=groups, nodes=nodes), since={"n0": T0 - timedelta(minutes=9)})
    assert result.removals == ()
    assert "unneeded for 540s" in result.kept["n0"] and result.kept["n0"].code == reasons.NOT_UNNEEDED_LONG_ENOUGH


def test_never_below_min() -> None:
    groups, nodes = three_nodes(min_size=1)
    since = {"n0": OLD, "n1": OLD - timedelta(minutes=5), "n2": OLD - timedelta(minutes=1)}
    result = plan(snapshot(groups=groups, nodes=nodes), since=since)
    assert [r.node for r in result.removals] == ["n0", "n1"]
    assert "minimum" in result.kept["n2"] and result.kept["n2"].code == reasons.NODE_GROUP_MIN_SIZE_REACHED


def test_a_node_being_deleted_is_left_to_the_executor() -> None:
    groups, nodes = three_nodes()
    nodes[0] = node("n0", taints=(Taint("ToBeDeletedByClusterAutoscaler"),))
    result = plan(snapshot(groups=groups, nodes=nodes), since={n.name: OLD for n in nodes})
    assert "n0" not in result.unneeded and "n0" not in result.kept
    assert {r.node for r in result.removals} == {"n1", "n2"}


def test_in_flight_deletions_count_against_min_and_parallelism() -> None:
    groups, nodes = three_nodes(min_size=1)
    states = {"rg/pool": GroupState("rg/pool", removing={"other": "action-1"})}
    result = plan(snapshot(groups=groups, nodes=nodes), since={n.name: OLD for n in nodes}, states=states)
    assert len(result.removals) == 1
    limited = plan(snapshot(groups=groups, nodes=nodes), since={n.name: OLD for n in nodes},
                   options=ScaleDownOptions(unneeded_time=timedelta(minutes=10), max_parallelism=1))
    assert len(limited.removals) == 1


def test_nodes_outside_discovered_groups_are_ignored() -> None:
    result = plan(snapshot(groups=[group("other", target=1)], nodes=[node("n0")]), since={"n0": OLD})
    assert result.unneeded == {} and result.removals == ()


@pytest.mark.parametrize(
    "case_id,state,blocked",
    [
        ("fresh group", GroupState("g"), None),
        ("just scaled up", GroupState("g", last_scale_up=T0 - timedelta(minutes=5)), "after-add"),
        ("scaled up long ago", GroupState("g", last_scale_up=T0 - timedelta(minutes=15)), None),
        ("recent failure", GroupState("g", last_failure=T0 - timedelta(minutes=1)), "after-failure"),
        ("delete delay zero", GroupState("g", last_scale_down=T0), None),
    ],
)
def test_cooldowns(case_id, state, blocked) -> None:  # type: ignore[no-untyped-def]
    reason = scale_down_blocked(state, now=T0, delays=ScaleDownDelays())
    assert (reason is None) if blocked is None else (blocked in reason)


def test_cooldown_keeps_node() -> None:
    groups, nodes = three_nodes()
    states = {"rg/pool": GroupState("rg/pool", last_scale_up=T0 - timedelta(minutes=1))}
    result = plan(snapshot(groups=groups, nodes=nodes), since={"n0": OLD}, states=states)
    assert result.removals == () and "after-add" in result.kept["n0"]


# --- which pods pin a node, and what the operator is told ------------------------------------

def _on(name: str, node_name: str = "n0", *, cpu: float = 1, mem: float = 1, **changes: object) -> Pod:
    """A small replica on `node_name`, with Pod fields changed (annotations, local volumes...)."""
    return replace(pod(name, node_name=node_name, cpu=cpu, mem=mem), **changes)  # type: ignore[arg-type]


def _budget(allowed: int, **labels: str) -> DisruptionBudget:
    return DisruptionBudget("default", "pdb", sel(**labels), allowed)


PIN_CASES = [
    # (id, pods on n0, budgets, kept reason part or None when n0 is removed)
    ("safe-to-evict false", [_on("a", annotations={SAFE_TO_EVICT: "false"})], [], ("safe-to-evict=false", reasons.NOT_SAFE_TO_EVICT)),
    ("karpenter do-not-disrupt", [_on("a", annotations={DO_NOT_DISRUPT: "true"})], [], ("do-not-disrupt=true", reasons.DO_NOT_DISRUPT)),
    ("unlisted local storage", [_on("a", local_volumes=("scratch",))], [], ("local storage (scratch)", reasons.LOCAL_STORAGE)),
    ("listed local storage moves",
     [_on("a", local_volumes=("scratch",), annotations={SAFE_TO_EVICT_LOCAL_VOLUMES: "scratch"})], [], None),
    ("no controller", [_on("a", owner=None)], [], ("has no controller", reasons.NOT_REPLICATED)),
    ("safe-to-evict true overrides no controller",
     [_on("a", owner=None, annotations={SAFE_TO_EVICT: "true"})], [], None),
    ("kube-system pod without a budget", [_on("a", namespace="kube-system")], [], ("no PodDisruptionBudget", reasons.UNMOVABLE_KUBE_SYSTEM_POD)),
    ("kube-system pod with a budget moves",
     [_on("a", namespace="kube-system", labels={"app": "dns"})],
     [DisruptionBudget("kube-system", "dns", sel(app="dns"), 1)], None),
    ("budget exhausted", [_on("a", labels={"app": "web"})], [_budget(0, app="web")], ("allows 0 more disruption", reasons.NOT_ENOUGH_PDB)),
    ("budget with room", [_on("a", labels={"app": "web"})], [_budget(1, app="web")], None),
    ("daemonset and mirror pods never pin", [daemon_pod("n0"), _on("m", owner=None, is_mirror=True)], [], None),
    ("expendable pods never pin", [_on("a", owner=None, priority=-20)], [], None),
    ("too big for any other node", [_on("a", cpu=1.9, mem=7, node_name="n0")], [], ("no other node can take pod", reasons.NO_PLACE_TO_MOVE_PODS)),
]


@pytest.mark.parametrize("case_id,pods,budgets,reason", PIN_CASES, ids=[c[0] for c in PIN_CASES])
def test_pods_that_pin_their_node(case_id, pods, budgets, reason) -> None:  # type: ignore[no-untyped-def]
    groups = [group(target=2)]
    nodes = [node("n0"), node("n1", instance=1)]
    busy = [pod("keep", cpu=1.9, mem=10, node_name="n1")]  # n1 stays (above the threshold), with 2.1 cpu / 6 GiB free
    snap = replace(snapshot(groups=groups, nodes=nodes, pods=busy + pods), disruption_budgets=tuple(budgets))
    result = plan(snap, since={"n0": OLD})
    if reason is None:
        assert [r.node for r in result.removals] == ["n0"]
    else:
        text, code = reason
        assert result.removals == ()
        assert text in result.kept["n0"] and result.kept["n0"].code == code


def test_budgets_are_counted_across_the_nodes_of_one_plan() -> None:
    groups = [group(target=3)]
    nodes = [node("n0"), node("n1", instance=1), node("big", instance=2, alloc=res(32, 128, 110))]
    pods = [_on("a", "n0", labels={"app": "web"}), _on("b", "n1", labels={"app": "web"}),
            pod("keep", cpu=17, node_name="big")]
    snap = replace(snapshot(groups=groups, nodes=nodes, pods=pods), disruption_budgets=(_budget(1, app="web"),))
    result = plan(snap, since={"n0": OLD, "n1": OLD})
    assert [r.node for r in result.removals] == ["n0"]
    assert "allows 0 more disruption(s), 1 needed" in result.kept["n1"]


def test_shared_free_capacity_counts_once() -> None:
    # n2 has room for one of the two 1.5-cpu pods; n0 and n1 cannot both go.
    groups = [group(target=3)]
    nodes = [node("n0"), node("n1", instance=1), node("n2", instance=2)]
    pods = [pod("a", cpu=1.5, node_name="n0"), pod("b", cpu=1.5, node_name="n1"), pod("keep", cpu=2.5, node_name="n2")]
    result = plan(snapshot(groups=groups, nodes=nodes, pods=pods), since={"n0": OLD, "n1": OLD})
    assert len(result.removals) == 1
    (other,) = {"n0", "n1"} - {result.removals[0].node}
    assert result.kept[other]


def test_measured_cpu_is_a_second_opinion() -> None:
    groups, nodes = three_nodes()
    snap = snapshot(groups=groups, nodes=nodes)
    since = {n.name: OLD for n in nodes}
    busy = plan_scale_down(snap, unneeded_since=since, group_states={}, now=T0, options=OPTS,
                           measured_cpu={"n0": 0.9, "n1": 0.1})
    assert {r.node for r in busy.removals} == {"n1", "n2"}  # n2 was not measured: requests decide
    assert "measured CPU 0.90 above 0.50" in busy.kept["n0"]
    blind = plan_scale_down(snap, unneeded_since=since, group_states={}, now=T0, options=OPTS, measured_cpu=None)
    assert {r.node for r in blind.removals} == {"n0", "n1", "n2"}


def _job(name: str, node_name: str, *, started_min_ago: int, deadline_min: int | None) -> Pod:
    return replace(pod(name, node_name=node_name, owner="Job"), started_at=T0 - timedelta(minutes=started_min_ago),
                   active_deadline_seconds=None if deadline_min is None else deadline_min * 60)


def test_removal_order_empty_then_cheapest_then_batch_ending_soonest() -> None:
    names = ["batch-late", "batch-soon", "two-pods", "one-pod", "empty-new", "empty-old", "spare"]
    groups = [group(target=len(names), max_size=20)]
    nodes = [replace(node(n, instance=i), created_at=T0 - timedelta(hours=1 + i)) for i, n in enumerate(names)]
    nodes[-1] = node("spare", instance=6, alloc=res(32, 128, 110))
    pods = [
        _job("late", "batch-late", started_min_ago=5, deadline_min=60),
        _job("soon", "batch-soon", started_min_ago=50, deadline_min=60),
        pod("x1", cpu=0.5, node_name="two-pods"), pod("x2", cpu=0.5, node_name="two-pods"),
        pod("y", cpu=0.5, node_name="one-pod"),
        pod("keep", cpu=17, node_name="spare"),
    ]
    result = plan(snapshot(groups=groups, nodes=nodes, pods=pods), since={n: OLD for n in names})
    order = [r.node for r in result.removals]
    assert order[:2] == ["empty-old", "empty-new"]  # empty first, the older one first: never newest first
    assert order[2:4] == ["one-pod", "two-pods"]
    assert order[4:] == ["batch-soon", "batch-late"]
    kinds = {r.node: r.kind for r in result.removals}
    assert kinds == {"empty-old": "empty", "empty-new": "empty", "one-pod": "drain", "two-pods": "drain",
                     "batch-soon": "batch", "batch-late": "batch"}
    batch = next(r for r in result.removals if r.node == "batch-soon")
    assert batch.wait == ("default/soon",) and batch.move == ()


def test_batch_protection_off_evicts_job_pods_like_cluster_autoscaler() -> None:
    groups = [group(target=2)]
    nodes = [node("n0"), node("n1", instance=1)]
    pods = [_job("render", "n0", started_min_ago=1, deadline_min=None), pod("keep", cpu=2.5, node_name="n1")]
    options = replace(OPTS, drain=DrainRules(protect_batch=False))
    result = plan(snapshot(groups=groups, nodes=nodes, pods=pods), since={"n0": OLD, "n1": OLD}, options=options)
    removal = next(r for r in result.removals if r.node == "n0")
    assert removal.kind == "drain" and removal.move == ("default/render",)


def test_batch_selector_marks_pods_of_other_controllers_as_batch() -> None:
    groups = [group(target=2)]
    nodes = [node("n0"), node("n1", instance=1)]
    pods = [pod("sim", node_name="n0", labels={"workload": "batch"}), pod("keep", cpu=2.5, node_name="n1")]
    options = replace(OPTS, drain=DrainRules(batch_selector=sel(workload="batch")))
    result = plan(snapshot(groups=groups, nodes=nodes, pods=pods), since={"n0": OLD, "n1": OLD}, options=options)
    assert next(r for r in result.removals if r.node == "n0").kind == "batch"


TAG = "k8s.io_cluster-autoscaler_node-template_autoscaling-options_"


@pytest.mark.parametrize("case_id,tags,pod_cpu,removed", [
    ("default threshold 0.5: a 0.6 node stays", {}, 2.4, False),
    ("group threshold 0.7: it goes", {TAG + "scaledownutilizationthreshold": "0.7"}, 2.4, True),
    ("group unneeded time 20m: not yet", {TAG + "scaledownunneededtime": "20m0s"}, 0.5, False),
    ("group unneeded time 5m: it goes", {TAG + "scaledownunneededtime": "5m"}, 0.5, True),
])
def test_per_group_options_from_scale_set_tags(case_id, tags, pod_cpu, removed) -> None:  # type: ignore[no-untyped-def]
    groups = [group(target=2, tags=tags)]
    nodes = [node("n0"), node("n1", instance=1, alloc=res(32, 128, 110))]
    pods = [pod("a", cpu=pod_cpu, node_name="n0"), pod("keep", cpu=17, node_name="n1")]
    result = plan(snapshot(groups=groups, nodes=nodes, pods=pods), since={"n0": OLD})
    assert ("n0" in {r.node for r in result.removals}) == removed


# cluster-autoscaler's eligibility (core/scaledown/eligibility, isNodeBelowUtilizationThreshold): a node whose
# utilisation is `>= threshold` is not underutilized, so one exactly at the threshold is no candidate, and a
# threshold of 0 makes none, not even an empty node. Boundaries at the default and at a group's tagged threshold.
@pytest.mark.parametrize("case_id,tags,pod_cpu,candidate", [
    ("just below the default 0.5", {}, 1.999, True),
    ("exactly at the default 0.5", {}, 2.0, False),
    ("just above the default 0.5", {}, 2.001, False),
    ("exactly at a group threshold of 0.25", {TAG + "scaledownutilizationthreshold": "0.25"}, 1.0, False),
    ("just below a group threshold of 0.25", {TAG + "scaledownutilizationthreshold": "0.25"}, 0.999, True),
    ("an empty node, group threshold 0", {TAG + "scaledownutilizationthreshold": "0"}, 0.0, False),
    ("an empty node, group threshold 0.01", {TAG + "scaledownutilizationthreshold": "0.01"}, 0.0, True),
])
def test_a_node_at_its_utilization_threshold_is_no_candidate(case_id, tags, pod_cpu, candidate) -> None:  # type: ignore[no-untyped-def]
    groups = [group(target=2, tags=tags)]
    nodes = [node("n0", alloc=res(4, 16, 110)), node("n1", instance=1, alloc=res(32, 128, 110))]
    pods = [pod("keep", cpu=17, node_name="n1")]
    if pod_cpu:
        pods.append(pod("a", cpu=pod_cpu, mem=0.5, node_name="n0"))
    result = plan(snapshot(groups=groups, nodes=nodes, pods=pods))
    assert ("n0" in result.unneeded) is candidate, case_id
    if not candidate:
        assert "n0" not in result.kept  # needed: not a candidate, nothing to report


def test_a_malformed_option_tag_names_the_tag_and_group() -> None:
    groups = [group(target=1, tags={TAG + "scaledownutilizationthreshold": "lots"})]
    with pytest.raises(ValueError, match="rg/pool: tag .*scaledownutilizationthreshold"):
        plan(snapshot(groups=groups, nodes=[node("n0")]))


def test_cluster_minimum_cores_keeps_nodes() -> None:
    groups, nodes = three_nodes()
    options = replace(OPTS, limits=ClusterLimits(cores_total=(8, 320000)))
    result = plan(snapshot(groups=groups, nodes=nodes), since={n.name: OLD for n in nodes}, options=options)
    assert len(result.removals) == 1  # 12 cores -> 8, never below
    assert all("cores" in result.kept[n] for n in {"n0", "n1", "n2"} - {r.node for r in result.removals})


def test_a_node_that_takes_moved_pods_is_not_removed_in_the_same_plan() -> None:
    groups = [group(target=2)]
    nodes = [node("n0"), node("n1", instance=1)]
    pods = [pod("a", node_name="n0"), pod("b", node_name="n1")]
    result = plan(snapshot(groups=groups, nodes=nodes, pods=pods), since={"n0": OLD, "n1": OLD})
    assert len(result.removals) == 1
    (other,) = {"n0", "n1"} - {result.removals[0].node}
    assert "takes the pods of" in result.kept[other]


def test_room_given_back_by_a_failed_candidate_is_used_again() -> None:
    # c1 fills k0, spills onto c3, then fails on a pod no node takes: both get their room back.
    # c2's pod, of c1's shape and size, must go to k0 again, not skip it and land on c3,
    # which would keep c3 for receiving pods. (The simulation remembers where nodes full for
    # a kind of pod end; a rollback must move that mark back.)
    alloc = res(10, 40, 110)
    groups = [group(target=4, max_size=8)]
    nodes = [node(n, instance=i, alloc=alloc, labels={"tier": "a"}) for i, n in enumerate(["k0", "c1", "c2", "c3"])]
    tier_a = {"tier": "a"}
    pods = [
        pod("busy", cpu=8, node_name="k0"),  # k0 stays, with 2 cpu free
        pod("p1", cpu=1.5, node_name="c1", selector=tier_a), pod("p2", cpu=1.5, node_name="c1", selector=tier_a),
        pod("p3", cpu=0.1, node_name="c1", selector={"tier": "none"}),  # fits nowhere: c1 stays
        # c2: as many pods as c1 and more utilised (by memory), so it is tried after c1
        pod("q", cpu=1.5, node_name="c2", selector=tier_a),
        pod("s1", cpu=0.1, mem=7, node_name="c2"), pod("s2", cpu=0.1, mem=7, node_name="c2"),
        *(pod(f"t{i}", cpu=0.1, node_name="c3") for i in range(4)),  # c3: more pods, tried last, tried first as a destination
    ]
    result = plan(snapshot(groups=groups, nodes=nodes, pods=pods), since={n.name: OLD for n in nodes})
    assert result.kept["c1"].code == reasons.NO_PLACE_TO_MOVE_PODS
    assert set(result.unneeded) == {"c2", "c3"}


# -- topology spread with removed nodes kept in the simulation, as cluster-autoscaler keeps them ------------------
# CA's RemovalSimulator takes a candidate's pods off its snapshot and keeps the node, tainted ToBeDeleted: under
# nodeTaintsPolicy's default (Ignore) its domain stays a domain at 0 ("phantom zone"), under Honor it is no domain.

ZONE_KEY = "topology.kubernetes.io/zone"
HONOR = {"node_taints_policy": "Honor"}


def _zoned(pods_per_zone: dict[str, int], **constraint: object) -> object:
    """One node per zone (na, nb, ...), each with its web replicas spread across zones (maxSkew 1 unless given)."""
    nodes = [node(f"n{z}", instance=i, zone=z) for i, z in enumerate(pods_per_zone)]
    pods = [pod(f"web-{z}{k}", cpu=0.2, node_name=f"n{z}", labels={"app": "web"}, owner_name="web",
                spread=(spread(ZONE_KEY, sel(app="web"), **constraint),))
            for z, count in pods_per_zone.items() for k in range(count)]
    return snapshot(groups=[group(target=len(nodes))], nodes=nodes, pods=pods)


@pytest.mark.parametrize("case_id,pods_per_zone,constraint,unneeded", [
    # The departing zone stays at 0, the minimum: its replica makes 2 anywhere else, a skew of 2.
    ("one replica a zone", {"a": 1, "b": 1, "c": 1}, {}, set()),
    # maxSkew 2 allows that once (na's replica to nc: 2 against 0); nb's would make 3 against 0.
    ("one replica a zone, maxSkew 2", {"a": 1, "b": 1, "c": 1}, {"max_skew": 2}, {"na"}),
    # An empty node is removable, and its zone, at 0, stays the minimum for the others.
    ("an empty zone holds the minimum", {"a": 1, "b": 1, "c": 0}, {}, {"nc"}),
    # Leaving the zone with the fewest replicas still leaves it at 0: 2 + 1 against 0.
    ("the departing zone held the minimum", {"a": 2, "b": 2, "c": 1}, {}, set()),
    # nodeTaintsPolicy Honor: the removed node's ToBeDeleted taint takes its zone out of the count.
    ("Honor: the departing zone goes with its node", {"a": 1, "b": 1, "c": 1}, HONOR, {"na", "nb"}),
    ("Honor: minDomains needs the departing zone", {"a": 1, "b": 1, "c": 1}, {**HONOR, "min_domains": 3}, set()),
    ("Honor: minDomains met without it", {"a": 1, "b": 1, "c": 1, "d": 1}, {**HONOR, "min_domains": 3}, {"na"}),
    ("Honor: an empty zone goes too", {"a": 1, "b": 1, "c": 0}, HONOR, {"nc", "na"}),
])
def test_spread_keeps_a_removed_node_as_cluster_autoscaler_does(case_id, pods_per_zone, constraint, unneeded) -> None:  # type: ignore[no-untyped-def]
    result = plan(_zoned(pods_per_zone, **constraint), options=replace(OPTS, max_parallelism=1))
    assert set(result.unneeded) == unneeded, (case_id, {k: str(v) for k, v in result.kept.items()})
    for name in {f"n{z}" for z in pods_per_zone} - unneeded:
        assert result.kept[name].code in (reasons.NO_PLACE_TO_MOVE_PODS, reasons.RECEIVES_MOVED_PODS), case_id


# CA's simulator/cluster_test.go TestSimulateNodeRemoval, "topology spread constraint test" rows: three nodes,
# one replica each spread by hostname (maxSkew 1, minDomains 2), bare blocker pods on topo-n2 and topo-n3.
@pytest.mark.parametrize("case_id,constraint,removable", [
    ("node unremovable due to phantom zone", {}, False),
    ("node removable with nodeTaintsPolicy Honor", HONOR, True),
])
def test_cluster_autoscalers_phantom_zone_cases(case_id: str, constraint: dict[str, object], removable: bool) -> None:
    host = "kubernetes.io/hostname"
    nodes = [node(f"topo-n{i}", instance=i) for i in (1, 2, 3)]
    tsc = spread(host, sel(app="topo-app"), min_domains=2, **constraint)
    pods = [pod(f"tsc-pod-n{i}", cpu=0.1, node_name=f"topo-n{i}", labels={"app": "topo-app"}, spread=(tsc,))
            for i in (1, 2, 3)]
    pods += [pod(f"blocker-n{i}", cpu=0.1, node_name=f"topo-n{i}", owner=None) for i in (2, 3)]
    result = plan(snapshot(groups=[group(target=3)], nodes=nodes, pods=pods))
    if removable:
        assert "topo-n1" in result.unneeded
    else:
        assert "topo-n1" not in result.unneeded
        assert result.kept["topo-n1"].code == reasons.NO_PLACE_TO_MOVE_PODS
    for blocked in ("topo-n2", "topo-n3"):
        assert result.kept[blocked].code == reasons.NOT_REPLICATED
