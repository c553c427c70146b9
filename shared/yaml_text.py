"""YAML text in and out through libyaml's C loader and dumper where PyYAML was built with it.

Pure: no I/O, no side effects. The pure-Python classes are the fallback; both read and write the same
documents (the status ConfigMap's text compared equal). Measured on a 3-group status document: dump
1.7 ms in Python, 0.5 ms in C; load 3.2 ms and 0.5 ms. The status ConfigMap is written every poll.

`block_dump` writes what `safe_dump(..., sort_keys=False, default_flow_style=False, width=BLOCK_WIDTH)` writes,
byte for byte, for the plain nested dicts, lists and scalars of a status document, several times faster
(PyYAML's representer is Python even with libyaml's emitter): a 2.9 KB alibaba2023 replay status document
took 1.3-1.8 ms through safe_dump and 0.19-0.23 ms here (timeit on a shared machine). Whatever it is not
sure of, it hands to PyYAML: a string it cannot classify, that one string (and
uses it only when it comes back on one line); anything else (a repeated or nested-list collection, a key that
is not a plain word, a type that is not exactly dict, list, str, int, float, bool or None), the whole document.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

YAMLError = yaml.YAMLError

BLOCK_WIDTH = 1_000_000  # block_dump's line width: wide enough that PyYAML never folds a line

# Strings PyYAML writes plain, unquoted: a letter or underscore, then letters, digits and `_ . - /` (no indicator
# character, no space, nothing a YAML 1.1 resolver reads as a number, date or merge key), except the words it
# reads as booleans or null.
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*", re.ASCII)
_NOT_PLAIN = frozenset(
    w for word in ("yes", "no", "true", "false", "on", "off", "null") for w in (word, word.capitalize(), word.upper())
)
# RFC 3339 UTC times resolve as timestamps, so PyYAML single-quotes them; Go's time.String() form does not
# resolve (its zone is `+0000 UTC`) and stays plain.
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?Z", re.ASCII)
_GO_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{9} \+0000 UTC", re.ASCII)
_LONGEST_FAST_STRING = 1_000  # beyond this, PyYAML decides (a key this long is no simple key)
_LONGEST_SIMPLE_KEY = 127  # PyYAML writes longer keys as `? key`


def safe_load(text: str | bytes) -> Any:
    """yaml.safe_load, through libyaml when available: plain data only, never arbitrary objects."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader (CSafeLoader or SafeLoader)


def safe_dump(data: Any, **options: Any) -> str:
    """yaml.safe_dump to a string, through libyaml when available."""
    text: str = yaml.dump(data, Dumper=_DUMPER, **options)
    return text


class _Whole(Exception):
    """block_dump met something it leaves to PyYAML for the whole document."""


def block_dump(data: Any) -> str:
    """safe_dump(data, sort_keys=False, default_flow_style=False, width=BLOCK_WIDTH), the same text, faster."""
    if type(data) is dict and data:
        out: list[str] = []
        try:
            _Emitter(out).mapping(data, 0)
        except _Whole:
            pass
        else:
            return "".join(out)
    return safe_dump(data, sort_keys=False, default_flow_style=False, width=BLOCK_WIDTH)


class _Emitter:
    """PyYAML's block style: mappings indented by 2, a mapping's list items at the key's own indent (`- `)."""

    def __init__(self, out: list[str]) -> None:
        self.out = out
        self.seen: set[int] = set()  # collections already written: PyYAML would write a repeat as an alias
        self.keys: set[str] = set()  # keys found plain (the same few dozen recur through the document)
        self.strings: dict[tuple[type, Any], str] = {}  # this document's strings and odd floats, as written

    def _once(self, collection: dict[Any, Any] | list[Any]) -> None:
        key = id(collection)
        if key in self.seen:
            raise _Whole
        self.seen.add(key)

    def mapping(self, data: dict[Any, Any], indent: int, *, first_prefix: str | None = None) -> None:
        self._once(data)
        pad = " " * indent
        prefix = pad if first_prefix is None else first_prefix
        keys = self.keys
        for key, value in data.items():
            if key not in keys:
                if type(key) is not str or len(key) > _LONGEST_SIMPLE_KEY or not _plain(key):
                    raise _Whole
                keys.add(key)
            self.out.append(f"{prefix}{key}:")
            prefix = pad
            kind = type(value)
            if kind is dict:
                if value:
                    self.out.append("\n")
                    self.mapping(value, indent + 2)
                else:
                    self._once(value)
                    self.out.append(" {}\n")
            elif kind is list:
                if value:
                    self.out.append("\n")
                    self.sequence(value, indent)
                else:
                    self._once(value)
                    self.out.append(" []\n")
            else:
                self.out.append(f" {self.scalar(value)}\n")

    def sequence(self, data: list[Any], indent: int) -> None:
        self._once(data)
        dash = " " * indent + "- "
        for item in data:
            kind = type(item)
            if kind is dict:
                if item:
                    self.mapping(item, indent + 2, first_prefix=dash)
                else:
                    self._once(item)
                    self.out.append(f"{dash}{{}}\n")
            elif kind is list:
                raise _Whole  # a list in a list (`- - a`): none in the status document
            else:
                self.out.append(f"{dash}{self.scalar(item)}\n")

    def scalar(self, value: Any) -> str:
        kind = type(value)
        if kind is str:
            text = self.strings.get((str, value))
            if text is None:
                if _plain(value) or _GO_TIME.fullmatch(value):
                    text = value
                elif _TIMESTAMP.fullmatch(value):
                    text = f"'{value}'"
                else:
                    return self._pyyaml(value)
                self.strings[(str, value)] = text
            return text
        if kind is bool:
            return "true" if value else "false"
        if kind is int:
            return str(value)
        if value is None:
            return "null"
        if kind is float:
            text = repr(value)
            if math.isfinite(value) and "." in text and "e" not in text:
                return text
            return self._pyyaml(value)  # .nan, .inf, 1.0e+20: PyYAML's spelling
        raise _Whole  # a date, bytes, a set or a subclass: PyYAML's representers decide

    def _pyyaml(self, value: str | float) -> str:
        """The scalar as PyYAML writes it as a mapping's value, when that is one line (else the whole document)."""
        key = (type(value), value)  # not the value alone: the string "1e+20" is quoted, the float is not
        text = self.strings.get(key)
        if text is None:
            if type(value) is str and len(value) > _LONGEST_FAST_STRING:
                raise _Whole
            dumped = safe_dump({"k": value}, sort_keys=False, default_flow_style=False, width=BLOCK_WIDTH)
            text = dumped[3:-1]
            if not dumped.startswith("k: ") or not dumped.endswith("\n") or "\n" in text:
                raise _Whole  # a quoted string over several lines: its breaks depend on the indent
            self.strings[key] = text
        return text


def _plain(text: str) -> bool:
    return _PLAIN.fullmatch(text) is not None and text not in _NOT_PLAIN
