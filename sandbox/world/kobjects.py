"""Kubernetes objects in their API shape (what `kubectl get -o json` shows).

Builders only: the world decides when objects change, these functions decide
what they look like. The official Python client validates responses with
pydantic models, so every field the models mark required is present and every
quantity is a string.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from shared.domain import Taint, Toleration
from shared.engine import daemonsets
from sandbox.model.kubernetes_version import KUBELET_VERSION
from sandbox.model.podspec import HostPort
from sandbox.model.resources import Amounts, resource_list
from sandbox.world.errors import KubeError

CONTAINER_RUNTIME = "containerd://1.7.22"
CONTAINER_IMAGE = "mcr.microsoft.com/azurelinux/busybox:1.36"


def taint_json(taint: Taint, added_at: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        obj["value"] = taint.value
    if added_at is not None:
        obj["timeAdded"] = added_at
    return obj


def toleration_json(toleration: Toleration) -> dict[str, Any]:
    obj: dict[str, Any] = {"operator": toleration.operator}
    if toleration.key:
        obj["key"] = toleration.key
    if toleration.value:
        obj["value"] = toleration.value
    if toleration.effect:
        obj["effect"] = toleration.effect
    return obj


# What the DaemonSet controller adds to every pod it makes: the engine's list (the sandbox has no
# host-network pods, so network-unavailable is never added here).
DAEMON_POD_TOLERATIONS = daemonsets.DAEMON_POD_TOLERATIONS


def daemonset_object(namespace: str, name: str, uid: str, created: str, pod: Mapping[str, Any]) -> dict[str, Any]:
    """A DaemonSet (apps/v1) whose template is `pod`'s labels and spec, less what the controller adds to its pods."""
    spec = copy.deepcopy(dict(pod["spec"]))
    added = [toleration_json(t) for t in DAEMON_POD_TOLERATIONS]
    tolerations = [t for t in spec.pop("tolerations", []) if t not in added]
    if tolerations:
        spec["tolerations"] = tolerations
    labels = dict(pod["metadata"].get("labels") or {})
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": 1, "creationTimestamp": created},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "revisionHistoryLimit": 10,
        },
        "status": {"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0,
                   "numberReady": 0, "observedGeneration": 1},
    }


def parse_taints(node: Mapping[str, Any]) -> tuple[Taint, ...]:
    raw = (node.get("spec") or {}).get("taints") or []
    return tuple(Taint(t.get("key", ""), t.get("value") or "", t.get("effect", "")) for t in raw if isinstance(t, Mapping))


def condition(kind: str, status: str, at: str, reason: str = "", message: str = "") -> dict[str, Any]:
    obj: dict[str, Any] = {"type": kind, "status": status, "lastTransitionTime": at}
    if reason:
        obj["reason"] = reason
    if message:
        obj["message"] = message
    return obj


def node_object(
    *,
    name: str,
    uid: str,
    created: str,
    provider_id: str,
    labels: Mapping[str, str],
    taints: tuple[Taint, ...],
    capacity: Amounts,
    allocatable: Amounts,
    internal_ip: str,
    pod_cidr: str,
    machine_id: str,
    kubelet_version: str = KUBELET_VERSION,
    container_runtime: str = CONTAINER_RUNTIME,
) -> dict[str, Any]:
    """A Node as kubelet registers it; an empty `provider_id` (no cloud provider set one) is left out,
    as the API server leaves out an empty `spec.providerID`."""

    def node_condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": created,
            "lastTransitionTime": created,
        }

    spec: dict[str, Any] = {"providerID": provider_id} if provider_id else {}
    spec |= {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]}
    if taints:
        spec["taints"] = [taint_json(t) for t in taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": uid,
            "creationTimestamp": created,
            "labels": dict(labels),
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": spec,
        "status": {
            "capacity": resource_list(capacity),
            "allocatable": resource_list(allocatable),
            "conditions": [
                node_condition(
                    "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"
                ),
                node_condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                node_condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                node_condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": internal_ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": uid,
                "containerRuntimeVersion": container_runtime,
                "kernelVersion": "5.15.0-1073-azure",
                "kubeProxyVersion": kubelet_version,
                "kubeletVersion": kubelet_version,
                "machineID": machine_id,
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.5 LTS",
                "systemUUID": machine_id,
            },
        },
    }


def owner_reference(kind: str, name: str, uid: str) -> dict[str, Any]:
    api_version = {"Job": "batch/v1", "ReplicaSet": "apps/v1", "DaemonSet": "apps/v1", "Node": "v1"}.get(kind, "v1")
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_object(
    *,
    namespace: str,
    name: str,
    uid: str,
    created: str,
    requests: Amounts,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    node_selector: Mapping[str, str],
    tolerations: tuple[Toleration, ...],
    owner: dict[str, Any] | None,
    restart_policy: str,
    priority_class: str = "",
    priority: int = 0,
    affinity: Mapping[str, Any] | None = None,
    topology_spread_constraints: tuple[Mapping[str, Any], ...] = (),
    host_ports: tuple[HostPort, ...] = (),
    volumes: tuple[Mapping[str, Any], ...] = (),
    active_deadline_seconds: int | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": resource_list(requests, with_pods=False)}
    extended = {k: v for k, v in resources["requests"].items() if "/" in k}
    if extended:  # extended resources cannot be overcommitted: the API server wants limits equal to requests
        resources["limits"] = extended
    container: dict[str, Any] = {
        "name": "main",
        "image": CONTAINER_IMAGE,
        "resources": resources,
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    if host_ports:
        container["ports"] = [
            {"containerPort": p.port, "hostPort": p.port, "protocol": p.protocol} for p in host_ports
        ]
    if volumes:
        container["volumeMounts"] = [{"name": v["name"], "mountPath": f"/mnt/{v['name']}"} for v in volumes]
    spec: dict[str, Any] = {
        "containers": [container],
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
        "serviceAccountName": "default",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": priority,
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = copy.deepcopy(dict(affinity))
    if tolerations:
        spec["tolerations"] = [toleration_json(t) for t in tolerations]
    if topology_spread_constraints:
        spec["topologySpreadConstraints"] = [copy.deepcopy(dict(c)) for c in topology_spread_constraints]
    if volumes:
        spec["volumes"] = [copy.deepcopy(dict(v)) for v in volumes]
    if active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = active_deadline_seconds
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "creationTimestamp": created,
        "labels": dict(labels),
    }
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def container_status(*, running_since: str | None = None, finished_at: str | None = None, started_at: str = "",
                     exit_code: int = 0, reason: str = "Completed") -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": "main",
        "image": CONTAINER_IMAGE,
        "imageID": "",
        "ready": finished_at is None and running_since is not None,
        "restartCount": 0,
        "started": finished_at is None and running_since is not None,
    }
    if finished_at is not None:
        status["state"] = {
            "terminated": {"exitCode": exit_code, "reason": reason, "startedAt": started_at, "finishedAt": finished_at}
        }
    elif running_since is not None:
        status["state"] = {"running": {"startedAt": running_since}}
    else:
        status["state"] = {"waiting": {"reason": "ContainerCreating"}}
    return status


def status_object(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A metav1.Status; `status` is Success for 2xx codes."""
    obj: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "code": code,
    }
    if message:
        obj["message"] = message
    if reason:
        obj["reason"] = reason
    if details:
        obj["details"] = details
    return obj


def is_ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def set_condition(obj: dict[str, Any], new: dict[str, Any]) -> bool:
    """Upsert a condition by type; lastTransitionTime only moves when the status does. True if anything changed."""
    conditions: list[dict[str, Any]] = obj.setdefault("status", {}).setdefault("conditions", [])
    for i, cond in enumerate(conditions):
        if cond.get("type") == new["type"]:
            if cond.get("status") == new["status"]:
                new = {**new, "lastTransitionTime": cond.get("lastTransitionTime", new["lastTransitionTime"])}
            if {k: v for k, v in cond.items() if k != "lastHeartbeatTime"} == {
                k: v for k, v in new.items() if k != "lastHeartbeatTime"
            }:
                return False
            conditions[i] = {**cond, **new}
            return True
    conditions.append(new)
    return True


def validate_node(node: dict[str, Any]) -> None:
    """What the API server's validation would refuse in a node update (422 Invalid)."""
    meta = node["metadata"]
    for field_name in ("labels", "annotations"):
        values = meta.get(field_name) or {}
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise KubeError(422, "Invalid", f"Node is invalid: metadata.{field_name}: must be a map of strings")
    taints = (node.get("spec") or {}).get("taints") or []
    if not isinstance(taints, list):
        raise KubeError(422, "Invalid", "Node is invalid: spec.taints: must be a list")
    for i, taint in enumerate(taints):
        if not isinstance(taint, dict) or not taint.get("key"):
            raise KubeError(422, "Invalid", f"Node is invalid: spec.taints[{i}].key: Required value")
        if taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise KubeError(
                422, "Invalid", f'Node is invalid: spec.taints[{i}].effect: Unsupported value: "{taint.get("effect")}"'
            )
