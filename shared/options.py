"""Settings to engine options: the one mapping the services, the executor and every replay policy use.

Pure: no I/O, no side effects. The engine takes options, never Settings: what an app setting means to a
decision is said here, once.
"""

from __future__ import annotations

from datetime import datetime

from shared.engine.cooldowns import ScaleDownDelays
from shared.engine.drainability import DrainRules
from shared.engine.expanders import parse_priorities
from shared.engine.pod_rules import PodRules
from shared.engine.scale_down import ScaleDownOptions
from shared.engine.scale_up import ScaleUpOptions
from shared.engine.standby import StandbyOptions
from shared.engine.utilization import UtilizationRules
from shared.engine.virtual_nodes import AciLimits, AciPrices, VirtualNodeOptions
from shared.settings import Settings


def scale_up_options(settings: Settings, *, now: datetime) -> ScaleUpOptions:
    """The scale-up planner's options; `now` seeds the random expander."""
    return ScaleUpOptions(
        max_nodes_per_scale_up=settings.max_nodes_per_scale_up,
        expander=settings.expander,
        priorities=parse_priorities(dict(settings.priority_expander_config)),
        seed=int(now.timestamp()),  # the random expander spreads choices over polls, as CA's does
        limits=settings.cluster_limits,
        pod_rules=PodRules(settings.expendable_pods_priority_cutoff, settings.new_pod_scale_up_delay),
        balance_similar=settings.balance_similar_node_groups,
        balancing_ignored_labels=settings.balancing_ignore_labels,
        spot_first=settings.spot_first,
        gangs=settings.gang_scale_up == "all-or-nothing",
    )


def scale_down_options(settings: Settings) -> ScaleDownOptions:
    """The scale-down planner's options, the executor's checks at execution time included."""
    return ScaleDownOptions(
        unneeded_time=settings.scale_down_unneeded_time,
        unready_time=settings.scale_down_unready_time,
        max_parallelism=settings.max_scale_down_parallelism,
        delays=ScaleDownDelays(
            after_add=settings.scale_down_delay_after_add,
            after_delete=settings.scale_down_delay_after_delete,
            after_failure=settings.scale_down_delay_after_failure,
        ),
        utilization=UtilizationRules(
            threshold=settings.scale_down_utilization_threshold,
            gpu_threshold=settings.scale_down_gpu_utilization_threshold,
            ignore_daemonsets=settings.scale_down_ignore_daemonsets_utilization,
            ignore_mirror_pods=settings.scale_down_ignore_mirror_pods_utilization,
        ),
        drain=drain_rules(settings),
        measured_cpu_threshold=settings.scale_down_measured_cpu_threshold,
        limits=settings.cluster_limits,
        deallocated_max=settings.scale_down_deallocated_max,
        idle_mode=settings.scale_down_idle_mode,
        candidates_pool_ratio=settings.scale_down_candidates_pool_ratio,
        candidates_pool_min_count=settings.scale_down_candidates_pool_min_count,
    )


def drain_rules(settings: Settings) -> DrainRules:
    """What may be evicted, waited for, or blocks a node's removal."""
    return DrainRules(
        protect_batch=settings.batch_protection,
        batch_selector=settings.batch_pod_selector,
        skip_system_pods=settings.skip_nodes_with_system_pods,
        system_pod_disruption_timeout=settings.blocking_system_pod_disruption_timeout,
        skip_local_storage=settings.skip_nodes_with_local_storage,
        skip_custom_controllers=settings.skip_nodes_with_custom_controller_pods,
        expendable_priority_cutoff=settings.expendable_pods_priority_cutoff,
    )


def virtual_node_options(settings: Settings) -> VirtualNodeOptions:
    """What the virtual-node planner knows of ACI's limits and prices, and what it may move."""
    return VirtualNodeOptions(
        limits=AciLimits(settings.aci_quota_cores, settings.aci_creates_per_5min, settings.aci_creates_per_hour,
                         settings.aci_max_container_groups),
        prices=AciPrices(settings.aci_price_vcpu_second, settings.aci_price_gb_second),
        backfill=settings.virtual_node_backfill,
        backfill_selector=settings.virtual_node_backfill_selector,
        backfill_namespaces=frozenset(settings.virtual_node_backfill_namespaces),
        batch_selector=settings.batch_pod_selector,
        max_backfill_per_poll=settings.virtual_node_max_backfill_per_poll,
        close_at=settings.virtual_node_close_at,
        reopen_at=settings.virtual_node_reopen_at,
        gate=settings.virtual_node_gating,
        admission=settings.virtual_node_admission,
        expected_runtime=settings.virtual_node_expected_runtime,
        min_remaining=settings.virtual_node_min_remaining,
        drain=drain_rules(settings),
    )


def standby_options(settings: Settings) -> StandbyOptions:
    """Warm standby: every group's target (STANDBY_INSTANCES, a group's tag wins) and what `auto` keeps at most."""
    return StandbyOptions(configured=settings.standby_instances, max_auto=settings.standby_max)
