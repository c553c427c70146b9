"""The report's frontier: a cost-against-wait plot per trace, the sweep's points and the dominance table; and the
lower bound's ratio shown only where a run has one."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

from devtools.bench_report import (
    DOMINANCE_HEADERS,
    FRONTIER_HEADERS,
    HEADERS,
    MISSING,
    markdown_table,
    pareto,
    write_report,
)
from devtools.replay.frontier import dominance
from tests.devtools.test_bench_report import _tables

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TRACES = ("alibaba2018", "alibaba2023")


def _p(label: str, cost: float, p95: float, killed: int = 0, lost: float = 0.0) -> dict[str, Any]:
    return {"label": label, "settings": {}, "cost": cost, "p95_wait_s": p95, "pods_killed": killed,
            "work_lost_s": lost, "pods_completed": 100, "pods": 100}


def _frontier() -> dict[str, Any]:
    return {"ours": [_p("auto", 100, 60), _p("fixed 1m", 80, 90), _p("fixed 10m", 120, 40)],
            "ca": [_p("1m/1m", 90, 95, killed=4, lost=7200.0), _p("10m/10m", 130, 41)],
            "nap": [_p("default", 70, 200, killed=9, lost=30.0)]}


def _metrics(cost: float, **extra: Any) -> dict[str, Any]:
    return {"node_seconds": 3600.0, "cost": cost, "pending_wait_s": {"p50": 1, "p95": 2, "p99": 3, "max": 4},
            "pods_killed": 0, "work_lost_s": 0.0, **extra}


def _results(*, with_frontier: bool = True) -> dict[str, Any]:
    per_trace = {"ours": _metrics(100, cost_vs_oracle=1.5, cost_vs_lower_bound=1.2),
                 "ours+spot@5%": _metrics(40), "ours+vn@100": _metrics(90),
                 "lower_bound": _metrics(80, cost_vs_oracle=1.25, cost_vs_lower_bound=1.0)}
    results: dict[str, Any] = {"replay": {trace: {k: dict(v) for k, v in per_trace.items()} for trace in TRACES}}
    if with_frontier:
        results["frontier"] = {trace: _frontier() for trace in TRACES}
        results["dominance"] = {trace: dominance(_frontier()) for trace in TRACES}
    return results


def test_the_tier_rows_show_no_ratio_to_the_lower_bound() -> None:
    header, *rows = _tables(markdown_table(_results()))[0]
    assert tuple(header) == HEADERS
    cell = {(r[0], h): c for r in rows for h, c in zip(header, r)}
    assert cell["ours", "cost vs lower bound"] == "1.20x" and cell["lower_bound", "cost vs lower bound"] == "1.00x"
    for tier in ("ours+spot@5%", "ours+vn@100"):
        assert cell[tier, "cost vs lower bound"] == MISSING and cell[tier, "cost vs oracle"] == MISSING


def test_markdown_has_the_frontier_and_the_dominance_table_per_trace() -> None:
    markdown = markdown_table(_results())
    tables = _tables(markdown)
    assert len(tables) == 3 * len(TRACES)  # main, frontier, dominance
    for main, points, dominated in zip(tables[::3], tables[1::3], tables[2::3]):
        assert tuple(points[0]) == FRONTIER_HEADERS and len(points) - 1 == sum(map(len, _frontier().values()))
        assert tuple(dominated[0]) == DOMINANCE_HEADERS
        assert [r[0] for r in dominated[1:]] == ["ca 1m/1m", "ca 10m/10m", "nap default"]  # nap in the table
    assert markdown.count("- **MISSED**: ours dominates every peer point") == len(TRACES)


def test_the_report_draws_the_frontier_and_shows_its_tables(tmp_path: Path) -> None:
    written = write_report(_results(), {}, tmp_path)
    frontier_pngs = [p for p in written if p.name.endswith("-frontier.png")]
    assert [p.name for p in frontier_pngs] == [f"{t}-frontier.png" for t in TRACES]
    assert all(p.read_bytes().startswith(PNG_SIGNATURE) for p in frontier_pngs)
    text = (tmp_path / "report.html").read_text(encoding="utf-8")
    images = {base64.b64decode(i) for i in re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)}
    assert {p.read_bytes() for p in frontier_pngs} <= images
    assert text.count("<th>best ours (no dearer, no more killed)</th>") == len(TRACES)
    assert text.count("<td>nap default</td>") == len(TRACES)


def test_no_frontier_no_frontier_plot(tmp_path: Path) -> None:
    written = write_report(_results(with_frontier=False), {}, tmp_path)
    assert not any(p.name.endswith("-frontier.png") for p in written)
    assert "Dominance" not in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_a_frontier_only_run_has_its_tables_and_plot_without_a_main_table(tmp_path: Path) -> None:
    results = _results()
    del results["replay"]
    assert len(_tables(markdown_table(results))) == 2 * len(TRACES)
    written = write_report(results, {}, tmp_path)
    assert [p.name for p in written] == [*(f"{t}-frontier.png" for t in TRACES), "report.html"]


def test_the_frontier_line_joins_the_undominated_points() -> None:
    points = [_p("a", 100, 60), _p("b", 80, 90), _p("c", 120, 40), _p("d", 110, 70), _p("e", 80, 95)]
    front = pareto(points)
    assert [p["label"] for p in front] == ["b", "a", "c"]
    for p in points:  # every point left out is beaten on both axes by one kept
        if p not in front:
            assert any(q["cost"] <= p["cost"] and q["p95_wait_s"] <= p["p95_wait_s"] for q in front)


def test_points_on_the_same_spot_share_one_label() -> None:
    from devtools.bench_report import _frontier_labels
    points = [_p("1m/1m", 46.71, 146, 51, 7996.0), _p("1m/2m", 46.74, 146, 51, 7996.0),
              _p("1m/5m", 46.75, 146, 8, 1353.0), _p("10m/10m", 104.19, 149)]
    labels = [text for _, text in _frontier_labels(points, every=points)]
    assert labels == ["1m/1m, 1m/2m: 51 killed, 2.2 h lost", "1m/5m: 8 killed, 1,353 s lost", "10m/10m: 0 killed, 0 s lost"]


def test_running_headroom_points_are_listed_and_can_be_the_best_ours_point() -> None:
    frontier = {**_frontier(), "ours+buffer": [_p("buffer 0", 100, 60), _p("buffer 4", 125, 30)]}
    results = {"frontier": {"alibaba2018": frontier}, "dominance": {"alibaba2018": dominance(frontier)},
               "targets": {"alibaba2018": [{"name": "cheapest swept ours point with p95 wait at most 60 s",
                                            "met": False, "detail": "ours+buffer buffer 4"}]}}
    text = markdown_table(results)
    assert "| ours+buffer | buffer 4 | 125.00 | 30 |" in text
    # ca's 10m/10m (130 $, 41 s) is best met by the buffer: no dearer and 11 s faster.
    assert re.search(r"\| ca 10m/10m \|[^\n]*\| buffer 4 \|[^\n]*\| met \|", text)
    assert "cheapest swept ours point" in text
