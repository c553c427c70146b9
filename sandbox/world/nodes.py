"""Node objects in the world: registered by kubelet when an instance boots, lost and collected when it goes.

`NodesPart` owns the map from node name to the scale set instance behind it (`_by_node`), the nodes
that belong to no scale set (`_static_nodes`: the k3s server) and the removal starts the cluster
autoscaler's marks reveal (`_removal_starts`). It builds each Node as kubelet registers it (the
name, providerID and labels the scenario's cluster flavour gives it, the scale set's taints,
capacity and annotations), marks it NotReady and unreachable when its VM shuts down, and plays the
cloud node lifecycle controller that deletes a Node whose VM is gone, with pod garbage collection
after it.

Flavours (`Scenario.flavour`; facts in shared/facts/cluster-shapes.md):
- `aks-engine`: the Azure cloud provider. Node name = computer name, providerID
  `azure:///subscriptions/.../virtualMachineScaleSets/<vmss>/virtualMachines/<id>`, the instance-type,
  topology and `agentpool` labels. Flexible members: node name = computer name lower-cased, providerID
  `azure:///subscriptions/.../virtualMachines/<vm name>`.
- `k3s`: k3s's embedded cloud controller. Node name = computer name lower-cased (k3s names a node
  after `os.Hostname()`, lower-cased), providerID `k3s://<node name>`, instance type `k3s`, no
  topology labels; plus a server node (`k3s-server`) in no scale set.
- `kubeadm`: no cloud provider. No providerID; node names the operator chose with
  `--hostname-override` (`worker-<scale set>-<n>`), unrelated to the computer name, so only the
  InternalIP (the instance's private IP) ties a node to its VM.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shared.domain import Taint
from sandbox.model.gpu_spec import gpu_ready_delay, without_gpus
from sandbox.model.instance_mix import member_spec
from sandbox.model.resources import Amounts, resource_list
from sandbox.model.scenario import NodeGroupSpec
from sandbox.model.units import parse_time, rfc3339
from sandbox.world import drift, kobjects
from sandbox.world.compute import InstanceSim, ScaleSetSim, private_ip
from sandbox.world.core import WorldCore
from sandbox.world.metrics import seconds

# cluster-autoscaler's taint on a node it is removing (with spec.unschedulable: the removal has started)
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"

# The k3s flavour's control-plane node: a VM outside every scale set (k3s's own install, not autoscaled).
K3S_SERVER = "k3s-server"
K3S_SERVER_IP_INDEX = 0  # 10.224.0.4: instances take ip indexes from 1
# A small server (2 vCPU, 8 GiB). k3s sets no kube-reserved or system-reserved by default; kubelet's
# default hard eviction threshold (memory.available<100Mi) comes off allocatable memory.
K3S_SERVER_CAPACITY = Amounts.of(2000, 8 * 1024**3, 110)
K3S_SERVER_ALLOCATABLE = Amounts.of(2000, 8 * 1024**3 - 100 * 1024**2, 110)
K3S_VERSION = f"{kobjects.KUBELET_VERSION}+k3s1"
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


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
            "instance_id": self.instance.report_id,  # a Flexible member's VM name
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
        self._static_nodes: dict[str, int] = {}  # nodes of no scale set (the k3s server): name -> ip index
        self._removal_starts: dict[str, RemovalStart] = {}  # by node: the latest unmarked -> marked change
        self._worker_numbers = itertools.count(1)  # kubeadm: the n of worker-<scale set>-<n>, per world

    def _init_static_nodes(self) -> None:
        """k3s: the server registered before any agent (as old as the oldest pool); the world never removes it."""
        if self.scenario.flavour != "k3s":
            return
        age = max((g.initial_age for g in self.scenario.node_groups), default=timedelta(hours=1))
        labels = {
            **self._kubelet_labels(K3S_SERVER),
            "node.kubernetes.io/instance-type": "k3s",
            "beta.kubernetes.io/instance-type": "k3s",
            # What k3s labels its servers (no etcd role: the default datastore is SQLite through kine).
            "node-role.kubernetes.io/control-plane": "true",
            "node-role.kubernetes.io/master": "true",
        }
        # Taints: none, as k3s leaves a server schedulable by default, so workloads may run on it too.
        node = self._node_object(
            K3S_SERVER, K3S_SERVER_IP_INDEX, f"k3s://{K3S_SERVER}", labels, (), K3S_SERVER_CAPACITY,
            K3S_SERVER_ALLOCATABLE, self.start - age, machine_id=self._uid().replace("-", ""),
        )
        self._store.put("nodes", node)
        self._static_nodes[K3S_SERVER] = K3S_SERVER_IP_INDEX
        self._retry_all_pending = True

    def _node_name(self, group: ScaleSetSim, computer_name: str) -> str:
        """The name a new instance's kubelet will register its Node under, by the scenario's flavour."""
        if self.scenario.flavour == "k3s":
            return computer_name.lower()
        if self.scenario.flavour == "kubeadm":
            # The operator's own naming through --hostname-override; a scale set name may hold `_` or
            # capitals, which a node name (a DNS subdomain) may not.
            return f"worker-{_NOT_DNS.sub('-', group.name.lower()).strip('-')}-{next(self._worker_numbers)}"
        if group.flexible:  # Flexible computer names carry upper-case hex; a node name is lower-case
            return computer_name.lower()
        return computer_name

    def _provider_id(self, inst: InstanceSim) -> str:
        """spec.providerID: empty (left out of the Node) for kubeadm, where no cloud provider sets one."""
        if self.scenario.flavour == "k3s":
            return f"k3s://{inst.node_name}"
        if self.scenario.flavour == "kubeadm":
            return ""
        group = self._groups[inst.group_key]
        if group.flexible:  # a Flexible member is a plain VM: its own ARM id
            return (
                f"azure:///subscriptions/{self.subscription_id}/resourceGroups/{group.resource_group}"
                f"/providers/Microsoft.Compute/virtualMachines/{inst.vm_name}"
            )
        return (
            f"azure:///subscriptions/{self.subscription_id}/resourceGroups/{group.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{group.name}/virtualMachines/{inst.instance_id}"
        )

    @staticmethod
    def _kubelet_labels(hostname: str) -> dict[str, str]:
        """The labels kubelet itself puts on its Node, whatever the cloud provider."""
        return {
            "kubernetes.io/hostname": hostname,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
        }

    def _node_labels(self, spec: NodeGroupSpec, hostname: str, zone: str) -> dict[str, str]:
        if self.scenario.flavour == "k3s":
            # k3s's cloud controller: instance type `k3s` (unless the node already carries one, as when
            # --node-label sets it), the stable and beta labels alike; no region or zone (it reports none
            # unless the node already has them); no `agentpool` (AKS's). The pool's own labels stand for
            # --node-label. An inference from k3s pkg/cloudprovider/instances.go and the cloud node controller.
            instance_type = spec.labels.get("node.kubernetes.io/instance-type", "k3s")
            return {
                **self._kubelet_labels(hostname),
                "node.kubernetes.io/instance-type": instance_type,
                "beta.kubernetes.io/instance-type": instance_type,
                **spec.labels,
            }
        if self.scenario.flavour == "kubeadm":
            # No cloud provider: kubelet's labels only, and whatever --node-labels the pool gives.
            return {**self._kubelet_labels(hostname), **spec.labels}
        region = spec.location
        return {
            **self._kubelet_labels(hostname),
            "node.kubernetes.io/instance-type": spec.vm_size,
            "topology.kubernetes.io/region": region,
            # Azure's cloud provider labels zonal nodes "<region>-<zone>" and regional ones "0".
            "topology.kubernetes.io/zone": f"{region}-{zone}" if zone else "0",
            "agentpool": spec.name,
            **spec.labels,
        }

    def _node_object(
        self, name: str, ip_index: int, provider_id: str, labels: Mapping[str, str], taints: tuple[Taint, ...],
        capacity: Amounts, allocatable: Amounts, created: datetime, *, machine_id: str, internal_ip: str | None = None,
    ) -> dict[str, Any]:
        """`internal_ip`: the address kubelet registers (`--node-ip`); None: the VM's in the default subnet."""
        internal_ip = internal_ip or private_ip(ip_index)
        k3s = self.scenario.flavour == "k3s"
        node = kobjects.node_object(
            name=name,
            uid=self._uid(),
            created=rfc3339(created),
            provider_id=provider_id,
            labels=labels,
            taints=taints,
            capacity=capacity,
            allocatable=allocatable,
            internal_ip=internal_ip,
            pod_cidr=f"10.244.{ip_index % 256}.0/24",
            machine_id=machine_id,
            kubelet_version=K3S_VERSION if k3s else kobjects.KUBELET_VERSION,
            container_runtime="containerd://1.7.22-k3s1" if k3s else kobjects.CONTAINER_RUNTIME,
        )
        if k3s:  # the k3s agent's own annotations, which its cloud controller reads the addresses from
            node["metadata"]["annotations"].update(
                {"k3s.io/hostname": name, "k3s.io/internal-ip": internal_ip}
            )
        elif self.scenario.flavour == "kubeadm":  # what `kubeadm join` writes on the node it joins
            node["metadata"]["annotations"]["kubeadm.alpha.kubernetes.io/cri-socket"] = (
                "unix:///var/run/containerd/containerd.sock"
            )
        return node

    def _register_node(self, inst: InstanceSim, created: datetime | None = None) -> None:
        group = self._groups[inst.group_key]
        spec = member_spec(group.spec, inst.vm_size)  # an instance-mix member registers as its own size
        labels = drift.node_labels(self, inst, self._node_labels(spec, inst.node_name, inst.zone))  # type: ignore[arg-type]
        node = self._node_object(
            inst.node_name, inst.ip_index, self._provider_id(inst), labels, spec.taints, spec.capacity,
            spec.allocatable, created or self._at(self._t), machine_id=inst.vm_id.replace("-", ""),
            internal_ip=inst.node_ip,
        )
        node["metadata"]["annotations"].update(spec.annotations)
        self._store.put("nodes", node)
        self._retry_all_pending = True
        inst.node_registered = True
        self._by_node[inst.node_name] = inst

    def _host_ip_index(self, node_name: str) -> int | None:
        """The ip index of the VM behind a node (a scale set instance or a static node), None if unknown."""
        inst = self._by_node.get(node_name)
        return inst.ip_index if inst is not None else self._static_nodes.get(node_name)

    def _host_ip(self, node_name: str) -> str | None:
        """The node's InternalIP (its pods' hostIP), None if the node is no VM's."""
        inst = self._by_node.get(node_name)
        if inst is not None:
            return inst.node_ip
        index = self._static_nodes.get(node_name)
        return None if index is None else private_ip(index)

    def _on_registered(self, inst: InstanceSim) -> None:
        # power_seq 0: no deallocation or start since it was created (those register through `rebooted`)
        if inst.alive and inst.state != "Deleting" and not inst.node_registered and inst.power_seq == 0:
            self._register_node(inst)
            inst.registered_at = self._t
            self._hold_gpus(inst)

    def _hold_gpus(self, inst: InstanceSim) -> None:
        """A fresh GPU VM's node registers Ready without its GPUs: the driver and the device plugin add them to
        capacity and allocatable after the group's `gpu_ready_delay` (sandbox.model.gpu_spec). Only a created VM
        waits: the initial nodes are long up, and a started one keeps its installed driver (an assumption)."""
        spec = member_spec(self._groups[inst.group_key].spec, inst.vm_size)
        delay = gpu_ready_delay(spec.allocatable, spec.gpu_ready_delay)
        node = self._store.get("nodes", "", inst.node_name)
        if delay is None or node is None:
            return
        status = node.setdefault("status", {})
        status["capacity"] = resource_list(without_gpus(spec.capacity))
        status["allocatable"] = resource_list(without_gpus(spec.allocatable))
        self._store.touch(node)
        self._push(self._t + delay.sample(self._rng("gpu_ready", inst.node_name, self._t)), "gpu_ready", inst)

    def _on_gpu_ready(self, inst: InstanceSim) -> None:
        """The device plugin reports: the node's GPUs are in its capacity and allocatable (if it is still this VM's)."""
        node = self._store.get("nodes", "", inst.node_name)
        if node is None or self._by_node.get(inst.node_name) is not inst or not inst.alive:
            return
        spec = member_spec(self._groups[inst.group_key].spec, inst.vm_size)
        status = node.setdefault("status", {})
        status["capacity"] = resource_list(spec.capacity)
        status["allocatable"] = resource_list(spec.allocatable)
        self._store.touch(node)
        inst.gpus_ready_at = self._t
        self._retry_all_pending = True

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
        node = self._store.get("nodes", "", inst.node_name)
        if node is not None and self._by_node.get(inst.node_name) is inst:
            self._remove_node(inst.node_name)

    def _remove_node(self, name: str) -> dict[str, Any] | None:
        self._kill_pods_on(name)
        for pod in [p for p in self._live.values() if p.node == name]:
            self._remove_pod(pod)  # pod garbage collection of pods bound to a missing node
        node = self._store.drop("nodes", "", name)
        self._spot_node_removed(name)  # a Node left by an evicted VM is stale no more (sandbox.world.spot)
        self._by_node.pop(name, None)
        self._static_nodes.pop(name, None)  # deleted through the API: the world does not bring it back
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

