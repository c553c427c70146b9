"""Decoding the API server's list responses: the decoders we could use, measured on the same bytes.

The measurement behind shared/adapters/kube_decode.py, rerun with `python -m devtools.measure_decoders
[--nodes N]`. It generates the benchmark's cluster (devtools.bench_scale: N nodes x 30 pods, heavy objects
with managedFields, conditions, container statuses) as the API server pages it (500 items a page), then times,
best of three with the cyclic GC paused, over every page of nodes and pods:

- decode only: `json.loads`, `orjson.loads`, `msgspec.json.decode` into plain dicts and lists, and msgspec
  into the typed structs of kube_decode (which skip every field we do not read);
- decode and convert into domain objects: json.loads then the converters on dicts (the previous path), and
  the typed structs then the same converters (the adapter's path), checked equal.

orjson is measured if installed (`pip install orjson`); it is no dependency of the app.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import msgspec

from devtools.bench_scale import NODES_PATH, PODS_PATH, RawCluster, raw_cluster, tick_cluster
from shared.adapters.kube_decode import NodeItem, PodItem, decode_page
from shared.adapters.kubernetes import node_from_json, pod_from_json
from shared.gc_pause import gc_paused


def best_paused(action: Callable[[], Any], repeat: int = 3) -> float:
    """The best time of `repeat` runs of `action`, each with the cyclic GC paused (as a poll runs)."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        with gc_paused():
            started = time.perf_counter()
            action()
            best = min(best, time.perf_counter() - started)
    return best


def _decoders() -> dict[str, Callable[[bytes], Any]]:
    found: dict[str, Callable[[bytes], Any]] = {"json.loads": json.loads}
    try:
        import orjson
    except ImportError:
        pass
    else:
        found["orjson.loads"] = orjson.loads
    found["msgspec, untyped"] = msgspec.json.decode
    return found


def measure(raw: RawCluster) -> dict[str, Any]:
    node_pages = [p.read() for p in raw.pages[NODES_PATH]]
    pod_pages = [p.read() for p in raw.pages[PODS_PATH]]
    pages = node_pages + pod_pages
    decode_s = {name: best_paused(lambda d=decode: [d(body) for body in pages]) for name, decode in _decoders().items()}
    decode_s["msgspec, typed (kube_decode)"] = best_paused(lambda: ([decode_page(b, NodeItem) for b in node_pages],
                                                                [decode_page(b, PodItem) for b in pod_pages]))

    def previous() -> tuple[list[Any], list[Any]]:
        return ([node_from_json(o) for b in node_pages for o in json.loads(b)["items"]],
                [pod_from_json(o) for b in pod_pages for o in json.loads(b)["items"]])

    def typed() -> tuple[list[Any], list[Any]]:
        return ([node_from_json(o) for b in node_pages for o in decode_page(b, NodeItem).items],
                [pod_from_json(o) for b in pod_pages for o in decode_page(b, PodItem).items])

    same = previous() == typed()
    baseline = decode_s["json.loads"]
    return {
        "nodes": raw.items(NODES_PATH), "pods": raw.items(PODS_PATH), "pages": len(pages),
        "mib": round(sum(map(len, pages)) / 2**20, 1),
        "decode_s": {k: round(v, 3) for k, v in decode_s.items()},
        "decode_vs_json_loads": {k: round(v / baseline, 2) for k, v in decode_s.items()},
        "read_s": {"json.loads + converters (previous)": round(best_paused(previous), 3),
                   "typed + converters (kube_decode)": round(best_paused(typed), 3)},
        "same_domain_objects": same,
        "python": sys.version.split()[0], "msgspec": msgspec.__version__,
    }


def table(result: dict[str, Any]) -> list[str]:
    rows = [f"{result['nodes']:,} nodes and {result['pods']:,} pods in {result['pages']} pages, "
            f"{result['mib']:,} MiB (Python {result['python']}, msgspec {result['msgspec']})", "",
            "| what | seconds | vs json.loads |", "|---|---:|---:|"]
    rows += [f"| decode: {name} | {seconds:.3f} | {result['decode_vs_json_loads'][name]:.2f}x |"
             for name, seconds in result["decode_s"].items()]
    rows += [f"| read into domain objects: {name} | {seconds:.3f} | "
             f"{seconds / result['decode_s']['json.loads']:.2f}x |" for name, seconds in result["read_s"].items()]
    rows.append(f"\nsame domain objects both ways: {result['same_domain_objects']}")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.measure_decoders", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="cluster size (x 30 pods; default 1000)")
    args = parser.parse_args(argv)
    with TemporaryDirectory(prefix="measure-decoders-") as tmp:
        raw = raw_cluster(tick_cluster(args.nodes, 30), directory=Path(tmp))
        print("\n".join(table(measure(raw))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
