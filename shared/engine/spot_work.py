"""Spot or on demand by the work: long pods are planned on on-demand capacity, short ones on spot.

Pure module, no side effects. A spot VM is evicted at some rate per instance-hour; a pod running on it loses the
work it had done. For a pod expected to run T hours on a group evicted at rate λ per hour, the expected work lost
is about λ·T²/2 hours (the chance of an eviction while it runs, λ·T, times half its run on average), while spot
saves (1 - f)·T hours of the on-demand price (f: the spot price over the on-demand price). Valuing an hour of lost
work at `lost_work_cost` on-demand hours (the compute redone and the delay to the result), spot pays while

    λ·T²/2 · lost_work_cost < (1 - f)·T,   i.e.   T < T* = 2·(1 - f) / (λ · lost_work_cost).

Pods expected to run longer than T* (or than SPOT_MAX_RUNTIME when it is a fixed duration) are kept off spot for
planning, as ON_DEMAND_POD_SELECTOR keeps pods off spot (`engine.spot.require_on_demand`); shorter pods go spot
first as before. The expected run time is the pod's annotation `autoscaler.azure.com/expected-runtime` (a
duration, the user's estimate); a pod without one has none and is left as spot-first plans it (its owner said
nothing, and a guess would move work the user meant for spot). The annotation `autoscaler.azure.com/spot`
says what the user wants whatever the estimate: `avoid` keeps the pod off spot, `prefer` keeps it spot-first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from shared.domain import NodeGroup, Pod
from shared.engine.spot import require_on_demand
from shared.quantities import parse_duration

EXPECTED_RUNTIME_ANNOTATION = "autoscaler.azure.com/expected-runtime"
SPOT_ANNOTATION = "autoscaler.azure.com/spot"  # avoid | prefer
AVOID = "avoid"
PREFER = "prefer"
# The spot price over the on-demand price assumed where no spot group has an on-demand group of its size to compare
# with: Azure's spot discounts run to about 90 %; 0.2 is a middle value (docs/spot-and-quota.md).
DEFAULT_PRICE_FRACTION = 0.2


@dataclass(frozen=True, slots=True)
class SpotWorkRule:
    """SPOT_MAX_RUNTIME (`max_runtime`: None for `auto`, the break-even), SPOT_EVICTION_RATE, SPOT_LOST_WORK_COST.
    `enabled` False (SPOT_MAX_RUNTIME=off) plans every pod spot-first as before."""

    enabled: bool = True
    max_runtime: timedelta | None = None
    eviction_rate: float = 0.05  # per instance-hour
    lost_work_cost: float = 4.0


@dataclass(frozen=True, slots=True)
class SpotWorkPlan:
    """The pods as the planner sees them, and which were kept off spot (pod key -> why)."""

    pods: tuple[Pod, ...]
    kept_off: Mapping[str, str]
    limit: timedelta | None  # the run time above which a pod is kept off spot; None: no limit applied


def parse_max_runtime(text: str) -> tuple[bool, timedelta | None]:
    """SPOT_MAX_RUNTIME: `auto` (the break-even), `off`, or a duration; ValueError naming the text."""
    value = text.strip().lower()
    if value == "auto":
        return True, None
    if value == "off":
        return False, None
    duration = parse_duration(value)
    if duration <= timedelta(0):
        raise ValueError(f"must be auto, off or a positive duration, got {text!r}")
    return True, duration


def parse_rate(text: str) -> float:
    """SPOT_EVICTION_RATE: a percentage per instance-hour (`5%`) or a fraction (`0.05`), above 0 and at most 1."""
    value = text.strip()
    try:
        rate = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError as error:
        raise ValueError(f"must be a percentage (5%) or a fraction (0.05) per instance-hour, got {text!r}") from error
    if not 0 < rate <= 1:
        raise ValueError(f"must be above 0 and at most 100% per instance-hour, got {text!r}")
    return rate


def expected_runtime(pod: Pod) -> timedelta | None:
    """The pod's expected run time from its annotation; None when it has none or it does not parse."""
    text = pod.annotations.get(EXPECTED_RUNTIME_ANNOTATION)
    if not text:
        return None
    try:
        runtime = parse_duration(text)
    except (ValueError, OverflowError):
        return None
    return runtime if runtime > timedelta(0) else None


def break_even(*, eviction_rate: float, price_fraction: float, lost_work_cost: float) -> timedelta:
    """T* = 2·(1 - f) / (λ · lost_work_cost): the run time above which spot's expected loss outweighs its saving."""
    hours = 2 * max(0.0, 1 - price_fraction) / (eviction_rate * lost_work_cost)
    return timedelta(hours=hours)


def expected_loss(runtime: timedelta, *, eviction_rate: float) -> timedelta:
    """The work a pod of that run time is expected to lose on spot: λ·T²/2 (T in hours)."""
    hours = runtime.total_seconds() / 3600
    return timedelta(hours=eviction_rate * hours * hours / 2)


def price_fraction(groups: Sequence[NodeGroup], prices: Mapping[str, float]) -> float:
    """The mean spot price over on-demand price of the spot groups that have an on-demand group of their size with
    a known price; DEFAULT_PRICE_FRACTION when none has."""
    on_demand = {g.vm_size.lower(): prices[g.id] for g in groups if not g.is_spot and prices.get(g.id)}
    fractions = [prices[g.id] / on_demand[g.vm_size.lower()] for g in groups
                 if g.is_spot and prices.get(g.id) is not None and g.vm_size.lower() in on_demand]
    return sum(fractions) / len(fractions) if fractions else DEFAULT_PRICE_FRACTION


def rule_of(max_runtime: str, *, eviction_rate: float, lost_work_cost: float) -> SpotWorkRule:
    """The rule of the settings: SPOT_MAX_RUNTIME as written, the rate and cost parsed."""
    enabled, fixed = parse_max_runtime(max_runtime)
    return SpotWorkRule(enabled=enabled, max_runtime=fixed, eviction_rate=eviction_rate, lost_work_cost=lost_work_cost)


def spot_limit(rule: SpotWorkRule, *, fraction: float) -> timedelta | None:
    """The run time above which a pod is kept off spot: the fixed limit, else the break-even; None when off."""
    if not rule.enabled:
        return None
    return rule.max_runtime or break_even(eviction_rate=rule.eviction_rate, price_fraction=fraction,
                                          lost_work_cost=rule.lost_work_cost)


def plan_spot_work(pods: Sequence[Pod], rule: SpotWorkRule, *, fraction: float) -> SpotWorkPlan:
    """Pending pods expected to run longer than the limit, or annotated `avoid`, kept off spot for planning."""
    limit = spot_limit(rule, fraction=fraction)
    kept: dict[str, str] = {}
    out: list[Pod] = []
    for pod in pods:
        why = _why_off_spot(pod, limit) if pod.node_name is None else ""
        if why:
            kept[pod.key] = why
            pod = require_on_demand(pod)
        out.append(pod)
    return SpotWorkPlan(tuple(out), kept, limit)


def _why_off_spot(pod: Pod, limit: timedelta | None) -> str:
    wish = pod.annotations.get(SPOT_ANNOTATION, "").strip().lower()
    if wish == AVOID:
        return f"{SPOT_ANNOTATION}: avoid"
    if wish == PREFER or limit is None:
        return ""
    runtime = expected_runtime(pod)
    if runtime is not None and runtime > limit:
        return f"expected run time {_hours(runtime)} over the spot limit {_hours(limit)}"
    return ""


def _hours(span: timedelta) -> str:
    return f"{span.total_seconds() / 3600:.1f} h"
