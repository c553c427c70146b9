"""Spot prices for the replay's spot pools: a fraction of each VM size's pay-as-you-go price, dated.

ASSUMED, not measured. Nothing under ../shared gives a spot price for these sizes, and nothing here
reaches the internet. Public material says Azure Spot VMs are "up to 90%" cheaper than pay-as-you-go
(Microsoft's spot-vms page; third-party guides quote 60-90%, one "80% for Linux"), and the sandbox's own
Retail Prices double (`sandbox.api.prices_api`) serves every size's Linux Spot row at 20 % of its
pay-as-you-go price. The table uses that same 0.20 for every size, so the replay's bill and the Spot
rows a client of the sandbox reads agree. Real spot prices move (Resource Graph `SpotResources` keeps
90 days of them) and differ by size and region; to check a real figure, read the Retail Prices API's
Spot row for the size (`contains(meterName, 'Spot')`, ../shared/facts/burst-and-spot.md) and edit the
table and the date together. `--spot-price-fraction` overrides it for one replay.

The bench reports how far the fraction could rise before `ours+spot` stops being half of `ours`
(docs/benchmarks.md, "Spot"), so the conclusion does not rest on 0.20 being exact.
"""

from __future__ import annotations

from typing import Final

from sandbox.api.prices_api import LIST_PRICES_PER_HOUR
from sandbox.api.spot_price_table import SPOT_PRICE_DATE, SPOT_PRICE_SOURCE, spot_fraction_of

__all__ = ["SPOT_PRICE_DATE", "SPOT_PRICE_FRACTION", "SPOT_PRICE_SOURCE", "spot_fraction"]

# Spot price / pay-as-you-go price, per VM size of the on-demand table (the Retail Prices double's Spot rows).
SPOT_PRICE_FRACTION: Final[dict[str, float]] = {size: spot_fraction_of(size) for size in LIST_PRICES_PER_HOUR}


def spot_fraction(vm_size: str) -> float:
    """The size's spot price as a fraction of its pay-as-you-go price (ValueError when the table has none)."""
    try:
        return SPOT_PRICE_FRACTION[vm_size]
    except KeyError:
        raise ValueError(f"no spot price fraction for VM size {vm_size} in the shipped table") from None
