"""The Kubernetes API surface of the world: list, get, create, replace and delete over the object store.

`KubeResourcesPart` owns the counts of the Events callers create (by reason, by involved object,
and the latest NotTriggerScaleUp message about each pod) and the cluster-scoped objects made at
start (namespaces, PodDisruptionBudgets). Its calls give API semantics: deep copies in storage order,
PDB status computed on read, optimistic concurrency on replace, names from generateName. Pods
created, deleted or evicted through it get the world's pod lifecycle (`sandbox.world.pod_lifecycle`);
a pod's replace (and so its PATCH) changes its metadata only; nodes deleted through it go as
`sandbox.world.nodes` removes them.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from sandbox.model.units import rfc3339
from sandbox.world import kobjects
from sandbox.world.compute import InstanceSim, ScaleSetSim
from sandbox.world.core import INITIAL_NODE_AGE, NAME_ALPHABET, WorldCore
from sandbox.world.disruption import budget_status, status_json
from sandbox.world.errors import KubeError, conflict, not_found
from sandbox.world.nodes import marked_for_removal

MAX_EVENTS = 10_000  # core/v1 events kept (the real API expires them after an hour)


class KubeResourcesPart(WorldCore):
    """Kubernetes API calls on the world's objects. See the module docstring."""

    def _init_kube_state(self) -> None:
        self._events_by_reason: Counter[str] = Counter()  # Events created through the API
        self._not_triggered: dict[tuple[str, str], str] = {}  # pod -> the latest NotTriggerScaleUp message about it
        self._events_by_object: dict[str, Counter[str]] = {}  # "namespace/name" of the involved object -> reasons
        # Writes to nodes the autoscaler does not manage: those of no scale set (a k3s server, a hand-made VM) and
        # those of a scale set without the discovery tags (`"autoscaled": false`). Node -> how many (node updates
        # and deletes and evictions of its pods through the Kubernetes API; deletes, deallocations, starts and
        # scale-in protection of its instance through ARM). An autoscaler must never touch them.
        self._unmanaged_touches: Counter[str] = Counter()

    def _touch_if_unmanaged(self, node_name: str | None) -> None:
        # A virtual node is no scale set's either, but an autoscaler may gate it (a taint) and move pods off it.
        if not node_name or self._is_virtual_node(node_name):
            return
        inst = self._by_node.get(node_name)
        untagged = inst is not None and not self._is_managed_set(self._groups[inst.group_key])
        if (inst is None or untagged) and self._store.get("nodes", "", node_name) is not None:
            self._unmanaged_touches[node_name] += 1

    def _touch_untagged_instances(self, group: ScaleSetSim, targets: Iterable[InstanceSim]) -> None:
        """An ARM write naming instances of a scale set without the discovery tags touches their nodes."""
        if self._is_managed_set(group):
            return
        for inst in targets:
            if inst.node_registered and self._store.get("nodes", "", inst.node_name) is not None:
                self._unmanaged_touches[inst.node_name] += 1

    def _init_namespaces(self) -> None:
        names = {"default", "kube-system", "kube-public", "kube-node-lease", *self.scenario.namespaces}
        names |= {w.namespace for w in self.scenario.workloads} | {d.namespace for d in self.scenario.daemonsets}
        names |= {p.namespace for p in self.scenario.pdbs}
        names |= {m.namespace for g in self.scenario.node_groups for m in g.mirror_pods}
        for name in sorted(names):
            self._store.put(
                "namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": name,
                        "uid": self._uid(),
                        "creationTimestamp": rfc3339(self.start - INITIAL_NODE_AGE),
                        "labels": {"kubernetes.io/metadata.name": name},
                    },
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                },
            )

    def _init_pdbs(self) -> None:
        for spec in self.scenario.pdbs:
            body: dict[str, Any] = {"selector": {"matchLabels": dict(spec.selector)}}
            if spec.min_available is not None:
                body["minAvailable"] = spec.min_available
            else:
                body["maxUnavailable"] = spec.max_unavailable
            self._store.put(
                "poddisruptionbudgets",
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {
                        "name": spec.name,
                        "namespace": spec.namespace,
                        "uid": self._uid(),
                        "generation": 1,
                        "creationTimestamp": rfc3339(self.start - INITIAL_NODE_AGE),
                    },
                    "spec": body,
                },
            )

    @property
    def resource_version(self) -> str:
        with self.lock:
            return str(self._store.revision)

    def k8s_list(self, resource: str, namespace: str | None = None, *,
                 accept: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
        """Deep copies, sorted by namespace/name like the API server's storage order.

        `accept` (a label/field selector) sees the stored object and is applied before copying: a
        `spec.nodeName=` list of a cluster with thousands of finished pods copied them all (140 ms a call
        in many-idle, measured), where the API server answers it from an index.
        """
        with self.lock:
            return [self._render(resource, obj) for obj in self._store.listed(resource, namespace)
                    if accept is None or accept(obj)]

    def k8s_view(self, resource: str) -> list[dict[str, Any]]:
        """The stored objects themselves in storage order, not copies: for in-process readers that never
        change them (the replay converts every pod each poll, and deep copies would dominate its time)."""
        with self.lock:
            return self._store.listed(resource)

    def k8s_get(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            obj = self._store.get(resource, namespace, name)
            if obj is None:
                raise not_found(resource, name)
            return self._render(resource, obj)

    def _render(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        result = copy.deepcopy(obj)
        if resource == "poddisruptionbudgets":
            status = budget_status(obj["spec"], self._selected_pods(obj))
            result["status"] = status_json(status, self._ts())
        return result

    def namespace_exists(self, namespace: str) -> bool:
        with self.lock:
            return self._store.get("namespaces", "", namespace) is not None

    def k8s_create(self, resource: str, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an event, a config map or a pod (pods get sim semantics: scheduled, run for their duration)."""
        with self.lock:
            if not self.namespace_exists(namespace):
                raise not_found("namespaces", namespace)
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name"):
                if not meta.get("generateName"):
                    message = f"{resource} is invalid: metadata.name: Required value: name or generateName is required"
                    raise KubeError(422, "Invalid", message)
                meta["name"] = meta["generateName"] + "".join(self._ids.choice(NAME_ALPHABET) for _ in range(5))
            if meta.get("namespace") not in (None, namespace):
                message = "the namespace of the provided object does not match the namespace sent on the request"
                raise KubeError(400, "BadRequest", message)
            if self._store.get(resource, namespace, meta["name"]) is not None:
                details = {"name": meta["name"], "kind": resource}
                raise KubeError(409, "AlreadyExists", f'{resource} "{meta["name"]}" already exists', details)
            meta.update(namespace=namespace, uid=self._uid(), creationTimestamp=self._ts())
            meta.pop("resourceVersion", None)
            if resource == "pods":
                return copy.deepcopy(self._pod_obj(self._create_api_pod(obj)))
            if resource == "events":
                self._events_by_reason[str(obj.get("reason") or "")] += 1
                involved = obj.get("involvedObject") or {}
                if obj.get("reason") == "NotTriggerScaleUp" and involved.get("kind") == "Pod":
                    key = (str(involved.get("namespace") or namespace), str(involved.get("name") or ""))
                    self._not_triggered[key] = str(obj.get("message") or "")
                about = f"{involved.get('namespace') or ''}/{involved.get('name') or ''}"
                self._events_by_object.setdefault(about, Counter())[str(obj.get("reason") or "")] += 1
                if len(self._store.table("events")) >= MAX_EVENTS:
                    self._store.drop_oldest("events")
            obj.setdefault("apiVersion", "v1")
            obj.setdefault("kind", {"events": "Event", "configmaps": "ConfigMap"}.get(resource, ""))
            return copy.deepcopy(self._store.put(resource, obj))

    def k8s_current_for_write(self, resource: str, namespace: str, name: str, new: dict[str, Any]) -> dict[str, Any]:
        """The stored object a PUT of `new` replaces (call with the lock held): 404 when there is none, 400 when
        `new` names another object, 409 when its resourceVersion is not the stored one (optimistic concurrency)."""
        current = self._store.get(resource, namespace, name)
        if current is None:
            raise not_found(resource, name)
        meta = new.get("metadata") or {}
        if meta.get("name", name) != name:
            message = f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            raise KubeError(400, "BadRequest", message)
        if meta.get("resourceVersion") and meta["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise conflict(resource, name)
        return current

    def k8s_replace(self, resource: str, namespace: str, name: str, new: dict[str, Any]) -> dict[str, Any]:
        """PUT semantics (also the last step of PATCH): optimistic concurrency on resourceVersion."""
        with self.lock:
            current = self.k8s_current_for_write(resource, namespace, name, new)
            meta = new.get("metadata") or {}
            updated = copy.deepcopy(new)
            updated_meta = updated.setdefault("metadata", {})
            for immutable in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "ownerReferences"):
                if immutable in current["metadata"]:
                    updated_meta[immutable] = current["metadata"][immutable]
            updated["apiVersion"], updated["kind"] = current.get("apiVersion"), current.get("kind")
            if resource == "nodes":
                kobjects.validate_node(updated)
                updated["status"] = copy.deepcopy(current["status"])  # status is a subresource
                # Set once: the API server allows only "" -> a value (kubeadm nodes start without one); the
                # sandbox keeps a value already set rather than refusing a change.
                spec = updated.setdefault("spec", {})
                if current["spec"].get("providerID"):
                    spec["providerID"] = current["spec"]["providerID"]
                elif not spec.get("providerID"):
                    spec.pop("providerID", None)
            elif resource == "pods":
                return self._update_pod(current, updated)
            elif resource != "configmaps":
                raise KubeError(405, "MethodNotAllowed", f"the sandbox does not update {resource}")
            was_marked = resource == "nodes" and marked_for_removal(current)
            if resource == "nodes":
                self._touch_if_unmanaged(name)
            self._store.put(resource, updated)
            self._retry_all_pending = self._retry_all_pending or resource == "nodes"
            if resource == "nodes":
                self._note_removal_mark(name, was_marked=was_marked, marked=marked_for_removal(updated))
            return copy.deepcopy(updated)

    def _update_pod(self, current: dict[str, Any], updated: dict[str, Any]) -> dict[str, Any]:
        """A pod's PUT or PATCH changes its metadata (labels, annotations such as the ReplicaSet controller's
        pod-deletion-cost), in the stored object itself: the world's parts hold on to it. The API server lets a
        few spec fields change (container images, ...); the sandbox runs no images, so it refuses any spec
        change. Status is a subresource: the body's is ignored."""
        meta = current["metadata"]
        if updated.get("spec") != current.get("spec"):
            raise KubeError(422, "Invalid", f'Pod "{meta["name"]}" is invalid: spec: Forbidden: pod updates may not '
                                            "change fields other than `spec.containers[*].image`, "
                                            "`spec.activeDeadlineSeconds` or `spec.tolerations` (only additions); "
                                            "the sandbox allows none")
        new_meta = updated["metadata"]
        for name in ("labels", "annotations"):
            value = new_meta.get(name)
            if value is not None and (not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())):
                message = f'Pod "{meta["name"]}" is invalid: metadata.{name}: must be a map of strings'
                raise KubeError(422, "Invalid", message)
        if "deletionGracePeriodSeconds" in meta:
            new_meta["deletionGracePeriodSeconds"] = meta["deletionGracePeriodSeconds"]
        labels_changed = (new_meta.get("labels") or {}) != (meta.get("labels") or {})
        current["metadata"] = new_meta
        self._store.touch(current)
        pod = self._live.get((meta["namespace"], meta["name"]))
        if labels_changed and pod is not None:
            # Other pods' affinity, anti-affinity and spreading select on labels: the next pass looks again.
            pod.needs = replace(pod.needs, labels=MappingProxyType(dict(new_meta.get("labels") or {})))
            pod.shape = None
            self._retry_all_pending = True
        return copy.deepcopy(current)

    def k8s_delete(self, resource: str, namespace: str, name: str, grace_seconds: float | None = None) -> dict[str, Any]:
        with self.lock:
            current = self._store.get(resource, namespace, name)
            if current is None:
                raise not_found(resource, name)
            if resource == "pods":
                return self._delete_pod(self._live[(namespace, name)], grace_seconds)
            if resource == "nodes":
                self._touch_if_unmanaged(name)
                inst = self._by_node.get(name)
                if inst is not None:
                    inst.node_deleted_by_api = True
                removed = self._remove_node(name)
                return copy.deepcopy(removed or current)
            if resource not in ("configmaps", "events", "capacitybuffers", "podtemplates", "provisioningrequests"):
                raise KubeError(405, "MethodNotAllowed", f"the sandbox does not delete {resource}")
            return copy.deepcopy(self._store.drop(resource, namespace, name) or current)

