"""Properties of the scale-up plan over generated clusters (hypothesis).

(a) a plan never takes a group beyond its max size, nor adds more than MAX_NODES_PER_SCALE_UP to one;
(b) every placement the plan makes, replayed in order on the observed cluster, passes every
    scheduler filter (`predicates.check`) against the placement state at that moment;
(c) adding capacity (a larger max, or an extra Ready node with free space) never leaves more pods pending.

(c) does not hold for every cluster, and the scheduler would not satisfy it either: with pod
affinity or topology spread, capacity changes where pods go (see MONOTONE_KINDS), and with
several groups an extra node can change which group least-waste picks, after which first-fit
decreasing may pack worse (an extra node absorbs a pod, and the rest no longer fits the
room that is left). The extra-node property is therefore checked on one group at a time;
20,000 random examples of each restricted property found no counterexample.

Clusters are small (a few groups, nodes and controllers) and the runs derandomized, so the
whole module stays within a few seconds.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shared.domain import ClusterSnapshot, HostPort, Taint, Toleration
from shared.engine.limits import ClusterLimits, cluster_totals, node_cores
from shared.engine.predicates import check, pod_requests
from shared.engine.scale_up import ScaleUpOptions, initial_state, plan_scale_up, simulate_scale_up
from tests.builders import affinity, group, node, pod, res, sel, snapshot, spread, template

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
GPU_TAINT = Taint("nvidia.com/gpu", "true")

PROPERTY_SETTINGS = settings(
    max_examples=150, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


ALL_KINDS = ("plain", "gpu", "selector", "anti", "spread", "port", "affinity")
# Pod affinity and topology spread make placements interact: a pod on new capacity can pull
# its affine peers into a zone that is full, and a new node is also a new spread domain that
# can hold the minimum down. The scheduler then places fewer pods, and so does the plan, so
# "more capacity never hurts" is only a property of the other constraints.
MONOTONE_KINDS = ("plain", "gpu", "selector", "anti", "port")


@st.composite
def clusters(draw: st.DrawFn, kinds: tuple[str, ...] = ALL_KINDS, max_groups: int = 3) -> ClusterSnapshot:
    groups, templates, nodes, pods = [], {}, [], []
    # Often one shape for every group, as with one scale set per zone: what balancing splits over.
    twins = draw(st.booleans())
    shape: tuple[bool, float, float] | None = None
    for g in range(draw(st.integers(1, max_groups))):
        name = f"g{g}"
        zone = str(g % 3 + 1)
        if shape is None or not twins:
            shape = (draw(st.booleans()), draw(st.sampled_from((2, 4, 8))), draw(st.sampled_from((8, 16, 32))))
        gpu, cpu, mem = shape
        target = draw(st.integers(0, 2))
        groups.append(group(name, target=target, max_size=target + draw(st.integers(0, 4)), zones=(zone,)))
        labels = {"pool": name, ZONE: f"westeurope-{zone}"}
        alloc = res(cpu, mem, 110, gpu=2 if gpu else 0)
        templates[f"rg/{name}"] = template(alloc, labels=labels, taints=(GPU_TAINT,) if gpu else ())
        for i in range(draw(st.integers(0, target))):  # some of the target is Ready, the rest is on its way
            node_name = f"{name}-n{i}"
            nodes.append(node(node_name, group_name=name, instance=i, alloc=alloc, labels=labels,
                              taints=(GPU_TAINT,) if gpu else ()))
            used = draw(st.sampled_from((0.0, 0.5, 1.0)))
            if used:
                pods.append(pod(f"busy-{node_name}", node_name=node_name, cpu=alloc.cpu_milli / 1000 * used,
                                mem=1, labels={"app": draw(st.sampled_from(("c0", "c1", "db")))}))
    for c in range(draw(st.integers(1, 4))):
        app = f"c{c}"
        kind = draw(st.sampled_from(kinds))
        kw: dict[str, object] = {"labels": {"app": app}, "cpu": draw(st.sampled_from((0.25, 1, 2, 3))),
                                 "mem": draw(st.sampled_from((0.5, 2, 6)))}
        if kind == "gpu":
            kw["requests"] = res(1, 2, gpu=1)
            kw["tolerations"] = (Toleration("nvidia.com/gpu", "Exists"),)
        elif kind == "selector":
            kw["selector"] = {"pool": f"g{draw(st.integers(0, 2))}"}
        elif kind == "anti":
            kw["anti_affinity"] = (affinity(draw(st.sampled_from((HOST, ZONE))), sel(app=app)),)
        elif kind == "spread":
            kw["spread"] = (spread(draw(st.sampled_from((HOST, ZONE))), sel(app=app), draw(st.integers(1, 2))),)
        elif kind == "port":
            kw["ports"] = (HostPort(8080),)
        elif kind == "affinity":
            kw["pod_affinity"] = (affinity(ZONE, sel(app=draw(st.sampled_from(("c0", "db"))))),)
        for r in range(draw(st.integers(1, 6))):
            pods.append(pod(f"{app}-{r}", pending=True, owner_name=app, **kw))  # type: ignore[arg-type]
    return snapshot(groups=groups, templates=templates, nodes=nodes, pods=pods)


def pending_left(snap: ClusterSnapshot, options: ScaleUpOptions = ScaleUpOptions()) -> int:
    return len(plan_scale_up(snap, options=options).unplaceable)


@PROPERTY_SETTINGS
@given(clusters(), st.integers(1, 3), st.booleans())
def test_a_plan_never_exceeds_a_groups_max_nor_the_per_scale_up_limit(
    snap: ClusterSnapshot, per_scale_up: int, balance: bool
) -> None:
    plan = plan_scale_up(snap, options=ScaleUpOptions(max_nodes_per_scale_up=per_scale_up, balance_similar=balance,
        balancing_ignored_labels=("pool",)))
    groups = {g.id: g for g in snap.groups}
    for increase in plan.increases:
        assert increase.new_target <= groups[increase.group_id].max_size
        assert 0 < increase.delta <= per_scale_up
    placed = [*plan.absorbed, *(p for i in plan.increases for p in i.pods)]
    assert len(placed) == len(set(placed))  # no pod is asked for twice
    assert not set(placed) & set(plan.unplaceable)


@PROPERTY_SETTINGS
@given(clusters(), st.booleans())
def test_every_placement_passes_every_filter_when_replayed(snap: ClusterSnapshot, balance: bool) -> None:
    simulation = simulate_scale_up(snap, options=ScaleUpOptions(balance_similar=balance,
        balancing_ignored_labels=("pool",)))
    state = initial_state(snap)
    for step in simulation.steps:
        if step.pod is None:
            state.add_node(step.node)
            continue
        reason = check(step.pod, state.node(step.node.name), state)
        assert reason is None, f"{step.pod.key} on {step.node.name} ({step.kind}): {reason}"
        state.place(step.pod, step.node.name, pod_requests(step.pod))
    new_nodes = {s.node.name for s in simulation.steps if s.kind == "new" and s.pod is None}
    assert len(new_nodes) == sum(i.delta for i in simulation.plan.increases)


@PROPERTY_SETTINGS
@given(clusters(MONOTONE_KINDS), st.integers(1, 4))
def test_a_larger_max_never_leaves_more_pods_pending(snap: ClusterSnapshot, more: int) -> None:
    bigger = replace(snap, groups=tuple(replace(g, max_size=g.max_size + more) for g in snap.groups))
    assert pending_left(bigger) <= pending_left(snap)


@PROPERTY_SETTINGS
@given(clusters(MONOTONE_KINDS, max_groups=1), st.integers(0, 2))
def test_an_extra_ready_node_never_leaves_more_pods_pending(snap: ClusterSnapshot, which: int) -> None:
    # A node no pending pod tolerates is no capacity; capacity here is a node like an untainted group's.
    untainted = [g for g in snap.groups if not snap.templates[g.id].taints]
    assume(untainted)
    host = untainted[which % len(untainted)]
    tmpl = snap.templates[host.id]
    extra = node("extra", group_name=host.name, instance=99, alloc=tmpl.allocatable,
                 labels={k: v for k, v in tmpl.labels.items() if k != HOST}, taints=tmpl.taints)
    # The extra node is Ready and registered: the group's target counts it, so nothing else changes.
    grown = replace(host, capacity=host.capacity + 1, max_size=host.max_size + 1)
    with_extra = replace(snap, nodes=(*snap.nodes, extra),
                         groups=tuple(grown if g.id == host.id else g for g in snap.groups))
    assert pending_left(with_extra) <= pending_left(snap)


@PROPERTY_SETTINGS
@given(clusters())
def test_reusing_estimates_between_rounds_never_changes_the_plan(snap: ClusterSnapshot) -> None:
    reused = plan_scale_up(snap)
    fresh = plan_scale_up(snap, options=ScaleUpOptions(reuse_estimates=False))
    assert reused == fresh


@PROPERTY_SETTINGS
@given(clusters(), st.integers(0, 12), st.integers(0, 48), st.booleans())
def test_a_plan_never_passes_a_cluster_limit(snap: ClusterSnapshot, max_nodes: int, max_cores: int,
                                             balance: bool) -> None:
    limits = ClusterLimits(max_nodes_total=max_nodes, cores_total=(0, max_cores))
    plan = plan_scale_up(snap, options=ScaleUpOptions(limits=limits, balance_similar=balance,
        balancing_ignored_labels=("pool",)))
    before = cluster_totals(snap)
    templates = snap.templates
    added_nodes = sum(i.delta for i in plan.increases)
    added_cores = sum(i.delta * node_cores(templates[i.group_id].allocatable) for i in plan.increases)
    if added_nodes:
        if max_nodes:
            assert before.nodes + added_nodes <= max_nodes
        if max_cores:
            assert before.cores + added_cores <= max_cores
