"""Our quantity parser (shared.quantities) against the kubernetes client's `parse_quantity`.

The measurement behind the comment at the top of shared/quantities.py, rerun with
`python -m devtools.measure_quantity_parsers`: (a) what the library returns for every case of
tests/shared/test_quantities.py and a few more, rounded up as MilliValue()/Value() do; (b) the import
time of `kubernetes.utils.quantity` in fresh interpreters; (c) per-call parse time of both on
100,000 realistic requests (20 texts repeated, as a cluster's pods repeat them) and on 100,000 distinct texts.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
import time
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]

# Every case of tests/shared/test_quantities.py, a few more, and malformed text.
CASES = [
    "100m", "1", "2", "1.5", "0.1", ".5", "5.", "+1", "250m", "0.5m", "1e3", "1E3", "1e-3", "100000u",
    "1000000n", "1k", " 100m ", "128974848", "129M", "123Mi", "512Mi", "4Gi", "1Ki", "1.5Gi", "1G", "1E", "1Ei",
    "1Ti", "1Pi", "0", "-1", "110", "14470348Ki",
    # long enough that Decimal's default 28-digit context rounds the product
    "0.1000000000000000000000000000001", "1.0000000000000000000000000001Ki",
    # malformed for Kubernetes
    "", "abc", "1.2.3", "Gi", "1GB", "1 Gi", "1i", "--1", ".", "1e", "1e+", "1x", "1e999", "0x10",
    "1K", "1ki", "1e3Mi", "1_000", "Infinity", "NaN", "-inf", "1e999999999",
]

REALISTIC = ["100m", "250m", "500m", "1", "2", "1500m", "64Mi", "128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi",
             "1.5Gi", "129M", "14470348Ki", "110", "0", "10m", "8"]


def _ours(text: str) -> tuple[object, object]:
    from shared.quantities import parse_cpu_milli, parse_memory_bytes

    try:
        return parse_cpu_milli(text), parse_memory_bytes(text)
    except ValueError as exc:
        return f"ValueError: {exc}"[:60], None


def _library(text: str) -> tuple[object, object]:
    from kubernetes.utils.quantity import parse_quantity

    try:
        value = parse_quantity(text)
    except ValueError as exc:
        return f"ValueError: {exc}"[:60], None
    if not value.is_finite():
        return f"accepted: {value}", None
    if abs(value.adjusted()) > 30:
        return f"accepted, {value.adjusted() + 1}-digit value", None
    return math.ceil(value * 1000), math.ceil(value)


def correctness() -> list[str]:
    rows = ["| text | ours: milli, bytes | kubernetes: ceil(x*1000), ceil(x) | same |", "|---|---|---|---|"]
    for text in CASES:
        ours, theirs = _ours(text), _library(text)
        same = ours == theirs or (ours[1] is None and theirs[1] is None and str(theirs[0]).startswith("ValueError"))
        rows.append(f"| {text!r} | {ours[0]}, {ours[1]} | {theirs[0]}, {theirs[1]} | {'yes' if same else 'NO'} |")
    return rows


def rounding_in_a_wide_context() -> str:
    """Whether the library's Decimal is exact when its arithmetic runs in a wide context."""
    from kubernetes.utils.quantity import parse_quantity

    text = "0.1000000000000000000000000000001"
    narrow = math.ceil(parse_quantity(text) * 1000)
    with localcontext() as context:
        context.prec = 100
        wide = math.ceil(parse_quantity(text) * 1000)
    return f"ceil({text!r} x 1000): default 28-digit context {narrow}, 100-digit context {wide} (exact: 101)"


def import_seconds(statement: str, runs: int = 7) -> tuple[float, int]:
    """Median wall time of `python -c statement` minus a bare interpreter's, and the modules it loaded."""
    def run(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
        return time.perf_counter() - start

    bare = statistics.median(run("pass") for _ in range(runs))
    loaded = statistics.median(run(statement) for _ in range(runs))
    count = subprocess.run([sys.executable, "-c", f"{statement}; import sys; print(len(sys.modules))"], cwd=ROOT,
                           check=True, capture_output=True, text=True).stdout.strip()
    return loaded - bare, int(count)


def per_call(parse: Callable[[str], object], texts: list[str]) -> float:
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        for text in texts:
            parse(text)
        best = min(best, time.perf_counter() - start)
    return best / len(texts)


def main() -> None:
    print("\n".join(correctness()))
    print()
    print(rounding_in_a_wide_context())
    print()
    for statement in ("import shared.quantities", "import kubernetes.utils.quantity", "import durationpy",
                      "import function_app"):
        seconds, modules = import_seconds(statement)
        print(f"{statement}: {seconds * 1000:.0f} ms over a bare interpreter, {modules} modules loaded")
    print()
    from kubernetes.utils.quantity import parse_quantity as library

    from shared.quantities import _milli_of_text, parse_cpu_milli, parse_memory_bytes

    uncached = _milli_of_text.__wrapped__  # type: ignore[attr-defined]
    texts = [REALISTIC[i % len(REALISTIC)] for i in range(100_000)]
    # a trace whose every request differs: 100,000 distinct texts, so every cached call misses
    distinct = [f"{i}Mi" if i % 2 else f"{i}m" for i in range(100_000)]
    timings = {
        "ours parse_cpu_milli (cached per text)": per_call(parse_cpu_milli, texts),
        "ours parse_memory_bytes (cached per text)": per_call(parse_memory_bytes, texts),
        "ours parse_cpu_milli, uncached": per_call(uncached, texts),
        "ours parse_cpu_milli, 100,000 distinct texts (all misses)": per_call(parse_cpu_milli, distinct),
        "kubernetes parse_quantity": per_call(library, texts),
        "kubernetes, ceil(x*1000)": per_call(lambda t: math.ceil(library(t) * 1000), texts),
        "kubernetes, ceil(x*1000), 100-digit context": per_call(_wide(library), texts),
        "kubernetes, ceil(x*1000), 100,000 distinct texts": per_call(lambda t: math.ceil(library(t) * 1000),
                                                                      distinct),
    }
    for name, seconds in timings.items():
        print(f"{name}: {seconds * 1e6:.2f} us per call ({seconds * 1e5:.2f} s per 100k, {seconds * 1e6:.1f} s per 1M)")


def _wide(library: Callable[[str], Decimal]) -> Callable[[str], int]:
    def parse(text: str) -> int:
        with localcontext() as context:
            context.prec = 100
            return math.ceil(library(text) * 1000)

    return parse


if __name__ == "__main__":
    main()
