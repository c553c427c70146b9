"""`nap`: an emulation of Karpenter as AKS Node Auto Provisioning (NAP) runs it, with its documented defaults.

Sources (read, not copied): kubernetes-sigs/karpenter (core; NAP pins v1.14, Azure/karpenter-provider-azure go.mod),
Azure/karpenter-provider-azure, AKS docs `node-auto-provisioning-node-pools.md` and
`node-auto-provisioning-disruption.md` (MicrosoftDocs/azure-aks-docs), karpenter.sh "Settings" and "Disruption";
../shared/facts/capacity-ahead-gangs-sizes.md (Karpenter section).

Sizes. Every VM size NAP may choose is its own scale set from 0 in the replay's world (`pools.nap_pools`: D2s_v5 to
D64s_v5, plus the run's GPU sizes); a NodeClaim is one instance added to its size's scale set. NAP creates standalone
VMs, so this is a model: their boots are drawn from the same distribution as every policy's nodes, the instances a
batch launches in one size are one capacity change (one ARM write, not one per VM), and `scale_actions` counts
NodeClaims launched plus nodes deleted (NAP acts per node). The default NodePool takes the D family
(`karpenter.azure.com/sku-family In [D]`, on-demand, `expireAfter: Never`); GPU pods go to a second NodePool of the
GPU sizes (NAP's default takes no GPU size: an operator adds one) with the same disruption defaults.

Provisioning (core `pkg/controllers/provisioning`). Pending pods are batched: a window opens with the first pending
pod and closes after BATCH_IDLE_DURATION (1 s) without a new one or BATCH_MAX_DURATION (10 s) after it opened
(karpenter.sh settings). Every trace arrival is taken as a pending-pod event (a watch sees it at once; the world may
bind it at once, then the window is extended for nothing, by at most the idle time); besides, the pending pods are
looked at every disruption poll (10 s), which catches replacements of evicted pods. The batch is solved as the
scheduler does (`scheduling/scheduler.go`, `queue.go`): pods by CPU then memory, largest first; each goes to the first
existing node that fits (initialized ones first, then nodes still booting and NodeClaims in flight, whose pods are
the pending ones they were launched for), else to the in-flight new NodeClaim with the fewest pods that some size of
its NodePool can still hold with it, else to a new NodeClaim. Pods on nodes being disrupted are scheduled too.
Each new NodeClaim launches its cheapest size that fits its pods (the Azure provider ranks offerings by price,
`pkg/providers/allocationstrategy/stages/offering_rank.go`). NodePool limits: none by default (NAP_LIMIT_CPU).
A size whose launch fails is skipped for 3 min (`UnavailableOfferingsTTL`, provider `pkg/cache/cache.go`); a NodeClaim
not registered after 15 min is given up (core's registration TTL).

Disruption (core `pkg/controllers/disruption`). A loop every 10 s (`pollingPeriod`) runs one method that finds a
command, in order: emptiness (every empty candidate, budget permitting), multi-node consolidation (the largest prefix
of at most 100 candidates, by binary search, that its pods leave with at most one cheaper replacement), single-node
consolidation (the first candidate, delete or replace by one cheaper node; a multi-node replacement of a size
some candidate has is refused, Karpenter's `filterOutSameInstanceType` simplified). Candidates are initialized nodes that
are consolidatable: `consolidateAfter` passed since the last pod bound to or left the node, or since it came up
(NAP's default NodePool leaves it unset, so the CRD default `0s`: NAP_CONSOLIDATE_AFTER), with no pod annotated
`karpenter.sh/do-not-disrupt: "true"` (the trace's pods carry none) and none whose PodDisruptionBudget refuses an
eviction; ordered by disruption cost (pods on the node, fewest first: no pod deletion cost or priority here). The
simulation places the candidates' pods with the pending ones, on the other nodes and NodeClaims; a candidate pod that
would land on a node not yet initialized, or on nowhere, defeats the command. The command waits 15 s
(`commandValidationDelay`) and is executed only if still valid. Disruption budgets per NodePool: default one budget
`nodes: 10%` (CRD default; the AKS default NodePool sets none): allowed = ceil(10 % of initialized nodes) - nodes
being disrupted or NotReady (`BuildDisruptionBudgetMapping`). Execution: candidates tainted `karpenter.sh/disrupted`
(NoSchedule); a replacement is launched and waited for (initialized) first; then each candidate's pods are evicted
through the Eviction API, PodDisruptionBudgets respected (a refusal is retried), and the VM deleted once its pods are
gone. **Job pods are evicted** like any other (Karpenter has no rule for them): they die, their Job makes a new pod,
and the world counts them killed with their lost work, as it does for ca's drains.

Approximations, all stated in the run's `assumptions`: pending pods are placed before the candidates' pods in a
consolidation simulation (the kube-scheduler found no initialized node for them, so they compete with the candidates'
pods only on nodes still booting, where a candidate pod defeats the command anyway); a pod leaving a node is noticed
at the next loop (up to 10 s late; binding times are exact); no drift, expiry, spot or topology.

Settings (ReplayConfig.peer_settings): NAP_CONSOLIDATE_AFTER (a duration, or "Never"), NAP_CONSOLIDATION_POLICY
(WhenEmptyOrUnderutilized, WhenEmpty), NAP_BUDGET_NODES ("10%" or a count), NAP_BATCH_IDLE_DURATION,
NAP_BATCH_MAX_DURATION, NAP_LIMIT_CPU (vCPUs per NodePool, capacity of its nodes and NodeClaims; none by default).
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import count

from devtools.replay.harness import DAEMONSET_CPU_MILLI, DAEMONSET_MEMORY_MIB, MIB, Replay
from devtools.replay.pools import Pool
from shared.domain import NodeGroup, Pod, Taint, parse_provider_id
from shared.engine.drainability import Budgets
from shared.engine.gpu_readiness import usable
from shared.engine.pod_rules import parse_go_duration
from shared.engine.vm_sizes import NVIDIA_GPU
from shared.ports import ComputeError

log = logging.getLogger(__name__)

BATCH_IDLE_DURATION = timedelta(seconds=1)
BATCH_MAX_DURATION = timedelta(seconds=10)
POLLING_PERIOD = timedelta(seconds=10)
COMMAND_VALIDATION_DELAY = timedelta(seconds=15)
MULTI_NODE_MAX_CANDIDATES = 100
REGISTRATION_TTL = timedelta(minutes=15)
UNAVAILABLE_OFFERINGS_TTL = timedelta(minutes=3)
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DISRUPTED_TAINT = "karpenter.sh/disrupted"
WHEN_EMPTY = "WhenEmpty"
WHEN_EMPTY_OR_UNDERUTILIZED = "WhenEmptyOrUnderutilized"
# NAP's defaults (see the module docstring for where each comes from).
NAP_DEFAULTS: Mapping[str, str] = {
    "NAP_CONSOLIDATE_AFTER": "0s",
    "NAP_CONSOLIDATION_POLICY": WHEN_EMPTY_OR_UNDERUTILIZED,
    "NAP_BUDGET_NODES": "10%",
    "NAP_BATCH_IDLE_DURATION": "1s",
    "NAP_BATCH_MAX_DURATION": "10s",
    "NAP_LIMIT_CPU": "",
}
NAP_ASSUMPTIONS = (
    "nap: each VM size is a scale set from 0; a NodeClaim is one instance of it, booting from the same distribution "
    "as every policy's nodes; one capacity change per size per batch (NAP makes one VM create per node)",
    "nap: default NodePool (D family, on-demand) plus a GPU NodePool for GPU pods, both with NAP's disruption "
    "defaults (WhenEmptyOrUnderutilized, consolidateAfter 0s, budget nodes 10%) unless NAP_* settings say otherwise",
    "nap: batches of 1 s idle / 10 s max; every trace arrival is a pending-pod event; pending pods also re-read "
    "every 10 s",
    "nap: consolidation evicts Job pods (no pod carries karpenter.sh/do-not-disrupt); their work is lost",
    "nap: pending pods are placed before the candidates' pods in a consolidation simulation; a pod leaving a node "
    "is noticed up to 10 s late",
    "nap: scale_actions counts NodeClaims launched plus nodes deleted",
)


@dataclass(frozen=True, slots=True)
class NapSettings:
    consolidate_after: timedelta | None  # None: "Never" (consolidation off)
    policy: str
    budget_nodes: str
    batch_idle: timedelta
    batch_max: timedelta
    limit_cpu: int | None  # vCPUs per NodePool

    @classmethod
    def of(cls, overrides: Mapping[str, str]) -> NapSettings:
        unknown = sorted(k for k in overrides if k.startswith("NAP_") and k not in NAP_DEFAULTS)
        if unknown:
            raise ValueError(f"unknown NAP setting(s): {', '.join(unknown)} (known: {', '.join(NAP_DEFAULTS)})")
        values = {**NAP_DEFAULTS, **{k: v for k, v in overrides.items() if k in NAP_DEFAULTS}}
        after = values["NAP_CONSOLIDATE_AFTER"].strip()
        policy = values["NAP_CONSOLIDATION_POLICY"].strip()
        if policy not in (WHEN_EMPTY, WHEN_EMPTY_OR_UNDERUTILIZED):
            raise ValueError(f"NAP_CONSOLIDATION_POLICY: {policy!r} (WhenEmpty or WhenEmptyOrUnderutilized)")
        budget = values["NAP_BUDGET_NODES"].strip()
        _budget_allowed(budget, 1)  # refuses a malformed budget now
        limit = values["NAP_LIMIT_CPU"].strip()
        return cls(
            consolidate_after=None if after == "Never" else _duration("NAP_CONSOLIDATE_AFTER", after),
            policy=policy, budget_nodes=budget,
            batch_idle=_duration("NAP_BATCH_IDLE_DURATION", values["NAP_BATCH_IDLE_DURATION"]),
            batch_max=_duration("NAP_BATCH_MAX_DURATION", values["NAP_BATCH_MAX_DURATION"]),
            limit_cpu=int(limit) if limit else None,
        )


def _duration(name: str, text: str) -> timedelta:
    try:
        value = parse_go_duration(text)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    if value < timedelta(0):
        raise ValueError(f"{name}: {text!r} is negative")
    return value


def _budget_allowed(budget: str, total: int) -> int:
    """Disruptions a `nodes` budget allows out of `total` initialized nodes (a percentage rounds up, as Karpenter)."""
    try:
        if budget.endswith("%"):
            return math.ceil(total * float(budget[:-1]) / 100 - 1e-9)
        return int(budget)
    except ValueError:
        raise ValueError(f"NAP_BUDGET_NODES: {budget!r} (a count or a percentage such as 10%)") from None


def vcpus(pool: Pool) -> int:
    return math.ceil(pool.cpu_milli / 1000)


# -- the scheduling simulation ---------------------------------------------------------------


@dataclass(slots=True)
class _Bin:
    """Room left on a node or NodeClaim in a simulation (the DaemonSet's requests already taken)."""

    name: str
    cpu: int
    mem: int
    pods: int
    gpu: int
    gpu_node: bool
    initialized: bool


@dataclass(slots=True)
class _NewClaim:
    nodepool: str
    cpu: int = 0
    mem: int = 0
    gpu: int = 0
    pods: int = 0


@dataclass(frozen=True, slots=True)
class _Item:
    """A pod to place: its requests, and whether it comes from a candidate node (consolidation)."""

    cpu: int
    mem: int
    gpu: int
    created: float
    key: str
    moving: bool = False


def _item(pod: Pod, *, moving: bool = False) -> _Item:
    r = pod.requests
    return _Item(r.cpu_milli, r.memory_bytes, r.amount(NVIDIA_GPU), pod.created_at.timestamp(), pod.key, moving)


def _fits_size(pool: Pool, cpu: int, mem: int, gpu: int, pods: int) -> bool:
    return (cpu <= pool.cpu_milli - DAEMONSET_CPU_MILLI and mem <= (pool.memory_mib - DAEMONSET_MEMORY_MIB) * MIB
            and gpu <= pool.gpus and pods <= pool.max_pods - 1)


@dataclass(slots=True)
class _Solution:
    placed_on: dict[str, str]  # pod key -> bin name ("" for a new NodeClaim)
    unplaced: list[_Item]
    claims: list[_NewClaim]
    on_uninitialized: list[_Item]  # moving pods placed on a node not yet initialized


def solve(items: Iterable[_Item], bins: list[_Bin], sizes: Mapping[str, Sequence[Pool]]) -> _Solution:
    """Karpenter's scheduler in small: largest pods first onto existing bins (first fit), else onto the new
    NodeClaim with the fewest pods that a size of its NodePool can still hold, else onto a new one. Mutates `bins`."""
    order = sorted(items, key=lambda i: (-i.cpu, -i.mem, i.created, i.key))
    start: dict[tuple[int, int, int], int] = {}  # first bin that may still fit a shape (bins only fill)
    solution = _Solution({}, [], [], [])
    for item in order:
        shape = (item.cpu, item.mem, item.gpu)
        gpu_pod = item.gpu > 0
        placed = False
        first = start.get(shape, 0)
        for index in range(first, len(bins)):
            b = bins[index]
            if (b.gpu_node == gpu_pod and b.cpu >= item.cpu and b.mem >= item.mem and b.pods >= 1
                    and b.gpu >= item.gpu):
                b.cpu -= item.cpu
                b.mem -= item.mem
                b.pods -= 1
                b.gpu -= item.gpu
                start[shape] = index
                solution.placed_on[item.key] = b.name
                if item.moving and not b.initialized:
                    solution.on_uninitialized.append(item)
                placed = True
                break
        if placed:
            continue
        start[shape] = len(bins)
        nodepool = "gpu" if gpu_pod else "default"
        options = sizes.get(nodepool, ())
        claims = sorted((c for c in solution.claims if c.nodepool == nodepool), key=lambda c: c.pods)
        target = next((c for c in claims if any(
            _fits_size(p, c.cpu + item.cpu, c.mem + item.mem, c.gpu + item.gpu, c.pods + 1) for p in options)), None)
        if target is None:
            if not any(_fits_size(p, item.cpu, item.mem, item.gpu, 1) for p in options):
                solution.unplaced.append(item)
                continue
            target = _NewClaim(nodepool)
            solution.claims.append(target)
        target.cpu += item.cpu
        target.mem += item.mem
        target.gpu += item.gpu
        target.pods += 1
        solution.placed_on[item.key] = ""
    return solution


def cheapest(claim: _NewClaim, options: Sequence[Pool]) -> Pool | None:
    """The cheapest size that holds the NodeClaim's pods (price, then name), as the provider launches it."""
    fitting = [p for p in options if _fits_size(p, claim.cpu, claim.mem, claim.gpu, claim.pods)]
    return min(fitting, key=lambda p: (p.price_per_hour, p.vm_size)) if fitting else None


# -- the controller ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Claim:
    id: int
    pool: Pool
    launched: datetime
    token: str
    node: str | None = None  # the node it registered as


@dataclass(slots=True)
class _NodeState:
    name: str
    pool: Pool
    instance_id: str
    group_id: str
    created: datetime
    ready: bool
    annotations: Mapping[str, str]
    pods: list[Pod] = field(default_factory=list)  # unfinished, not DaemonSet or mirror pods
    cpu: int = 0  # requests held, the DaemonSet's included
    mem: int = 0
    gpu: int = 0
    count: int = 0

    @property
    def nodepool(self) -> str:
        return "gpu" if self.pool.gpus else "default"

    def free(self, *, initialized: bool) -> _Bin:
        return _Bin(self.name, self.pool.cpu_milli - self.cpu, self.pool.memory_mib * MIB - self.mem,
                    self.pool.max_pods - self.count, self.pool.gpus - self.gpu, bool(self.pool.gpus), initialized)


@dataclass(slots=True)
class _Command:
    kind: str  # empty | delete | replace
    method: str  # emptiness | multi | single
    candidates: list[str]
    due: datetime  # when it is validated and executed
    replacement: Pool | None = None
    claim: _Claim | None = None  # the replacement's, once launched


@dataclass(slots=True)
class _View:
    """One look at the cluster: our nodes and the pods that matter to the decisions."""

    nodes: dict[str, _NodeState]
    pending: list[Pod]
    budgets: Budgets


class NodeAutoProvisioning:
    name = "nap"

    def __init__(self, replay: Replay, *, settings: Mapping[str, str] = NAP_DEFAULTS,
                 arrivals: Sequence[float] = ()) -> None:
        self._replay = replay
        self._world = replay.world
        self._cluster = replay.cluster
        self._compute = replay.compute
        self._settings = NapSettings.of(settings)
        self._start = replay.world.now
        pools = replay.config.pools
        self._pools = {p.name.lower(): p for p in pools}
        self._sizes: dict[str, tuple[Pool, ...]] = {
            "default": tuple(p for p in pools if not p.gpus), "gpu": tuple(p for p in pools if p.gpus)}
        self._groups: dict[str, NodeGroup] = {g.name.lower(): replace(g, etag="")
                                              for g in self._compute.list_node_groups()}
        # Trace arrivals (sim seconds), sorted: when a watch would see new pods. Without them, a probe every second.
        self._arrivals = sorted(set(arrivals))
        self._poll_every_second = not self._arrivals
        # Pods there from the start open the first batch.
        first = self._start if self._arrivals and self._arrivals[0] <= 1e-3 else None
        self._batch_start: datetime | None = first
        self._batch_last: datetime | None = first
        self._next_loop = self._start
        self._claims: list[_Claim] = []
        self._ids = count(1)
        self._unavailable: dict[str, datetime] = {}  # pool name -> until
        self._known_nodes: set[str] = set()
        self._claim_of: dict[str, _Claim] = {}  # node -> the claim it registered for
        self._pod_sets: dict[str, frozenset[str]] = {}
        self._last_pod_event: dict[str, datetime] = {}
        self._command: _Command | None = None  # awaiting validation
        self._replacing: list[_Command] = []  # executed, waiting for their replacement to initialize
        self._deleting: dict[str, _NodeState] = {}  # nodes tainted for disruption, by name
        self._draining: set[str] = set()  # of those, the ones whose pods are being evicted
        self._actions = 0
        self.removed_nodes: dict[str, str] = {}  # node -> command kind (empty, delete, replace): replay.disruptions

    # -- the Policy protocol ------------------------------------------------------------------

    def scale_actions(self) -> int:
        return self._actions

    def next_wakeup(self, now: datetime) -> datetime:
        times = [self._next_loop if self._next_loop > now else now + POLLING_PERIOD]
        t = (now - self._start).total_seconds()
        if self._poll_every_second:
            times.append(now + timedelta(seconds=1))
        else:
            at = bisect.bisect_right(self._arrivals, t + 1e-3)
            if at < len(self._arrivals):
                times.append(self._start + timedelta(seconds=self._arrivals[at]))
        if self._batch_start is not None:
            times.append(self._batch_close())
        if self._command is not None:
            times.append(self._command.due)
        if self._draining or self._replacing:
            times.append(now + timedelta(seconds=2))  # the termination controller's requeue, about
        return max(min(times), now + timedelta(milliseconds=1))

    def wake(self, now: datetime) -> None:
        t = (now - self._start).total_seconds()
        arrived = self._poll_every_second or self._arrival_at(t)
        if arrived:
            self._trigger(now)
        view: _View | None = None
        if self._batch_start is not None and now >= self._batch_close():
            self._batch_start = self._batch_last = None
            view = self._view(now)
            self._provision(view, now)
        if self._draining or self._replacing:
            view = view or self._view(now)
            self._progress(view, now)
        if self._command is not None and now >= self._command.due:
            view = self._view(now)
            self._validate_and_execute(view, now)
            self._disrupt(self._view(now), now)  # Karpenter requeues at once after a command
        if now >= self._next_loop:
            self._next_loop = now + POLLING_PERIOD
            view = self._view(now)
            self._check_claims(now)
            if view.pending:
                self._provision(view, now)
                view = self._view(now)
            if self._command is None:
                self._disrupt(view, now)

    # -- watching -----------------------------------------------------------------------------

    def _arrival_at(self, t: float) -> bool:
        at = bisect.bisect_left(self._arrivals, t - 1e-3)
        return at < len(self._arrivals) and self._arrivals[at] <= t + 1e-3

    def _trigger(self, now: datetime) -> None:
        if self._batch_start is None:
            self._batch_start = now
        self._batch_last = now

    def _batch_close(self) -> datetime:
        assert self._batch_start is not None and self._batch_last is not None
        return min(self._batch_last + self._settings.batch_idle, self._batch_start + self._settings.batch_max)

    def _view(self, now: datetime) -> _View:
        nodes: dict[str, _NodeState] = {}
        for node in self._cluster.list_nodes():
            ref = parse_provider_id(node.provider_id)
            pool = self._pools.get(ref.scale_set.lower()) if ref is not None else None
            if ref is None or pool is None:
                continue
            # Karpenter's Initialized: Ready, and the instance type's extended resources (GPUs) registered.
            nodes[node.name] = _NodeState(node.name, pool, ref.instance_id, ref.group_id, node.created_at,
                                          usable(node, None),
                                          node.annotations,
                                          cpu=DAEMONSET_CPU_MILLI, mem=DAEMONSET_MEMORY_MIB * MIB, count=1)
            if node.name not in self._known_nodes:
                self._known_nodes.add(node.name)
                self._register(node.name, pool)
        pending: list[Pod] = []
        for pod in self._cluster.list_pods():
            if pod.node_name is None:
                if pod.unschedulable and not pod.terminating:
                    pending.append(pod)
                continue
            state = nodes.get(pod.node_name)
            if state is None or pod.is_daemonset or pod.is_mirror:
                continue
            r = pod.requests
            state.cpu += r.cpu_milli
            state.mem += r.memory_bytes
            state.gpu += r.amount(NVIDIA_GPU)
            state.count += 1
            state.pods.append(pod)
        for name in [n for n in self._known_nodes if n not in nodes]:  # gone
            self._known_nodes.discard(name)
            self._pod_sets.pop(name, None)
            self._last_pod_event.pop(name, None)
            self._claim_of.pop(name, None)
            self._deleting.pop(name, None)
            self._draining.discard(name)
        for name, state in nodes.items():
            uids = frozenset(p.uid or p.key for p in state.pods if not p.terminating)
            before = self._pod_sets.get(name)
            if before is None:
                bound = [p.started_at for p in state.pods if p.started_at]
                if bound:
                    self._last_pod_event[name] = max(bound)
            elif uids != before:
                bound = [p.started_at for p in state.pods if (p.uid or p.key) not in before and p.started_at]
                at = now if before - uids or not bound else max(bound)
                self._last_pod_event[name] = max(self._last_pod_event.get(name, at), at)
            self._pod_sets[name] = uids
        for name in self._deleting:
            if name in nodes:
                self._deleting[name] = nodes[name]
        return _View(nodes, pending, Budgets(self._cluster.list_disruption_budgets()))

    def _register(self, node: str, pool: Pool) -> None:
        """A node registered: it is the oldest NodeClaim in flight of its size."""
        claim = next((c for c in self._claims if c.node is None and c.pool.name == pool.name), None)
        if claim is not None:
            claim.node = node
            self._claim_of[node] = claim
            self._claims.remove(claim)

    def _check_claims(self, now: datetime) -> None:
        """Launches that failed free their size for a while; NodeClaims never registered are given up."""
        failed: set[str] = set()
        for token in {c.token for c in self._claims if c.token}:
            try:
                op = self._compute.get_resize_operation(token)
            except ComputeError:
                continue
            if op.status in ("Failed", "Canceled"):
                failed.add(token)
        for claim in list(self._claims):
            if claim.token in failed or now - claim.launched > REGISTRATION_TTL:
                self._claims.remove(claim)
                self._unavailable[claim.pool.name] = now + UNAVAILABLE_OFFERINGS_TTL

    # -- provisioning -------------------------------------------------------------------------

    def _bins(self, view: _View, *, exclude: set[str] = frozenset()) -> list[_Bin]:  # type: ignore[assignment]
        """Existing capacity: initialized nodes first, then booting nodes and NodeClaims in flight."""
        ready, booting = [], []
        for name, state in sorted(view.nodes.items(), key=lambda kv: (kv[1].created, kv[0])):
            if name in exclude or name in self._deleting:
                continue
            (ready if state.ready else booting).append(state.free(initialized=state.ready))
        for claim in self._claims:
            p = claim.pool
            booting.append(_Bin(f"claim-{claim.id}", p.cpu_milli - DAEMONSET_CPU_MILLI,
                                (p.memory_mib - DAEMONSET_MEMORY_MIB) * MIB, p.max_pods - 1, p.gpus, bool(p.gpus),
                                False))
        return ready + booting

    def _options(self, nodepool: str, now: datetime, view: _View, extra_vcpus: int = 0) -> tuple[Pool, ...]:
        sizes = tuple(p for p in self._sizes[nodepool]
                      if self._unavailable.get(p.name) is None or self._unavailable[p.name] <= now)
        limit = self._settings.limit_cpu
        if limit is None:
            return sizes
        used = extra_vcpus + sum(vcpus(s.pool) for s in view.nodes.values() if s.nodepool == nodepool)
        used += sum(vcpus(c.pool) for c in self._claims if ("gpu" if c.pool.gpus else "default") == nodepool)
        return tuple(p for p in sizes if used + vcpus(p) <= limit)

    def _provision(self, view: _View, now: datetime) -> None:
        items = [_item(p) for p in view.pending]
        for name in self._deleting:  # pods on nodes being disrupted need a home too
            state = view.nodes.get(name)
            if state is not None:
                items.extend(_item(p) for p in state.pods if not p.terminating)
        if not items:
            return
        sizes = {np: self._options(np, now, view) for np in self._sizes}
        solution = solve(items, self._bins(view), sizes)
        launches: dict[str, list[Pool]] = {}
        spent = {"default": 0, "gpu": 0}
        for claim in solution.claims:
            options = self._options(claim.nodepool, now, view, spent[claim.nodepool])
            size = cheapest(claim, options)
            if size is None:
                continue  # over the NodePool's limits
            spent[claim.nodepool] += vcpus(size)
            launches.setdefault(size.name, []).append(size)
        for name, sizes_ in launches.items():
            self._launch(sizes_[0], len(sizes_), now)

    def _launch(self, pool: Pool, n: int, now: datetime) -> list[_Claim]:
        group = self._groups.get(pool.name.lower())
        if group is None:
            return []
        try:
            current = self._compute.get_node_group(group.id)
            capacity = current.capacity if current is not None else group.capacity
            op = self._compute.begin_resize(replace(group, etag=""), capacity + n)
        except ComputeError as exc:
            log.info("nap: launching %d x %s failed: %s", n, pool.vm_size, exc)
            self._unavailable[pool.name] = now + UNAVAILABLE_OFFERINGS_TTL
            return []
        claims = [_Claim(next(self._ids), pool, now, op.token) for _ in range(n)]
        self._claims.extend(claims)
        self._actions += n
        return claims

    # -- disruption ---------------------------------------------------------------------------

    def _consolidatable(self, state: _NodeState, now: datetime) -> bool:
        after = self._settings.consolidate_after
        if after is None or not state.ready:
            return False
        since = self._last_pod_event.get(state.name, state.created)
        return now - since >= after

    def _candidates(self, view: _View, now: datetime) -> list[_NodeState]:
        busy = set(self._deleting) | (set(self._command.candidates) if self._command else set())
        out = []
        for name, state in view.nodes.items():
            if name in busy or not self._consolidatable(state, now):
                continue
            if state.annotations.get(DO_NOT_DISRUPT) == "true":
                continue
            movable = [p for p in state.pods if not p.terminating]
            if any(p.annotations.get(DO_NOT_DISRUPT) == "true" for p in movable):
                continue
            if view.budgets.budgets and view.budgets.short(movable) is not None:
                continue
            out.append(state)
        # Disruption cost: pods to move, fewest first (no deletion cost or priority on the trace's pods).
        return sorted(out, key=lambda s: (sum(1 for p in s.pods if not p.terminating), s.created, s.name))

    def _allowed(self, view: _View) -> dict[str, int]:
        total: dict[str, int] = {"default": 0, "gpu": 0}
        disrupting: dict[str, int] = {"default": 0, "gpu": 0}
        for name, state in view.nodes.items():
            if not state.ready and name not in self._deleting:
                continue  # not initialized: not counted
            total[state.nodepool] += 1
            if name in self._deleting:
                disrupting[state.nodepool] += 1
        return {np: max(0, _budget_allowed(self._settings.budget_nodes, total[np]) - disrupting[np]) for np in total}

    def _disrupt(self, view: _View, now: datetime) -> None:
        if self._settings.consolidate_after is None:
            return
        candidates = self._candidates(view, now)
        if not candidates:
            return
        allowed = self._allowed(view)
        empty = []
        for state in candidates:
            if not any(not p.terminating for p in state.pods) and allowed[state.nodepool] > 0:
                allowed[state.nodepool] -= 1
                empty.append(state.name)
        if empty:
            self._command = _Command("empty", "emptiness", empty, now + COMMAND_VALIDATION_DELAY)
            return
        if self._settings.policy != WHEN_EMPTY_OR_UNDERUTILIZED:
            return
        busy = [s for s in candidates if any(not p.terminating for p in s.pods)]
        budgeted, left = [], dict(allowed)
        for state in busy:
            if left[state.nodepool] > 0:
                left[state.nodepool] -= 1
                budgeted.append(state)
        pre = self._presolve(view, now)
        command = self._multi_node(budgeted[:MULTI_NODE_MAX_CANDIDATES], view, pre, now)
        if command is None:
            command = self._single_node(busy, allowed, view, pre, now)
        if command is not None:
            self._command = command

    def _presolve(self, view: _View, now: datetime) -> tuple[list[_Bin], _Solution, dict[str, tuple[Pool, ...]]]:
        """The pending pods (and those of nodes being disrupted) placed once, before any candidate's."""
        items = [_item(p) for p in view.pending]
        for name in self._deleting:
            state = view.nodes.get(name)
            if state is not None:
                items.extend(_item(p) for p in state.pods if not p.terminating)
        bins = self._bins(view)
        sizes = {np: self._options(np, now, view) for np in self._sizes}
        return bins, solve(items, bins, sizes), sizes

    def _consolidation(self, group: Sequence[_NodeState], pre: tuple[list[_Bin], _Solution, dict[str, tuple[Pool, ...]]]
                 ) -> tuple[str, Pool | None] | None:
        """Karpenter's computeConsolidation: ("delete", None), ("replace", size) or None."""
        bins0, pending, sizes = pre
        names = {s.name for s in group}
        moving = [_item(p, moving=True) for s in group for p in s.pods if not p.terminating]
        price = sum(s.pool.price_per_hour for s in group)
        # Quick necessary condition: their requests fit in the room left elsewhere plus one cheaper node.
        room_cpu = sum(b.cpu for b in bins0 if b.name not in names and b.initialized)
        need_cpu = sum(i.cpu for i in moving)
        largest = max((p.cpu_milli for np in sizes.values() for p in np if p.price_per_hour < price), default=0)
        if need_cpu > room_cpu + largest:
            return None
        bins = [replace(b) for b in bins0 if b.name not in names]
        solution = solve(moving, bins, sizes)
        if solution.unplaced or solution.on_uninitialized:
            return None
        claims = pending.claims + solution.claims
        if not claims:
            return "delete", None
        if len(claims) != 1 or not solution.claims:
            return None  # more than one new node, or one only for pods already pending: not a consolidation
        size = cheapest(claims[0], sizes[claims[0].nodepool])
        if size is None or size.price_per_hour >= price:
            return None
        return "replace", size

    def _multi_node(self, candidates: list[_NodeState], view: _View, pre: tuple, now: datetime) -> _Command | None:
        if len(candidates) < 2:
            return None
        lo, hi, best = 1, len(candidates) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            group = candidates[:mid + 1]
            verdict = self._consolidation(group, pre)
            if verdict is not None and not (verdict[0] == "replace" and any(
                    s.pool.name == verdict[1].name for s in group)):  # type: ignore[union-attr]
                best = _Command(verdict[0], "multi", [s.name for s in group], now + COMMAND_VALIDATION_DELAY,
                                verdict[1])
                lo = mid + 1
            else:
                hi = mid - 1
        return best

    def _single_node(self, candidates: list[_NodeState], allowed: dict[str, int], view: _View, pre: tuple,
                     now: datetime) -> _Command | None:
        for state in candidates:
            if allowed[state.nodepool] <= 0:
                continue
            verdict = self._consolidation([state], pre)
            if verdict is not None:
                return _Command(verdict[0], "single", [state.name], now + COMMAND_VALIDATION_DELAY, verdict[1])
        return None

    def _validate_and_execute(self, view: _View, now: datetime) -> None:
        command, self._command = self._command, None
        assert command is not None
        valid = {s.name: s for s in self._candidates(view, now)}
        group = [valid[n] for n in command.candidates if n in valid]
        allowed = self._allowed(view)
        if command.kind == "empty":
            keep = []
            for state in group:
                if not any(not p.terminating for p in state.pods) and allowed[state.nodepool] > 0:
                    allowed[state.nodepool] -= 1
                    keep.append(state)
            if keep:
                self._start_deleting(keep, now, kind=command.kind)
                self._delete_instances(keep, now)
            return
        if len(group) != len(command.candidates):
            return  # a candidate is no longer one: abandon, as Karpenter does
        verdict = self._consolidation(group, self._presolve(view, now))
        if verdict is None or verdict[0] != command.kind or (
                verdict[1] is not None and command.replacement is not None
                and verdict[1].price_per_hour > command.replacement.price_per_hour):
            return
        self._start_deleting(group, now, kind=command.kind)
        if command.kind == "replace":
            assert verdict[1] is not None
            claims = self._launch(verdict[1], 1, now)
            if not claims:
                self._abandon(group)
                return
            command.claim = claims[0]
            self._replacing.append(command)
        else:
            self._drain(group)

    def _start_deleting(self, group: Sequence[_NodeState], now: datetime, *, kind: str) -> None:
        for state in group:
            self._deleting[state.name] = state
            self.removed_nodes[state.name] = kind  # what the replay counts voluntary disruptions by
            self._cluster.add_taint(state.name, taint=Taint(DISRUPTED_TAINT, "", "NoSchedule"))

    def _abandon(self, group: Sequence[_NodeState]) -> None:
        for state in group:
            self._deleting.pop(state.name, None)
            self._cluster.remove_taint(state.name, taint_key=DISRUPTED_TAINT)

    def _drain(self, group: Sequence[_NodeState]) -> None:
        for state in group:
            self._draining.add(state.name)
            for pod in state.pods:
                if not pod.terminating:
                    self._cluster.evict(pod.namespace, pod.name)

    def _progress(self, view: _View, now: datetime) -> None:
        """Replacements that came up let their candidates drain; drained nodes are deleted."""
        for command in list(self._replacing):
            claim = command.claim
            assert claim is not None
            group = [self._deleting[n] for n in command.candidates if n in self._deleting]
            if claim.node is None:
                if claim not in self._claims:  # failed or timed out: untaint, as Karpenter does
                    self._replacing.remove(command)
                    self._abandon(group)
                continue
            state = view.nodes.get(claim.node)
            if state is not None and state.ready:
                self._replacing.remove(command)
                self._drain(group)
        done = []
        for name in list(self._draining):
            state = view.nodes.get(name)
            if state is None:
                self._draining.discard(name)
                continue
            left = [p for p in state.pods]
            if not left:
                done.append(state)
                continue
            for pod in left:
                if not pod.terminating:
                    self._cluster.evict(pod.namespace, pod.name)  # a PodDisruptionBudget refused it: retry
        if done:
            for state in done:
                self._draining.discard(state.name)
            self._delete_instances(done, now)

    def _delete_instances(self, states: Sequence[_NodeState], now: datetime) -> None:
        by_group: dict[str, list[_NodeState]] = {}
        for state in states:
            by_group.setdefault(state.pool.name.lower(), []).append(state)
        for name, group in by_group.items():
            ng = self._groups.get(name)
            if ng is None:
                continue
            try:
                self._compute.begin_delete_instances(ng, [s.instance_id for s in group])
            except ComputeError as exc:
                log.info("nap: deleting %s failed: %s", [s.name for s in group], exc)
                self._abandon(group)
                continue
            self._actions += len(group)
