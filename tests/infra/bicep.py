"""Reading infra/*.bicep without a Bicep compiler: pycep's parse tree, plus a small evaluator.

pycep turns a Bicep file into JSON-like dicts. Identifiers and string literals both come out as plain
strings, so `evaluate` treats a string as a reference when the scope knows the name and as a literal
otherwise, and expands `${...}` in literals. It knows only the functions and operators our templates use;
anything else raises `Unsupported`, so a template change the evaluator cannot follow fails loudly
instead of being skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pycep import BicepParser

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"


class Unsupported(NotImplementedError):
    """The evaluator met a construct it does not implement."""


@cache
def parse(relative: str) -> dict[str, Any]:
    """The pycep tree of infra/<relative>."""
    return BicepParser().parse(file_path=INFRA / relative)


def bicep_files() -> list[str]:
    return sorted(str(path.relative_to(INFRA)) for path in INFRA.rglob("*.bicep"))


def text(relative: str) -> str:
    return (INFRA / relative).read_text()


def target_scope(relative: str) -> str:
    return parse(relative).get("globals", {}).get("scope", {}).get("value", "resourceGroup")


def resources(relative: str, type_: str | None = None) -> dict[str, dict[str, Any]]:
    """Symbol -> resource of one file, optionally only those of one type (without API version)."""
    found = parse(relative).get("resources", {})
    return {name: res for name, res in found.items() if type_ is None or res["type"] == type_}


def resource_body(res: dict[str, Any]) -> dict[str, Any]:
    """A resource's properties block; conditional (`if`) resources nest it one level deeper."""
    config = res["config"]
    return config["config"] if "condition" in config and "config" in config else config


def declaration_line(relative: str, keyword: str, symbol: str) -> int:
    """0-based line of `<keyword> <symbol> ...` in the raw text."""
    lines = text(relative).splitlines()
    for index, line in enumerate(lines):
        if re.match(rf"^{keyword}\s+{re.escape(symbol)}\b", line):
            return index
    raise LookupError(f"{keyword} {symbol} not found in {relative}")


def comment_above(relative: str, keyword: str, symbol: str) -> str:
    """The `//` comment lines right above a declaration (decorators skipped), joined; empty if none."""
    lines = text(relative).splitlines()
    index = declaration_line(relative, keyword, symbol) - 1
    while index >= 0 and lines[index].lstrip().startswith("@"):
        index -= 1
    comment: list[str] = []
    while index >= 0 and lines[index].lstrip().startswith("//"):
        comment.insert(0, lines[index].lstrip()[2:].strip())
        index -= 1
    return " ".join(comment)


# --- evaluation -------------------------------------------------------------------------------------------


class Scope(Mapping[str, Any]):
    """Names visible in one file: fixed values, plus lazily evaluated ones (variables, module outputs)."""

    def __init__(self, values: Mapping[str, Any], lazy: Mapping[str, Callable[[], Any]] | None = None) -> None:
        self._values = dict(values)
        self._lazy = dict(lazy or {})

    def __getitem__(self, name: str) -> Any:
        if name not in self._values:
            if name not in self._lazy:
                raise KeyError(name)
            self._values[name] = self._lazy.pop(name)()
        return self._values[name]

    def __contains__(self, name: object) -> bool:
        return name in self._values or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        return iter({*self._values, *self._lazy})

    def __len__(self) -> int:
        return len({*self._values, *self._lazy})


class Lazy(Mapping[str, Any]):
    """A mapping whose values are computed on first access (module outputs, module params)."""

    def __init__(self, thunks: Mapping[str, Callable[[], Any]]) -> None:
        self._thunks = dict(thunks)
        self._done: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._done:
            self._done[name] = self._thunks[name]()
        return self._done[name]

    def __contains__(self, name: object) -> bool:  # Mapping's default would compute the value
        return name in self._thunks

    def __iter__(self) -> Iterator[str]:
        return iter(self._thunks)

    def __len__(self) -> int:
        return len(self._thunks)


_INTERPOLATION = re.compile(r"\$\{([^{}]+)\}")


def _interpolate(literal: str, scope: Mapping[str, Any]) -> str:
    def replace(match: re.Match[str]) -> str:
        expression = match.group(1).strip()
        if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", expression):
            raise Unsupported(f"interpolation ${{{expression}}}")
        head, *path = expression.split(".")
        value = scope[head]
        for part in path:
            value = value[part]
        return str(value)

    return _INTERPOLATION.sub(replace, literal)


def _access(base: Any, node: Any, scope: Mapping[str, Any]) -> Any:
    if isinstance(node, str):
        return base[node]
    operator = node.get("operator", {})
    if operator.get("type") == "property_accessor":
        operands = operator["operands"]
        return _access(_access(base, operands["operand_1"], scope), operands["operand_2"], scope)
    raise Unsupported(f"accessor {node!r}")


def _args(parameters: Mapping[str, Any], scope: Mapping[str, Any]) -> list[Any]:
    return [evaluate(value, scope) for value in parameters.values() if value is not None]


_FUNCTIONS: dict[str, Callable[[list[Any], Mapping[str, Any]], Any]] = {
    "empty": lambda a, s: len(a[0]) == 0,
    "split": lambda a, s: a[0].split(a[1]),
    "replace": lambda a, s: a[0].replace(a[1], a[2]),
    "join": lambda a, s: a[1].join(a[0]),
    "union": lambda a, s: {key: value for item in a for key, value in item.items()},
    "subscription": lambda a, s: s["subscription()"],
}


def evaluate(node: Any, scope: Mapping[str, Any]) -> Any:
    """The value of a pycep expression in `scope`."""
    if node is None or isinstance(node, (bool, int, float)):
        return node
    if isinstance(node, str):
        return scope[node] if node in scope else _interpolate(node, scope)
    if isinstance(node, list):
        return [evaluate(item, scope) for item in node]
    if set(node) == {"function"}:
        function = node["function"]
        if function["type"] not in _FUNCTIONS:
            raise Unsupported(f"function {function['type']}")
        return _FUNCTIONS[function["type"]](_args(function["parameters"], scope), scope)
    if set(node) == {"operator"}:
        operator = node["operator"]
        kind, operands = operator["type"], operator["operands"]
        if kind == "conditional":
            branch = "true_value" if evaluate(operands["condition"], scope) else "false_value"
            return evaluate(operands[branch], scope)
        if kind == "equals":
            return evaluate(operands["operand_1"], scope) == evaluate(operands["operand_2"], scope)
        if kind == "not":
            return not evaluate(operands["bool_value"], scope)
        if kind == "or":  # Bicep's `||`; pycep binds it tighter than `==`, so the templates parenthesise
            return bool(evaluate(operands["operand_1"], scope)) or bool(evaluate(operands["operand_2"], scope))
        if kind == "property_accessor":
            return _access(evaluate(operands["operand_1"], scope), operands["operand_2"], scope)
        if kind == "index_accessor":  # array[index]
            return evaluate(operands["operand_1"], scope)[evaluate(operands["operand_2"], scope)]
        raise Unsupported(f"operator {kind}")
    return {key: evaluate(value, scope) for key, value in node.items()}


def file_scope(
    relative: str,
    params: Mapping[str, Any],
    resource_values: Mapping[str, Any],
    modules: Mapping[str, Any] | None = None,
    subscription: Mapping[str, Any] | None = None,
) -> Scope:
    """Names of one file: its parameters (defaults overridden by `params`), variables, resources and modules."""
    tree = parse(relative)
    values: dict[str, Any] = {}
    lazy: dict[str, Callable[[], Any]] = {}
    for name, param in tree.get("parameters", {}).items():
        if name in params:
            lazy[name] = lambda name=name: params[name]  # params may be Lazy: read only when used
        elif param.get("default") is not None:
            values[name] = param["default"]
    values.update(resource_values)
    values.update(modules or {})
    if subscription is not None:
        values["subscription()"] = subscription
    scope = Scope(values, lazy)
    scope._lazy.update({
        name: (lambda value=var["value"]: evaluate(value, scope)) for name, var in tree.get("variables", {}).items()
    })
    return scope


def module_outputs(relative: str, scope: Scope) -> Lazy:
    """The outputs of a module file, evaluated on access in `scope` (one of the module file's own)."""
    outputs = parse(relative).get("outputs", {})
    return Lazy({name: (lambda value=out["value"]: evaluate(value, scope)) for name, out in outputs.items()})
