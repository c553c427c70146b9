"""VM prices from the Azure Retail Prices API, for the node-group providers' `list_prices`.

Adapter module: `get_vm_prices` makes one unauthenticated GET per location (and page) to
`{RETAIL_PRICES_ENDPOINT}/api/retail/prices`, filtered to the sizes asked for:

    serviceName eq 'Virtual Machines' and armRegionName eq 'eastus' and priceType eq 'Consumption'
    and (armSkuName eq 'Standard_D4s_v5' or ...)

The API answers `{"Items": [...], "NextPageLink": ...}`. A size has several rows (Linux and Windows,
regular, Spot and Low Priority, per meter region), and under the same `serviceName` and `armSkuName`
rows of other products: classic Cloud Services ("Dasv5 Series Cloud Services", priced like Windows
without saying so) and Dedicated Hosts ("DSv3 Series Dedicated Host"). We keep only the Linux
pay-as-you-go hourly rows of a VM product (`pick_prices`, `is_linux_vm_row`): `productName` starting
"Virtual Machines " and not naming Windows (its last word "Windows", or "Win" as in "Virtual Machines
NCCadsv5 Srs Win"), `unitOfMeasure` "1 Hour", no "Spot"/"Low Priority" in `meterName` or `skuName`
(or only Spot rows with `spot=True`), and take the lowest `retailPrice`. A size with no such row has
no price, whatever other rows say. Prices are USD retail: what a subscription without discounts pays,
and a fair ranking between sizes for everyone else.

`VM_PRICES` (a JSON object, size -> USD per hour) overrides the API per size: for negotiated prices,
sovereign clouds the API does not cover, or a deployment that must not call it (then list every size).

Prices change rarely, so each (location, size) is cached for `ttl` seconds; a failed call logs a
warning, keeps what was cached, and is not tried again for `retry` seconds. Nothing here raises.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlencode, urlsplit

from azure.core import PipelineClient
from azure.core.exceptions import AzureError
from azure.core.pipeline.policies import HeadersPolicy, RetryPolicy
from azure.core.rest import HttpRequest

from shared.domain import NodeGroup
from shared.settings import Settings

__all__ = ["API_VERSION", "RetailPrices", "is_linux_vm_row", "price_filter", "pick_prices"]

log = logging.getLogger(__name__)

# Filter values are case-sensitive from this version on (armSkuName as ARM spells it: `Standard_D4s_v5`).
API_VERSION: Final = "2023-01-01-preview"
MAX_PAGES: Final = 20  # a few sizes in one region are one page; this only bounds a misbehaving server
_SIZES_PER_CALL: Final = 15  # keeps the $filter well inside URL length limits


@dataclass(frozen=True, slots=True)
class _Entry:
    price: float | None  # None: the API has no matching row for the size
    fresh_until: float


def price_filter(location: str, vm_sizes: Iterable[str]) -> str:
    """The OData $filter for these sizes' pay-as-you-go rows in one region."""
    sizes = " or ".join(f"armSkuName eq '{_quoted(s)}'" for s in vm_sizes)
    return (
        f"serviceName eq 'Virtual Machines' and armRegionName eq '{_quoted(location)}' "
        f"and priceType eq 'Consumption' and ({sizes})"
    )


def _quoted(value: str) -> str:
    return value.replace("'", "''")  # OData string literal


_VM_PRODUCT: Final = "Virtual Machines "  # every VM product's name starts so; Cloud Services, Dedicated Host do not
_WINDOWS_WORDS: Final = frozenset({"Windows", "Win"})  # a product's last word when it is the Windows meter


def is_linux_vm_row(item: Mapping[str, Any], *, spot: bool = False) -> bool:
    """Whether a Retail Prices row is a Linux VM's hourly pay-as-you-go meter (Spot ones only with `spot`).

    Not a row of another product sharing the size's name (Cloud Services, Dedicated Host), a Windows
    meter, a Low Priority one, a reservation or Dev/Test rate, or a monthly unit. A row that leaves a
    field out is judged on the fields it has, except `productName`, which it must have.
    """
    product = str(item.get("productName") or "")
    if not product.startswith(_VM_PRODUCT) or "Windows" in product or product.split()[-1] in _WINDOWS_WORDS:
        return False
    if str(item.get("serviceName") or "Virtual Machines") != "Virtual Machines":
        return False
    if str(item.get("type") or "Consumption") != "Consumption" or str(item.get("unitOfMeasure") or "") != "1 Hour":
        return False
    names = f"{item.get('meterName') or ''} {item.get('skuName') or ''}"
    return "Low Priority" not in names and ("Spot" in names) == spot


def pick_prices(items: Iterable[Mapping[str, Any]], *, spot: bool = False) -> dict[str, float]:
    """The lowest Linux hourly retail price per lower-cased armSkuName among the API's VM rows."""
    prices: dict[str, float] = {}
    for item in items:
        if not is_linux_vm_row(item, spot=spot):
            continue
        price = item.get("retailPrice")
        size = str(item.get("armSkuName") or "").lower()
        if not size or not isinstance(price, (int, float)) or isinstance(price, bool) or price < 0:
            continue
        prices[size] = min(prices.get(size, float(price)), float(price))
    return prices


class RetailPrices:
    """Hourly USD prices of VM sizes per location: `VM_PRICES` first, then the Retail Prices API (cached)."""

    def __init__(
        self,
        client: PipelineClient[HttpRequest, Any] | None,
        *,
        endpoint: str = "",
        overrides: Mapping[str, float] | None = None,
        ttl: float = 24 * 3600,
        retry: float = 600,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client  # None: overrides only, the API is never called
        self._endpoint = endpoint.rstrip("/")
        self._overrides = {k.lower(): float(v) for k, v in (overrides or {}).items()}
        self._ttl = ttl
        self._retry = retry
        self._monotonic = monotonic
        self._cache: dict[tuple[str, str, bool], _Entry] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> RetailPrices:
        client: PipelineClient[HttpRequest, Any] | None = None
        endpoint = settings.retail_prices_endpoint.rstrip("/")
        if endpoint:
            client = PipelineClient(
                endpoint,
                policies=[
                    HeadersPolicy({"Accept": "application/json"}),
                    RetryPolicy(retry_total=2, retry_backoff_factor=0.5, retry_backoff_max=4, timeout=30),
                ],
                connection_verify=settings.arm_ca_bundle or True,
                connection_timeout=5,
                read_timeout=30,
            )
        return cls(client, endpoint=endpoint, overrides=settings.vm_prices)

    def get_group_prices(self, groups: Iterable[NodeGroup]) -> dict[str, float]:
        """One node's hourly price by group id, from each group's VM size and location; never raises."""
        groups = list(groups)
        prices: dict[str, float] = {}
        for location in {g.location.lower() for g in groups}:
            for spot in (False, True):  # a spot group is priced at the size's Spot meter
                mine = [g for g in groups if g.location.lower() == location and g.is_spot == spot]
                if not mine:
                    continue
                by_size = self.get_vm_prices(location, {g.vm_size for g in mine}, spot=spot)
                prices.update({g.id: by_size[g.vm_size.lower()] for g in mine if g.vm_size.lower() in by_size})
        return prices

    def get_vm_prices(self, location: str, vm_sizes: Iterable[str], *, spot: bool = False) -> dict[str, float]:
        """Price per hour by lower-cased size name, for the sizes that have one; never raises."""
        location = location.strip().lower()
        wanted = {s.lower(): s for s in vm_sizes if s}
        prices = {k: self._overrides[k] for k in wanted if k in self._overrides and not spot}
        with self._lock:
            now = self._monotonic()
            missing = []
            for key, size in wanted.items():
                if key in prices:
                    continue
                entry = self._cache.get((location, key, spot))
                if entry is not None and now < entry.fresh_until:
                    if entry.price is not None:
                        prices[key] = entry.price
                else:
                    missing.append(size)
            if missing and self._client is not None:
                for start in range(0, len(missing), _SIZES_PER_CALL):
                    prices.update(self._fetch(location, missing[start:start + _SIZES_PER_CALL], spot=spot, now=now))
        return prices

    def _fetch(self, location: str, sizes: list[str], *, spot: bool, now: float) -> dict[str, float]:
        assert self._client is not None
        query = urlencode({"api-version": API_VERSION, "$filter": price_filter(location, sizes)})
        url: str | None = f"{self._endpoint}/api/retail/prices?{query}"
        items: list[Mapping[str, Any]] = []
        what = f"read prices of {', '.join(sizes)} in {location} from the Retail Prices API"
        try:
            for _ in range(MAX_PAGES):
                if url is None:
                    break
                response = self._client.send_request(HttpRequest("GET", url))
                response.raise_for_status()
                body = response.json()
                items.extend(i for i in body.get("Items") or () if isinstance(i, Mapping))
                url = self._next_page(body.get("NextPageLink"))
        except (AzureError, ValueError, AttributeError) as exc:  # ValueError/AttributeError: not the JSON we expect
            log.warning("%s: %s; keeping cached prices, next try in %gs", what, exc, self._retry)
            stale = {}
            for size in (s.lower() for s in sizes):
                old = self._cache.get((location, size, spot))
                self._cache[(location, size, spot)] = _Entry(old.price if old else None, now + self._retry)
                if old is not None and old.price is not None:
                    stale[size] = old.price
            return stale
        found = pick_prices(items, spot=spot)
        for size in sizes:
            self._cache[(location, size.lower(), spot)] = _Entry(found.get(size.lower()), now + self._ttl)
        unpriced = [s for s in sizes if s.lower() not in found]
        if unpriced:
            log.warning("%s: no Linux pay-as-you-go price for %s; set VM_PRICES to price them", what, ", ".join(unpriced))
        return {s.lower(): found[s.lower()] for s in sizes if s.lower() in found}

    def _next_page(self, link: object) -> str | None:
        # Follow only links to the configured endpoint: the API's own pages, never a redirect elsewhere.
        if not isinstance(link, str) or not link:
            return None
        base = urlsplit(self._endpoint)
        target = urlsplit(link)
        if (target.scheme, target.netloc) != (base.scheme, base.netloc):
            log.warning("Retail Prices API: not following a next page on another host (%s)", target.netloc)
            return None
        return link
