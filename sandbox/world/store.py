"""Kubernetes objects as the API server keeps them: by resource and (namespace, name), one revision counter.

Like etcd's revision, a single counter orders every change; an object's
`metadata.resourceVersion` is the revision of its last change and a list's is
the current revision. Objects are stored in their API shape (plain dicts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

Key = tuple[str, str]  # (namespace or "", name)


class ObjectStore:
    def __init__(self, resources: Iterable[str], on_change: Callable[[], None]) -> None:
        self._tables: dict[str, dict[Key, dict[str, Any]]] = {r: {} for r in resources}
        self._revision = 0
        self._on_change = on_change  # the world re-runs its controllers after any change

    @property
    def revision(self) -> int:
        return self._revision

    def table(self, resource: str) -> dict[Key, dict[str, Any]]:
        """The live mapping for `resource` (callers mutate objects only through touch/put/drop)."""
        return self._tables[resource]

    def touch(self, obj: dict[str, Any]) -> None:
        """Record that `obj` changed in place."""
        self._revision += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._revision)
        self._on_change()

    def put(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        self.touch(obj)
        table, key = self._tables[resource], (meta.get("namespace", ""), meta["name"])
        table.pop(key, None)  # to the end: a table's order is the order objects were last put
        table[key] = obj
        return obj

    def drop(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self._tables[resource].pop((namespace, name), None)
        if obj is not None:
            self._revision += 1
            self._on_change()
        return obj

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._tables[resource].get((namespace, name))

    def listed(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects in storage order (namespace, then name), optionally of one namespace."""
        return [obj for (ns, _), obj in sorted(self._tables[resource].items()) if namespace is None or ns == namespace]

    def drop_oldest(self, resource: str) -> None:
        """Forget the least recently put object (bounded tables such as events, whose objects are put once and
        rarely changed in place). Constant time: a scan for the lowest resourceVersion made a virtual node's
        thousands of provider events quadratic (measured in the replay)."""
        table = self._tables[resource]
        if table:
            del table[next(iter(table))]
