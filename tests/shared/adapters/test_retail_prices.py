"""RetailPrices: VM prices from the Retail Prices API over TLS against the sandbox's double, VM_PRICES first,
cached, and never raising; and VmssCompute.list_prices on top of it."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sandbox import prices_api
from sandbox.clock import ManualClock
from sandbox.server import SandboxServer
from sandbox.wire import Request
from shared.adapters.compute import VmssCompute
from shared.adapters.retail_prices import RetailPrices, pick_prices, price_filter
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory
from tests.shared.adapters.sandbox_world import SCENARIO, settings_for

D4, E8 = prices_api.LIST_PRICES_PER_HOUR["Standard_D4s_v5"], prices_api.LIST_PRICES_PER_HOUR["Standard_E8s_v5"]


@pytest.fixture
def server(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(SCENARIO, clock=ManualClock(SANDBOX_START))


class Counting:
    """Wraps the adapter's pipeline client to count the requests it sends."""

    def __init__(self, prices: RetailPrices) -> None:
        self.urls: list[str] = []
        client = prices._client  # noqa: SLF001 - the test counts what goes over the wire
        assert client is not None
        send = client.send_request

        def counted(request: Any, **kwargs: Any) -> Any:
            self.urls.append(request.url)
            return send(request, **kwargs)

        client.send_request = counted  # type: ignore[method-assign]


def test_the_linux_pay_as_you_go_price_of_each_size_asked_for(server: SandboxServer) -> None:
    prices = RetailPrices.from_settings(settings_for(server))
    got = prices.get_vm_prices("EastUS", ["Standard_D4s_v5", "Standard_E8s_v5", "Standard_Nope_v9"])
    # Not the Windows (1.8x), Spot or Low Priority rows of the same sizes; an unknown size has no price.
    assert got == {"standard_d4s_v5": D4, "standard_e8s_v5": E8}
    assert prices.get_vm_prices("eastus", ["Standard_D4s_v5"], spot=True) == {"standard_d4s_v5": pytest.approx(D4 * 0.2)}


def test_pages_are_followed(server: SandboxServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prices_api, "PAGE_SIZE", 1)  # every row of the two sizes on a page of its own
    prices = RetailPrices.from_settings(settings_for(server))
    counter = Counting(prices)
    assert prices.get_vm_prices("eastus", ["Standard_D4s_v5", "Standard_E8s_v5"]) == {
        "standard_d4s_v5": D4, "standard_e8s_v5": E8}
    assert len(counter.urls) == 8  # 4 rows a size (Linux, Spot, Low Priority, Windows)


def test_prices_are_cached_and_vm_prices_are_never_looked_up(server: SandboxServer) -> None:
    prices = RetailPrices.from_settings(settings_for(server, VM_PRICES='{"standard_d4s_v5": 0.15}'))
    counter = Counting(prices)
    assert prices.get_vm_prices("eastus", ["Standard_D4s_v5"]) == {"standard_d4s_v5": 0.15}
    assert counter.urls == []
    for _ in range(3):
        assert prices.get_vm_prices("eastus", ["Standard_D4s_v5", "Standard_E8s_v5"])["standard_e8s_v5"] == E8
    assert len(counter.urls) == 1  # once, for E8 only
    assert "Standard_D4s_v5" not in counter.urls[0] and "Standard_E8s_v5" in counter.urls[0]


def test_an_unreachable_api_leaves_sizes_unpriced_and_is_not_asked_again_at_once(
    server: SandboxServer, caplog: pytest.LogCaptureFixture
) -> None:
    prices = RetailPrices.from_settings(settings_for(server, RETAIL_PRICES_ENDPOINT=f"{server.url}/nowhere"))
    counter = Counting(prices)
    with caplog.at_level(logging.WARNING, "shared.adapters.retail_prices"):
        assert prices.get_vm_prices("eastus", ["Standard_D4s_v5"]) == {}
        assert prices.get_vm_prices("eastus", ["Standard_D4s_v5"]) == {}
    assert len(counter.urls) == 1
    assert "Retail Prices API" in caplog.text and "keeping cached prices" in caplog.text


def test_an_empty_endpoint_means_vm_prices_only(server: SandboxServer) -> None:
    prices = RetailPrices.from_settings(settings_for(server, RETAIL_PRICES_ENDPOINT="", VM_PRICES='{"Standard_D2s_v5": 0.1}'))
    assert prices.get_vm_prices("eastus", ["Standard_D2s_v5", "Standard_D4s_v5"]) == {"standard_d2s_v5": 0.1}


def test_the_provider_prices_each_group_by_its_size_and_location(server: SandboxServer) -> None:
    compute = VmssCompute.from_settings(settings_for(server))
    try:
        groups = compute.list_node_groups()
        prices = compute.list_prices(groups)
    finally:
        compute.close()
    assert groups and prices == {
        g.id: prices_api.LIST_PRICES_PER_HOUR[g.vm_size] for g in groups if g.vm_size in prices_api.LIST_PRICES_PER_HOUR
    }


def test_a_spot_group_is_priced_at_its_sizes_spot_meter(server: SandboxServer) -> None:
    from dataclasses import replace

    prices = RetailPrices.from_settings(settings_for(server))
    groups = [replace(g, location="eastus") for g in VmssCompute.from_settings(settings_for(server)).list_node_groups()
              if g.vm_size == "Standard_D4s_v5"][:1]
    assert groups
    regular, spot = groups[0], replace(groups[0], name=groups[0].name + "-spot", priority="Spot")
    got = prices.get_group_prices([regular, spot])
    assert got == {regular.id: D4, spot.id: pytest.approx(D4 * 0.2)}


# --- without a server ---------------------------------------------------------------------------------


def test_the_filter_names_the_region_the_sizes_and_pay_as_you_go() -> None:
    assert price_filter("eastus", ["Standard_D4s_v5", "O'Brien"]) == (
        "serviceName eq 'Virtual Machines' and armRegionName eq 'eastus' and priceType eq 'Consumption' "
        "and (armSkuName eq 'Standard_D4s_v5' or armSkuName eq 'O''Brien')"
    )


ROW = {"armSkuName": "Standard_D4s_v5", "unitOfMeasure": "1 Hour", "meterName": "D4s v5",
       "productName": "Virtual Machines D Series", "retailPrice": 0.192}


@pytest.mark.parametrize("rows,spot,expected", [
    ([ROW], False, {"standard_d4s_v5": 0.192}),
    ([ROW, {**ROW, "productName": "Virtual Machines D Series Windows", "retailPrice": 0.38}], False,
     {"standard_d4s_v5": 0.192}),
    ([ROW, {**ROW, "meterName": "D4s v5 Spot", "retailPrice": 0.04}], False, {"standard_d4s_v5": 0.192}),
    ([ROW, {**ROW, "meterName": "D4s v5 Spot", "retailPrice": 0.04}], True, {"standard_d4s_v5": 0.04}),
    ([{**ROW, "meterName": "D4s v5 Low Priority", "retailPrice": 0.03}], False, {}),
    ([{**ROW, "unitOfMeasure": "1/Month"}], False, {}),
    ([ROW, {**ROW, "retailPrice": 0.18}], False, {"standard_d4s_v5": 0.18}),  # two meter regions: the lower
    ([{**ROW, "retailPrice": "0.1"}, {**ROW, "retailPrice": -1}, {**ROW, "armSkuName": ""}], False, {}),
], ids=["linux", "not windows", "not spot", "spot", "never low priority", "hourly only", "lowest", "malformed"])
def test_pick_prices(rows: list[dict[str, Any]], spot: bool, expected: dict[str, float]) -> None:
    assert pick_prices(rows, spot=spot) == expected


@pytest.mark.parametrize("text,message", [
    ("serviceName eq Virtual", "expected `field eq 'value'`"),
    ("colour eq 'red'", "unknown field 'colour'"),
    ("(armSkuName eq 'a' or serviceName eq 'b')", "an or-group must compare one field"),
])
def test_the_double_refuses_a_filter_it_cannot_read(text: str, message: str) -> None:
    response = prices_api.handle(Request.build("GET", prices_api.PREFIX, {"$filter": text}), base_url="https://x")
    assert response.status == 400 and message in response.json()["Error"]["Message"]
