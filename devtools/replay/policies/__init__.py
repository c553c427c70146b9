"""The policies a replay compares: ours, emulations of the alternatives, and the two bounds."""

from __future__ import annotations

from datetime import datetime

POLICIES = ("ours", "ca", "vmss-cpu", "static", "oracle", "ours+vn", "ca+vn", "ours+spot", "ca+spot", "nap",
            "ours+standby", "ours+sizes")
# Ours on multi-size groups of the sizes `nap` chooses from (devtools.replay.pools.sized_pools), planned as lanes.
SIZES_POLICIES = ("ours+sizes",)
# Ours keeping stopped instances ready ahead of demand (devtools.replay.standby: STANDBY_INSTANCES=auto).
STANDBY_POLICIES = ("ours+standby",)
# The same controllers with a virtual node (ACI) beside the pools: the run's ReplayConfig.virtual_node sets its
# quota, start latency and prices (the sandbox's defaults when it has none).
VIRTUAL_NODE_POLICIES = ("ours+vn", "ca+vn")
# The same controllers with a spot twin of every pool (devtools.replay.spot): ours spot-first, acting on Azure's
# Preempt notices as Event Grid delivers them; CA with its priority expander preferring the spot pools. The run's
# ReplayConfig.spot sets the eviction rate, notice and prices (the tier's defaults when it has none).
SPOT_POLICIES = ("ours+spot", "ca+spot")
# ours+spot with SPOT_MAX_RUNTIME=off (every pod spot-first, whatever its expected run time): the reference the suite
# compares ours+spot's cost with, on the spot seeds at the target tier only (not in POLICIES: no run of its own in
# the main table).
SPOT_FIRST_POLICY = "ours+spot-first"


class Static:
    """`static`: fixed capacity sized for the trace's peak; nothing ever changes it."""

    name = "static"
    removed_nodes: dict[str, str] = {}  # never removes a node

    def next_wakeup(self, now: datetime) -> datetime | None:
        return None

    def wake(self, now: datetime) -> None:
        pass

    def scale_actions(self) -> int:
        return 0
