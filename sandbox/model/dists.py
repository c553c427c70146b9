"""Random quantities of a scenario (boot delays, pod sizes, run times): what a `dist` field parses to.

Its own module so that the scenario model and the modules whose specs the scenario holds (`sandbox.model.aci`)
both import it without importing each other.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

# z-score of the 95th percentile of a standard normal: turns (median, p95) into a lognormal sigma.
_Z95 = 1.6448536269514722


@dataclass(frozen=True, slots=True)
class Dist:
    """A random quantity in its parsed unit (millicores, bytes or seconds).

    fixed: `values[0]`; choice: uniform over `values`; uniform: between `low` and `high`;
    lognormal: median/p95, clipped to [low, high].
    """

    kind: Literal["fixed", "choice", "uniform", "lognormal"]
    values: tuple[float, ...] = ()
    low: float = 0.0
    high: float = math.inf
    median: float = 0.0
    p95: float = 0.0

    @staticmethod
    def fixed(value: float) -> Dist:
        return Dist("fixed", (value,), value, value)

    def sample(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            return self.values[0]
        if self.kind == "choice":
            return rng.choice(self.values)
        if self.kind == "uniform":
            return rng.uniform(self.low, self.high)
        if self.median <= 0:
            return max(self.low, 0.0)
        sigma = (math.log(self.p95) - math.log(self.median)) / _Z95 if self.p95 > self.median else 0.0
        value = math.exp(rng.gauss(math.log(self.median), sigma))
        return min(max(value, self.low), self.high)
