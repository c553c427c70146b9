"""Stopping instances into a group's standby: hibernated where asked for and allowed, else plainly deallocated.

The choice is `shared.engine.hibernation`'s (STANDBY_HIBERNATE, the tag `autoscaler-standby-hibernate`, the set's
`hibernation_enabled`). A set that refuses the hibernation (ARM answers 400 before anything changes: an image or
size that cannot hibernate, a set discovered wrongly) is deallocated plainly in the same call, with a warning, so a
removal or a refill never stops half-way over it. Throttling and server faults are not refusals: they go to the
caller, which retries the step as for any deallocate.
"""

from __future__ import annotations

import logging

from shared.domain import NodeGroup
from shared.engine.hibernation import hibernation_choice
from shared.ports import ComputeError, NodeGroupProvider, Operation
from shared.settings import Settings

log = logging.getLogger(__name__)

THROTTLED = "TooManyRequests"


def hibernates(settings: Settings, group: NodeGroup) -> bool:
    """Whether the group's stopped instances are to be hibernated; a malformed tag counts as no (and is logged)."""
    try:
        return hibernation_choice(group, setting=settings.standby_hibernate).hibernate
    except ValueError as exc:
        log.warning("%s; its instances are deallocated without hibernation", exc)
        return False


def begin_stop_instances(provider: NodeGroupProvider, settings: Settings, group: NodeGroup,
                         instance_ids: list[str]) -> Operation:
    """Deallocate `instance_ids` of `group`, hibernating them where `hibernates` says so (see the module)."""
    if not hibernates(settings, group):
        return provider.begin_deallocate_instances(group, instance_ids)
    try:
        return provider.begin_deallocate_instances(group, instance_ids, hibernate=True)
    except ComputeError as exc:
        if exc.transient or exc.code == THROTTLED:
            raise
        log.warning("hibernating instance(s) %s of %s was refused (%s); deallocating them without hibernation",
                    ", ".join(instance_ids), group.id, exc)
        return provider.begin_deallocate_instances(group, instance_ids)
