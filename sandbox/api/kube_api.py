"""The Kubernetes API double: `handle(world, request) -> Response`.

Covers what an autoscaler uses, shaped so the official `kubernetes` client works
unchanged: discovery, nodes (list/get/replace/patch/delete), pods (list, get,
create, replace/patch of their metadata, delete, eviction), events, config maps,
namespaces, policy/v1 PodDisruptionBudgets, and the autoscaling.x-k8s.io custom resources (CapacityBuffers
v1beta1 with their status and scale, ProvisioningRequests v1 with their status). Errors are metav1.Status bodies. The caller (the server)
advances the world and holds `world.lock` around the call.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox.api.patching import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, PatchError, apply_patch
from sandbox.api.wire import Request, Response, json_response
from sandbox.model.selectors import SelectorError, object_filter
from sandbox.world import World
from sandbox.world import capacity_buffers as buffers
from sandbox.world import provisioning_requests as provreqs
from sandbox.world.errors import KubeError
from sandbox.world.faults import Fault
from sandbox.world.identity import AKS
from sandbox.world.kobjects import KUBELET_VERSION, status_object

_KINDS = {
    "nodes": ("Node", "v1", False),
    "pods": ("Pod", "v1", True),
    "events": ("Event", "v1", True),
    "configmaps": ("ConfigMap", "v1", True),
    "namespaces": ("Namespace", "v1", False),
    "poddisruptionbudgets": ("PodDisruptionBudget", "policy/v1", True),
    "daemonsets": ("DaemonSet", "apps/v1", True),
    "podtemplates": ("PodTemplate", "v1", True),
    "capacitybuffers": ("CapacityBuffer", buffers.API_VERSION, True),
    "provisioningrequests": ("ProvisioningRequest", provreqs.API_VERSION, True),
}
# (resource, verb) pairs the double serves; anything else is 405 like an unsupported verb.
_VERBS = {
    "nodes": {"list", "get", "update", "patch", "delete"},
    "pods": {"list", "get", "create", "update", "patch", "delete", "evict"},
    "events": {"list", "get", "create", "delete"},
    "configmaps": {"list", "get", "create", "update", "patch", "delete"},
    "namespaces": {"list", "get"},
    "poddisruptionbudgets": {"list", "get"},
    "daemonsets": {"list", "get"},
    "podtemplates": {"list", "get", "create", "delete"},
    "capacitybuffers": {"list", "get", "create", "update", "patch", "delete"},
    "provisioningrequests": {"list", "get", "create", "update", "patch", "delete"},
}
# Subresources served besides pods/eviction: the CapacityBuffer CRD's status and scale, the ProvisioningRequest's status.
_SUBRESOURCES = {"capacitybuffers": ("status", "scale"), "provisioningrequests": ("status",)}
# The custom resources' API group, its versions as discovery lists them (preferred first).
_CUSTOM_GROUP = "autoscaling.x-k8s.io"
_CUSTOM_VERSIONS = {"v1": ("provisioningrequests",), "v1beta1": ("capacitybuffers",)}
_WRITE_VERBS = {"create", "update", "patch", "delete", "evict"}
_REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
    409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests",
    500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
}


@dataclass(frozen=True, slots=True)
class Route:
    group_version: str
    resource: str
    namespace: str | None
    name: str | None
    subresource: str | None
    verb: str


def status_response(error: KubeError, headers: dict[str, str] | None = None) -> Response:
    return json_response(error.code, status_object(error.code, error.reason, error.message, error.details), headers)


def _parse_path(path: str, method: str) -> Route | None:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group_version, rest = "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name, subresource = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
    if len(rest) > 3 or resource not in _KINDS:
        return None
    _, expected_gv, namespaced = _KINDS[resource]
    if expected_gv != group_version or (namespace is not None and not namespaced):
        return None
    if namespaced and name is not None and namespace is None:
        return None  # a namespaced object is only addressable inside its namespace
    if subresource not in (None, "eviction", *_SUBRESOURCES.get(resource, ())) or (
            subresource == "eviction" and resource != "pods"):
        return None
    if subresource == "eviction":
        verb = "evict" if method == "POST" else ""
    elif name is None:
        verb = {"GET": "list", "POST": "create"}.get(method, "")
        if verb == "create" and namespace is None:
            verb = ""
    else:
        verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, "")
    return Route(group_version, resource, namespace, name, subresource, verb)


def _operation_name(route: Route) -> str:
    label = {"list": "LIST", "get": "GET", "create": "CREATE", "update": "UPDATE", "patch": "PATCH", "delete": "DELETE"}
    if route.verb == "evict":
        return "POST eviction"
    return f"{label.get(route.verb, route.verb.upper())} {route.resource}"


def _authenticated(world: World, token: str | None) -> bool:
    """The kubeconfig's static user token (a ServiceAccount token, in a real cluster), or, as an Entra
    ID-enabled AKS cluster takes, an unexpired token from `world.identity` for the AKS server application."""
    if token is None:
        return False
    return token == world.token or world.identity.check(token, AKS).ok


def handle(world: World, request: Request) -> Response:
    """Serve one Kubernetes API request against the world (already advanced by the caller)."""
    with world.lock:
        if not _authenticated(world, request.bearer_token()):
            return status_response(KubeError(401, "Unauthorized", "Unauthorized"))
        if request.path in ("/version", "/version/"):
            return json_response(200, _version())
        if request.path.rstrip("/") in ("/api", "/apis", "/api/v1", "/apis/policy/v1", "/apis/apps/v1",
                                        *(f"/apis/{_CUSTOM_GROUP}/{v}" for v in _CUSTOM_VERSIONS)):
            return json_response(200, _discovery(request.path.rstrip("/"), request.header("host", "127.0.0.1")))
        route = _parse_path(request.path, request.method)
        if route is None:
            return status_response(KubeError(404, "NotFound", "the server could not find the requested resource"))
        if route.verb not in _VERBS[route.resource]:
            return status_response(
                KubeError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            )
        world.count_call("k8s", _operation_name(route), write=route.verb in _WRITE_VERBS)
        fault = world.take_fault("k8s", request.method, "eviction" if route.verb == "evict" else route.resource)
        if fault is not None:
            return _fault_response(fault)
        try:
            return _HANDLERS[route.verb](world, route, request)
        except KubeError as error:
            return status_response(error)


def _fault_response(fault: Fault) -> Response:
    reason = fault.code or _REASONS.get(fault.status, "InternalError")
    headers = {"Retry-After": _seconds_header(fault.retry_after)} if fault.retry_after is not None else None
    return status_response(KubeError(fault.status, reason, fault.message or f"injected fault: {reason}"), headers)


def _seconds_header(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


# ---------------------------------------------------------------------------- verbs


def _list(world: World, route: Route, request: Request) -> Response:
    if request.query.get("watch") in ("true", "1"):
        raise KubeError(405, "MethodNotAllowed", "watch is not supported by the sandbox; poll with list instead")
    try:
        accept = object_filter(request.query.get("labelSelector"), request.query.get("fieldSelector"), route.resource)
    except SelectorError as exc:
        raise KubeError(400, "BadRequest", str(exc)) from None
    items = world.k8s_list(route.resource, route.namespace, accept=accept)
    list_rv = world.resource_version
    token = request.query.get("continue")
    if token:
        after, list_rv = _decode_continue(token)
        items = [obj for obj in items if _key(obj) > after]
    metadata: dict[str, Any] = {"resourceVersion": list_rv}
    limit_text = request.query.get("limit")
    if limit_text:
        try:
            limit = int(limit_text)
        except ValueError:
            raise KubeError(400, "BadRequest", f"invalid limit {limit_text!r}") from None
        if limit > 0 and len(items) > limit:
            metadata["continue"] = _encode_continue(_key(items[limit - 1]), list_rv)
            metadata["remainingItemCount"] = len(items) - limit
            items = items[:limit]
    kind, group_version, _ = _KINDS[route.resource]
    return json_response(200, {"kind": f"{kind}List", "apiVersion": group_version, "metadata": metadata, "items": items})


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


def _encode_continue(after: tuple[str, str], list_rv: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": list_rv, "start": list(after)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[tuple[str, str], str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return (str(data["start"][0]), str(data["start"][1])), str(data["rv"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise KubeError(400, "BadRequest", "continue key is not valid: invalid continue token") from None


def _get(world: World, route: Route, request: Request) -> Response:
    if route.resource == "capacitybuffers":
        return json_response(200, buffers.get_buffer(world, route.namespace or "", route.name or "",
                                                     subresource=route.subresource))
    # A GET of /status is the whole object, as for every status subresource.
    return json_response(200, world.k8s_get(route.resource, route.namespace or "", route.name or ""))


def _body_object(request: Request) -> dict[str, Any]:
    try:
        body = request.json()
    except ValueError as exc:
        raise KubeError(400, "BadRequest", f"the body of the request was in an unknown format: {exc}") from None
    if not isinstance(body, dict):
        raise KubeError(400, "BadRequest", "the body of the request must be a JSON object")
    return body


def _create(world: World, route: Route, request: Request) -> Response:
    body = _body_object(request)
    kind, group_version, _ = _KINDS[route.resource]
    if body.get("kind") not in (None, kind):
        raise KubeError(400, "BadRequest", f"the kind of the provided object ({body.get('kind')}) is not {kind}")
    if route.resource == "capacitybuffers":
        return json_response(201, buffers.create_buffer(world, route.namespace or "", body))
    if route.resource == "podtemplates":
        return json_response(201, buffers.create_pod_template(world, route.namespace or "", body))
    if route.resource == "provisioningrequests":
        return json_response(201, provreqs.create_provisioning_request(world, route.namespace or "", body))
    return json_response(201, world.k8s_create(route.resource, route.namespace or "", body))


def _update(world: World, route: Route, request: Request) -> Response:
    body = _body_object(request)
    if route.resource == "capacitybuffers":
        return json_response(200, buffers.replace_buffer(world, route.namespace or "", route.name or "", body,
                                                         subresource=route.subresource))
    if route.resource == "provisioningrequests":
        return json_response(200, provreqs.replace_provisioning_request(
            world, route.namespace or "", route.name or "", body, subresource=route.subresource))
    return json_response(200, world.k8s_replace(route.resource, route.namespace or "", route.name or "", body))


def _patch(world: World, route: Route, request: Request) -> Response:
    content_type = request.header("content-type").split(";")[0].strip().lower()
    if content_type not in (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH):
        raise KubeError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_MERGE_PATCH}",
        )
    try:
        patch = request.json()
    except ValueError as exc:
        raise KubeError(400, "BadRequest", f"error decoding patch: {exc}") from None
    if route.resource == "capacitybuffers":
        current = buffers.get_buffer(world, route.namespace or "", route.name or "", subresource=route.subresource)
    else:
        current = world.k8s_get(route.resource, route.namespace or "", route.name or "")
    try:
        patched = apply_patch(content_type, current, patch)
    except PatchError as exc:
        if exc.unprocessable:
            raise KubeError(422, "Invalid", str(exc)) from None
        raise KubeError(400, "BadRequest", str(exc)) from None
    if route.resource == "capacitybuffers":
        return json_response(200, buffers.replace_buffer(world, route.namespace or "", route.name or "", patched,
                                                         subresource=route.subresource))
    if route.resource == "provisioningrequests":
        return json_response(200, provreqs.replace_provisioning_request(
            world, route.namespace or "", route.name or "", patched, subresource=route.subresource))
    return json_response(200, world.k8s_replace(route.resource, route.namespace or "", route.name or "", patched))


def _grace_seconds(request: Request) -> float | None:
    raw: Any = request.query.get("gracePeriodSeconds")
    if raw is None and request.body:
        try:
            body = request.json()
        except ValueError:
            raise KubeError(400, "BadRequest", "the DeleteOptions body is not JSON") from None
        raw = body.get("gracePeriodSeconds") if isinstance(body, dict) else None
    if raw is None:
        return None
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise KubeError(400, "BadRequest", f"invalid gracePeriodSeconds {raw!r}") from None


def _delete(world: World, route: Route, request: Request) -> Response:
    deleted = world.k8s_delete(route.resource, route.namespace or "", route.name or "", _grace_seconds(request))
    if route.resource == "pods":
        return json_response(200, deleted)  # pods come back with their deletionTimestamp
    details = {"name": route.name, "kind": route.resource, "uid": deleted["metadata"].get("uid", "")}
    return json_response(200, status_object(200, "", "", details))


def _evict(world: World, route: Route, request: Request) -> Response:
    body = _body_object(request)
    name = (body.get("metadata") or {}).get("name")
    if name not in (None, route.name):
        raise KubeError(400, "BadRequest", "name in URL does not match name in Eviction object")
    world.evict(route.namespace or "", route.name or "")
    return json_response(201, status_object(201, "", ""))


_HANDLERS: dict[str, Callable[[World, Route, Request], Response]] = {
    "list": _list,
    "get": _get,
    "create": _create,
    "update": _update,
    "patch": _patch,
    "delete": _delete,
    "evict": _evict,
}


# ---------------------------------------------------------------------------- discovery


def _version() -> dict[str, str]:
    major, minor, _ = KUBELET_VERSION.lstrip("v").split(".")
    return {
        "major": major,
        "minor": minor,
        "gitVersion": KUBELET_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-10-22T20:35:25Z",
        "goVersion": "go1.22.8",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _resource(name: str, kind: str, namespaced: bool, verbs: list[str]) -> dict[str, Any]:
    return {"name": name, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind, "verbs": verbs}


def _discovery(path: str, host: str) -> dict[str, Any]:
    if path == "/api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
        }
    if path == "/apis":
        groups = []
        for name in ("apps", "policy"):
            version = {"groupVersion": f"{name}/v1", "version": "v1"}
            groups.append({"name": name, "versions": [version], "preferredVersion": version})
        versions = [{"groupVersion": f"{_CUSTOM_GROUP}/{v}", "version": v} for v in _CUSTOM_VERSIONS]
        groups.append({"name": _CUSTOM_GROUP, "versions": versions, "preferredVersion": versions[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    if path.startswith(f"/apis/{_CUSTOM_GROUP}/"):
        version = path.rsplit("/", 1)[1]
        verbs = ["create", "delete", "get", "list", "patch", "update"]
        resources = []
        for plural in _CUSTOM_VERSIONS[version]:
            kind = _KINDS[plural][0]
            resources.append(_resource(plural, kind, True, verbs))
            resources += [_resource(f"{plural}/{sub}", "Scale" if sub == "scale" else kind, True,
                                    ["get", "patch", "update"]) | {"singularName": ""}
                          for sub in _SUBRESOURCES.get(plural, ())]
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{_CUSTOM_GROUP}/{version}",
                "resources": resources}
    if path == "/apis/apps/v1":
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": "apps/v1",
            "resources": [_resource("daemonsets", "DaemonSet", True, ["get", "list"])],
        }
    if path == "/apis/policy/v1":
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": "policy/v1",
            "resources": [_resource("poddisruptionbudgets", "PodDisruptionBudget", True, ["get", "list"])],
        }
    return {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            _resource("nodes", "Node", False, ["delete", "get", "list", "patch", "update"]),
            _resource("pods", "Pod", True, ["create", "delete", "get", "list", "patch", "update"]),
            _resource("pods/eviction", "Eviction", True, ["create"]) | {"group": "policy", "version": "v1", "singularName": ""},
            _resource("events", "Event", True, ["create", "delete", "get", "list"]),
            _resource("configmaps", "ConfigMap", True, ["create", "delete", "get", "list", "patch", "update"]),
            _resource("namespaces", "Namespace", False, ["get", "list"]),
        ],
    }
