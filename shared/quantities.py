"""Kubernetes resource quantities ("100m", "1.5", "4Gi", "1e3", "129M") as integers.

Pure module: parsing only, no I/O and no side effects. Also Go-style durations (`parse_duration`).

The grammar is Kubernetes' own (k8s.io/apimachinery/pkg/api/resource):

    quantity ::= signedNumber suffix
    suffix   ::= binarySI (Ki Mi Gi Ti Pi Ei) | decimalSI (n u m "" k M G T P E)
               | decimalExponent ("e" or "E" followed by a signed integer)

Arithmetic is exact (fractions), and conversion to an integer rounds up, as
Kubernetes' `MilliValue()` and `Value()` do: "0.5m" of CPU is 1 millicore and
"1.5" bytes is 2 bytes, so a request is never under-counted.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from fractions import Fraction

__all__ = ["parse_quantity", "parse_cpu_milli", "parse_memory_bytes", "parse_count"]

_BINARY_SI = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_DECIMAL_SI = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}

# A number needs a digit on at least one side of the point: "5", "5.", ".5", "5.25".
# "E" alone is the exa suffix, "E3" or "e3" an exponent: the alternation order
# below tries the exponent form first and backtracks to "E" when no digits follow.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<exponent>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)"
)

# Exponents beyond this are not quantities a cluster can hold; refusing them keeps a
# hostile "1e999999999" from building an enormous integer.
_MAX_EXPONENT = 30


def parse_quantity(text: str | int) -> Fraction:
    """The exact value of a quantity, in base units (cores, bytes, a count).

    Raises ValueError naming the text when it is not a Kubernetes quantity.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise ValueError(f"not a Kubernetes quantity: {text!r} (expected text such as '100m', '4Gi' or '2')")
    if isinstance(text, int):
        return Fraction(text)
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r} (expected e.g. '100m', '1.5', '4Gi', '512Mi', '1e3')")
    number = Fraction(match["number"])
    if match["exponent"] is not None:
        exponent = int(match["exponent"][1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(f"Kubernetes quantity out of range: {text!r}")
        return number * Fraction(10) ** exponent
    suffix = match["suffix"] or ""
    if suffix in _BINARY_SI:
        return number * _BINARY_SI[suffix]
    return number * _DECIMAL_SI[suffix]


def _ceil(value: Fraction) -> int:
    return math.ceil(value)


def parse_cpu_milli(text: str | int) -> int:
    """CPU in millicores, rounded up: '100m' -> 100, '1.5' -> 1500, '2' -> 2000."""
    return _ceil(parse_quantity(text) * 1000)


def parse_memory_bytes(text: str | int) -> int:
    """Memory (or any byte quantity) in bytes, rounded up: '4Gi' -> 4294967296, '129M' -> 129000000."""
    return _ceil(parse_quantity(text))


def parse_count(text: str | int) -> int:
    """A plain count such as allocatable pods ('110'), rounded up."""
    return _ceil(parse_quantity(text))


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> timedelta:
    """Go-style durations as cluster-autoscaler takes them ('10m', '1h30m', '10m0s'), or plain seconds."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return timedelta(seconds=float(text))
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match[1]) * _UNIT_SECONDS[match[2]]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 10m, 1h30m or a number of seconds)")
    return timedelta(seconds=total)
