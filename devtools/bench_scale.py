"""Two measurements beyond `make bench`'s planning figures: a whole tick at scale, and cold start.

1. `engine_at_scale()`: one "tick" on synthetic clusters of N nodes x 30 pods, from the Kubernetes
   API server's raw list responses to both plans. Each size runs in a fresh subprocess, so its peak
   RSS is its own. The tick is:

   a) observe: the real `KubernetesCluster` adapter lists nodes, pods and PodDisruptionBudgets through
      the official client with `_preload_content=False`, page by page (`limit=2000`, DEFAULT_PAGE_SIZE,
      and `continue`), and
      converts each page's items (typed decoding, `shared.adapters.kube_decode`, then `node_from_json` /
      `pod_from_json` / `disruption_budget_from_json`); `shared.services.observe.observe` assembles the snapshot (templates
      included). Only the socket is replaced: `ReplayApiClient.call_api` answers each request with the
      recorded page's bytes, read from a file as a network read would deliver them, one page at a time.
      The scale sets (groups and instances) are handed to observe directly: ARM is not what is measured.
   b) the scale-up plan and `plan_scale_down` on that snapshot, sharing one placement state and one
      scale-up simulation as the utilization poll does, the latter as a first utilization poll plans it:
      the candidate pool bounds the candidates with pods to move whose removal is simulated
      (SCALE_DOWN_CANDIDATES_POOL_RATIO/_MIN_COUNT; every candidate: devtools.bench_scale_down). The
      cluster is `bench.drainable_cluster`
      (about 40% of the nodes under-used, some pinned, some running Jobs, a PodDisruptionBudget) plus a
      scale-from-zero pool whose node-template tags only pending analytics pods select, so scale-up bin-packs
      new nodes and scale-down simulates moving the pods of hundreds of candidates.

   The NAIVE path for (a) lists the same pages with the official client as it is usually called
   (`CoreV1Api.list_node(limit=2000, _continue=...)`, preloaded): the client decodes each page and
   deserialises it into its models (`ApiClient.response_deserialize` -> `deserialize` -> V1NodeList /
   V1PodList / V1PodDisruptionBudgetList), and to reach the same snapshot each item is turned back into
   the API's JSON shape with `ApiClient.sanitize_for_serialization` and converted by the same
   converters, then assembled by the same `observe`. The worker checks that both snapshots are equal.

   The tick runs with the cyclic GC paused, as the app's polls do (shared.gc_pause). Its baseline is
   `json.loads` of the same response bytes in the same run (GC paused too): a goal also asks the tick
   to stay within 3x of it, which holds on any machine. A warm tick (the same adapter's second poll of
   the unchanged cluster: uid and resourceVersion reuse) and the previous path (json.loads, then the
   converters on dicts) are timed for information.

   Peak memory is tracemalloc's peak over one whole tick (Python allocations, the snapshot included),
   and the growth of the worker's peak RSS over its RSS just before its first tick (the peak, VmHWM,
   is reset then); a goal is met when the best tick time, its ratio to json.loads and the larger of
   the two memory figures are within it.

2. `cold_start()`: the median time to `import function_app` in fresh interpreters (with the heaviest
   imports from `-X importtime`), and a fresh process's time to its first completed pending poll against
   the sandbox and Azurite, started as `devtools.demo` starts them.

Figures, not assertions: `python -m devtools.bench_scale [--quick]` prints both tables and merges the
results into out/bench/results.json under "engine" and "cold_start".
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

from kubernetes.client import ApiClient, AppsV1Api, Configuration, CoreV1Api, PolicyV1Api, rest

from devtools.bench import GIB, NOW, ROOT, DrainCase, drainable_cluster, measure, plan_drainable
from sandbox.api.kube_api import _encode_continue
from sandbox.model.resources import Amounts
from sandbox.world.kobjects import KUBELET_VERSION, node_object, owner_reference, pod_object
from shared.adapters.kubernetes import (
    _UNFINISHED,
    DEFAULT_PAGE_SIZE,
    KubernetesCluster,
    daemonset_from_json,
    disruption_budget_from_json,
    node_from_json,
    pod_from_json,
)
from shared.domain import (
    ClusterSnapshot,
    DaemonSet,
    DisruptionBudget,
    Instance,
    LabelSelector,
    Node,
    NodeGroup,
    OwnerRef,
    Pod,
    PodAffinityTerm,
    Resources,
    TopologySpreadConstraint,
    VmSizeCapacity,
)
from shared.engine.scale_down import ScaleDownPlan
from shared.gc_pause import gc_paused
from shared.engine.scale_up import (
    ScaleUpPlan,
    existing_placements,
    initial_state,
    plan_scale_up,
    simulate_scale_up,
)
from shared.engine.templates import TAG_PREFIX, build_templates
from shared.ports import Ports
from shared.services.observe import observe

RESULTS_PATH = ROOT / "out" / "bench" / "results.json"
NODES_PATH = "/api/v1/nodes"
PODS_PATH = "/api/v1/pods"
BUDGETS_PATH = "/apis/policy/v1/poddisruptionbudgets"
DAEMONSETS_PATH = "/apis/apps/v1/daemonsets"
HIGHMEM_POOL = "pool-highmem"
# Per cluster size: (tick seconds, MiB). A size without a goal is measured for information.
GOALS: Mapping[int, tuple[float, float]] = {1000: (1.0, 300.0), 5000: (5.0, 1024.0)}
# ... and at most this many times `json.loads` of the same response bytes, measured in the same run (issue 19):
# a machine-independent form of the same goal.
JSON_RATIO_GOAL = 3.0
IMPORT_GOAL_S = 0.5
_UID_NAMESPACE = uuid.UUID("6f1c2a3e-9d84-4c57-b1a0-3e5d7c9f2b14")


# --- the synthetic cluster -----------------------------------------------------------------------


def tick_cluster(nodes: int, pods_per_node: int = 30, *, seed: int = 0) -> ClusterSnapshot:
    """`bench.drainable_cluster` plus a scale-from-zero pool and pending pods only that pool can take.

    drainable_cluster gives the scale-down planner its work (about 40% of the nodes under-used, some
    pinned, some waiting for Jobs, a PodDisruptionBudget, 20 pending pods too big for any node). The
    pending analytics pods (half as many as nodes, 2 CPU and 12 GiB each) select `workload=highmem`,
    which only `pool-highmem`'s node-template tags carry: scale-up packs them onto new nodes of it,
    and none of them can use a scale-down candidate.
    """
    group_count = max(1, min(10, nodes // 10))
    base = drainable_cluster(DrainCase(f"{nodes} nodes", nodes, pods_per_node, group_count, None), seed=seed)
    highmem_max = max(10, nodes // 5)
    highmem = NodeGroup(
        "rg-bench", HIGHMEM_POOL, 0, highmem_max, 0, "Standard_E16s_v5",
        tags={
            "aks-managed-poolName": "highmem", "cluster-autoscaler-enabled": "true", "cluster-autoscaler-name": "bench",
            "min": "0", "max": str(highmem_max), f"{TAG_PREFIX}label_workload": "highmem",
            f"{TAG_PREFIX}resources_cpu": "16", f"{TAG_PREFIX}resources_memory": "128Gi",
        },
        zones=("1", "2", "3"), location="westeurope",
    )
    pending = tuple(
        Pod("analytics", f"analytics-{d}-5f6d8c-{r:05d}", Resources(2000, 12 * GIB), NOW - timedelta(minutes=2),
            unschedulable=True, owner=OwnerRef("ReplicaSet", f"analytics-{d}-5f6d8c"),
            labels={"app": f"analytics-{d}", "pod-template-hash": "5f6d8c"}, node_selector={"workload": "highmem"})
        for d in range(10) for r in range(max(1, nodes // 20))
    )
    groups = (*base.groups, highmem)
    return replace(base, pods=base.pods + pending, groups=groups, templates=build_templates(groups, base.nodes))


# --- the API server's JSON ---------------------------------------------------------------------


def _ts(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid(kind: str, key: str) -> str:
    return str(uuid.uuid5(_UID_NAMESPACE, f"{kind}/{key}"))


@functools.lru_cache(maxsize=None)
def _owner_uid(kind: str, key: str) -> str:
    return _uid(kind, key)


@functools.lru_cache(maxsize=None)
def _image_id(image: str) -> str:
    return f"{image.split(':')[0]}@sha256:{uuid.uuid5(_UID_NAMESPACE, image).hex * 2}"


def _host_ip(index: int) -> str:
    return f"10.224.{index // 250}.{index % 250 + 4}"


def _pod_ip(index: int, slot: int) -> str:
    return f"10.{100 + index // 256}.{index % 256}.{slot % 250 + 2}"


_NODE_IMAGES = tuple(
    {"names": [f"mcr.microsoft.com/{name}@sha256:{uuid.uuid5(_UID_NAMESPACE, name).hex}{uuid.uuid5(_UID_NAMESPACE, tag).hex}",
               f"mcr.microsoft.com/{name}:{tag}"], "sizeBytes": size}
    for name, tag, size in (
        ("oss/kubernetes/kube-proxy", KUBELET_VERSION, 30_912_841), ("oss/calico/node", "v3.28.2", 127_410_311),
        ("oss/calico/cni", "v3.28.2", 94_201_822), ("oss/kubernetes/azure-cloud-node-manager", "v1.31.1", 21_005_114),
        ("oss/kubernetes-csi/azuredisk-csi", "v1.30.4", 72_339_900), ("oss/kubernetes-csi/azurefile-csi", "v1.30.5", 79_803_412),
        ("oss/kubernetes-csi/csi-node-driver-registrar", "v2.11.1", 10_940_022),
        ("oss/kubernetes-csi/livenessprobe", "v2.13.1", 9_980_344), ("azuremonitor/containerinsights/ciprod", "3.1.23", 180_310_228),
        ("oss/kubernetes/coredns", "v1.11.3-2", 17_220_113), ("oss/kubernetes/metrics-server", "v0.7.2", 19_345_001),
        ("oss/kubernetes/pause", "3.6", 299_520), ("azurelinux/busybox", "1.36", 2_201_001),
        ("apps/web-frontend", "2026.11.3", 88_120_440), ("apps/batch-worker", "2026.11.2", 141_503_997),
        ("apps/analytics", "4.2.0", 212_770_301),
    )
)


def _node_managed_fields(created: str) -> list[dict[str, Any]]:
    return [
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": created, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:node.alpha.kubernetes.io/ttl": {},
                                                       "f:volumes.kubernetes.io/controller-managed-attach-detach": {}},
                                     "f:labels": {".": {}, "f:beta.kubernetes.io/arch": {}, "f:beta.kubernetes.io/os": {},
                                                  "f:kubernetes.io/arch": {}, "f:kubernetes.io/hostname": {},
                                                  "f:kubernetes.io/os": {}}},
                      "f:spec": {"f:providerID": {}}}},
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": created,
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, "v:\"10.244.0.0/24\"": {}}}}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": created, "fieldsType": "FieldsV1",
         "subresource": "status",
         "fieldsV1": {"f:status": {"f:allocatable": {"f:ephemeral-storage": {}}, "f:capacity": {"f:ephemeral-storage": {}},
                                   "f:conditions": {f"k:{{\"type\":\"{kind}\"}}": {"f:lastHeartbeatTime": {}, "f:lastTransitionTime": {},
                                                                                   "f:message": {}, "f:reason": {}, "f:status": {}}
                                                    for kind in ("DiskPressure", "MemoryPressure", "PIDPressure", "Ready")},
                                   "f:images": {}, "f:nodeInfo": {"f:bootID": {}, "f:kernelVersion": {}}}}},
    ]


def node_json(node: Node, index: int) -> dict[str, Any]:
    """A Node as an AKS API server lists it: kubelet and AKS labels, status with conditions, images, managedFields."""
    created = _ts(node.created_at)
    ref = node.instance
    instance_type = "Standard_D16s_v5"
    labels = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": instance_type,
        "beta.kubernetes.io/os": "linux", "kubernetes.azure.com/agentpool": node.labels.get("agentpool", ""),
        "kubernetes.azure.com/cluster": "MC_rg-bench_bench_westeurope", "kubernetes.azure.com/mode": "user",
        "kubernetes.azure.com/node-image-version": "AKSUbuntu-2204gen2containerd-202611.03.0",
        "kubernetes.azure.com/os-sku": "Ubuntu", "kubernetes.azure.com/role": "agent", "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": instance_type, "topology.kubernetes.io/region": "westeurope",
        **node.labels,
    }
    obj = node_object(
        name=node.name, uid=_uid("Node", node.name), created=created, provider_id=node.provider_id, labels=labels,
        taints=node.taints, internal_ip=_host_ip(index), pod_cidr=f"10.{100 + index // 256}.{index % 256}.0/24",
        capacity=Amounts.of(16_000, 64 * GIB, node.allocatable.pods, {"ephemeral-storage": 124 * GIB}),
        allocatable=Amounts.of(node.allocatable.cpu_milli, node.allocatable.memory_bytes, node.allocatable.pods,
                               {"ephemeral-storage": 111 * GIB}),
        machine_id=uuid.uuid5(_UID_NAMESPACE, node.name).hex,
    )
    metadata = obj["metadata"]
    metadata["resourceVersion"] = str(1_000_000 + index)
    metadata["annotations"] = {
        "csi.volume.kubernetes.io/nodeid": json.dumps({"disk.csi.azure.com": node.name, "file.csi.azure.com": node.name}),
        **metadata["annotations"], **node.annotations,
    }
    metadata["managedFields"] = _node_managed_fields(created)
    if node.unschedulable:
        obj["spec"]["unschedulable"] = True
    status = obj["status"]
    for quantities in (status["capacity"], status["allocatable"]):
        quantities.update({"hugepages-1Gi": "0", "hugepages-2Mi": "0"})  # kubelet lists them, even at zero
    if not node.ready:
        for condition in status["conditions"]:
            if condition["type"] == "Ready":
                condition.update(status="False", reason="KubeletNotReady", message="container runtime network not ready")
    if ref is not None:
        status["nodeInfo"]["systemUUID"] = _uid("vm", f"{ref.scale_set}/{ref.instance_id}")
    status["images"] = list(_NODE_IMAGES)
    return obj


def _selector_json(selector: LabelSelector | None) -> dict[str, Any] | None:
    if selector is None:
        return None
    out: dict[str, Any] = {}
    if selector.match_labels:
        out["matchLabels"] = dict(selector.match_labels)
    if selector.match_expressions:
        out["matchExpressions"] = [{"key": r.key, "operator": r.operator, **({"values": list(r.values)} if r.values else {})}
                                   for r in selector.match_expressions]
    return out


def _affinity_terms_json(terms: Sequence[PodAffinityTerm]) -> dict[str, Any]:
    return {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": t.topology_key, "labelSelector": _selector_json(t.label_selector),
         **({"namespaces": list(t.namespaces)} if t.namespaces else {})}
        for t in terms
    ]}


def _affinity_json(pod: Pod) -> dict[str, Any] | None:
    if pod.node_affinity:
        raise ValueError("the synthetic cluster has no node affinity to render")
    affinity = {}
    if pod.pod_affinity:
        affinity["podAffinity"] = _affinity_terms_json(pod.pod_affinity)
    if pod.pod_anti_affinity:
        affinity["podAntiAffinity"] = _affinity_terms_json(pod.pod_anti_affinity)
    return affinity or None


def _spread_json(constraint: TopologySpreadConstraint) -> dict[str, Any]:
    return {"maxSkew": constraint.max_skew, "topologyKey": constraint.topology_key,
            "whenUnsatisfiable": constraint.when_unsatisfiable, "labelSelector": _selector_json(constraint.label_selector)}


_KUBE_SYSTEM_PRIORITY = {"DaemonSet": ("system-node-critical", 2_000_001_000)}
_DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]
_DAEMONSET_TOLERATIONS = [
    {"key": "CriticalAddonsOnly", "operator": "Exists"}, {"operator": "Exists", "effect": "NoExecute"},
    {"operator": "Exists", "effect": "NoSchedule"},
]


_POD_SPEC_FIELDS = {  # what a controller's create owns in every pod's spec (shared: it serialises the same)
    "f:containers": {"k:{\"name\":\"main\"}": {
        ".": {}, "f:env": {".": {}, **{f"k:{{\"name\":\"{name}\"}}": {".": {}, "f:name": {}, "f:value": {}}
                                       for name in ("LOG_LEVEL", "OTEL_SERVICE_NAME", "GOMAXPROCS")}},
        "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
        "f:ports": {".": {}, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {
            ".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
        "f:readinessProbe": {".": {}, "f:failureThreshold": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}},
                             "f:periodSeconds": {}, "f:successThreshold": {}, "f:timeoutSeconds": {}},
        "f:resources": {".": {}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
        "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
    "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {},
    "f:securityContext": {}, "f:terminationGracePeriodSeconds": {},
}
_KUBELET_CONDITION_FIELDS = {
    f"k:{{\"type\":\"{kind}\"}}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
    for kind in ("ContainersReady", "Initialized", "PodReadyToStartContainers", "Ready")
}
_SCHEDULER_CONDITION_FIELDS = {".": {}, "k:{\"type\":\"PodScheduled\"}": {
    ".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}}}


def _pod_managed_fields(pod: Pod, owner_uid: str, created: str, status_at: str, pod_ip: str | None) -> list[dict[str, Any]]:
    """A controller's create (metadata and spec), then the scheduler's (unbound) or the kubelet's (bound) status update."""
    metadata_fields: dict[str, Any] = {"f:labels": {".": {}, **{f"f:{k}": {} for k in pod.labels}}}
    if pod.owner is not None:
        metadata_fields["f:generateName"] = {}
        metadata_fields["f:ownerReferences"] = {".": {}, f"k:{{\"uid\":\"{owner_uid}\"}}": {}}
    entries: list[dict[str, Any]] = [{
        "manager": "kube-controller-manager" if pod.owner else "kubectl-create",
        "operation": "Update", "apiVersion": "v1", "time": created, "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": metadata_fields, "f:spec": _POD_SPEC_FIELDS},
    }]
    if pod_ip is None:
        entries.append({"manager": "kube-scheduler", "operation": "Update", "apiVersion": "v1", "time": status_at,
                        "fieldsType": "FieldsV1", "subresource": "status",
                        "fieldsV1": {"f:status": {"f:conditions": _SCHEDULER_CONDITION_FIELDS}}})
    else:
        entries.append({"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": status_at,
                        "fieldsType": "FieldsV1", "subresource": "status",
                        "fieldsV1": {"f:status": {"f:conditions": _KUBELET_CONDITION_FIELDS, "f:containerStatuses": {},
                                                  "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {}, "f:podIP": {},
                                                  "f:podIPs": {".": {}, f"k:{{\"ip\":\"{pod_ip}\"}}": {".": {}, "f:ip": {}}},
                                                  "f:startTime": {}}}})
    return entries


def pod_json(pod: Pod, *, host_ip: str | None = None, pod_ip: str | None = None, cluster_nodes: int = 0) -> dict[str, Any]:
    """A Pod as the API server lists it: managedFields, the service-account volume, env, probes, full status.

    Built with the sandbox's `pod_object` (whose output the official client's models accept), then
    given what a live pod carries besides. A bound pod is Running with its container started; an
    unbound one carries the scheduler's `PodScheduled=False, Unschedulable` condition.
    """
    created = _ts(pod.created_at)
    owner = pod.owner
    owner_uid = _owner_uid(owner.kind, f"{pod.namespace}/{owner.name}") if owner else ""
    priority_class, priority = ("", pod.priority)
    if pod.namespace == "kube-system":
        priority_class, priority = _KUBE_SYSTEM_PRIORITY.get(owner.kind if owner else "", ("system-cluster-critical", 2_000_000_000))
    obj = pod_object(
        namespace=pod.namespace, name=pod.name, uid=_uid("Pod", pod.key), created=created,
        requests=Amounts.of(pod.requests.cpu_milli, pod.requests.memory_bytes), labels=pod.labels,
        annotations=pod.annotations, node_selector=pod.node_selector, tolerations=pod.tolerations,
        owner=owner_reference(owner.kind, owner.name, owner_uid) if owner else None,
        restart_policy="Never" if owner and owner.kind == "Job" else "Always",
        priority_class=priority_class, priority=priority, affinity=_affinity_json(pod),
        topology_spread_constraints=tuple(_spread_json(c) for c in pod.topology_spread),
        active_deadline_seconds=pod.active_deadline_seconds,
    )
    metadata, spec = obj["metadata"], obj["spec"]
    if owner is not None:
        metadata["generateName"] = pod.name.rsplit("-", 1)[0] + "-"
    metadata["resourceVersion"] = str(2_000_000 + zlib.crc32(pod.key.encode()) % 1_000_000)
    started = pod.started_at or pod.created_at + timedelta(seconds=3)
    status_at = _ts(started) if pod.node_name else created
    metadata["managedFields"] = _pod_managed_fields(pod, owner_uid, created, status_at, pod_ip if pod.node_name else None)
    container = spec["containers"][0]
    container["image"] = f"mcr.microsoft.com/apps/{(owner.name if owner else pod.name).split('-')[0]}:2026.11.3"
    container["env"] = [{"name": "LOG_LEVEL", "value": "info"}, {"name": "OTEL_SERVICE_NAME", "value": owner.name if owner else pod.name},
                        {"name": "GOMAXPROCS", "value": str(max(1, pod.requests.cpu_milli // 1000))},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}]
    container["ports"] = [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    container["readinessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "timeoutSeconds": 1,
                                   "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
    container["volumeMounts"] = [{"name": "kube-api-access", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    spec["volumes"] = [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}}]
    spec["serviceAccount"] = spec["serviceAccountName"]
    spec["securityContext"] = {}
    spec["tolerations"] = (spec.get("tolerations") or []) + (
        _DAEMONSET_TOLERATIONS if owner and owner.kind == "DaemonSet" else _DEFAULT_TOLERATIONS)
    if pod.node_name:
        spec["nodeName"] = pod.node_name
        running = _ts(started + timedelta(seconds=2))
        obj["status"] = {
            "phase": pod.phase, "qosClass": "Burstable", "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "startTime": _ts(started),
            "conditions": [{"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": running}
                           for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{
                "name": "main", "image": container["image"], "ready": True, "restartCount": 0, "started": True,
                "imageID": _image_id(container["image"]),
                "containerID": f"containerd://{uuid.uuid5(_UID_NAMESPACE, pod.key).hex * 2}",
                "state": {"running": {"startedAt": running}}, "lastState": {},
            }],
        }
    else:
        obj["status"] = {"phase": "Pending", "qosClass": "Burstable", "conditions": [{
            "type": "PodScheduled", "status": "False", "lastProbeTime": None, "lastTransitionTime": created,
            "reason": "Unschedulable",
            "message": f"0/{cluster_nodes} nodes are available: {cluster_nodes} node(s) didn't match Pod's node "
                       f"affinity/selector. preemption: 0/{cluster_nodes} nodes are available: {cluster_nodes} "
                       "Preemption is not helpful for scheduling.",
        }] if pod.unschedulable else []}
    return obj


def budget_json(budget: DisruptionBudget) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget whose status allows `disruptions_allowed` more evictions now."""
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": budget.name, "namespace": budget.namespace, "uid": _uid("PodDisruptionBudget", budget.name),
                     "resourceVersion": "3000001", "generation": 1, "creationTimestamp": _ts(NOW - timedelta(days=30))},
        "spec": {"maxUnavailable": 1, "selector": _selector_json(budget.selector)},
        "status": {"observedGeneration": 1, "disruptionsAllowed": budget.disruptions_allowed, "currentHealthy": 2,
                   "desiredHealthy": 1, "expectedPods": 2},
    }


# --- recorded list responses -----------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One list response: the `continue` token that asks for it (None: the first page), its items and body."""

    continue_in: str | None
    continue_out: str | None
    items: int
    body: bytes | Path  # a Path is read on each request, as a network read delivers the bytes anew

    def read(self) -> bytes:
        return self.body if isinstance(self.body, bytes) else self.body.read_bytes()


@dataclass(frozen=True)
class RawCluster:
    """What one tick reads: the API server's list responses by path, and the scale sets (not measured)."""

    pages: Mapping[str, tuple[Page, ...]]
    groups: tuple[NodeGroup, ...]
    page_size: int = DEFAULT_PAGE_SIZE

    def bytes_total(self, path: str | None = None) -> int:
        """The bytes of every page (of `path`'s only, if given)."""
        return sum(len(page.body) if isinstance(page.body, bytes) else page.body.stat().st_size
                   for key, pages in self.pages.items() if path in (None, key) for page in pages)

    def items(self, path: str) -> int:
        return sum(page.items for page in self.pages.get(path, ()))

    def save_manifest(self, directory: Path) -> None:
        """The index of a cluster whose pages are files in `directory` (see `raw_cluster`)."""
        manifest = {
            "page_size": self.page_size,
            "pages": {path: [{"continue_in": p.continue_in, "continue_out": p.continue_out, "items": p.items,
                              "file": cast(Path, p.body).name} for p in pages] for path, pages in self.pages.items()},
            "groups": [_group_to_json(g) for g in self.groups],
        }
        (directory / "manifest.json").write_text(json.dumps(manifest))

    @classmethod
    def load(cls, directory: Path) -> RawCluster:
        manifest = json.loads((directory / "manifest.json").read_text())
        pages = {path: tuple(Page(p["continue_in"], p["continue_out"], p["items"], directory / p["file"]) for p in entries)
                 for path, entries in manifest["pages"].items()}
        return cls(pages, tuple(_group_from_json(g) for g in manifest["groups"]), manifest["page_size"])


def _group_to_json(group: NodeGroup) -> dict[str, Any]:
    return {"resource_group": group.resource_group, "name": group.name, "min_size": group.min_size,
            "max_size": group.max_size, "target_size": group.capacity, "vm_size": group.vm_size,
            "tags": dict(group.tags), "instances": [i.instance_id for i in group.instances], "zones": list(group.zones),
            "location": group.location}


def _group_from_json(raw: Mapping[str, Any]) -> NodeGroup:
    return NodeGroup(raw["resource_group"], raw["name"], raw["min_size"], raw["max_size"], raw["target_size"],
                     raw["vm_size"], tags=dict(raw["tags"]), instances=tuple(Instance(i) for i in raw["instances"]),
                     zones=tuple(raw["zones"]), location=raw["location"])


def _paginate(path: str, kind: str, api_version: str, items: Iterator[dict[str, Any]], total: int, *, page_size: int,
              resource_version: str, directory: Path | None) -> tuple[Page, ...]:
    """The pages the API server sends for `limit=page_size`: compact JSON, `continue` and `remainingItemCount`
    on every page but the last, the token in the API server's format (the sandbox's encoder)."""
    pages: list[Page] = []
    continue_in: str | None = None
    sent = 0
    while True:
        batch = [item for _, item in zip(range(page_size), items, strict=False)]
        sent += len(batch)
        metadata: dict[str, Any] = {"resourceVersion": resource_version}
        continue_out = None
        if sent < total:
            last = batch[-1]["metadata"]
            continue_out = _encode_continue((last.get("namespace", ""), last["name"]), resource_version)
            metadata["continue"] = continue_out
            metadata["remainingItemCount"] = total - sent
        body = json.dumps({"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": batch},
                          separators=(",", ":")).encode()
        stored: bytes | Path = body
        if directory is not None:
            stored = directory / f"{path.strip('/').replace('/', '_')}-{len(pages):04d}.json"
            stored.write_bytes(body)
        pages.append(Page(continue_in, continue_out, len(batch), stored))
        if continue_out is None:
            return tuple(pages)
        continue_in = continue_out


def raw_cluster(snapshot: ClusterSnapshot, *, page_size: int = DEFAULT_PAGE_SIZE, directory: Path | None = None) -> RawCluster:
    """The snapshot as the API server would list it, in pages of `page_size` items in key order.

    With `directory`, each page is written to a file there (with a manifest) and read back on each
    request, so the pages never sit in memory together.
    """
    nodes = sorted(snapshot.nodes, key=lambda n: n.name)
    node_index = {node.name: i for i, node in enumerate(nodes)}
    pods = sorted(snapshot.pods, key=lambda p: (p.namespace, p.name))
    slots: dict[str, int] = {}

    def pod_items() -> Iterator[dict[str, Any]]:
        for pod in pods:
            if pod.node_name is None:
                yield pod_json(pod, cluster_nodes=len(nodes))
                continue
            index = node_index[pod.node_name]
            slot = slots[pod.node_name] = slots.get(pod.node_name, 0) + 1
            yield pod_json(pod, host_ip=_host_ip(index), pod_ip=_pod_ip(index, slot))

    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    common = {"page_size": page_size, "resource_version": "4100200", "directory": directory}
    with gc_paused():  # millions of short-lived containers; the cyclic GC would triple the time of what is not measured
        pages = {
            NODES_PATH: _paginate(NODES_PATH, "NodeList", "v1", (node_json(n, i) for i, n in enumerate(nodes)), len(nodes),
                                  **common),
            PODS_PATH: _paginate(PODS_PATH, "PodList", "v1", pod_items(), len(pods), **common),
            BUDGETS_PATH: _paginate(BUDGETS_PATH, "PodDisruptionBudgetList", "policy/v1",
                                    (budget_json(b) for b in snapshot.disruption_budgets), len(snapshot.disruption_budgets),
                                    **common),
            # The recorded clusters carry no DaemonSet objects (their DaemonSet pods stand for them): one empty page.
            DAEMONSETS_PATH: _paginate(DAEMONSETS_PATH, "DaemonSetList", "apps/v1", iter(()), 0, **common),
        }
    raw = RawCluster(pages, snapshot.groups, page_size)
    if directory is not None:
        raw.save_manifest(directory)
    return raw


# --- the two ways of reading them ----------------------------------------------------------------


class _Body:
    """What urllib3 hands back with preload_content=False, as much of it as the client and the adapter use."""

    def __init__(self, status: int, data: bytes) -> None:
        self.status = status
        self.reason = "OK" if status == 200 else "Not Found"
        self.data = data
        self.headers = {"content-type": "application/json"}

    def release_conn(self) -> None:
        pass

    def drain_conn(self) -> None:
        pass


class ReplayApiClient(ApiClient):
    """The official client with its socket replaced: each request is answered with a recorded page.

    Everything above the socket runs as it would against an API server: the generated API methods,
    parameter validation and serialisation, and (when preloading) the client's deserialisation.
    `limit` must be the page size the pages were cut at; `continue` picks the page.
    """

    def __init__(self, raw: RawCluster, *, latency_s: float = 0.0) -> None:
        """`latency_s`: a round trip's wait before each answer (slept, so other threads run meanwhile)."""
        super().__init__(Configuration(host="https://bench.invalid"))
        self._raw = raw
        self._latency_s = latency_s
        self._by_token = {path: {page.continue_in: page for page in pages} for path, pages in raw.pages.items()}
        self.requests: list[str] = []

    def call_api(self, method: str, url: str, header_params: Any = None, body: Any = None, post_params: Any = None,
                 _request_timeout: Any = None) -> rest.RESTResponse:
        self.requests.append(url)
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        pages = self._by_token.get(parts.path)
        if method != "GET" or pages is None:
            return rest.RESTResponse(_Body(404, json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                            "reason": "NotFound", "code": 404}).encode()))
        limit = int(query.get("limit", ["0"])[0])
        if limit != self._raw.page_size:
            raise ValueError(f"{url}: the pages were recorded with limit={self._raw.page_size}, not {limit}")
        page = pages[query.get("continue", [None])[0]]
        if self._latency_s:
            time.sleep(self._latency_s)
        return rest.RESTResponse(_Body(200, page.read()))


class ClientModelCluster:
    """The `Cluster` reads done the usual way with the official client: preloaded, into its models.

    Each page is decoded and deserialised by the client (`response_deserialize` -> V1NodeList,
    V1PodList, V1PodDisruptionBudgetList); each item is turned back into the API's JSON shape with
    `sanitize_for_serialization` and converted by the adapter's own converters.
    """

    def __init__(self, api_client: ApiClient, *, page_size: int = DEFAULT_PAGE_SIZE) -> None:
        self._client = api_client
        self._core = CoreV1Api(api_client)
        self._policy = PolicyV1Api(api_client)
        self._apps = AppsV1Api(api_client)
        self._page_size = page_size

    def _items(self, method: Callable[..., Any], **kwargs: Any) -> Iterator[Any]:
        token: str | None = None
        while True:
            page = method(limit=self._page_size, _continue=token, **kwargs)
            yield from page.items or ()
            token = page.metadata._continue if page.metadata is not None else None
            if not token:
                return

    def _json(self, model: Any) -> dict[str, Any]:
        return cast(dict[str, Any], self._client.sanitize_for_serialization(model))

    def list_nodes(self) -> list[Node]:
        return [node_from_json(self._json(item)) for item in self._items(self._core.list_node)]

    def list_pods(self) -> list[Pod]:
        items = self._items(self._core.list_pod_for_all_namespaces, field_selector=_UNFINISHED)
        return [pod_from_json(self._json(item)) for item in items]

    def list_disruption_budgets(self) -> list[DisruptionBudget]:
        items = self._items(self._policy.list_pod_disruption_budget_for_all_namespaces)
        return [disruption_budget_from_json(self._json(item)) for item in items]

    def list_daemonsets(self) -> list[DaemonSet]:
        items = self._items(self._apps.list_daemon_set_for_all_namespaces)
        return [daemonset_from_json(self._json(item)) for item in items]

    def list_capacity_buffers(self) -> None:
        return None  # measures the list paths only: as a cluster without the CRD

    def update_capacity_buffer_status(self, namespace: str, name: str, *, status: Any) -> None:
        raise AssertionError("no buffers to write")

    def get_pod_template(self, namespace: str, name: str, *, kind: str = "PodTemplate", api_group: str = "") -> None:
        return None

    def get_scale(self, namespace: str, name: str, *, kind: str, api_group: str) -> None:
        return None


class JsonCluster(ClientModelCluster):
    """The previous path, for comparison: each page read unpreloaded and parsed by `json.loads` into dicts, the
    converters run on the dicts (as the adapter did before typed decoding; the sandbox's objects still go so)."""

    def _items(self, method: Callable[..., Any], **kwargs: Any) -> Iterator[Any]:
        token: str | None = None
        with gc_paused():
            while True:
                response = method(limit=self._page_size, _continue=token, _preload_content=False, **kwargs)
                page = json.loads(response.data)
                yield from page.get("items") or ()
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    return

    def _json(self, model: Any) -> dict[str, Any]:
        return cast(dict[str, Any], model)


@dataclass(frozen=True)
class _RecordedCompute:
    """The scale sets as observe would get them from ARM; handed over directly, ARM is not measured."""

    groups: tuple[NodeGroup, ...]

    def list_node_groups(self) -> list[NodeGroup]:
        return list(self.groups)

    def list_vm_sizes(self, location: str) -> list[VmSizeCapacity]:
        return []


@dataclass(frozen=True)
class _ObservePorts:
    """The two ports observe reads."""

    cluster: Any
    provider: _RecordedCompute


def _observer(raw: RawCluster, *, path: str = "typed") -> Callable[[], ClusterSnapshot]:
    """observe() over the recorded pages through one adapter, kept between calls (a warm Function instance):
    `typed` (the app's: KubernetesCluster), `json` (the previous path: JsonCluster) or `naive` (the client's models)."""
    client = ReplayApiClient(raw)
    kinds = {"typed": KubernetesCluster, "json": JsonCluster, "naive": ClientModelCluster}
    cluster = kinds[path](client, page_size=raw.page_size)
    ports = cast(Ports, _ObservePorts(cluster, _RecordedCompute(raw.groups)))
    return lambda: observe(ports, now=NOW, with_budgets=True)


def fast_observe(raw: RawCluster) -> ClusterSnapshot:
    """The snapshot as the app builds it: the Kubernetes adapter's raw-JSON path, then observe."""
    return _observer(raw)()


def naive_observe(raw: RawCluster) -> ClusterSnapshot:
    """The same snapshot through the official client's model deserialisation (see ClientModelCluster)."""
    return _observer(raw, path="naive")()


def plans(snapshot: ClusterSnapshot) -> tuple[ScaleUpPlan, ScaleDownPlan]:
    """The two plans of a tick: scale-up with default options, scale-down with every node due (bench.plan_drainable)."""
    return plan_scale_up(snapshot), plan_drainable(snapshot)


# --- one size, in a worker process -----------------------------------------------------------------


def _status_mib(field_name: str) -> float:
    """A /proc/self/status figure (VmRSS: resident now; VmHWM: its peak), in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    raise OSError(f"no {field_name} in /proc/self/status")


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux 4.0+: write 5 to clear_refs); False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def _json_loads_s(raw: RawCluster, *, repeat: int) -> float:
    """Best time of `json.loads` over every page's bytes (held in memory, as a response body is): the baseline.

    With the cyclic GC paused, as the tick runs: json.loads at its fastest, so the ratio is not flattered."""
    bodies = [page.read() for pages in raw.pages.values() for page in pages]
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        with gc_paused():
            started = time.perf_counter()
            for body in bodies:
                json.loads(body)
            best = min(best, time.perf_counter() - started)
    return best


def measure_size(raw: RawCluster, *, repeat: int = 1, naive: bool = True) -> dict[str, Any]:
    """The figures of one size, in this process: meant for a fresh one (`engine_at_scale` runs it so).

    Cold ticks: `repeat` timed ticks (best of, per phase and whole), each through a new adapter as a cold
    Function instance has (nothing to reuse), then one under tracemalloc (bench.measure); the peak RSS is
    reset (VmHWM) just before the first, which runs before anything else of size, so the peak's growth over
    the RSS then is the tick's own. A warm tick: the same adapter's second poll of the unchanged cluster.
    The baseline: `json.loads` of the same response bytes. Then the previous path (json.loads and the
    converters on dicts) and the naive read (the client's models) once, each checked to give the same snapshot.
    """
    phases: list[tuple[float, float, float]] = []
    rss: dict[str, float | bool] = {}

    def timed_tick(observe_now: Callable[[], ClusterSnapshot]) -> tuple[tuple[float, float, float], Any]:
        with gc_paused():  # as the app's polls run (shared.gc_pause)
            started = time.perf_counter()
            snapshot = observe_now()
            observed = time.perf_counter()
            # One placement state and one simulation for both plans, as the utilization poll shares them.
            state = initial_state(snapshot)
            simulation = simulate_scale_up(snapshot, state=state)
            up = simulation.plan
            planned_up = time.perf_counter()
            down = plan_drainable(snapshot, simulated_at={}, state=state,  # a first poll's candidate pool
                                  pending_placements=existing_placements(simulation))
            done = time.perf_counter()
        return (observed - started, planned_up - observed, done - planned_up), (snapshot, up, down)

    def tick() -> tuple[ClusterSnapshot, ScaleUpPlan, ScaleDownPlan]:
        first = not phases
        if first:
            rss.update(resettable=_reset_peak_rss(), before=_status_mib("VmRSS"), peak_before=_status_mib("VmHWM"))
        cold = _observer(raw)  # a new adapter: nothing from an earlier tick to reuse
        spent, result = timed_tick(cold)
        phases.append(spent)
        if first:
            rss["peak_after"] = _status_mib("VmHWM")
        return cast(tuple[ClusterSnapshot, ScaleUpPlan, ScaleDownPlan], result)

    tick_s, peak_mib, (snapshot, up, down) = measure(tick, repeat=repeat)  # `repeat` timed runs, then one traced
    rss_before, peak_after = float(rss["before"]), float(rss["peak_after"])
    # Without the reset, a peak reached before the tick (imports) may hide the tick's: then say nothing.
    rss_growth = peak_after - rss_before if rss["resettable"] or peak_after > float(rss["peak_before"]) else None
    untraced = phases[:-1]
    parse_s = min(p[0] for p in untraced)

    warm = _observer(raw)
    warm()  # the first poll of this Function instance
    warm_phases: list[tuple[float, float, float]] = []
    for _ in range(repeat):
        gc.collect()
        spent, (warm_snapshot, _up, _down) = timed_tick(warm)
        warm_phases.append(spent)
    json_s = _json_loads_s(raw, repeat=repeat)
    tick_s = min(sum(p) for p in untraced)
    warm_tick_s = min(sum(p) for p in warm_phases)
    figures: dict[str, Any] = {
        "nodes": len(snapshot.nodes),
        "pods": len(snapshot.pods),
        "pending_pods": sum(1 for p in snapshot.pods if p.node_name is None),
        "pages": {path.rsplit("/", 1)[-1]: len(pages) for path, pages in raw.pages.items()},
        "json_mb": round(raw.bytes_total() / 1024**2, 1),
        "pod_kib": round(raw.bytes_total(PODS_PATH) / max(1, raw.items(PODS_PATH)) / 1024, 1),  # a pod item, on average
        "json_loads_s": round(json_s, 3),
        "parse_s": round(parse_s, 3),
        "json_path_parse_s": None,
        "naive_parse_s": None,
        "naive_over_fast": None,
        "same_snapshot": None,
        "plan_scale_up_s": round(min(p[1] for p in untraced), 3),
        "plan_scale_down_s": round(min(p[2] for p in untraced), 3),
        "tick_s": round(tick_s, 3),
        "tick_over_json_loads": round(tick_s / json_s, 2),
        "warm_parse_s": round(min(p[0] for p in warm_phases), 3),
        "warm_tick_s": round(warm_tick_s, 3),
        "warm_same_snapshot": warm_snapshot == snapshot,
        "peak_mb": round(peak_mib, 1),
        "rss_mb": None if rss_growth is None else round(rss_growth, 1),
        "rss_before_mb": round(rss_before, 1),
        "rss_peak_mb": round(peak_after, 1),
        "found": {
            "new_nodes": sum(i.delta for i in up.increases), "absorbed": len(up.absorbed),
            "unplaceable": len(up.unplaceable), "candidates": len(set(down.unneeded) | set(down.kept)),
            "unneeded": len(down.unneeded), "removals": len(down.removals),
        },
        "repeat": repeat,
    }
    del warm, warm_snapshot
    gc.collect()
    started = time.perf_counter()
    json_snapshot = _observer(raw, path="json")()
    figures["json_path_parse_s"] = round(time.perf_counter() - started, 3)
    same = json_snapshot == snapshot
    del json_snapshot
    if naive:
        gc.collect()
        started = time.perf_counter()
        naive_snapshot = naive_observe(raw)
        naive_s = time.perf_counter() - started
        figures.update(naive_parse_s=round(naive_s, 3), naive_over_fast=round(naive_s / parse_s, 1))
        same = same and naive_snapshot == snapshot
    figures["same_snapshot"] = same
    return figures


def _worker(directory: Path, repeat: int, naive: bool) -> int:
    print(json.dumps(measure_size(RawCluster.load(directory), repeat=repeat, naive=naive)))
    return 0


# --- engine at scale ---------------------------------------------------------------------------------


def _goal_row(result: dict[str, Any], goal: tuple[float, float] | None) -> dict[str, Any]:
    """The row with its goal and verdicts: `met` when the tick's time and memory (the larger figure) are both within."""
    if goal is None:
        return {**result, "goal": None, "met": None, "met_tick": None, "met_memory": None}
    seconds, mib = goal
    met_tick = result["tick_s"] <= seconds
    met_ratio = result["tick_over_json_loads"] <= JSON_RATIO_GOAL
    met_memory = max(result["peak_mb"], result["rss_mb"] or 0.0) <= mib
    return {**result, "goal": {"tick_s": seconds, "mb": mib, "tick_over_json_loads": JSON_RATIO_GOAL},
            "met": met_tick and met_ratio and met_memory, "met_tick": met_tick, "met_ratio": met_ratio,
            "met_memory": met_memory}


def default_repeat(size: int) -> int:
    """Timed ticks per size: the big sizes are slow enough that one run is what the time allows."""
    return 3 if size <= 100 else 2 if size <= 1000 else 1


def engine_at_scale(
    sizes: Sequence[int] = (100, 1000, 5000),
    pods_per_node: int = 30,
    *,
    repeat: int | None = None,
    naive: bool | Collection[int] = True,
    workdir: Path | None = None,
    timeout: float = 900.0,
) -> dict[str, Any]:
    """Per size, one tick's figures (see the module docstring), each size in a fresh worker process.

    The pages are generated here into a temporary directory (in `workdir` if given), then a worker
    (`python -m devtools.bench_scale --worker DIR`) measures them. `repeat`: timed ticks per size
    (default: `default_repeat`). The naive read runs once per size; `naive` may instead name the sizes
    to run it for (False: none).
    """
    rows: dict[str, Any] = {}
    section_started = time.perf_counter()
    for size in sizes:
        started = time.perf_counter()
        with_naive = naive if isinstance(naive, bool) else size in naive
        with tempfile.TemporaryDirectory(prefix=f"bench-scale-{size}-", dir=workdir) as tmp:
            raw_cluster(tick_cluster(size, pods_per_node), directory=Path(tmp))
            generated = time.perf_counter() - started
            gc.collect()
            completed = subprocess.run(
                [sys.executable, "-m", "devtools.bench_scale", "--worker", tmp,
                 "--repeat", str(repeat or default_repeat(size)), *(() if with_naive else ("--no-naive",))],
                cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
            )
        if completed.returncode != 0:
            raise RuntimeError(f"the {size}-node worker failed (exit {completed.returncode}):\n{completed.stderr[-3000:]}")
        result = json.loads(completed.stdout.strip().splitlines()[-1])
        rows[str(size)] = _goal_row({**result, "generate_s": round(generated, 1),
                                     "wall_s": round(time.perf_counter() - started, 1)}, GOALS.get(size))
    return {
        "sizes": rows,
        "pods_per_node": pods_per_node,
        "page_size": DEFAULT_PAGE_SIZE,
        "tick": "observe on a new adapter (a cold Function instance): list nodes, pods and PodDisruptionBudgets from "
                "the recorded API responses through the Kubernetes adapter (typed decoding of each page, the "
                "converters), observe's assembly (scale sets handed over, ARM is not measured); then the scale-up "
                "simulation (plan_scale_up_s, the placement state's build included) and plan_scale_down on the same "
                "state with that simulation's placements, as the utilization poll plans",
        "memory": "peak_mb: tracemalloc peak over one whole tick; rss_mb: growth of the worker's peak RSS (VmHWM, "
                  "reset before the tick) over its RSS before the tick; a goal's MiB holds the larger",
        "json_loads_s": "json.loads of every page's bytes, held in memory: the baseline of tick_over_json_loads",
        "json_path_parse_s": "the previous path once: pages parsed by json.loads into dicts, the converters on dicts",
        "warm": "warm_*: the same adapter's next poll of the unchanged cluster (uid and resourceVersion reuse)",
        "naive_path": "CoreV1Api/PolicyV1Api list calls as usually made (preloaded: the client decodes each page and "
                      "deserialises it into V1NodeList/V1PodList/V1PodDisruptionBudgetList), sanitize_for_serialization "
                      "of each item back to the API's JSON shape, the same converters and observe(); run once per size",
        "wall_s": round(time.perf_counter() - section_started, 1),
        "python": sys.version.split()[0],
    }


def _mark(met: bool | None) -> str:
    return "-" if met is None else "met" if met else "MISSED"


def _goal_text(goal: Mapping[str, float] | None) -> str:
    return (f"<= {goal['tick_s']:g} s and {goal['tick_over_json_loads']:g}x json.loads, <= {goal['mb']:g} MiB"
            if goal else "-")


def engine_table(result: Mapping[str, Any]) -> list[str]:
    """One row per cluster size: the tick's parts, its memory, and whether the goal was met."""
    rows = [
        "| nodes x pods | JSON listed | json.loads | read (typed) | read (json.loads + converters) | read (client "
        "models) | scale-up | scale-down | tick | tick / json.loads | warm read | warm tick | peak (tracemalloc) | "
        "RSS growth | goal | goal met |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["sizes"].values():
        rows.append(
            f"| {r['nodes']:,} x {r['pods']:,} | {r['json_mb']:,.0f} MiB | {r['json_loads_s']:.3f} s | "
            f"{r['parse_s']:.3f} s | {_seconds(r.get('json_path_parse_s'))} | {_seconds(r.get('naive_parse_s'))} | "
            f"{r['plan_scale_up_s']:.3f} s | {r['plan_scale_down_s']:.3f} s | {r['tick_s']:.3f} s | "
            f"{r['tick_over_json_loads']:.2f}x | {r['warm_parse_s']:.3f} s | {r['warm_tick_s']:.3f} s | "
            f"{r['peak_mb']:.0f} MiB | "
            f"{'n/a' if r.get('rss_mb') is None else format(r['rss_mb'], '.0f') + ' MiB'} | {_goal_text(r.get('goal'))} | "
            f"{_verdict(r)} |"
        )
    return rows


def _verdict(row: Mapping[str, Any]) -> str:
    if row.get("met") is None:
        return "-"
    if row["met"]:
        return "met"
    missed = [what for what, key in (("time", "met_tick"), ("x json.loads", "met_ratio"), ("memory", "met_memory"))
              if row.get(key) is False]
    return f"MISSED ({', '.join(missed)})" if missed else "MISSED"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


# --- cold start --------------------------------------------------------------------------------------

_IMPORT_SCRIPT = """\
import time
started = time.perf_counter()
import function_app
print(time.perf_counter() - started)
"""

_POLL_SCRIPT = """\
import time
spawned_wall = time.time()
started = time.perf_counter()
import json
import function_app
imported = time.perf_counter()
from shared.context import get_context
from shared.services.pending import run_pending_poll
context = get_context()
built = time.perf_counter()
result = run_pending_poll(context.ports, context.settings, now=context.ports.clock.now())
polled = time.perf_counter()
print(json.dumps({"script_started_wall": spawned_wall, "import_s": imported - started, "context_s": built - imported,
                  "poll_s": polled - built, "pending": result.pending, "enqueued": len(result.enqueued)}))
"""


def _heaviest_imports(stderr: str, count: int = 5) -> list[dict[str, Any]]:
    """The imports under `function_app` with the largest cumulative time, from `-X importtime` output.

    Lines come children first; function_app's subtree is the run of deeper lines just before its own.
    """
    entries = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        self_us, cumulative_us, name = line[len("import time:"):].split("|", 2)
        if not self_us.strip().isdigit():
            continue  # the header line
        depth = (len(name) - len(name.lstrip())) // 2
        entries.append((name.strip(), depth, int(self_us), int(cumulative_us)))
    top = next((i for i in range(len(entries) - 1, -1, -1) if entries[i][0] == "function_app"), None)
    if top is None:
        return []
    subtree = []
    for entry in reversed(entries[:top]):
        if entry[1] <= entries[top][1]:
            break
        subtree.append(entry)
    subtree.sort(key=lambda e: -e[3])
    return [{"module": name, "cumulative_ms": round(cum / 1000, 1), "self_ms": round(own / 1000, 1),
             "depth": depth - entries[top][1]} for name, depth, own, cum in subtree[:count]]


def import_times(runs: int = 5) -> dict[str, Any]:
    """`import function_app` timed in `runs` fresh interpreters (median), and one `-X importtime` run."""
    seconds = []
    for _ in range(runs):
        completed = subprocess.run([sys.executable, "-c", _IMPORT_SCRIPT], cwd=ROOT, capture_output=True, text=True,
                                   check=True, timeout=120)
        seconds.append(float(completed.stdout.strip().splitlines()[-1]))
    traced = subprocess.run([sys.executable, "-X", "importtime", "-c", _IMPORT_SCRIPT], cwd=ROOT, capture_output=True,
                            text=True, check=True, timeout=120)
    median = statistics.median(seconds)
    return {
        "import_s": round(median, 3),
        "import_runs_s": [round(s, 3) for s in seconds],
        "import_goal_s": IMPORT_GOAL_S,
        "import_met": median < IMPORT_GOAL_S,
        "heaviest_imports": _heaviest_imports(traced.stderr),
    }


def _poll_scenario(workdir: Path) -> Path:
    """The burst scenario with its pods pending from the start, so the first poll has a scale-up to plan."""
    scenario = json.loads((ROOT / "sandbox" / "scenarios" / "burst.json").read_text())
    scenario["name"] = "cold-start"
    for workload in scenario["workloads"]:
        workload["at"], workload["spread"] = "0s", "0s"
    path = workdir / "cold-start.json"
    path.write_text(json.dumps(scenario, indent=2))
    return path


def first_poll(*, workdir: Path | None = None, timeout: float = 120.0) -> dict[str, Any]:
    """A fresh process's time from its start to its first completed pending poll, against sandbox and Azurite.

    Azurite is leased as the demo does (devtools.azurite.shared_azurite); the sandbox runs the burst
    scenario at real speed with its pods pending from the start (`devtools.demo.sandbox_process`); the
    child gets the sandbox's app settings with a table and queue of its own, and uses the system clock,
    as the deployed app does. Returns {"skipped": why} when Azurite or the sandbox cannot be started.
    """
    from devtools.azurite import AzuriteError, shared_azurite
    from devtools.demo import sandbox_process

    workdir = workdir or ROOT / "out" / "bench" / "cold-start"
    workdir.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:12]
    with contextlib.ExitStack() as stack:
        try:
            connection = stack.enter_context(shared_azurite())
        except (AzuriteError, OSError) as exc:
            return {"skipped": f"Azurite could not be started: {exc}"}
        try:
            sandbox = stack.enter_context(sandbox_process(str(_poll_scenario(workdir)), speed=1.0, seed=0,
                                                          workdir=workdir / "sandbox"))
        except (RuntimeError, OSError, ValueError) as exc:
            return {"skipped": f"the sandbox could not be started: {exc}"}
        deadline = time.monotonic() + 30
        try:
            while sandbox.get("/sandbox/state").get("pending", 0) == 0:
                if time.monotonic() > deadline:
                    return {"skipped": "the sandbox had no pending pod after 30 s"}
                time.sleep(0.2)
        except OSError as exc:
            return {"skipped": f"the sandbox does not answer: {exc}"}
        table, queue = f"coldstart{run_id}", f"cold-start-{run_id}"
        stack.callback(_drop_storage, connection, table, queue)
        env = {**os.environ, **sandbox.env, "AzureWebJobsStorage": connection, "STATE_TABLE": table,
               "SCALE_ACTIONS_QUEUE": queue, "LOG_LEVEL": "warning"}
        spawned = time.time()
        completed = subprocess.run([sys.executable, "-c", _POLL_SCRIPT], cwd=ROOT, env=env, capture_output=True,
                                   text=True, timeout=timeout, check=False)
        finished = time.time()
        if completed.returncode != 0:
            return {"skipped": f"the poll process failed (exit {completed.returncode}): {completed.stderr[-1500:]}"}
        child = json.loads(completed.stdout.strip().splitlines()[-1])
    first_poll_s = child["context_s"] + child["poll_s"]
    return {
        "interpreter_s": round(child["script_started_wall"] - spawned, 3),
        "poll_import_s": round(child["import_s"], 3),
        "context_s": round(child["context_s"], 3),
        "poll_s": round(child["poll_s"], 3),
        "first_poll_s": round(first_poll_s, 3),
        "total_s": round(child["script_started_wall"] - spawned + child["import_s"] + first_poll_s, 3),
        "process_wall_s": round(finished - spawned, 3),
        "pending_pods": child["pending"],
        "actions_enqueued": child["enqueued"],
    }


def _drop_storage(connection: str, table: str, queue: str) -> None:
    from azure.core.exceptions import AzureError
    from azure.data.tables import TableServiceClient
    from azure.storage.queue import QueueServiceClient

    from shared.adapters.action_queue import POISON_SUFFIX

    with contextlib.suppress(AzureError), TableServiceClient.from_connection_string(connection) as tables:
        tables.delete_table(table)
    with QueueServiceClient.from_connection_string(connection) as queues:
        for name in (queue, queue + POISON_SUFFIX):
            with contextlib.suppress(AzureError):
                queues.delete_queue(name)


def cold_start(*, runs: int = 5, poll: bool = True) -> dict[str, Any]:
    """Import figures (median of `runs` fresh interpreters, heaviest imports) and the first poll's (or why skipped)."""
    result = import_times(runs)
    if poll:
        polled = first_poll()
        if "skipped" in polled:
            result.update(first_poll_s=None, first_poll_skipped=polled["skipped"])
        else:
            result.update(polled)
    else:
        result.update(first_poll_s=None, first_poll_skipped="not asked for")
    return result


def cold_start_table(result: Mapping[str, Any]) -> list[str]:
    """What a fresh instance spends before its first useful work, with the import goal met or missed."""
    rows = ["| measure | time | goal | goal met |", "|---|---|---|---|",
            f"| import function_app (median of {len(result.get('import_runs_s', [])) or '?'} fresh interpreters) | "
            f"{result['import_s']:.3f} s | < {result['import_goal_s']:g} s | {_mark(result['import_met'])} |"]
    if result.get("first_poll_s") is None:
        rows.append(f"| first pending poll | skipped: {result.get('first_poll_skipped', '?')} | - | - |")
    else:
        rows += [
            f"| interpreter start (spawn to first line) | {result['interpreter_s']:.3f} s | - | - |",
            f"| import function_app (that process) | {result['poll_import_s']:.3f} s | - | - |",
            f"| build the context (settings, SDK clients) | {result['context_s']:.3f} s | - | - |",
            f"| pending poll ({result['pending_pods']} pending pods; scale-up actions enqueued: {result['actions_enqueued']}) | "
            f"{result['poll_s']:.3f} s | - | - |",
            f"| first poll (context + poll) | {result['first_poll_s']:.3f} s | - | - |",
            f"| total, process start to first poll done | {result['total_s']:.3f} s | - | - |",
        ]
    heaviest = result.get("heaviest_imports") or []
    if heaviest:
        rows += ["", "| heaviest imports under function_app (-X importtime) | depth | cumulative | self |",
                 "|---|---|---|---|"]
        rows += [f"| {h['module']} | {h['depth']} | {h['cumulative_ms']:.1f} ms | {h['self_ms']:.1f} ms |" for h in heaviest]
    return rows


# --- command line ------------------------------------------------------------------------------------


def _merge_results(path: Path, **sections: Any) -> None:
    try:
        existing = json.loads(path.read_text())
    except (OSError, ValueError):
        existing = {}
    if not isinstance(existing, dict):
        existing = {}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**existing, **sections}, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.bench_scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="only 100 and 1,000 nodes")
    parser.add_argument("--no-poll", action="store_true", help="skip the first-poll measurement (no Azurite, no sandbox)")
    parser.add_argument("--json", type=Path, default=RESULTS_PATH, help="merge the results into this file")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-naive", action="store_true", help="skip the naive read (the client's models)")
    args = parser.parse_args(argv)
    if args.worker is not None:
        return _worker(args.worker, args.repeat or 1, not args.no_naive)
    engine = engine_at_scale((100, 1000) if args.quick else (100, 1000, 5000), repeat=args.repeat,
                             naive=not args.no_naive)
    print("\n".join(engine_table(engine)))
    print(f"(engine section: {engine['wall_s']:.0f} s of wall time, each size in a fresh worker process)")
    print()
    cold = cold_start(poll=not args.no_poll)
    print("\n".join(cold_start_table(cold)))
    _merge_results(args.json, engine=engine, cold_start=cold)
    print(f"\nwrote {args.json} (engine, cold_start)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
