"""Decoder equivalence: the typed path (kube_decode) reads every object as the previous path (json.loads) did.

For each list response in a corpus, the previous path (`json.loads`, then the converter on each item's
dict) and the typed path (`decode_page` on the same bytes, then the converter on each struct) must give
equal outcomes: equal domain objects, or the same exception type and message. The typed path is checked
both ways it decodes a page: whole (no `known`) and item by item (an empty `known`).

The corpus: the sandbox's objects (every scenario but many-idle, as its Kubernetes API double serves
them), recorded responses of real clusters (tests/fixtures/kube_responses/, see its README), and odd
objects built here. Where the JSON shape itself is wrong the typed path reports the item `Malformed`
instead; `WRONG_SHAPES` documents what the previous path did with each, and the list tests check that
`KubernetesCluster` reports such an item and keeps a placeholder, never failing the whole list.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration

from sandbox.api import kube_api
from sandbox.api.wire import Request
from sandbox.world import World
from shared.adapters.kube_decode import (
    BudgetItem,
    DaemonSetItem,
    EventItem,
    Malformed,
    NodeItem,
    PodItem,
    decode_page,
)
from shared.adapters.kubernetes import (
    KubernetesCluster,
    daemonset_from_json,
    disruption_budget_from_json,
    event_time,
    node_from_json,
    pod_from_json,
)
from tests.fixtures.sandbox import SANDBOX_START
from tests.shared.adapters import sandbox_world

RESPONSES = Path(__file__).parents[2] / "fixtures" / "kube_responses"
SCENARIOS = Path(__file__).parents[3] / "sandbox" / "scenarios"


@dataclass(frozen=True)
class Kind:
    """One kind we list: its list kind, the struct the typed path decodes it to, the converter, the sandbox's URL."""

    list_kind: str
    struct: type
    convert: Callable[[Any], Any]
    path: str


POD = Kind("PodList", PodItem, pod_from_json, "/api/v1/pods")
NODE = Kind("NodeList", NodeItem, node_from_json, "/api/v1/nodes")
BUDGET = Kind("PodDisruptionBudgetList", BudgetItem, disruption_budget_from_json,
              "/apis/policy/v1/poddisruptionbudgets")
DAEMONSET = Kind("DaemonSetList", DaemonSetItem, daemonset_from_json, "/apis/apps/v1/daemonsets")
EVENT = Kind("EventList", EventItem, event_time, "/api/v1/events")
KINDS = (POD, NODE, BUDGET, DAEMONSET, EVENT)
BY_LIST_KIND = {k.list_kind: k for k in KINDS}

Outcome = tuple[Any, ...]


def _outcome(convert: Callable[[Any], Any], obj: Any) -> Outcome:
    """What a converter made of an object: ("ok", value) or ("raises", exception type, message)."""
    try:
        return ("ok", convert(obj))
    except Exception as exc:  # noqa: BLE001 - any exception is an outcome to compare
        return ("raises", type(exc).__name__, str(exc))


def _typed_outcome(convert: Callable[[Any], Any], item: Any) -> Outcome:
    if isinstance(item, Malformed):
        return ("malformed", item.error)
    return _outcome(convert, item)


# A JSON number beyond a float's range: json.dumps cannot write one (it writes the non-JSON `Infinity`), so
# objects hold this marker and `dumps` puts the literal number in its place.
OUT_OF_RANGE = "<the JSON number 1e400>"


def dumps(obj: Any, *, ascii_only: bool = True) -> bytes:
    return json.dumps(obj, ensure_ascii=ascii_only).replace(json.dumps(OUT_OF_RANGE), "1e400").encode()


def list_bytes(kind: Kind, items: Sequence[Any], *, ascii_only: bool = True) -> bytes:
    return dumps({"kind": kind.list_kind, "apiVersion": "v1", "metadata": {"resourceVersion": "7"},
                  "items": list(items)}, ascii_only=ascii_only)


@dataclass(frozen=True)
class Compared:
    """One item read both ways."""

    name: str
    previous: Outcome
    typed: Outcome  # whole-page decoding
    typed_by_item: Outcome  # item by item (with `known`)


def compare(kind: Kind, data: bytes) -> list[Compared]:
    """Every item of one list response, read by the previous path and both typed ways."""
    items = json.loads(data)["items"] or []
    whole = decode_page(data, kind.struct).items
    by_item = decode_page(data, kind.struct, known=frozenset()).items
    assert len(whole) == len(by_item) == len(items)
    out = []
    for raw, typed, typed_item in zip(items, whole, by_item, strict=True):
        metadata = raw.get("metadata") if isinstance(raw, dict) else None
        name = str(metadata.get("name")) if isinstance(metadata, dict) else repr(raw)[:60]
        out.append(Compared(name, _outcome(kind.convert, raw), _typed_outcome(kind.convert, typed),
                            _typed_outcome(kind.convert, typed_item)))
    return out


def divergences(kind: Kind, data: bytes) -> list[str]:
    """Items whose outcomes differ between the paths, each with both outcomes: empty when they agree."""
    return [f"{c.name}: previous {c.previous!r}, typed {c.typed!r}, typed by item {c.typed_by_item!r}"
            for c in compare(kind, data) if not c.previous == c.typed == c.typed_by_item]


# --- 1. The sandbox's objects -------------------------------------------------------------------------------

SANDBOX_SCENARIOS = sorted(p.stem for p in SCENARIOS.glob("*.json") if p.stem != "many-idle") + ["adapters"]


@cache
def sandbox_lists(scenario: str) -> dict[str, bytes]:
    """The scenario's list responses as its Kubernetes API double serves them, once it has run a while.

    Every node group grows by two so each kind of node (spot, flexible, AKS pool, k3s, kubeadm, virtual)
    has registered ones, and the pods have been scheduled, bound, started and some finished.
    many-idle is left out: its 500 nodes take seconds to build and add no shape the others lack.
    """
    world = World(sandbox_world.SCENARIO if scenario == "adapters" else scenario, seed=0, start=SANDBOX_START)
    world.advance_by(120)
    for group in list(world._groups.values()):
        try:
            world.set_capacity(group, group.capacity + 2)
        except Exception:  # noqa: BLE001 - a quota or Spot refusal leaves that group as it is
            pass
    world.advance_by(900)
    auth = {"Authorization": f"Bearer {world.token}"}
    out = {}
    for kind in KINDS:
        response = kube_api.handle(world, Request.build("GET", kind.path, headers=auth))
        assert response.status == 200, response.body[:300]
        out[kind.list_kind] = response.body
    return out


@pytest.mark.parametrize("scenario", SANDBOX_SCENARIOS)
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.list_kind)
def test_sandbox_objects_read_alike_on_both_paths(scenario: str, kind: Kind) -> None:
    data = sandbox_lists(scenario)[kind.list_kind]
    assert divergences(kind, data) == []


def test_the_sandbox_corpus_holds_every_kind_and_reads_it() -> None:
    """The equivalence above is no empty claim: every kind is there, and most objects convert."""
    counts: dict[str, list[int]] = {k.list_kind: [0, 0] for k in KINDS}
    for scenario in SANDBOX_SCENARIOS:
        for kind in KINDS:
            for compared in compare(kind, sandbox_lists(scenario)[kind.list_kind]):
                counts[kind.list_kind][0] += 1
                counts[kind.list_kind][1] += compared.previous[0] == "ok"
    assert counts["PodList"][1] >= 500 and counts["NodeList"][1] >= 80
    assert counts["DaemonSetList"][1] >= 20 and counts["PodDisruptionBudgetList"][1] >= 3
    assert counts["EventList"][1] >= 50
    assert all(ok == total for total, ok in counts.values()), counts  # the sandbox writes no malformed object


# --- 2. Recorded responses of real clusters -------------------------------------------------------------------

RECORDED = sorted(p.name for p in RESPONSES.glob("*.json"))


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_responses_read_alike_on_both_paths(name: str) -> None:
    data = (RESPONSES / name).read_bytes()
    kind = BY_LIST_KIND[json.loads(data)["kind"]]
    assert divergences(kind, data) == []


def test_the_recorded_corpus_covers_every_kind_and_converts() -> None:
    found: dict[str, int] = {}
    for name in RECORDED:
        data = (RESPONSES / name).read_bytes()
        kind = BY_LIST_KIND[json.loads(data)["kind"]]
        results = compare(kind, data)
        assert all(c.previous[0] == "ok" for c in results), name  # real objects are all readable
        found[kind.list_kind] = found.get(kind.list_kind, 0) + len(results)
    assert set(found) == {k.list_kind for k in KINDS}
    assert found["PodList"] >= 9 and found["NodeList"] >= 5 and found["EventList"] >= 13
    assert found["DaemonSetList"] >= 1
    assert found["PodDisruptionBudgetList"] == 0  # only an empty one was found: see the README


# --- 3. Odd objects ------------------------------------------------------------------------------------------

TIME = "2024-05-01T12:00:00Z"


def pod(spec: Any = None, *, metadata: Any = None, status: Any = None, **top: Any) -> dict[str, Any]:
    """A pod; `metadata`/`spec`/`status` given as a dict are merged into a plain running pod's."""
    base_meta = {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "1", "creationTimestamp": TIME}
    base_spec = {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}
    obj = {
        "metadata": {**base_meta, **metadata} if isinstance(metadata, dict) else base_meta,
        "spec": {**base_spec, **spec} if isinstance(spec, dict) else base_spec,
        "status": {"phase": "Running", **status} if isinstance(status, dict) else {"phase": "Running"},
    }
    obj.update(top)
    return obj


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "c", **fields}


def requests(**amounts: Any) -> dict[str, Any]:
    return {"requests": dict(amounts)}


QUANTITIES = ["1e3", "100Ei", "9223372036854775807", "9223372036854775808", "0.5", "1.5Gi", "500m", "0.5m",
              "12345678901234567890Ki", "1E", "1e-3", "+1", "-1", "", "lots", "1 Gi", "NaN",
              1, 0, 0.5, 1e3, 10**30, -1, True, None, [], {}]
RESOURCES = ["cpu", "memory", "ephemeral-storage", "pods", "nvidia.com/gpu", "hugepages-2Mi", "unknown-thing"]

EVERY_OPERATOR = [{"key": "k", "operator": op, "values": values} for op, values in [
    ("In", ["a", "b"]), ("NotIn", ["a"]), ("Exists", None), ("DoesNotExist", []), ("Gt", ["3"]), ("Lt", ["9"]),
    ("Near", ["x"]), ("", None), (None, None)]]

VOLUMES = [
    {"name": "host", "hostPath": {"path": "/var/log", "type": "Directory"}},
    {"name": "scratch", "emptyDir": {}},
    {"name": "tmpfs", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
    {"name": "hugepages", "emptyDir": {"medium": "HugePages-2Mi"}},
    {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
    {"name": "eph", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}},
    {"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 420}},
    {"name": "sec", "secret": {"secretName": "s"}},
    {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
    {"name": "info", "downwardAPI": {"items": []}},
    {"name": "csi", "csi": {"driver": "file.csi.azure.com", "volumeAttributes": {"secretName": "x"}}},
    {"name": "nfs", "nfs": {"server": "10.0.0.4", "path": "/export"}},
    {"name": "disk", "azureDisk": {"diskName": "d", "diskURI": "/subscriptions/x"}},
    {"name": "files", "azureFile": {"secretName": "s", "shareName": "share"}},
    {"name": "img", "image": {"reference": "example/data:1"}},
    {"name": "nothing"},
    {"emptyDir": {}},
    {},
]

POD_CASES: list[tuple[str, Any]] = [
    ("plain", pod()),
    ("missing requests", pod({"containers": [container()]})),
    ("empty resources", pod({"containers": [container(resources={})]})),
    ("limits only", pod({"containers": [container(resources={"limits": {"cpu": "2", "memory": "1Gi"}})]})),
    ("requests below limits", pod({"containers": [container(resources={"requests": {"cpu": "1"},
                                                                          "limits": {"cpu": "2", "memory": "1Gi"}})]})),
    ("init containers", pod({"initContainers": [container(resources=requests(cpu="2", memory="1Gi")),
                                                container(resources=requests(cpu="500m"))]})),
    ("sidecar restartPolicy Always", pod({"initContainers": [
        container(restartPolicy="Always", resources=requests(cpu="300m"),
                  ports=[{"containerPort": 9000, "hostPort": 9000}]),
        container(resources=requests(cpu="1")),
    ]})),
    ("init container restartPolicy Never", pod({"initContainers": [container(restartPolicy="Never")]})),
    ("pod overhead", pod({"overhead": {"cpu": "250m", "memory": "120Mi"}})),
    ("pod-level resources", pod({"resources": {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"memory": "2Gi", "hugepages-2Mi": "1Gi", "nvidia.com/gpu": "1"}}})),
    ("pod-level limits only", pod({"resources": {"limits": {"cpu": "3"}}})),
    ("extended resources", pod({"containers": [container(resources=requests(**{"nvidia.com/gpu": "2",
                                                                              "example.com/foo": 3}))]})),
    *[(f"quantity {resource}={quantity!r}",
       pod({"containers": [container(resources=requests(**{resource: quantity}))]}))
      for resource in RESOURCES for quantity in QUANTITIES],
    *[(f"overhead cpu={quantity!r}", pod({"overhead": {"cpu": quantity}})) for quantity in QUANTITIES[:8]],
    ("unknown fields at every level", pod(
        {"containers": [container(resources={"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}], "x": 1},
                                  futureField={"a": [1, 2]}, securityContext={"privileged": False, "new": True})],
         "futureSpecField": "x", "tolerations": [{"key": "k", "operator": "Exists", "newField": 1}]},
        metadata={"futureMetaField": {"deep": [None, {"x": 1}]}, "managedFields": [{"manager": "kubectl"}]},
        status={"futureStatusField": 3, "containerStatuses": [{"name": "c", "ready": True}]},
        futureTopLevel=[1, "two", None])),
    ("spec null", pod(spec=None) | {"spec": None}),
    ("metadata null", pod() | {"metadata": None}),
    ("status null", pod() | {"status": None}),
    ("containers null", pod({"containers": None})),
    ("initContainers null", pod({"initContainers": None})),
    ("resources null", pod({"containers": [container(resources=None)]})),
    ("requests null", pod({"containers": [container(resources={"requests": None, "limits": None})]})),
    ("quantity null", pod({"containers": [container(resources=requests(cpu=None))]})),
    ("labels and annotations null", pod(metadata={"labels": None, "annotations": None})),
    ("affinity, tolerations, volumes, nodeSelector null",
     pod({"affinity": None, "tolerations": None, "volumes": None, "nodeSelector": None, "overhead": None})),
    ("ownerReferences null", pod(metadata={"ownerReferences": None})),
    ("labels a list", pod(metadata={"labels": ["app"]})),
    ("labels a list of pairs", pod(metadata={"labels": [["app", "web"]]})),
    ("labels a string", pod(metadata={"labels": "app=web"})),
    ("label value a number", pod(metadata={"labels": {"app": 1}})),
    ("annotations a list", pod(metadata={"annotations": ["a"]})),
    ("nodeSelector a list", pod({"nodeSelector": ["a"]})),
    ("tolerations an object", pod({"tolerations": {"key": "k"}})),
    ("a toleration null", pod({"tolerations": [None]})),
    ("affinity a string", pod({"affinity": "none"})),
    ("volumes an object", pod({"volumes": {"name": "v"}})),
    ("a volume null", pod({"volumes": [None]})),
    ("resources a string", pod({"containers": [container(resources="big")]})),
    ("requests a list", pod({"containers": [container(resources={"requests": ["cpu"]})]})),
    ("ports an object", pod({"containers": [container(ports={"containerPort": 80})]})),
    ("missing metadata", {k: v for k, v in pod().items() if k != "metadata"}),
    ("empty object", {}),
    ("metadata only", {"metadata": {"name": "bare", "namespace": "ns"}}),
    ("unicode names", pod(metadata={"name": "pödé-日本-🚀", "namespace": "ñs",
                                    "labels": {"app.kubernetes.io/name": "wéb-☃", "ключ": "значение"},
                                    "annotations": {"note": "emoji 🚀 and \u2028 line separator", "nul": "a\u0000b"}},
                          spec={"nodeName": "nœud-1"})),
    ("hostNetwork ports", pod({"hostNetwork": True, "containers": [container(ports=[
        {"containerPort": 8080}, {"containerPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
        {"containerPort": 9090, "hostPort": 19090, "name": "metrics"}])]})),
    ("hostPort without hostNetwork", pod({"containers": [container(ports=[{"containerPort": 80, "hostPort": 8080},
                                                                          {"containerPort": 81}])]})),
    ("hostPort a string", pod({"containers": [container(ports=[{"containerPort": 80, "hostPort": "8080"}])]})),
    ("hostPort not a number", pod({"containers": [container(ports=[{"hostPort": "http"}])]})),
    ("hostPID hostIPC privileged", pod({"hostPID": True, "hostIPC": True, "containers": [
        container(securityContext={"privileged": True})]})),
    ("volumes of each kind", pod({"volumes": VOLUMES})),
    ("tolerations with Exists", pod({"tolerations": [
        {"operator": "Exists"}, {"key": "k", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "k", "value": "v"}, {"key": "k", "operator": "Gt", "value": "3"}, {}]})),
    ("node affinity with every operator", pod({"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": EVERY_OPERATOR},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]},
                             {"key": "spec.unknown", "operator": "NotIn", "values": ["x"]},
                             {"key": "metadata.name", "operator": "Exists"}]},
            {}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": EVERY_OPERATOR}}]}}})),
    ("pod affinity with every operator", pod({"affinity": {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname",
             "labelSelector": {"matchLabels": {"app": "db"}, "matchExpressions": EVERY_OPERATOR},
             "matchLabelKeys": ["app", "missing"], "mismatchLabelKeys": ["tier"], "namespaces": ["a", "b"]},
            {"topologyKey": "zone", "labelSelector": None, "namespaceSelector": {}},
            {"topologyKey": "zone", "labelSelector": {}, "namespaceSelector": {"matchLabels": {"team": "x"}}}]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchExpressions": EVERY_OPERATOR}}],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"topologyKey": "zone"}}]}}},
        metadata={"labels": {"app": "web", "tier": "front"}})),
    ("topology spread constraints", pod({"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash"], "minDomains": 3,
         "nodeAffinityPolicy": "Ignore", "nodeTaintsPolicy": "Honor"},
        {"maxSkew": 2, "topologyKey": "host", "whenUnsatisfiable": "ScheduleAnyway"},
        {"maxSkew": 1, "topologyKey": "host", "whenUnsatisfiable": "Sometimes", "nodeAffinityPolicy": "Maybe",
         "labelSelector": {"matchExpressions": EVERY_OPERATOR}},
        {"topologyKey": "host", "minDomains": "2"}]},
        metadata={"labels": {"app": "web", "pod-template-hash": "abc"}})),
    ("minDomains not a number", pod({"topologySpreadConstraints": [{"topologyKey": "h", "minDomains": "x"}]})),
    ("resourceClaims", pod({"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]})),
    ("deletionTimestamp",
     pod(metadata={"deletionTimestamp": "2024-05-01T12:05:00Z", "deletionGracePeriodSeconds": 30})),
    ("deletionTimestamp empty", pod(metadata={"deletionTimestamp": ""})),
    ("deletionTimestamp with offset", pod(metadata={"deletionTimestamp": "2024-05-01T14:05:00+02:00"})),
    ("deletionTimestamp malformed", pod(metadata={"deletionTimestamp": "yesterday"})),
    ("deletionTimestamp a number", pod(metadata={"deletionTimestamp": 1714564800})),
    ("creationTimestamp missing", pod(metadata={"creationTimestamp": None})),
    ("creationTimestamp malformed", pod(metadata={"creationTimestamp": "2024-13-45T99:00:00Z"})),
    ("creationTimestamp a number", pod(metadata={"creationTimestamp": 5})),
    ("startTime", pod(status={"startTime": TIME})),
    ("startTime malformed", pod(status={"startTime": "soon"})),
    ("status conditions missing", pod(spec={"nodeName": None}, status={"phase": "Pending"})),
    ("unschedulable condition", pod(spec={"nodeName": None}, status={"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}]})),
    ("conditions null", pod(status={"conditions": None})),
    ("conditions without fields", pod(status={"conditions": [{}, {"type": "PodScheduled"}]})),
    ("a condition null", pod(status={"conditions": [None]})),
    ("phase missing", pod(status={"phase": None})),
    ("status reason and long message", pod(status={"phase": "Failed", "reason": "Evicted", "message": "m" * 3000})),
    ("status message a number", pod(status={"message": 42})),
    ("priority", pod({"priority": 1000000000})),
    ("priority a string", pod({"priority": "5"})),
    ("priority not a number", pod({"priority": "high"})),
    ("priority a float", pod({"priority": 1.5})),
    ("activeDeadlineSeconds", pod({"activeDeadlineSeconds": 600, "terminationGracePeriodSeconds": 30})),
    ("activeDeadlineSeconds a string", pod({"activeDeadlineSeconds": "600"})),
    ("terminationGracePeriodSeconds a bool", pod({"terminationGracePeriodSeconds": True})),
    ("owner controller", pod(metadata={"ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "x", "controller": False},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-2", "uid": "y", "controller": True,
         "blockOwnerDeletion": True}]})),
    ("owner without kind", pod(metadata={"ownerReferences": [{"controller": True}]})),
    ("mirror pod", pod(metadata={"annotations": {"kubernetes.io/config.mirror": "abc"}})),
    ("nodeName empty", pod({"nodeName": ""})),
    ("uid and name numbers", pod(metadata={"uid": 7, "name": 8, "namespace": 9})),
]

NODE_BASE = {"metadata": {"name": "n1", "uid": "nu", "resourceVersion": "3", "creationTimestamp": TIME,
                          "labels": {"kubernetes.io/os": "linux"}},
             "spec": {"providerID": "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/"
                                    "virtualMachineScaleSets/pool/virtualMachines/0"},
             "status": {"allocatable": {"cpu": "3860m", "memory": "13Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                        "addresses": [{"type": "InternalIP", "address": "10.0.0.4"}]}}


def _with_parts(base: dict[str, Any], parts: dict[str, Any]) -> dict[str, Any]:
    """`base` with some of its metadata/spec/status fields replaced; a part not a dict replaces the whole part."""
    out = dict(base)
    for key, value in parts.items():
        out[key] = {**base[key], **value} if isinstance(value, dict) and key in base else value
    return out


def node(**parts: Any) -> dict[str, Any]:
    return _with_parts(NODE_BASE, parts)


NODE_CASES: list[tuple[str, Any]] = [
    ("plain", node()),
    *[(f"allocatable {resource}={quantity!r}", node(status={"allocatable": {resource: quantity}}))
      for resource in RESOURCES for quantity in QUANTITIES],
    ("allocatable of every kind", node(status={"allocatable": {
        "cpu": "2", "memory": "7120616Ki", "pods": "30", "ephemeral-storage": "119716326407", "hugepages-1Gi": "0",
        "hugepages-2Mi": "0", "attachable-volumes-azure-disk": "8", "nvidia.com/gpu": "1", "example.com/dongle": 4}})),
    ("allocatable null", node(status={"allocatable": None})),
    ("allocatable a list", node(status={"allocatable": ["cpu"]})),
    ("status missing", {"metadata": NODE_BASE["metadata"], "spec": NODE_BASE["spec"]}),
    ("spec null", node(spec=None)),
    ("metadata null", node(metadata=None)),
    ("status null", node(status=None)),
    ("conditions", node(status={"conditions": [
        {"type": "Ready", "status": "False"}, {"type": "Ready", "status": "Unknown"},
        {"type": "MemoryPressure", "status": "True"}, {"type": "KernelDeadlock", "status": "True"},
        {"status": "True"}, {"type": None, "status": "True"}, {}]})),
    ("conditions missing", node(status={"conditions": None})),
    ("a condition null", node(status={"conditions": [None]})),
    ("taints", node(spec={"taints": [
        {"key": "gpu", "value": "true", "effect": "NoSchedule"}, {"key": "k"}, {"effect": "NoExecute"},
        {"key": "ToBeDeletedByClusterAutoscaler", "value": "1714564800", "effect": "NoSchedule", "timeAdded": TIME}]})),
    ("taints null", node(spec={"taints": None})),
    ("a taint null", node(spec={"taints": [None]})),
    ("unschedulable", node(spec={"unschedulable": True})),
    ("unschedulable a string", node(spec={"unschedulable": "false"})),
    ("providerID missing", node(spec={"providerID": None})),
    ("addresses", node(status={"addresses": [
        {"type": "InternalIP", "address": "10.0.0.4"}, {"type": "InternalIP", "address": "fd00::4"},
        {"type": "ExternalIP", "address": "1.2.3.4"}, {"type": "Hostname", "address": "n1"},
        {"type": "InternalIP", "address": ""}, {"type": "InternalIP"}]})),
    ("an address without type", node(status={"addresses": [{"address": "10.0.0.9"}]})),
    ("unknown fields at every level", node(metadata={"x": {"y": [1]}, "managedFields": [{"manager": "kubelet"}]},
                                          spec={"podCIDRs": ["10.244.0.0/24"], "configSource": {}},
                                          status={"images": [{"names": ["a"], "sizeBytes": 1}],
                                                  "nodeInfo": {"kubeletVersion": "v1.30.0"}, "x": None}, extra=1)),
    ("unicode names",
     node(metadata={"name": "nœud-☃-🚀", "labels": {"zone": "東京-1"}, "annotations": {"a": "é"}})),
    ("labels a list", node(metadata={"labels": ["a"]})),
    ("creationTimestamp malformed", node(metadata={"creationTimestamp": "noon"})),
    ("missing metadata", {"spec": NODE_BASE["spec"], "status": NODE_BASE["status"]}),
    ("empty object", {}),
]

BUDGET_BASE = {"metadata": {"name": "web", "namespace": "ns", "generation": 2},
               "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
               "status": {"disruptionsAllowed": 1, "observedGeneration": 2, "currentHealthy": 3}}


def budget(**parts: Any) -> dict[str, Any]:
    return _with_parts(BUDGET_BASE, parts)


BUDGET_CASES: list[tuple[str, Any]] = [
    ("plain", budget()),
    ("selector null", budget(spec={"selector": None})),
    ("selector empty", budget(spec={"selector": {}})),
    *[(f"selector operator {requirement['operator']!r}", budget(spec={"selector": {"matchExpressions": [requirement]}}))
      for requirement in EVERY_OPERATOR],
    ("selector with both", budget(spec={"selector": {"matchLabels": {"a": "1"},
                                                     "matchExpressions": [{"key": "b", "operator": "Exists"}]}})),
    ("status missing", {k: v for k, v in BUDGET_BASE.items() if k != "status"}),
    ("status null", budget(status=None)),
    ("not yet observed", budget(status={"observedGeneration": 1})),
    ("negative allowed", budget(status={"disruptionsAllowed": -2})),
    ("allowed a string", budget(status={"disruptionsAllowed": "1"})),
    ("allowed a float", budget(status={"disruptionsAllowed": 1.0})),
    ("allowed a bool", budget(status={"disruptionsAllowed": True})),
    ("generation a string", budget(metadata={"generation": "2"})),
    ("spec null", budget(spec=None)),
    ("spec a string", budget(spec="any")),
    ("metadata null", budget(metadata=None)),
    ("unknown fields", budget(spec={"unhealthyPodEvictionPolicy": "AlwaysAllow", "x": [1]},
                              status={"disruptedPods": {"p": TIME}, "conditions": [{"type": "DisruptionAllowed"}]})),
    ("unicode names", budget(metadata={"name": "бюджет-🚀", "namespace": "ñs"})),
    ("empty object", {}),
]


def daemonset(template_spec: Any, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "agent", "namespace": "kube-system", **meta},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}}, "spec": template_spec}}}


DAEMONSET_CASES: list[tuple[str, Any]] = [
    ("plain", daemonset({"containers": [container(resources=requests(cpu="100m", memory="128Mi"))]})),
    ("every template feature", daemonset({
        "initContainers": [container(resources=requests(cpu="1")), container(restartPolicy="Always",
                                                                           resources=requests(cpu="50m"))],
        "containers": [container(resources={"limits": {"cpu": "200m", "memory": "100Mi"}},
                                 ports=[{"containerPort": 9100}, {"containerPort": 53, "protocol": "UDP"}])],
        "overhead": {"cpu": "50m"}, "hostNetwork": True, "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"operator": "Exists"}, {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "type", "operator": "NotIn", "values": ["virtual-kubelet"]}]}]}}}})),
    ("affinity the engine cannot evaluate", daemonset({"containers": [], "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "spec.unknown", "operator": "In", "values": ["x"]}]},
            {"matchExpressions": EVERY_OPERATOR}]}}}})),
    *[(f"quantity cpu={quantity!r}", daemonset({"containers": [container(resources=requests(cpu=quantity))]}))
      for quantity in QUANTITIES],
    ("template spec null", daemonset(None)),
    ("template null", {"metadata": {"name": "a", "namespace": "n"}, "spec": {"template": None}}),
    ("spec null", {"metadata": {"name": "a", "namespace": "n"}, "spec": None}),
    ("containers null", daemonset({"containers": None})),
    ("tolerations a string", daemonset({"tolerations": "all"})),
    ("unknown fields", daemonset({"containers": [container(x=1)], "y": 2}, futureMeta=3)),
    ("unicode names", daemonset({"containers": []}, name="агент-🚀")),
    ("empty object", {}),
]

EVENT_CASES: list[tuple[str, Any]] = [
    ("lastTimestamp", {"metadata": {"name": "e"}, "lastTimestamp": TIME, "count": 3}),
    ("eventTime only", {"metadata": {"name": "e"}, "lastTimestamp": None, "eventTime": "2024-05-01T12:00:00.123456Z"}),
    ("eventTime with offset", {"eventTime": "2024-05-01T12:00:00.5+02:00"}),
    ("creationTimestamp only", {"metadata": {"name": "e", "creationTimestamp": TIME}}),
    ("no time at all", {"metadata": {"name": "e"}}),
    ("empty object", {}),
    ("metadata null", {"metadata": None, "count": 2}),
    *[(f"count {count!r}", {"lastTimestamp": TIME, "count": count})
      for count in [0, -1, 1, 2, 10**20, "3", 2.5, None, True, False, [], {}]],
    ("lastTimestamp malformed", {"lastTimestamp": "garbage"}),
    ("lastTimestamp a number", {"lastTimestamp": 1714564800}),
    ("eventTime malformed", {"eventTime": "12:00"}),
    ("series and unknown fields", {"lastTimestamp": TIME, "series": {"count": 5, "lastObservedTime": TIME},
                                   "involvedObject": {"kind": "Pod"}, "x": [None]}),
    ("unicode message", {"metadata": {"name": "é-🚀"}, "lastTimestamp": TIME, "message": "ünïcødé 🚀"}),
]

ODD_CASES: list[tuple[Kind, str, Any]] = [
    *[(POD, name, obj) for name, obj in POD_CASES],
    *[(NODE, name, obj) for name, obj in NODE_CASES],
    *[(BUDGET, name, obj) for name, obj in BUDGET_CASES],
    *[(DAEMONSET, name, obj) for name, obj in DAEMONSET_CASES],
    *[(EVENT, name, obj) for name, obj in EVENT_CASES],
]


def _odd_id(case: tuple[Kind, str, Any]) -> str:
    return f"{case[0].list_kind}-{case[1]}"


@pytest.mark.parametrize("ascii_only", [True, False], ids=["escaped", "utf8"])
@pytest.mark.parametrize("case", ODD_CASES, ids=[_odd_id(c) for c in ODD_CASES])
def test_odd_objects_read_alike_on_both_paths(case: tuple[Kind, str, Any], ascii_only: bool) -> None:
    kind, _name, obj = case
    (compared,) = compare(kind, list_bytes(kind, [obj], ascii_only=ascii_only))
    assert compared.typed == compared.previous
    assert compared.typed_by_item == compared.previous


def test_odd_objects_exercise_both_success_and_converter_errors() -> None:
    """The table holds objects the converters read and objects they refuse, on every kind."""
    for kind in KINDS:
        outcomes = {compare(kind, list_bytes(kind, [obj]))[0].previous[0] for k, _name, obj in ODD_CASES if k is kind}
        assert {"ok", "raises"} <= outcomes, kind.list_kind


def test_odd_objects_read_alike_in_one_list() -> None:
    """All of a kind's odd objects in one response: one malformed-free page decodes whole, in order."""
    for kind in KINDS:
        objects = [obj for k, _name, obj in ODD_CASES if k is kind]
        assert divergences(kind, list_bytes(kind, objects)) == []


# --- Wrong shapes ---------------------------------------------------------------------------------------------
#
# Where the JSON shape is not the kind's (an object where a list belongs, a string where an object does),
# the typed path reports the item Malformed. The previous path either raised from the converter (the item
# was reported and skipped, as a Malformed one is now) or, for an empty value of the wrong type ("", [],
# {}, 0, false), read it as absent and built an object. Fields the structs leave as Any (labels, a
# container's resources, tolerations, ...) are not shape-checked: a wrong one raises the same converter
# error on both paths, so those cases are in the tables above.

RAISES_OR_READS = str  # "ok" (the previous path built an object) or the exception type it raised


WRONG_SHAPES: list[tuple[Kind, str, Any, RAISES_OR_READS]] = [
    (POD, "item null", None, "AttributeError"),
    (POD, "item a string", "pod", "AttributeError"),
    (POD, "item a number", 3, "AttributeError"),
    (POD, "item a list", [{"metadata": {}}], "AttributeError"),
    (POD, "metadata a string", pod() | {"metadata": "p"}, "AttributeError"),
    (POD, "metadata a list", pod() | {"metadata": [{"name": "p"}]}, "AttributeError"),
    (POD, "metadata an empty list", pod() | {"metadata": []}, "ok"),
    (POD, "spec a string", pod() | {"spec": "nginx"}, "AttributeError"),
    (POD, "spec an empty string", pod() | {"spec": ""}, "ok"),
    (POD, "spec an empty list", pod() | {"spec": []}, "ok"),
    (POD, "spec false", pod() | {"spec": False}, "ok"),
    (POD, "spec a number", pod() | {"spec": 1}, "AttributeError"),
    (POD, "status a string", pod() | {"status": "Running"}, "AttributeError"),
    (POD, "status an empty string", pod() | {"status": ""}, "ok"),
    (POD, "containers an object", pod({"containers": {"name": "c", "image": "nginx"}}), "AttributeError"),
    (POD, "containers an empty object", pod({"containers": {}}), "ok"),
    (POD, "containers a string", pod({"containers": "nginx"}), "AttributeError"),
    (POD, "containers an empty string", pod({"containers": ""}), "ok"),
    (POD, "containers a number", pod({"containers": 2}), "TypeError"),
    (POD, "a container null", pod({"containers": [None]}), "AttributeError"),
    (POD, "a container a string", pod({"containers": ["nginx"]}), "AttributeError"),
    (POD, "a container a list", pod({"containers": [[container()]]}), "AttributeError"),
    (POD, "initContainers an object", pod({"initContainers": {"name": "init"}}), "AttributeError"),
    (POD, "an init container null", pod({"initContainers": [None]}), "AttributeError"),
    (POD, "a quantity out of float range", pod({"containers": [container(resources=requests(cpu=OUT_OF_RANGE))]}),
     "ValueError"),
    (NODE, "item null", None, "AttributeError"),
    (NODE, "metadata a list", node(metadata=["n1"]), "AttributeError"),
    (NODE, "spec a string", node(spec="azure"), "AttributeError"),
    (NODE, "spec an empty list", node(spec=[]), "ok"),
    (NODE, "status a string", node(status="Ready"), "AttributeError"),
    (NODE, "status an empty string", node(status=""), "ok"),
    (NODE, "a quantity out of float range", node(status={"allocatable": {"cpu": OUT_OF_RANGE}}), "ValueError"),
    (BUDGET, "item null", None, "AttributeError"),
    (BUDGET, "metadata a string", budget(metadata="web"), "AttributeError"),
    (BUDGET, "metadata an empty list", budget(metadata=[]), "ok"),
    (DAEMONSET, "item a string", "agent", "AttributeError"),
    (DAEMONSET, "spec a string", daemonset({}) | {"spec": "x"}, "AttributeError"),
    (DAEMONSET, "template a string", {"metadata": {"name": "a"}, "spec": {"template": "pod"}}, "AttributeError"),
    (DAEMONSET, "template spec a list", daemonset(["x"]), "AttributeError"),
    (DAEMONSET, "template spec an empty list", daemonset([]), "ok"),
    (DAEMONSET, "template containers an object", daemonset({"containers": {"name": "c"}}), "AttributeError"),
    (DAEMONSET, "a template container null", daemonset({"containers": [None]}), "AttributeError"),
    (EVENT, "item null", None, "AttributeError"),
    (EVENT, "metadata a string, no timestamps", {"metadata": "e"}, "AttributeError"),
    (EVENT, "metadata a string, lastTimestamp set", {"metadata": "e", "lastTimestamp": TIME}, "ok"),
]


@pytest.mark.parametrize("case", WRONG_SHAPES, ids=[f"{c[0].list_kind}-{c[1]}" for c in WRONG_SHAPES])
def test_a_wrong_shape_is_malformed_on_the_typed_path(case: tuple[Kind, str, Any, str]) -> None:
    kind, _name, obj, previous = case
    (compared,) = compare(kind, list_bytes(kind, [obj]))
    expected = ("ok",) if previous == "ok" else ("raises", previous)
    assert compared.previous[:len(expected)] == expected
    assert compared.typed[0] == compared.typed_by_item[0] == "malformed"
    assert compared.typed[1]  # says what is wrong


def test_a_malformed_item_costs_only_itself() -> None:
    """A wrong shape among good items: the good ones decode as before, in order, on the whole-page path too."""
    for kind in KINDS:
        bad = [obj for k, _name, obj, _previous in WRONG_SHAPES if k is kind]
        good = [obj for k, _name, obj in ODD_CASES if k is kind][:5]
        mixed = [item for pair in zip(good, bad, strict=False) for item in pair]
        data = list_bytes(kind, mixed)
        typed = decode_page(data, kind.struct).items
        assert [isinstance(t, Malformed) for t in typed] == [i % 2 == 1 for i in range(len(mixed))]
        for raw, item in zip(mixed[::2], typed[::2], strict=True):
            assert _typed_outcome(kind.convert, item) == _outcome(kind.convert, raw)


# JSON the API server never sends (Go's encoder writes neither), where the paths differ for the whole page.
PAGE_LEVEL: list[tuple[str, bytes]] = [
    ("NaN literal", b'{"items":[{"metadata":{"name":"p"},"spec":{"priority":NaN}}]}'),
    ("Infinity literal", b'{"items":[{"metadata":{"name":"p"},"spec":{"priority":Infinity}}]}'),
    ("lone surrogate escape", b'{"items":[{"metadata":{"name":"\\ud800"}}]}'),
]


@pytest.mark.parametrize(("name", "data"), PAGE_LEVEL, ids=[c[0] for c in PAGE_LEVEL])
def test_json_the_api_server_never_writes_fails_the_typed_page(name: str, data: bytes) -> None:
    """json.loads accepts these (NaN, Infinity, a lone UTF-16 surrogate); msgspec refuses the whole page, which
    `KubernetesCluster` reports as a failed list (KubernetesApiError), as it does a truncated response."""
    assert json.loads(data)["items"]
    with pytest.raises(ValueError):
        decode_page(data, PodItem)


def test_duplicate_keys_take_the_last_value_on_both_paths() -> None:
    data = b'{"items":[{"metadata":{"name":"first","name":"last","namespace":"ns"},"spec":{"spec":1},' \
           b'"spec":{"nodeName":"n2"}}]}'
    assert divergences(POD, data) == []
    assert pod_from_json(json.loads(data)["items"][0]).name == "last"


# --- Through KubernetesCluster: malformed objects are reported and replaced, never fail the list -------------


class _Response:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def release_conn(self) -> None:
        pass


class _ListingApi:
    """Stands in for CoreV1Api's list calls: serves the given items as raw JSON, `limit` at a time."""

    def __init__(self, items: Sequence[bytes]) -> None:
        self.items = list(items)
        self.calls = 0

    def _page(self, *, limit: int | None = None, _continue: str | None = None, **_: Any) -> _Response:
        self.calls += 1
        start = int(_continue or 0)
        end = len(self.items) if not limit else start + limit
        token = f',"continue":"{end}"' if end < len(self.items) else ""
        body = b'{"kind":"List","metadata":{"resourceVersion":"9"' + token.encode() + b'},"items":[' \
               + b",".join(self.items[start:end]) + b"]}"
        return _Response(body)

    list_pod_for_all_namespaces = _page
    list_node = _page
    list_event_for_all_namespaces = _page


def _cluster(items: Sequence[Any], *, page_size: int = 2) -> tuple[KubernetesCluster, _ListingApi]:
    api = _ListingApi([item if isinstance(item, bytes) else dumps(item) for item in items])
    cluster = KubernetesCluster(ApiClient(Configuration()), page_size=page_size)
    cluster._core = api  # type: ignore[assignment]  # stand-in for the generated CoreV1Api
    return cluster, api


GOOD_PODS = [pod(metadata={"name": "a", "uid": "ua"}),
             pod(metadata={"name": "b", "uid": "ub"}, spec={"nodeName": "n2"})]
GOOD_NODES = [node(metadata={"name": "a", "uid": "ua"}), node(metadata={"name": "b", "uid": "ub"})]

def _case(what: str, bad: Any, name: str | None) -> Any:
    return pytest.param(what, bad, name, id=what)


# A bad object the list must survive: (what, the object, the name its placeholder has or None when it has none).
BAD_PODS = [
    *[_case(f"wrong shape: {name}", obj, "p") for k, name, obj, _previous in WRONG_SHAPES
      if k is POD and isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) and "out of" not in name],
    _case("wrong shape: a number out of float range",
          pod({"containers": [container(resources=requests(cpu=OUT_OF_RANGE))]}), "p"),
    _case("wrong shape: metadata a list", pod() | {"metadata": ["x"]}, None),
    _case("converter error: labels a list", pod(metadata={"labels": ["app"]}), "p"),
    _case("converter error: a quantity", pod({"containers": [container(resources=requests(cpu="lots"))]}), "p"),
    _case("converter error: a timestamp, no spec",
          {"metadata": pod()["metadata"] | {"creationTimestamp": "noon"}}, "p"),
    _case("converter error: a toleration null", pod({"tolerations": [None]}), "p"),
    _case("converter error: hostPort not a number",
          pod({"containers": [container(ports=[{"hostPort": "http"}])]}), "p"),
]
BAD_NODES = [
    _case("wrong shape: spec a string", node(spec="azure", metadata={"name": "bad"}), "bad"),
    _case("wrong shape: status a string", node(status="Ready", metadata={"name": "bad"}), "bad"),
    _case("wrong shape: a number out of float range in status",
          node(status={"allocatable": {"cpu": OUT_OF_RANGE}}, metadata={"name": "bad"}), "bad"),
    _case("wrong shape: a number out of float range in spec",
          node(spec={"unschedulable": OUT_OF_RANGE}, metadata={"name": "bad"}), "bad"),
    _case("wrong shape: metadata a list", node(metadata=["bad"]), None),
    _case("converter error: a quantity",
          node(status={"allocatable": {"cpu": "lots"}}, metadata={"name": "bad"}), "bad"),
    _case("converter error: a quantity, no spec",
          {"metadata": {"name": "bad"}, "status": {"allocatable": {"memory": "1 Gi"}}}, "bad"),
    _case("converter error: a taint null", node(spec={"taints": [None]}, metadata={"name": "bad"}), "bad"),
]

NOT_OBJECTS: list[tuple[str, Any]] = [("null", None), ("a string", "x"), ("a number", 7), ("a list", [])]


def _check_reported(placeholder_name: str | None, result: Sequence[Any], good: Sequence[Any],
                    convert: Callable[[Any], Any], caplog: pytest.LogCaptureFixture) -> None:
    """One error logged naming the bad object; the good ones converted as the previous path did, in order,
    with the bad one's placeholder between them (or nothing, when not even its name can be read)."""
    expected_good = [convert(obj) for obj in good]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in caplog.records]
    if placeholder_name is None:
        assert list(result) == expected_good  # nothing to name it by: reported and left out
        return
    assert placeholder_name in errors[0].getMessage()
    assert [result[0], result[2]] == expected_good  # in place, the others intact
    assert result[1].name == placeholder_name


@pytest.mark.parametrize(("what", "bad", "name"), BAD_PODS)
def test_list_pods_reports_an_unreadable_pod_and_keeps_a_placeholder(
        what: str, bad: Any, name: str | None, caplog: pytest.LogCaptureFixture) -> None:
    cluster, api = _cluster([GOOD_PODS[0], bad, GOOD_PODS[1]])
    with caplog.at_level(logging.ERROR, logger="shared.adapters.kubernetes"):
        pods = cluster.list_pods()
    assert api.calls == 2  # three items, two pages
    _check_reported(name, pods, GOOD_PODS, pod_from_json, caplog)
    if name is not None:
        placeholder = pods[1]
        assert placeholder.unsupported and placeholder.unsupported[0].startswith("unreadable object")
        spec = bad.get("spec")
        assert placeholder.owner is None  # never drained under it
        assert placeholder.node_name == (spec.get("nodeName") if isinstance(spec, dict) else None)
    # Listed again (the unchanged ones now reused): the same answer, the bad one reported again.
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="shared.adapters.kubernetes"):
        assert cluster.list_pods() == pods
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1


@pytest.mark.parametrize(("what", "bad", "name"), BAD_NODES)
def test_list_nodes_reports_an_unreadable_node_and_keeps_a_placeholder(
        what: str, bad: Any, name: str | None, caplog: pytest.LogCaptureFixture) -> None:
    cluster, _api = _cluster([GOOD_NODES[0], bad, GOOD_NODES[1]])
    with caplog.at_level(logging.ERROR, logger="shared.adapters.kubernetes"):
        nodes = cluster.list_nodes()
    _check_reported(name, nodes, GOOD_NODES, node_from_json, caplog)
    if name is not None:
        placeholder = nodes[1]
        assert placeholder.unschedulable and not placeholder.ready
        assert placeholder.annotations["cluster-autoscaler.kubernetes.io/scale-down-disabled"] == "true"


@pytest.mark.parametrize(("kind", "good", "convert"), [("pods", GOOD_PODS, pod_from_json),
                                                       ("nodes", GOOD_NODES, node_from_json)], ids=["pods", "nodes"])
@pytest.mark.parametrize(("what", "bad"), NOT_OBJECTS, ids=[c[0] for c in NOT_OBJECTS])
def test_a_list_survives_an_item_that_is_not_an_object(kind: str, good: Sequence[Any], convert: Callable[[Any], Any],
                                                       what: str, bad: Any, caplog: pytest.LogCaptureFixture) -> None:
    cluster, _api = _cluster([good[0], bad, good[1]])
    with caplog.at_level(logging.ERROR, logger="shared.adapters.kubernetes"):
        listed = getattr(cluster, f"list_{kind}")()
    _check_reported(None, listed, good, convert, caplog)


GOOD_EVENTS = [{"metadata": {"name": "e1"}, "lastTimestamp": TIME, "count": 2},
               {"metadata": {"name": "e2"}, "eventTime": "2024-05-01T12:30:00.000001Z"}]


def test_list_event_times_reads_events_as_event_time_does() -> None:
    cluster, _api = _cluster(GOOD_EVENTS)
    assert cluster.list_event_times("TriggeredScaleUp") == [event_time(e) for e in GOOD_EVENTS]


def test_list_event_times_skips_an_event_with_a_malformed_timestamp(caplog: pytest.LogCaptureFixture) -> None:
    bad = {"metadata": {"name": "bad"}, "lastTimestamp": "garbage"}
    cluster, _api = _cluster([GOOD_EVENTS[0], bad, GOOD_EVENTS[1]])
    with caplog.at_level(logging.ERROR, logger="shared.adapters.kubernetes"):
        times = cluster.list_event_times("TriggeredScaleUp")
    assert times == [event_time(e) for e in GOOD_EVENTS]
    assert any("bad" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


def test_recorded_pods_and_nodes_list_as_the_previous_path_read_them() -> None:
    """The real responses through KubernetesCluster, paged: what json.loads and the converter gave, in order."""
    for name, convert, listing in [("aks-pods.json", pod_from_json, KubernetesCluster.list_pods),
                                   ("k3s-pods-kube-system.json", pod_from_json, KubernetesCluster.list_pods),
                                   ("microk8s-doks-kurl-nodes.json", node_from_json, KubernetesCluster.list_nodes),
                                   ("aks-nodes.json", node_from_json, KubernetesCluster.list_nodes)]:
        items = json.loads((RESPONSES / name).read_bytes())["items"]
        cluster, _api = _cluster(items)
        assert listing(cluster) == [convert(i) for i in items], name
