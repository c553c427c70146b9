"""Kubernetes quantities, Go-style durations and RFC 3339 timestamps.

The sandbox speaks the notation of the real APIs: scenario files and node
objects carry quantities such as "1500m", "13.8Gi" or "110", and durations such
as "30s" or "1h30m". Everything is parsed once into integers (millicores,
bytes, counts) or float seconds.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from fractions import Fraction

from shared.quantities import parse_quantity as parse_app_quantity
from shared.quantities import parse_duration as parse_app_duration

def parse_quantity(value: str | int | float) -> Fraction:
    """A Kubernetes resource.Quantity, exactly ('1500m' -> 3/2); the app's own parser, plus JSON floats."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a quantity: {value!r}")
        value = repr(value)  # a scenario's 0.5 means the quantity "0.5"
    try:
        return parse_app_quantity(value)
    except ValueError as exc:
        raise ValueError(f"not a quantity: {value!r} (use e.g. 1500m, 2, 512Mi, 4Gi)") from exc


def parse_cpu_milli(value: str | int | float) -> int:
    """CPU in millicores, rounded up like the API server does for sub-milli values."""
    return math.ceil(parse_quantity(value) * 1000)


def parse_bytes(value: str | int | float) -> int:
    """Memory (or any byte quantity) in whole bytes, rounded up."""
    return math.ceil(parse_quantity(value))


def parse_count(value: str | int | float) -> int:
    """A plain count such as a pod capacity ('110')."""
    quantity = parse_quantity(value)
    if quantity.denominator != 1:
        raise ValueError(f"not a whole number: {value!r}")
    return int(quantity)


def format_cpu(milli: int) -> str:
    """Canonical CPU quantity: whole cores without a suffix, otherwise millicores."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_bytes(count: int) -> str:
    """Canonical memory quantity: the largest binary suffix that divides evenly (kubelet reports Ki)."""
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if count and count % size == 0:
            return f"{count // size}{suffix}"
    return str(count)


def parse_duration(value: str | int | float) -> float:
    """Seconds from '30s', '5m', '1h30m', '250ms' or a plain number of seconds (the app's own parser)."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"not a duration: {value!r} (must be a non-negative number of seconds)")
        return float(value)
    return parse_app_duration(value).total_seconds()


def rfc3339(moment: datetime) -> str:
    """Timestamps as Kubernetes and ARM write them: UTC, second precision, 'Z'."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(moment: datetime) -> str:
    """ARM operation timestamps carry fractional seconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """An RFC 3339 timestamp (a trailing Z is accepted); naive values are taken as UTC."""
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
