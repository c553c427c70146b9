"""cluster-autoscaler's auto-discovery tags on a node group: whether it is this cluster's, and its limits.

Pure module: reading tags, no I/O and no side effects (callers log what they skip and why). Every backend's
discovery and the replay's simulated provider read the tags the same way, through here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

# cluster-autoscaler's auto-discovery tags (--node-group-auto-discovery=label:...).
ENABLED_TAG: Final = "cluster-autoscaler-enabled"
NAME_TAG: Final = "cluster-autoscaler-name"
MIN_TAG: Final = "min"
MAX_TAG: Final = "max"
# cluster-autoscaler's node-template tags: `<prefix><kind>_<encoded name>`, kind `label`, `taint` or `resources`.
TEMPLATE_TAG_PREFIX: Final = "k8s.io_cluster-autoscaler_node-template_"


def encode_tag_key(name: str) -> str:
    """CA's tag-key encoding of a label or taint key: a literal '_' is written '~2', then '/' is written '_'."""
    return name.replace("_", "~2").replace("/", "_")


def decode_tag_key(key: str) -> str:
    """CA's tag encoding: '_' stands for '/', and '~2' for a literal '_'."""
    return key.replace("_", "/").replace("~2", "_")


def template_tag(kind: str, name: str) -> str:
    """The node-template tag naming `name` of `kind` (`label`, `taint`, `resources`)."""
    return f"{TEMPLATE_TAG_PREFIX}{kind}_{encode_tag_key(name)}"


def tag(tags: Mapping[str, str], name: str) -> str | None:
    """The value of tag `name` (lower case); ARM tag names are case-insensitive, values are not."""
    return next((value for key, value in tags.items() if key.lower() == name), None)


def is_ours(tags: Mapping[str, str], cluster_name: str) -> bool:
    """Tagged `cluster-autoscaler-enabled=true` (any case) and `cluster-autoscaler-name=<cluster_name>`."""
    enabled = tag(tags, ENABLED_TAG)
    return enabled is not None and enabled.strip().lower() == "true" and tag(tags, NAME_TAG) == cluster_name


def limits(tags: Mapping[str, str]) -> tuple[int, int] | str:
    """The (min, max) tags, or why they are not a usable range (the group is then skipped, not fatal)."""
    values: dict[str, int] = {}
    for name in (MIN_TAG, MAX_TAG):
        raw = tag(tags, name)
        if raw is None:
            return f"tag {name!r} is missing (cluster-autoscaler needs min and max)"
        try:
            values[name] = int(raw.strip())
        except ValueError:
            return f"tag {name!r} is {raw!r}, not an integer"
    low, high = values[MIN_TAG], values[MAX_TAG]
    if low < 0 or low > high:
        return f"tags min={low} max={high} do not make a range 0 <= min <= max"
    return low, high


def usable_limits(label: str, tags: Mapping[str, str], *, warn: Callable[[str], None]) -> tuple[int, int] | None:
    """The (min, max) tags of the group named `label`, or None after telling `warn` why it is skipped."""
    found = limits(tags)
    if isinstance(found, str):
        warn(f"scale set {label} skipped: {found}")
        return None
    return found
