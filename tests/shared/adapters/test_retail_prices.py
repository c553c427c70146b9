"""RetailPrices: VM prices from the Retail Prices API over TLS against the sandbox's double, VM_PRICES first,
cached, and never raising; and VmssCompute.list_prices on top of it."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sandbox.api import prices_api
from sandbox.api.server import SandboxServer
from sandbox.api.spot_price_table import spot_fraction_of
from sandbox.api.wire import Request
from sandbox.clock import ManualClock
from shared.adapters.compute import VmssCompute
from shared.adapters.retail_prices import RetailPrices, is_linux_vm_row, pick_prices, price_filter
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory
from tests.shared.adapters.sandbox_world import SCENARIO, settings_for

D4, E8 = prices_api.LIST_PRICES_PER_HOUR["Standard_D4s_v5"], prices_api.LIST_PRICES_PER_HOUR["Standard_E8s_v5"]
D4_SPOT = D4 * spot_fraction_of("Standard_D4s_v5")  # the double's Spot row


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
    assert prices.get_vm_prices("eastus", ["Standard_D4s_v5"], spot=True) == {"standard_d4s_v5": pytest.approx(D4_SPOT)}


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
    assert got == {regular.id: D4, spot.id: pytest.approx(D4_SPOT)}


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


def retail_row(product: str, meter: str, price: float, *, size: str = "Standard_D2as_v5", sku: str | None = None,
               service: str = "Virtual Machines", kind: str = "Consumption", unit: str = "1 Hour") -> dict[str, Any]:
    """A Retail Prices API item with every field the live API sends (shape of a recorded australiacentral row)."""
    return {
        "currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": price, "unitPrice": price,
        "armRegionName": "eastus", "location": "US East", "effectiveStartDate": "2023-09-01T00:00:00Z",
        "meterId": f"meter-{product}-{meter}".lower().replace(" ", "-"), "meterName": meter,
        "productId": "DZH318Z0K9JD", "skuId": "DZH318Z0K9JD/00GN", "productName": product,
        "skuName": meter if sku is None else sku, "serviceName": service, "serviceId": "DZH313Z7MMC8",
        "serviceFamily": "Compute", "unitOfMeasure": unit, "type": kind, "isPrimaryMeterRegion": True,
        "armSkuName": size,
    }


LINUX = retail_row("Virtual Machines Dasv5 Series", "D2as v5", 0.086)
WINDOWS = retail_row("Virtual Machines Dasv5 Series Windows", "D2as v5", 0.178)
CLOUD_SERVICES = retail_row("Dasv5 Series Cloud Services", "D2as v5", 0.178)  # priced as Windows, not named so
CLOUD_SERVICES_LOW_PRIORITY = retail_row("Dasv5 Series Cloud Services", "D2as v5 Low Priority", 0.0356)
SPOT = retail_row("Virtual Machines Dasv5 Series", "D2as v5 Spot", 0.0159)
LOW_PRIORITY = retail_row("Virtual Machines Dasv5 Series", "D2as v5 Low Priority", 0.0172)
DEDICATED_HOST = retail_row("DSv3 Series Dedicated Host", "DSv3 Type1", 4.512, size="Standard_D2as_v5")
WIN_ABBREVIATED = retail_row("Virtual Machines NCCadsv5 Srs Win", "NCC40ads H100 v5", 9.73,
                             size="Standard_NCC40ads_H100_v5")
LINUX_NCC = retail_row("Virtual Machines NCCadsv5 Srs", "NCC40ads H100 v5", 7.89, size="Standard_NCC40ads_H100_v5")


@pytest.mark.parametrize("rows,spot,expected", [
    ([CLOUD_SERVICES, WINDOWS], False, {}),  # the Linux row missing: nothing else stands in for it
    ([CLOUD_SERVICES, CLOUD_SERVICES_LOW_PRIORITY, LOW_PRIORITY], False, {}),
    ([CLOUD_SERVICES, WINDOWS, SPOT, LOW_PRIORITY, CLOUD_SERVICES_LOW_PRIORITY, LINUX], False,
     {"standard_d2as_v5": 0.086}),
    ([CLOUD_SERVICES, CLOUD_SERVICES_LOW_PRIORITY, WINDOWS, LINUX, SPOT], True, {"standard_d2as_v5": 0.0159}),
    ([CLOUD_SERVICES_LOW_PRIORITY], True, {}),
    ([DEDICATED_HOST], False, {}),
    ([WIN_ABBREVIATED], False, {}),
    ([WIN_ABBREVIATED, LINUX_NCC], False, {"standard_ncc40ads_h100_v5": 7.89}),
    ([{**LINUX, "meterName": "D2as v5", "skuName": "D2as v5 Spot"}], False, {}),  # the suffix on skuName alone
    ([{**LINUX, "type": "DevTestConsumption"}, {**LINUX, "type": "Reservation", "unitOfMeasure": "1 Hour"}], False, {}),
    ([{**LINUX, "serviceName": "Virtual Machines Licenses"}], False, {}),
    ([{**LINUX, "productName": None}, {**LINUX, "productName": ""}], False, {}),
], ids=["cloud services never stand in for linux", "low priority of either never", "linux among every other row",
        "spot among every other row", "cloud services low priority is not spot", "dedicated host",
        "windows abbreviated Win", "linux beside abbreviated windows", "spot on skuName", "dev/test and reservation",
        "another service", "no product name"])
def test_only_linux_vm_rows_price_a_vm(rows: list[dict[str, Any]], spot: bool, expected: dict[str, float]) -> None:
    assert pick_prices(rows, spot=spot) == expected
    assert all(is_linux_vm_row(r, spot=spot) == (r in (LINUX, SPOT, LINUX_NCC) and (r is SPOT) == spot)
               for r in rows)


@pytest.mark.parametrize("text,message", [
    ("serviceName eq Virtual", "expected `field eq 'value'`"),
    ("colour eq 'red'", "unknown field 'colour'"),
    ("(armSkuName eq 'a' or serviceName eq 'b')", "an or-group must compare one field"),
])
def test_the_double_refuses_a_filter_it_cannot_read(text: str, message: str) -> None:
    response = prices_api.handle(Request.build("GET", prices_api.PREFIX, {"$filter": text}), base_url="https://x")
    assert response.status == 400 and message in response.json()["Error"]["Message"]
