"""The Log Analytics query API double: `handle(world, request) -> Response`.

Served under `/loganalytics`, so a client whose endpoint is `<sandbox url>/loganalytics`
posts to `/loganalytics/v1/workspaces/{workspaceId}/query` with `{"query", "timespan"}`,
as azure-monitor-query's `LogsQueryClient.query_workspace` does. There is one workspace,
`world.workspace_id`; the bearer token must come from `world.identity`, unexpired, for
Log Analytics' audience (`https://api.loganalytics.io`, or the URL the server serves it at).

It runs no KQL. It recognises one query, the autoscaler's node CPU query, by its
marker comment, reads the node names from its `let nodes = dynamic([...]);` line,
and answers as Container Insights data would: per Ready node named, the average
`cpuUsageNanoCores` and the `cpuCapacityNanoCores`, from the world's running pods
(`World.node_cpu`). Any other query is a 400, so a changed query fails loudly here
rather than silently returning nothing.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from typing import Any, Final

from sandbox.api.wire import Request, Response, json_response
from sandbox.model.units import parse_time
from sandbox.world import World
from sandbox.world.faults import Fault
from sandbox.world.identity import LOG_ANALYTICS, Verdict

PREFIX: Final = "/loganalytics"
QUERY_MARKER: Final = "// vmss-autoscaler: node-cpu-usage"  # shared.adapters.log_analytics.QUERY_MARKER
_ROUTE = re.compile(r"^/loganalytics/v1/workspaces/(?P<workspace>[^/]+)/query$", re.IGNORECASE)
_NODES = re.compile(r"^let nodes = dynamic\((?P<names>\[.*?\])\);$", re.MULTILINE)
_ISO_SECONDS = re.compile(r"^PT(?P<seconds>\d+(\.\d+)?)S$")
_COLUMNS: Final = [
    {"name": "Computer", "type": "string"},
    {"name": "UsageNanoCores", "type": "real"},
    {"name": "CapacityNanoCores", "type": "real"},
]
_DEFAULT_CODES: Final = {
    400: "BadArgumentError", 401: "AuthorizationRequiredError", 403: "InsufficientAccessError",
    404: "NotFoundError", 429: "ThrottledError", 500: "InternalServerError", 502: "BadGateway",
    503: "ServiceUnavailableError", 504: "GatewayTimeout",
}


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    """The service's error shape: `{"error": {"message", "code", "correlationId"}}`."""
    body = {"error": {"message": message, "code": code, "correlationId": str(uuid.uuid4())}}
    return json_response(status, body, headers)


def handle(world: World, request: Request) -> Response:
    """Serve one Log Analytics request against the world (already advanced by the caller)."""
    match = _ROUTE.match(request.path)
    if match is None:
        return error_response(404, "PathNotFoundError", f"The requested path '{request.path}' does not exist.")
    if request.method != "POST":
        return error_response(405, "MethodNotAllowed", "The sandbox serves queries by POST only.")
    check = world.identity.check(request.bearer_token(), LOG_ANALYTICS)
    if check.verdict is Verdict.WRONG_AUDIENCE:
        return error_response(403, "InvalidTokenError", "The provided authentication is not valid for this resource.")
    if check.verdict is Verdict.EXPIRED:
        return error_response(401, "AuthorizationRequiredError", "Valid authentication was not provided: the token has expired.")
    if not check.ok:
        return error_response(401, "AuthorizationRequiredError", "Valid authentication was not provided.")
    world.count_call("loganalytics", "POST query", write=False)
    fault = world.take_fault("loganalytics", request.method, "query")
    if fault is not None:
        return _fault_response(fault)
    if match["workspace"].lower() != world.workspace_id.lower():
        return error_response(404, "WorkspaceNotFoundError", f"The workspace {match['workspace']} could not be found.")
    try:
        body = request.json()
    except ValueError:
        return error_response(400, "BadArgumentError", "The request body is not valid JSON.")
    if not isinstance(body, dict) or not isinstance(body.get("query"), str) or not body["query"].strip():
        return error_response(400, "BadArgumentError", "The request had some invalid properties: query is required.")
    if body.get("timespan") is not None and not _valid_timespan(body["timespan"]):
        return error_response(400, "BadArgumentError", f"Invalid timespan {body['timespan']!r}.")
    names = _node_names(body["query"])
    if names is None:
        message = (
            "The sandbox answers only the autoscaler's node CPU query "
            f"(first line {QUERY_MARKER!r}, then 'let nodes = dynamic([...]);')."
        )
        return error_response(400, "BadArgumentError", message)
    wanted = {name.lower() for name in names}
    measured = {name: cpu for name, cpu in world.node_cpu().items() if name.lower() in wanted}  # `in~`
    rows = [
        [name, float(cpu.used_milli) * 1e6, float(cpu.capacity_milli) * 1e6]
        for name, cpu in sorted(measured.items())
    ]
    return json_response(200, {"tables": [{"name": "PrimaryResult", "columns": _COLUMNS, "rows": rows}]})


def _node_names(query: str) -> list[str] | None:
    if not query.lstrip().startswith(QUERY_MARKER):
        return None
    match = _NODES.search(query)
    if match is None:
        return None
    try:
        names: Any = json.loads(match["names"])
    except ValueError:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return names


def _valid_timespan(text: Any) -> bool:
    """ISO 8601 as the SDK sends it: `start/end`, `start/PT<n>S` or `PT<n>S`."""
    if not isinstance(text, str):
        return False
    try:
        if "/" not in text:
            return _duration(text) is not None
        start, end = text.split("/", 1)
        begin = parse_time(start)
        if _ISO_SECONDS.match(end):
            return True
        return parse_time(end) >= begin
    except ValueError:
        return False


def _duration(text: str) -> timedelta | None:
    match = _ISO_SECONDS.match(text)
    return None if match is None else timedelta(seconds=float(match["seconds"]))


def _fault_response(fault: Fault) -> Response:
    headers = None
    if fault.retry_after is not None:
        value = fault.retry_after
        headers = {"Retry-After": str(int(value)) if float(value).is_integer() else f"{value:.3f}"}
    code = fault.code or _DEFAULT_CODES.get(fault.status, "InternalServerError")
    return error_response(fault.status, code, fault.message or f"Injected fault: {code}.", headers)

