"""The paging measurement reads the same cluster at each page size, and the wait of each request counts."""

from __future__ import annotations

from devtools import measure_paging


def test_each_page_size_reads_the_whole_cluster_and_latency_adds_up() -> None:
    result = measure_paging.run(nodes=6, latency_ms=5.0, page_sizes=(20, 400))
    small, large = result["rows"]
    assert small["requests"] > large["requests"] >= 4  # one request at least per list
    for row in result["rows"]:
        # Every request waits 5 ms: the lists one after another cannot be quicker than that.
        assert row["sequential_s"] >= row["requests"] * 0.005
        assert row["read_s"] > 0 and row["peak_mib"] > 0
    assert len(measure_paging.table(result)) == 4 + len(result["rows"])
