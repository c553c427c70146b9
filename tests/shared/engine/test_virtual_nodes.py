"""engine.virtual_nodes: what ACI runs, how full it is, which pods on it are VM demand, backfill selection and
pacing, the pays-off decision, the gate and the deletion cost."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import DisruptionBudget, Node, Pod, Taint, Toleration
from shared.engine.scale_up import ScaleUpOptions, simulate_scale_up
from shared.engine.virtual_nodes import (
    CLOSED_TAINT,
    DELETION_COST_ANNOTATION,
    DELETION_COST_OWNER_ANNOTATION,
    PROVIDER_FAILED,
    VIRTUAL_NODE_DELETION_COST,
    AciLimits,
    AciPrices,
    AciUsage,
    VirtualNodeOptions,
    aci_unsupported,
    aci_usage,
    decide,
    decide_gate,
    deletion_cost_changes,
    plan_virtual_nodes,
    planning_snapshot,
    select_backfill,
    vm_room,
)
from tests.builders import T0, group, node, pod, res, sel, snapshot

VN = "virtual-node-aci-linux"
VK_TAINT = Taint("virtual-kubelet.io/provider", "azure", "NoSchedule")
TOLERATES_VN = (Toleration("virtual-kubelet.io/provider", "Exists", effect="NoSchedule"),)


def virtual_node(name: str = VN, *, v2: bool = False, taints: tuple[Taint, ...] = (VK_TAINT,)) -> Node:
    labels = {"virtualization": "virtualnode2"} if v2 else {"type": "virtual-kubelet"}
    return Node(name, res(10_000, 4096, 5000), T0 - timedelta(days=1), "", labels={
        "kubernetes.io/hostname": name, "kubernetes.io/role": "agent", **labels}, taints=taints, ready=True)


def on_vn(name: str, *, cpu: float = 1, mem: float = 2, owner: str | None = "ReplicaSet", owner_name: str = "web",
          **changes: object) -> Pod:
    base = pod(name, cpu=cpu, mem=mem, node_name=VN, owner=owner, owner_name=owner_name, tolerations=TOLERATES_VN)
    return replace(base, **changes)  # type: ignore[arg-type]


def priced(*pods: Pod, price: float = 0.192, vm_nodes: list[Node] | None = None):  # type: ignore[no-untyped-def]
    snap = snapshot(nodes=[virtual_node(), *(vm_nodes or [])], pods=list(pods), groups=[group("pool", target=0)])
    return replace(snap, prices={"rg/pool": price})


# --- what ACI can run ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("features,v2,expected", [
    ((), False, None),
    (("volume:emptyDir:scratch", "volume:secret:token", "volume:configMap:conf", "volume:projected:sa"), False, None),
    (("host-network",), False, "ACI offers no host networking"),
    (("host-pid",), False, "ACI offers no the host PID namespace"),
    (("privileged",), False, "ACI runs no privileged containers"),
    (("volume:hostPath:data",), False, "ACI cannot mount hostPath volume 'data'"),
    (("volume:persistentVolumeClaim:db",), False, "ACI cannot mount persistentVolumeClaim volume 'db'"),
    (("volume:persistentVolumeClaim:db",), True, None),  # Virtual Nodes v2 mounts Azure Files claims
    (("init-containers",), False, "init containers need Virtual Nodes v2"),
    (("init-containers",), True, None),
])
def test_aci_refuses_what_the_facts_list(features: tuple[str, ...], v2: bool, expected: str | None) -> None:
    assert aci_unsupported(replace(pod("p"), runtime_features=features), v2=v2) == expected


@pytest.mark.parametrize("the_pod,expected", [
    (pod("ds", owner="DaemonSet"), "DaemonSet pods do not run on virtual nodes"),
    (pod("gpu", requests=res(4, 16, gpu=1)), "ACI offers no nvidia.com/gpu here"),
    (pod("huge", cpu=32, mem=64), "larger than one ACI container group (31 vCPU, 240 GB)"),
    (pod("biggest", cpu=31, mem=200), None),
])
def test_aci_refuses_daemonsets_gpus_and_oversized_groups(the_pod: Pod, expected: str | None) -> None:
    assert aci_unsupported(the_pod) == expected


# --- the pays-off decision, per pod ------------------------------------------------------------------------------

BATCH = VirtualNodeOptions(batch_selector=sel(workload="render"))


@pytest.mark.parametrize("the_pod,options,verdict,why", [
    (on_vn("web-1"), VirtualNodeOptions(), "backfill", "saves $"),
    (on_vn("job-1", owner="Job"), VirtualNodeOptions(), "stays", "batch work finishes where it started"),
    (on_vn("render-1", labels={"workload": "render"}), BATCH, "stays", "batch work"),
    (on_vn("bare", owner=None), VirtualNodeOptions(), "stays", "no controller"),
    (on_vn("pinned", node_selector={"type": "virtual-kubelet"}), VirtualNodeOptions(), "stays", "selects virtual nodes"),
    (on_vn("web-2"), VirtualNodeOptions(backfill=False), "stays", "VIRTUAL_NODE_BACKFILL=false"),
    (on_vn("web-3", namespace="team-a"), VirtualNodeOptions(backfill_namespaces=frozenset({"team-b"})), "stays",
     "namespace team-a"),
    (on_vn("web-4"), VirtualNodeOptions(backfill_selector=sel(move="yes")), "stays", "VIRTUAL_NODE_BACKFILL_SELECTOR"),
    (on_vn("web-5", labels={"move": "yes"}), VirtualNodeOptions(backfill_selector=sel(move="yes")), "backfill", ""),
    # Four minutes left of its deadline: a VM booting for minutes would not pay.
    (on_vn("deadline", active_deadline_seconds=300, started_at=T0 - timedelta(minutes=1)), VirtualNodeOptions(),
     "stays", "expected to finish within 4 min"),
    (on_vn("cheap-aci"), VirtualNodeOptions(prices=AciPrices(0.000001, 0.0000001)), "stays", "ACI is as cheap"),
    # Never moved: the cluster's own add-ons, refused by ACI or not, and a pod protected from scale-down.
    (on_vn("coredns", namespace="kube-system"), VirtualNodeOptions(), "stays", "kube-system pod is never moved"),
    (on_vn("dns-refused", namespace="kube-system", status_reason=PROVIDER_FAILED, phase="Pending"),
     VirtualNodeOptions(), "stays", "kube-system pod is never moved"),
    (on_vn("keep", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}), VirtualNodeOptions(),
     "stays", "protected from scale-down"),
    # Refused by ACI: demand whatever it is, Job pods included (it never runs there).
    (on_vn("refused", owner="Job", status_reason=PROVIDER_FAILED, phase="Pending", status_message="quota 'StandardCores'"),
     VirtualNodeOptions(), "failed", "ACI refused it (ProviderFailed: quota 'StandardCores')"),
])
def test_each_pod_on_a_virtual_node_gets_one_decision(the_pod: Pod, options: VirtualNodeOptions, verdict: str,
                                                     why: str) -> None:
    decision = decide(the_pod, priced(the_pod), options, now=T0)
    assert decision.verdict == verdict
    assert why in decision.why


def test_backfill_pays_by_the_pods_share_of_the_cheapest_vm() -> None:
    # 1 core, 2 GiB (ACI bills per GB of 10^9 bytes): 0.0486 + 2.147 x 0.0054 $/h; a quarter of a 0.192 $/h
    # 4-core VM is 0.048 $/h.
    decision = decide(on_vn("web-1"), priced(on_vn("web-1")), VirtualNodeOptions(), now=T0)
    assert decision.aci_per_hour == pytest.approx(0.0486 + 2 * 1024**3 / 10**9 * 0.0054)
    assert decision.vm_per_hour == pytest.approx(0.192 / 4)
    # At 0.30 $/h the same share costs 0.075 $/h: ACI is cheaper and the pod stays.
    assert decide(on_vn("web-1"), priced(on_vn("web-1"), price=0.30), VirtualNodeOptions(), now=T0).verdict == "stays"


# --- ACI's use and the gate -------------------------------------------------------------------------------------


def test_usage_counts_cores_held_and_recent_creations_but_not_refused_pods() -> None:
    pods = [on_vn("a", cpu=2, started_at=T0 - timedelta(minutes=2)),
            on_vn("b", cpu=1, started_at=T0 - timedelta(minutes=30)),
            on_vn("c", cpu=4, status_reason=PROVIDER_FAILED, phase="Pending"),
            pod("vm", cpu=8, node_name="vm-0")]
    usage = aci_usage(pods, {VN}, now=T0)
    assert (usage.pods, usage.cpu_milli, usage.failed) == (2, 3000, 1)
    assert usage.creates_5min == 2  # a (2 min ago) and c (created a minute ago, no start)
    assert usage.creates_hour == 3


OPEN = VirtualNodeOptions(admission="open")


@pytest.mark.parametrize("usage,closed,expect_closed,why", [
    (AciUsage(cpu_milli=50_000), False, False, "ACI has room"),
    (AciUsage(cpu_milli=90_000), False, True, "cores 90 of 100"),
    (AciUsage(cpu_milli=80_000, headed_milli=12_000), False, True, "+12 on the way"),
    (AciUsage(cpu_milli=80_000), True, True, "still busy"),  # between reopen (75%) and close (90%): stays closed
    (AciUsage(cpu_milli=70_000), True, False, "ACI has room"),
    (AciUsage(creates_5min=95), False, True, "95 container groups created in 5 min"),
    # Room again, but 20 cores of pods wait for it: lifting the taint would bind them all at once.
    (AciUsage(cpu_milli=60_000, waiting_milli=20_000, waiting_pods=20), True, True,
     "with the 20 pod(s) waiting for it, cores 60 (+20 on the way) of 100"),
    (AciUsage(cpu_milli=40_000, waiting_milli=20_000, waiting_pods=20), True, False,
     "room for the 20 pod(s) waiting for it"),
    # 80 container groups waiting would take the 5-minute creations to 90 of 100: each pod is one group.
    (AciUsage(creates_5min=10, waiting_milli=8_000, waiting_pods=80), True, True, "90 container groups created in 5 min"),
    (AciUsage(creates_hour=280), False, True, "280 created in an hour"),
])
def test_the_gate_closes_near_a_limit_and_reopens_well_below(usage: AciUsage, closed: bool, expect_closed: bool,
                                                            why: str) -> None:
    gate = decide_gate(usage, OPEN, closed=closed)
    assert gate.closed is expect_closed and why in gate.why


POLLED = VirtualNodeOptions(admission="polled")


@pytest.mark.parametrize("usage,closed,expect_closed,why", [
    (AciUsage(), True, True, "no pod waits for it"),  # closed between admissions
    (AciUsage(waiting_milli=30_000, waiting_pods=30), True, False, "room for the 30 pod(s) waiting for it"),
    (AciUsage(cpu_milli=70_000, waiting_milli=30_000, waiting_pods=30), True, True, "ACI still busy"),  # would not fit
    (AciUsage(cpu_milli=30_000), False, True, "admitted what waited; closed until more pods wait"),
    (AciUsage(creates_5min=95), False, True, "ACI nearly full"),
])
def test_polled_admission_opens_only_for_pods_that_wait_and_fit(usage: AciUsage, closed: bool, expect_closed: bool,
                                                               why: str) -> None:
    gate = decide_gate(usage, POLLED, closed=closed)
    assert gate.closed is expect_closed and why in gate.why


def test_gating_off_never_closes() -> None:
    assert not decide_gate(AciUsage(cpu_milli=100_000), VirtualNodeOptions(gate=False), closed=True).closed


def test_plan_sees_the_taint_already_on_the_node_for_hysteresis() -> None:
    tainted = replace(virtual_node(), taints=(VK_TAINT, CLOSED_TAINT))
    pods = [on_vn(f"w{i}", cpu=10, owner_name="big") for i in range(8)]  # 80 of 100 cores
    open_plan = plan_virtual_nodes(snapshot(nodes=[virtual_node()], pods=pods), OPEN, now=T0)
    held = plan_virtual_nodes(snapshot(nodes=[tainted], pods=pods), OPEN, now=T0)
    assert not open_plan.gate.closed and held.gate.closed


# --- demand hiding on virtual nodes is planned with the pending pods ----------------------------------------------


def test_pods_on_a_virtual_node_grow_the_scale_set_and_pending_pods_come_first() -> None:
    vm = node("pool-0")  # 4 cores, 16 GiB
    running = pod("resident", cpu=1, node_name="pool-0")
    pending = pod("waiting", cpu=2, pending=True)
    on_aci = [on_vn(f"web-{i}") for i in range(6)] + [on_vn("job-0", owner="Job")]
    snap = replace(snapshot(nodes=[vm, virtual_node()], pods=[running, pending, *on_aci], groups=[group("pool")]),
                   prices={"rg/pool": 0.192})
    plan = plan_virtual_nodes(snap, VirtualNodeOptions(), now=T0)
    planned, after = planning_snapshot(snap, plan)
    assert after == {f"default/web-{i}" for i in range(6)}  # the Job's pod finishes on ACI
    simulation = simulate_scale_up(planned, options=ScaleUpOptions(after=after))
    first_existing = next(s for s in simulation.steps if s.kind == "existing")
    assert first_existing.pod is not None and first_existing.pod.key == "default/waiting"
    (increase,) = simulation.plan.increases
    placed = {s.pod.key for s in simulation.steps if s.pod is not None}
    assert after <= placed and "default/job-0" not in placed
    assert increase.delta == 2  # 1 web pod fits the VM's last core; 5 need two 4-core nodes
    assert set(increase.pods) <= after


# --- backfill selection and pacing ------------------------------------------------------------------------------


def test_backfill_moves_only_placed_pods_at_the_pace_and_within_budgets() -> None:
    pods = [on_vn(f"web-{i}", labels={"app": "web"}) for i in range(5)]
    refused = on_vn("api-0", owner_name="api", status_reason=PROVIDER_FAILED, phase="Pending", labels={"app": "web"})
    snap = priced(*pods, refused)
    plan = plan_virtual_nodes(snap, VirtualNodeOptions(), now=T0)
    placements = {p.key: "pool-0" for p in (*pods[:4], refused)}  # web-4 found no VM room
    budget = DisruptionBudget("default", "web", sel(app="web"), disruptions_allowed=2)
    moves = select_backfill(plan, placements, [budget], VirtualNodeOptions(max_backfill_per_poll=10))
    moved = [m.pod.key for m in moves]
    assert moved[0] == "default/api-0"  # a refused pod first: it is not running anywhere
    assert len(moved) == 3  # and two of the running ones, as the budget allows
    assert "default/web-4" not in moved
    paced = select_backfill(plan, placements, [], VirtualNodeOptions(max_backfill_per_poll=2))
    assert len(paced) == 2
    again = select_backfill(plan, placements, [], VirtualNodeOptions(), in_flight={"default/api-0"})
    assert "default/api-0" not in [m.pod.key for m in again]


def test_a_budget_allowing_nothing_holds_every_running_pod() -> None:
    pods = [on_vn(f"web-{i}", labels={"app": "web"}) for i in range(3)]
    plan = plan_virtual_nodes(priced(*pods), VirtualNodeOptions(), now=T0)
    budget = DisruptionBudget("default", "web", sel(app="web"), disruptions_allowed=0)
    assert select_backfill(plan, {p.key: "pool-0" for p in pods}, [budget], VirtualNodeOptions()) == ()


# --- VM room at execution time ------------------------------------------------------------------------------------


def test_vm_room_is_the_schedulers_filters_on_ready_vm_nodes() -> None:
    moving = on_vn("web-0", cpu=2)
    full = node("pool-0")
    filler = pod("filler", cpu=3, node_name="pool-0")
    roomy = node("pool-1", instance=1)
    cordoned = node("pool-2", instance=2, cordoned=True)
    assert vm_room(moving, [virtual_node(), full, cordoned], [moving, filler]) is None
    assert vm_room(moving, [virtual_node(), full, roomy], [moving, filler]) == "pool-1"
    tainted = node("pool-3", instance=3, taints=(Taint("dedicated", "gpu", "NoSchedule"),))
    assert vm_room(moving, [tainted], [moving]) is None


# --- deletion cost ------------------------------------------------------------------------------------------------


def test_deletion_cost_marks_aci_pods_once_and_unmarks_pods_that_left() -> None:
    fresh = on_vn("web-0")
    user_cost = on_vn("web-1", annotations={DELETION_COST_ANNOTATION: "5"})
    marked = on_vn("web-2", annotations={DELETION_COST_ANNOTATION: VIRTUAL_NODE_DELETION_COST,
                                         DELETION_COST_OWNER_ANNOTATION: "virtual-node"})
    moved = replace(marked, name="web-3", node_name="pool-0")
    users_own_on_vm = replace(user_cost, name="web-4", node_name="pool-0")
    bare = on_vn("bare", owner=None)
    changes = deletion_cost_changes([fresh, user_cost, marked, moved, users_own_on_vm, bare], {VN})
    assert {key: cost for key, (_, cost) in changes.items()} == {
        "default/web-0": VIRTUAL_NODE_DELETION_COST, "default/web-3": None}
    assert int(VIRTUAL_NODE_DELETION_COST) < 0  # below a VM pod's default 0


def test_no_virtual_node_means_no_plan() -> None:
    plan = plan_virtual_nodes(snapshot(nodes=[node("pool-0")], pods=[pod("a", node_name="pool-0")]),
                              VirtualNodeOptions(), now=T0)
    assert plan.nodes == () and plan.demand == ()


def test_limits_default_to_acis_documented_quota() -> None:
    assert AciLimits() == AciLimits(cores=100, creates_per_5min=100, creates_per_hour=300, container_groups=100)


# --- container groups that may exist at once: one per pod, whatever its size -----------------------------------

# Room to spare on every other limit, so only the container groups can close the gate.
GROUPS_ONLY = AciLimits(cores=1000, creates_per_5min=1000, creates_per_hour=3000, container_groups=100)


@pytest.mark.parametrize("usage,closed,expect_closed", [
    (AciUsage(pods=89, cpu_milli=8_900), False, False),
    (AciUsage(pods=90, cpu_milli=9_000), False, True),  # 90 groups of 100, 9 cores of 1,000
    (AciUsage(pods=80, cpu_milli=8_000, headed_milli=1_000, headed_pods=10), False, True),  # 10 on their way
    (AciUsage(pods=80, cpu_milli=8_000), True, True),  # between reopen (75%) and close (90%): stays closed
    (AciUsage(pods=74, cpu_milli=7_400), True, False),
    # Room again, but 10 pods wait for it: lifting the taint would bind them all at once, each one more group.
    (AciUsage(pods=70, cpu_milli=7_000, waiting_milli=1_000, waiting_pods=10), True, True),
    (AciUsage(pods=60, cpu_milli=6_000, waiting_milli=1_000, waiting_pods=10), True, False),
])
def test_the_gate_counts_container_groups_in_use_against_their_limit(usage: AciUsage, closed: bool,
                                                                     expect_closed: bool) -> None:
    gate = decide_gate(usage, VirtualNodeOptions(limits=GROUPS_ONLY, admission="open"), closed=closed)
    assert (usage.cpu_milli + usage.headed_milli + usage.waiting_milli) / 1000 < 0.1 * GROUPS_ONLY.cores
    assert gate.closed is expect_closed, gate.why
    if expect_closed:  # closed for the groups, and saying so
        assert gate.full and "container groups" in gate.why and "of the 100 that may exist" in gate.why, gate.why


@pytest.mark.parametrize("usage,expect_closed", [
    (AciUsage(pods=60, cpu_milli=6_000, waiting_milli=2_900, waiting_pods=29), False),  # 89 of 100: admitted
    (AciUsage(pods=60, cpu_milli=6_000, waiting_milli=3_000, waiting_pods=30), True),  # 90 of 100: they wait
])
def test_polled_admission_admits_only_the_pods_whose_groups_fit(usage: AciUsage, expect_closed: bool) -> None:
    gate = decide_gate(usage, VirtualNodeOptions(limits=GROUPS_ONLY, admission="polled"), closed=True)
    assert gate.closed is expect_closed and "container groups 60 (+" in gate.why, gate.why


def test_the_same_pods_close_the_gate_only_when_groups_are_limited() -> None:
    usage = AciUsage(pods=95, cpu_milli=9_500)
    limited = decide_gate(usage, VirtualNodeOptions(limits=GROUPS_ONLY, admission="open"), closed=False)
    ample = replace(GROUPS_ONLY, container_groups=1000)
    unlimited = decide_gate(usage, VirtualNodeOptions(limits=ample, admission="open"), closed=False)
    assert limited.closed and "container groups 95 of the 100" in limited.why
    assert not unlimited.closed


def test_no_container_groups_allowed_keeps_the_virtual_node_closed() -> None:
    gate = decide_gate(AciUsage(), VirtualNodeOptions(limits=replace(GROUPS_ONLY, container_groups=0),
                                                      admission="open"), closed=False)
    assert gate.closed and "of the 0 that may exist" in gate.why


def test_plan_counts_pods_on_and_headed_for_the_virtual_node_as_container_groups() -> None:
    small = [on_vn(f"s{i}", cpu=0.1, owner_name="small") for i in range(80)]
    headed = [pod(f"n{i}", cpu=0.1, tolerations=TOLERATES_VN) for i in range(10)]  # not yet tried by the scheduler
    refused = [on_vn(f"r{i}", cpu=0.1, status_reason=PROVIDER_FAILED, phase="Pending") for i in range(5)]
    options = VirtualNodeOptions(limits=GROUPS_ONLY, admission="open")
    plan = plan_virtual_nodes(snapshot(nodes=[virtual_node()], pods=small + headed + refused), options, now=T0)
    assert (plan.usage.pods, plan.usage.headed_pods) == (80, 10)  # refused pods hold no group
    assert plan.gate.closed and "container groups 80 (+10 on the way) of the 100" in plan.gate.why
    fewer = plan_virtual_nodes(snapshot(nodes=[virtual_node()], pods=small + headed[:9] + refused), options, now=T0)
    assert not fewer.gate.closed, fewer.gate.why


def test_creations_come_from_virtual_kubelets_events_when_the_pods_are_gone() -> None:
    # 90 short pods started and finished between two polls: only their ProviderCreateSuccess events remain.
    events = [(T0 - timedelta(minutes=2), 60), (T0 - timedelta(minutes=4), 30), (T0 - timedelta(minutes=50), 100)]
    usage = aci_usage([on_vn("a", started_at=T0 - timedelta(minutes=1))], {VN}, now=T0, creations=events)
    assert (usage.creates_5min, usage.creates_hour) == (90, 190)
    assert decide_gate(usage, VirtualNodeOptions(), closed=False).closed  # 90 of 100 per 5 min: close


def test_pods_a_closed_virtual_node_admits_now_are_not_vm_demand_if_they_would_stay_there() -> None:
    closed_vn = replace(virtual_node(), taints=(VK_TAINT, CLOSED_TAINT))
    job = replace(pod("render-0", pending=True, owner="Job"), tolerations=TOLERATES_VN)
    web = replace(pod("web-0", pending=True, owner_name="web"), tolerations=TOLERATES_VN)
    snap = replace(snapshot(nodes=[closed_vn], pods=[job, web], groups=[group("pool", target=0)]),
                   prices={"rg/pool": 0.192})
    plan = plan_virtual_nodes(snap, VirtualNodeOptions(admission="polled"), now=T0)
    assert not plan.gate.closed and plan.admitted == {"default/render-0"}  # the Job's pod would finish on ACI
    planned, _ = planning_snapshot(snap, plan)
    simulation = simulate_scale_up(planned)
    (increase,) = simulation.plan.increases
    assert increase.pods == ("default/web-0",)  # a Deployment's pod is still worth a VM: it would move back
