"""What the world measures for report(): API call counters, pod records, summaries."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ApiCounters:
    arm_reads: int = 0
    arm_writes: int = 0
    k8s_reads: int = 0
    k8s_writes: int = 0
    loganalytics_queries: int = 0
    arm_throttled: int = 0
    faults_triggered: int = 0
    arm: Counter[str] = field(default_factory=Counter)
    k8s: Counter[str] = field(default_factory=Counter)
    loganalytics: Counter[str] = field(default_factory=Counter)
    instances_deleted: Counter[str] = field(default_factory=Counter)  # "<vmss>/<id>" -> times asked (accepted)
    instance_deletes_refused: Counter[str] = field(default_factory=Counter)  # "<vmss>/<id>" -> named in a refused delete
    instances_deallocated: Counter[str] = field(default_factory=Counter)  # "<vmss>/<id>" -> times asked (accepted)
    instances_started: Counter[str] = field(default_factory=Counter)  # "<vmss>/<id>" -> times asked (accepted)

    def count(self, api: str, operation: str, *, write: bool) -> None:
        if api == "loganalytics":  # queries only read
            self.loganalytics[operation] += 1
            self.loganalytics_queries += 1
        elif api == "arm":
            self.arm[operation] += 1
            if write:
                self.arm_writes += 1
            else:
                self.arm_reads += 1
        else:
            self.k8s[operation] += 1
            if write:
                self.k8s_writes += 1
            else:
                self.k8s_reads += 1

    def as_json(self) -> dict[str, Any]:
        return {
            "arm_reads": self.arm_reads,
            "arm_writes": self.arm_writes,
            "k8s_reads": self.k8s_reads,
            "k8s_writes": self.k8s_writes,
            "loganalytics_queries": self.loganalytics_queries,
            "arm_throttled": self.arm_throttled,
            "faults_triggered": self.faults_triggered,
            "breakdown": {
                "arm": {**dict(sorted(self.arm.items())), "instances_deleted": dict(sorted(self.instances_deleted.items())),
                        "instance_deletes_refused": dict(sorted(self.instance_deletes_refused.items())),
                        "instances_deallocated": dict(sorted(self.instances_deallocated.items())),
                        "instances_started": dict(sorted(self.instances_started.items()))},
                "k8s": dict(sorted(self.k8s.items())),
                "loganalytics": dict(sorted(self.loganalytics.items())),
            },
        }


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def distribution(values: list[float]) -> dict[str, float | int]:
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "mean": round(sum(ordered) / len(ordered), 3) if ordered else 0.0,
        "p50": round(percentile(ordered, 0.5), 3),
        "p90": round(percentile(ordered, 0.9), 3),
        "p99": round(percentile(ordered, 0.99), 3),
        "max": round(ordered[-1], 3) if ordered else 0.0,
    }


def seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
