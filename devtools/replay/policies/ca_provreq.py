"""cluster-autoscaler's ProvisioningRequest handling as it behaves on Azure, for the `ca` emulation.

Read against ../shared/facts/capacity-ahead-gangs-sizes.md and cluster-autoscaler.md (cluster-autoscaler's
provisioningrequest processors; the Azure VMSS AtomicIncreaseSize merged 2026-05):
- check-capacity: the request's pods are simulated on the Ready nodes, after the room of every request booked
  (Provisioned, within its 10-minute booking); all fit: Provisioned=True, CapacityIsFound; else Provisioned=False,
  CapacityIsNotFound, tried again next loop (Failed with noRetry). Never a scale-up.
- best-effort-atomic-scale-up: all pods fit existing room: Provisioned=True, CapacityIsFound. Else the pods are
  estimated on the groups (the same estimator and expander as CA's ordinary scale-up) and, when one group can take
  all of them, that group is asked for the whole increase in one capacity PUT: accepted, Provisioned=True,
  CapacityIsProvisioned at once (CA sets it when the resize is accepted, not when nodes come). A refused PUT backs
  the group off and leaves Provisioned=False, CapacityIsNotFound (retried next loop, as CA does). No group holds
  them all: Provisioned=False, CapacityIsNotFound.
- No rollback: instances Azure leaves Failed after the PUT are given up only by CA's ordinary
  --max-node-provision-time (15 min) handling of the increase (ClusterAutoscaler._check_increases); the nodes that
  came stay, holding their GPUs.
- Pods consuming a request are not planned as ordinary pending pods while the request's increase is in flight or
  its booking lasts; after that they are ordinary pods (a scale-up for what is missing, possibly one at a time).

Simplifications, and the side each favours:
- Conditions are written only when they change; no event is emitted. Favours neither side.
- One atomic scale-up per loop, after which the loop does no ordinary scale-up (CA's ProvisioningRequest pass takes
  one request per loop); check-capacity requests are all checked in each loop (CA's batch processing). Favours CA.
- A refused PUT leaves the request Provisioned=False and retried; the gang job retries only on Failed, so such a
  request waits for CA's next try after the group's backoff. Favours neither side.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from shared.domain import (
    ATOMIC_SCALE_UP_CLASS, CHECK_CAPACITY_CLASS, ClusterSnapshot, Pod, ProvisioningRequest, consumed_request,
)
from shared.engine import provisioning_conditions as pc
from shared.engine.scale_up import simulate_scale_up
from shared.options import scale_up_options

if TYPE_CHECKING:
    from devtools.replay.policies.ca import ClusterAutoscaler

log = logging.getLogger(__name__)

BOOKING = timedelta(minutes=10)  # CA's check-capacity booking (FAQ), also held after an atomic Provisioned
CLASSES = (CHECK_CAPACITY_CLASS, ATOMIC_SCALE_UP_CLASS)


@dataclass(frozen=True, slots=True)
class _Atomic:
    group_id: str
    token: str


class CaProvisioningRequests:
    """The ProvisioningRequest pass of the `ca` emulation (ClusterAutoscaler's `provisioning` hook)."""

    def __init__(self, replay: Any) -> None:
        self._cluster = replay.cluster
        self._atomic: dict[str, _Atomic] = {}  # request key -> the increase asked for it
        self.provisioned = 0
        self.not_found = 0

    def _requests(self) -> list[ProvisioningRequest]:
        listed = self._cluster.list_provisioning_requests()
        return [r for r in listed or () if r.class_name in CLASSES]

    def _booked(self, request: ProvisioningRequest, now: datetime) -> bool:
        cond = request.condition(pc.PROVISIONED)
        return (cond is not None and cond.status == "True" and not pc.is_final(request)
                and cond.since is not None and now - cond.since < BOOKING)

    def _in_flight(self, ca: ClusterAutoscaler, key: str) -> bool:
        atomic = self._atomic.get(key)
        return atomic is not None and ca.increase_in_flight(atomic.token)

    def ordinary(self, ca: ClusterAutoscaler, pending: list[Pod], now: datetime) -> list[Pod]:
        """The pending pods CA's ordinary scale-up sees: not those consuming a request booked or scaled up for."""
        held = {r.key for r in self._requests() if self._booked(r, now) or self._in_flight(ca, r.key)}
        return [p for p in pending if consumed_request(p) not in held]

    def _pods(self, request: ProvisioningRequest, now: datetime) -> list[Pod] | None:
        pods: list[Pod] = []
        for pod_set in request.pod_sets:
            template = self._cluster.get_pod_template(request.namespace, pod_set.pod_template)
            if template is None:
                return None
            for _ in range(pod_set.count):
                pods.append(replace(template.pod, namespace=request.namespace, created_at=now, node_name=None,
                                    phase="Pending", unschedulable=True,
                                    name=f"provreq:{request.key}:{len(pods)}", uid=f"provreq:{request.key}:{len(pods)}"))
        return pods

    def run_once(self, ca: ClusterAutoscaler, snapshot: ClusterSnapshot, now: datetime) -> bool:
        """One loop's pass; True when it scaled up (no scale-down in that loop, as after any scale-up)."""
        requests = self._requests()
        booked: list[Pod] = []
        for request in requests:
            if self._booked(request, now) and request.class_name == CHECK_CAPACITY_CLASS:
                booked.extend(self._pods(request, now) or ())
        for request in requests:
            if pc.is_final(request) or request.is_true(pc.PROVISIONED):
                continue
            pods = self._pods(request, now)
            if pods is None:
                self._write(request, pc.FAILED, "True", pc.INVALID_REQUEST, "a PodTemplate could not be read", now)
                continue
            if request.class_name == CHECK_CAPACITY_CLASS:
                self._check_capacity(ca, request, snapshot, booked, pods, now)
                continue
            if self._in_flight(ca, request.key):
                continue
            if self._atomic_scale_up(ca, request, snapshot, booked, pods, now):
                return True  # one scale-up per loop
        return False

    def _simulate(self, ca: ClusterAutoscaler, snapshot: ClusterSnapshot, booked: list[Pod], pods: list[Pod],
                  now: datetime, *, grow: bool) -> Any:
        # The request's pods alone are pending, after the booked pods took their room (placed first).
        bound = tuple(p for p in snapshot.pods if p.node_name)
        view = replace(snapshot, pods=(*bound, *booked, *pods))
        options = scale_up_options(ca.settings, now=now)
        unavailable = {g.id: "not grown" for g in snapshot.groups} if not grow else ca.unavailable_groups(now)
        return simulate_scale_up(view, options=replace(options, unavailable=unavailable, gangs=False))

    def _check_capacity(self, ca: ClusterAutoscaler, request: ProvisioningRequest, snapshot: ClusterSnapshot,
                        booked: list[Pod], pods: list[Pod], now: datetime) -> None:
        simulation = self._simulate(ca, snapshot, booked, pods, now, grow=False)
        mine = {f"{p.namespace}/{p.name}" for p in pods}
        if not mine & set(simulation.plan.unplaceable):
            booked.extend(pods)
            self._write(request, pc.PROVISIONED, "True", pc.CAPACITY_IS_FOUND, "", now)
        elif request.parameters.get(pc.NO_RETRY) == "true":
            self._write(request, pc.FAILED, "True", pc.CAPACITY_IS_NOT_FOUND, "no room on the nodes there are", now)
        else:
            self._write(request, pc.PROVISIONED, "False", pc.CAPACITY_IS_NOT_FOUND, "no room on the nodes there are",
                        now)

    def _atomic_scale_up(self, ca: ClusterAutoscaler, request: ProvisioningRequest, snapshot: ClusterSnapshot,
                         booked: list[Pod], pods: list[Pod], now: datetime) -> bool:
        simulation = self._simulate(ca, snapshot, booked, pods, now, grow=True)
        plan = simulation.plan
        if not plan.increases and not plan.unplaceable:
            self._write(request, pc.PROVISIONED, "True", pc.CAPACITY_IS_FOUND, "", now)
            return False
        if plan.unplaceable or len(plan.increases) != 1:
            self.not_found += 1
            self._write(request, pc.PROVISIONED, "False", pc.CAPACITY_IS_NOT_FOUND,
                        "no node group can take every pod of the request", now)
            return False
        increase = plan.increases[0]
        token = ca.atomic_increase(increase.group_id, increase.new_target, now)
        if token is None:  # the PUT was refused (a quota): CA backed the group off and tries again later
            self.not_found += 1
            self._write(request, pc.PROVISIONED, "False", pc.CAPACITY_IS_NOT_FOUND,
                        f"the capacity increase of {increase.group_id} was refused", now)
            return False
        self._atomic[request.key] = _Atomic(increase.group_id, token)
        self.provisioned += 1
        self._write(request, pc.PROVISIONED, "True", pc.CAPACITY_IS_PROVISIONED,
                    f"{increase.group_id} increased to {increase.new_target}", now)
        return True

    def _write(self, request: ProvisioningRequest, type_: str, status: str, reason: str, message: str,
               now: datetime) -> None:
        conditions = pc.with_condition(request.conditions, type_, status, reason, message, now=now,
                                       generation=request.generation)
        if not pc.conditions_changed(request.conditions, conditions):
            return
        self._cluster.update_provisioning_request_status(request.namespace, request.name, conditions=conditions)
