"""Page size and concurrent list calls: what the adapter's reads cost at each page size, with a network's wait.

The measurement behind `DEFAULT_PAGE_SIZE` (shared/adapters/kubernetes.py) and observe's concurrent pod list
(shared/services/observe.py), rerun with `python -m devtools.measure_paging [--nodes N] [--latency-ms MS]`.
The benchmark's cluster (devtools.bench_scale: N nodes x 30 pods, heavy objects) is paged at each page size
as the API server pages it; the official client and the adapter read it through `ReplayApiClient`, which
waits `latency` before each answer (a round trip; slept, so other threads run meanwhile). Per page size:

- `read_s`: list_nodes + list_pods + list_disruption_budgets + list_daemonsets one after the other, with no
  latency (the decoding and conversion alone), best of two, cyclic GC paused as in a poll;
- `peak_mib`: tracemalloc's peak over that read (a larger page holds more bytes and structs at once);
- `sequential_s` / `observe_s`: with the latency, the four lists one after the other, and `observe()`,
  which lists the pods in a thread beside the node list (discovery is handed over, as in bench_scale).

The API server's own cost per page (serialising, etcd or the watch cache) is not modelled: a bigger page
costs it more memory per request, which is why clients page at all.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, cast

from devtools.bench import NOW
from devtools.measure_decoders import best_paused
from devtools.bench_scale import RawCluster, ReplayApiClient, _ObservePorts, _RecordedCompute, raw_cluster, tick_cluster
from shared.adapters.kubernetes import KubernetesCluster
from shared.ports import Ports
from shared.services.observe import observe

PAGE_SIZES = (250, 500, 1000, 2000, 5000)


def _cluster(raw: RawCluster, latency_s: float) -> KubernetesCluster:
    return KubernetesCluster(ReplayApiClient(raw, latency_s=latency_s), page_size=raw.page_size)


def _read_all(cluster: KubernetesCluster) -> int:
    return (len(cluster.list_nodes()) + len(cluster.list_pods()) + len(cluster.list_disruption_budgets())
            + len(cluster.list_daemonsets()))


def measure_page_size(raw: RawCluster, *, latency_s: float, repeat: int = 2) -> dict[str, Any]:
    read_s = best_paused(lambda: _read_all(_cluster(raw, 0.0)), repeat)
    gc.collect()
    tracemalloc.start()
    _read_all(_cluster(raw, 0.0))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    sequential_s = best_paused(lambda: _read_all(_cluster(raw, latency_s)), 1)

    def observed() -> None:
        ports = cast(Ports, _ObservePorts(_cluster(raw, latency_s), _RecordedCompute(raw.groups)))
        observe(ports, now=NOW, with_budgets=True)

    return {"page_size": raw.page_size, "requests": sum(len(pages) for pages in raw.pages.values()),
            "read_s": round(read_s, 3), "peak_mib": round(peak / 2**20, 1),
            "sequential_s": round(sequential_s, 3), "observe_s": round(best_paused(observed, 1), 3)}


def run(*, nodes: int = 1000, latency_ms: float = 20.0, page_sizes: Sequence[int] = PAGE_SIZES) -> dict[str, Any]:
    snapshot = tick_cluster(nodes, 30)
    rows = []
    for size in page_sizes:
        with TemporaryDirectory(prefix=f"measure-paging-{size}-") as tmp:
            rows.append(measure_page_size(raw_cluster(snapshot, page_size=size, directory=Path(tmp)),
                                          latency_s=latency_ms / 1000))
    return {"nodes": nodes, "pods": len(snapshot.pods), "latency_ms": latency_ms, "rows": rows}


def table(result: dict[str, Any]) -> list[str]:
    lines = [f"{result['nodes']:,} nodes, {result['pods']:,} pods; {result['latency_ms']:g} ms a round trip", "",
             "| page size | requests | read, no latency | peak (tracemalloc) | lists one after another, with latency "
             "| observe (pods beside nodes), with latency |", "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['page_size']:,} | {r['requests']:,} | {r['read_s']:.3f} s | {r['peak_mib']:.0f} MiB | "
              f"{r['sequential_s']:.3f} s | {r['observe_s']:.3f} s |" for r in result["rows"]]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.measure_paging", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args(argv)
    print("\n".join(table(run(nodes=args.nodes, latency_ms=args.latency_ms))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
