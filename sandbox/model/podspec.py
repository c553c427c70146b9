"""What the scheduler needs to know about a pod, read from its API object (and validated on the way).

One parser serves both doors into the world: pods a scenario creates (the loader
validates a workload's `affinity`, `topology_spread_constraints`, ... with these
functions, so a typo is reported with its JSON path before anything runs) and
pods created through the API (a bad spec is a 422, as from the API server). The
scheduler then only ever looks at the API object, so what the autoscaler reads
is exactly what the sandbox schedules.

Semantics follow the Kubernetes API reference: node selector terms are ORed and
their expressions ANDed; an empty term matches nothing (an empty preferred term so adds
no weight); preferred node terms weigh 1 to 100; a null label selector in
a pod affinity term matches nothing while an empty one matches everything; an
affinity term applies to the pod's own namespace unless `namespaces` or
`namespaceSelector` say otherwise; requests are the larger of the containers'
sum and each init container's (restartable "sidecar" init containers add up),
plus the pod overhead, with limits standing in for missing requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from shared.domain import EMPTY_MAP, Toleration
from sandbox.model.resources import Amounts, is_scalar_name, parse_scalar
from sandbox.model.selectors import Requirement
from sandbox.model.units import parse_bytes, parse_cpu_milli

NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_LABEL_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_PROTOCOLS = ("TCP", "UDP", "SCTP")
_WILDCARD_IP = "0.0.0.0"


class SpecError(ValueError):
    """An invalid pod spec field: `path` names it (JSON-path style), `problem` says what is wrong."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


# ---------------------------------------------------------------------------- selectors and terms


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str  # In NotIn Exists DoesNotExist Gt Lt
    values: tuple[str, ...] = ()

    def matches(self, value: str | None) -> bool:
        """`value` is the node's label (or field) value, None when absent."""
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        # Gt / Lt compare integers; an absent or non-integer label never matches.
        try:
            number = int(value) if value is not None else None
        except ValueError:
            return False
        if number is None:
            return False
        return number > int(self.values[0]) if op == "Gt" else number < int(self.values[0])


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    expressions: tuple[NodeSelectorRequirement, ...] = ()
    fields: tuple[NodeSelectorRequirement, ...] = ()  # only metadata.name, as in Kubernetes

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False  # an empty term selects no node
        return all(r.matches(labels.get(r.key)) for r in self.expressions) and all(
            r.matches(node_name) for r in self.fields
        )


def node_terms_match(terms: tuple[NodeSelectorTerm, ...] | None, node_name: str, labels: Mapping[str, str]) -> bool:
    """Required node affinity: None means no constraint; otherwise any term may match."""
    return terms is None or any(term.matches(node_name, labels) for term in terms)


LabelSelector = tuple[Requirement, ...]  # all must hold; () matches every object


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """A null selector (None) matches nothing, an empty one everything."""
    return selector is not None and all(r.matches(labels) for r in selector)


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    topology_key: str
    selector: LabelSelector | None
    namespaces: frozenset[str] = frozenset()
    namespace_selector: LabelSelector | None = None

    def covers_namespace(self, namespace: str, owner_namespace: str,
                         namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
        """Whether pods in `namespace` are subject to the term of a pod living in `owner_namespace`."""
        if not self.namespaces and self.namespace_selector is None:
            return namespace == owner_namespace
        if namespace in self.namespaces:
            return True
        return self.namespace_selector is not None and selector_matches(
            self.namespace_selector, namespace_labels.get(namespace, EMPTY_MAP)
        )

    def matches(self, namespace: str, labels: Mapping[str, str], owner_namespace: str,
                namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
        return self.covers_namespace(namespace, owner_namespace, namespace_labels) and selector_matches(
            self.selector, labels
        )


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A `whenUnsatisfiable: DoNotSchedule` topology spread constraint (ScheduleAnyway only scores)."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None
    min_domains: int = 1
    honor_node_affinity: bool = True  # nodeAffinityPolicy, default Honor
    honor_node_taints: bool = False  # nodeTaintsPolicy, default Ignore


@dataclass(frozen=True, slots=True)
class HostPort:
    port: int
    protocol: str = "TCP"
    host_ip: str = _WILDCARD_IP

    def conflicts(self, other: HostPort) -> bool:
        """kube-scheduler's NodePorts: same port and protocol, and the same IP or either one the wildcard."""
        return (
            self.port == other.port
            and self.protocol == other.protocol
            and (self.host_ip == other.host_ip or _WILDCARD_IP in (self.host_ip, other.host_ip))
        )


@dataclass(frozen=True, slots=True)
class PodNeeds:
    """Everything scheduling-relevant about one pod."""

    requests: Amounts  # pods=1 for a pod
    namespace: str = "default"
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    node_selector: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    node_affinity: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[PodAffinityTerm, ...] = ()
    anti_affinity: tuple[PodAffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    priority: int = 0
    # Preferred (soft) node affinity as (weight 1..100, term): scored by NodeAffinity, never filtered on.
    preferred_node_affinity: tuple[tuple[int, NodeSelectorTerm], ...] = ()

    @property
    def needs_pod_view(self) -> bool:
        """Whether placing the pod depends on where other pods are (affinity, anti-affinity, spreading)."""
        return bool(self.affinity or self.anti_affinity or self.spread)

    def matches_node_affinity(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """nodeSelector and required node affinity (kube-scheduler's NodeAffinity filter)."""
        for key, value in self.node_selector.items():
            if labels.get(key) != value:
                return False
        return node_terms_match(self.node_affinity, node_name, labels)


# ---------------------------------------------------------------------------- readers


def _obj(value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(path, "must be an object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise SpecError(f"{path}.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError(path, "must be a list")
    return value


def _string(value: Any, path: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise SpecError(path, "must be a non-empty string")
    return value


def _strings(value: Any, path: str) -> tuple[str, ...]:
    items = _list(value, path)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise SpecError(f"{path}[{i}]", "must be a string")
    return tuple(items)


def _int(value: Any, path: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(path, "must be a whole number")
    if value < minimum:
        raise SpecError(path, f"must be at least {minimum}")
    return value


def parse_label_selector(value: Any, path: str) -> LabelSelector | None:
    """A metav1.LabelSelector: matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist)."""
    if value is None:
        return None
    obj = _obj(value, path, {"matchLabels", "matchExpressions"})
    requirements: list[Requirement] = []
    match_labels = obj.get("matchLabels") or {}
    if not isinstance(match_labels, dict) or not all(isinstance(v, str) for v in match_labels.values()):
        raise SpecError(f"{path}.matchLabels", "must be an object of strings")
    requirements += [Requirement(k, "=", (v,)) for k, v in sorted(match_labels.items())]
    for i, raw in enumerate(_list(obj.get("matchExpressions"), f"{path}.matchExpressions")):
        where = f"{path}.matchExpressions[{i}]"
        expr = _obj(raw, where, {"key", "operator", "values"})
        operator = expr.get("operator")
        if operator not in LABEL_SELECTOR_OPERATORS:
            raise SpecError(f"{where}.operator", f"must be one of {', '.join(LABEL_SELECTOR_OPERATORS)}, got {operator!r}")
        values = _strings(expr.get("values"), f"{where}.values")
        if operator in ("In", "NotIn") and not values:
            raise SpecError(f"{where}.values", f"must be non-empty for {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            raise SpecError(f"{where}.values", f"must be empty for {operator}")
        requirements.append(Requirement(_string(expr.get("key"), f"{where}.key"), _LABEL_OPS[operator], values))
    return tuple(requirements)


def _node_requirement(value: Any, path: str, *, field_term: bool) -> NodeSelectorRequirement:
    expr = _obj(value, path, {"key", "operator", "values"})
    key = _string(expr.get("key"), f"{path}.key")
    operator = expr.get("operator")
    allowed = ("In", "NotIn") if field_term else NODE_SELECTOR_OPERATORS
    if operator not in allowed:
        raise SpecError(f"{path}.operator", f"must be one of {', '.join(allowed)}, got {operator!r}")
    if field_term and key != "metadata.name":
        raise SpecError(f"{path}.key", f"only metadata.name is supported in matchFields, got {key!r}")
    values = _strings(expr.get("values"), f"{path}.values")
    if operator in ("In", "NotIn") and not values:
        raise SpecError(f"{path}.values", f"must be non-empty for {operator}")
    if operator in ("Exists", "DoesNotExist") and values:
        raise SpecError(f"{path}.values", f"must be empty for {operator}")
    if operator in ("Gt", "Lt"):
        if len(values) != 1:
            raise SpecError(f"{path}.values", f"must hold exactly one value for {operator}")
        try:
            int(values[0])
        except ValueError:
            raise SpecError(f"{path}.values[0]", f"must be an integer for {operator}, got {values[0]!r}") from None
    return NodeSelectorRequirement(key, operator, values)


def parse_node_selector_term(value: Any, path: str) -> NodeSelectorTerm:
    obj = _obj(value, path, {"matchExpressions", "matchFields"})
    return NodeSelectorTerm(
        tuple(
            _node_requirement(e, f"{path}.matchExpressions[{i}]", field_term=False)
            for i, e in enumerate(_list(obj.get("matchExpressions"), f"{path}.matchExpressions"))
        ),
        tuple(
            _node_requirement(e, f"{path}.matchFields[{i}]", field_term=True)
            for i, e in enumerate(_list(obj.get("matchFields"), f"{path}.matchFields"))
        ),
    )


def _pod_affinity_term(value: Any, path: str, own_labels: Mapping[str, str]) -> PodAffinityTerm:
    obj = _obj(
        value, path,
        {"labelSelector", "namespaces", "namespaceSelector", "topologyKey", "matchLabelKeys", "mismatchLabelKeys"},
    )
    selector = parse_label_selector(obj.get("labelSelector"), f"{path}.labelSelector")
    extra = _label_keys(obj, "matchLabelKeys", path, own_labels, "in")
    extra += _label_keys(obj, "mismatchLabelKeys", path, own_labels, "notin")
    if extra and selector is None:
        raise SpecError(f"{path}.labelSelector", "is required with matchLabelKeys or mismatchLabelKeys")
    return PodAffinityTerm(
        topology_key=_string(obj.get("topologyKey"), f"{path}.topologyKey"),
        selector=None if selector is None else selector + extra,
        namespaces=frozenset(_strings(obj.get("namespaces"), f"{path}.namespaces")),
        namespace_selector=parse_label_selector(obj.get("namespaceSelector"), f"{path}.namespaceSelector"),
    )


def _label_keys(obj: Mapping[str, Any], name: str, path: str, own_labels: Mapping[str, str], op: str) -> LabelSelector:
    """matchLabelKeys / mismatchLabelKeys: the pod's own values of these labels join the selector."""
    keys = _strings(obj.get(name), f"{path}.{name}")
    return tuple(Requirement(k, op, (own_labels[k],)) for k in keys if k in own_labels)


def _weighted(value: Any, path: str, inner: str) -> tuple[int, Any]:
    """A weighted term: its weight (1..100, as the API server validates it) and the raw inner term."""
    obj = _obj(value, path, {"weight", inner})
    weight = _int(obj.get("weight"), f"{path}.weight", 1)
    if weight > 100:
        raise SpecError(f"{path}.weight", "must be at most 100")
    if inner not in obj:
        raise SpecError(f"{path}.{inner}", "required field is missing")
    return weight, obj[inner]


@dataclass(frozen=True, slots=True)
class Affinity:
    node: tuple[NodeSelectorTerm, ...] | None = None
    pod: tuple[PodAffinityTerm, ...] = ()
    pod_anti: tuple[PodAffinityTerm, ...] = ()
    node_preferred: tuple[tuple[int, NodeSelectorTerm], ...] = ()


def parse_affinity(value: Any, path: str, own_labels: Mapping[str, str] = EMPTY_MAP) -> Affinity:
    """spec.affinity. Required terms and preferred node terms are kept (the latter for scoring); preferred
    pod (anti-)affinity terms are validated only, as the sandbox does not score them."""
    if value is None:
        return Affinity()
    obj = _obj(value, path, {"nodeAffinity", "podAffinity", "podAntiAffinity"})
    node_terms: tuple[NodeSelectorTerm, ...] | None = None
    preferred: list[tuple[int, NodeSelectorTerm]] = []
    if obj.get("nodeAffinity") is not None:
        where = f"{path}.nodeAffinity"
        node = _obj(
            obj["nodeAffinity"], where,
            {"requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"},
        )
        required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
        if required is not None:
            req_path = f"{where}.requiredDuringSchedulingIgnoredDuringExecution"
            terms = _list(_obj(required, req_path, {"nodeSelectorTerms"}).get("nodeSelectorTerms"),
                          f"{req_path}.nodeSelectorTerms")
            if not terms:
                raise SpecError(f"{req_path}.nodeSelectorTerms", "must have at least one node selector term")
            node_terms = tuple(
                parse_node_selector_term(t, f"{req_path}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms)
            )
        pref_path = f"{where}.preferredDuringSchedulingIgnoredDuringExecution"
        for i, item in enumerate(_list(node.get("preferredDuringSchedulingIgnoredDuringExecution"), pref_path)):
            weight, preference = _weighted(item, f"{pref_path}[{i}]", "preference")
            preferred.append((weight, parse_node_selector_term(preference, f"{pref_path}[{i}].preference")))
    pod_terms: list[tuple[PodAffinityTerm, ...]] = []
    for kind in ("podAffinity", "podAntiAffinity"):
        where = f"{path}.{kind}"
        section = _obj(
            obj.get(kind) or {}, where,
            {"requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"},
        )
        req_path = f"{where}.requiredDuringSchedulingIgnoredDuringExecution"
        pod_terms.append(tuple(
            _pod_affinity_term(t, f"{req_path}[{i}]", own_labels)
            for i, t in enumerate(_list(section.get("requiredDuringSchedulingIgnoredDuringExecution"), req_path))
        ))
        pref_path = f"{where}.preferredDuringSchedulingIgnoredDuringExecution"
        for i, item in enumerate(_list(section.get("preferredDuringSchedulingIgnoredDuringExecution"), pref_path)):
            _pod_affinity_term(_weighted(item, f"{pref_path}[{i}]", "podAffinityTerm")[1],
                               f"{pref_path}[{i}].podAffinityTerm", own_labels)
    return Affinity(node_terms, pod_terms[0], pod_terms[1], tuple(preferred))


def parse_spread_constraints(value: Any, path: str, own_labels: Mapping[str, str] = EMPTY_MAP) -> tuple[SpreadConstraint, ...]:
    """spec.topologySpreadConstraints; only DoNotSchedule constraints are returned (they filter)."""
    constraints = []
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(_list(value, path)):
        where = f"{path}[{i}]"
        obj = _obj(
            raw, where,
            {"maxSkew", "topologyKey", "whenUnsatisfiable", "labelSelector", "minDomains", "nodeAffinityPolicy",
             "nodeTaintsPolicy", "matchLabelKeys"},
        )
        max_skew = _int(obj.get("maxSkew"), f"{where}.maxSkew", 1)
        key = _string(obj.get("topologyKey"), f"{where}.topologyKey")
        when = obj.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise SpecError(f"{where}.whenUnsatisfiable", f"must be DoNotSchedule or ScheduleAnyway, got {when!r}")
        if (key, when) in seen:  # the API server refuses duplicates of the pair
            raise SpecError(f"{where}", f"duplicate constraint on {key} with {when}")
        seen.add((key, when))
        min_domains = 1
        if obj.get("minDomains") is not None:
            min_domains = _int(obj["minDomains"], f"{where}.minDomains", 1)
            if when != "DoNotSchedule":
                raise SpecError(f"{where}.minDomains", "can only be set with whenUnsatisfiable DoNotSchedule")
        policies = {}
        for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
            policy = obj.get(name) or default
            if policy not in ("Honor", "Ignore"):
                raise SpecError(f"{where}.{name}", f"must be Honor or Ignore, got {policy!r}")
            policies[name] = policy == "Honor"
        selector = parse_label_selector(obj.get("labelSelector"), f"{where}.labelSelector")
        extra = _label_keys(obj, "matchLabelKeys", where, own_labels, "in")
        if extra:
            selector = (selector or ()) + extra
        if when == "DoNotSchedule":
            constraints.append(SpreadConstraint(
                max_skew, key, selector, min_domains, policies["nodeAffinityPolicy"], policies["nodeTaintsPolicy"]
            ))
    return tuple(constraints)


def parse_toleration(value: Any, path: str) -> Toleration:
    obj = _obj(value, path, {"key", "operator", "value", "effect", "tolerationSeconds"})
    operator = obj.get("operator") or "Equal"
    if operator not in ("Equal", "Exists"):
        raise SpecError(f"{path}.operator", f"must be Equal or Exists, got {operator!r}")
    key = _string(obj.get("key"), f"{path}.key", required=False)
    value_ = _string(obj.get("value"), f"{path}.value", required=False)
    if operator == "Exists" and value_:
        raise SpecError(f"{path}.value", "must be empty when operator is Exists")
    if operator == "Equal" and not key:
        raise SpecError(f"{path}.operator", "must be Exists when key is empty")
    effect = _string(obj.get("effect"), f"{path}.effect", required=False)
    if effect and effect not in _EFFECTS:
        raise SpecError(f"{path}.effect", f"must be empty or one of {', '.join(_EFFECTS)}, got {effect!r}")
    return Toleration(key, operator, value_, effect)


def parse_host_ports(containers: list[Any], path: str) -> tuple[HostPort, ...]:
    ports = []
    for i, container in enumerate(containers):
        if not isinstance(container, dict):
            continue
        for j, raw in enumerate(_list(container.get("ports"), f"{path}[{i}].ports")):
            where = f"{path}[{i}].ports[{j}]"
            if not isinstance(raw, dict):
                raise SpecError(where, "must be an object")
            if not raw.get("hostPort"):
                continue
            port = _int(raw["hostPort"], f"{where}.hostPort", 1)
            if port > 65535:
                raise SpecError(f"{where}.hostPort", "must be at most 65535")
            protocol = raw.get("protocol") or "TCP"
            if protocol not in _PROTOCOLS:
                raise SpecError(f"{where}.protocol", f"must be one of {', '.join(_PROTOCOLS)}, got {protocol!r}")
            ports.append(HostPort(port, protocol, raw.get("hostIP") or _WILDCARD_IP))
    return tuple(ports)


# ---------------------------------------------------------------------------- requests


def _container_requests(container: Mapping[str, Any], path: str) -> dict[str, int]:
    """One container's requests in base units; a limit stands in for a missing request (API defaulting)."""
    resources = container.get("resources") or {}
    if not isinstance(resources, dict):
        raise SpecError(f"{path}.resources", "must be an object")
    for part in ("limits", "requests"):
        if not isinstance(resources.get(part) or {}, dict):
            raise SpecError(f"{path}.resources.{part}", "must be an object of quantities")
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    amounts: dict[str, int] = {}
    for name, raw in merged.items():
        try:
            if name == "cpu":
                amounts[name] = parse_cpu_milli(raw)
            elif name == "memory":
                amounts[name] = parse_bytes(raw)
            elif is_scalar_name(name):
                amounts[name] = parse_scalar(name, raw)
        except ValueError as exc:
            raise SpecError(f"{path}.resources.requests.{name}", str(exc)) from None
    return amounts


def _add(total: dict[str, int], more: Mapping[str, int]) -> dict[str, int]:
    result = dict(total)
    for name, value in more.items():
        result[name] = result.get(name, 0) + value
    return result


def _max(left: Mapping[str, int], right: Mapping[str, int]) -> dict[str, int]:
    return {name: max(left.get(name, 0), right.get(name, 0)) for name in {*left, *right}}


def spec_amounts(spec: Mapping[str, Any], path: str = "spec") -> Amounts:
    """kube's PodRequests: max(sum of containers + sidecars, each init container on top of earlier sidecars),
    pod-level requests replacing that for cpu, memory and hugepages, plus spec.overhead, plus one pod slot."""
    total: dict[str, int] = {}
    for i, container in enumerate(_list(spec.get("containers"), f"{path}.containers")):
        if not isinstance(container, dict):
            raise SpecError(f"{path}.containers[{i}]", "must be an object")
        total = _add(total, _container_requests(container, f"{path}.containers[{i}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(_list(spec.get("initContainers"), f"{path}.initContainers")):
        if not isinstance(container, dict):
            raise SpecError(f"{path}.initContainers[{i}]", "must be an object")
        requests = _container_requests(container, f"{path}.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":  # a sidecar keeps running next to the app containers
            sidecars = _add(sidecars, requests)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _add(sidecars, requests))
    total = _max(_add(total, sidecars), init_peak)
    # Pod-level requests (cpu, memory, hugepages-*; a limit standing in for a missing request) replace the aggregate.
    pod_level = spec.get("resources") or {}
    if pod_level:
        if not isinstance(pod_level, dict):
            raise SpecError(f"{path}.resources", "must be an object")
        supported: dict[str, dict[str, Any]] = {}
        for kind in ("limits", "requests"):
            listed = pod_level.get(kind) or {}
            if not isinstance(listed, dict):
                raise SpecError(f"{path}.resources.{kind}", "must be an object of quantities")
            supported[kind] = {k: v for k, v in listed.items() if k in ("cpu", "memory") or k.startswith("hugepages-")}
        total.update(_container_requests({"resources": supported}, f"{path}.resources"))
    overhead = spec.get("overhead") or {}
    if overhead:
        total = _add(total, _container_requests({"resources": {"requests": overhead}}, f"{path}.overhead"))
    scalars = {k: v for k, v in total.items() if k not in ("cpu", "memory")}
    return Amounts.of(total.get("cpu", 0), total.get("memory", 0), 1, scalars)


def parse_pod(pod: Mapping[str, Any]) -> PodNeeds:
    """The scheduling view of a pod object; raises SpecError naming the offending field."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    labels = MappingProxyType(dict(meta.get("labels") or {}))
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, dict) or not all(isinstance(v, str) for v in selector.values()):
        raise SpecError("spec.nodeSelector", "must be an object of strings")
    affinity = parse_affinity(spec.get("affinity"), "spec.affinity", labels)
    priority = spec.get("priority") or 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise SpecError("spec.priority", "must be a whole number")
    return PodNeeds(
        requests=spec_amounts(spec),
        namespace=meta.get("namespace") or "default",
        labels=labels,
        node_selector=MappingProxyType(dict(selector)),
        node_affinity=affinity.node,
        tolerations=tuple(
            parse_toleration(t, f"spec.tolerations[{i}]")
            for i, t in enumerate(_list(spec.get("tolerations"), "spec.tolerations"))
        ),
        affinity=affinity.pod,
        anti_affinity=affinity.pod_anti,
        spread=parse_spread_constraints(spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints", labels),
        host_ports=parse_host_ports(_list(spec.get("containers"), "spec.containers"), "spec.containers"),
        priority=priority,
        preferred_node_affinity=affinity.node_preferred,
    )
