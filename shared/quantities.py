"""Kubernetes resource quantities ("100m", "1.5", "4Gi", "1e3", "129M") as integers.

Pure module: parsing only, no I/O and no side effects. Also Go-style durations (`parse_duration`).

The grammar is Kubernetes' own (k8s.io/apimachinery/pkg/api/resource):

    quantity ::= signedNumber suffix
    suffix   ::= binarySI (Ki Mi Gi Ti Pi Ei) | decimalSI (n u m "" k M G T P E)
               | decimalExponent ("e" or "E" followed by a signed integer)

Arithmetic is exact (integer numerator and denominator; `parse_quantity` returns a
Fraction), and conversion to an integer rounds up, as
Kubernetes' `MilliValue()` and `Value()` do: "0.5m" of CPU is 1 millicore and
"1.5" bytes is 2 bytes, so a request is never under-counted.

Why our own parser and not the kubernetes client's `kubernetes.utils.quantity.parse_quantity`
(measured with `python -m devtools.measure_quantity_parsers`: kubernetes 37.0.2, Python 3.11, a shared
2-core machine, so figures vary by about a third from run to run):

- Import cost. It lives inside the `kubernetes` package, whose __init__ loads the config loaders and the
  client (urllib3, ssl, pydantic, oauthlib...): 230-350 ms and 545 modules in a fresh interpreter, against
  11-21 ms and 62 for this module. `import function_app` (320 modules, no kubernetes until the adapters
  connect) went from 0.19 s to 0.46 s with it, against the 0.5 s cold-start goal, and every process that
  runs only the pure engine (the sandbox, replay workers, benchmarks, `plan`'s settings check) would load
  the whole SDK.
- It accepts what Kubernetes refuses: "1K", "1e3Mi", "1_000", "1 Gi", "Infinity", "NaN", "-inf", and
  "1e999999999", whose round-up builds a billion-digit integer. Its Decimal arithmetic runs in the
  caller's 28-digit context, so "0.1000000000000000000000000000001" rounds to 100 millicores, not 101.
  The grammar check and exponent bound below would have to stay in front of it, leaving it only the
  suffix table.
- Speed is no reason either way: on 100,000 realistic requests ceil(x * 1000) of its Decimal takes
  1.3-1.9 us a call (2.0-2.7 us in a context wide enough to be exact), ours 1.2-1.8 us in integers
  (4.7-5.0 us when it built Fractions). Pod requests repeat a few texts ("100m", "512Mi"), so the integer
  results are also cached per text (LRU, `_CACHED_TEXTS`): 0.1 us a call on a hit.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from fractions import Fraction
from functools import lru_cache

__all__ = ["parse_quantity", "parse_cpu_milli", "parse_memory_bytes", "parse_count", "parse_duration"]

# Powers of two and ten by suffix: the value is number * 2**binary or number * 10**decimal.
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# A number needs a digit on at least one side of the point: "5", "5.", ".5", "5.25".
# "E" alone is the exa suffix, "E3" or "e3" an exponent: the alternation order
# below tries the exponent form first and backtracks to "E" when no digits follow.
# ASCII: Python's \d (and int()) would otherwise take other scripts' digits, "\u0661" for 1.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<exponent>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)",
    re.ASCII,
)

# Exponents beyond this are not quantities a cluster can hold; refusing them keeps a
# hostile "1e999999999" from building an enormous integer.
_MAX_EXPONENT = 30

# Distinct texts remembered per conversion. A cluster's pods repeat a few request texts; a trace with
# more distinct values only evicts the least recent (a miss costs the parse, about 1.5 us).
_CACHED_TEXTS = 4096


def parse_quantity(text: str | int) -> Fraction:
    """The exact value of a quantity, in base units (cores, bytes, a count).

    Raises ValueError naming the text when it is not a Kubernetes quantity.
    """
    if isinstance(text, str):
        return _quantity_of_text(text)
    if isinstance(text, int) and not isinstance(text, bool):
        return Fraction(text)
    raise ValueError(f"not a Kubernetes quantity: {text!r} (expected text such as '100m', '4Gi' or '2')")


def _ratio(text: str) -> tuple[int, int]:
    """The quantity as numerator and (positive) denominator, in integers: exact, and faster than Fraction."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r} (expected e.g. '100m', '1.5', '4Gi', '512Mi', '1e3')")
    number = match["number"]
    whole, _, fraction = number.lstrip("+-").partition(".")
    try:
        numerator = int(whole + fraction)  # the regex guarantees a digit
    except ValueError:  # past Python's 4,300-digit limit on int()
        raise ValueError(f"Kubernetes quantity out of range: {text!r}") from None
    denominator = 10 ** len(fraction)
    if match["exponent"] is not None:
        exponent = int(match["exponent"][1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(f"Kubernetes quantity out of range: {text!r}")
    elif (suffix := match["suffix"]) in _BINARY_SI:
        numerator <<= _BINARY_SI[suffix]
        exponent = 0
    else:
        exponent = _DECIMAL_SI[suffix or ""]
    if exponent >= 0:
        numerator *= 10**exponent
    else:
        denominator *= 10**-exponent
    return (-numerator if number.startswith("-") else numerator), denominator


@lru_cache(maxsize=_CACHED_TEXTS)
def _quantity_of_text(text: str) -> Fraction:
    return Fraction(*_ratio(text))


@lru_cache(maxsize=_CACHED_TEXTS)
def _milli_of_text(text: str) -> int:
    numerator, denominator = _ratio(text)
    return -(-numerator * 1000 // denominator)  # ceiling division


@lru_cache(maxsize=_CACHED_TEXTS)
def _units_of_text(text: str) -> int:
    numerator, denominator = _ratio(text)
    return -(-numerator // denominator)


def parse_cpu_milli(text: str | int) -> int:
    """CPU in millicores, rounded up: '100m' -> 100, '1.5' -> 1500, '2' -> 2000."""
    if isinstance(text, str):
        return _milli_of_text(text)
    return math.ceil(parse_quantity(text) * 1000)


def parse_memory_bytes(text: str | int) -> int:
    """Memory (or any byte quantity) in bytes, rounded up: '4Gi' -> 4294967296, '129M' -> 129000000."""
    if isinstance(text, str):
        return _units_of_text(text)
    return math.ceil(parse_quantity(text))


def parse_count(text: str | int) -> int:
    """A plain count such as allocatable pods ('110'), rounded up."""
    return parse_memory_bytes(text)


# Durations: Go's time.ParseDuration grammar as cluster-autoscaler's flags take it ("10m", "1h30m",
# "1.5h", ".5s", "250ms", "10m0s"), without a sign (no setting is negative), or a plain number of seconds.
#
# Why our own (checked with the versions below, all on PyPI): none parses exactly that.
# - durationpy 0.11 (the kubernetes client's dependency): refuses plain seconds ("90"), accepts units Go
#   refuses ("1d", "1w", "1y", "2mm" = 60 days) and skips what lies between parts: "1h-30m" and "1h,30m"
#   are both 1h30m.
# - kubernetes.utils.parse_duration (37.0.2): GEP-2257, a subset: refuses "1.5s", "1.5h", "90" and "0", and
#   imports the whole client (see above).
# - isodate 0.7.2: ISO 8601 only ("PT10M"), which would change every documented setting.
# - pytimeparse 1.1.10, pytimeparse2 1.7.1, timelength 3.0.4: human phrases ("10 minutes", "5 m", "1:30",
#   "1d"); pytimeparse has no "ms", pytimeparse2 reads "1.2.3s" as 0 s, timelength "5m10" as 5 min and
#   "-5s" as 5 s.
# - goduration 0.1.0: Go's grammar exactly, but a first release (2026-08) with no download record yet, and
#   it refuses plain seconds too.
_DURATION_NUMBER = r"(?:\d+\.?\d*|\.\d+)"
_DURATION_UNIT = "ns|us|\u00b5s|\u03bcs|ms|s|m|h"  # µs as Go takes it: the micro sign or the Greek mu
_DURATION = re.compile(rf"(?:{_DURATION_NUMBER}(?:{_DURATION_UNIT}))+", re.ASCII)
_DURATION_PART = re.compile(rf"({_DURATION_NUMBER})({_DURATION_UNIT})", re.ASCII)
_SECONDS = re.compile(_DURATION_NUMBER, re.ASCII)
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6,
                 "ns": 1e-9}


def parse_duration(text: str) -> timedelta:
    """Go-style durations as cluster-autoscaler takes them ('10m', '1h30m', '10m0s'), or plain seconds.

    Raises ValueError naming the text when it is neither; OverflowError past timedelta's range.
    """
    text = text.strip()
    if _SECONDS.fullmatch(text):
        return timedelta(seconds=float(text))
    if not _DURATION.fullmatch(text):
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 10m, 1h30m or a number of seconds)")
    total = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(text))
    return timedelta(seconds=total)
