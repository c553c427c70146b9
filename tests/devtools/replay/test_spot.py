"""The replay's spot tier: twin pools, spot billing, evictions at the configured rate, ours acting on the Preempt
notice as Event Grid delivers it, CA not acting on it, and the quota."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

import devtools.replay.policies.ours as ours_module
from devtools.replay.__main__ import main
from devtools.replay.harness import Replay, ReplayConfig, build_world
from devtools.replay.metrics import run_result
from devtools.replay.policies import Static
from devtools.replay.policies.ca import CA_SPOT_SETTINGS, ClusterAutoscaler
from devtools.replay.policies.ours import EVENT_GRID_DELIVERY, Ours
from devtools.replay.pools import CPU_POOL, GPU_POOL_2, PRICES_PER_HOUR
from devtools.replay.run import replay
from devtools.replay.spot import SPOT_TOLERATION, SpotTier, billed_pools
from devtools.replay.spot_prices import SPOT_PRICE_FRACTION
from devtools.replay.spot_tiers import SPOT_TARGET_TIER
from devtools.replay.suite import evaluate_spot_targets
from devtools.replay.traces import Trace, TracePod
from shared.services.spot import PREEMPTED_TAINT

CONFIG = ReplayConfig(pools=(CPU_POOL,), tail_s=600.0)
# Flat rates with spot capacity never running out: what the tests of evictions and notices need to see.
FLAT_2 = {"eviction_rate_per_hour": 2.0, "scarcity": False}
NO_EVICTIONS = {"eviction_rate_per_hour": 0, "scarcity": False}


def trace(*pods: TracePod) -> Trace:
    return Trace("tiny", "<test>", tuple(sorted(pods, key=lambda p: (p.at, p.job))), "hand-made")


def pod(at: float, duration: float, cpu: int, *, job: str) -> TracePod:
    return TracePod(at=at, duration=duration, cpu_milli=cpu, memory_bytes=2 << 30, gpus=0, job=job)


def long_jobs(count: int = 6, hours: float = 2.0) -> Trace:
    """Pods of about a quarter node each, running for hours: spot nodes busy long enough to be evicted."""
    return trace(*(pod(i, hours * 3600, 4000, job=f"long-{i}") for i in range(count)))


def _run(policy: str, tr: Trace, config: ReplayConfig) -> tuple[Replay, Any]:
    """One replay by hand (as devtools.replay.run does), keeping the world and the policy to look into."""
    world = build_world(tr, config)
    run = Replay(world, config)
    chosen = Ours(run) if policy == "ours+spot" else ClusterAutoscaler(run, settings=CA_SPOT_SETTINGS)
    run.run(chosen)
    return run, chosen


# -- the tier -----------------------------------------------------------------------------------


def test_the_spot_tier_adds_a_spot_twin_of_every_pool_and_pods_tolerate_it() -> None:
    config = replace(CONFIG, pools=(CPU_POOL, GPU_POOL_2), spot={})
    world = build_world(trace(pod(0, 60, 1000, job="a")), config)
    sets = {s.name: s for s in world.scale_sets(world.subscription_id, "rg-replay")}
    assert set(sets) == {"cpu-d16", "gpu-nc48", "cpu-d16-spot", "gpu-nc48-spot"}
    for name in ("cpu-d16", "gpu-nc48"):
        regular, spot = sets[name].spec, sets[f"{name}-spot"].spec
        assert (regular.priority, spot.priority, spot.eviction_policy) == ("Regular", "Spot", "Delete")
        assert (spot.vm_size, spot.max_size, spot.allocatable) == (regular.vm_size, regular.max_size, regular.allocatable)
        assert set(regular.taints) < set(spot.taints)  # the GPU taint kept, AKS's spot taint added
    # By default: each spot set's availability as Spot Placement Score levels, evictions at its size's band, notice.
    assert [a.scale_set for a in world.scenario.spot_availability] == ["cpu-d16-spot", "gpu-nc48-spot"]
    assert all(a.notice and a.max_rate > 0 for a in world.scenario.spot_availability)
    assert not world.scenario.evictions
    assert world.scenario.cloud_node_lifecycle
    arrivals = [e for e in world._events if e[2] == "arrival"]  # the trace's pods, waiting to arrive
    assert arrivals and all(SPOT_TOLERATION in a[3].workload.tolerations for a in arrivals)

    # Without the tier: no twin, no evictions, no toleration.
    plain = build_world(trace(pod(0, 60, 1000, job="a")), CONFIG)
    assert [s.name for s in plain.scale_sets(plain.subscription_id, "rg-replay")] == ["cpu-d16"]
    assert not plain.scenario.evictions
    assert all(SPOT_TOLERATION not in e[3].workload.tolerations for e in plain._events if e[2] == "arrival")


def test_the_tier_refuses_what_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="unknown field 'rate'"):
        SpotTier.of({"rate": 0.1})
    with pytest.raises(ValueError, match="eviction_policy"):
        SpotTier.of({"eviction_policy": "Stop"})
    with pytest.raises(ValueError, match="price_fraction"):
        SpotTier.of({"price_fraction": 1.5})
    assert SpotTier.of(None) is None
    with pytest.raises(ValueError, match="band must be one of"):
        SpotTier.of({"band": "3%"})
    with pytest.raises(ValueError, match="not both"):
        SpotTier.of({"band": "0-5%", "eviction_rate_per_hour": 0.1})
    flat = SpotTier.of({"eviction_rate_per_hour": 0, "scarcity": False})
    assert flat is not None and flat.scenario((CPU_POOL,)).get("evictions") is None  # none at all


# -- billing ------------------------------------------------------------------------------------


def test_spot_instances_are_billed_at_their_fraction_of_on_demand() -> None:
    tr = trace(*(pod(i * 30, 900, 6000, job=f"j{i}") for i in range(8)))
    runs = {}
    for fraction in (None, 0.5):
        spot = NO_EVICTIONS | ({} if fraction is None else {"price_fraction": fraction})
        runs[fraction] = replay(tr, "ours+spot", replace(CONFIG, spot=spot)).result
    table = runs[None]
    assert table["spot"]["spot_share"] == 1.0  # spot first: every node-second on spot
    od_price = PRICES_PER_HOUR[CPU_POOL.vm_size]
    assert table["cost"] == pytest.approx(table["node_seconds"] * od_price * SPOT_PRICE_FRACTION[CPU_POOL.vm_size] / 3600,
                                          abs=1e-3)
    assert table["spot"]["spot_cost_at_on_demand"] == pytest.approx(table["node_seconds"] * od_price / 3600, abs=1e-3)
    # The price is billing only: the same run, the same node-seconds, the cost in proportion to the fraction.
    assert runs[0.5]["node_seconds"] == table["node_seconds"]
    # Both costs are rounded to 4 decimals in the results: the proportion holds to that rounding.
    assert runs[0.5]["cost"] == pytest.approx(table["cost"] * 0.5 / SPOT_PRICE_FRACTION[CPU_POOL.vm_size], abs=2e-4)
    # On-demand node-seconds keep their full price in the same run.
    on_demand = replay(tr, "ours", CONFIG).result
    assert on_demand["cost"] == pytest.approx(on_demand["node_seconds"] * od_price / 3600, abs=1e-3)
    assert "spot" not in on_demand


# -- evictions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.5, 2.0])
def test_evictions_happen_at_the_configured_rate(rate: float) -> None:
    # 40 spot instances held, nothing re-growing them: each is evicted at `rate` per hour until it is gone.
    instances, hours = 40, 1.5
    config = replace(CONFIG, spot={"eviction_rate_per_hour": rate, "scarcity": False}, tail_s=hours * 3600)
    world = build_world(trace(pod(0, 1, 100, job="one")), config, initial={"cpu-d16-spot": instances}, fixed=True)
    run = Replay(world, config)
    run.run(Static())
    evictions = world.report()["spot"]["evictions"]
    expected = instances * (1 - math.exp(-rate * world.t / 3600))  # exponential lifetimes, no replacement
    assert expected / 2 <= evictions <= expected * 2, (evictions, expected)


# -- the Preempt notice -------------------------------------------------------------------------


def test_ours_gets_each_notice_within_a_second_and_moves_pods_off_before_the_eviction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    handled: list[tuple[Any, dict[str, Any]]] = []
    real = ours_module.handle_scheduled_event

    def spy(ports: Any, settings: Any, event: dict[str, Any], *, now: Any) -> Any:
        handled.append((now, event))
        return real(ports, settings, event, now=now)

    monkeypatch.setattr(ours_module, "handle_scheduled_event", spy)
    # The trace's pods are Jobs, which a notice leaves to finish by default: here they are moved, to see it done.
    config = replace(CONFIG, spot=FLAT_2, settings={"SPOT_NOTICE_BATCH_PODS": "evict"})
    run, ours = _run("ours+spot", long_jobs(), config)
    published = {e["event"]["id"]: e["event"] for e in run.world.eventgrid_events()}
    spot = run.world.report()["spot"]
    assert spot["notices_published"] >= 2 and len(handled) == spot["notices_published"]
    for now, event in handled:  # each one, as Event Grid pushes it: about a second after it was published
        assert event == published[event["id"]]
        sent = datetime.fromisoformat(event["eventTime"].replace("Z", "+00:00"))
        lag = (now - sent).total_seconds()
        assert 0 <= lag <= EVENT_GRID_DELIVERY.total_seconds() + 1, lag  # eventTime has whole seconds
    assert {outcome for _, _, outcome in ours.notices} <= {"acted", "ignored"} and ours.errors == 0
    assert spot["pods_moved_before_eviction"] > 0  # cordoned and drained before the VM went
    result = run_result(run.world, billed_pools(config.pools, config.spot), scale_actions=0, oracle_cost=1.0)
    assert result["pods"] > 6  # the moved pods' replacements, started over
    assert result["spot"]["evicted_pods"] < result["pods_killed"]  # most were moved, not killed with the VM


def test_ca_does_not_act_on_notices(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("CA has no Scheduled Events handler")

    monkeypatch.setattr(ours_module, "handle_scheduled_event", refuse)
    run, ca = _run("ca+spot", long_jobs(), replace(CONFIG, spot=FLAT_2))
    report = run.world.report()
    spot = report["spot"]
    assert spot["notices_published"] >= 2 and spot["evictions"] == spot["notices_published"]
    assert spot["pods_moved_before_eviction"] == 0
    assert spot["evicted_pods"] > 0 and spot["lost_work_seconds"] > 0  # the pods died with their VMs
    assert not any(t.key == PREEMPTED_TAINT.key for n in run.cluster.list_nodes() for t in n.taints)
    assert report["pods_total"] > 6  # the Job controller replaced them


def test_ca_prefers_the_spot_pools_with_its_priority_expander() -> None:
    tr = trace(*(pod(i * 30, 900, 6000, job=f"j{i}") for i in range(8)))
    result = replay(tr, "ca+spot", replace(CONFIG, spot=NO_EVICTIONS)).result
    assert result["spot"]["spot_share"] == 1.0 and result["pods_completed"] == 8
    # Without the tier, CA runs on demand as before (and its settings have no spot-first rule of ours).
    assert "spot" not in replay(tr, "ca", CONFIG).result


# -- quota --------------------------------------------------------------------------------------


def test_a_low_priority_quota_sends_ours_to_on_demand_without_a_refusal_and_ca_into_backoff() -> None:
    # Two D16 nodes' worth of pods at once, a lowPriorityCores quota of one node (16 vCPUs).
    tr = trace(*(pod(0, 1800, 7000, job=f"j{i}") for i in range(4)))
    config = replace(CONFIG, spot=NO_EVICTIONS, quotas={"lowPriorityCores": 16})
    ours = replay(tr, "ours+spot", config).result
    assert ours["spot"]["quota_refused_requests"] == 0  # read the quota, asked for what fits
    assert ours["spot"]["low_priority_cores_peak"] <= 16
    assert 0 < ours["spot"]["spot_share"] < 1  # the rest on demand
    ca = replay(tr, "ca+spot", config).result
    assert ca["spot"]["quota_refused_requests"] >= 1  # asked for both, refused, backed off to on demand
    assert ca["spot"]["low_priority_cores_peak"] <= 16
    assert ours["pods_completed"] == ca["pods_completed"] == 4


# -- the command line and the targets -----------------------------------------------------------


def test_the_command_line_sets_the_spot_tier_and_the_quota(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    seen: list[ReplayConfig] = []
    real = replay

    def spy(tr: Trace, policy: str, config: ReplayConfig, **kwargs: Any) -> Any:
        seen.append(config)
        return real(tr, policy, config, **kwargs)

    monkeypatch.setattr("devtools.replay.run.replay", spy)
    pods = tmp_path / "pods.csv"
    pods.write_text("at,duration,cpu,memory,gpu,job\n0,10m,4,2Gi,0,a\n")
    assert main(["replay", "--trace", str(pods), "--policy", "ours+spot", "--spot-eviction-rate", "0.2",
                 "--spot-eviction-policy", "Deallocate", "--spot-price-fraction", "0.3",
                 "--quota-low-priority-cores", "320"]) == 0
    assert seen[0].spot == {"eviction_rate_per_hour": 0.2, "eviction_policy": "Deallocate", "price_fraction": 0.3}
    assert dict(seen[0].quotas) == {"lowPriorityCores": 320}
    assert "| ours+spot |" in capsys.readouterr().out
    assert main(["replay", "--trace", str(pods), "--policy", "ours", "--spot-eviction-rate", "0.2"]) == 2
    assert "apply to ours+spot and ca+spot only" in capsys.readouterr().err


def _result(cost: float, p95: float, lost: float, **spot: Any) -> dict[str, Any]:
    return {"cost": cost, "pending_wait_s": {"p95": p95}, "work_lost_s": lost, "pods_killed": 0,
            **({"spot": {"spot_share": 1.0, "spot_cost": cost, "spot_cost_at_on_demand": cost * 5, **spot}} if spot else {})}


@pytest.mark.parametrize(("mine", "theirs", "met"), [
    (_result(20, 150, 100, evictions=3), _result(27, 130, 200, evictions=4), [True, True, True]),
    (_result(60, 190, 300, evictions=3), _result(27, 130, 200, evictions=4), [False, False, False]),
    (_result(20, 150, 0, evictions=0), _result(27, 130, 0, evictions=0), [True, True, False]),  # 0 vs 0: a tie
])
def test_spot_targets(mine: dict, theirs: dict, met: list[bool]) -> None:
    tier = SPOT_TARGET_TIER
    results = {"ours": _result(100, 152, 0), f"ours+spot@{tier}": mine, f"ca+spot@{tier}": theirs}
    targets = evaluate_spot_targets(results, batch=True)
    assert [t["met"] for t in targets] == met
    assert "0.5x ours" in targets[0]["name"] and "+ 30 s" in targets[1]["name"] and "ca+spot" in targets[2]["name"]
    assert "spot price" in targets[0]["detail"]  # the break-even fraction
    # Off the batch trace only the comparison with ca+spot is made.
    assert [t["name"] for t in evaluate_spot_targets(results, batch=False)] == [targets[2]["name"]]


# -- CA's bookkeeping of a scale-up in flight -----------------------------------------------------


def test_ca_does_not_wait_for_an_evicted_instance_of_a_scale_up_in_flight() -> None:
    """An instance evicted (policy Delete) while CA's scale-up of its set is in flight leaves the set: CA counts
    against the target its refreshed cache reports, so the scale-up completes instead of timing out after
    --max-node-provision-time and backing the spot set off."""
    tr = trace(pod(0, 7200, 12000, job="first"), pod(600, 7200, 12000, job="second"))
    config = replace(CONFIG, spot=NO_EVICTIONS)
    world = build_world(tr, config)
    run = Replay(world, config)
    ca = ClusterAutoscaler(run, settings=CA_SPOT_SETTINGS)
    codes: list[str] = []
    back_off = ca._back_off
    ca._back_off = lambda gid, code, now: (codes.append(code), back_off(gid, code, now))[1]  # type: ignore[method-assign]

    class EvictDuringScaleUp:
        """CA, and Azure evicting the oldest spot VM just after CA grew the set for the second pod."""

        name = "ca+spot"
        evicted = False

        def next_wakeup(self, now: Any) -> Any:
            return ca.next_wakeup(now)

        def wake(self, now: Any) -> None:
            ca.wake(now)
            group = world.scale_set(world.subscription_id, "rg-replay", "cpu-d16-spot")
            if not self.evicted and group.capacity == 2:
                oldest = min(world.instances(group), key=lambda i: i.created_at)
                world.simulate_eviction(group, oldest)
                self.evicted = True

        def scale_actions(self) -> int:
            return ca.scale_actions()

    policy = EvictDuringScaleUp()
    run.run(policy)
    assert policy.evicted and world.report()["spot"]["evictions"] == 1
    assert "MaxNodeProvisionTime" not in codes, codes


@pytest.mark.parametrize("policy", ["ours+spot", "ca+spot"])
def test_same_seed_same_evictions_and_numbers(policy: str) -> None:
    # Spot-first, so ours puts the long jobs on spot too (by default it keeps work this long off spot at this rate).
    config = replace(CONFIG, spot=FLAT_2, settings={"SPOT_MAX_RUNTIME": "off"})
    first, second = replay(long_jobs(), policy, config), replay(long_jobs(), policy, config)
    assert first.result == second.result and first.result["spot"]["evictions"] >= 1


def test_by_default_a_notice_leaves_jobs_to_finish_but_cordons_their_node() -> None:
    run, ours = _run("ours+spot", long_jobs(), replace(CONFIG, spot=FLAT_2))
    spot = run.world.report()["spot"]
    assert spot["notices_published"] >= 2 and ours.errors == 0
    assert spot["pods_moved_before_eviction"] == 0  # Jobs run on: evicting them early would save none of their work
    assert {outcome for _, _, outcome in ours.notices} == {"acted"}
