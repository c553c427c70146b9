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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from sandbox.model.instance_mix import InstanceMixSpec, MixSize
from sandbox.model.quota import vcpus


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
