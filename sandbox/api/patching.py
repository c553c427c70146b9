"""The three PATCH flavours the Kubernetes API accepts from the Python client.

The client sends `application/json-patch+json` for a list body and
`application/strategic-merge-patch+json` for a dict body (kubernetes/client/rest.py).
Merge patch is RFC 7386; strategic merge is treated as merge patch with lists
replaced wholesale, which is exact for fields without a patch strategy such as
node `spec.taints`; JSON patch is RFC 6902 including `test`.
"""

from __future__ import annotations

import copy
from typing import Any

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class PatchError(ValueError):
    """The patch document is malformed (400) or cannot be applied (422)."""

    def __init__(self, message: str, *, unprocessable: bool = False) -> None:
        super().__init__(message)
        self.unprocessable = unprocessable


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}: must start with '/'")
    return [_unescape(token) for token in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_insert: bool) -> int:
    if for_insert and token == "-":
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}", unprocessable=True)
    index = int(token)
    limit = len(container) if for_insert else len(container) - 1
    if index > limit:
        raise PatchError(f"array index {index} out of bounds", unprocessable=True)
    return index


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    current = doc
    for token in tokens[:-1]:
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token, for_insert=False)]
        else:
            raise PatchError(f"path {path!r} does not exist", unprocessable=True)
    return current


def _get(doc: Any, path: str) -> Any:
    current = doc
    for token in _pointer(path):
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token, for_insert=False)]
        else:
            raise PatchError(f"path {path!r} does not exist", unprocessable=True)
    return current


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], for_insert=True), value)
    else:
        raise PatchError(f"cannot add at {path!r}", unprocessable=True)
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document", unprocessable=True)
    parent = _parent(doc, tokens, path)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise PatchError(f"path {path!r} does not exist", unprocessable=True)
        return doc, parent.pop(tokens[-1])
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, tokens[-1], for_insert=False))
    raise PatchError(f"path {path!r} does not exist", unprocessable=True)


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 on a copy of `target`; any failing operation (including `test`) leaves it untouched."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for number, operation in enumerate(operations):
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise PatchError(f"operation {number} needs 'op' and 'path'")
        op, path = operation["op"], operation["path"]
        if not isinstance(path, str):
            raise PatchError(f"operation {number}: path must be a string")
        if op in ("add", "replace", "test") and "value" not in operation:
            raise PatchError(f"operation {number} ({op}) needs 'value'")
        if op == "add":
            doc = _add(doc, path, copy.deepcopy(operation["value"]))
        elif op == "remove":
            doc, _ = _remove(doc, path)
        elif op == "replace":
            _get(doc, path)  # replace requires the target to exist
            doc, _ = _remove(doc, path) if _pointer(path) else (doc, None)
            doc = _add(doc, path, copy.deepcopy(operation["value"]))
        elif op in ("move", "copy"):
            source = operation.get("from")
            if not isinstance(source, str):
                raise PatchError(f"operation {number} ({op}) needs 'from'")
            if op == "move":
                doc, value = _remove(doc, source)
            else:
                value = copy.deepcopy(_get(doc, source))
            doc = _add(doc, path, value)
        elif op == "test":
            if _get(doc, path) != operation["value"]:
                raise PatchError(f"testing value {path} failed: test failed", unprocessable=True)
        else:
            raise PatchError(f"operation {number}: unknown op {op!r}")
    return doc


def apply_patch(content_type: str, target: dict[str, Any], patch: Any) -> dict[str, Any]:
    """Dispatch on the request's Content-Type (parameters such as charset are ignored)."""
    media = content_type.split(";")[0].strip().lower()
    if media == JSON_PATCH:
        result = json_patch(target, patch)
    elif media in (MERGE_PATCH, STRATEGIC_MERGE_PATCH):
        if not isinstance(patch, dict):
            raise PatchError(f"a {media} document must be a JSON object")
        result = merge_patch(target, patch)
    else:
        raise PatchError(f"unsupported patch content type {content_type!r}")
    if not isinstance(result, dict):
        raise PatchError("the patched object is not a JSON object", unprocessable=True)
    return result
