"""Multi-size groups planned as lanes: which size grows, and the set's own min and max across its lanes.

Pure module, no side effects, no SDK. A Flexible scale set with an instance mix, or an AKS
VirtualMachines pool, is listed by its provider as one NodeGroup per VM size (a "lane", see
`NodeGroup.lane`), so the planners treat each size as a group of its own: its template, price,
quota family, offerings and backoff. What the lanes share is decided here:

- `choose_lanes`: when several lanes of one set could take the pods, one competes with the other
  groups in the expander: the set's preferred size under `Prioritized`, else the size that costs
  least per unit of work placed (what the set's LowestPrice strategy and our own choice for an
  AKS VirtualMachines pool aim at; a CapacityOptimized set leaves the size to us as well, since
  we steer it with Prioritized on every increase).
- `cheapest_prefix`: a lane's option is cut to its nodes that place work cheapest, so a small pod
  that a big size's option would put on a node of its own is planned again (scale_up does the cut).
- `clip_increases` / `clip_removals`: each lane's min and max are what the other lanes leave of
  the set's, as listed; two lanes growing (or shrinking) in one plan must not pass the set's max
  (or min) together.

The set's own min and max are not on the lanes; they are read back from them. A lane's
`max_size` is `max(capacity, set_max - others)`, so `set_max - total = min(max_size - capacity)`
over the lanes (exact whenever the set is within its max). A lane's `min_size` is
`max(0, set_min - others)`: `min_size + total - capacity` is the set's min for a lane with
`min_size > 0` and an upper bound of it otherwise, so their minimum is the set's min or, when
every lane reads 0, the tightest bound known: a plan may then remove fewer nodes than it could,
never more, and the next poll reads the lanes afresh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Protocol, TypeVar

from shared.domain import GroupState, NodeGroup, Resources
from shared.engine import reasons
from shared.engine.expanders import ExpansionOption
from shared.engine.reasons import KeptReason


# The plans are engine.scale_up's ScaleUpPlan and engine.scale_down's ScaleDownPlan; scale_up imports this module
# and scale_down sits above it (the import-linter's engine layers), so they are typed here by what is read of them.
class _Increase(Protocol):
    group_id: str
    current_target: int
    new_target: int
    pods: tuple[str, ...]


class _ScaleUpPlan(Protocol):
    increases: tuple[_Increase, ...]
    unplaceable: Mapping[str, str]


class _Removal(Protocol):
    node: str
    group_id: str


class _ScaleDownPlan(Protocol):
    removals: tuple[_Removal, ...]
    kept: Mapping[str, KeptReason]


ScaleUpPlan = TypeVar("ScaleUpPlan", bound=_ScaleUpPlan)
ScaleDownPlan = TypeVar("ScaleDownPlan", bound=_ScaleDownPlan)

PRIORITIZED = "prioritized"  # VMSS instance mix's allocationStrategy values compare case-insensitively

# The unit of work `choose_lanes` prices: a requested core, 4 GiB of requested memory (the D-series ratio) and a
# GPU weighed as 8 cores, summed, so a size is judged by what it costs for what the pods ask of it all.
_GIB = 1024**3
_MEMORY_PER_UNIT = 4 * _GIB
_GPU_UNITS = 8
_GPU_SUFFIX = "/gpu"  # nvidia.com/gpu, amd.com/gpu


def work_units(requested: Resources) -> Fraction:
    """Requested cores + memory GiB / 4 + 8 per GPU: the work a set of pods asks for, in one number."""
    gpus = sum(amount for name, amount in requested.extended if name.endswith(_GPU_SUFFIX))
    return (Fraction(requested.cpu_milli, 1000) + Fraction(requested.memory_bytes, _MEMORY_PER_UNIT)
            + _GPU_UNITS * gpus)


def cost_per_work(option: ExpansionOption) -> Fraction | None:
    """USD per hour of the option's new nodes per unit of work it places; None: the lane has no price.

    An option placing no measurable work counts as one unit, so it never wins on price alone.
    """
    if option.price_per_hour is None:
        return None
    units = max(work_units(option.requested), Fraction(1))
    return Fraction(option.price_per_hour) * option.node_count / units


def cheapest_prefix(price_per_hour: float, node_work: Sequence[Fraction]) -> int:
    """How many of an option's new nodes, in the order it opened them, to keep: those placing work cheapest.

    The cost per unit of work of the first k nodes, least over k (ties to more nodes). A lane's option
    packs every pod it can into its size, so a big size's option may end in a node opened for one small
    pod; priced whole, the big pods would carry that node. Cut there, the small pod is planned again on
    its own and goes to the size that runs it cheapest.
    """
    best, best_k, done = None, len(node_work), Fraction(0)
    for k, work in enumerate(node_work, start=1):
        done += work
        ratio = Fraction(price_per_hour) * k / max(done, Fraction(1))
        if best is None or ratio <= best:
            best, best_k = ratio, k
    return best_k


def choose_lanes(options: Sequence[ExpansionOption]) -> list[ExpansionOption]:
    """The options with, of each multi-size set, only its best lane's: one-size groups' options pass unchanged.

    Prioritized sets: the lane first in `NodeGroup.lanes` (the user's ranks). Every other strategy
    (LowestPrice, CapacityOptimized, "" for an AKS VirtualMachines pool): the lowest cost per unit of
    work (`cost_per_work`; a lane without a price ranks last), ties to the option placing more work, then to
    fewer nodes, then to `lanes` order.
    The order of the options is kept.
    """
    by_parent: dict[str, list[ExpansionOption]] = {}
    for option in options:
        if option.group.lane:
            by_parent.setdefault(option.group.parent_id, []).append(option)
    if all(len(competing) < 2 for competing in by_parent.values()):
        return list(options)
    winners = {id(min(competing, key=_lane_rank)) for competing in by_parent.values()}
    return [o for o in options if not o.group.lane or id(o) in winners]


def _lane_rank(option: ExpansionOption) -> tuple[object, ...]:
    group = option.group
    order = _lane_index(group)
    if group.allocation_strategy.strip().lower() == PRIORITIZED:
        return (order, option.node_count, group.id)
    cost = cost_per_work(option)
    # At one cost per unit, the option doing more of the work wins: what it leaves would be planned at a cost no
    # lower. Options cut by `cheapest_prefix` tie this way when prices are linear in size (two pods on a D4 cost
    # what one D2 each does).
    return (cost is None, cost if cost is not None else 0, -work_units(option.requested), option.node_count, order,
            group.id)


def _lane_index(group: NodeGroup) -> int:
    """The lane's place in its set's preference order; a size the order does not name comes last."""
    try:
        return group.lanes.index(group.lane)
    except ValueError:
        return len(group.lanes)


def lanes_by_parent(groups: Sequence[NodeGroup]) -> dict[str, list[NodeGroup]]:
    """The lanes of each multi-size set, by the set's id; one-size groups are left out."""
    parents: dict[str, list[NodeGroup]] = {}
    for group in groups:
        if group.lane:
            parents.setdefault(group.parent_id, []).append(group)
    return parents


def set_headroom(lanes: Sequence[NodeGroup]) -> int:
    """Instances the set may still add across all its lanes before its max (see the module docstring)."""
    return max(0, min(g.max_size - g.capacity for g in lanes)) if lanes else 0


def set_minimum(lanes: Sequence[NodeGroup]) -> int:
    """The set's min as its lanes show it: exact when a lane reads a min above 0, else an upper bound."""
    total = sum(g.capacity for g in lanes)
    return max(0, min(g.min_size + total - g.capacity for g in lanes)) if lanes else 0


def max_size_reason(parent_id: str) -> str:
    return f"multi-size group {parent_id} at its max size"


def clip_increases(plan: ScaleUpPlan, groups: Sequence[NodeGroup]) -> ScaleUpPlan:
    """The plan with the increases of one set's lanes trimmed, last first, to what the set's max allows.

    A lane grows the set by `new_target + written_off - capacity` (restarting its stopped instances adds
    none). The pods of what is trimmed become unplaceable ("multi-size group <set> at its max size"): all of
    a dropped increase's, and the last share of a shortened one's (the plan does not say which node holds
    which pod, so the share is in proportion to the nodes taken away).
    """
    parents = lanes_by_parent(groups)
    if not parents:
        return plan
    by_id = {g.id: g for g in groups}
    left = {parent: set_headroom(lanes) for parent, lanes in parents.items()}
    increases: list[_Increase] = list(plan.increases)
    growth: dict[str, int] = {}
    for increase in increases:
        lane = by_id.get(increase.group_id)
        if lane is not None and lane.lane:
            growth[lane.parent_id] = growth.get(lane.parent_id, 0) + _growth(increase.new_target, lane)
    excess = {parent: grown - left[parent] for parent, grown in growth.items() if grown > left[parent]}
    if not excess:
        return plan
    unplaceable = dict(plan.unplaceable)
    for index in range(len(increases) - 1, -1, -1):
        increase = increases[index]
        lane = by_id.get(increase.group_id)
        if lane is None or not lane.lane or excess.get(lane.parent_id, 0) <= 0:
            continue
        grows = _growth(increase.new_target, lane)
        cut = min(grows, excess[lane.parent_id])
        if cut <= 0:
            continue
        excess[lane.parent_id] -= cut
        delta = increase.new_target - increase.current_target
        lost = len(increase.pods) if cut >= delta else -(-len(increase.pods) * cut // max(delta, 1))
        kept_pods = increase.pods[:len(increase.pods) - lost]
        for pod in increase.pods[len(kept_pods):]:
            unplaceable[pod] = max_size_reason(lane.parent_id)
        increases[index] = replace(increase, new_target=increase.new_target - cut, pods=kept_pods)
    return replace(plan, increases=tuple(i for i in increases if i.new_target > i.current_target),
                   unplaceable=unplaceable)


def _growth(new_target: int, lane: NodeGroup) -> int:
    return max(0, new_target + lane.written_off - lane.capacity)


def clip_removals(plan: ScaleDownPlan, groups: Sequence[NodeGroup], *,
                  states: Mapping[str, GroupState] | None = None) -> ScaleDownPlan:
    """The plan with the removals that would take a set below its min, counted across its lanes, kept.

    Removals are admitted in plan order while the set's running instances, less those being removed
    (`states`' removals in flight, when given) and those admitted before, stay at or above the set's min
    (`set_minimum`); the rest go to `kept` with NodeGroupMinSizeReached naming the set.
    """
    parents = lanes_by_parent(groups)
    if not parents or not plan.removals:
        return plan
    by_id = {g.id: g for g in groups}
    floor = {parent: set_minimum(lanes) for parent, lanes in parents.items()}
    room = {
        parent: sum(g.running_target - len((states or {}).get(g.id, GroupState(g.id)).removing) for g in lanes)
        - floor[parent]
        for parent, lanes in parents.items()
    }
    admitted: list[_Removal] = []
    kept = dict(plan.kept)
    for removal in plan.removals:
        lane = by_id.get(removal.group_id)
        if lane is None or not lane.lane:
            admitted.append(removal)
            continue
        if room[lane.parent_id] <= 0:
            kept[removal.node] = KeptReason(reasons.NODE_GROUP_MIN_SIZE_REACHED,
                                            f"multi-size group {lane.parent_id} at its minimum size {floor[lane.parent_id]}")
            continue
        room[lane.parent_id] -= 1
        admitted.append(removal)
    if len(admitted) == len(plan.removals):
        return plan
    return replace(plan, removals=tuple(admitted), kept=kept)
