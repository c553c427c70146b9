"""Kubernetes quantity parsing: every suffix family, rounding up, and clear errors."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.quantities import parse_count, parse_cpu_milli, parse_memory_bytes, parse_quantity

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
]

BAD = ["", "abc", "1.2.3", "Gi", "1GB", "1 Gi", "1i", "--1", ".", "1e", "1e+", "1x", "1e999", "0x10"]


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
