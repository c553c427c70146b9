"""Gang jobs in the world: distributed jobs that ask for their capacity with a ProvisioningRequest and need all
their pods at once.

A job of the scenario's `gang_jobs` (sandbox.model.gang_spec) plays what a batch framework (or Kueue, for a job
naming a queue: sandbox.world.kueue) does with a ProvisioningRequest (autoscaling.x-k8s.io/v1):

- an attempt writes a PodTemplate (once per job, `<job>`) and a request `<job>-<attempt>` of the job's class with one
  podSet of `pods`, then waits for the autoscaler to write its status;
- `Provisioned=True`: the job is admitted and creates its pods (`<request>-<i>`), annotated
  `autoscaling.x-k8s.io/consume-provisioning-request: <request>` and `.../provisioning-class-name: <class>`, labelled
  `scheduling.x-k8s.io/pod-group: <job>` (coscheduling's gang label) and `job-name`;
- its pods hold their nodes from the moment each starts, but the work begins only when the last one starts (a
  distributed job waits for its peers): every pod then completes `duration` later. The time each pod held its node
  before its gang was complete (or before the attempt ended, if it never was) is what `report` calls the pod-seconds
  held by partial gangs, with the GPU-seconds they held;
- `Failed=True`, `BookingExpired=True` before any pod started, or a pod of the attempt lost before the work ended
  (killed with its node, evicted, deleted): the attempt ends, its pods are deleted (the Job controller's
  BackoffLimitExceeded: at once), and the next attempt comes after the retry strategy's backoff (Kueue's
  ProvisioningRequest retry: base * 2^(n-1), at most max, no jitter here); after backoff_limit_count retries the job
  is given up (Kueue deactivates the workload). A request that stays Provisioned=False simply waits.

State lives in one `GangJobs` per world (`world._gang_jobs`, made by `schedule`); the world calls `schedule` once,
`on_event` for its timed events and `reconcile` after each scheduling pass. Each job counts as an arrival due until it
ends, so the world is not done while one waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shared.domain import CONSUME_PROVISIONING_REQUEST, PROVISIONING_CLASS_ANNOTATION
from sandbox.model.gang_spec import GangJobSpec, QuotaChangeSpec
from sandbox.world import kobjects
from sandbox.world.capacity_buffers import create_pod_template
from sandbox.world.metrics import distribution, percentile
from sandbox.world.pods import PodSim
from sandbox.world.provisioning_requests import create_provisioning_request, get_provisioning_request

if TYPE_CHECKING:
    from sandbox.world.kueue import KueueDouble
    from sandbox.world import World

GANG_LABEL = "scheduling.x-k8s.io/pod-group"
JOB_NAME_LABEL = "job-name"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
ASSUMPTIONS = (
    "A gang job's work starts when its last pod starts; every pod holds its node from its own start, so the time "
    "before the last one started is capacity held by a partial gang.",
    "A lost pod (killed with its node, evicted, deleted) ends the attempt: the job deletes its other pods and "
    "retries with a new ProvisioningRequest after the backoff, as a Job failed by its backoffLimit and requeued by "
    "Kueue would.",
    "Retries follow Kueue's ProvisioningRequest retry strategy (backoffLimitCount 3, backoffBaseSeconds 60, "
    "backoffMaxSeconds 1800 unless the scenario says otherwise) without its random jitter.",
)


@dataclass(frozen=True, slots=True)
class Wake:
    """A timed event with nothing to do but let `reconcile` run at that time (a submission, a backoff's end)."""

    job: str


@dataclass(slots=True)
class Attempt:
    """One ProvisioningRequest of a job and what came of it."""

    number: int
    request: str
    created: float
    provisioned: float | None = None  # the job admitted, its pods created (its spec's pods_after after Provisioned)
    provisioned_seen: float | None = None  # Provisioned=True first seen
    pods: list[PodSim] = field(default_factory=list)
    all_running: float | None = None  # when the last pod started: the work began
    ended: float | None = None
    outcome: str = ""  # succeeded | failed | booking-expired | pod-lost
    reason: str = ""


@dataclass(slots=True)
class JobState:
    spec: GangJobSpec
    attempts: list[Attempt] = field(default_factory=list)
    not_before: float = 0.0  # its submission, then the end of a backoff
    queued_at: float | None = None  # in its Kueue queue since (requeued after a failure: since then)
    quota_reserved: float | None = None  # Kueue: its quota reserved (the request is made then)
    done: float | None = None
    given_up: float | None = None
    held: dict[str, float] = field(default_factory=dict)  # pod name -> seconds it held its node before the gang ran
    held_gpus: dict[str, int] = field(default_factory=dict)  # pod name -> GPUs it requests

    @property
    def current(self) -> Attempt | None:
        attempt = self.attempts[-1] if self.attempts else None
        return attempt if attempt is not None and attempt.ended is None else None

    @property
    def ended(self) -> bool:
        return self.done is not None or self.given_up is not None


class GangJobs:
    """Every gang job of one world. See the module docstring."""

    def __init__(self, jobs: tuple[GangJobSpec, ...]) -> None:
        self.jobs: dict[str, JobState] = {job.key: JobState(job, not_before=job.at) for job in jobs}
        self.kueue: KueueDouble | None = None
        self.quota_changes: list[dict[str, Any]] = []


def schedule(world: World) -> None:
    """The scenario's gang jobs, Kueue double and quota changes on the world's clock; draws no ids and pushes no
    events for a scenario without them, so other worlds are unchanged."""
    from sandbox.world.kueue import KueueDouble  # the queue double builds on this module

    sections = world.scenario.gangs
    gangs = world._gang_jobs = GangJobs(sections.jobs)
    if sections.cluster_queues:
        gangs.kueue = KueueDouble(sections.cluster_queues)
    for job in sections.jobs:
        world._push(job.at, "gang_job", Wake(job.key))
        world._arrivals_due += 1  # until it ends (done or given up)
        world._owners.setdefault(job.key, "")  # a workload given pods outside `workloads`: the world can be done
    for change in sections.quota_changes:
        world._push(change.at, "gang_job", change)


def on_event(world: World, payload: Wake | QuotaChangeSpec) -> None:
    """A submission or a backoff's end (the reconcile after it acts), or a quota change (applied now)."""
    if isinstance(payload, QuotaChangeSpec):
        for name, limit in payload.quotas.items():
            world._quota_limits[name.lower()] = (name, limit)
        world._gang_jobs.quota_changes.append({"t": round(world._t, 3), "quotas": dict(payload.quotas)})


def reconcile(world: World) -> None:
    """After a scheduling pass: start attempts that are due, act on each open request's status, and follow each
    admitted attempt's pods to the gang's start, its end or its loss."""
    gangs: GangJobs | None = getattr(world, "_gang_jobs", None)
    if gangs is None or not gangs.jobs:
        return
    for state in gangs.jobs.values():
        if not state.ended and state.current is None and state.spec.queue is None and world._t >= state.not_before:
            start_attempt(world, state)
    if gangs.kueue is not None:
        gangs.kueue.reconcile(world, gangs)
    created = False
    for state in gangs.jobs.values():
        attempt = state.current
        if attempt is not None and attempt.provisioned is None:
            created |= _follow_request(world, state, attempt)
    if created:
        world._schedule()  # the new pods are tried at once, as kube-scheduler would
    for state in gangs.jobs.values():
        attempt = state.current
        if attempt is not None and attempt.provisioned is not None:
            _follow_pods(world, state, attempt)
    if gangs.kueue is not None and gangs.kueue.released:
        gangs.kueue.reconcile(world, gangs)  # quota given back by an attempt that ended: the next job's turn now


def start_attempt(world: World, state: JobState) -> Attempt:
    """Write the job's PodTemplate (its first attempt) and a new ProvisioningRequest `<job>-<n>`."""
    spec = state.spec
    number = len(state.attempts) + 1
    request = f"{spec.name}-{number}"
    if number == 1:
        pod = _pod_object(world, spec, name="", annotations={}, uid="")
        create_pod_template(world, spec.namespace, {
            "metadata": {"name": spec.name, "labels": {JOB_NAME_LABEL: spec.name}},
            "template": {"metadata": {"labels": pod["metadata"]["labels"]}, "spec": pod["spec"]}})
    create_provisioning_request(world, spec.namespace, {
        "metadata": {"name": request, "labels": {JOB_NAME_LABEL: spec.name}},
        "spec": {"provisioningClassName": spec.class_name,
                 "podSets": [{"podTemplateRef": {"name": spec.name}, "count": spec.pods}],
                 **({"parameters": dict(spec.parameters)} if spec.parameters else {})}})
    attempt = Attempt(number, request, world._t)
    state.attempts.append(attempt)
    return attempt


def _condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


def _follow_request(world: World, state: JobState, attempt: Attempt) -> bool:
    """A request not yet Provisioned: Provisioned admits the job (its pods are created: True), Failed or
    BookingExpired ends the attempt."""
    obj = get_provisioning_request(world, state.spec.namespace, attempt.request)
    failed = _condition(obj, "Failed") or _condition(obj, "BookingExpired")
    if obj is None:
        _end_attempt(world, state, attempt, "failed", "the request is gone")
        return False
    if failed is not None:
        outcome = "failed" if failed["type"] == "Failed" else "booking-expired"
        _end_attempt(world, state, attempt, outcome, str(failed.get("reason") or failed["type"]))
        return False
    if _condition(obj, "Provisioned") is None:
        return False
    if attempt.provisioned_seen is None:
        attempt.provisioned_seen = world._t
        if state.spec.pods_after > 0:
            world._push(world._t + state.spec.pods_after, "gang_job", Wake(state.spec.key))
    if world._t < attempt.provisioned_seen + state.spec.pods_after:
        return False
    attempt.provisioned = world._t
    for i in range(state.spec.pods):
        attempt.pods.append(_create_pod(world, state.spec, attempt, i))
    return True


def _follow_pods(world: World, state: JobState, attempt: Attempt) -> None:
    """An admitted attempt: a pod lost ends it; the last pod's start begins the work; every pod done ends the job;
    BookingExpired before any pod started ends it too (the booked room is gone)."""
    spec = state.spec
    if any(p.stopped is not None and p.finished is None or p.deleted is not None and p.finished is None
           for p in attempt.pods):
        _end_attempt(world, state, attempt, "pod-lost", "a pod of the gang stopped before the work ended")
        return
    if attempt.all_running is None:
        if all(p.started is not None for p in attempt.pods):
            attempt.all_running = max(p.started for p in attempt.pods if p.started is not None)
            for pod in attempt.pods:
                _note_held(state, pod, attempt.all_running)
                world._push(attempt.all_running + spec.duration, "complete", pod)
            return
        expired = _condition(get_provisioning_request(world, spec.namespace, attempt.request), "BookingExpired")
        if expired is not None and not any(p.started is not None for p in attempt.pods):
            _end_attempt(world, state, attempt, "booking-expired", expired.get("reason", "BookingExpired"))
        return
    if all(p.finished is not None for p in attempt.pods):
        attempt.ended = state.done = max(p.finished for p in attempt.pods if p.finished is not None)
        attempt.outcome = "succeeded"
        world._arrivals_due -= 1
        if world._gang_jobs.kueue is not None:
            world._gang_jobs.kueue.release(state)


def _note_held(state: JobState, pod: PodSim, until: float) -> None:
    if pod.started is not None:
        state.held[pod.name] = max(0.0, until - pod.started)
        state.held_gpus[pod.name] = _gpus(pod)


def _gpus(pod: PodSim) -> int:
    return sum(count for name, count in pod.requests.scalars if name in GPU_RESOURCES)


def _end_attempt(world: World, state: JobState, attempt: Attempt, outcome: str, reason: str) -> None:
    """The attempt failed: its pods go (those that started held their nodes for a gang that never ran), the
    queue's reservation is released, and the next attempt is due after the backoff, or the job is given up."""
    attempt.ended, attempt.outcome, attempt.reason = world._t, outcome, reason
    for pod in attempt.pods:
        if attempt.all_running is None:
            _note_held(state, pod, world._t)
        if world._live.get(pod.key) is pod:
            world._remove_pod(pod)
    failures = sum(1 for a in state.attempts if a.outcome != "succeeded")
    delay = state.spec.retry.delay(failures)
    if world._gang_jobs.kueue is not None:
        world._gang_jobs.kueue.release(state)
    if delay is None:
        state.given_up = world._t
        world._arrivals_due -= 1
        return
    state.not_before = world._t + delay
    if state.spec.queue is not None:
        state.queued_at = world._t  # requeued (Kueue's default requeuing timestamp: the eviction)
    world._push(state.not_before, "gang_job", Wake(state.spec.key))


def _pod_object(world: World, spec: GangJobSpec, *, name: str, annotations: dict[str, str], uid: str
                ) -> dict[str, Any]:
    labels = {GANG_LABEL: spec.name, JOB_NAME_LABEL: spec.name}
    if spec.queue is not None:
        labels[QUEUE_NAME_LABEL] = spec.queue
    return kobjects.pod_object(
        namespace=spec.namespace, name=name, uid=uid, created=world._ts(), requests=spec.requests, labels=labels,
        annotations=annotations, node_selector=spec.node_selector, tolerations=spec.tolerations, owner=None,
        restart_policy="Never")


def _create_pod(world: World, spec: GangJobSpec, attempt: Attempt, index: int) -> PodSim:
    annotations = {CONSUME_PROVISIONING_REQUEST: attempt.request, PROVISIONING_CLASS_ANNOTATION: spec.class_name}
    obj = _pod_object(world, spec, name=f"{attempt.request}-{index}", annotations=annotations, uid=world._uid())
    obj["metadata"]["ownerReferences"] = [kobjects.owner_reference("Job", spec.name, world._uid())]
    # No duration: the job completes its pods itself once the whole gang runs.
    return world._add_pod(obj, role="workload", workload=spec.key, owner_kind="Job", duration=None)


def report(world: World) -> dict[str, Any] | None:
    """Per job: submitted, quota reserved (Kueue), admitted (its last request Provisioned), all running, done or
    given up, its attempts; the gang waits (submission to all running); the pod- and GPU-seconds held by partial
    gangs; the quota changes applied; the assumptions. None for a world without gang jobs."""
    gangs: GangJobs | None = getattr(world, "_gang_jobs", None)
    if gangs is None or not gangs.jobs:
        return None
    jobs = {}
    waits = []
    for key, state in gangs.jobs.items():
        last = state.attempts[-1] if state.attempts else None
        running = last.all_running if last is not None else None
        if running is not None:
            waits.append(running - state.spec.at)
        jobs[key] = {
            "queue": state.spec.queue, "class": state.spec.class_name, "pods": state.spec.pods,
            "submitted": round(state.spec.at, 3),
            "quota_reserved": _t(state.quota_reserved),
            "admitted": _t(last.provisioned if last is not None else None),
            "all_running": _t(running), "done": _t(state.done), "given_up": _t(state.given_up),
            "outcome": "succeeded" if state.done is not None else "given-up" if state.given_up is not None
            else "running" if running is not None else "waiting",
            "attempts": [{"request": a.request, "created": round(a.created, 3), "provisioned": _t(a.provisioned),
                          "all_running": _t(a.all_running), "ended": _t(a.ended), "outcome": a.outcome,
                          "reason": a.reason} for a in state.attempts],
            "held_seconds": {pod: round(held, 3) for pod, held in sorted(state.held.items())},
        }
    held = gpu_held = 0.0
    for state in gangs.jobs.values():
        holding = dict(state.held)
        attempt = state.current
        if attempt is not None and attempt.provisioned is not None and attempt.all_running is None:
            for pod in attempt.pods:  # a gang still incomplete: its started pods hold their nodes until now
                if pod.started is not None:
                    holding[pod.name] = world._t - pod.started
                    state.held_gpus[pod.name] = _gpus(pod)
        held += sum(holding.values())
        gpu_held += sum(seconds * state.held_gpus.get(pod, 0) for pod, seconds in holding.items())
    return {
        "jobs": jobs,
        "completed": sum(1 for s in gangs.jobs.values() if s.done is not None),
        "given_up": sum(1 for s in gangs.jobs.values() if s.given_up is not None),
        "attempts": sum(len(s.attempts) for s in gangs.jobs.values()),
        "gang_wait_seconds": {**distribution(waits), "p95": round(percentile(sorted(waits), 0.95), 3)},
        "partial_gang_pod_seconds": round(held, 3),
        "partial_gang_gpu_seconds": round(gpu_held, 3),
        "quota_changes": list(gangs.quota_changes),
        "kueue": gangs.kueue.report(gangs) if gangs.kueue is not None else None,
        "assumptions": list(ASSUMPTIONS),
    }


def _t(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
