"""Label selectors written as text, as `kubectl -l` and the API's `labelSelector` parameter take them.

Pure module, no side effects. `a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`,
`a notin (x)`, comma-joined (all must hold), parsed as the API server does.
Used for settings such as BATCH_POD_SELECTOR; the sandbox's API server parses
its `labelSelector` parameter with the same grammar.
"""

from __future__ import annotations

import re

from shared.domain import LabelSelector, SelectorRequirement


class SelectorError(ValueError):
    """Text that is not a label selector; the message names the bad part."""


_SET = re.compile(r"^\s*(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s+\((?P<values>[^()]*)\)\s*$")
_EQ = re.compile(r"^\s*(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)\s*$")
_EXISTS = re.compile(r"^\s*(?P<neg>!?)\s*(?P<key>[^\s!=(),]+)\s*$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses (`a in (x,y),b` is two requirements)."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced parentheses in {text!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise SelectorError(f"unbalanced parentheses in {text!r}")
    parts.append("".join(current))
    return parts


def parse_requirements(text: str | None) -> list[tuple[str, str, tuple[str, ...]]]:
    """(key, op, values) per requirement; op is one of `=`, `!=`, `exists`, `!exists`, `in`, `notin`.

    Empty text is the empty selector (matches everything).
    """
    if not text or not text.strip():
        return []
    requirements: list[tuple[str, str, tuple[str, ...]]] = []
    for part in _split_top_level(text):
        if not part.strip():
            raise SelectorError(f"empty requirement in label selector {text!r}")
        if match := _SET.match(part):
            values = tuple(v.strip() for v in match["values"].split(",") if v.strip())
            if not values:
                raise SelectorError(f"{match['op']} needs at least one value in {part.strip()!r}")
            requirements.append((match["key"], match["op"], values))
        elif match := _EQ.match(part):
            requirements.append((match["key"], "!=" if match["op"] == "!=" else "=", (match["value"],)))
        elif match := _EXISTS.match(part):
            requirements.append((match["key"], "!exists" if match["neg"] else "exists", ()))
        else:
            raise SelectorError(f"unable to parse requirement {part.strip()!r}")
    return requirements


_OPERATORS = {"!=": "NotIn", "exists": "Exists", "!exists": "DoesNotExist", "in": "In", "notin": "NotIn"}


def parse_label_selector(text: str | None) -> LabelSelector:
    """The selector as the domain's LabelSelector (`a!=b` is `a NotIn (b)`: both hold when `a` is absent)."""
    labels: list[tuple[str, str]] = []
    expressions: list[SelectorRequirement] = []
    for key, op, values in parse_requirements(text):
        if op == "=":
            labels.append((key, values[0]))
        else:
            expressions.append(SelectorRequirement(key, _OPERATORS[op], values))
    return LabelSelector(tuple(labels), tuple(expressions))
