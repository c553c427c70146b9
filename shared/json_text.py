"""JSON text from outside (app settings, queue messages) parsed with a bound on its nesting.

Pure: no I/O, no side effects. `json.loads` recurses once per level of `[` and `{`, so a document nested a few
thousand deep escapes as RecursionError (or, near the interpreter's limit, takes the caller down with it) rather
than a parse error naming the input. `loads` counts the depth first, outside strings, and refuses a document
deeper than the caller's bound with a ValueError before `json.loads` sees it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["MAX_DEPTH", "TooDeep", "depth", "loads"]

# Deeper than any document of ours (a scale action is 3 levels, a setting 2) by far, and far below the
# interpreter's recursion limit.
MAX_DEPTH: Final = 32

# A JSON string (escapes included) or one bracket: brackets inside strings are not nesting.
_TOKEN: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_OPEN: Final = frozenset("[{")
_CLOSE: Final = frozenset("]}")


class TooDeep(ValueError):
    """A JSON document nested deeper than its reader allows."""


def depth(text: str) -> int:
    """The deepest nesting of arrays and objects in `text` (0 for a scalar); brackets in strings do not count."""
    if text.count("[") + text.count("{") == 0:
        return 0
    level = deepest = 0
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if token in _OPEN:
            level += 1
            deepest = max(deepest, level)
        elif token in _CLOSE:
            level -= 1
    return deepest


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads(text)`, refused with TooDeep when nested deeper than `max_depth`; JSONDecodeError as json's."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode(json.detect_encoding(text), "surrogatepass")  # as json.loads decodes bytes
    if text.count("[") + text.count("{") > max_depth:  # only then can it be too deep: most documents skip the scan
        found = depth(text)
        if found > max_depth:
            raise TooDeep(f"nested {found} levels deep; at most {max_depth}")
    return json.loads(text)
