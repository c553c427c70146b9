"""Kubernetes quantity parsing: every suffix family, rounding up, and clear errors; Go durations."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.quantities import parse_count, parse_cpu_milli, parse_duration, parse_memory_bytes, parse_quantity

CPU_CASES = [
    ("100m", 100),
    ("1", 1000),
    ("2", 2000),
    ("1.5", 1500),
    ("0.1", 100),
    (".5", 500),
    ("5.", 5000),
    ("+1", 1000),
    ("250m", 250),
    ("0.5m", 1),  # rounds up like MilliValue()
    ("1e3", 1_000_000),
    ("1E3", 1_000_000),
    ("1e-3", 1),
    ("100000u", 100),
    ("1000000n", 1),
    ("1k", 1_000_000),
    (" 100m ", 100),
    (3, 3000),
    ("-1", -1000),  # Kubernetes takes negative quantities; callers that must not see one check
    ("1.5e-3", 2),
    # exact past Decimal's 28 default digits, which the kubernetes client's parse_quantity rounds to 100
    ("0.1000000000000000000000000000001", 101),
]

MEMORY_CASES = [
    ("128974848", 128_974_848),
    ("129M", 129_000_000),
    ("123Mi", 123 * 2**20),
    ("512Mi", 512 * 2**20),
    ("4Gi", 4 * 2**30),
    ("1Ki", 1024),
    ("1.5Gi", 3 * 2**29),
    ("1G", 10**9),
    ("1k", 1000),
    ("1e3", 1000),
    ("1E", 10**18),  # a bare E is the exa suffix, not an exponent
    ("1Ei", 2**60),
    ("1Ti", 2**40),
    ("1Pi", 2**50),
    ("1.5", 2),  # rounds up like Value()
    ("0", 0),
    ("100m", 1),
    (4096, 4096),
    ("14470348Ki", 14_817_636_352),  # kubelet reports memory in Ki
    ("1.0000000000000000000000000001Ki", 1025),  # the kubernetes client's Decimal gives 1024
]

BAD = ["", "abc", "1.2.3", "Gi", "1GB", "1 Gi", "1i", "--1", ".", "1e", "1e+", "1x", "1e999", "0x10",
       # accepted by the kubernetes client's parse_quantity, refused by Kubernetes (no "K" suffix, no exponent
       # with a suffix, no digit separators or special values) and here
       "1K", "1ki", "1e3Mi", "1_000", "Infinity", "NaN", "-inf", "1e999999999",
       "\u0661\u0660\u0660m"]  # digits of another script: Python's int() takes them, Kubernetes does not


@pytest.mark.parametrize(("text", "expected"), CPU_CASES)
def test_cpu_in_millicores(text: str, expected: int) -> None:
    assert parse_cpu_milli(text) == expected


@pytest.mark.parametrize(("text", "expected"), MEMORY_CASES)
def test_memory_in_bytes(text: str, expected: int) -> None:
    assert parse_memory_bytes(text) == expected


@pytest.mark.parametrize(("text", "expected"), [("110", 110), ("250", 250), ("1k", 1000), (30, 30)])
def test_counts(text: str, expected: int) -> None:
    assert parse_count(text) == expected


@pytest.mark.parametrize("text", BAD)
def test_malformed_quantities_raise_a_value_error_naming_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="quantity") as caught:
        parse_quantity(text)
    assert repr(text) in str(caught.value)


@pytest.mark.parametrize("value", [None, 1.5, True, ["1"]])
def test_non_text_values_are_rejected(value: object) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(value)  # type: ignore[arg-type]


def test_exact_arithmetic_has_no_float_error() -> None:
    assert parse_quantity("0.1") + parse_quantity("0.2") == Fraction(3, 10)


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["Ki", "Mi", "Gi"]))
def test_binary_suffixes_multiply_by_powers_of_two(number: int, suffix: str) -> None:
    factor = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}[suffix]
    assert parse_memory_bytes(f"{number}{suffix}") == number * factor


@given(st.integers(min_value=0, max_value=10**9))
def test_millicores_round_trip(milli: int) -> None:
    assert parse_cpu_milli(f"{milli}m") == milli


@pytest.mark.parametrize("text", ["1" * 5000, "0." + "0" * 5000 + "1", "1" * 5000 + "Gi"])
def test_numbers_past_pythons_digit_limit_are_out_of_range(text: str) -> None:
    with pytest.raises(ValueError, match="Kubernetes quantity out of range"):
        parse_cpu_milli(text)


def test_long_but_valid_numbers_stay_exact() -> None:
    assert parse_cpu_milli("0." + "0" * 40 + "1") == 1
    assert parse_memory_bytes("1" * 40 + "Ki") == int("1" * 40) * 1024
    assert parse_cpu_milli("-0.5m") == 0  # a ceiling: up toward positive infinity, negative values too


@pytest.mark.parametrize("text", ["1x", "1e999999999", "Infinity"])
def test_a_bad_text_is_refused_every_time_not_only_the_first(text: str) -> None:
    for _ in range(3):
        with pytest.raises(ValueError, match="quantity"):
            parse_cpu_milli(text)
        with pytest.raises(ValueError, match="quantity"):
            parse_memory_bytes(text)


@given(st.integers(min_value=-(10**12), max_value=10**12), st.sampled_from(["", "m", "k", "Ki", "Mi", "e2", "e-2"]))
def test_cached_text_and_fresh_parse_agree(number: int, suffix: str) -> None:
    text = f"{number}{suffix}"
    expected = parse_quantity(text)
    for _ in range(2):  # the second call comes from the cache
        assert parse_quantity(text) == expected
        assert parse_cpu_milli(text) == _ceil(expected * 1000)
        assert parse_memory_bytes(text) == parse_count(text) == _ceil(expected)


def _ceil(value: Fraction) -> int:
    return -(-value.numerator // value.denominator)


# --- Durations: Go's time.ParseDuration syntax (cluster-autoscaler's flags), unsigned, or plain seconds ----------

DURATIONS = [
    ("10m", 600), ("30s", 30), ("1h30m", 5400), ("2m30s", 150), ("10m0s", 600), ("250ms", 0.25), ("500ms", 0.5),
    ("1.5s", 1.5), ("1.5h", 5400), (".5s", 0.5), ("5.s", 5), ("1h0.5m", 3630), ("1us", 1e-6), ("1\u00b5s", 1e-6),
    ("1\u03bcs", 1e-6), ("1000ns", 1e-6), ("1s500ms", 1.5), ("30s1m", 90),  # Go takes parts in any order
    ("90", 90), ("0", 0), ("2.5", 2.5), (".5", 0.5), (" 10m ", 600),
]

BAD_DURATIONS = [
    "", " ", "m", "s", ".", ".s", "10x", "5m10", "m5", "-5s", "-5", "+5s", "1h 30m", "5 m", "1.2.3s",
    # units durationpy adds and Go refuses
    "1d", "1w", "1y", "2mm",
    # durationpy reads these as 1h30m
    "1h-30m", "1h,30m",
    # other notations: ISO 8601, clock time, words
    "PT10M", "1:30", "10 minutes", "1M", "1H", "1e3s", "\u0661\u0660m", "\u0661\u0660",
]


@pytest.mark.parametrize(("text", "seconds"), DURATIONS)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", BAD_DURATIONS)
def test_bad_durations_raise_a_value_error_naming_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration") as caught:
        parse_duration(text)
    assert repr(text.strip()) in str(caught.value)


def test_a_duration_past_timedeltas_range_is_an_overflow() -> None:
    with pytest.raises(OverflowError):
        parse_duration("9" * 20 + "h")
