"""A double of the Azure Retail Prices API (`GET https://prices.azure.com/api/retail/prices`).

Serves, for every VM size of `LIST_PRICES_PER_HOUR` in any region, the rows the real API has for
it: Linux pay-as-you-go, Linux Spot, Linux Low Priority and Windows pay-as-you-go, each with the
fields a client filters on (`armSkuName`, `armRegionName`, `serviceName`, `priceType`, `type`,
`meterName`, `skuName`, `productName`, `unitOfMeasure`, `retailPrice`, `unitPrice`,
`currencyCode`). Answers `{"BillingCurrency", "CustomerEntityId", "CustomerEntityType", "Items",
"NextPageLink", "Count"}`, `PAGE_SIZE` items a page, with `$skip` in the next link as the real
API pages.

`$filter` understands what clients send: `and`-joined `field eq 'value'` terms and parenthesised
`or` groups of them. Values compare case-sensitively, as they do from api-version
2023-01-01-preview on; an unknown field or a malformed filter is a 400 with the real API's error
shape. The real API is unauthenticated: so is this one.

The prices are the replay's shipped table (Linux East US list prices, `PRICE_DATE`), the same in
every region of the sandbox; Spot at 20 % and Low Priority at 20 %, Windows at 1.8x, which is
roughly where they sit, and only there so a client that picks the wrong row gets a wrong price.

Azure Container Instances has its rows too (`serviceName` 'Container Instances', productName 'Container
Instances', skuName 'Standard', no armSkuName): one per meter of `sandbox.model.aci.ACI_METERS` ('Standard vCPU
Duration' per '1 Hour', 'Standard Memory Duration' per '1 GB Hour'), the table the sandbox's virtual node
bills at, so the world and this API answer the same price.

Managed disks have their rows too (`serviceName` 'Storage', productName 'Premium SSD Managed Disks', skuName
'P10 LRS', meterName 'P10 LRS Disk', unitOfMeasure '1/Month', no armSkuName): one per OS disk tier of
`sandbox.model.os_disks`, the table the world bills deallocated instances' OS disks at.
"""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import urlencode

from sandbox.api.spot_price_table import LOW_PRIORITY_FRACTION, spot_fraction_of
from sandbox.model import aci, os_disks
from sandbox.api.wire import Request, Response, json_response

PREFIX: Final = "/api/retail/prices"
PAGE_SIZE: Final = 100
PRICE_DATE: Final = "2026-11"
PRICE_SOURCE: Final = "Azure retail list prices, Linux pay-as-you-go, East US (approximate, shipped table)"
# USD per hour, Linux pay-as-you-go. Update the table and the date together.
LIST_PRICES_PER_HOUR: Final[dict[str, float]] = {
    "Standard_D2s_v5": 0.096,
    "Standard_D4s_v5": 0.192,
    "Standard_D8s_v5": 0.384,
    "Standard_D16s_v5": 0.768,
    "Standard_D32s_v5": 1.536,
    "Standard_D48s_v5": 2.304,
    "Standard_D64s_v5": 3.072,
    "Standard_E4s_v5": 0.252,
    "Standard_E8s_v5": 0.504,
    "Standard_F8s_v2": 0.338,
    "Standard_NC4as_T4_v3": 0.526,
    "Standard_NC24ads_A100_v4": 3.673,
    "Standard_NC48ads_A100_v4": 7.346,
    "Standard_NC96ads_A100_v4": 14.692,
}
_FIELDS: Final = frozenset({
    "armRegionName", "armSkuName", "currencyCode", "location", "meterId", "meterName", "priceType", "productId",
    "productName", "serviceFamily", "serviceName", "skuId", "skuName", "type",
})
_ALIASES: Final = {"priceType": "type"}  # the filter's name for the items' `type`
_REGIONS: Final = ("eastus", "westeurope", "uksouth", "northeurope", "westus2", "westus3", "eastus2", "centralus")
_TERM = re.compile(r"\s*(?P<field>[A-Za-z]+)\s+eq\s+'(?P<value>(?:[^']|'')*)'\s*")


class FilterError(ValueError):
    pass


def handle(request: Request, *, base_url: str) -> Response:
    if request.method != "GET":
        return _error(405, f"The requested resource does not support http method '{request.method}'.")
    try:
        clauses = parse_filter(request.query.get("$filter", ""))
    except FilterError as exc:
        return _error(400, f"Invalid OData filter: {exc}")
    try:
        skip = int(request.query.get("$skip", "0"))
    except ValueError:
        return _error(400, "$skip must be a whole number")
    rows = [row for row in _rows() if all(row.get(_ALIASES.get(f, f)) in values for f, values in clauses)]
    page = rows[max(0, skip):max(0, skip) + PAGE_SIZE]
    next_link = None
    if skip + PAGE_SIZE < len(rows):
        query = {k: v for k, v in request.query.items() if k != "$skip"}
        next_link = f"{base_url}{PREFIX}?{urlencode({**query, '$skip': skip + PAGE_SIZE})}"
    return json_response(200, {
        "BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
        "Items": page, "NextPageLink": next_link, "Count": len(page),
    })


def parse_filter(text: str) -> list[tuple[str, frozenset[str]]]:
    """`a eq 'x' and (b eq 'y' or b eq 'z')` -> [(a, {x}), (b, {y, z})]: every clause must hold."""
    clauses: list[tuple[str, frozenset[str]]] = []
    for part in _split(text, " and "):
        group = part.strip()
        if group.startswith("(") and group.endswith(")"):
            group = group[1:-1]
        terms = [_term(t) for t in _split(group, " or ")]
        fields = {f for f, _ in terms}
        if len(fields) != 1:
            raise FilterError(f"an or-group must compare one field: {part.strip()!r}")
        clauses.append((fields.pop(), frozenset(v for _, v in terms)))
    return clauses


def _split(text: str, word: str) -> list[str]:
    """Split on `word` outside quotes and parentheses."""
    parts, depth, quoted, start, i = [], 0, False, 0, 0
    while i < len(text):
        c = text[i]
        if c == "'":
            quoted = not quoted
        elif not quoted and c in "()":
            depth += 1 if c == "(" else -1
        elif not quoted and depth == 0 and text.startswith(word, i):
            parts.append(text[start:i])
            i += len(word)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()] if text.strip() else []


def _term(text: str) -> tuple[str, str]:
    match = _TERM.fullmatch(text)
    if match is None:
        raise FilterError(f"expected `field eq 'value'`, got {text.strip()!r}")
    if match["field"] not in _FIELDS:
        raise FilterError(f"unknown field {match['field']!r}")
    return match["field"], match["value"].replace("''", "'")


def _rows() -> list[dict[str, Any]]:
    rows = []
    for region in _REGIONS:
        for size, price in LIST_PRICES_PER_HOUR.items():
            short = size.removeprefix("Standard_").replace("_", " ")
            series = f"Virtual Machines {short.split(' ')[0][0]} Series"
            for suffix, product, factor in (
                ("", series, 1.0), (" Spot", series, spot_fraction_of(size)),
                (" Low Priority", series, LOW_PRIORITY_FRACTION),
                ("", f"{series} Windows", 1.8),
            ):
                rows.append({
                    "currencyCode": "USD", "tierMinimumUnits": 0.0,
                    "retailPrice": round(price * factor, 6), "unitPrice": round(price * factor, 6),
                    "armRegionName": region, "location": region, "effectiveStartDate": f"{PRICE_DATE}-01T00:00:00Z",
                    "meterId": f"{region}-{size}-{suffix.strip() or 'regular'}-{product}".lower().replace(" ", "-"),
                    "meterName": f"{short}{suffix}", "productId": f"DZH318Z0{len(short):04d}", "skuId": f"{size}{suffix}",
                    "productName": product, "skuName": f"{short}{suffix}", "serviceName": "Virtual Machines",
                    "serviceId": "DZH313Z7MMC8", "serviceFamily": "Compute", "unitOfMeasure": "1 Hour",
                    "type": "Consumption", "isPrimaryMeterRegion": True,
                    "armSkuName": size,
                })
        rows += [_aci_row(region, meter) for meter in aci.ACI_METERS]
        rows += [_disk_row(region, tier) for tier in os_disks.OS_DISK_TIERS]
    return rows


def _disk_row(region: str, disk: os_disks.OsDiskTier) -> dict[str, Any]:
    """A managed disk row: Storage's Premium SSD tiers have no armSkuName; skuName '<tier> LRS', meterName
    '<tier> LRS Disk', a price per disk-month."""
    return _service_row(
        region, price=disk.usd_per_month, date=os_disks.DISK_PRICE_DATE, meter_id=f"disk-{disk.meter_name}",
        meter_name=disk.meter_name, product_id="DZH318Z0BP04", sku_id=f"DZH318Z0BP04/{disk.tier}",
        product_name=os_disks.PRODUCT_NAME, sku_name=disk.sku_name, service_name=os_disks.SERVICE_NAME,
        service_id="DZH317F1HKN0", service_family=os_disks.SERVICE_FAMILY, unit=os_disks.UNIT_OF_MEASURE,
    )


def _aci_row(region: str, meter: aci.AciMeter) -> dict[str, Any]:
    """A Container Instances row: ACI's meters have no armSkuName; they are told apart by meterName."""
    return _service_row(
        region, price=meter.unit_price, date=aci.ACI_PRICE_DATE, meter_id=f"aci-{meter.meter_name}",
        meter_name=meter.meter_name, product_id="DZH318Z0ACI0", sku_id=f"DZH318Z0ACI0/{aci.ACI_SKU_NAME}",
        product_name=aci.ACI_PRODUCT_NAME, sku_name=aci.ACI_SKU_NAME, service_name=aci.ACI_SERVICE_NAME,
        service_id="DZH3180L3Q8Q", service_family="Containers", unit=meter.unit_of_measure,
    )


def _service_row(region: str, *, price: float, date: str, meter_id: str, meter_name: str, product_id: str,
                 sku_id: str, product_name: str, sku_name: str, service_name: str, service_id: str,
                 service_family: str, unit: str) -> dict[str, Any]:
    """A row of a service other than Virtual Machines: no armSkuName, told apart by its names."""
    return {
        "currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": price, "unitPrice": price,
        "armRegionName": region, "location": region, "effectiveStartDate": f"{date}-01T00:00:00Z",
        "meterId": f"{region}-{meter_id}".lower().replace(" ", "-"), "meterName": meter_name,
        "productId": product_id, "skuId": sku_id, "productName": product_name, "skuName": sku_name,
        "serviceName": service_name, "serviceId": service_id, "serviceFamily": service_family,
        "unitOfMeasure": unit, "type": "Consumption", "isPrimaryMeterRegion": True, "armSkuName": "",
    }


def _error(status: int, message: str) -> Response:
    return json_response(status, {"Error": {"Code": "BadRequest" if status == 400 else "Error", "Message": message}})
