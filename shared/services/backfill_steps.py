"""The backfill action's one step: `evict` moves one pod off a virtual node onto the VM room the poll found.

evict ──> (succeeded: evicted, its controller's replacement goes to the VM | skipped: nothing to do now)

The message names a pod; everything that decides whether it may move is read again here, from the cluster,
the scale sets and our settings, never taken from the message: the pod is still the one decided on (same uid)
and still on a virtual node, the pending poll would decide to move it now with the same inputs (its
`virtual_nodes.plan_for`, VM prices included: a pod ACI runs as cheaply stays; a kube-system pod, batch work
and a pod the drainability rules protect from scale-down are never moved), and a Ready VM node fits it now
(the scheduler's filters, `engine.virtual_nodes.vm_room`). A refusal is the action's recorded outcome
(skipped, with the reason) and nothing is evicted. Only then is it evicted through the
Eviction API, so PodDisruptionBudgets hold: a refusal (429) leaves the pod where it is for a later poll.
The scheduler's preference for VM nodes puts the replacement on the VM room.
"""

from __future__ import annotations

import logging
from datetime import datetime

from shared import telemetry
from shared.actions import Backfill
from shared.engine.pod_rules import is_virtual_node
from shared.engine.virtual_nodes import PROVIDER_FAILED, vm_room
from shared.ports import ClusterEvent, LedgerEntry
from shared.services import virtual_nodes
from shared.services.execution import ExecutionResult, Run, Step, StepTable
from shared.services.observe import observe

log = logging.getLogger(__name__)

BACKFILL_EVENT = "Backfill"


def evict(run: Run[Backfill], action: Backfill, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    cluster = run.ports.cluster
    node = cluster.get_node(action.group)
    if node is None:
        return run.finish(action, entry, "skipped", f"virtual node {action.group} is gone", now=now)
    if not is_virtual_node(node):
        return run.reject(action, f"node {action.group} is not a virtual node: nothing is ever moved off a VM "
                          "by backfill", now=now, poison=True, entry=entry)
    pod = cluster.get_pod(action.namespace, action.pod)
    if pod is None:
        return run.finish(action, entry, "skipped", f"pod {action.pod_key} is gone", now=now)
    if pod.uid != action.uid:
        return run.finish(action, entry, "skipped", f"pod {action.pod_key} was replaced (uid {pod.uid})", now=now)
    if pod.node_name != node.name:
        return run.finish(action, entry, "skipped", f"pod {action.pod_key} is no longer on {node.name}", now=now)
    if pod.terminating or pod.is_finished:
        return run.finish(action, entry, "skipped", f"pod {action.pod_key} is already ending", now=now)
    # The pending poll's decision, taken again with the poll's own inputs (the observed cluster, the groups, their
    # templates and VM prices, read by `virtual_nodes.plan_for` as the poll reads them) and our settings: whatever
    # the message says, a pod the poll would leave on the virtual node is left there.
    snapshot = observe(run.ports, now=now, node_mapping=run.settings.node_mapping,
                       gpu_readiness=run.settings.gpu_readiness)
    decided = {d.pod.key: d for d in virtual_nodes.plan_for(run.ports, run.settings, snapshot, now=now).plan.decisions}
    decision = decided.get(pod.key)
    if decision is None:
        return run.finish(action, entry, "skipped", f"pod {action.pod_key}: the poll's view has it on no virtual "
                          "node any more", now=now)
    if decision.verdict == "stays":
        log.warning("backfill of %s refused: the poll would leave it on %s (%s)", action.pod_key, node.name,
                    decision.why)
        return run.finish(action, entry, "skipped", f"refused: pod {action.pod_key} stays: {decision.why}", now=now)
    to = vm_room(pod, snapshot.nodes, snapshot.pods, prefer=action.to)
    if to is None:
        return run.finish(action, entry, "skipped", f"no VM room for {action.pod_key} any more: left on "
                          f"{node.name}", now=now)
    if run.settings.dry_run:
        return run.finish(action, entry, "dry-run", f"would move {action.pod_key} off {node.name} (room on {to})",
                          now=now)
    outcome = cluster.evict(pod.namespace, pod.name)
    telemetry.record_eviction(outcome)
    if outcome == "blocked":
        return run.finish(action, entry, "skipped", f"pod {action.pod_key}: a PodDisruptionBudget allows no "
                          "eviction now; a later poll tries again", now=now)
    if outcome == "not_found":
        return run.finish(action, entry, "skipped", f"pod {action.pod_key} is gone", now=now)
    refused = " (ACI had refused it)" if pod.status_reason == PROVIDER_FAILED else ""
    message = f"moved off virtual node {node.name}{refused}: VM room on {to}; {decision.why}"
    run.ports.events.emit(ClusterEvent(pod.namespace, "Pod", pod.name, pod.uid, BACKFILL_EVENT, message, now))
    telemetry.pod_backfilled(failed=bool(refused))
    log.info("backfill: evicted %s from %s (VM room on %s)", action.pod_key, node.name, to)
    return run.finish(action, entry, "succeeded", f"{action.pod_key} evicted from {node.name}; room on {to}",
                      now=now)


def _never_operates(run: Run[Backfill], action: Backfill, entry: LedgerEntry, *args: object) -> ExecutionResult:
    raise AssertionError("a backfill follows no long-running operation")


def fail(run: Run[Backfill], action: Backfill, entry: LedgerEntry, why: str, code: str,
         now: datetime) -> ExecutionResult:
    """Nothing to undo: an eviction either happened or did not."""
    return run.finish(action, entry, "failed", why, now=now, error_code=code)


TABLE = StepTable(
    action=Backfill,
    steps={"evict": Step(evict, next=("evict",))},  # itself: a passing Kubernetes API fault
    succeeded=_never_operates,
    failed=_never_operates,
    fail=fail,
)
