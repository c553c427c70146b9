"""Which pending pods are real demand for new nodes, and why the others are not.

Pure module, no side effects; `now` is passed in. cluster-autoscaler's (CA's) rules:

- expendable pods, with a priority below `EXPENDABLE_PODS_PRIORITY_CUTOFF` (-10), never
  trigger a scale-up (they would be preempted by the first pod that needs the room);
- a pod younger than its scale-up delay is not demand yet: the delay is
  `NEW_POD_SCALE_UP_DELAY`, or the pod's annotation
  `cluster-autoscaler.kubernetes.io/pod-scale-up-delay` (a Go duration) when that is longer;
  CA ignores an annotation shorter than the global delay or unparseable, and so do we, with
  a warning for the caller to log or report;
- pods that only a virtual node can take (virtual-kubelet, e.g. AKS virtual nodes on ACI: they
  select or require one) never need one of our VMs. A pending pod that merely tolerates the
  virtual node's taint is demand: the scheduler writes Unschedulable only after the virtual node
  refused it too (closed by our quota gate, cordoned, or its required affinity), so only VMs can
  run it. Pods already on a virtual node are `engine.virtual_nodes`' business.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType

from shared.domain import Node, NodeSelectorTerm, Pod

POD_SCALE_UP_DELAY_ANNOTATION = "cluster-autoscaler.kubernetes.io/pod-scale-up-delay"
VIRTUAL_KUBELET_LABEL = ("type", "virtual-kubelet")  # the label virtual-kubelet nodes carry, and pods select
# AKS Virtual Nodes v2 (the `Microsoft.virtualnodes` extension) labels its nodes so; whether they also carry
# `type=virtual-kubelet` is not documented, so either label marks a virtual node.
VIRTUAL_NODES_V2_LABEL = ("virtualization", "virtualnode2")
VIRTUAL_KUBELET_TAINT_KEY = "virtual-kubelet.io/provider"
DEFAULT_EXPENDABLE_PODS_PRIORITY_CUTOFF = -10


@dataclass(frozen=True, slots=True)
class PodRules:
    expendable_pods_priority_cutoff: int = DEFAULT_EXPENDABLE_PODS_PRIORITY_CUTOFF
    new_pod_scale_up_delay: timedelta = timedelta(0)


@dataclass(frozen=True, slots=True)
class DemandSplit:
    demand: tuple[Pod, ...] = ()  # pods a scale-up should be planned for, in the order given
    ignored: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # pod key -> why not demand
    warnings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # pod key -> ignored annotation


def is_expendable(pod: Pod, cutoff: int = DEFAULT_EXPENDABLE_PODS_PRIORITY_CUTOFF) -> bool:
    return pod.priority < cutoff


def is_virtual_node(node: Node) -> bool:
    """A virtual-kubelet node (AKS virtual nodes v1 or v2, any virtual-kubelet provider), told by its labels or
    its provider taint, never by its name: CA leaves these out of scale-up, scale-down and cluster totals."""
    return (any(node.labels.get(key) == value for key, value in (VIRTUAL_KUBELET_LABEL, VIRTUAL_NODES_V2_LABEL))
            or any(t.key == VIRTUAL_KUBELET_TAINT_KEY for t in node.taints))


def virtual_node_reason(pod: Pod, virtual_nodes: Collection[str] = ()) -> str | None:
    """Why the pod is meant for a virtual node, or None when it is not."""
    if pod.node_name and pod.node_name in virtual_nodes:
        return f"bound to virtual node {pod.node_name}"
    for key, value in (VIRTUAL_KUBELET_LABEL, VIRTUAL_NODES_V2_LABEL):
        if pod.node_selector.get(key) == value:
            return f"selects virtual nodes (nodeSelector {key}={value})"
    key, value = VIRTUAL_KUBELET_LABEL
    if pod.node_affinity and all(_term_pins_virtual(term) for term in pod.node_affinity):
        return f"requires virtual nodes (node affinity {key} In [{value}])"
    return None


def _term_pins_virtual(term: NodeSelectorTerm) -> bool:
    """A required node affinity term that only a `type=virtual-kubelet` node can satisfy."""
    key, value = VIRTUAL_KUBELET_LABEL
    return any(
        r.key == key and r.operator == "In" and tuple(r.values) == (value,)
        for r in term.match_expressions
    )


_GO_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> timedelta:
    """A Go `time.ParseDuration` string ("2m", "1h30m", "1.5s", "-5m", "0"), as CA reads the annotation."""
    body = text.strip()
    sign = 1
    if body[:1] in ("+", "-"):
        sign = -1 if body[0] == "-" else 1
        body = body[1:]
    if body == "0":
        return timedelta(0)
    pos, seconds = 0, 0.0
    for match in _GO_DURATION_PART.finditer(body):
        if match.start() != pos:
            break
        seconds += float(match[1]) * _GO_UNIT_SECONDS[match[2]]
        pos = match.end()
    if not body or pos != len(body):
        raise ValueError(f"not a Go duration: {text!r} (e.g. 30s, 2m, 1h30m)")
    return timedelta(seconds=sign * seconds)


def scale_up_delay(pod: Pod, default: timedelta = timedelta(0)) -> tuple[timedelta, str | None]:
    """The pod's scale-up delay, and a warning when its annotation was ignored (CA's rules)."""
    raw = pod.annotations.get(POD_SCALE_UP_DELAY_ANNOTATION)
    if raw is None:
        return default, None
    try:
        delay = parse_go_duration(raw)
    except ValueError as exc:
        return default, f"{POD_SCALE_UP_DELAY_ANNOTATION} ignored: {exc}"
    if delay < default:
        return default, (
            f"{POD_SCALE_UP_DELAY_ANNOTATION}={raw} ignored: shorter than NEW_POD_SCALE_UP_DELAY "
            f"({format_duration(default)})"
        )
    return delay, None


def split_demand(
    pods: Iterable[Pod], *, now: datetime, rules: PodRules = PodRules(), virtual_nodes: Collection[str] = ()
) -> DemandSplit:
    """Split pending pods into demand and the rest, each with its reason.

    `pods` are the pending pods (e.g. `scale_up.pending_pods(snapshot)`); `virtual_nodes`
    names the cluster's virtual-kubelet nodes (`is_virtual_node`). A pod counts as demand once
    its age reaches its delay, so the default delay of 0 never holds a pod back.
    """
    demand: list[Pod] = []
    ignored: dict[str, str] = {}
    warnings: dict[str, str] = {}
    for pod in pods:
        delay, warning = scale_up_delay(pod, rules.new_pod_scale_up_delay)
        if warning:
            warnings[pod.key] = warning
        reason = _not_demand(pod, now=now, rules=rules, delay=delay, virtual_nodes=virtual_nodes)
        if reason is None:
            demand.append(pod)
        else:
            ignored[pod.key] = reason
    return DemandSplit(tuple(demand), MappingProxyType(ignored), MappingProxyType(warnings))


def _not_demand(pod: Pod, *, now: datetime, rules: PodRules, delay: timedelta,
                virtual_nodes: Collection[str]) -> str | None:
    if is_expendable(pod, rules.expendable_pods_priority_cutoff):
        return (f"expendable: priority {pod.priority} is below the cutoff "
                f"{rules.expendable_pods_priority_cutoff}")
    if (reason := virtual_node_reason(pod, virtual_nodes)) is not None:
        return reason
    age = now - pod.created_at
    if age < delay:
        return f"too new: {format_duration(max(age, timedelta(0)))} old, scale-up delay {format_duration(delay)}"
    return None


def format_duration(value: timedelta) -> str:
    """Like Go prints durations, to whole seconds: 0s, 45s, 2m0s, 1h30m0s."""
    total = int(value.total_seconds())
    sign, total = ("-", -total) if total < 0 else ("", total)
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{sign}{minutes}m{seconds}s"
    return f"{sign}{seconds}s"
