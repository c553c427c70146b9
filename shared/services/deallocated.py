"""The cap on deallocated instances (SCALE_DOWN_MODE=deallocate), applied by the executor.

Where and why here: right after a deallocation's state update (the group row lists the new
stopped instances), in the same step. The step's message is only completed once this is done,
so a crash anywhere is repeated by its redelivery, and each part is safe to repeat:

1. the group row already lists the new instances (an idempotent union);
2. a fresh ARM list says which stopped instances still exist and are not being deleted;
3. the ones beyond the cap, deallocated longest ago first, are deleted (one call);
4. the row forgets them (compare-and-swap), with any listed instance that is gone or deleting.

A crash between 3 and 4 leaves them listed; the redelivery sees them deleting and only forgets
them, so nothing is deleted twice. A delete ARM refuses is logged and tried again after the
group's next deallocation; the removal that triggered it has succeeded either way.

Warm standby (services.standby) shares the list: a group whose standby is short of its target has its idle
nodes deallocated whatever SCALE_DOWN_MODE says, and the cap is the larger of SCALE_DOWN_DEALLOCATED_MAX (with
SCALE_DOWN_MODE=deallocate; 0 otherwise) and the standby target, so the trim never deletes the standby.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import datetime

from shared.domain import NodeGroup
from shared.engine.deallocated import trim_deallocated
from shared.engine.scale_down import group_rules
from shared.options import scale_down_options
from shared.services.hibernation import delete_kept_nodes
from shared.ports import ClusterError, ComputeError, Ports
from shared.services.standby import get_standby_target, may_keep_standby, wants_more_standby
from shared.services.swap import StateConflict, update_group
from shared.settings import Settings

log = logging.getLogger(__name__)


def deallocated_max(settings: Settings, group: NodeGroup) -> int | None:
    """The group's cap: SCALE_DOWN_DEALLOCATED_MAX or its scale-set tag; None when the tag is malformed."""
    try:
        return group_rules(group, scale_down_options(settings)).deallocated_max
    except ValueError as exc:
        # The poll refuses to plan on such a tag; a removal already under way deallocates and trims nothing.
        log.warning("%s: keeping deallocated instances as they are", exc)
        return None


def removal_verb(settings: Settings, group: NodeGroup, *, ports: Ports | None = None, now: datetime | None = None,
                 nodes: Collection[str] = ()) -> str:
    """`delete`, or `deallocate`: with SCALE_DOWN_MODE=deallocate unless the group may keep none stopped (cap 0),
    and in any mode while the group's warm standby has room for the removal's `nodes` (`ports` and `now`
    given: the standby's reads); never for a spot group with eviction policy Delete."""
    if group.is_spot and group.eviction_policy.lower() != "deallocate":
        # A spot VM whose eviction policy is Delete is never deallocated and restarted: Azure would delete it
        # at its next eviction anyway, and a restart competes for spot capacity a new VM would get as well.
        return "delete"
    if settings.scale_down_mode == "deallocate" and deallocated_max(settings, group) != 0:
        return "deallocate"
    if ports is not None and now is not None and wants_more_standby(ports, settings, group, now=now, nodes=nodes):
        return "deallocate"
    return "delete"


def stopped_cap(ports: Ports, settings: Settings, group: NodeGroup, *, now: datetime) -> int | None:
    """How many stopped instances the group keeps: the larger of SCALE_DOWN_DEALLOCATED_MAX (with
    SCALE_DOWN_MODE=deallocate, else 0) and its standby target; None when a tag is malformed (trim nothing)."""
    kept = deallocated_max(settings, group) if settings.scale_down_mode == "deallocate" else 0
    if kept is None:
        return None
    if not may_keep_standby(settings, group):
        return kept
    try:
        target = get_standby_target(ports, settings, group, now=now)
    except ValueError as exc:
        log.warning("%s: keeping deallocated instances as they are", exc)
        return None
    return max(kept, target.count)


def enforce_deallocated_max(ports: Ports, settings: Settings, group_id: str, *,
                            now: datetime | None = None) -> tuple[str, ...]:
    """Delete the group's stopped instances beyond its cap (`stopped_cap`), oldest first; the ids asked to be
    deleted. `now` defaults to the ports' clock.

    Never fails the removal that called it: an ARM error is logged, and the next deallocation of the
    group trims again.
    """
    state = ports.state.get_group(group_id)
    if not state.stopped:
        return ()
    try:
        group = ports.provider.get_node_group(group_id)
        cap = stopped_cap(ports, settings, group, now=now or ports.clock.now()) if group is not None else None
        if group is None or cap is None or len(state.stopped) <= cap:
            return ()  # the usual case: no ARM list needed
        present = {i.instance_id for i in ports.provider.list_instances(group) if not i.deleting}
    except ComputeError as exc:
        log.warning("group %s: could not read its instances to apply SCALE_DOWN_DEALLOCATED_MAX (%s); tried again "
                    "after its next deallocation", group_id, exc)
        return ()
    trim = trim_deallocated(state, cap=cap, present=present)
    if trim.delete:
        log.info("group %s keeps at most %d deallocated instance(s): deleting %s, deallocated longest ago",
                 group_id, cap, ", ".join(trim.delete))
        try:
            ports.provider.begin_delete_instances(group, list(trim.delete))
        except ComputeError as exc:
            log.warning("group %s: deleting deallocated instance(s) %s failed (%s); tried again after its next "
                        "deallocation", group_id, ", ".join(trim.delete), exc)
            trim = type(trim)(delete=(), forget=trim.forget)
        else:
            _delete_kept_nodes(ports, settings, group, trim.delete)
    if not (trim.delete or trim.forget):
        return ()
    try:
        update_group(ports.state, group_id, trim.apply, what="forget trimmed instances")
    except StateConflict as exc:
        log.warning("%s; the next trim forgets the deleted instances", exc)
    return trim.delete


def _delete_kept_nodes(ports: Ports, settings: Settings, group: NodeGroup, instance_ids: tuple[str, ...]) -> None:
    """The kept Nodes of trimmed hibernated instances go with them (services.hibernation); a failure is logged: the
    cloud node lifecycle controller removes them later."""
    try:
        delete_kept_nodes(ports.cluster, ports.provider, group, instance_ids, node_mapping=settings.node_mapping)
    except (ClusterError, ComputeError) as exc:
        log.warning("group %s: deleting the kept node(s) of trimmed instance(s) %s failed (%s)", group.id,
                    ", ".join(instance_ids), exc)
