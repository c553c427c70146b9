"""Spot and Low Priority prices of the Retail Prices double, as fractions of each size's pay-as-you-go price.

Pure data, no side effects. Shared by the double's Spot rows (`sandbox.api.prices_api`) and the replay's
spot bill (`devtools.replay.spot_prices`), so a client reading the double and the bench's bill agree.
"""

from __future__ import annotations

from typing import Final

SPOT_PRICE_DATE: Final = "2026-11"
SPOT_PRICE_SOURCE: Final = (
    "assumption: 20% of the Linux pay-as-you-go list price for every size (public sources: 'up to 90%' off; "
    "the sandbox Retail Prices double's Spot rows use 20%); not measured"
)
DEFAULT_SPOT_FRACTION: Final = 0.20
# Spot price / pay-as-you-go price per VM size; a size missing here is priced at DEFAULT_SPOT_FRACTION.
SPOT_PRICE_FRACTION: Final[dict[str, float]] = {}
LOW_PRIORITY_FRACTION: Final = 0.20


def spot_fraction_of(vm_size: str) -> float:
    """The size's spot price as a fraction of its pay-as-you-go price."""
    return SPOT_PRICE_FRACTION.get(vm_size, DEFAULT_SPOT_FRACTION)
