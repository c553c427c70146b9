"""When may a group scale down again? The rules both the planner and the executor apply.

Pure module, no side effects.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.domain import GroupState


@dataclass(frozen=True, slots=True)
class ScaleDownDelays:
    after_add: timedelta = timedelta(minutes=10)
    after_delete: timedelta = timedelta(0)
    after_failure: timedelta = timedelta(minutes=3)


def scale_down_blocked(state: GroupState, *, now: datetime, delays: ScaleDownDelays) -> str | None:
    """The reason the group may not start a scale-down now, or None when it may."""
    checks = (
        (state.last_scale_up, delays.after_add, "scale-down-delay-after-add"),
        (state.last_scale_down, delays.after_delete, "scale-down-delay-after-delete"),
        (state.last_failure, delays.after_failure, "scale-down-delay-after-failure"),
    )
    for since, delay, name in checks:
        if since is not None and delay > timedelta(0) and now < since + delay:
            return f"{name} until {(since + delay).isoformat()}"
    return None
