"""The decoder measurement compares every decoder on the same pages and checks both read paths agree."""

from __future__ import annotations

from pathlib import Path

from devtools import measure_decoders
from devtools.bench_scale import raw_cluster, tick_cluster


def test_every_decoder_is_timed_on_the_same_pages_and_both_paths_agree(tmp_path: Path) -> None:
    raw = raw_cluster(tick_cluster(6, 30), directory=tmp_path)
    result = measure_decoders.measure(raw)
    assert result["same_domain_objects"] is True
    assert {"json.loads", "msgspec, untyped", "msgspec, typed (kube_decode)"} <= set(result["decode_s"])
    assert result["decode_vs_json_loads"]["json.loads"] == 1.0
    assert all(seconds > 0 for seconds in [*result["decode_s"].values(), *result["read_s"].values()])
    assert result["pods"] >= 6 * 30 and result["pages"] >= 2
    rows = measure_decoders.table(result)
    assert sum(row.startswith("| decode:") for row in rows) == len(result["decode_s"])
