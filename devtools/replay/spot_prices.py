"""Spot prices for the replay's spot pools: a fraction of each VM size's pay-as-you-go price, dated.

The table is the sandbox's (`sandbox.api.spot_price_table`): the Retail Prices double serves its Spot rows
from it, so the replay's bill and what a client of the sandbox reads agree. It varies by size: three sizes
from Spot rows of the real API quoted in public text, the rest ASSUMED from those by family and size, each
entry with its basis (`SPOT_PRICE_BASIS`). Nothing here reaches the internet. `--spot-price-fraction`
overrides it for one replay; the bench reports how far the price could rise before the spot cost target
stops being met (docs/benchmarks.md, "Spot"), so its conclusion does not rest on the table being exact.
"""

from __future__ import annotations

from typing import Final

from sandbox.api.prices_api import LIST_PRICES_PER_HOUR
from sandbox.api.spot_price_table import SPOT_PRICE_BASIS, SPOT_PRICE_DATE, SPOT_PRICE_SOURCE, spot_fraction_of

__all__ = ["SPOT_PRICE_BASIS", "SPOT_PRICE_DATE", "SPOT_PRICE_FRACTION", "SPOT_PRICE_SOURCE", "spot_fraction"]

# Spot price / pay-as-you-go price, per VM size of the on-demand table (the Retail Prices double's Spot rows).
SPOT_PRICE_FRACTION: Final[dict[str, float]] = {size: spot_fraction_of(size) for size in LIST_PRICES_PER_HOUR}


def spot_fraction(vm_size: str) -> float:
    """The size's spot price as a fraction of its pay-as-you-go price (ValueError when the table has none)."""
    try:
        return SPOT_PRICE_FRACTION[vm_size]
    except KeyError:
        raise ValueError(f"no spot price fraction for VM size {vm_size} in the shipped table") from None
