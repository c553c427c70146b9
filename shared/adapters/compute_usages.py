"""The subscription's Compute quotas per location: `GET .../providers/Microsoft.Compute/locations/{location}/usages`.

`shared.ports.QuotaSource` over azure-mgmt-compute's `usage.list`. Each location's answer is cached for
QUOTA_CACHE (a few minutes: quotas change when VMs are created anywhere in the subscription, not only by
us) and read again at once after a quota refusal (`refresh`). What we asked for since the last read is
added to the answers (`note_requested`), so the polls between two reads never plan the same room twice.
The identity needs `Microsoft.Compute/locations/usages/read`, which Virtual Machine Contributor has.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from azure.core.credentials import TokenCredential
from azure.core.exceptions import AzureError

from shared.adapters.compute import _text, arm_client_options, compute_error
from shared.domain import QuotaUsage
from shared.ports import QuotaUnavailable
from shared.settings import Settings

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Entry:
    usages: tuple[QuotaUsage, ...]
    read_at: float  # monotonic seconds
    requested: dict[str, int] = field(default_factory=dict)  # lower-cased quota name -> vCPUs asked for since


class ComputeUsages:
    """`QuotaSource` over the Compute usages API, cached per location (see the module docstring)."""

    name = "compute-usages"

    def __init__(self, client: Any, *, ttl: float, monotonic: Callable[[], float] = time.monotonic,
                 retry: float = 600.0) -> None:
        self._client = client
        self._ttl = ttl
        self._retry = retry  # seconds before a failed read is tried again
        self._failed_until: dict[str, float] = {}
        self._monotonic = monotonic
        self._cache: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, *, credential: TokenCredential,
                      monotonic: Callable[[], float] = time.monotonic) -> ComputeUsages:
        from azure.mgmt.compute import ComputeManagementClient

        client = ComputeManagementClient(
            credential, settings.subscription_id,
            **arm_client_options(settings, retry_total=2, retry_backoff_max=4, timeout=30),
        )
        return cls(client, ttl=settings.quota_cache.total_seconds(), monotonic=monotonic)

    def list_usages(self, location: str, *, refresh: bool = False) -> list[QuotaUsage]:
        key = location.strip().lower()
        with self._lock:
            entry = self._cache.get(key)
            now = self._monotonic()
            if refresh or entry is None or now - entry.read_at >= self._ttl:
                what = f"list Compute usages in {key}"
                if not refresh and now < self._failed_until.get(key, -1.0):
                    raise QuotaUnavailable(f"{what}: failed lately; tried again after {self._retry:g}s")
                try:
                    listed = list(self._client.usage.list(key))
                except AzureError as exc:
                    # Most often a 403: the read is subscription-level (docs/deploy.md). Not asked every poll.
                    self._failed_until[key] = now + self._retry
                    raise QuotaUnavailable(str(compute_error(what, exc))) from exc
                except ValueError as exc:  # a body the SDK could not deserialize
                    raise QuotaUnavailable(f"{what}: {exc}") from exc
                entry = _Entry(tuple(_usage(u) for u in listed), now)
                self._cache[key] = entry
                log.info("read %d Compute usages in %s; cached for %gs", len(entry.usages), key, self._ttl)
            return [QuotaUsage(u.name, u.current + entry.requested.get(u.name.lower(), 0), u.limit, u.localized)
                    for u in entry.usages]

    def note_requested(self, location: str, names: Sequence[str], vcpus: int) -> None:
        with self._lock:
            entry = self._cache.get(location.strip().lower())
            if entry is None or vcpus <= 0:
                return  # nothing cached: the next read sees the request itself
            for name in names:
                entry.requested[name.lower()] = entry.requested.get(name.lower(), 0) + vcpus

    def close(self) -> None:
        self._client.close()


def _usage(raw: Any) -> QuotaUsage:
    name = getattr(raw, "name", None)
    return QuotaUsage(
        name=_text(getattr(name, "value", None)),
        current=int(getattr(raw, "current_value", 0) or 0),
        limit=int(getattr(raw, "limit", 0) or 0),
        localized=_text(getattr(name, "localized_value", None)),
    )
