"""KubernetesCluster: pure JSON conversion, node patch logic, and the real wire against the sandbox."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration, CoreV1Api, V1ConfigMap, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

from sandbox.api.server import SandboxServer
from sandbox.clock import ManualClock
from shared import ports
from shared.adapters.kubernetes import (
    KubernetesApiError,
    KubernetesCluster,
    daemonset_from_json,
    disruption_budget_from_json,
    node_from_json,
    pod_from_json,
    requests_from_spec,
)
from shared.domain import (
    DaemonSet,
    DisruptionBudget,
    HostPort,
    LabelSelector,
    NodeSelectorTerm,
    OwnerRef,
    Pod,
    PodAffinityTerm,
    Resources,
    SelectorRequirement,
    Taint,
    Toleration,
    TopologySpreadConstraint,
)
from shared.ports import ClusterError
from shared.settings import Settings, load_settings
from tests.fixtures.sandbox import SANDBOX_START, SandboxFactory, kube_api_client
from tests.shared.adapters import sandbox_world
from tests.shared.adapters.k8s_objects import container, node_json, pod_json

Mi = 2**20
Gi = 2**30

REQUEST_CASES: list[tuple[str, dict[str, Any], Resources]] = [
    ("one container", {"containers": [container("100m", "128Mi")]}, Resources(100, 128 * Mi, 1)),
    (
        "containers add up",
        {"containers": [container("100m", "128Mi"), container("1.5", "1Gi")]},
        Resources(1600, 128 * Mi + Gi, 1),
    ),
    ("no requests at all", {"containers": [{"name": "c"}]}, Resources(0, 0, 1)),
    ("no containers key", {}, Resources(0, 0, 1)),
    (
        "an init container larger than the sum wins, per resource",
        {"containers": [container("100m", "1Gi")], "initContainers": [container("2", "64Mi")]},
        Resources(2000, Gi, 1),
    ),
    (
        "init containers run one at a time: the largest counts, not their sum",
        {"containers": [container("100m")], "initContainers": [container("500m"), container("700m")]},
        Resources(700, 0, 1),
    ),
    (
        "a sidecar (restartPolicy Always) adds to the containers and to later init containers",
        {
            "containers": [container("1")],
            "initContainers": [container("200m", restartPolicy="Always"), container("1500m")],
        },
        Resources(1700, 0, 1),
    ),
    (
        "sidecar totals below the containers leave the sum",
        {"containers": [container("1")], "initContainers": [container("100m", restartPolicy="Always")]},
        Resources(1100, 0, 1),
    ),
    (
        "overhead comes on top",
        {"containers": [container("100m", "128Mi")], "overhead": {"cpu": "250m", "memory": "120Mi"}},
        Resources(350, 248 * Mi, 1),
    ),
    (
        "overhead also tops an init-container peak",
        {"containers": [container("100m")], "initContainers": [container("1")], "overhead": {"cpu": "10m"}},
        Resources(1010, 0, 1),
    ),
    (
        "pod-level requests replace the container aggregate",
        {"containers": [container("100m", "128Mi")], "resources": {"requests": {"cpu": "2"}}},
        Resources(2000, 128 * Mi, 1),
    ),
    (
        "a limit without a request counts as the request, as the API server defaults it",
        {"containers": [{"name": "c", "resources": {"limits": {"cpu": "300m", "memory": "1Gi"}}}]},
        Resources(300, Gi, 1),
    ),
    (
        "ephemeral storage and extended resources follow the same rule",
        {
            "containers": [
                {"name": "a", "resources": {"requests": {"ephemeral-storage": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}},
                {"name": "b", "resources": {"requests": {"ephemeral-storage": "2Gi", "nvidia.com/gpu": "1"}}},
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": "3"}}}],
        },
        Resources(0, 0, 1, 3 * Gi, (("nvidia.com/gpu", 3),)),
    ),
    # Pod-level rows after component-helpers resource/helpers_test.go (TestPodRequests,
    # "pod-level resources" and hugepages cases): cpu, memory and hugepages-* are
    # pod-level resources; anything else stays per container.
    (
        "overhead adds to every resource; pod-level hugepages replace the containers' too",
        {
            "containers": [container("100m", "128Mi", resources={"requests": {"cpu": "100m", "hugepages-2Mi": "4Mi"}})],
            "resources": {"requests": {"cpu": "1", "hugepages-2Mi": "1Gi"}},
            "overhead": {"ephemeral-storage": "1Gi"},
        },
        Resources(1000, 0, 1, Gi, (("hugepages-2Mi", Gi),)),
    ),
    (
        "pod-level hugepages given as a limit only count as the request (API server defaulting)",
        {"containers": [container("100m", "128Mi")], "resources": {"limits": {"memory": "1Gi", "hugepages-1Gi": "2Gi"}}},
        Resources(100, Gi, 1, 0, (("hugepages-1Gi", 2 * Gi),)),
    ),
    (
        "pod-level hugepages with containers requesting none",
        {"containers": [container("1", "1Gi")], "resources": {"requests": {"hugepages-2Mi": "100Mi"}}},
        Resources(1000, Gi, 1, 0, (("hugepages-2Mi", 100 * Mi),)),
    ),
    (
        "an extended resource at pod level is not a pod-level resource: the containers' count",
        {
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
            "resources": {"requests": {"nvidia.com/gpu": "4"}},
        },
        Resources(0, 0, 1, 0, (("nvidia.com/gpu", 1),)),
    ),
    (
        "an explicit request beats the limit",
        {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "200m"}}}]},
        Resources(200, 0, 1),
    ),
]


@pytest.mark.parametrize(("spec", "expected"), [c[1:] for c in REQUEST_CASES], ids=[c[0] for c in REQUEST_CASES])
def test_pod_requests_as_the_scheduler_computes_them(spec: dict[str, Any], expected: Resources) -> None:
    assert requests_from_spec(spec) == expected


UNSCHEDULABLE_CASES = [
    ("no conditions", None, False),
    ("scheduled", [{"type": "PodScheduled", "status": "True"}], False),
    ("unschedulable", [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}], True),
    ("waiting for something else", [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}], False),
    ("another condition says Unschedulable", [{"type": "Ready", "status": "False", "reason": "Unschedulable"}], False),
]


@pytest.mark.parametrize(
    ("conditions", "expected"), [c[1:] for c in UNSCHEDULABLE_CASES], ids=[c[0] for c in UNSCHEDULABLE_CASES]
)
def test_unschedulable_comes_from_the_pod_scheduled_condition(conditions: list[dict[str, str]] | None, expected: bool) -> None:
    status: dict[str, Any] = {"phase": "Pending"}
    if conditions is not None:
        status["conditions"] = conditions
    assert pod_from_json(pod_json(status=status)).unschedulable is expected


OWNER_CASES = [
    ("no owners", None, None),
    (
        "the controller reference",
        [{"kind": "ReplicaSet", "name": "web-1", "controller": True, "uid": "u"}],
        OwnerRef("ReplicaSet", "web-1"),
    ),
    (
        "non-controller references are not the owner",
        [{"kind": "ConfigMap", "name": "cm", "uid": "u"}, {"kind": "Job", "name": "j", "controller": True, "uid": "v"}],
        OwnerRef("Job", "j"),
    ),
    ("only non-controller references", [{"kind": "ConfigMap", "name": "cm", "controller": False, "uid": "u"}], None),
    ("a DaemonSet", [{"kind": "DaemonSet", "name": "ds", "controller": True, "uid": "u"}], OwnerRef("DaemonSet", "ds")),
]


@pytest.mark.parametrize(("refs", "expected"), [c[1:] for c in OWNER_CASES], ids=[c[0] for c in OWNER_CASES])
def test_owner_is_the_controller_reference(refs: list[dict[str, Any]] | None, expected: OwnerRef | None) -> None:
    metadata = {"ownerReferences": refs} if refs is not None else {}
    assert pod_from_json(pod_json(metadata=metadata)).owner == expected


def test_a_full_pod() -> None:
    raw = pod_json(
        name="web-1",
        namespace="shop",
        metadata={
            "labels": {"app": "web"},
            "annotations": {"kubernetes.io/config.mirror": "abc", "x": "y"},
            "deletionTimestamp": "2024-05-01T12:05:00Z",
        },
        spec={
            "nodeName": "node-1",
            "nodeSelector": {"agentpool": "gpu"},
            "tolerations": [
                {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "team", "value": "a"},
                {"operator": "Exists"},
            ],
        },
        status={"phase": "Running"},
    )
    pod = pod_from_json(raw)
    assert (pod.namespace, pod.name, pod.uid, pod.key) == ("shop", "web-1", "uid-web-1", "shop/web-1")
    assert pod.created_at == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert pod.node_name == "node-1"
    assert pod.phase == "Running"
    assert dict(pod.labels) == {"app": "web"}
    assert dict(pod.node_selector) == {"agentpool": "gpu"}
    assert pod.is_mirror is True
    assert pod.terminating is True
    assert pod.deleted_at == datetime(2024, 5, 1, 12, 5, tzinfo=UTC)  # to tell long-terminating pods apart
    assert pod.tolerations == (
        Toleration(key="gpu", operator="Exists", effect="NoSchedule"),
        Toleration(key="team", operator="Equal", value="a"),
        Toleration(operator="Exists"),
    )


@pytest.mark.parametrize(
    ("metadata", "mirror", "deleting"),
    [({}, False, False), ({"annotations": {"other": "1"}}, False, False), ({"deletionTimestamp": None}, False, False)],
)
def test_plain_pods_are_neither_mirror_nor_deleting(metadata: dict[str, Any], mirror: bool, deleting: bool) -> None:
    pod = pod_from_json(pod_json(metadata=metadata))
    assert (pod.is_mirror, pod.terminating, pod.node_name, pod.deleted_at) == (mirror, deleting, None, None)


def test_a_malformed_quantity_names_the_text() -> None:
    with pytest.raises(ValueError, match="'lots'"):
        pod_from_json(pod_json(containers=[container("lots")]))


# --- Scheduling constraints ------------------------------------------------------------

def _parsed(spec: dict[str, Any], labels: dict[str, str] | None = None, namespace: str = "default") -> Pod:
    return pod_from_json(pod_json(spec=spec, namespace=namespace, metadata={"labels": labels or {}}))


def test_required_node_affinity() -> None:
    pod = _parsed({"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]},
                                  {"key": "gen", "operator": "Gt", "values": ["3"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
        ]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [
            {"key": "ignored", "operator": "Exists"}]}}],
    }}})
    assert pod.node_affinity == (
        NodeSelectorTerm((SelectorRequirement("pool", "In", ("a", "b")), SelectorRequirement("gen", "Gt", ("3",)))),
        NodeSelectorTerm((), (SelectorRequirement("metadata.name", "In", ("n1",)),)),
    )
    assert pod.unsupported == ()


def test_pod_affinity_and_anti_affinity_terms() -> None:
    pod = _parsed({"affinity": {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "topology.kubernetes.io/zone"},
            {"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
             "topologyKey": "kubernetes.io/hostname", "namespaces": ["other"]},
        ]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname",
             "namespaceSelector": {}, "matchLabelKeys": ["pod-template-hash", "absent"]},
        ]},
    }}, labels={"app": "web", "pod-template-hash": "abc"})
    assert pod.pod_affinity == (
        PodAffinityTerm("topology.kubernetes.io/zone", LabelSelector((("app", "cache"),))),
        PodAffinityTerm("kubernetes.io/hostname", LabelSelector((), (SelectorRequirement("tier", "Exists"),)), ("other",)),
    )
    # An empty namespaceSelector means every namespace; matchLabelKeys takes the pod's own values.
    assert pod.pod_anti_affinity == (
        PodAffinityTerm(
            "kubernetes.io/hostname",
            LabelSelector((("app", "web"),), (SelectorRequirement("pod-template-hash", "In", ("abc",)),)),
            (),
            True,
        ),
    )
    assert pod.unsupported == ()


def test_topology_spread_constraints() -> None:
    pod = _parsed({"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash"], "minDomains": 3,
         "nodeTaintsPolicy": "Honor"},
        {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": "web"}}},
    ]}, labels={"app": "web", "pod-template-hash": "abc"})
    zone, host = pod.topology_spread
    assert zone == TopologySpreadConstraint(
        1, "topology.kubernetes.io/zone", "DoNotSchedule",
        LabelSelector((("app", "web"),), (SelectorRequirement("pod-template-hash", "In", ("abc",)),)),
        3, "Honor", "Honor",
    )
    assert zone.is_filter and not host.is_filter
    assert host.max_skew == 2


def test_host_ports_of_containers_and_sidecars() -> None:
    pod = _parsed({
        "containers": [{"name": "c", "ports": [
            {"containerPort": 8080, "hostPort": 80},
            {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
            {"containerPort": 9000},
        ]}],
        "initContainers": [
            {"name": "sidecar", "restartPolicy": "Always", "ports": [{"containerPort": 15000, "hostPort": 15000}]},
            {"name": "setup", "ports": [{"containerPort": 1, "hostPort": 1}]},  # gone before the pod runs
        ],
    })
    assert pod.host_ports == (HostPort(80), HostPort(53, "UDP", "10.0.0.1"), HostPort(15000))
    host_network = _parsed({"hostNetwork": True, "containers": [{"name": "c", "ports": [{"containerPort": 9100}]}]})
    assert host_network.host_ports == (HostPort(9100),)


UNSUPPORTED_CASES = [
    ("a persistent volume claim",
     {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}}]},
     ("volume topology of persistentVolumeClaim data-web-0",)),
    ("a generic ephemeral volume", {"volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]},
     ("volume topology of ephemeral volume scratch",)),
    ("emptyDir and configMap volumes are fine", {"volumes": [{"name": "t", "emptyDir": {}}, {"name": "c", "configMap": {}}]},
     ()),
    ("dynamic resource claims", {"resourceClaims": [{"name": "gpu"}]}, ("resourceClaims (dynamic resource allocation)",)),
    ("a namespaceSelector with labels",
     {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
         {"labelSelector": {}, "topologyKey": "h", "namespaceSelector": {"matchLabels": {"team": "a"}}}]}}},
     ("podAffinity namespaceSelector",)),
    ("matchFields on another field",
     {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
         {"matchFields": [{"key": "spec.unschedulable", "operator": "In", "values": ["false"]}]}]}}}},
     ("nodeAffinity matchFields on spec.unschedulable",)),
    ("an operator we do not know",
     {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
         {"matchExpressions": [{"key": "k", "operator": "Near", "values": ["x"]}]}]}}}},
     ("nodeAffinity operator Near",)),
    # The alpha comparison operators of KEP-5471 (TaintTolerationComparisonOperators), as in
    # kubernetes pkg/apis/core/validation tests: rejected by a server without the gate.
    ("a Gt toleration (alpha)",
     {"tolerations": [{"key": "node.example.com/sla", "operator": "Gt", "value": "950", "effect": "NoSchedule"}]},
     ("toleration operator Gt",)),
    ("an Lt toleration (alpha)",
     {"tolerations": [{"key": "node.example.com/sla", "operator": "Lt", "value": "100", "effect": "NoSchedule"}]},
     ("toleration operator Lt",)),
    ("Equal, Exists and the defaulted operator are supported",
     {"tolerations": [{"key": "a", "value": "b"}, {"key": "c", "operator": "Exists"},
                      {"key": "d", "operator": "Equal", "value": "e"}]},
     ()),
    ("a whenUnsatisfiable we do not know",
     {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "Sometimes",
                                     "labelSelector": {}}]},
     ("topologySpreadConstraints whenUnsatisfiable Sometimes",)),
]


@pytest.mark.parametrize(("spec", "unsupported"), [c[1:] for c in UNSUPPORTED_CASES],
                         ids=[c[0] for c in UNSUPPORTED_CASES])
def test_constructs_we_cannot_evaluate_are_named(spec: dict[str, Any], unsupported: tuple[str, ...]) -> None:
    assert _parsed(spec).unsupported == unsupported


# --- What batch-safe scale-down reads: local volumes, start time, deadline ---------------

# (name, spec, status, local_volumes, started_at, active_deadline_seconds)
BATCH_FIELD_CASES: list[tuple[str, dict[str, Any], dict[str, Any], tuple[str, ...], datetime | None, int | None]] = [
    ("a bare pending pod has none of them", {}, {"phase": "Pending"}, (), None, None),
    ("hostPath is local", {"volumes": [{"name": "logs", "hostPath": {"path": "/var/log", "type": ""}}]},
     {}, ("logs",), None, None),
    ("emptyDir on the node's disk is local by default", {"volumes": [{"name": "scratch", "emptyDir": {}}]},
     {}, ("scratch",), None, None),
    ("emptyDir with an explicit empty medium and a size limit is local",
     {"volumes": [{"name": "scratch", "emptyDir": {"medium": "", "sizeLimit": "1Gi"}}]}, {}, ("scratch",), None, None),
    ("emptyDir in memory is not", {"volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}]}, {}, (), None, None),
    ("configMap, secret, projected and PVC volumes are not",
     {"volumes": [{"name": "cfg", "configMap": {"name": "app"}}, {"name": "tok", "secret": {"secretName": "t"}},
                  {"name": "sa", "projected": {"sources": []}},
                  {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}}]},
     {}, (), None, None),
    ("local volumes come back in the pod's order, others skipped",
     {"volumes": [{"name": "b", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "x"}},
                  {"name": "shm", "emptyDir": {"medium": "Memory"}}, {"name": "a", "hostPath": {"path": "/data"}}]},
     {}, ("b", "a"), None, None),
    ("startTime", {}, {"phase": "Running", "startTime": "2024-05-01T12:03:04Z"},
     (), datetime(2024, 5, 1, 12, 3, 4, tzinfo=UTC), None),
    ("an empty startTime is none", {}, {"phase": "Pending", "startTime": ""}, (), None, None),
    ("activeDeadlineSeconds", {"activeDeadlineSeconds": 3600}, {}, (), None, 3600),
]


@pytest.mark.parametrize(
    ("spec", "status", "local_volumes", "started_at", "deadline"),
    [c[1:] for c in BATCH_FIELD_CASES],
    ids=[c[0] for c in BATCH_FIELD_CASES],
)
def test_what_batch_safe_scale_down_reads_from_a_pod(
    spec: dict[str, Any],
    status: dict[str, Any],
    local_volumes: tuple[str, ...],
    started_at: datetime | None,
    deadline: int | None,
) -> None:
    pod = pod_from_json(pod_json(spec=spec, status=status))
    assert (pod.local_volumes, pod.started_at, pod.active_deadline_seconds) == (local_volumes, started_at, deadline)


MALFORMED_BATCH_FIELD_CASES = [
    ("a startTime that is no timestamp", {}, {"startTime": "yesterday"}, "status.startTime"),
    ("a startTime that is a number", {}, {"startTime": 1714564800}, "status.startTime"),
    ("an activeDeadlineSeconds that is text", {"activeDeadlineSeconds": "1h"}, {}, "spec.activeDeadlineSeconds"),
    ("an activeDeadlineSeconds that is a fraction", {"activeDeadlineSeconds": 1.5}, {}, "spec.activeDeadlineSeconds"),
]


@pytest.mark.parametrize(
    ("spec", "status", "field"), [c[1:] for c in MALFORMED_BATCH_FIELD_CASES],
    ids=[c[0] for c in MALFORMED_BATCH_FIELD_CASES],
)
def test_malformed_batch_fields_raise_value_errors_naming_the_field(
    spec: dict[str, Any], status: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        pod_from_json(pod_json(spec=spec, status=status))


# --- PodDisruptionBudgets ----------------------------------------------------------------


def pdb_json(
    selector: dict[str, Any] | None, status: dict[str, Any] | None, *, generation: int = 1, name: str = "web"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"minAvailable": 1}
    if selector is not None:
        spec["selector"] = selector
    raw: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "shop", "generation": generation},
        "spec": spec,
    }
    if status is not None:
        raw["status"] = status
    return raw


_HEALTHY = {"disruptionsAllowed": 2, "observedGeneration": 1}

# (name, raw PDB, expected selector, expected disruptions allowed)
PDB_CASES: list[tuple[str, dict[str, Any], LabelSelector | None, int]] = [
    ("a null selector selects nothing", pdb_json(None, _HEALTHY), None, 2),
    ("an empty selector selects the whole namespace", pdb_json({}, _HEALTHY), LabelSelector(), 2),
    ("empty matchLabels too", pdb_json({"matchLabels": {}}, _HEALTHY), LabelSelector(), 2),
    ("matchLabels, sorted", pdb_json({"matchLabels": {"tier": "web", "app": "shop"}}, _HEALTHY),
     LabelSelector(match_labels=(("app", "shop"), ("tier", "web"))), 2),
    ("matchExpressions",
     pdb_json({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]},
                                    {"key": "canary", "operator": "DoesNotExist"}]}, _HEALTHY),
     LabelSelector(match_expressions=(SelectorRequirement("app", "In", ("a", "b")),
                                      SelectorRequirement("canary", "DoesNotExist"))), 2),
    ("a missing status allows nothing", pdb_json({}, None), LabelSelector(), 0),
    ("a status without disruptionsAllowed allows nothing", pdb_json({}, {"observedGeneration": 1}), LabelSelector(), 0),
    ("a spec the disruption controller has not seen yet allows nothing (the Eviction API refuses)",
     pdb_json({}, {"disruptionsAllowed": 3, "observedGeneration": 1}, generation=2), LabelSelector(), 0),
    ("zero allowed", pdb_json({}, {"disruptionsAllowed": 0, "observedGeneration": 1}), LabelSelector(), 0),
]


@pytest.mark.parametrize(
    ("raw", "selector", "allowed"), [c[1:] for c in PDB_CASES], ids=[c[0] for c in PDB_CASES]
)
def test_disruption_budget_conversion(raw: dict[str, Any], selector: LabelSelector | None, allowed: int) -> None:
    assert disruption_budget_from_json(raw) == DisruptionBudget("shop", "web", selector, allowed)


def test_what_a_disruption_budget_covers() -> None:
    def pod(namespace: str, labels: dict[str, str]) -> Pod:
        return pod_from_json(pod_json(namespace=namespace, metadata={"labels": labels}))

    null = disruption_budget_from_json(pdb_json(None, _HEALTHY))
    everything = disruption_budget_from_json(pdb_json({}, _HEALTHY))
    web = disruption_budget_from_json(pdb_json({"matchLabels": {"app": "web"}}, _HEALTHY))
    assert not null.covers(pod("shop", {"app": "web"}))
    assert everything.covers(pod("shop", {})) and not everything.covers(pod("other", {}))
    assert web.covers(pod("shop", {"app": "web", "x": "y"})) and not web.covers(pod("shop", {"app": "db"}))


MALFORMED_PDB_CASES = [
    ("an operator the API does not define", pdb_json({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, _HEALTHY),
     "spec.selector operator Gt"),
    ("a disruptionsAllowed that is text", pdb_json({}, {"disruptionsAllowed": "two", "observedGeneration": 1}),
     "status.disruptionsAllowed"),
]


@pytest.mark.parametrize(("raw", "named"), [c[1:] for c in MALFORMED_PDB_CASES], ids=[c[0] for c in MALFORMED_PDB_CASES])
def test_a_malformed_disruption_budget_raises_a_value_error(raw: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        disruption_budget_from_json(raw)


NODE_READY_CASES = [
    ("ready", [{"type": "Ready", "status": "True"}], True),
    ("not ready", [{"type": "Ready", "status": "False"}], False),
    ("unknown", [{"type": "Ready", "status": "Unknown"}], False),
    ("no Ready condition", [{"type": "MemoryPressure", "status": "False"}], False),
    ("no conditions", [], False),
]


@pytest.mark.parametrize(("conditions", "ready"), [c[1:] for c in NODE_READY_CASES], ids=[c[0] for c in NODE_READY_CASES])
def test_node_readiness(conditions: list[dict[str, str]], ready: bool) -> None:
    assert node_from_json(node_json(conditions=conditions)).ready is ready


def test_a_nodes_true_conditions_other_than_ready_are_kept_for_agents_signals() -> None:
    conditions = [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"},
                  {"type": "PreemptScheduled", "status": "True"}, {"type": "KernelDeadlock", "status": "Unknown"}]
    assert node_from_json(node_json(conditions=conditions)).conditions == frozenset({"PreemptScheduled"})


def test_a_full_node() -> None:
    provider_id = (
        "azure:///subscriptions/sub/resourceGroups/RG-Nodes/providers/Microsoft.Compute/"
        "virtualMachineScaleSets/pool1/virtualMachines/3"
    )
    raw = node_json(
        name="pool1000003",
        allocatable={
            "cpu": "3860m",
            "memory": "14Gi",
            "pods": "110",
            "ephemeral-storage": "100Gi",
            "nvidia.com/gpu": "2",
            "hugepages-2Mi": "0",
            "attachable-volumes-azure-disk": "8",
        },
        spec={
            "providerID": provider_id,
            "unschedulable": True,
            "taints": [
                {"key": "ToBeDeletedByClusterAutoscaler", "value": "1714564800", "effect": "NoSchedule"},
                {"key": "gpu", "effect": "NoExecute"},
            ],
        },
        metadata={"labels": {"agentpool": "pool1"}, "annotations": {"a": "b"}},
    )
    node = node_from_json(raw)
    assert node.name == "pool1000003"
    assert node.allocatable == Resources(
        3860, 14 * Gi, 110, 100 * Gi, (("attachable-volumes-azure-disk", 8), ("nvidia.com/gpu", 2))
    )
    assert node.created_at == datetime(2024, 5, 1, 11, 0, tzinfo=UTC)
    assert node.provider_id == provider_id
    assert node.instance is not None and node.instance.group_id == "rg-nodes/pool1"
    assert node.unschedulable is True
    assert node.is_being_deleted is True
    assert node.taints == (
        Taint("ToBeDeletedByClusterAutoscaler", "1714564800", "NoSchedule"),
        Taint("gpu", "", "NoExecute"),
    )
    assert dict(node.labels) == {"agentpool": "pool1"}
    assert dict(node.annotations) == {"a": "b"}


def test_a_bare_node_has_zero_allocatable_and_is_schedulable() -> None:
    node = node_from_json({"metadata": {"name": "bare"}, "spec": {}, "status": {}})
    assert (node.allocatable, node.ready, node.unschedulable, node.taints, node.provider_id) == (
        Resources(),
        False,
        False,
        (),
        "",
    )


# --- cordon/uncordon logic against a stand-in API (the sandbox tests cover the real wire) ---


class _FakeResponse:
    def __init__(self, body: dict[str, Any] | None = None) -> None:
        self.data = json.dumps(body or {}).encode()

    def release_conn(self) -> None:
        pass

    def drain_conn(self) -> None:
        pass


class _FakeCore:
    """Answers read_node/patch_node like the API server: merge patches guarded by resourceVersion."""

    def __init__(self, node: dict[str, Any], *, conflicts: int = 0) -> None:
        self.node = node
        self.conflicts = conflicts
        self.patches: list[dict[str, Any]] = []

    def read_node(self, name: str, **_: Any) -> _FakeResponse:
        if name != self.node["metadata"]["name"]:
            raise ApiException(status=404, reason="Not Found")
        return _FakeResponse(self.node)

    def patch_node(self, name: str, body: dict[str, Any], **kwargs: Any) -> _FakeResponse:
        assert kwargs["_content_type"] == "application/merge-patch+json"
        self.patches.append(body)
        if self.conflicts:
            self.conflicts -= 1
            self.node["metadata"]["resourceVersion"] = str(int(self.node["metadata"]["resourceVersion"]) + 1)
            raise ApiException(status=409, reason="Conflict")
        if body["metadata"]["resourceVersion"] != self.node["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        for key, value in body["spec"].items():
            if value is None:
                self.node["spec"].pop(key, None)
            else:
                self.node["spec"][key] = value
        self.node["metadata"]["resourceVersion"] = str(int(self.node["metadata"]["resourceVersion"]) + 1)
        return _FakeResponse(self.node)


def _cluster_with(core: _FakeCore) -> KubernetesCluster:
    cluster = KubernetesCluster(ApiClient(Configuration()))
    cluster._core = core  # type: ignore[assignment]  # stand-in for the generated CoreV1Api
    return cluster


DRAIN = Taint("ToBeDeletedByClusterAutoscaler", "1714564800", "NoSchedule")


def test_cordon_twice_adds_one_taint_and_patches_once() -> None:
    core = _FakeCore(node_json(name="n1", spec={"taints": [{"key": "gpu", "effect": "NoSchedule"}]}))
    cluster = _cluster_with(core)
    cluster.cordon("n1", taint=DRAIN)
    cluster.cordon("n1", taint=DRAIN)
    assert len(core.patches) == 1
    assert core.node["spec"]["unschedulable"] is True
    assert core.node["spec"]["taints"] == [
        {"key": "gpu", "effect": "NoSchedule"},
        {"key": "ToBeDeletedByClusterAutoscaler", "value": "1714564800", "effect": "NoSchedule"},
    ]


def test_cordon_retries_on_conflict_with_the_fresh_resource_version() -> None:
    core = _FakeCore(node_json(name="n1"), conflicts=2)
    _cluster_with(core).cordon("n1", taint=DRAIN)
    assert [p["metadata"]["resourceVersion"] for p in core.patches] == ["7", "8", "9"]
    assert core.node["spec"]["unschedulable"] is True


def test_cordon_gives_up_after_repeated_conflicts() -> None:
    core = _FakeCore(node_json(name="n1"), conflicts=99)
    with pytest.raises(ClusterError, match="cordon node n1") as caught:
        _cluster_with(core).cordon("n1", taint=DRAIN)
    assert isinstance(caught.value, KubernetesApiError) and caught.value.status == 409


def test_cordon_of_a_missing_node_is_an_error() -> None:
    with pytest.raises(ClusterError, match="cordon node ghost: node not found"):
        _cluster_with(_FakeCore(node_json(name="n1"))).cordon("ghost", taint=DRAIN)


def test_uncordon_removes_the_taint_and_the_mark_and_is_then_a_no_op() -> None:
    spec = {"unschedulable": True, "taints": [{"key": "gpu", "effect": "NoSchedule"}, {"key": DRAIN.key, "effect": "NoSchedule"}]}
    core = _FakeCore(node_json(name="n1", spec=spec))
    cluster = _cluster_with(core)
    cluster.uncordon("n1", taint_key=DRAIN.key)
    cluster.uncordon("n1", taint_key=DRAIN.key)
    cluster.uncordon("ghost", taint_key=DRAIN.key)
    assert len(core.patches) == 1
    assert "unschedulable" not in core.node["spec"]
    assert core.node["spec"]["taints"] == [{"key": "gpu", "effect": "NoSchedule"}]


# --- construction and transport failures (no server needed) ---------------------------


def _settings_for(kubeconfig: str) -> Settings:
    return load_settings(
        {
            "CLUSTER_NAME": "demo",
            "AZURE_SUBSCRIPTION_ID": "sub",
            "NODE_RESOURCE_GROUPS": "rg",
            "KUBECONFIG_PATH": kubeconfig,
            "AZURE_CREDENTIAL": "sandbox",
        }
    )


def test_a_missing_kubeconfig_is_a_cluster_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(ClusterError, match="load kubeconfig"):
        KubernetesCluster.from_settings(_settings_for(missing))


def test_an_unreachable_api_server_is_a_cluster_error_naming_the_call(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    cluster = KubernetesCluster.from_settings(_settings_for(str(kubeconfig)))
    with pytest.raises(ClusterError, match="list nodes") as caught:
        cluster.list_nodes()
    assert caught.value.__cause__ is not None
    cluster.close()


def test_from_settings_leaves_the_global_default_configuration_alone(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    before = Configuration.get_default_copy().host
    KubernetesCluster.from_settings(_settings_for(str(kubeconfig))).close()
    assert Configuration.get_default_copy().host == before != "https://127.0.0.1:9"


# --- against the sandbox's Kubernetes API over HTTPS ------------------------------------


@pytest.fixture
def world(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory(sandbox_world.scenario(), clock=ManualClock(SANDBOX_START))


@pytest.fixture
def cluster(world: SandboxServer) -> Iterator[KubernetesCluster]:
    # A page of two objects, so every list below follows `continue` tokens.
    adapter = KubernetesCluster.from_settings(sandbox_world.settings_for(world), page_size=2)
    yield adapter
    adapter.close()


def _pod_named(pods: list[Pod], prefix: str) -> list[Pod]:
    return [p for p in pods if p.name.startswith(prefix)]


def test_list_nodes(cluster: KubernetesCluster) -> None:
    nodes = {n.name: n for n in cluster.list_nodes()}
    assert sorted(nodes) == ["pool-a000000", "pool-a000001", "pool-manual000000"]
    node = nodes["pool-a000001"]
    assert node.ready and not node.unschedulable
    assert node.allocatable.cpu_milli == 3860 and node.allocatable.pods == 110
    assert node.instance is not None and (node.instance.group_id, node.instance.instance_id) == ("rg-it/pool-a", "1")
    assert node.created_at < SANDBOX_START


def test_get_node(cluster: KubernetesCluster) -> None:
    node = cluster.get_node("pool-manual000000")
    assert node is not None and node.name == "pool-manual000000"
    assert cluster.get_node("ghost") is None


def test_list_pods_returns_unfinished_pods_as_domain_objects(world: SandboxServer, cluster: KubernetesCluster) -> None:
    pods = cluster.list_pods()
    assert len(_pod_named(pods, "batch-")) == 2
    (huge,) = _pod_named(pods, "huge-")
    assert huge.unschedulable and huge.phase == "Pending" and huge.node_name is None
    assert huge.requests == Resources(64_000, 2**30, 1)
    mirrors = [p for p in pods if p.is_mirror]
    assert {p.node_name for p in mirrors} == {"pool-a000000", "pool-a000001"}
    assert {p.owner.kind for p in pods if p.owner} >= {"ReplicaSet", "Job", "DaemonSet"}
    assert all(p.requests.pods == 1 for p in pods)

    world.clock.advance(120)  # the batch Jobs run for 60 s and succeed
    assert _pod_named(cluster.list_pods(), "batch-") == []


def test_list_pods_on_node(cluster: KubernetesCluster) -> None:
    everything = cluster.list_pods()
    node = "pool-a000000"
    on_node = cluster.list_pods_on_node(node)
    assert on_node and all(p.node_name == node for p in on_node)
    assert {p.key for p in on_node} == {p.key for p in everything if p.node_name == node}


def test_cordon_twice_adds_exactly_one_taint(world: SandboxServer, cluster: KubernetesCluster) -> None:
    cluster.cordon("pool-a000001", taint=DRAIN)
    cluster.cordon("pool-a000001", taint=DRAIN)
    node = cluster.get_node("pool-a000001")
    assert node is not None and node.unschedulable
    assert [t for t in node.taints if t.key == DRAIN.key] == [DRAIN]
    assert world.world.counters.k8s["PATCH nodes"] == 1


def test_uncordon_undoes_cordon_and_is_idempotent(world: SandboxServer, cluster: KubernetesCluster) -> None:
    cluster.cordon("pool-a000001", taint=DRAIN)
    cluster.uncordon("pool-a000001", taint_key=DRAIN.key)
    cluster.uncordon("pool-a000001", taint_key=DRAIN.key)
    node = cluster.get_node("pool-a000001")
    assert node is not None and not node.unschedulable and node.taints == ()
    assert world.world.counters.k8s["PATCH nodes"] == 2


def test_soft_taint_comes_and_goes_without_cordoning(world: SandboxServer, cluster: KubernetesCluster) -> None:
    soft = Taint("DeletionCandidateOfClusterAutoscaler", "1", "PreferNoSchedule")
    cluster.add_taint("pool-a000001", taint=soft)
    cluster.add_taint("pool-a000001", taint=soft)
    node = cluster.get_node("pool-a000001")
    assert node is not None and not node.unschedulable and node.taints == (soft,)
    cluster.remove_taint("pool-a000001", taint_key=soft.key)
    cluster.remove_taint("pool-a000001", taint_key=soft.key)
    cluster.add_taint("ghost", taint=soft)  # a node gone meanwhile is not an error
    node = cluster.get_node("pool-a000001")
    assert node is not None and node.taints == ()
    assert world.world.counters.k8s["PATCH nodes"] == 2


def test_cordon_retries_a_conflicting_write(world: SandboxServer, cluster: KubernetesCluster) -> None:
    world.world.inject_fault(("k8s", "PATCH", "nodes"), status=409, code="Conflict")
    cluster.cordon("pool-a000000", taint=DRAIN)
    node = cluster.get_node("pool-a000000")
    assert node is not None and node.is_being_deleted and node.unschedulable
    assert world.world.counters.k8s["PATCH nodes"] == 2


def test_a_stale_resource_version_is_refused_by_the_server(world: SandboxServer, cluster: KubernetesCluster) -> None:
    # Our guard relies on the server honouring metadata.resourceVersion in a merge patch.
    api = CoreV1Api(cluster._api_client)
    with pytest.raises(ApiException) as caught:
        api.patch_node(
            "pool-a000000",
            {"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": True}},
            _content_type="application/merge-patch+json",
        )
    assert caught.value.status == 409


def test_evictions(world: SandboxServer, cluster: KubernetesCluster) -> None:
    pods = cluster.list_pods()
    batch = _pod_named(pods, "batch-")[0]
    web = _pod_named(pods, "web-")[0]
    assert cluster.evict(batch.namespace, batch.name, grace_period_seconds=0) == "evicted"
    assert cluster.evict(web.namespace, web.name) == "blocked"  # the PDB wants both web pods up
    assert cluster.evict("default", "ghost") == "not_found"
    remaining = {p.key: p for p in cluster.list_pods()}
    assert batch.key not in remaining or remaining[batch.key].terminating
    assert web.key in remaining and not remaining[web.key].terminating


def test_delete_node_ignores_a_node_already_gone(cluster: KubernetesCluster) -> None:
    cluster.delete_node("pool-manual000000")
    cluster.delete_node("pool-manual000000")
    assert cluster.get_node("pool-manual000000") is None


SERVER_ERROR_CASES: list[tuple[str, tuple[str, str, str], Callable[[KubernetesCluster], object], str]] = [
    ("list nodes", ("k8s", "GET", "nodes"), lambda c: c.list_nodes(), "list nodes"),
    ("list pods", ("k8s", "GET", "pods"), lambda c: c.list_pods(), "list pods"),
    ("get node", ("k8s", "GET", "nodes"), lambda c: c.get_node("pool-a000000"), "get node pool-a000000"),
    ("cordon", ("k8s", "PATCH", "nodes"), lambda c: c.cordon("pool-a000000", taint=DRAIN), "cordon node pool-a000000"),
    ("evict", ("k8s", "POST", "eviction"), lambda c: c.evict("default", "ghost"), "evict pod default/ghost"),
    ("delete node", ("k8s", "DELETE", "nodes"), lambda c: c.delete_node("pool-a000000"), "delete node pool-a000000"),
    ("list disruption budgets", ("k8s", "GET", "poddisruptionbudgets"), lambda c: c.list_disruption_budgets(),
     "list poddisruptionbudgets"),
    ("list daemonsets", ("k8s", "GET", "daemonsets"), lambda c: c.list_daemonsets(), "list daemonsets"),
]


@pytest.mark.parametrize(
    ("target", "call", "named"), [c[1:] for c in SERVER_ERROR_CASES], ids=[c[0] for c in SERVER_ERROR_CASES]
)
def test_a_server_error_becomes_a_cluster_error_naming_the_call(
    world: SandboxServer,
    cluster: KubernetesCluster,
    target: tuple[str, str, str],
    call: Callable[[KubernetesCluster], object],
    named: str,
) -> None:
    world.world.inject_fault(target, status=500, message="etcd is on fire")
    with pytest.raises(ClusterError, match=named) as caught:
        call(cluster)
    assert isinstance(caught.value, KubernetesApiError) and caught.value.status == 500
    assert "etcd is on fire" in str(caught.value)
    assert isinstance(caught.value.__cause__, ApiException)


def _port_methods(protocol: type) -> list[str]:
    return [name for name in vars(protocol) if not name.startswith("_") and callable(vars(protocol)[name])]


@pytest.mark.parametrize("method", _port_methods(ports.Cluster))
def test_implements_the_cluster_port(method: str) -> None:
    expected = inspect.signature(getattr(ports.Cluster, method))
    actual = inspect.signature(getattr(KubernetesCluster, method))
    assert [(p.name, p.kind, p.default) for p in actual.parameters.values()] == [
        (p.name, p.kind, p.default) for p in expected.parameters.values()
    ]


def test_get_config_map(world: SandboxServer, cluster: KubernetesCluster) -> None:
    assert cluster.get_config_map("kube-system", "absent") is None
    body = V1ConfigMap(metadata=V1ObjectMeta(name="cm", namespace="kube-system"), data={"priorities": "10: [a]"})
    with kube_api_client(world) as api:
        CoreV1Api(api).create_namespaced_config_map("kube-system", body)
    assert cluster.get_config_map("kube-system", "cm") == {"priorities": "10: [a]"}


# A world with budgets in two namespaces (four, so the page size of two needs `continue`), and batch pods
# carrying what batch-safe scale-down reads: local volumes, a deadline, an annotation.
_BATCH = {
    "name": "batch", "kind": "Job", "count": 2, "requests": {"cpu": "500m", "memory": "256Mi"}, "duration": "60s",
    "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
    "volumes": [{"name": "scratch", "emptyDir": {}}, {"name": "shm", "emptyDir": {"medium": "Memory"}},
                {"name": "cache", "hostPath": {"path": "/var/cache/batch", "type": "DirectoryOrCreate"}}],
    "active_deadline": "2h",
}
_BUDGETS = [
    {"name": "web", "selector": {"app": "web"}, "min_available": 2},  # both web pods must stay: 0 allowed
    {"name": "batch", "selector": {"job-name": "batch"}, "max_unavailable": 1},  # 2 healthy, 1 desired
    {"name": "all", "selector": {}, "min_available": "50%"},  # 5 pods in default (huge pends): 4 healthy, 3 desired
    {"name": "proxy", "namespace": "kube-system", "selector": {"app": "kube-proxy"}, "max_unavailable": 1},
]


@pytest.fixture
def batch_world(sandbox_factory: SandboxFactory) -> SandboxServer:
    workloads = [_BATCH if w["name"] == "batch" else w for w in sandbox_world.SCENARIO["workloads"]]
    return sandbox_factory(
        sandbox_world.scenario(workloads=workloads, pdbs=_BUDGETS), clock=ManualClock(SANDBOX_START)
    )


@pytest.fixture
def batch_cluster(batch_world: SandboxServer) -> Iterator[KubernetesCluster]:
    adapter = KubernetesCluster.from_settings(sandbox_world.settings_for(batch_world), page_size=2)
    yield adapter
    adapter.close()


def test_list_disruption_budgets(batch_world: SandboxServer, batch_cluster: KubernetesCluster) -> None:
    budgets = {(b.namespace, b.name): b for b in batch_cluster.list_disruption_budgets()}
    assert {key: b.disruptions_allowed for key, b in budgets.items()} == {
        ("default", "all"): 1,
        ("default", "batch"): 1,
        ("default", "web"): 0,
        ("kube-system", "proxy"): 1,
    }
    assert batch_world.world.counters.k8s["LIST poddisruptionbudgets"] == 2  # two pages
    pods = batch_cluster.list_pods()
    web, batch = _pod_named(pods, "web-"), _pod_named(pods, "batch-")
    assert all(budgets[("default", "web")].covers(p) for p in web)
    assert not any(budgets[("default", "web")].covers(p) for p in batch)
    assert all(budgets[("default", "all")].covers(p) for p in web + batch)
    proxies = [p for p in pods if p.is_daemonset]
    assert proxies and all(budgets[("kube-system", "proxy")].covers(p) for p in proxies)
    assert not any(budgets[("default", "all")].covers(p) for p in proxies)


def test_list_pods_reads_local_volumes_start_time_and_deadline(batch_cluster: KubernetesCluster) -> None:
    pods = batch_cluster.list_pods()
    batch = _pod_named(pods, "batch-")
    assert len(batch) == 2
    for pod in batch:
        assert pod.local_volumes == ("scratch", "cache")
        assert pod.active_deadline_seconds == 7200
        assert pod.started_at == SANDBOX_START  # bound and started at once
        assert pod.annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    (huge,) = _pod_named(pods, "huge-")
    assert (huge.started_at, huge.local_volumes, huge.active_deadline_seconds) == (None, (), None)


class _FakePolicy:
    def __init__(self, *items: dict[str, Any]) -> None:
        self.items = list(items)

    def list_pod_disruption_budget_for_all_namespaces(self, **_: Any) -> _FakeResponse:
        return _FakeResponse({"items": self.items, "metadata": {}})


def test_an_unreadable_disruption_budget_is_a_cluster_error_naming_it() -> None:
    cluster = KubernetesCluster(ApiClient(Configuration()))
    bad = pdb_json({"matchExpressions": [{"key": "app", "operator": "Near"}]}, _HEALTHY, name="odd")
    cluster._policy = _FakePolicy(pdb_json({}, _HEALTHY), bad)  # type: ignore[assignment]
    with pytest.raises(ClusterError, match=r"list poddisruptionbudgets: cannot read 'odd': spec\.selector operator Near"):
        cluster.list_disruption_budgets()


def test_write_config_map_creates_then_merges(world: SandboxServer, cluster: KubernetesCluster) -> None:
    assert cluster.get_config_map("kube-system", "cluster-autoscaler-status") is None
    cluster.write_config_map("kube-system", "cluster-autoscaler-status", data={"status": "one"},
                             annotations={"a": "1"})
    assert cluster.get_config_map("kube-system", "cluster-autoscaler-status") == {"status": "one"}
    # Someone else's key and annotation survive our next write.
    stored = world.world.k8s_get("configmaps", "kube-system", "cluster-autoscaler-status")
    world.world.k8s_replace("configmaps", "kube-system", "cluster-autoscaler-status", {
        **stored, "metadata": {**stored["metadata"], "annotations": {"a": "1", "theirs": "x"}},
        "data": {"status": "one", "other": "kept"}})
    cluster.write_config_map("kube-system", "cluster-autoscaler-status", data={"status": "two"},
                             annotations={"a": "2"})
    assert cluster.get_config_map("kube-system", "cluster-autoscaler-status") == {"status": "two", "other": "kept"}
    annotations = world.world.k8s_get("configmaps", "kube-system", "cluster-autoscaler-status")["metadata"]["annotations"]
    assert annotations == {"a": "2", "theirs": "x"}
    assert world.world.counters.k8s["CREATE configmaps"] == 1 and world.world.counters.k8s["PATCH configmaps"] == 2


def test_write_config_map_in_a_missing_namespace_is_a_cluster_error(cluster: KubernetesCluster) -> None:
    with pytest.raises(ClusterError, match="write configmap nowhere/status"):
        cluster.write_config_map("nowhere", "status", data={"status": "x"}, annotations={})


_BIG_ONLY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["big"]}]}]}}}


def test_list_daemonsets_reads_every_page_and_each_template(sandbox_factory: SandboxFactory) -> None:
    daemonsets = [
        {"name": "kube-proxy", "requests": {"cpu": "100m", "memory": "128Mi"}},
        {"name": "gpu-agent", "requests": {"cpu": "2", "memory": "4Gi"}, "affinity": _BIG_ONLY,
         "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        {"name": "logs", "namespace": "monitoring", "requests": {"cpu": "50m", "memory": "64Mi"},
         "node_selector": {"pool": "a"}, "tolerations": []},
    ]
    server = sandbox_factory(sandbox_world.scenario(daemonsets=daemonsets), clock=ManualClock(SANDBOX_START))
    adapter = KubernetesCluster.from_settings(sandbox_world.settings_for(server), page_size=2)
    try:
        listed = {d.key: d for d in adapter.list_daemonsets()}
    finally:
        adapter.close()
    assert server.world.counters.k8s["LIST daemonsets"] == 2  # three DaemonSets, two pages
    assert listed == {
        "kube-system/kube-proxy": DaemonSet("kube-system", "kube-proxy", Resources(100, 128 * 2**20, 1),
                                            tolerations=(Toleration(operator="Exists"),)),
        "kube-system/gpu-agent": DaemonSet(
            "kube-system", "gpu-agent", Resources(2000, 4 * 2**30, 1),
            node_affinity=(NodeSelectorTerm((SelectorRequirement("pool", "In", ("big",)),)),),
            tolerations=(Toleration("gpu", "Exists", "", "NoSchedule"),),
        ),
        "monitoring/logs": DaemonSet("monitoring", "logs", Resources(50, 64 * 2**20, 1), node_selector={"pool": "a"}),
    }


def test_a_daemonset_is_read_as_its_pods_would_be() -> None:
    template = {
        "initContainers": [container(cpu="1", memory="1Gi")],
        "containers": [dict(container(cpu="200m", memory="100Mi"), ports=[{"containerPort": 9100}])],
        "overhead": {"cpu": "50m"},
        "hostNetwork": True,
    }
    daemonset = daemonset_from_json(
        {"metadata": {"namespace": "ns", "name": "exporter"}, "spec": {"template": {"spec": template}}}
    )
    assert daemonset.requests == requests_from_spec(template)  # init containers and overhead, as for a Pod
    assert daemonset.host_ports == (HostPort(9100),) and daemonset.host_network


def test_a_daemonset_affinity_we_cannot_evaluate_counts_it_everywhere_it_tolerates() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "spec.unknown", "operator": "In", "values": ["x"]}]}]}}}
    daemonset = daemonset_from_json({"metadata": {"namespace": "ns", "name": "odd"},
                                     "spec": {"template": {"spec": {"containers": [], "affinity": affinity}}}})
    assert daemonset.node_affinity == ()


class _FakeCustom:
    """Answers the CapacityBuffer list with 404 (no CRD) until `served`, counting the calls."""

    def __init__(self) -> None:
        self.calls, self.served = 0, False

    def list_cluster_custom_object(self, *args: Any, **kwargs: Any) -> _FakeResponse:
        self.calls += 1
        if not self.served:
            raise ApiException(status=404, reason="Not Found")
        return _FakeResponse({"items": [], "metadata": {}})


def test_a_cluster_without_the_buffer_crd_is_asked_again_only_after_the_recheck_time() -> None:
    from shared.adapters.kubernetes import CRD_ABSENT_RECHECK

    cluster = KubernetesCluster(ApiClient(Configuration()))
    custom, now = _FakeCustom(), [1000.0]
    cluster._custom = custom  # type: ignore[assignment]  # stand-in for the generated CustomObjectsApi
    cluster._monotonic = lambda: now[0]
    assert cluster.list_capacity_buffers() is None and custom.calls == 1
    now[0] += CRD_ABSENT_RECHECK / 2
    assert cluster.list_capacity_buffers() is None and custom.calls == 1  # believed: no call per poll
    custom.served = True  # the CRD is installed
    now[0] += CRD_ABSENT_RECHECK / 2
    assert cluster.list_capacity_buffers() == [] and custom.calls == 2  # seen within the recheck time
    assert cluster.list_capacity_buffers() == [] and custom.calls == 3  # served: listed every poll
