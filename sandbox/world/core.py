"""The kernel every part of the world shares: sim time, the event queue, seeded randomness and ids, the object store.

`WorldCore` owns what no single part does: the scenario and seed, `lock`, the API counters, the
identity the doubles issue tokens from, sim time (`_t`, float seconds since `start`), the heap of
timed events (`_push`), the seeded generators (`_rng`, `_uid`), the Kubernetes object store, and the
two flags the parts raise for the next reconcile (`_dirty`, `_retry_all_pending`). The parts in this
package each hold their own state on top of it; `sandbox.world.World` composes them.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.domain import Taint
from sandbox.model.resources import Amounts
from sandbox.model.scenario import DaemonSetSpec, NodeGroupSpec, Scenario, load_scenario
from sandbox.model.units import rfc3339
from sandbox.world.compute import InstanceSim, ScaleSetSim
from sandbox.world.identity import TokenIssuer
from sandbox.world.managed_cluster import ManagedCluster
from sandbox.world.metrics import ApiCounters
from sandbox.world.pods import PodSim
from sandbox.world.store import ObjectStore

DEFAULT_START = datetime(2030, 1, 7, 9, 0, 0, tzinfo=UTC)  # a Monday morning; any fixed instant keeps runs comparable
SANDBOX_TOKEN = "sandbox-token"  # the kubeconfig's ServiceAccount token: only the Kubernetes API double takes it
LOG_ANALYTICS_WORKSPACE_ID = "5a4d0b0e-0000-4000-8000-00000000c0de"  # the workspace the Log Analytics double serves
RESOURCES = ("nodes", "pods", "events", "configmaps", "poddisruptionbudgets", "namespaces", "daemonsets",
             "capacitybuffers", "podtemplates", "provisioningrequests")
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery rand.String: no vowels, no confusables
INITIAL_NODE_AGE = timedelta(hours=1)  # initial nodes registered before the scenario starts


class WorldCore:
    """State and helpers every part uses. See the module docstring."""

    def _init_core(
        self,
        scenario: Scenario | str | Path | Mapping[str, Any],
        *,
        seed: int,
        start: datetime | None,
        token_lifetime: float,
    ) -> None:
        self.lock = threading.RLock()
        self.scenario = load_scenario(scenario)
        self.seed = seed
        chosen = start or self.scenario.start or DEFAULT_START
        if chosen.tzinfo is None:
            raise ValueError("start must be timezone-aware")
        self.start = chosen.astimezone(UTC).replace(microsecond=0)
        self.subscription_id = self.scenario.subscription_id
        self.token = SANDBOX_TOKEN
        # Entra ID behind a managed identity: the expiring tokens ARM, Key Vault, Log Analytics and
        # (for an AKS cluster) the Kubernetes API take. Wall-clock lifetimes, whatever the world's speed.
        self.identity = TokenIssuer(token_lifetime)
        self.managed_cluster: ManagedCluster | None = None  # set by the server, which knows its URL and CA
        self.workspace_id = LOG_ANALYTICS_WORKSPACE_ID
        self.counters = ApiCounters()
        self._t = 0.0
        self._end = self.scenario.duration
        self._seq = itertools.count()
        self._events: list[tuple[float, int, str, Any]] = []
        self._ids = random.Random(f"{seed}|ids")
        self._store = ObjectStore(RESOURCES, self._mark_dirty)
        self._dirty = True
        # kube-scheduler retries unschedulable pods only after a cluster event that could help
        # (a node added or changed, a pod gone or finished); new pods are always tried once.
        self._retry_all_pending = True

    @property
    def now(self) -> datetime:
        with self.lock:
            return self._at(self._t)

    @property
    def t(self) -> float:
        """Sim seconds since start."""
        with self.lock:
            return self._t

    @property
    def end(self) -> datetime:
        return self._at(self._end)

    def _at(self, t: float) -> datetime:
        return self.start + timedelta(seconds=t)

    def _ts(self, t: float | None = None) -> str:
        return rfc3339(self._at(self._t if t is None else t))

    def _push(self, at: float, kind: str, payload: Any) -> None:
        heapq.heappush(self._events, (at, next(self._seq), kind, payload))

    def _rng(self, *purpose: object) -> random.Random:
        return random.Random("|".join([str(self.seed), *map(str, purpose)]))

    def _uid(self) -> str:
        return str(uuid.UUID(int=self._ids.getrandbits(128), version=4))

    def _mark_dirty(self) -> None:
        self._dirty = True

    if TYPE_CHECKING:
        # What one part uses of another's, by owner: World composes the parts, so each finds these on `self`.

        # sandbox.world.scheduler
        _placed: dict[str, PodSim]

        def _enqueue(self, pod: PodSim) -> None: ...
        def _dequeue(self, pod: PodSim) -> None: ...
        def _bind(self, pod: PodSim, node_name: str) -> None: ...
        def _release(self, pod: PodSim) -> None: ...
        def _allocatable(self, node: dict[str, Any]) -> Amounts: ...
        def _unplaceable(self, pod: PodSim) -> bool: ...

        # sandbox.world.pod_lifecycle
        _pods: dict[str, PodSim]
        _live: dict[tuple[str, str], PodSim]
        _arrivals_due: int
        _owners: dict[str, str]
        _node_pods: dict[tuple[str, str], str]

        def _daemon_runs_on(
            self, ds: DaemonSetSpec, name: str, labels: Mapping[str, str], taints: Iterable[Taint]
        ) -> bool: ...
        def _pod_obj(self, pod: PodSim) -> dict[str, Any]: ...
        def _create_api_pod(self, obj: dict[str, Any]) -> PodSim: ...
        def _kill_pods_on(self, node_name: str) -> None: ...
        def _remove_pod(self, pod: PodSim) -> None: ...
        def _replace(self, pod: PodSim) -> None: ...
        def _delete_pod(self, pod: PodSim, grace: float | None) -> dict[str, Any]: ...
        def _selected_pods(self, pdb: Mapping[str, Any]) -> list[dict[str, Any]]: ...

        # sandbox.world.render_queue
        def _daemon_cpu_usage(self, ds: DaemonSetSpec) -> int | None: ...
        def _render_work_left(self) -> bool: ...
        def render_queue_report(self) -> dict[str, Any] | None: ...

        # sandbox.world.virtual_node
        _virtual_node_name: str | None

        def _is_virtual_node(self, name: str | None) -> bool: ...
        def _aci_create(self, pod: PodSim, obj: dict[str, Any]) -> None: ...
        def _aci_release(self, pod: PodSim) -> None: ...
        def _aci_stuck_pod(self, pod: PodSim) -> bool: ...
        def _pending_provider_failed(self) -> int: ...
        def virtual_node_report(self) -> dict[str, Any] | None: ...

        # sandbox.world.nodes
        _by_node: dict[str, InstanceSim]
        _static_nodes: dict[str, int]

        def _node_labels(self, spec: NodeGroupSpec, hostname: str, zone: str) -> dict[str, str]: ...
        def _node_name(self, group: ScaleSetSim, computer_name: str) -> str: ...
        def _host_ip_index(self, node_name: str) -> int | None: ...
        def _host_ip(self, node_name: str) -> str | None: ...
        def _register_node(self, inst: InstanceSim, created: datetime | None = None) -> None: ...
        def _node_lost(self, node: dict[str, Any]) -> None: ...
        def _remove_node(self, name: str) -> dict[str, Any] | None: ...
        def _note_removal_mark(self, name: str, *, was_marked: bool, marked: bool) -> None: ...
        def _touch_if_unmanaged(self, node_name: str | None) -> None: ...
        def _touch_untagged_instances(self, group: ScaleSetSim, targets: Iterable[InstanceSim]) -> None: ...
        def scale_down_order(self) -> list[dict[str, Any]]: ...

        # sandbox.world.scale_sets
        _groups: dict[str, ScaleSetSim]
        _nodes_max: int
        _created_by_group: Counter[str]

        _gone: list[InstanceSim]
        _alive: int

        def _iter_instances(self) -> Iterator[InstanceSim]: ...

        # sandbox.world.fault_injection
        def fail_next_scale_up(
            self, scale_set: str, *, code: str = "QuotaExceeded", message: str | None = None, count: int = 1,
            resource_group: str | None = None,
        ) -> None: ...

        # sandbox.world.kube_resources
        _events_by_reason: Counter[str]
        _not_triggered: dict[tuple[str, str], str]
        _unmanaged_touches: Counter[str]
        _events_by_object: dict[str, Counter[str]]

        # sandbox.world.agent_pools
        def _is_managed_set(self, group: ScaleSetSim) -> bool: ...

        # sandbox.world.quota
        def _check_quota(self, group: ScaleSetSim, cpus: int) -> None: ...
        def _note_quota_peaks(self) -> None: ...

        # sandbox.world.spot
        def _admit_capacity_increase(self, group: ScaleSetSim, current: int, target: int) -> None: ...
        def _admit_start(self, group: ScaleSetSim, targets: list[InstanceSim]) -> tuple[str, str] | None: ...
        def _log_increase(self, group: ScaleSetSim, kind: str, from_: int, to: int, outcome: str) -> None: ...
        def _spot_node_removed(self, name: str) -> None: ...
        def spot_report(self) -> dict[str, Any]: ...
        def quota_report(self) -> dict[str, Any]: ...

        # sandbox.world (World, the composition)
        def _reconcile(self) -> None: ...
