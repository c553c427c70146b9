"""The Cluster and NodeGroupProvider ports served straight from an in-process sandbox World (no HTTP).

The replay measures decisions, so the services talk to the world through the same ports
the functions use, without sockets or SDK pipelines in between. ARM calls are counted and
throttled with the ARM double's own table (`sandbox.api.arm_api.OPERATIONS`): the same labels,
the same per-scale-set token buckets, and a refused call raises ComputeError('TooManyRequests')
as the real adapter does after its capped retries.

Where the world refuses a call, the ports fail as the SDK adapters do in Azure (tests/contract holds
both to the same assertions): any Kubernetes answer that is no outcome of the port is a ClusterError
naming the call, discovery reads the tags as VmssCompute does, and a size the subscription may not
deploy is refused with SkuNotAvailable.

Multi-size groups (`ours+sizes`): the world keeps each size of such a group its own Flexible scale set
(`devtools.replay.pools.Pool.multi_size`), and WorldCompute presents the sizes of one group as that group's
lanes, as an AKS VirtualMachines pool is listed (shared.domain: one NodeGroup per size, id `rg/group~Size`,
allocation strategy "" for sizes chosen freely, the group's min and max shared by its lanes). A lane's
calls go to its size's scale set, and are throttled with that set's buckets (an assumption: a real pool or
instance mix is one resource, whose calls would share one set of buckets).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sandbox.api.arm_api import OPERATIONS, is_restricted, vm_etag_refusal, vm_size_catalogue, vmss_etag
from sandbox.api.patching import merge_patch
from sandbox.api.prices_api import LIST_PRICES_PER_HOUR
from sandbox.api.spot_price_table import spot_fraction_of
from sandbox.model.quota import vm_family
from sandbox.world import World
from sandbox.world import capacity_buffers as buffer_store
from sandbox.world import provisioning_requests as provreq_store
from sandbox.world.compute import Operation as SimOperation
from sandbox.world.compute import ScaleSetSim
from sandbox.world.drift import latest_model_applied
from sandbox.world.errors import ArmError, KubeError
from sandbox.world.faults import default_scale_up_message
from shared.adapters import kube_buffers, kube_provreq
from shared.adapters.kubernetes import (
    event_time,
    add_taint_patch,
    cordon_patch,
    daemonset_from_json,
    disruption_budget_from_json,
    node_from_json,
    pod_from_json,
    remove_taint_patch,
    uncordon_patch,
)
from shared import discovery_tags
from shared.domain import (
    FLEXIBLE_SCALE_SET,
    UNIFORM_SCALE_SET,
    BufferStatus,
    BufferTemplate,
    CapacityBuffer,
    Condition,
    DaemonSet,
    DisruptionBudget,
    Instance,
    Node,
    NodeGroup,
    Pod,
    ProvisioningRequest,
    QuotaUsage,
    Taint,
    VmSizeCapacity,
    group_id,
    lane_of,
    parent_group_id,
)
from shared.ports import CHANGED_SINCE_READ, SCALE_IN_PROTECTION_UNSUPPORTED, ClusterError, ComputeError, EvictionOutcome, Operation, QuotaUnavailable

_GPU = "nvidia.com/gpu"
_FINISHED = ("Succeeded", "Failed")

log = logging.getLogger(__name__)


def _cluster_error(what: str, exc: KubeError) -> ClusterError:
    """The port's error for the world's refusal, as KubernetesCluster raises it: transient on 429 and 5xx."""
    return ClusterError(f"{what}: HTTP {exc.code} {exc.reason}: {exc.message}",
                        transient=exc.code == 429 or exc.code >= 500)


class WorldCluster:
    """The Cluster port over the world's objects; conversions are cached by resourceVersion."""

    def __init__(self, world: World) -> None:
        self._world = world
        self._nodes: dict[str, tuple[str, Node]] = {}
        self._pods: dict[str, tuple[str, Pod]] = {}

    @staticmethod
    def _cached(cache: dict[str, tuple[str, Any]], key: str, obj: Mapping[str, Any], convert: Any) -> Any:
        version = obj["metadata"].get("resourceVersion", "")
        hit = cache.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        value = convert(obj)
        cache[key] = (version, value)
        return value

    def _node(self, obj: Mapping[str, Any]) -> Node:
        return self._cached(self._nodes, obj["metadata"]["name"], obj, node_from_json)

    def _pod(self, obj: Mapping[str, Any]) -> Pod:
        return self._cached(self._pods, obj["metadata"]["uid"], obj, pod_from_json)

    def list_nodes(self) -> list[Node]:
        self._world.count_call("k8s", "LIST nodes", write=False)
        nodes = [self._node(obj) for obj in self._world.k8s_view("nodes")]
        live = {n.name for n in nodes}
        for name in [n for n in self._nodes if n not in live]:
            del self._nodes[name]
        return nodes

    def list_pods(self) -> list[Pod]:
        self._world.count_call("k8s", "LIST pods", write=False)
        objs = self._world.k8s_view("pods")
        pods = [self._pod(obj) for obj in objs if obj["status"].get("phase") not in _FINISHED]
        if len(self._pods) > 2 * len(objs) + 1000:  # forget pods that are gone, now and then
            live = {obj["metadata"]["uid"] for obj in objs}
            self._pods = {uid: hit for uid, hit in self._pods.items() if uid in live}
        return pods

    def get_node(self, name: str) -> Node | None:
        self._world.count_call("k8s", "GET nodes", write=False)
        try:
            return node_from_json(self._world.k8s_get("nodes", "", name))
        except KubeError as exc:
            if exc.code == 404:
                return None
            raise _cluster_error(f"read node {name}", exc) from exc

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        self._world.count_call("k8s", "GET pods", write=False)
        try:
            return pod_from_json(self._world.k8s_get("pods", namespace, name))
        except KubeError as exc:
            if exc.code == 404:
                return None
            raise _cluster_error(f"read pod {namespace}/{name}", exc) from exc

    def annotate_pod(self, namespace: str, name: str, *, annotations: Mapping[str, str | None]) -> None:
        what = f"annotate pod {namespace}/{name}"
        try:
            current = self._world.k8s_get("pods", namespace, name)
        except KubeError as exc:
            if exc.code == 404:
                return
            raise _cluster_error(what, exc) from exc
        self._world.count_call("k8s", "PATCH pods", write=True)
        try:
            self._world.k8s_replace("pods", namespace, name,
                                    merge_patch(current, {"metadata": {"annotations": dict(annotations)}}))
        except KubeError as exc:
            if exc.code != 404:
                raise _cluster_error(what, exc) from exc

    def list_pods_on_node(self, node_name: str) -> list[Pod]:
        self._world.count_call("k8s", "LIST pods", write=False)
        return [
            self._pod(obj) for obj in self._world.k8s_view("pods")
            if obj["spec"].get("nodeName") == node_name and obj["status"].get("phase") not in _FINISHED
        ]

    def get_config_map(self, namespace: str, name: str) -> Mapping[str, str] | None:
        self._world.count_call("k8s", "GET configmaps", write=False)
        try:
            return dict(self._world.k8s_get("configmaps", namespace, name).get("data") or {})
        except KubeError as exc:
            if exc.code == 404:
                return None
            raise _cluster_error(f"read configmap {namespace}/{name}", exc) from exc

    def write_config_map(self, namespace: str, name: str, *, data: Mapping[str, str],
                         annotations: Mapping[str, str]) -> None:
        self._world.count_call("k8s", "PATCH configmaps", write=True)
        what = f"write configmap {namespace}/{name}"
        try:
            try:
                current = self._world.k8s_get("configmaps", namespace, name)
            except KubeError as exc:
                if exc.code != 404:
                    raise
                self._world.k8s_create("configmaps", namespace, {  # 404 when the namespace is missing
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)},
                    "data": dict(data),
                })
                return
            metadata = dict(current.get("metadata") or {})
            metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
            self._world.k8s_replace("configmaps", namespace, name, {
                **current, "metadata": metadata, "data": {**(current.get("data") or {}), **data},
            })
        except KubeError as exc:
            raise _cluster_error(what, exc) from exc

    def list_event_times(self, reason: str) -> list[tuple[datetime, int]]:
        self._world.count_call("k8s", "LIST events", write=False)
        return [event_time(obj) for obj in self._world.k8s_view("events") if obj.get("reason") == reason]

    def list_disruption_budgets(self) -> list[DisruptionBudget]:
        self._world.count_call("k8s", "LIST poddisruptionbudgets", write=False)
        return [disruption_budget_from_json(obj) for obj in self._world.k8s_list("poddisruptionbudgets")]

    def list_daemonsets(self) -> list[DaemonSet]:
        self._world.count_call("k8s", "LIST daemonsets", write=False)
        return [daemonset_from_json(obj) for obj in self._world.k8s_list("daemonsets")]

    def list_capacity_buffers(self) -> list[CapacityBuffer] | None:
        self._world.count_call("k8s", "LIST capacitybuffers", write=False)
        return [kube_buffers.buffer_from_json(obj) for obj in self._world.k8s_list("capacitybuffers")]

    def update_capacity_buffer_status(self, namespace: str, name: str, *, status: BufferStatus) -> None:
        self._world.count_call("k8s", "UPDATE capacitybuffers", write=True)
        try:
            buffer_store.replace_buffer(self._world, namespace, name, {"status": kube_buffers.status_json(status)},
                                        subresource="status")
        except KubeError as exc:
            if exc.code != 404:
                raise _cluster_error(f"update capacitybuffer {namespace}/{name} status", exc) from None

    def list_provisioning_requests(self) -> list[ProvisioningRequest] | None:
        self._world.count_call("k8s", "LIST provisioningrequests", write=False)
        return [kube_provreq.request_from_json(obj) for obj in self._world.k8s_list(provreq_store.REQUESTS)]

    def update_provisioning_request_status(self, namespace: str, name: str, *, conditions: Sequence[Condition],
                                           details: Mapping[str, str] | None = None) -> None:
        """The adapter's one PATCH of /status, as the world applies it: the conditions replace the old ones, the
        details only when given."""
        self._world.count_call("k8s", "PATCH provisioningrequests", write=True)
        current = provreq_store.get_provisioning_request(self._world, namespace, name)
        if current is None:
            return
        status = kube_provreq.status_json(conditions, details, current=current.get("status"))
        try:
            provreq_store.replace_provisioning_request(self._world, namespace, name, {"status": status},
                                                       subresource="status")
        except KubeError as exc:
            if exc.code != 404:
                raise _cluster_error(f"update provisioningrequest {namespace}/{name} status", exc) from None

    def get_pod_template(self, namespace: str, name: str, *, kind: str = "PodTemplate",
                         api_group: str = "") -> BufferTemplate | None:
        if kind != "PodTemplate":
            return None  # the world has no workload controllers: only PodTemplates shape its buffers
        self._world.count_call("k8s", "GET podtemplates", write=False)
        try:
            return kube_buffers.template_from_json(self._world.k8s_get("podtemplates", namespace, name), kind)
        except KubeError as exc:
            if exc.code == 404:
                return None
            raise _cluster_error(f"get podtemplate {namespace}/{name}", exc) from None

    def get_scale(self, namespace: str, name: str, *, kind: str, api_group: str) -> int | None:
        return None  # no workloads in the world (see get_pod_template)

    def _change_node(self, name: str, what: str, change: Any, *, missing_ok: bool) -> None:
        try:
            current = self._world.k8s_get("nodes", "", name)
        except KubeError as exc:
            if exc.code == 404 and missing_ok:
                return
            # As the real adapter does: the port's error, transient when the API server would say so.
            raise _cluster_error(what, exc) from exc
        patch = change(current.get("spec") or {})
        if patch is None:
            return
        self._world.count_call("k8s", "PATCH nodes", write=True)
        try:
            self._world.k8s_replace("nodes", "", name, merge_patch(current, {"spec": patch}))
        except KubeError as exc:
            raise _cluster_error(what, exc) from exc

    def cordon(self, node_name: str, *, taint: Taint) -> None:
        self._change_node(node_name, f"cordon node {node_name}", lambda spec: cordon_patch(spec, taint),
                          missing_ok=False)

    def uncordon(self, node_name: str, *, taint_key: str) -> None:
        self._change_node(node_name, f"uncordon node {node_name}", lambda spec: uncordon_patch(spec, taint_key),
                          missing_ok=True)

    def add_taint(self, node_name: str, *, taint: Taint) -> None:
        self._change_node(node_name, f"taint node {node_name}", lambda spec: add_taint_patch(spec, taint),
                          missing_ok=True)

    def remove_taint(self, node_name: str, *, taint_key: str) -> None:
        self._change_node(node_name, f"untaint node {node_name}", lambda spec: remove_taint_patch(spec, taint_key),
                          missing_ok=True)

    def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> EvictionOutcome:
        self._world.count_call("k8s", "CREATE eviction", write=True)
        try:
            self._world.evict(namespace, name)
        except KubeError as exc:
            if exc.code == 429:
                return "blocked"
            if exc.code == 404:
                return "not_found"
            raise _cluster_error(f"evict pod {namespace}/{name}", exc) from exc
        return "evicted"

    def delete_node(self, name: str) -> None:
        self._world.count_call("k8s", "DELETE nodes", write=True)
        try:
            self._world.k8s_delete("nodes", "", name)
        except KubeError as exc:
            if exc.code != 404:
                raise _cluster_error(f"delete node {name}", exc) from exc


def _operation(op: SimOperation) -> Operation:
    return Operation(token=op.op_id, status=op.status, error_code=op.error_code or "", error_message=op.error_message or "")


def _lanes_etag(sims: Sequence[ScaleSetSim]) -> str:
    """A multi-size group's etag: it changes with any of its sizes' scale sets."""
    return '"' + ".".join(str(sim.generation) for sim in sims) + '"'


class WorldCompute:
    """A NodeGroupProvider over the world's scale sets, counting and throttling calls as the ARM double does.

    `failure_rate` makes that share of capacity increases fail with QuotaExceeded (seeded), the
    way allocation failures surface in Azure: as a failed long-running operation. `kind` is the
    provider kind its groups carry: `vmss-uniform` for the replays; tests give another (`fake`) to
    show that the engine and executor run any backend that implements the interface.

    `multi_size` maps a scale set's name to the multi-size group it is one size of (see the module's docstring):
    such sets are listed only as lanes of their group, never as groups of their own.
    """

    def __init__(
        self, world: World, *, cluster_name: str, resource_groups: tuple[str, ...], failure_rate: float = 0.0, seed: int = 0,
        kind: str = UNIFORM_SCALE_SET, multi_size: Mapping[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self._world = world
        self._cluster_name = cluster_name
        self._resource_groups = resource_groups
        self._failure_rate = failure_rate
        self._rng = random.Random(f"{seed}|provisioning-failures")
        self._multi_size = dict(multi_size or {})

    # -- what the ARM double's dispatcher does, minus HTTP --------------------------------

    def _arm(self, name: str, *, group: ScaleSetSim | None = None, resource_group: str = "") -> None:
        label, write, bucket = OPERATIONS[name]
        self._world.count_call("arm", label, write=write)
        if bucket is None:
            return
        key = group.key if group is not None else f"rg:{resource_group.lower()}"
        spent = self._world.take_token(key, bucket)
        if spent is not None and not spent[0]:
            raise ComputeError(f"{label}: throttled ({spent[3]})", code="TooManyRequests", retry_after=spent[2])

    def _sim(self, group: NodeGroup) -> ScaleSetSim:
        try:
            return self._world.scale_set(self._world.subscription_id, group.resource_group, self._set_name(group))
        except ArmError as exc:  # e.g. ResourceNotFound: the port's error, as the real adapter raises it
            raise ComputeError(f"{exc.code}: {exc.message}", code=exc.code) from exc

    def _set_name(self, group: NodeGroup) -> str:
        """The world scale set behind a group: a lane's size's set, else the group's own."""
        if not group.lane:
            return group.name
        sim = self._lane_sim(group.resource_group, group.name, group.lane)
        if sim is None:
            raise ComputeError(f"ResourceNotFound: multi-size group {group.parent_id} has no size {group.lane}",
                               code="ResourceNotFound")
        return sim.name

    def _lane_sims(self, resource_group: str, name: str) -> list[ScaleSetSim]:
        """The scale sets of multi-size group `name`, in the order the pools list them (smallest size first)."""
        order = list(self._multi_size)
        sims = [sim for sim in self._world.scale_sets(self._world.subscription_id, resource_group)
                if self._multi_size.get(sim.name) == name]
        return sorted(sims, key=lambda sim: order.index(sim.name))

    def _lane_sim(self, resource_group: str, name: str, lane: str) -> ScaleSetSim | None:
        return next((sim for sim in self._lane_sims(resource_group, name)
                     if sim.spec.vm_size.lower() == lane.lower()), None)

    def _lanes(self, sims: Sequence[ScaleSetSim]) -> list[NodeGroup]:
        """One group's lanes: a NodeGroup per size, the group's min and max (its sets' tags) shared as the design
        of multi-size groups says: min = max(0, min - others), max = max(capacity, max - others), where `others`
        are the group's instances of the other sizes. Its etag changes with any of its sets."""
        first = sims[0]
        name = self._multi_size[first.name]
        tags = first.tags
        if not discovery_tags.is_ours(tags, self._cluster_name):
            return []
        limits = discovery_tags.usable_limits(group_id(first.resource_group, name), tags, warn=log.warning)
        if limits is None:
            return []
        total = sum(sim.capacity for sim in sims)
        sizes = tuple(sim.spec.vm_size for sim in sims)
        etag = _lanes_etag(sims)
        return [
            NodeGroup(
                resource_group=sim.resource_group, name=name, min_size=max(0, limits[0] - (total - sim.capacity)),
                max_size=max(sim.capacity, limits[1] - (total - sim.capacity)), capacity=sim.capacity,
                vm_size=sim.spec.vm_size, tags=dict(tags), zones=sim.spec.zones, location=sim.spec.location,
                provider=FLEXIBLE_SCALE_SET, priority=sim.spec.priority,
                eviction_policy=sim.spec.eviction_policy if sim.spec.priority == "Spot" else "", etag=etag,
                lane=sim.spec.vm_size, lanes=sizes, allocation_strategy="",
            )
            for sim in sims
        ]

    def _group_etag(self, group: NodeGroup, sim: ScaleSetSim) -> str:
        """What If-Match is compared with: a lane's group's etag (all its sets), else the scale set's."""
        if not group.lane:
            return vmss_etag(sim)
        return _lanes_etag(self._lane_sims(group.resource_group, group.name))

    def _group_sim(self, group: NodeGroup) -> ScaleSetSim | None:
        """The world scale set behind a group (a lane's size's set), or None where ARM answers 404."""
        if group.lane:
            return self._lane_sim(group.resource_group, group.name, group.lane)
        return self._found(group.resource_group, group.name)

    def _found(self, resource_group: str, name: str) -> ScaleSetSim | None:
        """The scale set, or None where ARM answers 404 (the scale set or its resource group is gone)."""
        try:
            return self._world.scale_set(self._world.subscription_id, resource_group, name)
        except ArmError as exc:
            if exc.status == 404:
                return None
            raise ComputeError(f"{exc.code}: {exc.message}", code=exc.code) from exc

    @staticmethod
    def _some(verb: str, group: NodeGroup, instance_ids: list[str]) -> list[str]:
        # The ARM call without instance ids means "all of them"; the port means "these", so none is a bug.
        if not instance_ids:
            raise ValueError(f"{verb} instances of scale set {group.resource_group}/{group.name}: no instance ids given")
        return list(instance_ids)

    def _as_group(self, sim: ScaleSetSim) -> NodeGroup | None:
        if sim.name in self._multi_size:
            return None  # a lane of a multi-size group (see _lanes)
        tags = sim.tags
        if not discovery_tags.is_ours(tags, self._cluster_name):
            return None
        limits = discovery_tags.usable_limits(f"{sim.resource_group}/{sim.name}", tags, warn=log.warning)
        if limits is None:
            return None
        return NodeGroup(
            resource_group=sim.resource_group, name=sim.name, min_size=limits[0], max_size=limits[1],
            capacity=sim.capacity, vm_size=sim.spec.vm_size, tags=dict(tags), zones=sim.spec.zones,
            location=sim.spec.location, provider=self.kind,
            priority=sim.spec.priority,
            eviction_policy=sim.spec.eviction_policy if sim.spec.priority == "Spot" else "",
            etag=vmss_etag(sim),
            hibernation_enabled=sim.spec.hibernation_enabled and sim.spec.priority != "Spot",
        )

    def _changed(self, run: Any) -> Operation:
        try:
            return _operation(run())
        except ArmError as exc:
            raise ComputeError(f"{exc.code}: {exc.message}", code=exc.code) from exc

    # -- the port ------------------------------------------------------------------------

    def list_node_groups(self) -> list[NodeGroup]:
        groups: list[NodeGroup] = []
        for rg in self._resource_groups:
            self._arm("list", resource_group=rg)
            sims = self._world.scale_sets(self._world.subscription_id, rg)
            groups += [g for sim in sims if (g := self._as_group(sim))]
            for name in dict.fromkeys(self._multi_size[sim.name] for sim in sims if sim.name in self._multi_size):
                groups += self._lanes(self._lane_sims(rg, name))
        return groups

    def get_node_group(self, group_id: str) -> NodeGroup | None:
        wanted_rg, _, name = parent_group_id(group_id).partition("/")
        lane = lane_of(group_id)
        # As VmssCompute: only the configured resource groups, named in any case (ARM's way); names exactly.
        resource_group = next((rg for rg in self._resource_groups if rg.lower() == wanted_rg.lower()), None)
        if resource_group is None or not name:
            return None
        if lane or name in self._multi_size.values():
            lane_sim = self._lane_sim(resource_group, name, lane) if lane else None
            if lane_sim is None:
                self._world.count_call("arm", OPERATIONS["get"][0], write=False)
                return None
            self._arm("get", group=lane_sim)
            return next((g for g in self._lanes(self._lane_sims(resource_group, name)) if g.lane == lane_sim.spec.vm_size),
                        None)
        sim = self._found(resource_group, name)
        if sim is None:
            self._world.count_call("arm", OPERATIONS["get"][0], write=False)  # the ARM double counts a 404 too
            return None
        self._arm("get", group=sim)
        return self._as_group(sim)

    def list_instances(self, group: NodeGroup, *, power_state: bool = False) -> list[Instance]:
        """Every instance of the scale set: the high-cost list; `power_state` as the instance view gives it."""
        sim = self._sim(group)
        self._arm("list_vms", group=sim)
        listed = [self._instance(sim, i, lane=group.lane) for i in self._world.instances(sim)]
        if power_state:
            powers = {i.arm_id: str(getattr(i, "power", "")) for i in self._world.instances(sim)}
            listed = [replace(i, power_state=powers.get(i.instance_id, "")) for i in listed]
        return listed

    def _instance(self, sim: ScaleSetSim, inst: Any, *, lane: str = "") -> Instance:
        """As VmssCompute converts the ARM double's VM: id, state, computer name and ARM id (no IPs). A Flexible
        member as FlexCompute reads it: its VM name is its id, its ARM id a plain VM's."""
        where = f"/subscriptions/{self._world.subscription_id}/resourceGroups/{sim.resource_group}/providers"
        return Instance(
            inst.arm_id, inst.state, inst.computer_name,
            resource_id=(f"{where}/Microsoft.Compute/virtualMachines/{inst.vm_name}" if sim.flexible else
                         f"{where}/Microsoft.Compute/virtualMachineScaleSets/{sim.name}"
                         f"/virtualMachines/{inst.instance_id}"),
            # A Failed instance's code and message, as VmssCompute reads them from its instance view.
            error_code=inst.error_code if inst.state == "Failed" else "",
            error_message=inst.error_message if inst.state == "Failed" else "",
            protected_from_scale_in=self._world.is_scale_in_protected(inst),
            vm_size=lane,  # a lane's instances are of its size (a one-size group's say nothing)
            # As VmssCompute reads a Uniform VM's latestModelApplied (a Flexible member's VM has no such field).
            latest_model_applied=None if sim.flexible else latest_model_applied(self._world, sim, inst),
        )

    def supports_scale_in_protection(self, group: NodeGroup) -> bool:
        """As VmssCompute: the world's Uniform sets have instance protection (its Flexible ones are not modelled)."""
        sim = self._group_sim(group)
        return sim is not None and not sim.flexible

    def set_scale_in_protection(self, group: NodeGroup, instance_id: str, *, protect: bool) -> None:
        sim = self._sim(group)
        if sim.flexible:
            raise ComputeError(f"scale-in protection of {instance_id} in {group.id}: not supported",
                               code=SCALE_IN_PROTECTION_UNSUPPORTED)
        self._arm("put_vm", group=sim)
        try:
            self._world.set_scale_in_protection(sim, instance_id, protect)
        except ArmError as exc:
            raise ComputeError(f"{exc.code}: {exc.message}", code=exc.code) from exc

    def list_private_ips(self, group: NodeGroup) -> dict[str, tuple[str, ...]]:
        """The scale set's NICs as the ARM double serves them: every instance's addresses, the primary NIC's first."""
        sim = self._sim(group)
        self._arm("list_nics", group=sim)
        return {i.arm_id: (i.private_ip, *(ip for ip in i.nic_ips if ip != i.private_ip))
                for i in self._world.instances(sim)}

    def get_instance(self, group: NodeGroup, instance_id: str) -> Instance | None:
        sim = self._group_sim(group)
        if sim is None:  # VmssCompute answers None for any 404, the scale set's included
            self._world.count_call("arm", OPERATIONS["get_vm"][0], write=False)
            return None
        self._arm("get_vm", group=sim)
        inst = next((i for i in self._world.instances(sim) if i.arm_id == instance_id), None)
        return None if inst is None else self._instance(sim, inst, lane=group.lane)

    def list_vm_sizes(self, location: str) -> list[VmSizeCapacity]:
        self._arm("skus")
        return [
            VmSizeCapacity(name, -(-capacity.cpu_milli // 1000), capacity.memory_bytes, capacity.scalar(_GPU),
                           # the ARM double's Location restriction, as VmssCompute reads it
                           restriction="NotAvailableForSubscription" if is_restricted(self._world, name) else "",
                           family=vm_family(name))
            for name, capacity in vm_size_catalogue(self._world).values()
        ]

    def list_prices(self, groups: Sequence[NodeGroup]) -> dict[str, float]:
        """The Retail Prices double's Linux prices (no ARM call: that API is not ARM): pay-as-you-go, and for a spot
        group its size's Spot row, as the Retail Prices adapter prices one (the spot tier's `price_fraction`
        override of the bill is not seen here)."""
        by_size = {size.lower(): price for size, price in LIST_PRICES_PER_HOUR.items()}
        return {g.id: by_size[g.vm_size.lower()] * (spot_fraction_of(g.vm_size) if g.is_spot else 1.0)
                for g in groups if g.vm_size.lower() in by_size}

    def begin_resize(self, group: NodeGroup, capacity: int) -> Operation:
        sim = self._sim(group)
        self._arm("update", group=sim)
        etag = self._group_etag(group, sim)
        if group.etag and group.etag != etag:  # If-Match, as VmssCompute sends it and ARM's double checks it
            refusal = (vm_etag_refusal(group.etag, sim) if not group.lane else
                       f"The specified precondition 'If-Match = {group.etag}' failed: the group's etag is {etag}.")
            raise ComputeError(f"{CHANGED_SINCE_READ}: {refusal}", code=CHANGED_SINCE_READ)
        if capacity > sim.capacity and is_restricted(self._world, sim.spec.vm_size):
            # As ARM (and its double) answers the PATCH: 409, before any allocation is tried.
            message = default_scale_up_message("SkuNotAvailable", sim.spec.vm_size, sim.spec.location)
            raise ComputeError(f"SkuNotAvailable: {message}", code="SkuNotAvailable")
        if capacity > sim.capacity and self._failure_rate and self._rng.random() < self._failure_rate:
            self._world.fail_next_scale_up(sim.name, resource_group=sim.resource_group)
        return self._changed(lambda: self._world.set_capacity(sim, capacity))

    def begin_delete_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation:
        ids = self._some("delete", group, instance_ids)
        sim = self._sim(group)
        self._arm("delete_instances", group=sim)
        return self._changed(lambda: self._world.delete_instances(sim, ids))

    def begin_deallocate_instances(self, group: NodeGroup, instance_ids: list[str], *,
                                   hibernate: bool = False) -> Operation:
        ids = self._some("deallocate", group, instance_ids)
        sim = self._sim(group)
        self._arm("deallocate_instances", group=sim)
        return self._changed(lambda: self._world.deallocate_instances(sim, ids, hibernate=hibernate))

    def begin_start_instances(self, group: NodeGroup, instance_ids: list[str]) -> Operation:
        ids = self._some("start", group, instance_ids)
        sim = self._sim(group)
        self._arm("start_instances", group=sim)
        return self._changed(lambda: self._world.start_instances(sim, ids))

    def _get_operation(self, token: str) -> Operation:
        self._arm("operation")
        op = self._world.operation(token)
        if op is None:
            raise ComputeError(f"operation {token} was not found", code="NotFound")
        return _operation(op)

    get_resize_operation = _get_operation
    get_delete_operation = _get_operation
    get_deallocate_operation = _get_operation
    get_start_operation = _get_operation


class WorldQuota:
    """`QuotaSource` over the world's usages (what the usages double serves), read fresh every time: the
    replay's virtual time makes a cache pointless, and the real adapter's cache is tested on its own."""

    name = "world-usages"

    def __init__(self, world: World) -> None:
        self._world = world

    def list_usages(self, location: str, *, refresh: bool = False) -> list[QuotaUsage]:
        try:
            listed = self._world.usages(self._world.subscription_id, location)
        except ArmError as exc:
            raise QuotaUnavailable(f"{exc.code}: {exc.message}") from exc
        return [QuotaUsage(u["name"]["value"], int(u["currentValue"]), int(u["limit"]), u["name"]["localizedValue"])
                for u in listed]

    def note_requested(self, location: str, names: Sequence[str], vcpus: int) -> None:
        """Nothing to remember: every read is fresh."""
