"""The user's estimate of each trace pod's run time, the spot settings `ours+spot` runs with, and the loss it expects.

Every replayed pod carries the annotation `autoscaler.azure.com/expected-runtime` (engine.spot_work), in every
policy's run alike (only ours reads it). The estimate is MODELLED, never the exact duration:

- a pod of a trace job (alibaba2018 has job ids): the median duration of that job's pods, what a user knows of
  their job from its past runs; every pod of the job carries the same estimate;
- a pod without a job (alibaba2023): its duration times a seeded lognormal error of median 1 whose p95 is
  LOGNORMAL_P95 (2x): a user's guess, as often too long as too short, twice the truth or more one time in twenty.

`spot_settings` gives `ours+spot` the product's defaults (SPOT_MAX_RUNTIME=auto, SPOT_LOST_WORK_COST as shipped)
with SPOT_EVICTION_RATE at the mean rate the spot tier assumes for the pool holding most of the trace's work
(node-seconds of perfectly packed demand): what an operator reads for their main size in the portal's band.
`spot_work_section` reports, for a run with spot pools, the loss the rule expects (rate x T^2/2 over the pods
that started on spot nodes, T their estimate, the rate their spot pool's) beside the loss measured.
Pure functions, no side effects.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from devtools.replay.pools import Pool
from devtools.replay.spot import SpotTier
from devtools.replay.spot_prices import spot_fraction
from devtools.replay.traces import TracePod
from shared.engine.spot_work import EXPECTED_RUNTIME_ANNOTATION, rule_of, spot_limit
from shared.settings import SPECS

LOGNORMAL_P95 = 2.0  # the estimate's error factor at its 95th percentile (median 1)
_Z95 = 1.6448536269514722  # the standard normal's 95th percentile
SIGMA = math.log(LOGNORMAL_P95) / _Z95


def _setting(settings: Mapping[str, str], name: str) -> Any:
    """App setting `name` parsed as the app parses it: the value in `settings`, else its shipped default."""
    spec = next(s for s in SPECS if s.name == name)
    return spec.parse(settings.get(name) or str(spec.default))


# The shipped SPOT_LOST_WORK_COST, which the auto limit uses unless a run sets its own.
DEFAULT_LOST_WORK_COST: float = _setting({}, "SPOT_LOST_WORK_COST")
ASSUMPTIONS: tuple[str, ...] = (
    f"expected run time ({EXPECTED_RUNTIME_ANNOTATION}) on every pod of every policy's run (only ours reads it): for "
    "a pod of a trace job, the median duration of that job's pods (what a user knows of their job); for a pod "
    f"without a job, its duration times a seeded lognormal error of median 1 and p95 {LOGNORMAL_P95:g}x (a guess, "
    "as often long as short); never the exact duration",
    "ours+spot and ours+spot-first: SPOT_EVICTION_RATE = the spot tier's mean eviction rate for the pool holding "
    "most of the trace's work (node-seconds of perfectly packed demand); other spot settings at their defaults "
    f"(SPOT_MAX_RUNTIME=auto, SPOT_LOST_WORK_COST={DEFAULT_LOST_WORK_COST:g}); ours+spot-first sets "
    "SPOT_MAX_RUNTIME=off (spot-first)",
    "spot_work.expected_loss_s: rate x T^2/2 summed over the pods that started on spot nodes, T the pod's estimate "
    "and the rate its spot pool's mean (the engine's model); beside it lost_work_s, what evictions destroyed",
)


def estimates(pods: Sequence[TracePod], *, seed: int) -> tuple[float, ...]:
    """Each pod's estimated run time, seconds, in `pods` order (see the module docstring for the rule)."""
    by_job: dict[str, list[float]] = {}
    for pod in pods:
        if pod.job:
            by_job.setdefault(pod.job, []).append(pod.duration)
    medians = {job: statistics.median(durations) for job, durations in by_job.items()}
    errors = random.Random(f"runtime-estimates:{seed}")
    out = []
    for pod in pods:
        if pod.job:
            out.append(medians[pod.job])
        else:
            out.append(pod.duration * math.exp(errors.gauss(0.0, SIGMA)))
    return tuple(out)


def annotation_value(seconds: float) -> str:
    """The annotation's text: whole seconds, at least one (`parse_duration` reads `123s`)."""
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"an estimated run time must be a positive number of seconds, got {seconds!r}")
    return f"{max(1, round(seconds))}s"


def main_pool(pools: Sequence[Pool], node_seconds: Mapping[str, float]) -> Pool:
    """The pool holding most of the trace's work (`node_seconds`: pool name -> demand's node-seconds)."""
    if not pools:
        raise ValueError("no pools")
    return max(pools, key=lambda pool: node_seconds.get(pool.name, 0.0))


def spot_settings(pools: Sequence[Pool], node_seconds: Mapping[str, float], spot: Mapping[str, Any] | None, *,
                  spot_first: bool = False) -> dict[str, str]:
    """The app settings `ours+spot` (`spot_first`: `ours+spot-first`) runs with under spot tier `spot`."""
    tier = SpotTier.of(spot if spot is not None else {})
    assert tier is not None
    rate = tier.rate_of(main_pool(pools, node_seconds).vm_size)
    # The setting takes a rate above 0 and at most 1 per instance-hour: a flat test rate of 0 (no evictions) or above
    # 1 is clamped to the nearest it takes.
    settings = {"SPOT_EVICTION_RATE": f"{min(1.0, max(rate, 1e-6)):.6g}"}
    if spot_first:
        settings["SPOT_MAX_RUNTIME"] = "off"
    return settings


def price_fraction(pools: Sequence[Pool]) -> float:
    """The mean spot price over on-demand price of the pools' sizes, as engine.spot_work.price_fraction reads the
    groups' prices from the replay's price port (the shipped Spot table; a tier's bill override is not seen)."""
    return sum(spot_fraction(pool.vm_size) for pool in pools) / len(pools)


def limit_s(settings: Mapping[str, str], pools: Sequence[Pool]) -> float | None:
    """The run time above which ours keeps a pod off spot under `settings`, seconds (engine.spot_work.spot_limit);
    None when SPOT_MAX_RUNTIME is `off`."""
    rule = rule_of(_setting(settings, "SPOT_MAX_RUNTIME"), eviction_rate=_setting(settings, "SPOT_EVICTION_RATE"),
                   lost_work_cost=_setting(settings, "SPOT_LOST_WORK_COST"))
    limit = spot_limit(rule, fraction=price_fraction(pools))
    return None if limit is None else limit.total_seconds()


def spot_work_section(report_pods: Sequence[Mapping[str, Any]], estimate_by_workload: Mapping[str, float],
                      rate_by_pool: Mapping[str, float], *, pod_estimates: Sequence[float], limit: float | None,
                      lost_work_s: float) -> dict[str, Any]:
    """The results' `spot_work` part: pods that started on spot nodes and the loss the rule expected of them
    (rate x T^2/2, T the estimate in hours, per pod started), beside `lost_work_s` measured; with `limit` (the
    auto limit, seconds), the trace's pods (`pod_estimates`) whose estimate is over it and how many pods over it
    still started on spot (the scheduler may bind a pod to a spot node with room: the planner only chooses which
    nodes are made; an evicted Job pod's replacement is a pod of its own)."""
    expected_h = 0.0
    on_spot = long_on_spot = 0
    for pod in report_pods:
        if pod["started"] is None or pod["group"] is None:
            continue
        rate = rate_by_pool.get(str(pod["group"]).rsplit("/", 1)[-1])
        estimate = estimate_by_workload.get(str(pod["workload"]).rsplit("/", 1)[-1])  # "<namespace>/<name>"
        if rate is None or estimate is None:
            continue  # an on-demand node, or a pod the trace did not make (none in a replay)
        on_spot += 1
        hours = estimate / 3600
        expected_h += rate * hours * hours / 2
        long_on_spot += int(limit is not None and estimate > limit)
    out: dict[str, Any] = {
        "pods_started_on_spot": on_spot,
        "expected_loss_s": round(expected_h * 3600, 1),
        "lost_work_s": round(lost_work_s, 1),
        "limit_s": round(limit, 1) if limit is not None else None,
    }
    if limit is not None:
        out["pods_over_limit"] = sum(1 for e in pod_estimates if e > limit)
        out["long_pods_started_on_spot"] = long_on_spot
    return out
