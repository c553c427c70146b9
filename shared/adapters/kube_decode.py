"""Typed decoding of Kubernetes list responses, straight from the response bytes (msgspec).

Pure: no I/O, no side effects. `KubernetesCluster` hands each page's bytes to `decode_page`,
which returns the page's items as small typed structs holding only the fields the converters
of `shared.adapters.kubernetes` read; everything else in the response (`managedFields`,
container images and environment, container statuses, node images) is skipped by the
decoder in C, never built as Python objects. Measured by `make bench` on the benchmark's
heavy responses: see docs/measurements.md ("Reading the cluster").

Why msgspec: of the decoders measured (json, orjson, msgspec into dicts, msgspec into structs)
only typed decoding skips what we do not read; orjson builds every dict as json does, only
faster. msgspec is maintained, pure C, and has no dependencies.

The structs answer `get(key, default)` as a dict does (`default` when the field was absent),
so one set of converters reads both these structs and plain JSON dicts (the sandbox's objects,
single reads). `get` of a field a struct does not declare raises AttributeError: a converter
reading a field the decoder skips is a bug the equivalence tests catch, never a silent default.

Leaves are typed `Any`, as `json.loads` would give them: the converters check their types and
report a malformed object, which the caller skips. Where the JSON shape itself is wrong (a
string where a pod spec belongs) the item fails to decode, and is reported and skipped the same way.
"""

from __future__ import annotations

from collections.abc import Container as Container_
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

__all__ = [
    "BudgetItem",
    "DaemonSetItem",
    "DecodedPage",
    "EventItem",
    "Malformed",
    "NodeItem",
    "PodItem",
    "Unchanged",
    "decode_page",
    "decoded_identity",
    "identity",
    "item_key",
]


class _Object(Struct, gc=False):
    """A JSON object of which we read a few fields; `get` as on a dict.

    gc=False: these hold no reference cycles, and a tick builds hundreds of thousands of them;
    the cyclic collector need not track them.
    """

    def get(self, key: str, default: Any = None) -> Any:
        value = getattr(self, key)  # an undeclared field raises: see the module docstring
        return default if value is UNSET else value


class ObjectMeta(_Object):
    name: Any = UNSET
    namespace: Any = UNSET
    uid: Any = UNSET
    resourceVersion: Any = UNSET
    generation: Any = UNSET
    creationTimestamp: Any = UNSET
    deletionTimestamp: Any = UNSET
    labels: Any = UNSET
    annotations: Any = UNSET
    ownerReferences: Any = UNSET


class Container(_Object):
    resources: Any = UNSET
    restartPolicy: Any = UNSET
    ports: Any = UNSET
    securityContext: Any = UNSET


class PodSpec(_Object):
    nodeName: Any = UNSET
    containers: list[Container] | None | UnsetType = UNSET
    initContainers: list[Container] | None | UnsetType = UNSET
    resources: Any = UNSET
    overhead: Any = UNSET
    nodeSelector: Any = UNSET
    affinity: Any = UNSET
    tolerations: Any = UNSET
    topologySpreadConstraints: Any = UNSET
    priority: Any = UNSET
    volumes: Any = UNSET
    hostNetwork: Any = UNSET
    hostPID: Any = UNSET
    hostIPC: Any = UNSET
    activeDeadlineSeconds: Any = UNSET
    terminationGracePeriodSeconds: Any = UNSET
    resourceClaims: Any = UNSET


class PodStatus(_Object):
    phase: Any = UNSET
    conditions: Any = UNSET
    startTime: Any = UNSET
    reason: Any = UNSET
    message: Any = UNSET


class PodItem(_Object):
    metadata: ObjectMeta | None | UnsetType = UNSET
    spec: PodSpec | None | UnsetType = UNSET
    status: PodStatus | None | UnsetType = UNSET


class NodeSpec(_Object):
    providerID: Any = UNSET
    taints: Any = UNSET
    unschedulable: Any = UNSET


class NodeStatus(_Object):
    allocatable: Any = UNSET
    conditions: Any = UNSET
    addresses: Any = UNSET


class NodeItem(_Object):
    metadata: ObjectMeta | None | UnsetType = UNSET
    spec: NodeSpec | None | UnsetType = UNSET
    status: NodeStatus | None | UnsetType = UNSET


class BudgetItem(_Object):
    # A PodDisruptionBudget's spec and status are small: read as JSON gives them.
    metadata: ObjectMeta | None | UnsetType = UNSET
    spec: Any = UNSET
    status: Any = UNSET


class PodTemplate(_Object):
    spec: PodSpec | None | UnsetType = UNSET


class DaemonSetSpec(_Object):
    template: PodTemplate | None | UnsetType = UNSET


class DaemonSetItem(_Object):
    metadata: ObjectMeta | None | UnsetType = UNSET
    spec: DaemonSetSpec | None | UnsetType = UNSET


class EventItem(_Object):
    metadata: ObjectMeta | None | UnsetType = UNSET
    lastTimestamp: Any = UNSET
    eventTime: Any = UNSET
    count: Any = UNSET


class _ListMeta(Struct, gc=False):
    # `continue` is a Python keyword: the field is renamed.
    continue_: Any = msgspec.field(default=None, name="continue")


class _Page(Struct, gc=False):
    metadata: _ListMeta | None = None
    items: list[Raw] | None = None


_T = TypeVar("_T", bound=_Object)


@dataclass(frozen=True, slots=True)
class Malformed:
    """An item whose shape is not that of its kind: its raw JSON and what is wrong, for the caller to report."""

    raw: Raw
    error: str


@dataclass(frozen=True, slots=True)
class Unchanged:
    """An item the caller already holds: the same uid and resourceVersion as before, so it was not decoded."""

    key: tuple[str, str]


@dataclass(frozen=True, slots=True)
class DecodedPage(Generic[_T]):
    """One list response: its items in order (decoded, malformed or unchanged) and its `continue` token."""

    items: tuple[_T | Malformed | Unchanged, ...]
    continue_token: str | None


class _KeyMeta(Struct, gc=False):
    uid: Any = None
    resourceVersion: Any = None


class _Key(Struct, gc=False):
    metadata: _KeyMeta | None = None


_RAW_PAGE = msgspec.json.Decoder(_Page)
_KEY = msgspec.json.Decoder(_Key)
_PAGE_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {}
_ITEM_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {}


def _typed_page(kind: type) -> msgspec.json.Decoder[Any]:
    decoder = _PAGE_DECODERS.get(kind)
    if decoder is None:
        page_type = msgspec.defstruct(f"{kind.__name__}List", [("metadata", _ListMeta | None, None),
                                                                 ("items", list[kind] | None, None)], gc=False)
        decoder = _PAGE_DECODERS[kind] = msgspec.json.Decoder(page_type)
        _ITEM_DECODERS[kind] = msgspec.json.Decoder(kind)
    return decoder


def decode_page(data: bytes, kind: type[_T], *, known: Container_[tuple[str, str]] | None = None) -> DecodedPage[_T]:
    """A list response's items as `kind`, and its continue token. ValueError when it is no JSON list response.

    Without `known`, the whole page is decoded in one call (the fastest way when nothing is known yet).
    With it, each item's uid and resourceVersion are read first and an item in `known` is not decoded
    (`Unchanged`): skipping an item's bytes costs a fraction of building it. Either way an item whose
    shape is wrong costs only itself (`Malformed` in its place).
    """
    decoder = _typed_page(kind)
    if known is None:
        try:
            page = decoder.decode(data)
            items: tuple[Any, ...] = tuple(page.items or ())
        except msgspec.ValidationError:
            page = _decode(_RAW_PAGE, data)
            items = tuple(_item(raw, kind) for raw in page.items or ())
        except msgspec.DecodeError as exc:
            raise ValueError(str(exc)) from None
    else:
        page = _decode(_RAW_PAGE, data)
        items = tuple(_item_unless_known(raw, kind, known) for raw in page.items or ())
    token = page.metadata.continue_ if page.metadata is not None else None
    if token is not None and not isinstance(token, str):
        raise ValueError(f"metadata.continue: not a string: {token!r}")
    return DecodedPage(items, token or None)


def _decode(decoder: msgspec.json.Decoder[Any], data: bytes | Raw) -> Any:
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(str(exc)) from None


def _item(raw: Raw, kind: type) -> Any:
    try:
        return _ITEM_DECODERS[kind].decode(raw)
    except msgspec.DecodeError as exc:
        return Malformed(raw, str(exc))


def _item_unless_known(raw: Raw, kind: type, known: Container_[tuple[str, str]]) -> Any:
    try:
        meta = _KEY.decode(raw).metadata
    except msgspec.DecodeError:
        meta = None  # decoded in full, which says what is wrong
    if meta is not None:
        key = _key(meta.uid, meta.resourceVersion)
        if key is not None and key in known:
            return Unchanged(key)
    return _item(raw, kind)


def _key(uid: Any, version: Any) -> tuple[str, str] | None:
    if isinstance(uid, str) and uid and isinstance(version, str) and version:
        return uid, version
    return None


def item_key(item: _Object) -> tuple[str, str] | None:
    """(uid, resourceVersion) of a decoded item, or None when it lacks either (then it is never reused)."""
    meta = item.get("metadata")
    return None if meta is None else _key(meta.uid, meta.resourceVersion)


class _IdentityMeta(Struct, gc=False):
    name: Any = None
    namespace: Any = None
    uid: Any = None


class _IdentitySpec(Struct, gc=False):
    nodeName: Any = None
    providerID: Any = None


class _Identity(Struct, gc=False):
    """What little of a malformed item may still be read: who it is and where it runs, each part on its own."""

    # Raw cannot be in a union: an absent part is an empty Raw.
    metadata: Raw = Raw(b"")
    spec: Raw = Raw(b"")


_IDENTITY = msgspec.json.Decoder(_Identity)
_IDENTITY_META = msgspec.json.Decoder(_IdentityMeta)
_IDENTITY_SPEC = msgspec.json.Decoder(_IdentitySpec)


def identity(raw: Raw) -> tuple[dict[str, Any], dict[str, Any]]:
    """A malformed item's name, namespace and uid, and its node (pods) or providerID (nodes), as far as they can be
    read; empty where not even that much can (the item, its metadata or its spec is no object)."""
    try:
        found = _IDENTITY.decode(raw)
    except msgspec.DecodeError:
        return {}, {}
    return (_fields(_IDENTITY_META, found.metadata, ("name", "namespace", "uid")),
            _fields(_IDENTITY_SPEC, found.spec, ("nodeName", "providerID")))


def decoded_identity(item: _Object) -> tuple[dict[str, Any], dict[str, Any]]:
    """`identity` of an item that decoded but did not convert: the same fields, from the struct."""
    return (_present(getattr(item, "metadata", None), ("name", "namespace", "uid")),
            _present(getattr(item, "spec", None), ("nodeName", "providerID")))


def _present(part: Any, names: tuple[str, ...]) -> dict[str, Any]:
    # A kind's struct may not declare a field (a pod's spec has no providerID, an Event no spec): absent alike.
    found = {name: getattr(part, name, None) for name in names}
    return {name: value for name, value in found.items() if value is not None and value is not UNSET}


def _fields(decoder: msgspec.json.Decoder[Any], raw: Raw, names: tuple[str, ...]) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        part = decoder.decode(raw)
    except msgspec.DecodeError:
        return {}
    return {name: getattr(part, name) for name in names if getattr(part, name) is not None}
