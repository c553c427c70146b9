"""Scale-down planning: which nodes are unneeded, which to remove now, in which order, and why the rest stay.

Pure module, no side effects. Like cluster-autoscaler's planner, with batch work
protected:

1. A node is a candidate when it belongs to a discovered group, is not opted out,
   and its utilisation (`utilization.node_utilization`) is below its group's
   threshold. A NotReady node is a candidate whatever its utilisation, on the
   unready clock. Measured CPU above SCALE_DOWN_MEASURED_CPU_THRESHOLD keeps it.
2. Its pods are sorted by `drainability`: some pin the node, batch pods are waited
   for, the rest must move.
3. Removing candidates is simulated together, in removal order, on one placement
   state: each candidate's movable pods must pass every scheduler filter on a node
   that stays, taking the room earlier candidates' pods took (shared free capacity
   counts once). PodDisruptionBudgets are counted across the candidates too. A
   candidate that passes gives up its moved pods (`PlacementState.remove_pods`) but
   stays in the state, tainted ToBeDeleted (`NodeView.as_removed`), as cluster-autoscaler
   keeps a removable node in its simulation: under nodeTaintsPolicy's default (Ignore) a
   topology domain it alone held still counts, at 0, so moving a pod out of it (or, for
   later candidates, onto a fuller domain) may break maxSkew and keep the node; a
   constraint that honours taints no longer counts it. The candidate being simulated is
   seen the same way (`spread_departures`).
   Each pod goes to the first node, in a fixed order, that passes; nodes known to
   be full, removed or refused by their labels and taints for pods of its shape
   are not read again (`_Destinations`), which keeps a thousand-node evaluation
   well under a second. When the caller keeps the rotation (`simulated_at`), only a
   pool of the candidates with pods to move is simulated per plan (`_pool`, as
   cluster-autoscaler's --scale-down-candidates-pool-ratio and -min-count), so the
   evaluation grows with the cluster, not with the cluster times its candidates; an
   unneeded node outside the pool keeps its clock but is removed only on a fresh verdict.
   Pending pods are not checked here, node by node: the scale-up simulation places them
   once per equivalence class (`scale_up._classify`) and the nodes it uses are kept.
4. A candidate that passes is unneeded from now on (or since it first was); after
   its group's unneeded (or unready) time it is removed, unless a guard rail says
   otherwise: the group's minimum, cooldowns, the cluster's minimum cores and
   memory, MAX_SCALE_DOWN_PARALLELISM.
5. A forced node (`ScaleDownOptions.forced`: its replacement is Ready, engine.replacement) is a
   candidate whatever its utilisation or measured CPU, due at once (no unneeded wait, no delay after
   a scale-up: that scale-up was its replacement) and removed when its movable pods fit elsewhere, as
   any other; a forced node running batch pods is kept until they end. Its Removal carries the reason.

Order of removal: empty nodes first, then the nodes whose pods are cheapest to
move (fewest pods, then least utilised, then oldest), then the nodes whose batch
pods end soonest. Never newest first.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from shared.domain import ClusterSnapshot, GroupState, Node, NodeGroup, Pod, Resources
from shared.engine import reasons
from shared.engine.cooldowns import ScaleDownDelays, scale_down_blocked
from shared.engine.drainability import DO_NOT_DISRUPT, Budgets, DrainRules, NodeDrain, drain_of
from shared.engine.idle import BREAK_EVEN, DEFAULT_BOOT, FIXED, break_even_time, parse_idle_mode, resolve_idle_mode
from shared.engine.standby import start_estimate
from shared.engine.limits import ClusterLimits, at_min_size, cluster_totals, removal_blocked
from shared.engine.placement import NodeView, PlacementState
from shared.engine.pod_rules import is_virtual_node
from shared.engine.predicates import (
    check,
    node_unschedulable,
    pod_affinity_mismatch,
    pod_requests,
    spread_departures,
    static_mismatch,
    topology_spread_mismatch,
    unsupported_construct,
)
from shared.engine.reasons import KeptReason
from shared.engine.scale_up import existing_placements, pending_pods, simulate_scale_up
from shared.engine.utilization import Utilization, UtilizationRules, node_utilization
from shared.quantities import parse_duration

SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
# Kept reason of a forced node (its replacement Ready) that runs batch pods: it waits for them to end.
BATCH_PODS_RUNNING = "BatchPodsRunning"
OPTIONS_TAG = "k8s.io_cluster-autoscaler_node-template_autoscaling-options_"


def node_pin(node: Node) -> str:
    """The node annotation that keeps replacements (drift, consolidation) off it, as `<key>=true`; "" when none:
    Karpenter's `karpenter.sh/do-not-disrupt` or cluster-autoscaler's scale-down-disabled."""
    for key in (DO_NOT_DISRUPT, SCALE_DOWN_DISABLED):
        if node.annotations.get(key) == "true":
            return f"annotation {key}=true"
    return ""


@dataclass(frozen=True, slots=True)
class ScaleDownOptions:
    unneeded_time: timedelta = timedelta(minutes=10)
    unready_time: timedelta = timedelta(minutes=20)
    max_parallelism: int = 10
    delays: ScaleDownDelays = ScaleDownDelays()
    utilization: UtilizationRules = UtilizationRules()
    drain: DrainRules = DrainRules()
    measured_cpu_threshold: float = 0.5  # SCALE_DOWN_MEASURED_CPU_THRESHOLD
    limits: ClusterLimits = ClusterLimits()
    deallocated_max: int = 10  # SCALE_DOWN_DEALLOCATED_MAX, with SCALE_DOWN_MODE=deallocate
    # SCALE_DOWN_IDLE_MODE: auto | fixed | break-even (engine.idle); the engine's default is cluster-autoscaler's,
    # the app's (shared.settings) is auto.
    idle_mode: str = FIXED
    default_boot: timedelta = DEFAULT_BOOT  # a group's boot estimate before its first measured boot
    # Groups whose warm standby takes the next idle node (services.standby.with_standby_room): in break-even
    # mode their unneeded time is the start estimate (engine.standby), as the node comes back in a start.
    standby_room: frozenset[str] = frozenset()
    # The candidate pool (cluster-autoscaler's --scale-down-candidates-pool-ratio and -min-count): at most
    # max(ceil(ratio x nodes), min_count) candidates with pods to move are simulated per plan; see `_pool`.
    candidates_pool_ratio: float = 0.1  # SCALE_DOWN_CANDIDATES_POOL_RATIO
    candidates_pool_min_count: int = 50  # SCALE_DOWN_CANDIDATES_POOL_MIN_COUNT
    # Nodes whose replacement is Ready (engine.replacement.ready_replacements), node -> disruption reason
    # (shared.domain.REPLACE or DRIFTED): candidates now whatever their utilisation (see the module's item 5).
    forced: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.candidates_pool_ratio <= 1:
            raise ValueError(f"candidates_pool_ratio must be above 0 and at most 1, got {self.candidates_pool_ratio}")
        if self.candidates_pool_min_count < 1:
            raise ValueError(f"candidates_pool_min_count must be at least 1, got {self.candidates_pool_min_count}")

    def pool_size(self, nodes: int) -> int:
        """Candidates with pods to move simulated per plan in a cluster of `nodes` nodes (as CA counts it)."""
        return max(math.ceil(self.candidates_pool_ratio * nodes), self.candidates_pool_min_count)


@dataclass(frozen=True, slots=True)
class Removal:
    node: str
    group_id: str
    provider_id: str
    unneeded_since: datetime
    kind: str  # "empty" | "drain" (pods to move) | "batch" (batch pods to wait for) | "unready"
    utilization: float
    node_age: timedelta
    move: tuple[str, ...] = ()  # pods to evict
    wait: tuple[str, ...] = ()  # batch pods the node waits for
    instance_id: str = ""  # the node's instance in its group, as node mapping found it
    # The disruption's reason (shared.domain.DISRUPTION_REASONS) where it is not the kind's own (a forced
    # replacement or drift drain): "" derives it (engine.disruption_budgets.removal_reason).
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ScaleDownPlan:
    unneeded: Mapping[str, datetime] = field(default_factory=dict)  # the new unneeded-since map
    removals: tuple[Removal, ...] = ()
    kept: Mapping[str, KeptReason] = field(default_factory=dict)  # candidates not removed now, and why
    # Candidate -> when its removal was last simulated (this plan's `now` for those simulated now): what the
    # caller hands the next plan as `simulated_at`, so the candidate pool rotates. Empty without a pool.
    simulated_at: Mapping[str, datetime] = field(default_factory=dict)


# --- per-group rules from the scale set's tags --------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupRules:
    threshold: float
    gpu_threshold: float
    unneeded_time: timedelta
    unready_time: timedelta
    deallocated_max: int = 10
    after_add: timedelta = timedelta(minutes=10)  # the group's scale-down delay after a scale-up
    idle_mode: str = FIXED

    def delays(self, options: ScaleDownOptions) -> ScaleDownDelays:
        """The cooldowns the group's scale-down waits out: the options', with this group's delay after a scale-up."""
        return replace(options.delays, after_add=self.after_add)

    def wait(self, *, unready: bool) -> timedelta:
        """How long a node of the group is unneeded before it may go: the unready time for a NotReady node."""
        return self.unready_time if unready else self.unneeded_time


def group_rules(group: NodeGroup, options: ScaleDownOptions, state: GroupState | None = None) -> GroupRules:
    """The options' values, overridden by CA's `autoscaling-options` tags on the scale set.

    The idle mode (SCALE_DOWN_IDLE_MODE, or the group's `scaledownidlemode` tag) is resolved for the group
    (`idle.resolve_idle_mode`: `auto` is fixed on GPU sizes, break-even on others). In break-even mode, the
    unneeded time and the delay after a scale-up are the group's break-even time (engine.idle) from
    the boots measured in `state`; a `scaledownunneededtime` tag on the group still wins over it for
    the unneeded time: the operator wrote that number for that group.

    A malformed tag raises ValueError naming the tag and the group: the poll reports it
    rather than scale a group down by a rule its operator did not write.
    """
    rules = GroupRules(options.utilization.threshold, options.utilization.gpu_threshold,
                       options.unneeded_time, options.unready_time, options.deallocated_max,
                       after_add=options.delays.after_add, idle_mode=options.idle_mode)
    tags = {k.lower(): v for k, v in group.tags.items() if k.lower().startswith(OPTIONS_TAG)}
    parsers = {
        "scaledownutilizationthreshold": ("threshold", _fraction),
        "scaledowngpuutilizationthreshold": ("gpu_threshold", _fraction),
        "scaledownunneededtime": ("unneeded_time", parse_duration),
        "scaledownunreadytime": ("unready_time", parse_duration),
        "scaledowndeallocatedmax": ("deallocated_max", _count),  # ours: CA has no deallocate mode
        "scaledownidlemode": ("idle_mode", parse_idle_mode),  # ours: CA's unneeded time is always fixed
    }
    for key, value in tags.items():
        option = key[len(OPTIONS_TAG):]
        if option not in parsers:
            continue  # options we do not implement per group (ignoredaemonsetsutilization...) keep the global value
        attr, parse = parsers[option]
        try:
            rules = replace(rules, **{attr: parse(value)})
        except ValueError as exc:
            raise ValueError(f"scale set {group.id}: tag {key}: {exc}") from exc
    rules = replace(rules, idle_mode=resolve_idle_mode(rules.idle_mode, vm_size=group.vm_size))
    if rules.idle_mode == BREAK_EVEN:
        keep = break_even_time(state.boots if state is not None else (), default=options.default_boot)
        tagged = OPTIONS_TAG + "scaledownunneededtime" in tags
        # The same rent-or-buy rule when the idle node goes into the group's standby: coming back costs a
        # start, not a boot, so it is kept a start's worth (engine.standby.start_estimate: measured starts, else
        # half the boot), never longer than a boot's.
        starts = state.starts if state is not None else ()
        idle = min(start_estimate(keep, starts), keep) if group.id in options.standby_room else keep
        # A node just added is not judged idle before it could have been used: the group's other
        # nodes wait one boot after a scale-up too, no longer (its pods may land on them meanwhile).
        rules = replace(rules, after_add=keep, unneeded_time=rules.unneeded_time if tagged else idle)
    return rules


def _count(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise ValueError(f"{text!r} is negative")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise ValueError(f"{text!r} is not between 0 and 1")
    return value


# --- the plan ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Candidate:
    node: Node
    group: NodeGroup
    drain: NodeDrain
    utilization: Utilization
    unready: bool
    forced: str = ""  # the disruption reason of a forced candidate; "" for the others

    @property
    def kind(self) -> str:
        if self.unready:
            return "unready"
        if self.drain.wait:
            return "batch"
        return "drain" if self.drain.move else "empty"


def plan_scale_down(
    snapshot: ClusterSnapshot,
    *,
    unneeded_since: Mapping[str, datetime],
    group_states: Mapping[str, GroupState],
    now: datetime,
    options: ScaleDownOptions = ScaleDownOptions(),
    measured_cpu: Mapping[str, float] | None = None,
    pending_placements: Mapping[str, Sequence[str]] | None = None,
    simulated_at: Mapping[str, datetime] | None = None,
    state: PlacementState | None = None,
) -> ScaleDownPlan:
    """`measured_cpu`: node -> measured CPU usage (0..1) from Azure Monitor; None when no source answered.

    `pending_placements`: node -> the pending pods the scale-up simulation placed in its free
    room (`scale_up.existing_placements`); only those nodes are kept for pending pods. Callers
    that ran the simulation pass its result (one simulation, with their scale-up options); None
    runs it here with the default options, on the plan's own placement state.

    `simulated_at`: the previous plan's `simulated_at`, which bounds the simulation to the
    candidate pool (`_pool`, ScaleDownOptions.candidates_pool_*) and rotates it from plan to
    plan. None simulates every candidate: a caller that keeps no memory of earlier plans could
    not rotate the pool, and a pool that never rotates would never look at some candidates.

    `state`: the observed cluster as `scale_up.initial_state(snapshot)` builds it, when the
    caller already built it for this poll's scale-up simulation (which leaves it as found); the
    plan then changes it (moved pods placed, removed candidates dropped). None builds one.
    """
    groups = {g.id: g for g in snapshot.groups}
    rules = {g.id: group_rules(g, options, group_states.get(g.id)) for g in snapshot.groups}
    utilization_rules = {
        gid: replace(options.utilization, threshold=r.threshold, gpu_threshold=r.gpu_threshold)
        for gid, r in rules.items()
    }
    if state is None:
        state = PlacementState.from_cluster((NodeView.of(n) for n in snapshot.nodes), snapshot.pods)
    in_flight = {node for group_state in group_states.values() for node in group_state.removing}
    if pending_placements is None:
        # The same placement state: the scale-up simulation leaves it as found, so it is built once.
        pending_placements = (existing_placements(simulate_scale_up(snapshot, state=state))
                              if pending_pods(snapshot) else {})

    kept: dict[str, KeptReason] = {}
    candidates: list[_Candidate] = []
    for node in snapshot.nodes:
        ref = node.instance
        if ref is None or ref.group_id not in groups or is_virtual_node(node):
            continue  # never touch a node we cannot map to an instance of a discovered group
        group = groups[ref.group_id]
        pods = state.pods_on(node.name)
        used = node_utilization(node, pods, rules=utilization_rules[group.id], now=now)
        if node.name in in_flight or node.is_being_deleted:
            continue  # its removal is under way; the executor owns it
        if node.annotations.get(SCALE_DOWN_DISABLED) == "true":
            kept[node.name] = KeptReason(reasons.SCALE_DOWN_DISABLED_ANNOTATION,
                                         f"annotation {SCALE_DOWN_DISABLED}=true")
            continue
        if node.unschedulable:
            kept[node.name] = KeptReason(reasons.CORDONED_BY_OTHERS, "cordoned by someone else")
            continue
        unready = not node.ready
        forced = options.forced.get(node.name, "")
        if not unready and not used.low and not forced:
            continue  # needed: not a candidate, nothing to report
        if not unready and not forced and measured_cpu is not None and node.name in measured_cpu:
            measured = measured_cpu[node.name]
            if measured > options.measured_cpu_threshold:
                kept[node.name] = KeptReason(reasons.MEASURED_CPU_HIGH,
                                             f"measured CPU {measured:.2f} above {options.measured_cpu_threshold:.2f} "
                                             f"({used.describe()} by requests)")
                continue
        drain = drain_of(pods, options.drain, snapshot.disruption_budgets, now=now)
        if drain.pinned_by is not None:
            kept[node.name] = drain.pinned_by
            continue
        if forced and drain.wait:
            # A replacement never cuts batch work short: the node leaves once its batch pods have ended.
            kept[node.name] = KeptReason(BATCH_PODS_RUNNING, f"{forced}: waits for {len(drain.wait)} batch pod(s) "
                                                             "to end before its drain")
            continue
        if forced:
            # Its replacement is Ready: pending pods go there (or to new capacity), not back onto it.
            candidates.append(_Candidate(node, group, drain, used, unready, forced))
            continue
        # Only pods the scale-up simulation would put here, with every filter and the room other
        # pending pods take, keep a node: a pod no node or group can hold keeps none (it stays
        # reported as unplaceable by the pending poll).
        held = pending_placements.get(node.name, ())
        if not unready and held:
            kept[node.name] = KeptReason(reasons.PENDING_PODS_COULD_USE,
                                         f"pending pods would run here: {', '.join(list(held)[:3])}"
                                         + (f" and {len(held) - 3} more" if len(held) > 3 else ""))
            continue
        candidates.append(_Candidate(node, group, drain, used, unready))

    slots_held = _slots_held(group_states, state, snapshot, options, now=now)  # before the simulation moves pods
    # Forced candidates first: they are due now, and an idle node simulated before them could take the room
    # their pods need while it only starts its unneeded clock.
    candidates.sort(key=lambda c: (not c.forced, _removal_order(c)))
    if simulated_at is None:
        simulated, unsimulated = candidates, []
    else:
        simulated, unsimulated = _pool(candidates, options.pool_size(len(snapshot.nodes)), unneeded_since,
                                       simulated_at, rules, now=now)
    unneeded_order = _simulate_removal(snapshot, state, simulated, kept, staying=unsimulated)
    unneeded = {c.node.name: unneeded_since.get(c.node.name, now) for c in unneeded_order}
    # Outside today's pool: an unneeded node keeps its clock (its verdict is renewed when its turn
    # comes) but is never removed on that old verdict; the others wait for their turn.
    last_simulated = simulated_at or {}
    for candidate in unsimulated:
        name = candidate.node.name
        last = last_simulated.get(name)
        when = f"last simulated {last.isoformat()}" if last is not None else "never simulated yet"
        if name in unneeded_since:
            unneeded[name] = unneeded_since[name]
            kept[name] = KeptReason(reasons.NOT_SIMULATED, f"unneeded since {unneeded_since[name].isoformat()}, {when}; "
                                                   "removable only once simulated again (candidate pool)")
        else:
            kept[name] = KeptReason(reasons.NOT_SIMULATED, f"outside this poll's candidate pool, {when}")
    removals = _choose(_round_robin(unneeded_order), unneeded, group_states, rules, snapshot, kept, now=now,
                       options=options, slots_held=slots_held)
    rotation = {} if simulated_at is None else {
        **{c.node.name: simulated_at[c.node.name] for c in unsimulated if c.node.name in simulated_at},
        **{c.node.name: now for c in simulated},
    }
    return ScaleDownPlan(unneeded=unneeded, removals=tuple(removals), kept=kept, simulated_at=rotation)


def _pool(
    candidates: Sequence[_Candidate],
    size: int,
    unneeded_since: Mapping[str, datetime],
    simulated_at: Mapping[str, datetime],
    rules: Mapping[str, GroupRules],
    *,
    now: datetime,
) -> tuple[list[_Candidate], list[_Candidate]]:
    """The candidates to simulate now (removal order kept) and those left for a later plan.

    As cluster-autoscaler bounds its simulation with --scale-down-candidates-pool-ratio and
    -min-count, at most `size` candidates with pods to move are simulated per plan; empty ones
    (and those that only wait for batch pods) cost next to nothing and always are. The pool is
    chosen so that a removal is never late and no candidate is forgotten:

    1. unneeded nodes whose unneeded (or unready) time is over: their fresh verdict decides a
       removal now; at most half the pool, so nodes that stay due for long (a group at its
       minimum) cannot take every turn;
    2. then the candidates not simulated for longest, never simulated first; on ties the ones
       already unneeded (their clock runs), then removal order.

    So every candidate is simulated at least once every ceil(n / (size - size // 2)) plans, and
    every ceil(n / size) plans while none is due. CA (core/scale_down.go) sizes its pool the
    same way, on the cluster's node count, but re-simulates every unneeded node each loop, takes
    the pool's others only while fewer than --scale-down-non-empty-candidates-count (30) are
    unneeded, and rotates by skipping a node found unremovable for
    --unremovable-node-recheck-timeout (5 min); a node it does not simulate loses its timer.
    """
    # A forced candidate (its replacement is Ready) is always simulated: it is due, and waiting for its turn
    # would keep two nodes running for one.
    heavy = [c for c in candidates if c.drain.move and not c.forced]
    if len(heavy) <= size:
        return list(candidates), []
    order = {c.node.name: i for i, c in enumerate(candidates)}
    oldest = datetime.min.replace(tzinfo=now.tzinfo)

    def staleness(candidate: _Candidate) -> tuple[datetime, bool, int]:
        name = candidate.node.name
        return (simulated_at.get(name, oldest), name not in unneeded_since, order[name])

    def due(candidate: _Candidate) -> bool:
        since = unneeded_since.get(candidate.node.name)
        if since is None:
            return False
        return now - since >= rules[candidate.group.id].wait(unready=candidate.unready)

    chosen = {c.node.name for c in sorted(filter(due, heavy), key=staleness)[: size // 2]}
    rest = sorted((c for c in heavy if c.node.name not in chosen), key=staleness)
    chosen.update(c.node.name for c in rest[: size - len(chosen)])
    simulated = [c for c in candidates if not c.drain.move or c.forced or c.node.name in chosen]
    return simulated, [c for c in heavy if c.node.name not in chosen]


def _slots_held(group_states: Mapping[str, GroupState], state: PlacementState, snapshot: ClusterSnapshot,
                options: ScaleDownOptions, *, now: datetime) -> int:
    """Removals in flight that hold a MAX_SCALE_DOWN_PARALLELISM slot.

    Not a removal whose delete is committed: only ARM is left to do, and its write budget is the
    executor's business, not a drain's. Not one that only waits for batch pods to finish: nothing
    is evicted there, and a node that is removable at once must never wait for a slot behind a
    node that waits for a 40-minute render (item 3 of issue 14). What is left drains pods now.
    """
    held = 0
    for group_state in group_states.values():
        for node in group_state.removing:
            if node in group_state.committed:
                continue
            drain = drain_of(state.pods_on(node), options.drain, snapshot.disruption_budgets, now=now)
            if drain.wait and not drain.move:
                continue
            held += 1
    return held


def _round_robin(order: Sequence[_Candidate]) -> list[_Candidate]:
    """The removal order with pools taking turns within each tier, each pool's own order kept.

    Sorted oldest first across pools, one pool with older nodes would take every slot for poll
    after poll while the others wait; in turns, every pool progresses every round.
    """
    turns: dict[tuple[object, str], int] = {}
    keyed = []
    for index, candidate in enumerate(order):
        tier = _removal_order(candidate)[0]
        turn = turns[(tier, candidate.group.id)] = turns.get((tier, candidate.group.id), -1) + 1
        keyed.append(((tier, turn, index), candidate))
    return [candidate for _, candidate in sorted(keyed, key=lambda item: item[0])]


def _removal_order(candidate: _Candidate) -> tuple[object, ...]:
    """Empty first, then cheapest to move, then batch nodes whose work ends soonest; oldest node on ties."""
    drain, node = candidate.drain, candidate.node
    tier = {"unready": 0, "empty": 0, "drain": 1, "batch": 2}[candidate.kind]
    ends = max((_expected_end(p) for p in drain.wait), default=0.0)
    return (tier, ends, len(drain.move), candidate.utilization.value, node.created_at, node.name)


def _expected_end(pod: Pod) -> float:
    """When a batch pod will be done, as a timestamp; infinity when nothing bounds it."""
    if pod.started_at is not None and pod.active_deadline_seconds is not None:
        return pod.started_at.timestamp() + pod.active_deadline_seconds
    return math.inf


def _simulate_removal(
    snapshot: ClusterSnapshot, state: PlacementState, candidates: Sequence[_Candidate], kept: dict[str, KeptReason],
    *, staying: Sequence[_Candidate] = (),
) -> list[_Candidate]:
    """The candidates whose movable pods fit elsewhere, with every earlier such candidate removed too.

    Moved pods are placed on `state` for good: later candidates see the room they took.
    `staying`: candidates left out of this plan's pool; they stay, as far as this plan knows.
    """
    received: dict[str, str] = {}  # candidate -> a node whose pods it takes in this plan
    # Nodes that stay come first; then the candidates outside the pool (they may go in a later
    # plan); then candidates, last to be removed first, so pods move onto the nodes least likely to go.
    rank = {c.node.name: i for i, c in enumerate(candidates)}
    later = {c.node.name for c in staying}
    destinations = _Destinations(
        sorted(
            (n.name for n in snapshot.nodes
             if n.ready and not n.unschedulable and not n.is_being_deleted and not is_virtual_node(n)),
            key=lambda name: (name in rank, name in later, -rank.get(name, 0), name),
        ),
        state,
    )
    budgets = Budgets(snapshot.disruption_budgets)
    passed: list[_Candidate] = []
    for candidate in candidates:
        name = candidate.node.name
        if name in received:
            # The plan moved pods here; removing it too would need those pods to move again.
            kept[name] = KeptReason(reasons.RECEIVES_MOVED_PODS,
                                    f"takes the pods of {received[name]}, removed before it")
            continue
        short = budgets.short(candidate.drain.move)
        if short is not None:
            kept[name] = short
            continue
        checkpoint = state.checkpoint()
        blocked: KeptReason | None = None
        for pod in sorted(candidate.drain.move, key=lambda p: (-pod_requests(p).cpu_milli, p.key)):
            requests = pod_requests(pod)
            # The pod's copy on the candidate still counts in the state: conservative for
            # anti-affinity, never optimistic. Topology spread reads the candidate as CA's
            # simulation keeps it: without its moving pods, tainted ToBeDeleted (`spread_departures`).
            moving = replace(pod, node_name=None)
            target = destinations.first_fit(moving, requests, leaving=name, moving=candidate.drain.move)
            if target is None:
                blocked = KeptReason(reasons.NO_PLACE_TO_MOVE_PODS, f"no other node can take pod {pod.key}")
                break
            state.place(moving, target, requests)
        if blocked is not None:
            destinations.give_back(state.placed_since(checkpoint))
            state.rollback(checkpoint)
            kept[name] = blocked
            continue
        for placed in state.placed_since(checkpoint):
            received.setdefault(placed, name)
        budgets.take(candidate.drain.move)
        destinations.remove(name)
        # Its moved pods' copies no longer count for spread or anti-affinity; the node stays, tainted
        # ToBeDeleted as in cluster-autoscaler's simulation, so for the later candidates its domains stay
        # domains under the default nodeTaintsPolicy (Ignore) and leave those that honour taints.
        state.remove_pods(name, candidate.drain.move)
        state.replace_node(state.node(name).as_removed())
        passed.append(candidate)
    return passed


class _Destinations:
    """The nodes that may take moved pods, in the order they are tried: the first that passes every filter wins.

    Without help, a simulation spends its time re-reading nodes a pod can never use: the
    nodes that stay come first and fill up first, so every later pod would walk past them
    again, and a pod bound to one tier would re-read every node of the others. Three facts
    let it skip them without changing a single choice:

    - a node's static filters (labels, taints) give the same answer to every pod of one
      shape (`_shape`), for the whole plan;
    - a node's room only shrinks as pods are placed, until a rollback gives some back;
    - a removed node never comes back.

    So per pod shape and request size we keep the position before which no node can
    take such a pod (`_first_room`); a rollback moves those positions back to the first
    node it gave room to.
    """

    def __init__(self, names: Sequence[str], state: PlacementState) -> None:
        self.names = names
        self.state = state
        self._removed: set[str] = set()
        self._position = {name: i for i, name in enumerate(names)}
        self._first_room: dict[tuple[Resources, Hashable], int] = {}
        self._static: dict[Hashable, dict[str, bool]] = {}  # shape -> node -> passes the static filters

    def first_fit(self, pod: Pod, requests: Resources, *, leaving: str, moving: Sequence[Pod]) -> str | None:
        """The first node (other than `leaving`, the pod's own) that can take `pod` now, or None.

        `moving`: every pod leaving `leaving` with this one, as observed there (topology spread counts them gone).
        """
        state, removed, first_room = self.state, self._removed, self._first_room
        shape = _shape(pod)
        kind = (requests, shape)
        static = self._static.setdefault(shape, {})
        # Spread and pod affinity read only the node's values of their topology keys, and
        # nothing is placed during one scan: a domain that fails them once fails for all its nodes.
        topology_keys = _topology_keys(pod)
        departures = spread_departures(pod, state, leaving, moving)  # `moving` gone, `leaving` tainted ToBeDeleted
        failed_domains: set[tuple[str | None, ...]] = set()
        full_so_far = True  # no node up to here can take a pod of this shape and size
        for i in range(first_room.get(kind, 0), len(self.names)):
            name = self.names[i]
            if name in removed:
                if full_so_far:
                    first_room[kind] = i + 1
                continue
            view = state.node(name)
            # Lasting verdicts first: while every node so far failed one, the next pod of this
            # shape and size may start after them.
            passes = static.get(name)
            if passes is None:
                passes = static[name] = not (unsupported_construct(pod) or node_unschedulable(pod, view)
                                             or static_mismatch(pod, view.labels, view.taints, name))
            if not passes or not state.fits(requests, view):
                if full_so_far:
                    first_room[kind] = i + 1
                continue
            full_so_far = False
            if name == leaving:
                continue
            if topology_keys:
                domain = tuple([view.labels.get(key) for key in topology_keys])
                if domain in failed_domains:
                    continue
                if (topology_spread_mismatch(pod, view, state, departures=departures)
                        or pod_affinity_mismatch(pod, view, state)):
                    failed_domains.add(domain)
                    continue
            # Every filter, in the scheduler's order (ports and anti-affinity are not checked above).
            if check(pod, view, state, requests, departures=departures) is None:
                return name
        return None

    def remove(self, name: str) -> None:
        """The candidate `name` goes: no pod moves onto it from now on."""
        self._removed.add(name)

    def give_back(self, nodes: Iterable[str]) -> None:
        """`nodes` are about to get room back (a rollback): nodes before them stay full, they may not."""
        first = min((self._position[n] for n in nodes), default=None)
        if first is None:
            return
        for kind, position in self._first_room.items():
            if position > first:
                self._first_room[kind] = first


def _shape(pod: Pod) -> Hashable:
    """What the static filters read of a pod: pods of one shape pass or fail them on the same nodes."""
    return (tuple(sorted(pod.node_selector.items())), pod.node_affinity, pod.tolerations, pod.unsupported)


def _topology_keys(pod: Pod) -> tuple[str, ...]:
    """The node labels the pod's spread constraints (DoNotSchedule) and required affinity terms read."""
    if not pod.topology_spread and not pod.pod_affinity:
        return ()  # most pods
    keys = {c.topology_key for c in pod.topology_spread if c.is_filter} | {t.topology_key for t in pod.pod_affinity}
    return tuple(sorted(keys))


def _choose(
    unneeded_order: Sequence[_Candidate],
    unneeded: Mapping[str, datetime],
    group_states: Mapping[str, GroupState],
    rules: Mapping[str, GroupRules],
    snapshot: ClusterSnapshot,
    kept: dict[str, KeptReason],
    *,
    now: datetime,
    options: ScaleDownOptions,
    slots_held: int,
) -> list[Removal]:
    """The unneeded nodes due for removal now, in removal order, within every guard rail.

    `slots_held`: removals in flight that count against MAX_SCALE_DOWN_PARALLELISM (`_slots_held`).
    """
    budget = options.max_parallelism - slots_held
    refused_for_slots = False  # a node removable at once was turned away for want of a slot
    planned: dict[str, int] = {}
    totals = cluster_totals(snapshot)
    removals: list[Removal] = []
    for candidate in unneeded_order:
        node, group = candidate.node, candidate.group
        name = node.name
        since = unneeded[name]
        wait_for = timedelta(0) if candidate.forced else rules[group.id].wait(unready=candidate.unready)
        if now - since < wait_for:
            state = "unready" if candidate.unready else "unneeded"
            code = reasons.NOT_UNREADY_LONG_ENOUGH if candidate.unready else reasons.NOT_UNNEEDED_LONG_ENOUGH
            kept[name] = KeptReason(code, f"{state} for {int((now - since).total_seconds())}s "
                                          f"of {int(wait_for.total_seconds())}s")
            continue
        state = group_states.get(group.id, GroupState(group.id))
        delays = rules[group.id].delays(options)
        if candidate.forced:
            delays = replace(delays, after_add=timedelta(0))  # the scale-up was its own replacement
        blocked = scale_down_blocked(state, now=now, delays=delays)
        if blocked:
            kept[name] = KeptReason(reasons.SCALE_DOWN_COOLDOWN, blocked)
            continue
        if at_min_size(group, running=group.running_target, removing=len(state.removing) + planned.get(group.id, 0)):
            kept[name] = KeptReason(reasons.NODE_GROUP_MIN_SIZE_REACHED,
                                    f"group {group.id} at its minimum size {group.min_size}")
            continue
        if state.throttled_until is not None and now < state.throttled_until:
            # A slot given to this group now would end in a throttled delete (one call more against the spent
            # budget): it goes to another group, and this group's nodes go in a bigger batch once ARM allows.
            kept[name] = KeptReason(reasons.ARM_THROTTLED, f"ARM throttles removals from {group.id} until "
                                    f"{state.throttled_until.isoformat()}")
            continue
        limit = removal_blocked(node.allocatable, totals=totals, limits=options.limits)
        if limit:
            kept[name] = KeptReason(reasons.MINIMAL_RESOURCE_LIMIT_EXCEEDED, limit)
            continue
        if budget <= 0 and candidate.kind != "batch":
            refused_for_slots = True
            kept[name] = KeptReason(reasons.MAX_PARALLELISM_REACHED,
                                    f"MAX_SCALE_DOWN_PARALLELISM ({options.max_parallelism}) nodes already being removed")
            continue
        if budget <= 0 or (candidate.kind == "batch" and refused_for_slots):
            # A node that would only wait for batch pods takes a slot only when no node removable at
            # once was turned away for want of one; it stays unneeded (soft-tainted) meanwhile.
            kept[name] = KeptReason(reasons.MAX_PARALLELISM_REACHED, "waits for batch pods; the slots go to nodes "
                                    "removable at once")
            continue
        removals.append(Removal(
            node=name, group_id=group.id, provider_id=node.provider_id,
            instance_id=node.instance.instance_id if node.instance is not None else "",
            unneeded_since=since, kind=candidate.kind,
            utilization=candidate.utilization.value, node_age=now - node.created_at,
            move=tuple(p.key for p in candidate.drain.move), wait=tuple(p.key for p in candidate.drain.wait),
            reason=candidate.forced,
        ))
        planned[group.id] = planned.get(group.id, 0) + 1
        totals = totals.plus(-1, node.allocatable)
        budget -= 1
    return removals
