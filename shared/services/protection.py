"""The utilisation poll's step for scale-in protection: read what is needed, decide (engine.protection), write.

Reads: a group's instance list (one high-cost call) only when the group has a node running batch work, or the
last read in this process found a protected instance there (a lift may be due), or this process has not read
it yet (protection left by an earlier process); a listing the poll already made is reused. Groups whose
backend has no instance protection (Flexible members, AKS-managed pools) are neither read nor written: one
log line per group and process says their batch nodes go unprotected, and nothing more.

Writes: what the engine planned, within its per-group budget; a refusal or a throttled write is logged and
left for the next poll (a throttled group gets no more writes this poll). Nothing here stops the poll.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from shared.domain import ClusterSnapshot, Instance, NodeGroup
from shared.engine.protection import ProtectionChange, busy_nodes, plan_protection
from shared.options import drain_rules
from shared.ports import ComputeError, Ports
from shared.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

# Per provider (per Function instance): group id -> the instances the last read found protected, our writes
# since applied. In memory on purpose: it only decides when to read again; a cold instance reads every group once.
_PROTECTED: weakref.WeakKeyDictionary[object, dict[str, frozenset[str]]] = weakref.WeakKeyDictionary()
# Per provider: the groups already reported as having no instance protection (one line each, not one a poll).
_UNSUPPORTED_SAID: weakref.WeakKeyDictionary[object, set[str]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class ProtectionResult:
    written: tuple[ProtectionChange, ...] = ()
    failed: tuple[tuple[ProtectionChange, str], ...] = ()  # with ARM's code
    deferred: Mapping[str, int] = field(default_factory=dict)  # by group: left for a later poll by the budget
    unsupported: tuple[str, ...] = ()  # groups with batch work that their backend cannot protect


def apply_scale_in_protection(ports: Ports, settings: Settings, snapshot: ClusterSnapshot, *,
                              now: datetime) -> ProtectionResult:
    """Protect the instances of nodes running batch work from scale-in, and lift it from idle ones."""
    if not settings.batch_scale_in_protection:
        return ProtectionResult()
    rules = drain_rules(settings)
    busy = busy_nodes(snapshot.pods, rules, now=now)
    busy_groups = {ref.group_id for node in snapshot.nodes if node.name in busy and (ref := node.instance) is not None}
    known = _memory(_PROTECTED, ports.provider, dict)
    unsupported: list[str] = []
    instances: dict[str, Sequence[Instance]] = {}
    for group in snapshot.groups:
        if not ports.provider.supports_scale_in_protection(group):
            if group.id in busy_groups:
                unsupported.append(group.id)
                _say_unsupported(ports.provider, group)
            continue
        if group.id in busy_groups or known.get(group.id) or group.id not in known:
            listed = _instances(ports, group)
            if listed is not None:
                instances[group.id] = listed
    plan = plan_protection(snapshot.nodes, snapshot.pods, instances, rules, now=now)
    for group_id, left in plan.deferred.items():
        log.info("scale-in protection: %d change(s) in %s left for the next poll (write budget)", left, group_id)
    written, failed = _write(ports, snapshot, plan.changes, dry_run=settings.dry_run)
    for group_id, listed in instances.items():
        protected = {i.instance_id for i in listed if i.protected_from_scale_in}
        for change in written:
            if change.group_id == group_id:
                (protected.add if change.protect else protected.discard)(change.instance_id)
        known[group_id] = frozenset(protected)
    return ProtectionResult(tuple(written), tuple(failed), dict(plan.deferred), tuple(unsupported))


def _instances(ports: Ports, group: NodeGroup) -> Sequence[Instance] | None:
    """The group's instances with their protection: the poll's own listing when it has it, else one list call."""
    if group.instances and all(i.protected_from_scale_in is not None for i in group.instances):
        return group.instances
    try:
        return ports.provider.list_instances(group)
    except ComputeError as exc:
        log.warning("scale-in protection of %s not checked this poll: %s", group.id, exc)
        return None


def _write(ports: Ports, snapshot: ClusterSnapshot, changes: Sequence[ProtectionChange], *,
           dry_run: bool) -> tuple[list[ProtectionChange], list[tuple[ProtectionChange, str]]]:
    groups = {g.id: g for g in snapshot.groups}
    written: list[ProtectionChange] = []
    failed: list[tuple[ProtectionChange, str]] = []
    throttled: set[str] = set()
    for change in changes:
        what = "protect from scale-in" if change.protect else "lift scale-in protection of"
        if dry_run:
            log.info("dry run: would %s instance %s of %s (node %s)", what, change.instance_id, change.group_id, change.node)
            continue
        if change.group_id in throttled:
            failed.append((change, "TooManyRequests"))
            continue
        try:
            ports.provider.set_scale_in_protection(groups[change.group_id], change.instance_id, protect=change.protect)
        except ComputeError as exc:
            if exc.code == "TooManyRequests":
                throttled.add(change.group_id)
            log.warning("could not %s instance %s of %s (node %s): %s", what, change.instance_id, change.group_id,
                        change.node, exc)
            failed.append((change, exc.code))
            continue
        log.info("%s instance %s of %s (node %s): %s", what, change.instance_id, change.group_id, change.node,
                 "it runs batch work" if change.protect else "no batch work left")
        written.append(change)
    return written, failed


def _say_unsupported(provider: object, group: NodeGroup) -> None:
    said = _memory(_UNSUPPORTED_SAID, provider, set)
    if group.id not in said:
        said.add(group.id)
        log.info("group %s (%s) runs batch work but has no instance protection: a scale-in by another tool "
                 "may take those nodes (docs/deploy.md, scale-in protection)", group.id, group.provider)


def _memory(table: weakref.WeakKeyDictionary[object, T], owner: object, make: Callable[[], T]) -> T:
    """This provider's entry of a per-process table; a fresh one for an owner that cannot be weakly keyed."""
    try:
        return table.setdefault(owner, make())
    except TypeError:
        return make()
