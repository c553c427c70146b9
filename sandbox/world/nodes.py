"""Node objects in the world: registered by kubelet when an instance boots, lost and collected when it goes.

`NodesPart` owns the map from node name to the scale set instance behind it (`_by_node`) and the
removal starts the cluster autoscaler's marks reveal (`_removal_starts`). It builds each Node as
kubelet registers it (the labels Azure's cloud provider sets, the scale set's taints, capacity and
annotations), marks it NotReady and unreachable when its VM shuts down, and plays the cloud node
lifecycle controller that deletes a Node whose VM is gone, with pod garbage collection after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.domain import Taint
from sandbox import kobjects
from sandbox.compute import InstanceSim
from sandbox.metrics import seconds
from sandbox.resources import Amounts
from sandbox.scenario import NodeGroupSpec
from sandbox.units import parse_time, rfc3339
from sandbox.world.core import WorldCore

# cluster-autoscaler's taint on a node it is removing (with spec.unschedulable: the removal has started)
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"


@dataclass(frozen=True, slots=True)
class RemovalStart:
    """A node seen marked for removal (tainted ToBeDeletedByClusterAutoscaler or cordoned), as it was then."""

    node: str
    group: str
    instance: InstanceSim
    at: float  # sim seconds
    age: float  # seconds since the Node was created
    utilization: float  # larger of CPU and memory requests over allocatable; DaemonSet and mirror pods left out
    pods: int  # unfinished pods on it, DaemonSet and mirror pods left out

    def as_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "group": self.group,
            "instance_id": self.instance.instance_id,
            "cordoned_at": round(self.at, 3),
            "age_seconds": round(self.age, 3),
            "utilization": round(self.utilization, 4),
            "pods": self.pods,
            "delete_started_at": seconds(self.instance.delete_started_at),
        }


def marked_for_removal(node: Mapping[str, Any]) -> bool:
    spec = node.get("spec") or {}
    return bool(spec.get("unschedulable")) or any(
        isinstance(t, dict) and t.get("key") == TO_BE_DELETED_TAINT for t in spec.get("taints") or []
    )


class NodesPart(WorldCore):
    """Node objects and the instances behind them. See the module docstring."""

    def _init_node_state(self) -> None:
        self._by_node: dict[str, InstanceSim] = {}
        self._removal_starts: dict[str, RemovalStart] = {}  # by node: the latest unmarked -> marked change

    def _provider_id(self, inst: InstanceSim) -> str:
        group = self._groups[inst.group_key]
        return (
            f"azure:///subscriptions/{self.subscription_id}/resourceGroups/{group.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{group.name}/virtualMachines/{inst.instance_id}"
        )

    @staticmethod
    def _node_labels(spec: NodeGroupSpec, hostname: str, zone: str) -> dict[str, str]:
        region = spec.location
        return {
            "kubernetes.io/hostname": hostname,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": spec.vm_size,
            "topology.kubernetes.io/region": region,
            # Azure's cloud provider labels zonal nodes "<region>-<zone>" and regional ones "0".
            "topology.kubernetes.io/zone": f"{region}-{zone}" if zone else "0",
            "agentpool": spec.name,
            **spec.labels,
        }

    def _register_node(self, inst: InstanceSim, created: datetime | None = None) -> None:
        group = self._groups[inst.group_key]
        spec = group.spec
        labels = self._node_labels(spec, inst.computer_name, inst.zone)
        node = kobjects.node_object(
            name=inst.computer_name,
            uid=self._uid(),
            created=rfc3339(created or self._at(self._t)),
            provider_id=self._provider_id(inst),
            labels=labels,
            taints=spec.taints,
            capacity=spec.capacity,
            allocatable=spec.allocatable,
            internal_ip=f"10.224.{inst.ip_index // 250}.{inst.ip_index % 250 + 4}",
            pod_cidr=f"10.244.{inst.ip_index % 256}.0/24",
            machine_id=inst.vm_id.replace("-", ""),
        )
        node["metadata"]["annotations"].update(spec.annotations)
        self._store.put("nodes", node)
        self._retry_all_pending = True
        inst.node_registered = True
        self._by_node[inst.computer_name] = inst

    def _on_registered(self, inst: InstanceSim) -> None:
        # power_seq 0: no deallocation or start since it was created (those register through `rebooted`)
        if inst.alive and inst.state != "Deleting" and not inst.node_registered and inst.power_seq == 0:
            self._register_node(inst)

    def _node_lost(self, node: dict[str, Any]) -> None:
        """The VM is shutting down: kubelet stops posting status, the node lifecycle controller marks it."""
        now = self._ts()
        kobjects.set_condition(
            node,
            {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            },
        )
        taints = node.setdefault("spec", {}).setdefault("taints", [])
        for effect in ("NoSchedule", "NoExecute"):
            if not any(t.get("key") == "node.kubernetes.io/unreachable" and t.get("effect") == effect for t in taints):
                taints.append(kobjects.taint_json(Taint("node.kubernetes.io/unreachable", "", effect), now))
        self._store.touch(node)

    def _on_node_gc(self, inst: InstanceSim) -> None:
        """The cloud node lifecycle controller deletes Node objects whose VM is gone."""
        node = self._store.get("nodes", "", inst.computer_name)
        if node is not None and self._by_node.get(inst.computer_name) is inst:
            self._remove_node(inst.computer_name)

    def _remove_node(self, name: str) -> dict[str, Any] | None:
        self._kill_pods_on(name)
        for pod in [p for p in self._live.values() if p.node == name]:
            self._remove_pod(pod)  # pod garbage collection of pods bound to a missing node
        node = self._store.drop("nodes", "", name)
        self._by_node.pop(name, None)
        return node

    def _note_removal_mark(self, name: str, *, was_marked: bool, marked: bool) -> None:
        """A removal starts when a node is first tainted ToBeDeletedByClusterAutoscaler or cordoned: remember the
        node as it is now (age, utilisation); an unmarked node's removal was called off."""
        if was_marked == marked:
            return
        if not marked:
            self._removal_starts.pop(name, None)
            return
        inst = self._by_node.get(name)
        node = self._store.get("nodes", "", name)
        if inst is None or node is None:
            return
        allocatable = self._allocatable(node)
        used = Amounts()
        pods = 0
        for pod in self._placed.values():
            if pod.node == name and not pod.node_bound and pod.owner_kind != "DaemonSet":
                used += pod.requests
                pods += 1
        shares = [
            used.cpu_milli / allocatable.cpu_milli if allocatable.cpu_milli else 0.0,
            used.memory_bytes / allocatable.memory_bytes if allocatable.memory_bytes else 0.0,
        ]
        created = parse_time(node["metadata"]["creationTimestamp"])
        self._removal_starts[name] = RemovalStart(
            node=name, group=inst.group_key, instance=inst, at=self._t,
            age=(self._at(self._t) - created).total_seconds(), utilization=max(shares), pods=pods,
        )

    def scale_down_order(self) -> list[dict[str, Any]]:
        """Nodes whose removal started (marked) and whose instance was then deleted, in the order they were marked."""
        with self.lock:
            started = [
                r for r in self._removal_starts.values()
                if r.instance.delete_started_at is not None and r.instance.delete_started_at >= r.at
            ]
            return [r.as_json() for r in sorted(started, key=lambda r: (r.at, r.node))]

