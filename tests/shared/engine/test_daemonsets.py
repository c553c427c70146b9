"""Which DaemonSets a group's new node would run, and what that leaves for pending pods."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.domain import DaemonSet, HostPort, NodeSelectorTerm, Taint, Toleration
from shared.engine.daemonsets import (
    daemonsets_seen_by_group,
    host_ports,
    observed_daemonset_pods,
    overhead,
    runs_on,
    template_daemonsets,
    unpredicted_daemonsets,
)
from shared.engine.scale_up import plan_scale_up
from tests.builders import daemon_pod, group, node, pod, req, res, snapshot, template, term

BIG = {"pool": "big", "kubernetes.io/os": "linux"}
SMALL = {"pool": "small", "kubernetes.io/os": "linux"}
GPU = Taint("gpu", "true", "NoSchedule")


def ds(name: str = "agent", *, cpu: float = 1, mem: float = 1, selector: dict[str, str] | None = None,
       affinity: tuple[NodeSelectorTerm, ...] = (), tolerations: tuple[Toleration, ...] = (),
       ports: tuple[HostPort, ...] = (), host_network: bool = False, namespace: str = "kube-system") -> DaemonSet:
    return DaemonSet(namespace, name, res(cpu, mem, 1), node_selector=selector or {}, node_affinity=affinity,
                     tolerations=tolerations, host_ports=ports, host_network=host_network)


# (case, DaemonSet, node labels, node taints, runs there)
RUNS_ON_CASES = [
    ("no constraints", ds(), SMALL, (), True),
    ("nodeSelector matches", ds(selector={"pool": "big"}), BIG, (), True),
    ("nodeSelector differs", ds(selector={"pool": "big"}), SMALL, (), False),
    ("nodeSelector label missing", ds(selector={"gpu": "true"}), BIG, (), False),
    ("affinity In", ds(affinity=(term(req("pool", "In", "big")),)), BIG, (), True),
    ("affinity In, other pool", ds(affinity=(term(req("pool", "In", "big")),)), SMALL, (), False),
    ("affinity NotIn", ds(affinity=(term(req("pool", "NotIn", "big")),)), SMALL, (), True),
    ("affinity DoesNotExist", ds(affinity=(term(req("gpu", "DoesNotExist")),)), BIG, (), True),
    ("affinity terms are ORed", ds(affinity=(term(req("pool", "In", "x")), term(req("pool", "In", "big")))), BIG, (),
     True),
    ("selector and affinity both needed", ds(selector={"pool": "big"}, affinity=(term(req("pool", "In", "small")),)),
     BIG, (), False),
    ("untolerated NoSchedule taint", ds(), BIG, (GPU,), False),
    ("untolerated NoExecute taint", ds(), BIG, (Taint("dedicated", "x", "NoExecute"),), False),
    ("PreferNoSchedule never keeps it off", ds(), BIG, (Taint("soft", "", "PreferNoSchedule"),), True),
    ("tolerated by key", ds(tolerations=(Toleration("gpu", "Exists"),)), BIG, (GPU,), True),
    ("tolerated by value", ds(tolerations=(Toleration("gpu", "Equal", "true", "NoSchedule"),)), BIG, (GPU,), True),
    ("wrong value", ds(tolerations=(Toleration("gpu", "Equal", "false"),)), BIG, (GPU,), False),
    ("wrong effect", ds(tolerations=(Toleration("gpu", "Exists", "", "NoExecute"),)), BIG, (GPU,), False),
    ("tolerates everything", ds(tolerations=(Toleration(operator="Exists"),)), BIG, (GPU,), True),
    # The controller's automatic tolerations (pkg/controller/daemon/util).
    ("auto: not-ready NoExecute", ds(), BIG, (Taint("node.kubernetes.io/not-ready", "", "NoExecute"),), True),
    ("auto: unreachable NoExecute", ds(), BIG, (Taint("node.kubernetes.io/unreachable", "", "NoExecute"),), True),
    ("auto: disk-pressure", ds(), BIG, (Taint("node.kubernetes.io/disk-pressure", "", "NoSchedule"),), True),
    ("auto: memory-pressure", ds(), BIG, (Taint("node.kubernetes.io/memory-pressure", "", "NoSchedule"),), True),
    ("auto: pid-pressure", ds(), BIG, (Taint("node.kubernetes.io/pid-pressure", "", "NoSchedule"),), True),
    ("auto: unschedulable", ds(), BIG, (Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"),), True),
    ("auto: not-ready NoSchedule is not covered", ds(), BIG,
     (Taint("node.kubernetes.io/not-ready", "", "NoSchedule"),), False),
    ("auto: network-unavailable only with hostNetwork", ds(), BIG,
     (Taint("node.kubernetes.io/network-unavailable", "", "NoSchedule"),), False),
    ("auto: network-unavailable with hostNetwork", ds(host_network=True), BIG,
     (Taint("node.kubernetes.io/network-unavailable", "", "NoSchedule"),), True),
]


@pytest.mark.parametrize(("daemonset", "labels", "taints", "expected"), [c[1:] for c in RUNS_ON_CASES],
                         ids=[c[0] for c in RUNS_ON_CASES])
def test_a_daemonset_runs_where_its_controller_would_put_it(daemonset, labels, taints, expected) -> None:
    assert runs_on(daemonset, labels, taints) is expected


def test_only_the_daemonsets_of_a_template_count_each_once() -> None:
    proxy = ds("kube-proxy", cpu=0.1, mem=0.125, tolerations=(Toleration(operator="Exists"),))
    big_agent = ds("big-agent", cpu=2, mem=4, affinity=(term(req("pool", "In", "big")),),
                   tolerations=(Toleration("gpu", "Exists"),), ports=(HostPort(9100),))
    small_only = ds("small-only", selector={"pool": "small"})
    listed = [proxy, big_agent, small_only]
    # A live small node runs kube-proxy: observed and listed, counted once.
    observed = [daemon_pod("small-0", cpu=0.1, mem=0.125, ds="kube-proxy")]
    on_big = template_daemonsets(listed, observed, BIG, (GPU,))
    assert {d.name for d in on_big} == {"kube-proxy", "big-agent"}
    assert overhead(on_big) == res(2.1, 4.125, 2)
    assert host_ports(on_big) == (HostPort(9100),)
    on_small = template_daemonsets(listed, observed, SMALL, ())
    assert {d.name for d in on_small} == {"kube-proxy", "small-only"}
    assert overhead(on_small) == res(1.1, 1.125, 2)


def test_one_observed_pod_per_daemonset_answers_as_every_pod_does() -> None:
    """What scale-up passes for each group: the cluster's pods walked once, the same DaemonSets found."""
    listed = [ds("kube-proxy", tolerations=(Toleration(operator="Exists"),)), ds("agent", selector={"pool": "big"})]
    pods = [daemon_pod(f"n{i}", ds=name) for i in range(3) for name in ("kube-proxy", "agent", "logs")]
    pods += [pod(f"web-{i}", node_name="n0") for i in range(3)]
    one_each = list(observed_daemonset_pods(pods).values())
    assert sorted(p.owner.name for p in one_each if p.owner) == ["agent", "kube-proxy", "logs"]
    for labels, taints in ((BIG, (GPU,)), (SMALL, ()), (BIG, ())):
        for seen in ((), {("kube-system", "agent")}):
            assert template_daemonsets(listed, one_each, labels, taints, seen_on_group=seen) == \
                template_daemonsets(listed, pods, labels, taints, seen_on_group=seen)


def test_observed_pods_stand_for_daemonsets_not_listed_and_cross_check_listed_ones() -> None:
    # Not listed (created since, or a port that lists none): its pod's selector decides.
    unlisted = replace(daemon_pod("small-0", ds="logs"), node_selector={"pool": "small"})
    assert [d.name for d in template_daemonsets([], [unlisted], SMALL, ())] == ["logs"]
    assert template_daemonsets([], [unlisted], BIG, ()) == []
    # Listed but predicted elsewhere, yet running on this group's nodes: counted there, and reported.
    agent = ds("agent", selector={"pool": "big"})
    seen = {("kube-system", "agent")}
    running = [daemon_pod("small-0", ds="agent")]
    assert [d.name for d in template_daemonsets([agent], running, SMALL, (), seen_on_group=seen)] == ["agent"]
    assert unpredicted_daemonsets([agent], SMALL, (), seen) == ["kube-system/agent"]
    # Running on another group's nodes says nothing of this one.
    assert template_daemonsets([agent], running, SMALL, (), seen_on_group=()) == []
    assert unpredicted_daemonsets([agent], BIG, (), seen) == []


def test_without_a_listing_the_observed_daemonset_pods_decide() -> None:
    pods = [
        daemon_pod("n0", cpu=0.1, mem=0.125, ds="kube-proxy"),
        daemon_pod("n1", cpu=0.1, mem=0.125, ds="kube-proxy"),  # the same DaemonSet, counted once
        pod("gpu-plugin", cpu=0.2, mem=0.25, node_name="n0", owner="DaemonSet", owner_name="nvidia",
            selector={"kubernetes.azure.com/accelerator": "nvidia"},
            tolerations=(Toleration("nvidia.com/gpu", "Exists"),)),
        pod("exporter", cpu=0.05, mem=0.0625, node_name="n0", owner="DaemonSet", owner_name="exporter",
            ports=(HostPort(9100),)),
        pod("web", cpu=2, node_name="n0"),  # not a DaemonSet
    ]
    plain = {"kubernetes.io/os": "linux"}
    gpu = {**plain, "kubernetes.azure.com/accelerator": "nvidia"}
    gpu_taint = (Taint("nvidia.com/gpu", "true"),)
    assert overhead(template_daemonsets([], pods, plain, ())) == res(0.15, 0.1875, 2)
    assert overhead(template_daemonsets([], pods, gpu, ())) == res(0.35, 0.4375, 3)
    # The taint keeps out every DaemonSet that does not tolerate it.
    assert overhead(template_daemonsets([], pods, gpu, gpu_taint)) == res(0.2, 0.25, 1)
    assert host_ports(template_daemonsets([], pods, plain, ())) == (HostPort(9100),)


def test_daemonsets_seen_by_group_come_from_the_pods_on_each_groups_nodes() -> None:
    nodes = [node("a-0", group_name="a"), node("b-0", group_name="b")]
    pods = [daemon_pod("a-0", ds="x"), daemon_pod("b-0", ds="y"), pod("w", node_name="a-0")]
    seen = daemonsets_seen_by_group(nodes, pods)
    assert {gid.rsplit("/", 1)[-1]: keys for gid, keys in seen.items()} == {
        "a": frozenset({("kube-system", "x")}),
        "b": frozenset({("kube-system", "y")}),
    }


# --- scale-up with the overhead: a group at zero, a DaemonSet that selects one pool only ----------------


def _two_pools(pending_cpu: float, daemonsets: tuple[DaemonSet, ...]):
    small, big = group("small", target=1), group("big", target=0, max_size=5)
    snap = snapshot(
        nodes=[node("small-0", group_name="small", alloc=res(4, 16, 110), labels=SMALL)],
        pods=[pod("p", cpu=pending_cpu, mem=1, pending=True)],
        groups=[small, big],
        templates={small.id: template(res(4, 16, 110), labels=SMALL), big.id: template(res(16, 64, 110), labels=BIG)},
    )
    return replace(snap, daemonsets=daemonsets), small, big


BIG_AGENT = ds("big-agent", cpu=4, mem=2, selector={"pool": "big"})


@pytest.mark.parametrize(
    ("pending_cpu", "grows"),
    [
        (12, "big"),  # exactly what is left of 16 cores after the 4-core DaemonSet
        (12.001, None),  # a millicore more: fits nowhere
    ],
)
def test_a_group_at_zero_is_sized_with_the_daemonsets_that_select_it(pending_cpu: float, grows: str | None) -> None:
    snap, small, big = _two_pools(pending_cpu, (BIG_AGENT,))
    plan = plan_scale_up(snap)
    assert {inc.group_id for inc in plan.increases} == ({big.id} if grows == "big" else set())
    assert ("default/p" in plan.unplaceable) is (grows is None)


def test_a_daemonset_of_one_pool_takes_nothing_from_the_other() -> None:
    # 3.9 cores fit a small node only if the big pool's DaemonSet is left off it.
    snap, small, big = _two_pools(3.9, (BIG_AGENT,))
    snap = replace(snap, nodes=(), groups=(replace(snap.groups[0], capacity=0, instances=()), snap.groups[1]))
    plan = plan_scale_up(snap)
    assert plan.increases and not plan.unplaceable


def test_a_daemonset_whose_pods_have_not_started_yet_is_counted() -> None:
    snap, small, big = _two_pools(12.5, (BIG_AGENT,))
    plan = plan_scale_up(snap)
    assert not plan.increases and "default/p" in plan.unplaceable
    # Without the listing (no objects, no pods seen) the old view would have grown the big pool.
    assert {i.group_id for i in plan_scale_up(replace(snap, daemonsets=())).increases} == {big.id}
