"""ComputeUsages: the Compute usages API through azure-mgmt-compute against the sandbox's double; its cache,
refresh after a quota refusal, what was asked for since a read, and a read that fails."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared.adapters.compute_usages import ComputeUsages
from shared.domain import QuotaUsage
from shared.ports import QuotaUnavailable
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, compute_client
from tests.sandbox.helpers import POOL, RG
from tests.sandbox.test_quota import quota_doc, usage


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def server(sandbox_factory: SandboxFactory) -> SandboxServer:
    doc = quota_doc({"cores": 100, "lowPriorityCores": 10, "standardDSv5Family": 40}, arm_page_size=2)
    return sandbox_factory(doc, clock=ManualClock(SANDBOX_START))


def _calls(server: SandboxServer) -> int:
    return int(server.world.report()["api_calls"]["breakdown"]["arm"].get("LIST usages", 0))


def by_name(usages: list[QuotaUsage]) -> dict[str, tuple[int, int]]:
    return {u.name: (u.current, u.limit) for u in usages}


def test_usages_are_read_through_the_sdk_and_cached_until_the_ttl(server: SandboxServer) -> None:
    clock = Clock()
    quota = ComputeUsages(compute_client(server), ttl=180, monotonic=clock)
    first = by_name(quota.list_usages("WestEurope"))
    assert first["standardDSv5Family"] == (4, 40) and first["lowPriorityCores"][1] == 10 and first["cores"][1] == 100
    assert {u.localized for u in quota.list_usages("westeurope") if u.name == "cores"} == {"Total Regional vCPUs"}
    pages = _calls(server)
    clock.t = 179
    quota.list_usages("westeurope")
    assert _calls(server) == pages  # cached
    clock.t = 180
    quota.list_usages("westeurope")
    assert _calls(server) > pages  # stale: read again


def test_requests_count_until_the_next_read_and_a_refresh_reads_at_once(server: SandboxServer) -> None:
    clock = Clock()
    quota = ComputeUsages(compute_client(server), ttl=180, monotonic=clock)
    quota.list_usages("westeurope")
    quota.note_requested("westeurope", ("standarddsv5family", "cores"), 8)
    noted = by_name(quota.list_usages("westeurope"))
    assert noted["standardDSv5Family"] == (12, 40)
    # Azure grants what was asked for; a refresh reads its figures and forgets the notes.
    world = server.world
    world.set_capacity(world.scale_set(world.subscription_id, RG, POOL), 3)
    fresh = by_name(quota.list_usages("westeurope", refresh=True))
    assert fresh["standardDSv5Family"] == usage(server.world)["standardDSv5Family"]
    assert fresh["standardDSv5Family"][0] > 4  # the new instances, and no note on top


class _Failing:
    def __init__(self) -> None:
        self.calls = 0
        self.usage = SimpleNamespace(list=self._list)

    def _list(self, location: str) -> Any:
        self.calls += 1
        raise HttpResponseError(message="(AuthorizationFailed) The client does not have authorization")

    def close(self) -> None:
        pass


def test_a_failed_read_is_unavailable_and_not_asked_again_every_poll() -> None:
    client, clock = _Failing(), Clock()
    quota = ComputeUsages(client, ttl=180, monotonic=clock, retry=600)
    for _ in range(3):
        with pytest.raises(QuotaUnavailable, match="usages"):
            quota.list_usages("westeurope")
    assert client.calls == 1
    clock.t = 600
    with pytest.raises(QuotaUnavailable):
        quota.list_usages("westeurope")
    assert client.calls == 2


def test_the_composition_root_ages_the_cache_in_the_clock_it_is_given(server: SandboxServer) -> None:
    # The local runner passes the sandbox's accelerated clock: a 3-minute cache must last 3 sandbox minutes, not 3
    # wall minutes (90 sandbox minutes at speed 30).
    from shared.context import build_context

    env = {**server.env(), "AzureWebJobsStorage": "UseDevelopmentStorage=true", "QUOTA_AWARE": "true"}
    quota = build_context(env, clock=server.clock).ports.quota
    assert isinstance(quota, ComputeUsages)
    quota.list_usages("westeurope")
    pages = _calls(server)
    server.clock.advance(179)
    quota.list_usages("westeurope")
    assert _calls(server) == pages
    server.clock.advance(1)
    quota.list_usages("westeurope")
    assert _calls(server) > pages
