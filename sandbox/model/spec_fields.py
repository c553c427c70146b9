"""Field checkers for scenario documents: each names the JSON path and what is wrong, and nothing else.

Shared by `sandbox.model.scenario` and the modules it delegates sections to (`sandbox.model.spot_spec`), which cannot
import the scenario parser (it imports them). A `FieldError` carries the path and the problem; the scenario
parser turns it into a `ScenarioError` with the file's name.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sandbox.model.units import parse_duration


class FieldError(Exception):
    """An invalid field: the JSON path (`$.node_groups[1].priority`) and the problem.

    Not a ValueError: the parsers catch ValueError from the unit parsers they call, and must not turn a
    field's own error into another message."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def typename(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def obj(value: Any, path: str, allowed: Collection[str], required: Collection[str] = frozenset()) -> dict[str, Any]:
    """An object with only `allowed` keys and every `required` one."""
    if not isinstance(value, dict):
        raise FieldError(path, f"must be an object, got {typename(value)}")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise FieldError(f"{path}.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
    missing = sorted(set(required) - set(value))
    if missing:
        raise FieldError(f"{path}.{missing[0]}", "required field is missing")
    return value


def whole(value: Any, path: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(path, f"must be a whole number, got {typename(value)}")
    if value < minimum:
        raise FieldError(path, f"must be at least {minimum}, got {value}")
    return value


def duration(value: Any, path: str) -> float:
    """`"90s"`, `"1h30m"` or a number of seconds, as seconds."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise FieldError(path, f"must be a duration such as '90s' or a number of seconds, got {typename(value)}")
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise FieldError(path, str(exc)) from None


def text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise FieldError(path, f"must be a non-empty string, got {typename(value)}")
    return value


def choice(value: Any, path: str, allowed: Sequence[str], what: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        shown = repr(value) if isinstance(value, str) else typename(value)
        raise FieldError(path, f"{shown} is not {what} (allowed: {', '.join(allowed)})")
    return value


def listed(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise FieldError(path, f"must be a list, got {typename(value)}")
    return value
