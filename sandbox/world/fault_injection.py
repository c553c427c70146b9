"""Fault injection in the world, and the per-call counters the HTTP surfaces keep.

`FaultInjectionPart` owns the injected API faults (`sandbox.world.faults.Fault`): the next calls matching
(api, method, resource) fail with a chosen status (`inject_fault`, consumed by `take_fault`), and
the queued allocation failures of a scale set's next capacity increases (`fail_next_scale_up`,
consumed by `sandbox.world.scale_sets` when capacity grows). `count_call` records every API call.
"""

from __future__ import annotations

from typing import Any

from sandbox.world.core import WorldCore
from sandbox.world.faults import Fault, ScaleUpFailure, default_scale_up_message, make_fault


class FaultInjectionPart(WorldCore):
    """Injected faults and call counting. See the module docstring."""

    def _init_fault_state(self) -> None:
        self._faults: list[Fault] = []

    def inject_fault(
        self,
        target: tuple[str, str, str] | list[str],
        *,
        status: int,
        count: int = 1,
        code: str | None = None,
        message: str | None = None,
        retry_after: float | None = None,
    ) -> Fault:
        """The next `count` calls matching (api, method, resource) fail with `status` (see sandbox.world.faults)."""
        with self.lock:
            fault = make_fault(target, status=status, count=count, code=code, message=message, retry_after=retry_after)
            self._faults.append(fault)
            return fault

    def fail_next_scale_up(
        self, scale_set: str, *, code: str = "QuotaExceeded", message: str | None = None, count: int = 1,
        resource_group: str | None = None,
    ) -> None:
        """The next `count` capacity increases of the scale set fail as LROs with `code`; no instances appear."""
        with self.lock:
            matches = [
                g for g in self._groups.values()
                if g.name == scale_set and (resource_group is None or g.resource_group.lower() == resource_group.lower())
            ]
            if len(matches) != 1:
                raise ValueError(f"no single scale set named {scale_set!r}")
            group = matches[0]
            text = message or default_scale_up_message(code, group.spec.vm_size, group.spec.location)
            group.scale_up_failures.append(ScaleUpFailure(group.name, code, text, count))

    def take_fault(self, api: str, method: str, resource: str) -> Fault | None:
        with self.lock:
            for fault in self._faults:
                if fault.matches(api, method, resource):
                    fault.remaining -= 1
                    self.counters.faults_triggered += 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
            return None

    def faults(self) -> list[dict[str, Any]]:
        with self.lock:
            return [f.describe() for f in self._faults]

    def count_call(self, api: str, operation: str, *, write: bool) -> None:
        with self.lock:
            self.counters.count(api, operation, write=write)

