"""An azure-core pipeline policy counting the HTTP requests our Azure clients make, throttled ones apart.

Adapter module. Added to the ARM clients (Compute, Azure Monitor metrics) as a per-retry policy, so
every HTTP attempt counts: a call retried after a 503 is two requests, and each 429 is seen. It records
`vmss_autoscaler_arm_requests_total{operation, status_code}` and, for 429s,
`vmss_autoscaler_arm_throttled_requests_total{operation}` (shared.telemetry). The operation is the
method and the resource types of the URL, never an id or a name: `PATCH virtualMachineScaleSets`,
`POST virtualMachineScaleSets/delete`, `GET virtualMachineScaleSets/virtualMachines`, `GET locations/operations`.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.core.pipeline.policies import SansIOHTTPPolicy

from shared import telemetry

__all__ = ["ArmTelemetryPolicy", "operation_name"]

_VERSION = re.compile(r"^v\d[\w.-]*$", re.IGNORECASE)


def operation_name(method: str, url: str) -> str:
    """`<METHOD> <resource types>[/<action>]` of an ARM (or other REST) URL: ids, names and the query left out.

    ARM paths alternate type and name after the last `providers/<namespace>` (or from the start when
    there is none, past a data-plane version such as Log Analytics' `/v1`); the types, and a trailing
    action, joined by `/` name the operation.
    """
    segments = [s for s in urlsplit(url).path.split("/") if s]
    lowered = [s.lower() for s in segments]
    if "providers" in lowered:
        last = len(lowered) - 1 - lowered[::-1].index("providers")
        segments = segments[last + 2:]  # past `providers/<namespace>`
    else:
        version = next((i for i, s in enumerate(segments[:3]) if _VERSION.match(s)), None)
        if version is not None:
            segments = segments[version + 1:]
    types = "/".join(segments[0::2])
    return f"{method.upper()} {types}" if types else method.upper()


class ArmTelemetryPolicy(SansIOHTTPPolicy):  # type: ignore[type-arg]
    """Counts each HTTP attempt by operation and status code; a transport failure counts as status `error`."""

    def on_response(self, request: PipelineRequest[Any], response: PipelineResponse[Any, Any]) -> None:
        http = request.http_request
        telemetry.record_arm_request(operation_name(http.method, http.url), response.http_response.status_code)

    def on_exception(self, request: PipelineRequest[Any]) -> None:
        http = request.http_request
        telemetry.record_arm_request(operation_name(http.method, http.url), "error")
