"""The composition root: settings + adapters + clock, assembled once per process.

Only this module (and development tools) choose concrete adapters; services
receive `Ports`. Adapters and their SDKs are imported here lazily, so importing
function_app stays cheap (cold start) and a bad setting fails on first use with
every problem named.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from shared.ports import ActionQueue, BacklogSource, Clock, NodeGroupProvider, NodeUsageSource, Ports, QuotaSource, StandbyPoolSource, StateStore
from shared.settings import Settings, load_settings, misspelt_settings

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

log = logging.getLogger(__name__)


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)


@dataclass(frozen=True, slots=True)
class AppContext:
    settings: Settings
    ports: Ports


_current: AppContext | None = None


def build_context(env: Mapping[str, str], *, clock: Clock | None = None) -> AppContext:
    """Validate settings (raises SettingsError naming every problem) and connect the adapters."""
    settings = validated_settings(env)
    logging.getLogger("shared").setLevel(settings.log_level.upper())
    return AppContext(settings=settings, ports=connect(settings, env, clock=clock))


def validated_settings(env: Mapping[str, str], *, storage: bool = True, warn: bool = True) -> Settings:
    """Every setting checked at once: parsed, file settings that name no file, and (with `storage`) the host's
    storage connection; one SettingsError names every problem. Settings that look misspelt are logged."""
    from shared.adapters.storage_connection import storage_problems

    for warning in misspelt_settings(env) if warn else ():
        log.warning("app setting %s", warning)
    return load_settings(env, file_exists=os.path.isfile, extra_problems=storage_problems if storage else None)


def connect(settings: Settings, env: Mapping[str, str], *, clock: Clock | None = None,
            storage: bool = True) -> Ports:
    """The adapters for these settings; with `storage=False` there is no state table or queue.

    Without storage (the `plan` command run from a laptop), `state` is None in spirit: the
    returned Ports carry placeholders that raise if used, and the caller supplies its own.
    """
    from shared.adapters.credentials import make_azure_credential
    from shared.adapters.kube_events import KubernetesEventSink
    from shared.adapters.kubernetes import KubernetesCluster
    from shared.services.events import EventRecorder
    from shared.services.providers import ProviderRouter

    credential = make_azure_credential(settings)
    cluster = KubernetesCluster.from_settings(settings, credential=credential)
    if storage:
        from shared.adapters.storage import StorageActionQueue, TableStateStore, resolve_storage_connection

        connection = resolve_storage_connection(settings, env, credential=credential)
        state: StateStore = TableStateStore(connection, table_name=settings.state_table)
        queue: ActionQueue = StorageActionQueue(connection, queue_name=settings.queue_name)
    else:
        state, queue = _NoStorage(), _NoStorage()
    backlog: BacklogSource | None = None
    if settings.load_backlog_queue:
        from shared.adapters.backlog_queue import StorageQueueBacklog
        from shared.adapters.storage import resolve_storage_connection as resolve

        # The backlog queue is read even by `plan` (storage=False): it is part of the decision.
        backlog = StorageQueueBacklog(resolve(settings, env, credential=credential), settings.load_backlog_queue)
    return Ports(
        cluster=cluster,
        # Each backend is one provider in this list; discovery decides per group which one serves it.
        provider=ProviderRouter(_providers(settings, credential)),
        state=state,
        queue=queue,
        clock=clock or SystemClock(),
        events=EventRecorder(KubernetesEventSink(cluster.api_client)),
        usage=_usage_source(settings, credential),
        backlog=backlog,
        quota=_quota_source(settings, credential, clock),
        standby_pools=_standby_pools(settings, credential),
    )


def _providers(settings: Settings, credential: TokenCredential) -> list[NodeGroupProvider]:
    """Uniform scale sets first (the default: its tokens travel unprefixed), then the other backends."""
    from shared.adapters.aks_pools import AksAgentPools
    from shared.adapters.compute import VmssCompute
    from shared.adapters.flex_compute import FlexCompute

    return [
        VmssCompute.from_settings(settings, credential=credential),
        FlexCompute.from_settings(settings, credential=credential),
        # Calls nothing unless MANAGE_AKS_POOLS=true (with AKS_CLUSTER_ID).
        AksAgentPools.from_settings(settings, credential=credential),
    ]


class _NoStorage:
    """Stands in for the state table and queue where none is connected; any use is a bug."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no storage connected: {name} is not available here")


def _quota_source(settings: Settings, credential: TokenCredential, clock: Clock | None) -> QuotaSource | None:
    """The Compute usages reader (QUOTA_AWARE); None when off. Its cache ages in `clock`'s time when one is given
    (the local runner's sandbox clock, which runs faster than the wall), else in monotonic wall time."""
    if not settings.quota_aware:
        return None
    from shared.adapters.compute_usages import ComputeUsages

    if clock is None:
        return ComputeUsages.from_settings(settings, credential=credential)
    return ComputeUsages.from_settings(settings, credential=credential, monotonic=lambda: clock.now().timestamp())


def _standby_pools(settings: Settings, credential: TokenCredential) -> StandbyPoolSource | None:
    """The Standby Pool reader and writer (STANDBY_POOLS); None when off."""
    if not settings.standby_pools:
        return None
    from shared.adapters.standby_pools import AzureStandbyPools

    return AzureStandbyPools.from_settings(settings, credential=credential)


def _usage_source(settings: Settings, credential: TokenCredential) -> NodeUsageSource | None:
    """The measured-usage adapter USAGE_SOURCE names; its SDK is imported only when it is used."""
    if settings.usage_source == "log-analytics":
        from shared.adapters.log_analytics import LogAnalyticsUsage

        return LogAnalyticsUsage.from_settings(settings, credential=credential)
    if settings.usage_source == "vmss-metric":
        from shared.adapters.vmss_metrics import VmssMetricUsage

        return VmssMetricUsage.from_settings(settings, credential=credential)
    return None


def get_context() -> AppContext:
    global _current
    if _current is None:
        _current = build_context(os.environ)
    return _current


def install_context(context: AppContext | None) -> None:
    """For the local runner and tests: use this context instead of one built from os.environ."""
    global _current
    _current = context
