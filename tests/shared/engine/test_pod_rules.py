from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from shared.domain import NodeSelectorTerm, Pod, SelectorRequirement, Taint, Toleration
from shared.engine.pod_rules import (
    POD_SCALE_UP_DELAY_ANNOTATION,
    PodRules,
    format_duration,
    is_virtual_node,
    parse_go_duration,
    scale_up_delay,
    split_demand,
)
from tests.builders import T0, node, pod

NOW = T0


def pending(name: str = "p", *, age: timedelta = timedelta(minutes=1), priority: int = 0, delay: str | None = None,
            **kw: object) -> Pod:
    base = pod(name, pending=True, **kw)  # type: ignore[arg-type]
    annotations = {POD_SCALE_UP_DELAY_ANNOTATION: delay} if delay is not None else {}
    return replace(base, created_at=NOW - age, priority=priority, annotations=annotations)


VK_TOLERATION = Toleration("virtual-kubelet.io/provider", "Exists")
VK_TERM = NodeSelectorTerm((SelectorRequirement("type", "In", ("virtual-kubelet",)),))
VM_TERM = NodeSelectorTerm((SelectorRequirement("kubernetes.azure.com/agentpool", "In", ("batch",)),))
TWO_MINUTES = PodRules(new_pod_scale_up_delay=timedelta(minutes=2))

CASES = [
    # (id, pod, rules, virtual nodes, expected reason (None: demand), expected warning substring)
    ("plain pending pod is demand", pending(), PodRules(), (), None, None),
    ("a pod created this very instant is demand with the default delay", pending(age=timedelta(0)), PodRules(), (),
     None, None),
    ("priority below the cutoff is expendable", pending(priority=-11), PodRules(), (),
     "expendable: priority -11 is below the cutoff -10", None),
    ("priority at the cutoff is demand", pending(priority=-10), PodRules(), (), None, None),
    ("a custom cutoff", pending(priority=-1), PodRules(expendable_pods_priority_cutoff=0), (),
     "expendable: priority -1 is below the cutoff 0", None),
    ("high priority is demand", pending(priority=1_000_000), PodRules(), (), None, None),
    ("selects virtual nodes", pending(selector={"type": "virtual-kubelet"}), PodRules(), (),
     "selects virtual nodes (nodeSelector type=virtual-kubelet)", None),
    ("selects Virtual Nodes v2", pending(selector={"virtualization": "virtualnode2"}), PodRules(), (),
     "selects virtual nodes (nodeSelector virtualization=virtualnode2)", None),
    ("requires virtual nodes by affinity", replace(pending(), node_affinity=(VK_TERM,)), PodRules(), (),
     "requires virtual nodes (node affinity type In [virtual-kubelet])", None),
    ("affinity allowing a VM pool too is demand", replace(pending(), node_affinity=(VK_TERM, VM_TERM)), PodRules(), (),
     None, None),
    ("another type selector is demand", pending(selector={"type": "batch"}), PodRules(), (), None, None),
    # Unschedulable although it tolerates the virtual node: the virtual node refused it too (e.g. closed by the
    # quota gate), so only VMs can run it.
    ("tolerating the virtual-kubelet taint is still demand", pending(tolerations=(VK_TOLERATION,)), PodRules(), (),
     None, None),
    ("a wildcard toleration is not meant for virtual nodes", pending(tolerations=(Toleration("", "Exists"),)),
     PodRules(), (), None, None),
    ("tolerates another taint: demand", pending(tolerations=(Toleration("nvidia.com/gpu", "Exists"),)), PodRules(),
     (), None, None),
    ("bound to a virtual node", replace(pending(), node_name="virtual-node-aci"), PodRules(), {"virtual-node-aci"},
     "bound to virtual node virtual-node-aci", None),
    ("younger than the global delay", pending(age=timedelta(minutes=1)), TWO_MINUTES, (),
     "too new: 1m0s old, scale-up delay 2m0s", None),
    ("older than the global delay", pending(age=timedelta(minutes=3)), TWO_MINUTES, (), None, None),
    ("exactly the delay old is demand", pending(age=timedelta(minutes=2)), TWO_MINUTES, (), None, None),
    ("the annotation lengthens the delay", pending(age=timedelta(minutes=1), delay="5m"), PodRules(), (),
     "too new: 1m0s old, scale-up delay 5m0s", None),
    ("the annotated delay passed", pending(age=timedelta(minutes=6), delay="5m"), PodRules(), (), None, None),
    ("an annotation shorter than the global delay is ignored", pending(age=timedelta(minutes=1), delay="30s"),
     TWO_MINUTES, (), "too new: 1m0s old, scale-up delay 2m0s", "shorter than NEW_POD_SCALE_UP_DELAY (2m0s)"),
    ("an unparseable annotation is ignored", pending(age=timedelta(seconds=10), delay="soon"), PodRules(), (), None,
     "not a Go duration: 'soon'"),
    ("expendable wins over the other reasons", pending(priority=-100, selector={"type": "virtual-kubelet"}, delay="1h"),
     PodRules(), (), "expendable: priority -100 is below the cutoff -10", None),
    ("a clock behind the pod's creation reads as 0s old", pending(age=-timedelta(seconds=5)), TWO_MINUTES, (),
     "too new: 0s old, scale-up delay 2m0s", None),
]


@pytest.mark.parametrize("case_id,the_pod,rules,virtual,reason,warning", CASES, ids=[c[0] for c in CASES])
def test_split_demand(case_id, the_pod, rules, virtual, reason, warning) -> None:
    split = split_demand([the_pod], now=NOW, rules=rules, virtual_nodes=virtual)
    if reason is None:
        assert split.demand == (the_pod,) and dict(split.ignored) == {}
    else:
        assert split.demand == () and dict(split.ignored) == {the_pod.key: reason}
    if warning is None:
        assert dict(split.warnings) == {}
    else:
        assert warning in split.warnings[the_pod.key]


def test_split_keeps_the_order_of_the_demand() -> None:
    pods = [pending("c"), pending("a", priority=-50), pending("b"), pending("d", age=timedelta(0), delay="1m")]
    split = split_demand(pods, now=NOW)
    assert [p.name for p in split.demand] == ["c", "b"]
    assert set(split.ignored) == {"default/a", "default/d"}


@pytest.mark.parametrize("annotation,default,expected", [
    (None, timedelta(0), timedelta(0)),
    ("90s", timedelta(0), timedelta(seconds=90)),
    ("1h30m", timedelta(minutes=5), timedelta(minutes=90)),
    ("1m", timedelta(minutes=5), timedelta(minutes=5)),  # shorter than the global delay: ignored
    ("-5m", timedelta(0), timedelta(0)),  # negative: shorter than any delay, ignored
    ("bogus", timedelta(seconds=7), timedelta(seconds=7)),
])
def test_scale_up_delay(annotation, default, expected) -> None:
    the_pod = pending(delay=annotation)
    assert scale_up_delay(the_pod, default)[0] == expected


@pytest.mark.parametrize("text,seconds", [
    ("0", 0), ("-0", 0), ("2m", 120), ("1h30m", 5400), ("1.5s", 1.5), ("300ms", 0.3), ("+1s", 1), (".5h", 1800),
    ("-5m", -300), ("1h0m0s", 3600), ("2us", 2e-6), ("2µs", 2e-6),
])
def test_parse_go_duration(text: str, seconds: float) -> None:
    assert parse_go_duration(text).total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "m", "1h 2m", "--1s", "1d", "abc", "1m-"])
def test_parse_go_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a Go duration"):
        parse_go_duration(text)


@pytest.mark.parametrize("value,text", [
    (timedelta(0), "0s"), (timedelta(seconds=45), "45s"), (timedelta(minutes=2), "2m0s"),
    (timedelta(hours=1, minutes=30), "1h30m0s"), (timedelta(seconds=-90), "-1m30s"),
])
def test_format_duration(value: timedelta, text: str) -> None:
    assert format_duration(value) == text


@pytest.mark.parametrize("labels,taints,virtual", [
    ({"type": "virtual-kubelet"}, (), True),  # AKS virtual nodes v1 (the add-on), any virtual-kubelet
    ({"virtualization": "virtualnode2"}, (), True),  # Virtual Nodes v2
    ({}, (Taint("virtual-kubelet.io/provider", "azure", "NoSchedule"),), True),  # only its provider taint
    ({}, (), False),
    ({"type": "batch"}, (), False),
    ({"virtualization": "kvm"}, (), False),
])
def test_is_virtual_node(labels: dict[str, str], taints: tuple[Taint, ...], virtual: bool) -> None:
    # Never by name: a VM node may be called virtual-node-anything.
    assert is_virtual_node(node("virtual-node-aci-linux", labels=labels, taints=taints)) is virtual
