"""Replacements: capacity asked first, the replaced nodes drained once it is Ready (consolidation and drift).

Pure module, no side effects. A planner (engine.drift, engine.consolidation) proposes; the utilisation poll
(services.replacement) admits proposals within the disruption budgets, records a `Replacement` per node in its
group's state and asks the new capacity; once that capacity is Ready, the node is a forced scale-down candidate
and leaves by the ordinary drain.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplacementProposal:
    """Replace `nodes` ((node, its group id) pairs) by `count` new nodes of `to_group`, for `reason`."""

    nodes: tuple[tuple[str, str], ...]
    reason: str  # shared.domain.REPLACE | DRIFTED
    to_group: str  # the group (lane) that grows; for drift, the node's own group
    count: int
    saving_per_hour: float = 0.0  # USD per hour, consolidation
    detail: str = ""  # drift: model | image | age; consolidation: e.g. "3 x Standard_D8s_v5 -> 1 x Standard_D16s_v5"
