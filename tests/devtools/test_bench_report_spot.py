"""The report's spot table: one row per policy that ran with spot pools, below the trace's main table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devtools.bench_report import MISSING, SPOT_HEADERS, markdown_table, write_report


def _metrics(cost: float, **spot: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"node_seconds": 36_000.0, "cost": cost, "cost_vs_oracle": 2.0,
                           "pending_wait_s": {"p50": 40, "p95": 142.2, "p99": 180, "max": 200},
                           "pods_killed": 13, "work_lost_s": 1015.6, "scale_actions": 9, "arm_reads": 10,
                           "arm_writes": 9, "throttle_violations": 0, "pods": 10, "pods_completed": 10}
    if spot:
        out["spot"] = {"evictions": 8, "notices_published": 8, "evicted_pods": 0, "evicted_job_pods": 0,
                       "lost_work_s": 0.0, "pods_moved_before_eviction": 13, "spot_share": 0.446,
                       "quota_refused_requests": 0, **spot}
    return out


def _results() -> dict[str, Any]:
    return {
        "replay": {"alibaba2018": {
            "ours": _metrics(104.26),
            "ca+spot@5%": _metrics(26.8, cost_vs_ours=0.257, evicted_pods=13, evicted_job_pods=13, lost_work_s=2016.0,
                                   pods_moved_before_eviction=0, quota_refused_requests=9),
            "ours+spot@5%": _metrics(20.56, cost_vs_ours=0.1972),
        }},
        "prices": {"date": "2026-11", "source": "list prices",
                   "spot": {"date": "2026-11", "source": "assumption: 20%"}},
    }


def _table_after(markdown: str, title: str) -> list[list[str]]:
    lines = markdown.splitlines()
    start = lines.index(title) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        if not set(line) <= set("|-: "):
            rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


def test_spot_rows_in_their_own_table_in_policy_order() -> None:
    markdown = markdown_table(_results())
    header, *rows = _table_after(markdown, "Spot:")
    assert tuple(header) == SPOT_HEADERS
    assert [r[0] for r in rows] == ["ours+spot@5%", "ca+spot@5%"]  # ours first, as in the main table
    cell = {(r[0], h): c for r in rows for h, c in zip(header, r)}
    assert cell["ours+spot@5%", "cost vs ours"] == "0.20x"
    assert cell["ours+spot@5%", "spot share of node-hours"] == "45%"
    assert cell["ours+spot@5%", "pods moved at the notice"] == "13"
    assert cell["ca+spot@5%", "pods died with the VM"] == "13"
    assert cell["ca+spot@5%", "work lost with the VM"] == "2,016 s"
    assert cell["ours+spot@5%", "work lost (all)"] == "1,016 s"
    assert cell["ca+spot@5%", "quota refusals"] == "9"
    assert "Spot prices as of 2026-11, source: assumption: 20%." in markdown


def test_no_spot_table_without_spot_rows_and_dashes_for_missing_figures(tmp_path: Path) -> None:
    results = _results()
    results["replay"]["alibaba2018"] = {"ours": _metrics(104.26)}
    assert "Spot:" not in markdown_table(results)
    results = _results()
    del results["replay"]["alibaba2018"]["ours+spot@5%"]["spot"]["cost_vs_ours"]  # a lone replay: no ours to compare
    header, *rows = _table_after(markdown_table(results), "Spot:")
    assert dict(zip(header, rows[0]))["cost vs ours"] == MISSING
    page = next(p for p in write_report(_results(), {}, tmp_path) if p.name == "report.html").read_text()
    assert "<p>Spot:</p>" in page and "pods moved at the notice" in page


def test_runs_with_a_virtual_node_get_their_own_table_in_markdown_and_html(tmp_path: Path) -> None:
    from devtools.bench_report import VN_HEADERS, markdown_table, render_html

    vn = {"aci_cost": 1.11, "peak_container_groups": 88, "peak_cores": 61.0, "pods_refused": {"quota": 3, "rate": 4},
          "jobs_failed": 2, "tasks_never_run": 17}
    results = {"replay": {"t": {
        "ours": {"cost": 50.0, "pending_wait_s": {"p95": 139}, "pods": 10, "pods_completed": 10},
        "ours+vn@100": {"cost": 58.75, "pending_wait_s": {"p95": 152}, "pods": 10, "pods_completed": 8,
                        "virtual_node": vn},
    }}}
    text = markdown_table(results)
    assert "Virtual node (ACI):" in text and "| " + " | ".join(VN_HEADERS) + " |" in text
    row = next(line for line in text.splitlines() if line.startswith("| ours+vn@100 |") and "88" in line)
    assert [cell.strip() for cell in row.strip("|").split("|")][4:9] == ["88", "61", "7", "2", "17"]
    assert "Virtual node (ACI):" in render_html(results, {})
