"""Spot and Low Priority prices of the Retail Prices double, as fractions of each size's pay-as-you-go price.

Pure data, no side effects. Shared by the double's Spot rows (`sandbox.api.prices_api`) and the replay's
spot bill (`devtools.replay.spot_prices`), so a client reading the double and the bench's bill agree.

Linux, East US. Nothing here reaches the internet. Where public text quotes a live Retail Prices API Spot row
for the size, the fraction is that row over the size's pay-as-you-go price; the other sizes are ASSUMED, by
family and size, from those rows and the ranges public guides give (Linux spot "60-90 %" off). Each entry says
which (`SPOT_PRICE_BASIS`). Real spot prices move (Resource Graph `SpotResources` keeps 90 days) and differ by
region; to check one, read the size's Spot row (`contains(meterName, 'Spot')`, ../shared/facts/burst-and-spot.md)
and edit the fraction, its basis and the date together.
"""

from __future__ import annotations

from typing import Final

SPOT_PRICE_DATE: Final = "2026-11"
SPOT_PRICE_SOURCE: Final = (
    "per size, East US Linux: Spot rows of the Retail Prices API quoted in public repositories (undated, "
    "seen 2024-2026) for Standard_D2s_v5, Standard_D16s_v5 and Standard_NC24ads_A100_v4; the other sizes "
    "assumed from those by family and size (see SPOT_PRICE_BASIS); not fetched, not a price history"
)
# A size missing from the table is priced at this (the Low Priority ratio, itself quoted: D2s v5 0.0192 of 0.096).
DEFAULT_SPOT_FRACTION: Final = 0.20
LOW_PRIORITY_FRACTION: Final = 0.20

# Spot price / pay-as-you-go price per VM size, with why. Within a family the discount shrinks with size
# (the quoted D2s v5 is 0.105, the D16s v5 0.211): bigger sizes need more contiguous spare capacity.
_TABLE: Final[dict[str, tuple[float, str]]] = {
    # Quoted: "D2s v5 Spot ... 0.0101" and "... 0.0106" next to "D2s v5 ... 0.0960" (two public API outputs).
    "Standard_D2s_v5": (0.105, "quoted: Spot row 0.0101-0.0106 USD/h over 0.096"),
    "Standard_D4s_v5": (0.13, "assumed: between the quoted D2s v5 and D16s v5"),
    "Standard_D8s_v5": (0.17, "assumed: between the quoted D2s v5 and D16s v5"),
    # Quoted: "Standard_D16s_v5 Spot at $0.162/hr vs the real PAYG rate at $0.768/hr confirmed live".
    "Standard_D16s_v5": (0.211, "quoted: Spot row 0.162 USD/h over 0.768"),
    "Standard_D32s_v5": (0.23, "assumed: above the quoted D16s v5, larger size"),
    "Standard_D48s_v5": (0.25, "assumed: above the quoted D16s v5, larger size"),
    "Standard_D64s_v5": (0.27, "assumed: above the quoted D16s v5, larger size"),
    "Standard_E4s_v5": (0.14, "assumed: as D4s v5, memory-optimised a little dearer"),
    "Standard_E8s_v5": (0.18, "assumed: as D8s v5, memory-optimised a little dearer"),
    "Standard_F8s_v2": (0.16, "assumed: older compute-optimised family, between D4s and D8s v5"),
    "Standard_NC4as_T4_v3": (0.30, "assumed: GPU, less spare capacity than general purpose"),
    # Quoted twice at 0.68 USD/h (and once at 1.096 USD/h) against the 3.673 USD/h list price.
    "Standard_NC24ads_A100_v4": (0.185, "quoted: Spot row 0.68 USD/h over 3.673 (another quote: 1.096, 0.30)"),
    "Standard_NC48ads_A100_v4": (0.25, "assumed: 2-GPU A100, scarcer than the quoted 1-GPU size"),
    "Standard_NC96ads_A100_v4": (0.30, "assumed: 4-GPU A100, the top of the quoted 1-GPU range"),
}
SPOT_PRICE_FRACTION: Final[dict[str, float]] = {size: fraction for size, (fraction, _) in _TABLE.items()}
SPOT_PRICE_BASIS: Final[dict[str, str]] = {size: basis for size, (_, basis) in _TABLE.items()}


def spot_fraction_of(vm_size: str) -> float:
    """The size's spot price as a fraction of its pay-as-you-go price."""
    return SPOT_PRICE_FRACTION.get(vm_size, DEFAULT_SPOT_FRACTION)
