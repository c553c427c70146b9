"""Expanders: which node group grows when several could take the pending pods.

Pure module, no side effects. The strategies follow cluster-autoscaler's (CA's)
expanders, so `EXPANDER` means here what `--expander` means there:

- each strategy narrows the options to its best ones and keeps ties, so the next
  one in a chain (`priority,least-waste`) can break them;
- a chain stops as soon as one option is left;
- `random` always leaves one option, so nothing may follow it.

`price` needs each group's price per node-hour (`ClusterSnapshot.prices`, from the
provider's `list_prices`): CA's price expander divides the new nodes' price by the
"price" of the pods they take; we do the same with a fixed reference (below), so an
option is judged by what it costs per unit of requested work it places.

Where CA picks at random among the options left at the end of a chain, we pick
the lowest group id instead: plans are reproducible, and a user who wants CA's
spreading says so with `...,random`. `random` itself is seeded by the caller.
"""

from __future__ import annotations

import json
import random as _random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from shared import json_text
from shared.domain import NodeGroup, NodeTemplate, Pod, Resources

LEAST_WASTE = "least-waste"
MOST_PODS = "most-pods"
LEAST_NODES = "least-nodes"
PRIORITY = "priority"
RANDOM = "random"
PRICE = "price"

# CA's expanders we do not offer, with the reason given to a user who names one.
_UNSUPPORTED = {
    "grpc": "external gRPC expanders are not supported",
}

# The price expander's unit of placed work: one requested core, or 4 GiB of requested memory (the
# general-purpose D-series ratio on Azure), whichever the pods ask more of. Any fixed unit ranks
# options alike when they place the same pods; this one keeps memory-heavy pods from looking free.
_GIB = 1024**3
_MEMORY_PER_CORE = 4 * _GIB


class ExpanderError(ValueError):
    """EXPANDER or the priority expander's configuration is malformed; the message says how."""


@dataclass(frozen=True, slots=True)
class ExpansionOption:
    """Growing one group by `node_count` template nodes would place `pods`."""

    group: NodeGroup
    template: NodeTemplate
    node_count: int
    pods: tuple[Pod, ...]
    # One new node as the scoring counts it: normally the template's allocatable minus
    # the DaemonSet pods every new node runs, i.e. what the pending pods can use.
    capacity: Resources
    requested: Resources  # the total requests of `pods`
    # The group's price of one node for an hour (USD); None: not known, and `price` ranks the option last.
    price_per_hour: float | None = None

    @classmethod
    def build(
        cls,
        group: NodeGroup,
        template: NodeTemplate,
        node_count: int,
        pods: Iterable[Pod],
        *,
        capacity: Resources | None = None,
        requested: Resources | None = None,
        price_per_hour: float | None = None,
    ) -> ExpansionOption:
        """An option whose capacity defaults to the template's allocatable and requests to the pods' sum."""
        pods = tuple(pods)
        if requested is None:
            requested = sum((p.requests for p in pods), Resources())
        return cls(
            group, template, node_count, pods, template.allocatable if capacity is None else capacity, requested,
            price_per_hour,
        )


@dataclass(frozen=True, slots=True)
class Priorities:
    """The priority expander's rules, highest priority first."""

    rules: tuple[tuple[int, tuple[re.Pattern[str], ...]], ...] = ()

    def of(self, group: NodeGroup) -> int | None:
        """The highest priority with a pattern found in the scale set's name or the group id; None: no match.

        CA matches against its group id, which on Azure is the scale set name; our ids are
        `<resource group>/<name>`, so a pattern written for CA (`^spot-.*`) keeps working and
        one naming the resource group works too. Like CA's, patterns are searched, not anchored.
        """
        for priority, patterns in self.rules:
            if any(p.search(group.name) or p.search(group.id) for p in patterns):
                return priority
        return None

    def __bool__(self) -> bool:
        return bool(self.rules)


def parse_priorities(config: str | Mapping[Any, Any] | None) -> Priorities:
    """The priority expander's configuration: `{priority: [regex, ...]}`.

    Accepts the mapping the caller parsed from the CA ConfigMap
    `kube-system/cluster-autoscaler-priority-expander` (key `priorities`, YAML there), or the
    same mapping as JSON text (the `PRIORITY_EXPANDER_CONFIG` app setting; keys are strings in
    JSON). Empty text or None means no rules. Raises ExpanderError naming the bad entry.
    """
    if config is None:
        return Priorities()
    if isinstance(config, str):
        if not config.strip():
            return Priorities()
        try:
            config = json_text.loads(config)
        except json_text.TooDeep as exc:
            raise ExpanderError(f"not a priority configuration: {exc}") from None
        except json.JSONDecodeError as exc:
            raise ExpanderError(f"not valid JSON: {exc}") from None
    if not isinstance(config, Mapping):
        raise ExpanderError(
            "must be a JSON object that must map priorities to lists of regular expressions, "
            f'e.g. {{"50": ["spot-.*"], "10": [".*"]}}, got {type(config).__name__}'
        )
    merged: dict[int, list[re.Pattern[str]]] = {}
    for key, patterns in config.items():
        priority = _priority(key)
        if isinstance(patterns, str):
            patterns = [patterns]  # a lone pattern is unambiguous; CA's YAML would reject it
        if not isinstance(patterns, (list, tuple)) or not all(isinstance(p, str) for p in patterns):
            raise ExpanderError(f"priority {priority}: expected a list of regular expressions, got {patterns!r}")
        for pattern in patterns:
            try:
                merged.setdefault(priority, []).append(re.compile(pattern))
            except re.error as exc:
                raise ExpanderError(f"priority {priority}: bad regular expression {pattern!r}: {exc}") from None
    return Priorities(tuple((p, tuple(merged[p])) for p in sorted(merged, reverse=True)))


def _priority(key: object) -> int:
    # bool is an int in Python; `true: [...]` in YAML is a mistake, not priority 1.
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str) and re.fullmatch(r"\s*[+-]?\d+\s*", key):
        return int(key)
    raise ExpanderError(f"priority {key!r} is not an integer")


@dataclass(frozen=True, slots=True)
class ExpanderContext:
    """What strategies beyond the options need: the priority rules and the random source."""

    priorities: Priorities = field(default_factory=Priorities)
    rng: _random.Random = field(default_factory=lambda: _random.Random(0))


Strategy = Callable[..., list[ExpansionOption]]  # (options, *, context: ExpanderContext) -> best options


def waste_score(option: ExpansionOption) -> Fraction:
    """CA's least-waste score: unused share of CPU plus unused share of memory on the new nodes.

    Exact fractions, so equal scores tie exactly as CA's do, without float noise.
    """
    return _unused_share(option.capacity.cpu_milli, option.requested.cpu_milli, option.node_count) + _unused_share(
        option.capacity.memory_bytes, option.requested.memory_bytes, option.node_count
    )


def _unused_share(per_node: int, requested: int, nodes: int) -> Fraction:
    available = per_node * nodes
    if available <= 0:
        return Fraction(0)  # nothing of this resource is offered, so none of it is wasted
    return Fraction(available - requested, available)


def least_waste(options: Sequence[ExpansionOption], *, context: ExpanderContext) -> list[ExpansionOption]:
    return _best(options, key=waste_score, lowest=True)


def most_pods(options: Sequence[ExpansionOption], *, context: ExpanderContext) -> list[ExpansionOption]:
    return _best(options, key=lambda o: len(o.pods), lowest=False)


def least_nodes(options: Sequence[ExpansionOption], *, context: ExpanderContext) -> list[ExpansionOption]:
    # CA skips options that add no node; they should not exist, and must not win.
    return _best([o for o in options if o.node_count > 0], key=lambda o: o.node_count, lowest=True)


def priority(options: Sequence[ExpansionOption], *, context: ExpanderContext) -> list[ExpansionOption]:
    """Options of the groups with the highest matching priority; groups matching no rule rank last.

    As in CA, when no group matches any rule every option stays. Unlike CA, which refuses
    to scale up while its ConfigMap is missing, an empty configuration also keeps every
    option, so the rest of the chain decides.
    """
    ranked = [(context.priorities.of(o.group), o) for o in options]
    matched = [(p, o) for p, o in ranked if p is not None]
    if not matched:
        return list(options)
    top = max(p for p, _ in matched)
    return [o for p, o in matched if p == top]


def price_score(option: ExpansionOption) -> Fraction | None:
    """Dollars per hour of the new nodes per unit of work they place (see `_MEMORY_PER_CORE`); None: no price.

    An option that places nothing scores as if it placed one unit, so it never wins on price alone.
    """
    if option.price_per_hour is None:
        return None
    units = max(
        Fraction(option.requested.cpu_milli, 1000), Fraction(option.requested.memory_bytes, _MEMORY_PER_CORE)
    )
    return Fraction(option.price_per_hour) * option.node_count / max(units, Fraction(1))


def price(options: Sequence[ExpansionOption], *, context: ExpanderContext) -> list[ExpansionOption]:
    """The options placing their pods for the least money; groups without a price rank last.

    When no option has a price, every option stays, so the rest of the chain decides (as `priority`
    does without rules): a prices outage degrades to the next expander, never to no scale-up.
    """
    priced = [(s, o) for o in options if (s := price_score(o)) is not None]
    if not priced:
        return list(options)
    best = min(s for s, _ in priced)
    return [o for s, o in priced if s == best]


def random(options: Sequence[ExpansionOption], *, context: ExpanderContext) -> list[ExpansionOption]:
    """One option, uniformly; sorted first so the seed alone decides, not the options' order."""
    if not options:
        return []
    return [context.rng.choice(sorted(options, key=lambda o: o.group.id))]


def _best(
    options: Sequence[ExpansionOption], *, key: Callable[[ExpansionOption], Any], lowest: bool
) -> list[ExpansionOption]:
    if not options:
        return []
    scores = [key(o) for o in options]
    best = min(scores) if lowest else max(scores)
    return [o for o, s in zip(options, scores) if s == best]


EXPANDERS: Mapping[str, Strategy] = {
    LEAST_WASTE: least_waste,
    MOST_PODS: most_pods,
    LEAST_NODES: least_nodes,
    PRIORITY: priority,
    PRICE: price,
    RANDOM: random,
}


def parse_expander_chain(text: str) -> tuple[str, ...]:
    """`least-waste`, `priority,least-waste`, ... -> the expander names in order.

    Raises ExpanderError naming an unknown, repeated or unreachable expander, as CA refuses
    the same flags at start-up.
    """
    names = tuple(part.strip().lower() for part in text.split(","))
    if not any(names):
        raise ExpanderError(f"name at least one expander ({', '.join(EXPANDERS)})")
    seen: list[str] = []
    for name in names:
        if not name:
            raise ExpanderError(f"empty expander name in {text!r}")
        if name in _UNSUPPORTED:
            raise ExpanderError(f"expander {name!r} is not supported: {_UNSUPPORTED[name]}")
        if name not in EXPANDERS:
            raise ExpanderError(f"unknown expander {name!r} (known: {', '.join(EXPANDERS)})")
        if name in seen:
            raise ExpanderError(f"expander {name!r} is named twice")
        if seen and seen[-1] == RANDOM:
            raise ExpanderError(f"expander {name!r} follows 'random', which always leaves one option: it would never run")
        seen.append(name)
    return tuple(seen)


def apply_chain(
    options: Sequence[ExpansionOption], *, chain: Sequence[str], context: ExpanderContext
) -> list[ExpansionOption]:
    """The options each expander of the chain keeps in turn; stops early when one is left, as CA does."""
    remaining = list(options)
    for name in chain:
        if len(remaining) <= 1:
            break
        remaining = EXPANDERS[name](remaining, context=context)
    return remaining


def choose(
    options: Sequence[ExpansionOption],
    *,
    chain: Sequence[str] = (LEAST_WASTE,),
    priorities: Priorities | str | Mapping[Any, Any] | None = None,
    rng: _random.Random | int | None = None,
) -> ExpansionOption | None:
    """The option to carry out: the chain's survivors, then the lowest group id; None when no options.

    `rng` is a `random.Random` or a seed (only `random` uses it; pass something that varies
    between polls, e.g. the poll time in seconds, to spread like CA does). `priorities` is a
    parsed `Priorities` or anything `parse_priorities` accepts.
    """
    if not options:
        return None
    if not isinstance(priorities, Priorities):
        priorities = parse_priorities(priorities)
    if not isinstance(rng, _random.Random):
        rng = _random.Random(rng if rng is not None else 0)
    survivors = apply_chain(options, chain=chain, context=ExpanderContext(priorities, rng))
    return min(survivors, key=lambda o: o.group.id, default=None)
