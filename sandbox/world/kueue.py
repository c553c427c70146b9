"""A Kueue-like admission double: cluster queues whose admission check is a ProvisioningRequest.

What Kueue does for a Job queued to a ClusterQueue with the ProvisioningRequest admission check (Kueue's docs,
"Provisioning Admission Check Controller"; kubernetes-sigs/kueue KEP-1136), as far as an autoscaler can see it:

- queued jobs get a quota reservation in the queue's order (its `queueingStrategy`: StrictFIFO stops at the first
  job the remaining nominal quota cannot hold; BestEffortFIFO, Kueue's default, tries the ones behind it), ordered
  by when they entered the queue (a requeued job: when it was evicted, Kueue's default requeuing timestamp);
- only a job holding a reservation gets a ProvisioningRequest (of the admission check's class and parameters); the job
  is admitted, and its pods created, when that request is Provisioned (sandbox.world.gang_jobs does the rest);
- a failed attempt releases the reservation and the job waits out its backoff outside the queue's order (other jobs
  may be admitted meanwhile); a finished or given-up job releases its reservation.

Nominal quota counts what the job's pods request, for the resources the queue names (one flavour, no cohort, no
borrowing or preemption). Nothing is served over the API: the double acts in the world's reconcile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sandbox.model.gang_spec import ClusterQueueSpec, GangJobSpec

if TYPE_CHECKING:
    from sandbox.world import World
    from sandbox.world.gang_jobs import GangJobs, JobState


def usage(job: GangJobSpec, quota: Mapping[str, int]) -> dict[str, int]:
    """What the job's pods request of each resource the quota names (cpu in millicores, memory in bytes)."""
    per_pod = {"cpu": job.requests.cpu_milli, "memory": job.requests.memory_bytes, **dict(job.requests.scalars)}
    return {name: per_pod.get(name, 0) * job.pods for name in quota}


class KueueDouble:
    """The scenario's cluster queues and who holds their quota. See the module docstring."""

    def __init__(self, queues: tuple[ClusterQueueSpec, ...]) -> None:
        self.queues = {queue.name: queue for queue in queues}
        self.reserved: dict[str, set[str]] = {queue.name: set() for queue in queues}  # queue -> job keys holding quota
        self.admission_order: list[str] = []  # job keys, in the order their quota was reserved
        self.released = False  # quota went back since the last reservation pass

    def _used(self, queue: ClusterQueueSpec, gangs: GangJobs) -> dict[str, int]:
        used = {name: 0 for name in queue.nominal_quota}
        for key in self.reserved[queue.name]:
            for name, amount in usage(gangs.jobs[key].spec, queue.nominal_quota).items():
                used[name] += amount
        return used

    def reconcile(self, world: World, gangs: GangJobs) -> None:
        """Reserve quota in each queue's order for the jobs that may enter, and make each one's request."""
        from sandbox.world.gang_jobs import start_attempt

        self.released = False
        for queue in self.queues.values():
            waiting = sorted(
                (s for s in gangs.jobs.values()
                 if s.spec.queue == queue.name and not s.ended and s.spec.key not in self.reserved[queue.name]
                 and world._t >= s.spec.at),
                key=lambda s: (s.queued_at if s.queued_at is not None else s.spec.at, s.spec.at, s.spec.key))
            used = self._used(queue, gangs)
            for state in waiting:
                state.queued_at = state.queued_at if state.queued_at is not None else state.spec.at
                if world._t < state.not_before:
                    continue  # backing off: inadmissible for now, and not in the way of others
                wanted = usage(state.spec, queue.nominal_quota)
                if any(used[name] + wanted[name] > queue.nominal_quota[name] for name in wanted):
                    if queue.queueing_strategy == "StrictFIFO":
                        break
                    continue
                for name, amount in wanted.items():
                    used[name] += amount
                self.reserved[queue.name].add(state.spec.key)
                self.admission_order.append(state.spec.key)
                state.quota_reserved = world._t
                start_attempt(world, state)

    def release(self, state: JobState) -> None:
        """The job's attempt ended (failed, or the job is done): its quota goes back to the queue."""
        if state.spec.queue is not None and state.spec.key in self.reserved[state.spec.queue]:
            self.reserved[state.spec.queue].discard(state.spec.key)
            self.released = True

    def report(self, gangs: GangJobs) -> dict[str, Any]:
        """Per queue: its nominal quota, what is reserved now and by whom; the order quota was reserved in."""
        return {
            "queues": {
                name: {"nominal_quota": dict(queue.nominal_quota), "strategy": queue.queueing_strategy,
                       "class": queue.admission_check.class_name, "reserved": self._used(queue, gangs),
                       "holding": sorted(self.reserved[name])}
                for name, queue in self.queues.items()
            },
            "reservation_order": list(self.admission_order),
        }
