"""The `nap` policy: Karpenter's batching, price-ordered sizes, consolidation, budgets and do-not-disrupt."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import pytest

from devtools.replay.disruptions import disruptions_section
from devtools.replay.harness import DAEMONSET_CPU_MILLI, Replay, ReplayConfig, build_world, pool_of
from devtools.replay.policies.nap import DO_NOT_DISRUPT, NapSettings, NodeAutoProvisioning
from devtools.replay.pools import NAP_GENERAL, POOL_SETS, nap_pools
from devtools.replay.run import replay
from devtools.replay.traces import Trace, TracePod

GIB = 1 << 30
# Every boot takes 100 s, so pods started together end together.
FIXED_BOOT = ReplayConfig(pools=POOL_SETS["alibaba2018"], boot_median_s=100.0, boot_p95_s=100.001, tail_s=900.0)


def trace(*pods: TracePod) -> Trace:
    return Trace("tiny", "<test>", tuple(sorted(pods, key=lambda p: (p.at, p.job))), "hand-made")


def pod(at: float, duration: float, cpu: int, memory_gib: float = 1, *, job: str = "") -> TracePod:
    return TracePod(at=at, duration=duration, cpu_milli=cpu, memory_bytes=round(memory_gib * 1024) << 20, job=job)


class Driver:
    """A nap run on NAP's sizes, advanced by hand so a test can look in between."""

    def __init__(self, pods: tuple[TracePod, ...], settings: Mapping[str, str] = {}) -> None:
        self.trace = trace(*pods)
        self.config = ReplayConfig(pools=nap_pools(FIXED_BOOT.pools), boot_median_s=FIXED_BOOT.boot_median_s,
                                   boot_p95_s=FIXED_BOOT.boot_p95_s, tail_s=FIXED_BOOT.tail_s)
        self.world = build_world(self.trace, self.config)
        self.run = Replay(self.world, self.config)
        self.policy = NodeAutoProvisioning(self.run, settings=settings, arrivals=[p.at for p in self.trace.pods])
        self.max_deleting = 0

    def until(self, seconds: float) -> None:
        end = min(self.world.start + timedelta(seconds=seconds), self.world.end)
        while self.world.now < end:
            wakeup = self.policy.next_wakeup(self.world.now)
            if wakeup > end:
                self.world.advance(end)
                break
            self.world.advance(wakeup)
            self.policy.wake(self.world.now)
            self.max_deleting = max(self.max_deleting, len(self.policy._deleting))

    def sizes(self) -> dict[str, int]:
        """Instances per scale set (booting ones included)."""
        return {g.name: g.capacity for g in self.run.compute.list_node_groups() if g.capacity}

    def node_of(self, job: str) -> str | None:
        return next((p.node_name for p in self.run.cluster.list_pods() if p.name.startswith(f"job-{job}")), None)


@pytest.mark.parametrize(("cpus", "expected"), [
    ((1000,), "nap-d2s-v5"),
    ((3000, 3000, 3000), "nap-d16s-v5"),
    ((20_000,), "nap-d32s-v5"),
    ((30_000, 30_000), "nap-d64s-v5"),
])
def test_a_batch_goes_onto_the_cheapest_size_that_holds_it(cpus: tuple[int, ...], expected: str) -> None:
    run = Driver(tuple(pod(0, 3000, c, job=f"j{i}") for i, c in enumerate(cpus)))
    run.until(5)
    assert run.sizes() == {expected: 1}
    total = sum(cpus) + DAEMONSET_CPU_MILLI
    chosen = next(p for p in NAP_GENERAL if p.name == expected)
    assert all(p.price_per_hour >= chosen.price_per_hour for p in NAP_GENERAL if p.cpu_milli >= total)


def test_pods_arriving_within_the_batching_window_are_one_decision() -> None:
    together = Driver((pod(0, 3000, 5000, job="a"), pod(0.5, 3000, 5000, job="b"), pod(1.2, 3000, 5000, job="c")))
    together.until(30)
    assert together.sizes() == {"nap-d16s-v5": 1}  # 15 CPUs in one batch: one node
    apart = Driver((pod(0, 3000, 5000, job="a"), pod(5, 3000, 5000, job="b"), pod(20, 3000, 5000, job="c")))
    apart.until(30)
    assert apart.sizes() == {"nap-d8s-v5": 3}  # three batches: one node each, none fits beside another's pod


@pytest.mark.parametrize("after", ["0s", "2m", "5m"])
def test_an_empty_node_goes_after_consolidate_after_and_not_before(after: str) -> None:
    settings = {"NAP_CONSOLIDATE_AFTER": after}
    wait = NapSettings.of(settings).consolidate_after.total_seconds()  # type: ignore[union-attr]
    first = Driver((pod(0, 300, 1000, job="a"),), settings)
    first.until(1200)
    end = first.world.report()["pods"][0]["finished"]
    before = Driver((pod(0, 300, 1000, job="a"),), settings)
    before.until(end + wait - 1)
    assert before.policy.scale_actions() == 1 and before.sizes() == {"nap-d2s-v5": 1}
    # Noticed at the next loop (10 s), validated 15 s later.
    before.until(end + wait + 10 + 15 + 11)
    assert before.policy.scale_actions() == 2 and before.sizes() == {}


def _two_nodes(settings: Mapping[str, str] = {}) -> Driver:
    # A (6 CPUs) and C (1.5 CPUs, short) fill a D8s; B (1 CPU) comes while it boots and gets a D2s of its own.
    # Once C is done, B fits beside A: the D2s is underutilised and its pod is moved.
    return Driver((pod(0, 3000, 6000, job="a"), pod(0, 300, 1500, job="c"), pod(50, 3000, 1000, job="b")), settings)


def test_an_underutilised_node_is_consolidated_and_its_job_pod_evicted() -> None:
    run = _two_nodes()
    run.until(200)
    assert run.sizes() == {"nap-d8s-v5": 1, "nap-d2s-v5": 1}
    first_b = run.node_of("b")
    run.until(1200)
    assert run.sizes() == {"nap-d8s-v5": 1}
    assert run.node_of("b") == run.node_of("a") != first_b
    evicted = [p for p in run.world.report()["pods"] if p["evicted_while_running"]]
    assert len(evicted) == 1 and evicted[0]["name"].startswith("job-b")
    # One voluntary disruption, counted by nap's own kind of removal: the D2s deleted for B to move.
    found = disruptions_section(run.world.report()["pods"], sim_seconds=1200.0, removed=run.policy.removed_nodes)
    assert (found["nodes"], found["pods"]) == (1, 1) and set(found["by_reason"]) == {"delete"}
    assert run.policy.removed_nodes[first_b] == "delete"


def test_a_do_not_disrupt_pod_blocks_consolidation() -> None:
    run = _two_nodes()
    run.until(200)
    b = next(p for p in run.run.cluster.list_pods() if p.name.startswith("job-b"))
    run.run.cluster.annotate_pod(b.namespace, b.name, annotations={DO_NOT_DISRUPT: "true"})
    run.until(1200)
    assert run.sizes() == {"nap-d8s-v5": 1, "nap-d2s-v5": 1}
    assert not [p for p in run.world.report()["pods"] if p["evicted_while_running"]]


@pytest.mark.parametrize(("budget", "most"), [("10%", 1), ("1", 1), ("100%", 4)])
def test_the_disruption_budget_caps_nodes_disrupted_at_once(budget: str, most: int) -> None:
    # Four whole-D64s pods started together end together: four empty nodes at once.
    run = Driver(tuple(pod(0, 300, 60_000, job=f"j{i}") for i in range(4)), {"NAP_BUDGET_NODES": budget})
    run.until(3000)
    assert run.max_deleting == most
    assert run.sizes() == {}


def test_consolidate_after_is_honoured_in_a_replay() -> None:
    pods = trace(*(pod(120.0 * i, 200, 1000 + 500 * (i % 3), job=f"j{i}") for i in range(12)))
    quick = replay(pods, "nap", FIXED_BOOT).result
    slow = replay(pods, "nap", ReplayConfig(pools=FIXED_BOOT.pools, boot_median_s=100.0, boot_p95_s=100.001,
                                             tail_s=900.0, peer_settings={"NAP_CONSOLIDATE_AFTER": "10m"})).result
    assert slow["cost"] > quick["cost"]  # nodes kept idle longer before going


def test_a_replay_ends_with_no_node_costs_less_than_static_and_leaves_out_what_the_others_do() -> None:
    # The last pod fits a D64s but no standard D16s pool: left out of every run alike.
    pods = [pod(60.0 * i, 300 + 60 * (i % 5), (500, 2000, 4000)[i % 3], 2, job=f"j{i // 3}") for i in range(30)]
    tiny = trace(*pods, pod(100, 300, 40_000))
    nap = replay(tiny, "nap", FIXED_BOOT)
    static = replay(tiny, "static", FIXED_BOOT)
    ca = replay(tiny, "ca", FIXED_BOOT)
    assert nap.pods_left_out == ca.pods_left_out == 1
    assert nap.result["cost"] < static.result["cost"]
    assert nap.result["cost_vs_oracle"] >= 1.0
    assert nap.series["nodes"][-1] == 0  # every pod done: nothing left running
    assert nap.result["pods_completed"] >= 30
    assert nap.result["assumptions"]


@pytest.mark.parametrize("name", sorted(POOL_SETS))
def test_every_pod_a_standard_pool_holds_fits_a_nap_size(name: str) -> None:
    standard = POOL_SETS[name]
    nap = nap_pools(standard)
    for pool in standard:
        biggest = TracePod(at=0, duration=1, cpu_milli=pool.cpu_milli - DAEMONSET_CPU_MILLI,
                           memory_bytes=(pool.memory_mib - 128) << 20, gpus=pool.gpus)
        assert pool_of(biggest, standard) is not None
        assert pool_of(biggest, nap) is not None, pool.name


def test_nap_settings_refuse_what_karpenter_would() -> None:
    for bad in ({"NAP_CONSOLIDATE_AFTER": "soon"}, {"NAP_CONSOLIDATION_POLICY": "Always"},
                {"NAP_BUDGET_NODES": "some"}, {"NAP_UNKNOWN": "1"}):
        with pytest.raises(ValueError):
            NapSettings.of(bad)
    assert NapSettings.of({"NAP_CONSOLIDATE_AFTER": "Never"}).consolidate_after is None
