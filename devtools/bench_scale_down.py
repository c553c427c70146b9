"""Scale-down evaluation time against cluster size, with and without the candidate pool (issue 19).

For each size (500, 1,000, 2,000 and 5,000 nodes x 30 pods by default) the cluster is
`bench_scale.tick_cluster`, the one the tick benchmark plans on, and the timed call is the tick's
scale-down plan, `bench.plan_drainable` (every node unneeded long enough, default options):

- `all`: every candidate simulated (`simulated_at=None`: the behaviour before the pool). The plan runs
  its own scale-up simulation to learn which nodes pending pods would use, as the tick's call does;
- `pool`: the same call on a first poll with the candidate pool at its defaults
  (SCALE_DOWN_CANDIDATES_POOL_RATIO 0.1, _MIN_COUNT 50): at most max(ceil(0.1 x nodes), 50) candidates
  with pods to move simulated, empty ones always;
- `shared`: the pool, in a tick that ran the scale-up simulation on the same placement state and hands
  its placements over (`plan_drainable(state=, pending_placements=)`): the scale-down evaluation alone.
  The state and the simulation are built before each run, untimed;
- `shared_gc_off`: the same with the cyclic GC paused during the run, as the app's polls run it
  (shared.gc_pause): the snapshot's hundreds of thousands of objects make each full collection long, and
  they come more often as the cluster grows (in CPU time, about a third of the 5,000-node plan). This is
  the column the issue's growth target is read from.

Each figure is the best of `repeat` runs, in wall time and in CPU time (the plan is single-threaded:
its CPU time is its cost whatever else the machine runs). The growth is the exponent k of t = c * n^k
fitted by least squares on log t against log n: 1 is linear, 2 quadratic.

Figures, not assertions: `python -m devtools.bench_scale_down [--sizes 500,1000] [--repeat 3]` prints the
table; `run()` returns the figures as a dict.
"""

from __future__ import annotations

import argparse
import functools
import gc
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from devtools.bench import NOW, plan_drainable
from devtools.bench_scale import tick_cluster
from shared.domain import ClusterSnapshot
from shared.engine.reasons import NOT_SIMULATED
from shared.engine.scale_down import ScaleDownOptions, ScaleDownPlan
from shared.engine.scale_up import existing_placements, initial_state, simulate_scale_up
from shared.gc_pause import gc_paused

SIZES = (500, 1000, 2000, 5000)
PODS_PER_NODE = 30
VARIANTS = ("all", "pool", "shared", "shared_gc_off")
LABELS = {"all": "all candidates", "pool": "pool (first poll)", "shared": "pool, state shared with scale-up",
          "shared_gc_off": "the same, GC paused (as the app runs it)"}


def _prepared(variant: str, snapshot: ClusterSnapshot) -> Callable[[], Callable[[], ScaleDownPlan]]:
    """Per run: the untimed setup, which returns the timed call."""
    if variant == "all":
        return lambda: lambda: plan_drainable(snapshot)
    if variant == "pool":
        return lambda: lambda: plan_drainable(snapshot, simulated_at={})

    def shared() -> Callable[[], ScaleDownPlan]:
        state = initial_state(snapshot)
        placements = existing_placements(simulate_scale_up(snapshot, state=state))
        plan = functools.partial(plan_drainable, snapshot, simulated_at={}, state=state, pending_placements=placements)
        if variant == "shared":
            return plan
        assert variant == "shared_gc_off"

        def paused() -> ScaleDownPlan:
            with gc_paused():
                return plan()

        return paused

    return shared


def best_of(setup: Callable[[], Callable[[], ScaleDownPlan]], repeat: int) -> tuple[float, float, ScaleDownPlan]:
    """The best wall time and the best CPU time of `repeat` runs of what `setup()` returns, and the last plan."""
    wall, cpu, plan = math.inf, math.inf, None
    for _ in range(repeat):
        action = setup()
        gc.collect()
        started, started_cpu = time.perf_counter(), time.process_time()
        plan = action()
        cpu = min(cpu, time.process_time() - started_cpu)
        wall = min(wall, time.perf_counter() - started)
    assert plan is not None
    return wall, cpu, plan


def fitted_exponent(sizes: Sequence[int], seconds: Sequence[float]) -> float | None:
    """The slope of log t against log n by least squares; None with fewer than two sizes."""
    if len(sizes) < 2:
        return None
    xs = [math.log(n) for n in sizes]
    ys = [math.log(t) for t in seconds]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


def _found(plan: ScaleDownPlan) -> dict[str, int]:
    candidates = set(plan.unneeded) | set(plan.kept) | {r.node for r in plan.removals}
    not_simulated = sum(1 for reason in plan.kept.values() if reason.code == NOT_SIMULATED)
    return {"candidates": len(candidates), "simulated": len(candidates) - not_simulated,
            "unneeded": len(plan.unneeded), "removals": len(plan.removals)}


def run(sizes: Sequence[int] = SIZES, *, repeat: int = 3, pods_per_node: int = PODS_PER_NODE) -> dict[str, Any]:
    """Per size and variant: best seconds (wall and CPU) and what the plan found; per variant the fitted exponent."""
    rows: list[dict[str, Any]] = []
    for size in sizes:
        snapshot = tick_cluster(size, pods_per_node)
        row: dict[str, Any] = {"nodes": size, "pods": len(snapshot.pods),
                               "pool_size": ScaleDownOptions().pool_size(len(snapshot.nodes))}
        for variant in VARIANTS:
            wall, cpu, plan = best_of(_prepared(variant, snapshot), repeat)
            row[variant] = {"seconds": round(wall, 4), "cpu_seconds": round(cpu, 4), **_found(plan)}
        rows.append(row)
        del snapshot

    def fit(key: str) -> dict[str, float | None]:
        found = {v: fitted_exponent([r["nodes"] for r in rows], [r[v][key] for r in rows]) for v in VARIANTS}
        return {v: (round(k, 2) if k is not None else None) for v, k in found.items()}

    return {"sizes": rows, "exponent": fit("seconds"), "cpu_exponent": fit("cpu_seconds"),
            "repeat": repeat, "pods_per_node": pods_per_node, "now": NOW.isoformat()}


def table(result: Mapping[str, Any]) -> list[str]:
    """Markdown: one row per size (wall / CPU seconds), then the fitted exponents."""
    lines = ["| nodes | pods | " + " | ".join(LABELS[v] for v in VARIANTS) + " | pool size "
             "| simulated / candidates | unneeded (all / pool) |",
             "|---|---|" + "---|" * len(VARIANTS) + "---|---|---|"]
    for r in result["sizes"]:
        cells = " | ".join(f"{r[v]['seconds']:.3f} s / {r[v]['cpu_seconds']:.3f} s" for v in VARIANTS)
        lines.append(f"| {r['nodes']:,} | {r['pods']:,} | {cells} | {r['pool_size']} "
                     f"| {r['pool']['simulated']:,} / {r['pool']['candidates']:,} "
                     f"| {r['all']['unneeded']:,} / {r['pool']['unneeded']:,} |")
    wall, cpu = result["exponent"], result["cpu_exponent"]
    lines.append("")
    lines.append(f"Seconds are wall / CPU, best of {result['repeat']}. Fitted growth t ~ n^k, wall / CPU: "
                 + "; ".join(f"{v} k = {wall[v]} / {cpu[v]}" for v in VARIANTS) + ".")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.bench_scale_down", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="node counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the best counts")
    args = parser.parse_args(argv)
    result = run([int(s) for s in args.sizes.split(",") if s.strip()], repeat=args.repeat)
    print("\n".join(table(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
