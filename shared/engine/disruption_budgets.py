"""Disruption budgets: how many nodes may be disrupted at once, per reason, optionally only in NCRONTAB windows.

Pure module, no side effects. As Karpenter's NodePool `disruption.budgets`: each budget allows `nodes` (a count or
a percentage of the nodes it covers, rounded up) to be disrupted at the same time for the `reasons` it names
(every reason when it names none); with a `schedule` and a `duration` it applies only in the windows that open
when the schedule fires and last `duration`. Where several budgets apply to a reason, the smallest wins.

The text form (the `DISRUPTION_BUDGETS` setting, cluster-wide, and the scale-set or pool tag
`autoscaler-disruption-budgets`, per group): budgets separated by `;`, each an `&`-separated list of fields:

    nodes=10%&reasons=Replace,Drifted
    nodes=0&reasons=Replace,Drifted&schedule=0 0 9 * * 1-5&duration=8h

Reasons are engine names: `Empty`, `Underutilized`, `Replace`, `Drifted` (shared.domain.DISRUPTION_REASONS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.domain import DISRUPTION_REASONS
from shared.quantities import parse_duration
from shared.schedules import Schedule, parse_ncrontab

BUDGETS_TAG = "autoscaler-disruption-budgets"
_FIELDS = ("nodes", "reasons", "schedule", "duration")


@dataclass(frozen=True, slots=True)
class NodeBudget:
    """One budget: `count` nodes, or `percent` of the nodes covered (exactly one is set), for `reasons`."""

    count: int | None = None
    percent: float | None = None
    reasons: frozenset[str] = frozenset()  # empty: every reason
    schedule: Schedule | None = None
    duration: timedelta | None = None
    text: str = ""  # as written, for reports

    def covers(self, reason: str) -> bool:
        return not self.reasons or reason in self.reasons

    def active(self, now: datetime) -> bool:
        """Whether the budget applies at `now`: always without a schedule, else inside a window."""
        if self.schedule is None or self.duration is None:
            return True
        # The window that opened last: the schedule's last firing at or before now.
        opened = self.schedule.previous_before(now + timedelta(seconds=1))
        return now < opened + self.duration

    def limit(self, nodes: int) -> int:
        """How many of `nodes` covered nodes may be disrupted at once."""
        if self.count is not None:
            return self.count
        return math.ceil(nodes * (self.percent or 0.0) / 100.0)


def parse_budgets(text: str) -> tuple[NodeBudget, ...]:
    """The budgets of a setting or tag; ValueError naming the budget and field that is wrong."""
    budgets = []
    for index, raw in enumerate(part for part in text.split(";") if part.strip()):
        budgets.append(_parse_one(raw.strip(), index + 1))
    return tuple(budgets)


def _parse_one(raw: str, index: int) -> NodeBudget:
    where = f"budget {index} ({raw!r})"
    fields: dict[str, str] = {}
    for item in raw.split("&"):
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in _FIELDS:
            raise ValueError(f"{where}: {item.strip()!r} is not one of {', '.join(f + '=...' for f in _FIELDS)}")
        if key in fields:
            raise ValueError(f"{where}: {key} given twice")
        fields[key] = value.strip()
    if "nodes" not in fields:
        raise ValueError(f"{where}: nodes=<count or percentage> is required")
    count, percent = _nodes(fields["nodes"], where)
    reasons = frozenset(r.strip() for r in fields.get("reasons", "").split(",") if r.strip())
    unknown = sorted(reasons - set(DISRUPTION_REASONS))
    if unknown:
        raise ValueError(f"{where}: unknown reason(s) {', '.join(unknown)} (known: {', '.join(DISRUPTION_REASONS)})")
    schedule = duration = None
    if ("schedule" in fields) != ("duration" in fields):
        raise ValueError(f"{where}: schedule and duration go together")
    if "schedule" in fields:
        try:
            schedule = parse_ncrontab(fields["schedule"])
            duration = parse_duration(fields["duration"])
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from error
        if duration <= timedelta(0):
            raise ValueError(f"{where}: duration must be positive")
    return NodeBudget(count, percent, reasons, schedule, duration, raw)


def _nodes(value: str, where: str) -> tuple[int | None, float | None]:
    try:
        if value.endswith("%"):
            percent = float(value[:-1])
            if not 0 <= percent <= 100:
                raise ValueError
            return None, percent
        count = int(value)
        if count < 0:
            raise ValueError
        return count, None
    except ValueError as error:
        raise ValueError(f"{where}: nodes={value!r} is not a count (0 or more) or a percentage (0-100%)") from error
