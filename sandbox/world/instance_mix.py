"""Which VM size an instance-mix scale set gives each new member (sandbox.model.instance_mix).

Azure chooses the size of each VM a scale-out creates, by the set's allocation strategy; the caller (scale-out)
only asks for a count. The sandbox's rules, one VM at a time in creation order:

- LowestPrice: the cheapest size. Within the one family a mix holds, list prices grow with the vCPUs (the
  sandbox's price table, sandbox.api.prices_api: D2s_v5 0.096 ... D64s_v5 3.072 USD/h, proportional), so the
  cheapest is the size with the fewest vCPUs, then the least memory, then the first listed. The world models no
  per-size shortage of regular capacity, so Azure's "move to a pricier size when capacity runs out" never happens.
- Prioritized: the lowest rank (a size without one ranks last), then the first listed (Azure allows equal ranks).
- CapacityOptimized: the size with the most spare capacity. The world has no per-size regional capacity, so we
  assume every size has the same and a size's spare capacity shrinks with each VM of it the set holds: the size
  the set has fewest alive members of, then the first listed (the new VMs spread over the sizes).

A write may change the mix's ranks and strategy (`steered`): the autoscaler steers a scale-out to one size by
sending the same sizes with that size first under Prioritized. ARM's rules on `properties.skuProfile` are kept
(400 naming the property: 1 to 5 sizes, A/B/D/E/F series of the mix's family, no size twice, a known
allocationStrategy, ranks only with Prioritized); a change of the sizes themselves is refused (409): the sandbox
knows the node shape of the scenario's sizes only. The sandbox models no per-size capacity or quota shortage
(one family per mix, one quota), so Prioritized never falls back to the next rank.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sandbox.model.instance_mix import MAX_SIZES, STRATEGIES, InstanceMixSpec, MixSize, allowed_series
from sandbox.model.quota import vcpus, vm_family
from sandbox.world.errors import ArmError

if TYPE_CHECKING:
    from sandbox.world import World

PROFILE = "properties.skuProfile"


def choose_size(mix: InstanceMixSpec, member_sizes: Iterable[str]) -> MixSize:
    """The size of the next VM, given the sizes (names) of the set's alive members, the VMs created before it in
    the same scale-out included."""
    order = {s.vm_size: i for i, s in enumerate(mix.sizes)}
    if mix.strategy == "Prioritized":
        return min(mix.sizes, key=lambda s: (s.rank is None, s.rank or 0, order[s.vm_size]))
    if mix.strategy == "CapacityOptimized":
        held = Counter(name.lower() for name in member_sizes)
        return min(mix.sizes, key=lambda s: (held[s.vm_size.lower()], order[s.vm_size]))
    return min(mix.sizes, key=lambda s: (vcpus(s.capacity), s.capacity.memory_bytes, order[s.vm_size]))


def next_sizes(mix: InstanceMixSpec, member_sizes: Iterable[str], count: int) -> list[MixSize]:
    """The sizes of the next `count` VMs a scale-out creates, one after the other (what quota is checked with)."""
    held = [name for name in member_sizes]
    chosen = []
    for _ in range(count):
        size = choose_size(mix, held)
        chosen.append(size)
        held.append(size.vm_size)
    return chosen


def steered(mix: InstanceMixSpec, sent: Any) -> InstanceMixSpec:
    """The mix after a write's `properties.skuProfile` (`sent`): same sizes, the sent ranks and strategy (a strategy
    left out stays). Raises ArmError as ARM does (see the module docstring)."""
    if not isinstance(sent, dict):
        raise ArmError(400, "InvalidParameter", f"The value of parameter {PROFILE} is invalid.", PROFILE)
    strategy = sent.get("allocationStrategy", mix.strategy)
    known = next((s for s in STRATEGIES if isinstance(strategy, str) and s.lower() == strategy.lower()), None)
    if known is None:
        raise ArmError(400, "InvalidParameter", f"The value '{strategy}' of parameter "
                       f"{PROFILE}.allocationStrategy is invalid; allowed: {', '.join(STRATEGIES)}.",
                       f"{PROFILE}.allocationStrategy")
    entries = sent.get("vmSizes")
    where = f"{PROFILE}.vmSizes"
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("name"), str)
                                                for e in entries):
        raise ArmError(400, "InvalidParameter", f"{where} must list objects with a name.", where)
    if not 1 <= len(entries) <= MAX_SIZES:
        raise ArmError(400, "InvalidParameter",
                       f"{where} must list 1 to {MAX_SIZES} VM sizes, got {len(entries)}.", where)
    family = vm_family(mix.sizes[0].vm_size)
    ranks: dict[str, int | None] = {}
    for i, entry in enumerate(entries):
        name, rank = entry["name"], entry.get("rank")
        if not allowed_series(name) or vm_family(name) != family:
            raise ArmError(400, "InvalidParameter", f"VM size '{name}' cannot join this instance mix: it must be of "
                           f"the A, B, D, E or F series and of family {family}.", f"{where}[{i}].name")
        if name.lower() in ranks:
            raise ArmError(400, "InvalidParameter", f"VM size '{name}' is listed twice.", f"{where}[{i}].name")
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
            raise ArmError(400, "InvalidParameter", f"The rank '{rank}' of VM size '{name}' is invalid.",
                           f"{where}[{i}].rank")
        if rank is not None and known != "Prioritized":
            raise ArmError(400, "InvalidParameter", "A rank is only allowed with the Prioritized allocation "
                           "strategy.", f"{where}[{i}].rank")
        ranks[name.lower()] = rank
    if set(ranks) != {s.vm_size.lower() for s in mix.sizes}:
        raise ArmError(409, "OperationNotAllowed", "The sandbox cannot change the VM sizes of an instance mix (it "
                       "knows the node shape of the scenario's sizes only); ranks and the strategy may change.", where)
    return InstanceMixSpec(tuple(replace(s, rank=ranks[s.vm_size.lower()]) for s in mix.sizes), known)  # type: ignore[arg-type]


def report(world: World) -> dict[str, Any] | None:
    """Per instance-mix scale set: VMs created and alive at the end by size, compute-billed seconds by size, and
    where each workload's pods ran (pods by node size, a pod evicted and replaced counting once per pod object).
    None for a world without a mix."""
    groups: dict[str, Any] = {}
    for key, group in world._groups.items():  # noqa: SLF001 - a report of the world's own state
        if group.spec.instance_mix is None:
            continue
        members = [i for i in world._iter_instances() if i.group_key == key]  # noqa: SLF001
        size_of_node = {i.node_name: i.vm_size for i in members if i.node_name}
        pods: dict[str, Counter[str]] = {}
        for pod in world._pods.values():  # noqa: SLF001
            if pod.role == "workload" and pod.node in size_of_node and pod.started is not None:
                pods.setdefault(pod.workload, Counter())[size_of_node[pod.node]] += 1
        sizes = [s.vm_size for s in group.spec.instance_mix.sizes]

        def by_size(counts: Counter[str], sizes: list[str] = sizes) -> dict[str, Any]:
            """Every size of the mix, 0 included (an expectation may bound a size nothing was created of)."""
            return {size: counts[size] for size in sorted({*sizes, *counts})}

        billed: Counter[str] = Counter()
        for inst in members:  # compute-billed seconds, as the report's node_seconds counts them
            until = inst.vanished_at if inst.vanished_at is not None else world._t  # noqa: SLF001
            unbilled = inst.unbilled_seconds + (until - inst.unbilled_since if inst.unbilled_since is not None else 0)
            billed[inst.vm_size] += max(0.0, until - inst.created_at - unbilled)  # type: ignore[assignment]
        groups[key] = {
            "created_by_size": by_size(Counter(i.vm_size for i in members)),
            # What the group's node_seconds are made of: price each size at its own rate, not the group's.
            "node_seconds_by_size": {k: round(v, 3) for k, v in by_size(billed).items()},
            "alive_by_size_at_end": by_size(Counter(i.vm_size for i in group.active())),
            "pods_by_workload_and_size": {w: by_size(c) for w, c in sorted(pods.items())},
            "profile": {"strategy": group.spec.instance_mix.strategy,
                        "ranks": {s.vm_size: s.rank for s in group.spec.instance_mix.sizes}},
        }
    return groups or None
