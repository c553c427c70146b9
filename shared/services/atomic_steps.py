"""The atomic scale-up's steps: every node a ProvisioningRequest of the `best-effort-atomic-scale-up` class needs, or
none of them.

check ──> resize ──> confirm ──> ready ──> (succeeded: Provisioned=True, CapacityIsProvisioned)
  │          │          │          │
  │          └──────────┴──────────┴──> rollback ──> (failed: every added instance deleted,
  │                                                  Failed=True, PartialCapacityReturned)
  └──> (failed: nothing asked, Failed=True, QuotaExceeded or CapacityIsNotFound)

- check: the request is read again (it exists with the message's uid, is of the atomic class, not final and not
  Provisioned: a message is never trusted), the groups are ours, and each group's max size, the Compute quota and
  the cluster-wide limits hold the whole increase; otherwise nothing is asked and the request is Failed.
- resize: each group is claimed for the action in its state row (GroupState.atomic_holder) until confirm has named
  the instances added, so two atomic scale-ups never count each other's; before each group's capacity write, what
  the group holds (its capacity, its instance ids) and the capacity asked for are recorded in the ledger entry (our
  state); the write then asks for the whole part at once.
- confirm: the capacity operations' outcomes; the instances added are those listed now that were not before. Any
  refused operation, fewer instances than asked, or one left Failed: rollback.
- ready: every added instance's node Ready and usable (its GPUs allocatable: engine.gpu_readiness), else waited
  for up to MAX_NODE_PROVISION_TIME, then rollback; a request deleted meanwhile: rollback.
- rollback: exactly the instances the request added are deleted (never others': a capacity decrease would let
  Azure pick), except one whose node already runs another pod (kube-scheduler knows no booking: it stays as
  ordinary capacity, never killing that pod), the capacity set back to what exists, and the request Failed with
  what Azure granted and why.

Unlike cluster-autoscaler, which calls an atomic request Provisioned once the resize is accepted and leaves a
partial grant in place, Provisioned here means the nodes are usable, and a partial grant is given back.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from shared.actions import AtomicScaleUp
from shared.domain import (
    ATOMIC_SCALE_UP_CLASS,
    GroupState,
    Node,
    NodeGroup,
    NodeTemplate,
    ProvisioningRequest,
    instance_order,
)
from shared.engine import provisioning_conditions as pc
from shared.engine.backoff import ALLOCATION_FAILURES
from shared.engine.gpu_readiness import usable
from shared.engine.offerings import QUOTA_CODES
from shared.engine.idle import note_boot_request
from shared.engine.templates import template_from_tags
from shared.ports import CHANGED_SINCE_READ, ClusterEvent, ComputeError, LedgerEntry
from shared.services import ledger, limit_reservations, offerings
from shared.services.execution import ExecutionResult, Run, Step, StepTable, throttled_delay
from shared.services.mapping import map_cluster
from shared.services.swap import StateConflict, swap_group

log = logging.getLogger(__name__)

Runs = Run[AtomicScaleUp]

# -- check --------------------------------------------------------------------------------------

def check(run: Runs, action: AtomicScaleUp, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    if not run.settings.provisioning_requests:
        return run.finish(action, entry, "skipped", "PROVISIONING_REQUESTS is off", now=now)
    request, refusal = _request(run, action)
    if refusal is not None:
        return run.reject(action, refusal, now=now, poison=request is not None, entry=entry)
    assert request is not None
    if pc.is_final(request) or request.is_true(pc.PROVISIONED):
        return run.finish(action, entry, "skipped", f"request {action.request} is already "
                          f"{'final' if pc.is_final(request) else 'Provisioned'}", now=now)
    groups: dict[str, NodeGroup] = {}
    for group_id, _ in action.parts:
        group = run.ports.provider.get_node_group(group_id)
        if group is None:
            return run.reject(action, f"group {group_id!r} is not a discovered node group", now=now, poison=True,
                              entry=entry)
        groups[group_id] = group
    try:
        binding = _binding_limit(run, action, groups, now=now)
    except StateConflict as exc:
        delay = throttled_delay(None, run.settings.step_retry_delay, attempt=action.attempt)
        return run.continue_(action.retried(), entry, delay=delay, now=now, detail=f"limits row contended: {exc}")
    if binding is not None:
        # The poll found room for the whole request; what holds it back now is capacity taken since (the poll rules
        # out a request no limit could ever hold): this attempt ends, the next is planned when room comes back.
        reason, why = binding
        return _not_yet(run, action, entry, f"{why}: nothing asked", reason, now=now)
    if run.settings.dry_run:
        return run.finish(action, entry, "dry-run", f"would add {_parts_text(action.parts)} for {action.request}",
                          now=now)
    return run.continue_(action.at_step("resize", now=now), entry, delay=timedelta(0), now=now)


def _binding_limit(run: Runs, action: AtomicScaleUp, groups: Mapping[str, NodeGroup], *,
                   now: datetime) -> tuple[str, str] | None:
    """The reason and words of the first limit that cannot hold the whole increase; None when every one can.

    In the order Azure or we would refuse it: the group's max size, an offering marked unavailable, the Compute
    quota (the parts one after another, as they share families), the cluster-wide limits (room reserved per part,
    `_reservation`, released once the capacity is visible or when the action ends). Raises StateConflict when the
    limits row stays contended.
    """
    limits = offerings.planning_limits(run.ports, run.settings, list(groups.values()), now=now, fresh=True)
    quota = limits.quota
    for group_id, count in action.parts:
        group = groups[group_id]
        running = group.capacity - len(run.ports.state.get_group(group_id).stopped)
        if running + count > group.max_size:
            return pc.QUOTA_EXCEEDED, (f"group {group_id} has {running} of its max {group.max_size} node(s): "
                                       f"{count} more do not fit")
        if group_id in limits.blocked:
            return pc.CAPACITY_IS_NOT_FOUND, f"group {group_id}: {limits.blocked[group_id]}"
        if quota is not None:
            allowed, why = quota.allowed(group)
            if allowed is not None and allowed < count:
                return pc.QUOTA_EXCEEDED, f"group {group_id}: {count} node(s) asked for, {allowed} allowed: {why}"
            quota = quota.consume(group, count)
    for group_id, count in action.parts:
        group = groups[group_id]
        target = group.running_target + count
        within, limit = limit_reservations.reserve(run.ports, run.settings, action_id=_reservation(action, group_id),
                                                   group=group, target=target, now=now, write=not run.settings.dry_run)
        if within < target:
            return pc.QUOTA_EXCEEDED, (f"group {group_id}: {limit or 'a cluster limit'} leaves room for "
                                       f"{max(0, within - group.running_target)} of {count} new node(s)")
    return None


# -- resize -------------------------------------------------------------------------------------

def resize(run: Runs, action: AtomicScaleUp, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    """Each part's capacity written once, with what the group held recorded first (see the module)."""
    record = _record(entry)
    unwritten = [g for g, _ in action.parts if record.get("asked", {}).get(g) is None]
    blocker = _claim(run, action, unwritten, now=now) if unwritten else None
    if blocker is not None:
        # Another atomic scale-up is between its write and its listing there: ours would count its instances.
        return run.continue_(action.retried(), entry, delay=run.settings.step_retry_delay, now=now,
                             detail=f"waiting for the atomic scale-up growing {blocker}")
    quota = None
    for group_id, count in action.parts:
        asked = record.get("asked", {}).get(group_id)
        group = run.ports.provider.get_node_group(group_id)
        if group is None:
            return _to_rollback(run, action, entry, f"group {group_id} is gone", "GroupGone", now=now)
        if asked is None:
            before = sorted(i.instance_id for i in run.ports.provider.list_instances(group))
            asked = group.capacity + count
            record = _set(record, "from", group_id, group.capacity)
            record = _set(record, "before", group_id, before)
            record = _set(record, "asked", group_id, asked)
            # Recorded before the write: a crash after it leaves a redelivery that knows what the request added.
            entry = _save(run, entry, record)
            run.update_group(group_id, lambda s, n=count: note_boot_request(replace(s, last_scale_up=now), n, now=now))
            log.info("atomic scale-up %s: growing %s %d -> %d for %s", action.id, group_id, group.capacity, asked,
                     action.request)
        elif group.capacity >= asked:
            continue  # written by an earlier delivery of this step
        try:
            operation = run.ports.provider.begin_resize(group, asked)  # If-Match on the read just above
        except ComputeError as exc:
            if exc.code == CHANGED_SINCE_READ:
                # Another writer changed the group since that read: what it held is read again next time.
                record = _unset(record, group_id)
                entry = _save(run, entry, record)
                delay = throttled_delay(None, run.settings.step_retry_delay, attempt=action.attempt)
                return run.continue_(action.retried(), entry, delay=delay, now=now, record=ledger_record(record),
                                     detail=f"{group_id} changed since it was read")
            if _quota_refusal(exc) and not record.get("operations"):
                # Nothing granted anywhere: capacity in use holds the quota (the poll saw it free; another scale-up
                # took it since). The attempt ends without failing the request, which reads Provisioned=False as
                # one that does not fit yet, and the poll plans the next attempt when the quota allows it: Kueue
                # retries a Failed request only a few times before it gives the job up.
                offerings.record_refusal(run.ports, run.settings, group, code=exc.code, message=str(exc), now=now)
                return _not_yet(run, action, entry, f"Azure refused {group_id} -> {asked}: {exc}", exc.code, now=now)
            if exc.code in ALLOCATION_FAILURES or _quota_refusal(exc):
                return _to_rollback(run, action, entry, f"Azure refused {group_id} -> {asked}: {exc}", exc.code,
                                    now=now, record=record)
            raise
        record = _set(record, "operations", group_id, operation.token)
        if quota is None:  # the quota reader counts what was asked for until its next read (a cached read here)
            quota = offerings.planning_limits(run.ports, run.settings, [group], now=now).quota
        offerings.note_requested(run.ports, quota, group, count)
        entry = _save(run, entry, record)
        if operation.status in ("Failed", "Canceled"):
            why = f"Azure refused {group_id} -> {asked}: {operation.error_code}: {operation.error_message}"
            return _to_rollback(run, action, entry, why, operation.error_code or operation.status, now=now,
                                record=record)
    run.status_event("ScaledUpGroup", f"Scale-up: {_parts_text(action.parts)} for ProvisioningRequest "
                     f"{action.request}, all or nothing", now=now)
    return run.continue_(action.at_step("confirm", now=now), entry, delay=run.settings.step_retry_delay, now=now,
                         record=ledger_record(record))


# -- confirm ------------------------------------------------------------------------------------

def confirm(run: Runs, action: AtomicScaleUp, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    record = _record(entry)
    for group_id, token in sorted(record.get("operations", {}).items()):
        if not token:
            continue
        operation = run.ports.provider.get_resize_operation(token)
        if operation.status == "InProgress":
            return run.continue_(action.retried(), entry, delay=run.settings.step_retry_delay, now=now,
                                 detail=f"resize of {group_id} in progress")
        if operation.status != "Succeeded":
            why = f"the resize of {group_id} failed: {operation.error_code or operation.status}: " \
                  f"{operation.error_message}".rstrip(": ")
            return _to_rollback(run, action, entry, why, operation.error_code or operation.status, now=now)
    added: dict[str, list[str]] = {}
    problems: list[str] = []
    code = ""
    for group_id, count in action.parts:
        group = run.ports.provider.get_node_group(group_id)
        if group is None:
            return _to_rollback(run, action, entry, f"group {group_id} is gone", "GroupGone", now=now)
        new = _new_instances(run, group, record, count)
        added[group_id] = [i.instance_id for i in new]
        broken = [i for i in new if i.failed]
        if broken:
            code = code or broken[0].error_code or "Failed"
            problems.append(f"{group_id}: instance(s) {', '.join(i.instance_id for i in broken)} left Failed "
                            f"({broken[0].error_code or 'no code'}: {broken[0].error_message})".replace(": )", ")"))
        if len(new) < count:
            code = code or "PartialGrant"
            problems.append(f"{group_id}: {len(new)} of {count} instance(s) created")
    record = {**record, "added": added}
    if problems:
        why = f"Azure granted part of {action.nodes_asked} node(s): {'; '.join(problems)}"
        return _to_rollback(run, action, entry, why, code, now=now, record=record)
    # The capacity is visible now: the room reserved under the cluster limits has done its work, and the instances
    # are named, so other atomic scale-ups may grow these groups.
    _release_reservations(run, action, now=now)
    _release_claims(run, action)
    return run.continue_(action.at_step("ready", now=now), entry, delay=run.settings.step_retry_delay, now=now,
                         record=ledger_record(record), detail=f"added {_added_text(added)}")


def _new_instances(run: Runs, group: NodeGroup, record: Mapping[str, Any], count: int) -> list[Any]:
    """The instances the request added to the group: listed now, not before the resize (the first `count` of them
    in instance order: another action growing the group at once may have added more)."""
    before = set(record.get("before", {}).get(group.id, []))
    new = [i for i in run.ports.provider.list_instances(group) if i.instance_id not in before and not i.deleting]
    return sorted(new, key=lambda i: instance_order(i.instance_id))[:count]


# -- ready --------------------------------------------------------------------------------------

def ready(run: Runs, action: AtomicScaleUp, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    record = _record(entry)
    request, refusal = _request(run, action)
    if request is None or refusal is not None or pc.is_final(request):
        why = refusal or (f"request {action.request} was deleted" if request is None else
                          f"request {action.request} ended meanwhile")
        return _to_rollback(run, action, entry, why, "RequestGone", now=now)
    added: Mapping[str, list[str]] = record.get("added", {})
    waiting: list[str] = []
    for group_id, ids in added.items():
        group = run.ports.provider.get_node_group(group_id)
        if group is None:
            return _to_rollback(run, action, entry, f"group {group_id} is gone", "GroupGone", now=now)
        instances = {i.instance_id: i for i in run.ports.provider.list_instances(group)}
        lost = [i for i in ids if i not in instances or instances[i].deleting or instances[i].failed]
        if lost:
            code = next((instances[i].error_code for i in lost if i in instances and instances[i].error_code),
                        "InstanceLost")
            return _to_rollback(run, action, entry, f"{group_id}: instance(s) {', '.join(lost)} failed or went "
                                f"away before their node was usable ({code})", code, now=now)
        nodes = _nodes_of(run, replace(group, instances=tuple(instances.values())), ids)
        template = _sized_template(run, group)
        waiting += [f"{group_id}/{i}" for i in ids if i not in nodes or not usable(nodes[i], template)]
    if waiting:
        started = action.step_started_at or now
        if now - started < run.settings.max_node_provision_time:
            return run.continue_(action.retried(), entry, delay=run.settings.step_retry_delay, now=now,
                                 detail=f"waiting for {len(waiting)} node(s) to be usable")
        why = (f"{len(waiting)} of {action.nodes_asked} node(s) not usable within MAX_NODE_PROVISION_TIME "
               f"({run.settings.max_node_provision_time}): {', '.join(waiting[:10])}")
        return _to_rollback(run, action, entry, why, "ProvisionTimeout", now=now)
    message = f"{action.nodes_asked} node(s) provisioned and usable: {_added_text(added)}"
    _write_status(run, request, pc.PROVISIONED, pc.CAPACITY_IS_PROVISIONED, message, now=now)
    return run.finish(action, entry, "succeeded", message, now=now)


def _sized_template(run: Runs, group: NodeGroup) -> NodeTemplate | None:
    """What the group's VM size promises (its GPUs), from its tags over the SKU list (cached for hours): never from a
    live node, which may be one of the added ones, Ready before its device plugin has run."""
    sizes = {s.name.lower(): s for s in run.ports.provider.list_vm_sizes(group.location)} if group.location else {}
    return template_from_tags(group, vm_sizes=sizes)


def _running_others(run: Runs, group: NodeGroup, instances: Sequence[str]) -> list[str]:
    """Those of `instances` whose node runs a pod other than a DaemonSet's or a mirror pod (not finished)."""
    busy = []
    for instance_id, node in sorted(_nodes_of(run, group, instances).items()):
        if any(not p.is_node_bound_system_pod and not p.is_finished
               for p in run.ports.cluster.list_pods_on_node(node.name)):
            busy.append(instance_id)
    return busy


def _nodes_of(run: Runs, group: NodeGroup, instances: Sequence[str]) -> dict[str, Node]:
    """The registered nodes of these instances of the group, by instance id (mapped by the poll's rules)."""
    wanted = set(instances)
    mapped = map_cluster(run.ports.provider, run.ports.cluster.list_nodes(), [group], method=run.settings.node_mapping)
    return {ref.instance_id: node for node in mapped.nodes
            if (ref := node.instance) is not None and ref.group_id == group.id and ref.instance_id in wanted}


# -- rollback -----------------------------------------------------------------------------------

def _to_rollback(run: Runs, action: AtomicScaleUp, entry: LedgerEntry, why: str, code: str, *, now: datetime,
                 record: Mapping[str, Any] | None = None) -> ExecutionResult:
    """Hand over to the rollback, with why recorded in the ledger entry (never carried by the message)."""
    record = {**(record if record is not None else _record(entry)), "why": why, "code": code}
    log.warning("atomic scale-up %s for %s rolls back: %s", action.id, action.request, why)
    return run.continue_(action.at_step("rollback", now=now), entry, delay=timedelta(0), now=now,
                         record=ledger_record(record))


def rollback(run: Runs, action: AtomicScaleUp, entry: LedgerEntry, now: datetime) -> ExecutionResult:
    record = _record(entry)
    if "deleting" not in record:
        deleting: dict[str, str] = {}
        deleted: dict[str, list[str]] = {}
        kept: dict[str, list[str]] = {}
        for group_id, count in action.parts:
            group = run.ports.provider.get_node_group(group_id)
            if group is None or group_id not in record.get("asked", {}):
                continue  # gone, or never written to: nothing of ours in it
            ids = record.get("added", {}).get(group_id)
            present = {i.instance_id: i for i in run.ports.provider.list_instances(group)}
            if ids is None:  # the rollback came before confirm named them
                ids = [i.instance_id for i in _new_instances(run, group, record, count)]
            ids = sorted((i for i in ids if i in present and not present[i].deleting), key=instance_order)
            busy = _running_others(run, group, ids)
            if busy:
                # kube-scheduler knows no booking: another pod may have landed on an added node. Deleting it would
                # kill that pod; the node stays as ordinary capacity, which scale-down drains when it is idle.
                kept[group_id] = busy
                ids = [i for i in ids if i not in busy]
            deleted[group_id] = ids
            if ids:
                log.warning("atomic scale-up %s: deleting %s of %s (%s)", action.id, ", ".join(ids), group_id,
                            record.get("why", ""))
                deleting[group_id] = run.ports.provider.begin_delete_instances(group, ids).token
        record = {**record, "deleting": deleting, "deleted": deleted, "kept": kept}
        entry = _save(run, entry, record)
    for group_id, token in sorted(record["deleting"].items()):
        if token and run.ports.provider.get_delete_operation(token).status == "InProgress":
            return run.continue_(action.retried(), entry, delay=run.settings.step_retry_delay, now=now,
                                 record=ledger_record(record), detail=f"deleting the instances added to {group_id}")
    return _rolled_back(run, action, entry, record, now=now)


def _rolled_back(run: Runs, action: AtomicScaleUp, entry: LedgerEntry, record: Mapping[str, Any], *,
                 now: datetime) -> ExecutionResult:
    """The added instances are gone: the capacity set back, the refusal recorded, the request Failed."""
    code, why = record.get("code") or "Failed", record.get("why") or "rolled back"
    for group_id in record.get("asked", {}):
        _give_capacity_back(run, group_id, record)
        group = run.ports.provider.get_node_group(group_id)
        if group is not None and code in ALLOCATION_FAILURES and code != "ProvisionTimeout":  # Azure's refusals only
            offerings.record_refusal(run.ports, run.settings, group, code=code, message=why, now=now)
    deleted = {g: ids for g, ids in record.get("deleted", {}).items() if ids}
    kept = {g: ids for g, ids in record.get("kept", {}).items() if ids}
    returned = f"deleted {_added_text(deleted)}" if deleted else "no instance to delete"
    if kept:
        returned += f"; kept {_added_text(kept)} (other pods run there: ordinary capacity now)"
    message = f"{why}; {returned}, capacity given back"
    request, refusal = _request(run, action)
    if request is not None and refusal is None and not pc.is_final(request):
        _write_status(run, request, pc.FAILED, pc.PARTIAL_CAPACITY_RETURNED, message, now=now)
    run.status_event("FailedToScaleUpGroup", f"Scale-up failed for ProvisioningRequest {action.request} "
                     f"({_parts_text(action.parts)}): {message}", now=now, type="Warning")
    return run.finish(action, entry, "failed", message, now=now, error_code=code)


def _give_capacity_back(run: Runs, group_id: str, record: Mapping[str, Any]) -> None:
    """A capacity above the instances that exist (a write that Azure took but could not fill) set back to what
    exists, never below what the group held before: deleting named instances already lowered it for those."""
    group = run.ports.provider.get_node_group(group_id)
    if group is None:
        return
    live = sum(1 for i in run.ports.provider.list_instances(group) if not i.deleting)
    target = max(live, record.get("from", {}).get(group_id, 0))
    if group.capacity <= target:
        return
    log.info("atomic scale-up: returning %s to %d after its rollback", group_id, target)
    try:
        run.ports.provider.begin_resize(group, target)  # If-Match on the read above: never lowered past another's
    except ComputeError as exc:
        if exc.code != CHANGED_SINCE_READ:
            raise
        log.info("%s changed since it was read; its capacity is left as it is: %s", group_id, exc)


# -- ending -------------------------------------------------------------------------------------

def succeeded(run: Runs, action: AtomicScaleUp, entry: LedgerEntry, kind: str, now: datetime) -> ExecutionResult:
    """Never reached: the steps follow their operations themselves (several groups, several operations)."""
    raise AssertionError(f"atomic scale-up {action.id}: no operation is followed by the protocol ({kind})")


def failed(run: Runs, action: AtomicScaleUp, entry: LedgerEntry, detail: str, code: str, kind: str,
           now: datetime) -> ExecutionResult:
    raise AssertionError(f"atomic scale-up {action.id}: no operation is followed by the protocol ({kind})")


def fail(run: Runs, action: AtomicScaleUp, entry: LedgerEntry, why: str, code: str, now: datetime) -> ExecutionResult:
    """End the action from outside its steps (a fault that lasts, the host's last delivery): what it added is
    deleted (not waited for) and the request Failed, so that no part of a gang is left holding nodes."""
    record = {**_record(entry), "why": why, "code": code}
    for group_id, count in action.parts:
        if group_id not in record.get("asked", {}):
            continue
        group = run.ports.provider.get_node_group(group_id)
        if group is None:
            continue
        ids = record.get("added", {}).get(group_id) or [i.instance_id for i in
                                                        _new_instances(run, group, record, count)]
        busy = _running_others(run, group, ids)  # as in rollback: never kill a pod that landed there
        ids = [i for i in ids if i not in busy]
        if ids:
            try:
                run.ports.provider.begin_delete_instances(group, list(ids))
            except ComputeError as exc:  # left as ordinary capacity: scale-down removes it when idle
                log.warning("atomic scale-up %s: deleting %s of %s failed: %s", action.id, ids, group_id, exc)
        record = _set(record, "deleted", group_id, list(ids))
    request, refusal = _request(run, action)
    if request is not None and refusal is None and not pc.is_final(request):
        deleted = {g: ids for g, ids in record.get("deleted", {}).items() if ids}
        reason = pc.PARTIAL_CAPACITY_RETURNED if deleted else pc.CAPACITY_IS_NOT_FOUND
        words = f"; deleting {_added_text(deleted)}" if deleted else ""
        _write_status(run, request, pc.FAILED, reason, f"the scale-up could not finish: {why}{words}", now=now)
    return run.finish(action, entry, "failed", why, now=now, error_code=code)


def expired(run: Runs, action: AtomicScaleUp, why: str, now: datetime) -> None:
    """The decision expired on the queue before it ran: nothing was asked. The request reads Provisioned=False
    (ScaleUpExpired), so the poll plans its next attempt under a new id."""
    request, refusal = _request(run, action)
    if request is not None and refusal is None and not pc.is_final(request) and not request.is_true(pc.PROVISIONED):
        _write_status(run, request, pc.PROVISIONED, pc.SCALE_UP_EXPIRED,
                      f"nothing was asked for: the scale-up {why}; planned again", now=now, status="False")


def ended(run: Runs, action: AtomicScaleUp, now: datetime) -> None:
    """The action has its outcome: the room its parts reserved under the cluster limits goes, and its groups are
    free for other atomic scale-ups."""
    _release_reservations(run, action, now=now)
    _release_claims(run, action)


def _claim(run: Runs, action: AtomicScaleUp, group_ids: Sequence[str], *, now: datetime) -> str | None:
    """Each group claimed for this action (GroupState.atomic_holder), in id order so two multi-group actions never
    wait on each other; `group (holder)` of the first held by another live action, None when all are ours. A claim
    older than MAX_NODE_PROVISION_TIME is stale (its holder crashed past every redelivery) and taken over."""
    for group_id in sorted(group_ids):
        def take(state: GroupState) -> tuple[GroupState | None, str | None]:
            holder, since = state.atomic_holder, state.atomic_since
            if holder == action.id:
                return None, None
            if holder and since is not None and now - since < run.settings.max_node_provision_time:
                return None, holder
            return replace(state, atomic_holder=action.id, atomic_since=now), None

        holder = swap_group(run.ports.state, group_id, take, what=f"claim for atomic scale-up {action.id}")
        if holder is not None:
            return f"{group_id} ({holder})"
    return None


def _not_yet(run: Runs, action: AtomicScaleUp, entry: LedgerEntry, why: str, code: str, *,
             now: datetime) -> ExecutionResult:
    """End this attempt with nothing granted: the request Provisioned=False CapacityIsNotFound (not Failed), so
    the poll plans its next attempt (`provreq:<uid>:<n>`) when room allows, or fails it if no limit ever could."""
    request, refusal = _request(run, action)
    if request is not None and refusal is None and not pc.is_final(request):
        _write_status(run, request, pc.PROVISIONED, pc.CAPACITY_IS_NOT_FOUND,
                      f"{why}; nothing was granted, planned again when there is room", now=now, status="False")
    return run.finish(action, entry, "failed", why, now=now, error_code=code)


def _quota_refusal(exc: ComputeError) -> bool:
    """Azure refused the capacity write for a quota (the whole write: nothing was granted)."""
    return (exc.code or "").lower() in QUOTA_CODES and "quota" in str(exc).lower()


def _release_claims(run: Runs, action: AtomicScaleUp) -> None:
    for group_id, _ in action.parts:
        run.update_group(group_id, lambda s: replace(s, atomic_holder="", atomic_since=None)
                         if s.atomic_holder == action.id else s)


# -- shared -------------------------------------------------------------------------------------

def _request(run: Runs, action: AtomicScaleUp) -> tuple[ProvisioningRequest | None, str | None]:
    """The request the action names, read now, and why the action must not act for it (None: it may).

    The request is None when it does not exist (or the CRD is not served); a request of the same name with
    another uid, or of another class, comes back with the refusal.
    """
    requests = run.ports.cluster.list_provisioning_requests() or []
    request = next((r for r in requests if r.key == action.request), None)
    if request is None:
        return None, f"request {action.request} does not exist"
    if request.uid != action.request_uid:
        return request, f"request {action.request} has uid {request.uid!r}, not {action.request_uid!r}"
    if request.class_name != ATOMIC_SCALE_UP_CLASS:
        return request, f"request {action.request} is of class {request.class_name!r}, not {ATOMIC_SCALE_UP_CLASS!r}"
    return request, None


def _write_status(run: Runs, request: ProvisioningRequest, type_: str, reason: str, message: str, *,
                  now: datetime, status: str = "True") -> None:
    """One condition set (True unless `status` says otherwise) on the request's current ones, and its Event (reason
    as the condition's, a Warning for Failed: as the polls write them, services.provisioning). On Failed,
    Provisioned=False takes the failure's reason: ScaleUpInProgress left beside it would read as still to come."""
    conditions = pc.with_condition(request.conditions, type_, status, reason, message[:32768], now=now,
                                   generation=request.generation)
    if type_ == pc.FAILED and request.condition(pc.PROVISIONED) is not None:
        conditions = pc.with_condition(conditions, pc.PROVISIONED, "False", reason, message[:32768], now=now,
                                       generation=request.generation)
    if run.settings.dry_run or not pc.conditions_changed(request.conditions, conditions):
        return
    run.ports.cluster.update_provisioning_request_status(request.namespace, request.name, conditions=conditions)
    run.ports.events.emit(ClusterEvent(request.namespace, "ProvisioningRequest", request.name, request.uid, reason,
                                       message[:1024], now, "Warning" if type_ == pc.FAILED else "Normal"))


def _reservation(action: AtomicScaleUp, group_id: str) -> str:
    """The key of a part's room on the limits row: the action's id for its first group (so the polls find its
    ledger row, services.allocation), `<id>#<group>` for the others (the row holds one reservation per key)."""
    return action.id if group_id == action.group else f"{action.id}#{group_id}"


def _release_reservations(run: Runs, action: AtomicScaleUp, *, now: datetime) -> None:
    for group_id, _ in action.parts:
        limit_reservations.release(run.ports, _reservation(action, group_id), now=now)


def _record(entry: LedgerEntry) -> dict[str, Any]:
    return json.loads(entry.record) if entry.record else {}


def ledger_record(record: Mapping[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def _save(run: Runs, entry: LedgerEntry, record: Mapping[str, Any]) -> LedgerEntry:
    """The record written to our claimed ledger entry now (before the effect it describes)."""
    return ledger.update(run.ports.state, entry, record=ledger_record(record))


def _set(record: Mapping[str, Any], field: str, group_id: str, value: object) -> dict[str, Any]:
    return {**record, field: {**record.get(field, {}), group_id: value}}


def _unset(record: Mapping[str, Any], group_id: str) -> dict[str, Any]:
    return {**record, **{field: {g: v for g, v in record.get(field, {}).items() if g != group_id}
                         for field in ("from", "before", "asked", "operations") if field in record}}


def _parts_text(parts: Sequence[tuple[str, int]]) -> str:
    return " and ".join(f"{count} node(s) of {group}" for group, count in parts)


def _added_text(added: Mapping[str, Sequence[str]]) -> str:
    return "; ".join(f"{group}: {', '.join(ids)}" for group, ids in sorted(added.items()) if ids) or "none"


TABLE = StepTable(
    action=AtomicScaleUp,
    steps={
        "check": Step(check, next=("check", "resize")),  # itself: the limits row contended, a passing fault
        "resize": Step(resize, next=("resize", "confirm", "rollback")),
        "confirm": Step(confirm, next=("confirm", "ready", "rollback")),
        "ready": Step(ready, next=("ready", "rollback")),
        "rollback": Step(rollback, next=("rollback",)),
    },
    succeeded=succeeded,
    failed=failed,
    fail=fail,
    expired=expired,
    ended=ended,
)
