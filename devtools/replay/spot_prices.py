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

SPOT_PRICE_DATE: Final = "2026-11"
SPOT_PRICE_SOURCE: Final = (
    "assumption: 20% of the Linux pay-as-you-go list price for every size (public sources: 'up to 90%' off; "
    "the sandbox Retail Prices double's Spot rows use 20%); not measured"
)
# Spot price / pay-as-you-go price, per VM size (every size of the on-demand table). Edit with SPOT_PRICE_DATE.
SPOT_PRICE_FRACTION: Final[dict[str, float]] = {
    "Standard_D2s_v5": 0.20,
    "Standard_D4s_v5": 0.20,
    "Standard_D8s_v5": 0.20,
    "Standard_D16s_v5": 0.20,
    "Standard_D32s_v5": 0.20,
    "Standard_D48s_v5": 0.20,
    "Standard_D64s_v5": 0.20,
    "Standard_E4s_v5": 0.20,
    "Standard_E8s_v5": 0.20,
    "Standard_F8s_v2": 0.20,
    "Standard_NC4as_T4_v3": 0.20,
    "Standard_NC24ads_A100_v4": 0.20,
    "Standard_NC48ads_A100_v4": 0.20,
    "Standard_NC96ads_A100_v4": 0.20,
}

assert set(SPOT_PRICE_FRACTION) == set(LIST_PRICES_PER_HOUR), "one spot fraction per size of the on-demand table"


def spot_fraction(vm_size: str) -> float:
    """The size's spot price as a fraction of its pay-as-you-go price (ValueError when the table has none)."""
    try:
        return SPOT_PRICE_FRACTION[vm_size]
    except KeyError:
        raise ValueError(f"no spot price fraction for VM size {vm_size} in the shipped table") from None
