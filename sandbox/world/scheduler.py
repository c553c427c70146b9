"""The world's kube-scheduler: which pods wait for a node, binding pods to nodes, and what each node holds.

`SchedulerPart` owns the scheduling queue (pods new since the last pass, and every live pod without
a node), the requests each node's unfinished pods hold, the placed pods inter-pod affinity, spreading
and host ports look at, and the per-node allocatable cache. Filtering and scoring themselves are
`sandbox.world.scheduling` (`ClusterView`); this part builds its view of the nodes, runs a pass in pod
order, binds the pods it places and writes PodScheduled=False on the rest. It also judges pods no
node group could ever hold (`_unplaceable`) against fresh nodes of each scale set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandbox.model.resources import Amounts, parse_resource_list
from sandbox.world import kobjects
from sandbox.world.compute import ScaleSetSim
from sandbox.world.core import WorldCore
from sandbox.world.pods import PodSim
from sandbox.world.scheduling import ClusterView, NodeSlot, static_reasons, unschedulable_message


class SchedulerPart(WorldCore):
    """Pod placement and binding. See the module docstring."""

    def _init_scheduler_state(self) -> None:
        self._new_pods: list[PodSim] = []
        self._unbound: dict[str, PodSim] = {}  # live pods without a node, by uid
        self._used: dict[str, Amounts] = {}  # requests of unfinished pods, by node
        # Pods holding resources on a node, by uid: what inter-pod affinity and spreading look at. The
        # subsets with required anti-affinity or host ports are kept apart because every pod checks them.
        self._placed: dict[str, PodSim] = {}
        self._placed_anti: dict[str, PodSim] = {}
        self._placed_ports: dict[str, PodSim] = {}
        self._allocatable_cache: dict[tuple[str, str], Amounts] = {}

    def _enqueue(self, pod: PodSim) -> None:
        """A new pod without a node: the next pass tries it, and later passes while it stays unbound."""
        self._new_pods.append(pod)
        self._unbound[pod.uid] = pod

    def _dequeue(self, pod: PodSim) -> None:
        self._unbound.pop(pod.uid, None)

    def _bind(self, pod: PodSim, node_name: str) -> None:
        obj = self._pod_obj(pod)
        inst = self._by_node.get(node_name)
        ip_index = self._host_ip_index(node_name)
        now = self._ts()
        obj["spec"]["nodeName"] = node_name
        status = obj["status"]
        status["phase"] = "Running"
        status["startTime"] = now
        host_ip = self._host_ip(node_name)
        if ip_index is not None and host_ip is not None:
            status["hostIP"] = host_ip
            status["hostIPs"] = [{"ip": status["hostIP"]}]
            octet = sum(1 for p in self._live.values() if p.node == node_name) % 250 + 2
            status["podIP"] = f"10.244.{ip_index % 256}.{octet}"
            status["podIPs"] = [{"ip": status["podIP"]}]
        for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"):
            kobjects.set_condition(obj, kobjects.condition(kind, "True", now))
        status["containerStatuses"] = [kobjects.container_status(running_since=now)]
        pod.node = node_name
        pod.group = inst.group_key if inst is not None else None
        self._unbound.pop(pod.uid, None)
        self._used[node_name] = self._used.get(node_name, Amounts()) + pod.requests
        pod.holds_resources = True
        self._placed[pod.uid] = pod
        if pod.needs.anti_affinity:
            self._placed_anti[pod.uid] = pod
        if pod.needs.host_ports:
            self._placed_ports[pod.uid] = pod
        pod.bound = pod.bound if pod.bound is not None else self._t
        if self._is_virtual_node(node_name):  # no kubelet runs it: virtual-kubelet hands it to ACI, which may refuse
            self._aci_create(pod, obj)
            return
        pod.started = self._t
        if pod.duration is not None:
            self._push(self._t + pod.duration, "complete", pod)
        self._store.touch(obj)

    def _release(self, pod: PodSim) -> None:
        """The pod's requests stop counting on its node (it finished, died or is gone): retry pending pods."""
        if pod.holds_resources and pod.node is not None:
            self._used[pod.node] = self._used[pod.node] - pod.requests
            pod.holds_resources = False
            for index in (self._placed, self._placed_anti, self._placed_ports):
                index.pop(pod.uid, None)
        self._aci_release(pod)  # on the virtual node, its container group goes too
        self._retry_all_pending = True

    def _node_slots(self) -> dict[str, NodeSlot]:
        used = self._used
        slots = {}
        for node in self._store.listed("nodes"):
            name = node["metadata"]["name"]
            slots[name] = NodeSlot(
                name=name,
                labels=node["metadata"].get("labels") or {},
                taints=kobjects.parse_taints(node),
                allocatable=self._allocatable(node),
                used=used.get(name, Amounts()),
                ready=kobjects.is_ready(node),
                unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
            )
        for pod in self._placed_ports.values():
            slot = slots.get(pod.node or "")
            if slot is not None:
                slot.ports.extend(pod.needs.host_ports)
        return slots

    def _allocatable(self, node: dict[str, Any]) -> Amounts:
        """Parsed once per node version: quantities are slow to parse and rarely change."""
        key = (node["metadata"]["name"], node["metadata"]["resourceVersion"])
        cached = self._allocatable_cache.get(key)
        if cached is None:
            try:
                cached = parse_resource_list((node.get("status") or {}).get("allocatable") or {})
            except ValueError:
                cached = Amounts()  # a node reporting nonsense takes no pods
            if len(self._allocatable_cache) > 10_000:
                self._allocatable_cache.clear()
            self._allocatable_cache[key] = cached
        return cached

    def _namespace_labels(self) -> dict[str, Mapping[str, str]]:
        return {
            obj["metadata"]["name"]: obj["metadata"].get("labels") or {} for obj in self._store.listed("namespaces")
        }

    def _unplaceable(self, pod: PodSim) -> bool:
        """Whether no node of any scale set could ever take the pod, even empty: the sandbox's own
        scheduler judges a fresh node of each group (every zone, its DaemonSet and mirror pods on it).
        Such pods can never run, so they do not hold up `done`. Affinity to other pods and spreading are
        left out: other pods may yet make those satisfiable."""
        if pod.unplaceable is None:
            pod.unplaceable = not any(
                not static_reasons(pod.needs, slot) for group in self._groups.values() for slot in self._fresh_slots(group)
            )
        return pod.unplaceable

    def _fresh_slots(self, group: ScaleSetSim) -> list[NodeSlot]:
        spec = group.spec
        if spec.max_size == 0:
            return []
        slots = []
        for zone in spec.zones or ("",):
            labels = self._node_labels(spec, f"{spec.computer_name_prefix}-template", zone)
            used = Amounts()
            for daemonset in self.scenario.daemonsets:
                if self._daemon_runs_on(daemonset, labels["kubernetes.io/hostname"], labels, spec.taints):
                    used += daemonset.requests + Amounts(pods=1)
            for mirror in spec.mirror_pods:
                used += mirror.requests + Amounts(pods=1)
            slots.append(NodeSlot(labels["kubernetes.io/hostname"], labels, spec.taints, spec.allocatable, used,
                                  ready=True, unschedulable=False))
        return slots

    def _schedule(self) -> None:
        candidates = list(self._unbound.values()) if self._retry_all_pending else self._new_pods
        pending = [
            p
            for p in candidates
            if self._live.get(p.key) is p and p.node is None and not p.node_bound
            and not self._pod_obj(p)["spec"].get("nodeName")  # named a node itself: the scheduler stays out
            and self._pod_obj(p)["status"].get("phase") == "Pending"
            and not p.terminating
        ]
        self._retry_all_pending = False
        self._new_pods = []
        if not pending:
            return
        nodes = list(self._node_slots().values())
        view = ClusterView(
            nodes,
            pods=lambda: self._placed.values(),  # live: a pod bound in this pass is seen by the next
            anti_affinity_pods=lambda: self._placed_anti.values(),
            namespace_labels=self._namespace_labels() if any(p.needs.needs_pod_view for p in pending) else None,
        )
        # Nodes only fill up, ports only get taken and existing anti-affinity only grows during a pass, so a
        # pod at least as big as one that found no node, and alike in everything else, finds none either:
        # reuse the verdict. Not for pods with affinity or spreading, which other placements can help.
        failures: dict[tuple[Any, ...], list[tuple[Amounts, str]]] = {}
        now = self._ts()
        for pod in sorted(pending, key=lambda p: p.seq):
            needs = pod.needs
            known: list[tuple[Amounts, str]] = []
            if not needs.needs_pod_view:
                if pod.shape is None:
                    pod.shape = (
                        needs.namespace, tuple(sorted(needs.labels.items())), tuple(sorted(needs.node_selector.items())),
                        needs.node_affinity, needs.tolerations, needs.host_ports,
                        # Preferences never decide whether a pod fits, but pods that differ in them are not alike.
                        needs.preferred_node_affinity,
                    )
                known = failures.setdefault(pod.shape, [])
            message = next((m for smaller, m in known if smaller.fits_in(pod.requests)), None)
            if message is None:
                chosen, reasons = view.choose(needs)
                if chosen is not None:
                    view.place(needs, chosen)
                    self._bind(pod, chosen.name)
                    continue
                message = unschedulable_message(len(nodes), reasons)
                known[:] = [(r, m) for r, m in known if not pod.requests.fits_in(r)] + [(pod.requests, message)]
            obj = self._pod_obj(pod)
            if kobjects.set_condition(obj, kobjects.condition("PodScheduled", "False", now, "Unschedulable", message)):
                self._store.touch(obj)

