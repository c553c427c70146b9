"""Whether a group's instances are hibernated rather than plainly deallocated when they are stopped (pure).

A hibernated VM keeps its memory on its OS disk and resumes with it on start, so a standby node comes back with its
page cache, pulled images in memory and running kubelet rather than booting again. It is asked for only where
Azure allows it (`NodeGroup.hibernation_enabled`: a Flexible scale set created with
`additionalCapabilities.hibernationEnabled`, regular VMs) and where the operator wants it: the setting
STANDBY_HIBERNATE, overridden per group by the scale-set tag `autoscaler-standby-hibernate` (`true` or `false`).
The call and its fallback (a refusal deallocates plainly) are `shared.services.hibernation`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from shared.discovery_tags import tag
from shared.domain import NodeGroup

HIBERNATE_TAG: Final = "autoscaler-standby-hibernate"

_TRUE: Final = ("true", "1", "yes", "on")
_FALSE: Final = ("false", "0", "no", "off")


@dataclass(frozen=True, slots=True)
class HibernationChoice:
    """Whether to hibernate the group's instances on a deallocate, and why (for logs and the status)."""

    hibernate: bool
    why: str


def parse_hibernate(text: str) -> bool:
    """`true` or `false` (also 1/0, yes/no, on/off, any case), as the boolean settings read."""
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"must be true or false, got {text!r}")


def wants_hibernation(group: NodeGroup, *, setting: bool) -> bool:
    """The operator's wish for this group: its `autoscaler-standby-hibernate` tag (any case of the key) if set,
    else `setting` (STANDBY_HIBERNATE). A malformed tag raises ValueError naming the group and the tag."""
    value = tag(group.tags, HIBERNATE_TAG)
    if value is None:
        return setting
    try:
        return parse_hibernate(value)
    except ValueError as exc:
        raise ValueError(f"scale set {group.id}: tag {HIBERNATE_TAG}: {exc}") from exc


def hibernation_choice(group: NodeGroup, *, setting: bool) -> HibernationChoice:
    """Hibernate only when wanted and the group allows it; a malformed tag raises (see `wants_hibernation`)."""
    if not wants_hibernation(group, setting=setting):
        return HibernationChoice(False, "hibernation not asked for")
    if not group.hibernation_enabled:
        return HibernationChoice(False, "asked for, but the scale set cannot hibernate (a Flexible set of regular "
                                        "VMs created with additionalCapabilities.hibernationEnabled can)")
    return HibernationChoice(True, "hibernated: the set is hibernation-enabled")
