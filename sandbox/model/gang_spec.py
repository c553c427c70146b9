"""Gang jobs, a Kueue-like queue and quota changes on a scenario's timeline: the `gang_jobs`, `kueue` and
`quota_changes` sections.

    "gang_jobs": [
      {"name": "train", "namespace": "default", "at": "1m", "pods": 4, "duration": "20m", "class": "atomic",
       "requests": {"cpu": "20", "memory": "100Gi", "nvidia.com/gpu": 4},
       "node_selector": {"accelerator": "nvidia"}, "tolerations": [{"key": "sku", "value": "gpu"}],
       "retry": {"backoff_limit_count": 3, "backoff_base": "60s", "backoff_max": "30m"}}
    ],
    "kueue": {"cluster_queues": [
      {"name": "gpu", "nominal_quota": {"nvidia.com/gpu": 16}, "queueing_strategy": "StrictFIFO",
       "admission_check": {"class": "atomic", "parameters": {}, "retry": {"backoff_limit_count": 3}}}
    ]},
    "quota_changes": [{"at": "20m", "quotas": {"standardNCSv3Family": 96}}]

A gang job is a distributed job of `pods` identical pods that needs all of them (sandbox.world.gang_jobs plays
it): it asks for its capacity with a ProvisioningRequest of `class` (`check-capacity` or `atomic`, the two
cluster-autoscaler classes) and creates its pods when the request is Provisioned. A job naming a `queue` goes
through the Kueue double (sandbox.world.kueue) instead: the queue's admission check gives the class, the
parameters and the retry strategy, and its nominal quota must hold the job. `retry` is Kueue's
ProvisioningRequestConfig `retryStrategy` (kubernetes-sigs/kueue apis/kueue/v1beta1/provisioningrequestconfig_types.go:
backoffLimitCount 3, backoffBaseSeconds 60, backoffMaxSeconds 1800 when unset). `quota_changes` sets regional
vCPU quotas (as the scenario's `quotas` names them) from a time on, as a support request raising one would.
Pure values: parsed here, applied on the world's clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from shared.domain import ATOMIC_SCALE_UP_CLASS, CHECK_CAPACITY_CLASS, EMPTY_MAP, Toleration
from sandbox.model.resources import Amounts
from sandbox.model.spec_fields import FieldError, choice, duration, listed, obj, text, typename, whole
from sandbox.model.units import parse_bytes, parse_count, parse_cpu_milli

GANG_JOBS_FIELD = "gang_jobs"
KUEUE_FIELD = "kueue"
QUOTA_CHANGES_FIELD = "quota_changes"
TOP_LEVEL_FIELDS = frozenset({GANG_JOBS_FIELD, KUEUE_FIELD, QUOTA_CHANGES_FIELD})
# The scenario's short names for cluster-autoscaler's two ProvisioningRequest classes.
CLASSES: Mapping[str, str] = MappingProxyType({"check-capacity": CHECK_CAPACITY_CLASS, "atomic": ATOMIC_SCALE_UP_CLASS})
QUEUEING_STRATEGIES = ("BestEffortFIFO", "StrictFIFO")  # Kueue's ClusterQueue queueingStrategy; BestEffortFIFO default
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$")  # room for the request's "-<attempt>" and pods' "-<i>"
_EXTENDED = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_JOB = frozenset({"name", "namespace", "at", "pods", "requests", "duration", "class", "queue", "node_selector",
                  "tolerations", "retry", "parameters", "pods_after"})
_RETRY = frozenset({"backoff_limit_count", "backoff_base", "backoff_max"})


@dataclass(frozen=True, slots=True)
class RetrySpec:
    """Kueue's ProvisioningRequest retry strategy: after the n-th failed attempt (n <= backoff_limit_count) the next
    comes backoff_base * 2^(n-1) later, at most backoff_max; beyond the count the job is given up (deactivated)."""

    backoff_limit_count: int = 3
    backoff_base: float = 60.0
    backoff_max: float = 1800.0

    def delay(self, failures: int) -> float | None:
        """Seconds before the attempt after `failures` failed ones; None: no more attempts. Kueue adds a random
        jitter; the sandbox does not, so runs stay comparable."""
        if failures > self.backoff_limit_count:
            return None
        return min(self.backoff_base * 2 ** (failures - 1), self.backoff_max)


@dataclass(frozen=True, slots=True)
class GangJobSpec:
    """A job of `pods` identical pods that runs only when all of them run (sandbox.world.gang_jobs)."""

    name: str
    namespace: str
    at: float  # sim seconds: when it is submitted
    pods: int
    requests: Amounts  # one pod's, pods=1 included
    duration: float  # seconds of work once every pod runs
    class_name: str = ATOMIC_SCALE_UP_CLASS  # without a queue; a queued job's comes from its queue's admission check
    queue: str | None = None  # a cluster queue of `kueue`
    node_selector: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    tolerations: tuple[Toleration, ...] = ()
    retry: RetrySpec = RetrySpec()
    parameters: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)  # the request's spec.parameters
    # Seconds from seeing Provisioned=True to creating the pods: a framework slow to start its workers (longer
    # than the booking: a check-capacity booking left to expire).
    pods_after: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class AdmissionCheckSpec:
    """A ClusterQueue's admission check of the ProvisioningRequest kind (Kueue's ProvisioningRequestConfig)."""

    class_name: str
    parameters: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    retry: RetrySpec = RetrySpec()


@dataclass(frozen=True, slots=True)
class ClusterQueueSpec:
    """A Kueue ClusterQueue: one flavour's nominal quota (resource -> amount; cpu in millicores, memory in bytes,
    others as counts; resources it does not name are not limited) and its admission check."""

    name: str
    nominal_quota: Mapping[str, int]
    admission_check: AdmissionCheckSpec
    queueing_strategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"


@dataclass(frozen=True, slots=True)
class QuotaChangeSpec:
    """From `at` on, each named regional quota has the given limit (vCPUs)."""

    at: float
    quotas: Mapping[str, int]


def _name(value: Any, path: str) -> str:
    name = text(value, path)
    if not _NAME.match(name):
        raise FieldError(path, f"{name!r} is not a job name (lowercase letters, digits and '-', at most 52)")
    return name


def _strings(value: Any, path: str) -> Mapping[str, str]:
    if not isinstance(value, dict):
        raise FieldError(path, f"must be an object of strings, got {typename(value)}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise FieldError(f"{path}.{key}", f"must be a string, got {typename(item)}")
    return MappingProxyType(dict(value))


def _quantity(parse: Any, value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise FieldError(path, f"must be a quantity such as '500m' or '2Gi', got {typename(value)}")
    try:
        amount = int(parse(value))
    except ValueError as exc:
        raise FieldError(path, str(exc)) from None
    if amount < 0:
        raise FieldError(path, f"must not be negative, got {value!r}")
    return amount


def _resource(name: str, value: Any, path: str) -> int:
    if name == "cpu":
        return _quantity(parse_cpu_milli, value, path)
    if name == "memory":
        return _quantity(parse_bytes, value, path)
    if not _EXTENDED.match(name):
        raise FieldError(path, "unknown resource: use cpu, memory or an extended resource such as nvidia.com/gpu")
    return _quantity(parse_count, value, path)


def _requests(value: Any, path: str) -> Amounts:
    fields = obj(value, path, set(value) if isinstance(value, dict) else (), {"cpu", "memory"})
    amounts = {name: _resource(name, item, f"{path}.{name}") for name, item in fields.items()}
    if amounts["cpu"] <= 0 or amounts["memory"] <= 0:
        raise FieldError(f"{path}.{'cpu' if amounts['cpu'] <= 0 else 'memory'}", "must be more than zero")
    scalars = {name: amount for name, amount in amounts.items() if name not in ("cpu", "memory") and amount}
    return Amounts.of(amounts["cpu"], amounts["memory"], 1, scalars)


def _toleration(value: Any, path: str) -> Toleration:
    fields = obj(value, path, {"key", "operator", "value", "effect"})
    for key in fields:
        if not isinstance(fields[key], str):
            raise FieldError(f"{path}.{key}", f"must be a string, got {typename(fields[key])}")
    operator = choice(fields.get("operator", "Equal"), f"{path}.operator", ("Equal", "Exists"), "an operator")
    effect = fields.get("effect", "")
    if effect and effect not in _EFFECTS:
        raise FieldError(f"{path}.effect", f"must be empty or one of {', '.join(_EFFECTS)}, got {effect!r}")
    key, value_ = fields.get("key", ""), fields.get("value", "")
    if operator == "Equal" and not key:  # the API server's rules
        raise FieldError(f"{path}.operator", "must be Exists when key is empty")
    if operator == "Exists" and value_:
        raise FieldError(f"{path}.value", "must be empty when operator is Exists")
    return Toleration(key, operator, value_, effect)


def _retry(value: Any, path: str) -> RetrySpec:
    fields = obj(value, path, _RETRY)
    defaults = RetrySpec()
    base = duration(fields.get("backoff_base", defaults.backoff_base), f"{path}.backoff_base")
    most = duration(fields.get("backoff_max", defaults.backoff_max), f"{path}.backoff_max")
    if base <= 0:
        raise FieldError(f"{path}.backoff_base", "must be longer than zero")
    if most < base:
        raise FieldError(f"{path}.backoff_max", "must not be shorter than backoff_base")
    count = whole(fields.get("backoff_limit_count", defaults.backoff_limit_count), f"{path}.backoff_limit_count")
    return RetrySpec(count, base, most)


def _class(value: Any, path: str) -> str:
    return CLASSES[choice(value, path, tuple(CLASSES), "a ProvisioningRequest class")]


def _job(value: Any, path: str, namespaces: Sequence[str], queues: Mapping[str, ClusterQueueSpec]) -> GangJobSpec:
    fields = obj(value, path, _JOB, {"name", "at", "pods", "requests", "duration"})
    namespace = _name(fields.get("namespace", "default"), f"{path}.namespace")
    if namespace != "default" and namespace not in namespaces:
        raise FieldError(f"{path}.namespace", f"{namespace!r} is not in the scenario's namespaces")
    work = duration(fields["duration"], f"{path}.duration")
    if work <= 0:
        raise FieldError(f"{path}.duration", "must be longer than zero")
    queue = fields.get("queue")
    if queue is not None:
        queue = text(queue, f"{path}.queue")
        if queue not in queues:
            raise FieldError(f"{path}.queue", f"{queue!r} is not a cluster queue of $.{KUEUE_FIELD}")
        for owned in ("class", "retry", "parameters"):  # Kueue takes them from the queue's admission check
            if owned in fields:
                raise FieldError(f"{path}.{owned}", "a queued job's comes from its queue's admission check")
        check = queues[queue].admission_check
        class_name, retry, parameters = check.class_name, check.retry, check.parameters
    else:
        class_name = _class(fields.get("class", "atomic"), f"{path}.class")
        retry = _retry(fields.get("retry", {}), f"{path}.retry")
        parameters = _strings(fields.get("parameters", {}), f"{path}.parameters")
    return GangJobSpec(
        name=_name(fields["name"], f"{path}.name"),
        namespace=namespace,
        at=duration(fields["at"], f"{path}.at"),
        pods=whole(fields["pods"], f"{path}.pods", 1),
        requests=_requests(fields["requests"], f"{path}.requests"),
        duration=work,
        class_name=class_name,
        queue=queue,
        node_selector=_strings(fields.get("node_selector", {}), f"{path}.node_selector"),
        tolerations=tuple(_toleration(item, f"{path}.tolerations[{i}]")
                          for i, item in enumerate(listed(fields.get("tolerations", []), f"{path}.tolerations"))),
        retry=retry,
        parameters=parameters,
        pods_after=duration(fields.get("pods_after", 0), f"{path}.pods_after"),
    )


def _cluster_queue(value: Any, path: str) -> ClusterQueueSpec:
    fields = obj(value, path, {"name", "nominal_quota", "admission_check", "queueing_strategy"},
                 {"name", "nominal_quota", "admission_check"})
    quota_fields = obj(fields["nominal_quota"], f"{path}.nominal_quota", set(fields["nominal_quota"])
                       if isinstance(fields["nominal_quota"], dict) else ())
    quota = {name: _resource(name, item, f"{path}.nominal_quota.{name}") for name, item in quota_fields.items()}
    check = obj(fields["admission_check"], f"{path}.admission_check", {"class", "parameters", "retry"}, {"class"})
    strategy = choice(fields.get("queueing_strategy", "BestEffortFIFO"), f"{path}.queueing_strategy",
                      QUEUEING_STRATEGIES, "a queueing strategy")
    return ClusterQueueSpec(
        name=_name(fields["name"], f"{path}.name"),
        nominal_quota=MappingProxyType(quota),
        admission_check=AdmissionCheckSpec(
            _class(check["class"], f"{path}.admission_check.class"),
            _strings(check.get("parameters", {}), f"{path}.admission_check.parameters"),
            _retry(check.get("retry", {}), f"{path}.admission_check.retry"),
        ),
        queueing_strategy=strategy,  # type: ignore[arg-type]
    )


def _quota_change(value: Any, path: str) -> QuotaChangeSpec:
    fields = obj(value, path, {"at", "quotas"}, {"at", "quotas"})
    quotas = fields["quotas"]
    if not isinstance(quotas, dict) or not quotas:
        raise FieldError(f"{path}.quotas", f"must be a non-empty object of quota names to vCPUs, got {typename(quotas)}")
    limits = {text(name, f"{path}.quotas"): whole(limit, f"{path}.quotas.{name}") for name, limit in quotas.items()}
    return QuotaChangeSpec(duration(fields["at"], f"{path}.at"), MappingProxyType(limits))


@dataclass(frozen=True, slots=True)
class GangSections:
    """The three sections of one scenario (the Scenario's `gangs`); empty: a world without gang jobs."""

    jobs: tuple[GangJobSpec, ...] = ()
    cluster_queues: tuple[ClusterQueueSpec, ...] = ()
    quota_changes: tuple[QuotaChangeSpec, ...] = ()


def parse_gang_sections(top: Mapping[str, Any], namespaces: Sequence[str], duration_s: float) -> GangSections:
    """The three sections: `gang_jobs` (document order, names unique per namespace, each submitted within the run),
    the `kueue` cluster queues and `quota_changes` (each within the run)."""
    queues: dict[str, ClusterQueueSpec] = {}
    if KUEUE_FIELD in top:
        kueue = obj(top[KUEUE_FIELD], f"$.{KUEUE_FIELD}", {"cluster_queues"}, {"cluster_queues"})
        items = listed(kueue["cluster_queues"], f"$.{KUEUE_FIELD}.cluster_queues")
        for i, item in enumerate(items):
            queue = _cluster_queue(item, f"$.{KUEUE_FIELD}.cluster_queues[{i}]")
            if queue.name in queues:
                raise FieldError(f"$.{KUEUE_FIELD}.cluster_queues[{i}].name", f"{queue.name!r} appears twice")
            queues[queue.name] = queue
    jobs: list[GangJobSpec] = []
    for i, item in enumerate(listed(top.get(GANG_JOBS_FIELD, []), f"$.{GANG_JOBS_FIELD}")):
        path = f"$.{GANG_JOBS_FIELD}[{i}]"
        job = _job(item, path, namespaces, queues)
        if any(other.key == job.key for other in jobs):
            raise FieldError(f"{path}.name", f"gang job {job.key} appears twice")
        if job.at >= duration_s:
            raise FieldError(f"{path}.at", f"{job.at:g}s is not within the scenario's duration ({duration_s:g}s)")
        jobs.append(job)
    changes = tuple(_quota_change(item, f"$.{QUOTA_CHANGES_FIELD}[{i}]")
                    for i, item in enumerate(listed(top.get(QUOTA_CHANGES_FIELD, []), f"$.{QUOTA_CHANGES_FIELD}")))
    for i, change in enumerate(changes):
        if change.at >= duration_s:
            raise FieldError(f"$.{QUOTA_CHANGES_FIELD}[{i}].at",
                             f"{change.at:g}s is not within the scenario's duration ({duration_s:g}s)")
    return GangSections(tuple(jobs), tuple(queues.values()), changes)
