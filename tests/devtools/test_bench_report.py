"""The replay benchmark report shows every policy of every trace, formats the numbers as people read them,
and makes one shareable HTML page that cannot be broken by the text it quotes."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

from devtools.bench_report import MISSING, downsample, markdown_table, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TRACES = ("alibaba2018", "alibaba2023")
ORDER = ["ours", "ca", "vmss-cpu", "static", "oracle"]


def _metrics(scale: float, *, oracle: bool = False) -> dict[str, Any]:
    return {
        "node_seconds": 36_000.0 * scale,  # 10 node-hours at scale 1
        "cost": 12.3456 * scale,
        "cost_vs_oracle": 1.0 if oracle else 1.0 + scale / 10,
        "pending_wait_s": None if oracle else {"p50": 4.4, "p95": 29.5, "p99": 61.2 * scale, "max": 1234.6},
        "pods_killed": 0 if oracle else int(3 * scale),
        "work_lost_s": None if oracle else 5400.0 * scale,
        "scale_actions": None if oracle else 17,
        "arm_reads": None if oracle else 1200,
        "arm_writes": None if oracle else 30,
        "throttle_violations": None if oracle else 0,
        "disruptions_per_day": None if oracle else 1.25 * scale,
    }


def _results() -> dict[str, Any]:
    # Policies deliberately out of order, and one extra policy, to check the table's ordering.
    per_trace = {p: _metrics(s, oracle=p == "oracle")
                 for p, s in (("oracle", 0.5), ("static", 3.0), ("zeta", 1.5), ("ca", 2.0), ("ours", 1.0),
                              ("vmss-cpu", 2.5))}
    per_trace["ours"]["work_lost_s"] = 42.4  # under an hour: shown in seconds
    return {
        "replay": {trace: {k: dict(v) for k, v in per_trace.items()} for trace in TRACES},
        "traces": {"alibaba2018": {"note": "sampled 1 in 50 <script>alert('x')</script>", "pods": 1234}},
        "targets": {"alibaba2023": [{"name": "cost within 1.2x of oracle", "met": True, "detail": "1.10x"},
                                    {"name": "p99 wait under 60 s", "met": False, "detail": "61 s"}]},
        "prices": {"date": "2026-11-01", "currency": "USD", "source": "Azure retail prices API"},
        "generated": "2026-11-21T12:00:00Z",
    }


def _series(points: int = 200) -> dict[str, Any]:
    t = [i * 60.0 for i in range(points)]
    out: dict[str, Any] = {}
    for n, trace in enumerate(TRACES):
        out[trace] = {"_demand": {"t": t, "nodes": [5 + (i % 50) / 10 + n for i in range(points)]}}
        for k, policy in enumerate(ORDER[:-1]):  # the oracle has only the demand
            step = 2 if k % 2 else 1  # different time grids per policy
            out[trace][policy] = {"t": t[::step], "nodes": [6 + k + (i % 7) for i in range(0, points, step)],
                                  "pending": [(i * (k + 1)) % 13 for i in range(0, points, step)]}
    return out


def _tables(markdown: str) -> list[list[list[str]]]:
    """Each markdown table as rows of cells, header row first, separator row dropped."""
    tables, current = [], None
    for line in markdown.splitlines():
        if line.startswith("|"):
            if current is None:
                current = []
                tables.append(current)
            if not set(line) <= set("|-: "):
                current.append([c.strip() for c in line.strip("|").split(" | ")])
        else:
            current = None
    return tables


def test_markdown_has_one_table_per_trace_with_policies_in_order() -> None:
    tables = _tables(markdown_table(_results()))
    assert len(tables) == 2
    for table in tables:
        header, *rows = table
        assert header[0] == "policy" and len(header) == 17
        assert [r[0] for r in rows] == [*ORDER, "zeta"]
        assert all(len(r) == len(header) for r in rows)


def test_markdown_formats_numbers_and_missing_metrics() -> None:
    header, *rows = _tables(markdown_table(_results()))[0]
    cell = {(r[0], h): c for r in rows for h, c in zip(header, r)}
    assert cell["ours", "node-hours"] == "10.0"
    assert cell["ca", "cost ($)"] == "24.69"
    assert cell["static", "cost vs oracle"] == "1.30x"
    assert [cell["ours", f"pending wait {q} (s)"] for q in ("p50", "p95", "p99", "max")] == ["4", "30", "61", "1,235"]
    assert cell["static", "pods killed"] == "9"
    assert cell["ours", "work lost"] == "42 s"
    assert cell["ca", "work lost"] == "3.0 h"
    assert cell["ours", "ARM reads"] == "1,200" and cell["ours", "ARM writes"] == "30"
    assert cell["ours", "throttle violations"] == "0"
    assert cell["ca", "disruptions/day"] == "2.5" and cell["oracle", "disruptions/day"] == MISSING
    # The oracle: metrics that do not apply show a dash, a real zero stays a zero.
    assert cell["oracle", "pending wait p99 (s)"] == MISSING
    assert cell["oracle", "scale actions"] == MISSING
    assert cell["oracle", "work lost"] == MISSING
    assert cell["oracle", "pods killed"] == "0"
    assert cell["oracle", "cost vs oracle"] == "1.00x"


def test_markdown_shows_note_targets_and_prices() -> None:
    markdown = markdown_table(_results())
    first, second = markdown.split("### alibaba2023")
    assert "sampled 1 in 50" in first and "sampled" not in second
    assert "- met: cost within 1.2x of oracle — 1.10x" in second
    assert "- **MISSED**: p99 wait under 60 s — 61 s" in second
    assert "Targets" not in first
    assert markdown.rstrip().endswith("Prices: USD, as of 2026-11-01, source: Azure retail prices API.")


def test_markdown_without_optional_sections() -> None:
    results = _results()
    for key in ("traces", "targets", "prices"):
        del results[key]
    markdown = markdown_table(results)
    assert len(_tables(markdown)) == 2
    assert "Targets" not in markdown and "Prices" not in markdown


def test_write_report_writes_plots_and_a_self_contained_page(tmp_path: Path) -> None:
    written = write_report(_results(), _series(), tmp_path)
    pngs = [p for p in written if p.suffix == ".png"]
    assert {p.name for p in pngs} == {f"{t}-{k}.png" for t in TRACES for k in ("nodes", "pending", "outcomes")}
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000, png.name
    page = tmp_path / "report.html"
    assert written[-1] == page and all(p.parent == tmp_path for p in written)

    text = page.read_text(encoding="utf-8")
    for trace in TRACES:
        assert f"<h2>{trace}</h2>" in text
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(images) == len(pngs)
    assert {base64.b64decode(i) for i in images} == {p.read_bytes() for p in pngs}
    assert "<script>" not in text and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text
    assert text.count("<table>") == 2 and "<td>oracle</td>" in text and f"<td>{MISSING}</td>" in text
    assert 'class="missed">MISSED' in text and "Generated 2026-11-21T12:00:00Z." in text


def test_write_report_is_deterministic_and_handles_large_series(tmp_path: Path) -> None:
    """20k points per policy are decimated; the same input gives the same bytes (no timestamps, no metadata)."""
    results, series = _results(), _series(points=20_000)
    first = [p.read_bytes() for p in write_report(results, series, tmp_path / "a")]
    second = [p.read_bytes() for p in write_report(results, series, tmp_path / "b")]
    assert first == second


def test_write_report_without_series_still_draws_the_bar_charts(tmp_path: Path) -> None:
    written = write_report(_results(), {}, tmp_path)
    assert [p.name for p in written] == ["alibaba2018-outcomes.png", "alibaba2023-outcomes.png", "report.html"]


def test_downsample_keeps_extremes_and_ends() -> None:
    t = list(range(20_000))
    y = [0] * 20_000
    y[12_345] = 99  # a one-sample spike must survive
    dt, dy = downsample(t, y, max_points=300)
    assert len(dt) <= 301 and max(dy) == 99 and 12_345 in dt
    assert dt[0] == 0 and dt[-1] == 19_999 and dt == sorted(dt)
    assert downsample([1, 2, 3], [4, 5, 6, 7]) == ([1, 2, 3], [4, 5, 6])
