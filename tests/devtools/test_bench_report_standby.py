"""The report's warm-standby table: one row per run with a `standby` part, below the trace's main table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devtools.bench_report import MISSING, STANDBY_HEADERS, markdown_table, write_report


def _metrics(cost: float, **standby: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"node_seconds": 36_000.0, "cost": cost, "pending_wait_s": {"p50": 20, "p95": 58.4},
                           "pods_killed": 0, "work_lost_s": 0.0, "pods": 10, "pods_completed": 10}
    if standby:
        out["standby"] = {"hits": 40, "misses": 10, "hit_rate": 0.8, "refills": 12, "disk_cost": 1.234,
                          "stopped_peak": 7, "forecast_mape": 0.315,
                          "slow_pods": {"threshold_s": 60.0, "count": 9, "by_cause": {"start": 5, "create": 3,
                                                                                       "room": 1}}, **standby}
    return out


def _rows(markdown: str) -> tuple[list[str], list[list[str]]]:
    lines = markdown.splitlines()
    start = lines.index("Warm standby:") + 2
    table = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines[start:] if line.startswith("|")
             and not set(line) <= set("|-: ")]
    return table[0], table[1:]


def test_standby_runs_get_their_own_table_with_hits_disk_cost_and_forecast_error(tmp_path: Path) -> None:
    results = {"replay": {"alibaba2018": {"ours": _metrics(58.58), "ours+standby": _metrics(57.1, misses=10)}}}
    markdown = markdown_table(results)
    header, rows = _rows(markdown)
    assert tuple(header) == STANDBY_HEADERS and [r[0] for r in rows] == ["ours+standby"]
    cell = dict(zip(header, rows[0]))
    assert (cell["of which stopped disks ($)"], cell["standby hits"], cell["hit rate"]) == ("1.23", "40", "80%")
    assert cell["forecast MAPE"] == "32%" and cell["pods over target: start / create / room"] == "5 / 3 / 1 (> 60 s)"
    page = next(p for p in write_report(results, {}, tmp_path) if p.name == "report.html").read_text()
    assert "<p>Warm standby:</p>" in page and "standby hits" in page


def test_no_standby_table_without_standby_runs_and_a_dash_for_a_missing_forecast() -> None:
    assert "Warm standby:" not in markdown_table({"replay": {"t": {"ours": _metrics(1.0)}}})
    header, rows = _rows(markdown_table({"replay": {"t": {"ours+standby": _metrics(1.0, forecast_mape=None,
                                                                                     hit_rate=None)}}}))
    cell = dict(zip(header, rows[0]))
    assert cell["forecast MAPE"] == MISSING and cell["hit rate"] == MISSING
