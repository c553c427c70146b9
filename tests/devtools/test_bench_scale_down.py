"""The scale-down benchmark times the tick's plan with and without the pool, and fits the growth honestly."""

from __future__ import annotations

import math

import pytest

from devtools import bench_scale_down
from devtools.bench_scale_down import VARIANTS, fitted_exponent, run, table


@pytest.mark.parametrize("k", [1.0, 1.5, 2.0, 0.5])
def test_fitted_exponent_recovers_a_power_law(k: float) -> None:
    sizes = [500, 1000, 2000, 5000]
    assert fitted_exponent(sizes, [3e-4 * n**k for n in sizes]) == pytest.approx(k)


def test_fitted_exponent_needs_two_sizes() -> None:
    assert fitted_exponent([1000], [1.0]) is None


def test_run_plans_every_variant_and_the_pool_bounds_the_simulation() -> None:
    result = run([150, 300], repeat=1)
    assert [r["nodes"] for r in result["sizes"]] == [150, 300]
    found = ("candidates", "simulated", "unneeded", "removals")
    for row in result["sizes"]:
        for variant in VARIANTS:
            assert row[variant]["seconds"] > 0 and row[variant]["cpu_seconds"] > 0
        assert row["all"]["simulated"] == row["all"]["candidates"]  # nothing left out without the pool
        assert row["pool"]["candidates"] == row["all"]["candidates"]
        # Sharing the scale-up's placement state changes the time, never the plan.
        assert {k: row["shared"][k] for k in found} == {k: row["pool"][k] for k in found}
    big = result["sizes"][1]
    assert big["pool_size"] == 50 and big["pool"]["simulated"] < big["all"]["simulated"]
    assert set(result["exponent"]) == set(VARIANTS) and all(math.isfinite(k) for k in result["exponent"].values())
    lines = table(result)
    assert lines[0].startswith("| nodes |") and len(lines) == 2 + 2 + 2 and lines[0].count("|") == 3 + len(VARIANTS) + 3
    assert "k =" in lines[-1]


def test_main_prints_the_table(capsys) -> None:  # type: ignore[no-untyped-def]
    assert bench_scale_down.main(["--sizes", "60,120", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 60 |" in out and "| 120 |" in out and "Fitted growth" in out
