"""ARM list paging for the sandbox's ARM doubles: one page of a list, with the `nextLink` ARM returns.

`nextLink` is used verbatim by the SDKs, so it keeps the request's other parameters (`$filter`,
`$expand`) and carries the position as `$skiptoken`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from sandbox.api.wire import Request
from sandbox.world.errors import ArmError


def arm_page(items: list[dict[str, Any]], request: Request, *, page_size: int, api_version: str) -> dict[str, Any]:
    try:
        skip = int(request.query.get("$skiptoken", "0"))
    except ValueError:
        raise ArmError(400, "InvalidSkipToken", "The $skiptoken is invalid.") from None
    body: dict[str, Any] = {"value": items[skip : skip + page_size]}
    if skip + page_size < len(items):
        kept = [(k, v) for k, v in request.query.items() if k not in ("api-version", "$skiptoken")]
        pairs = [("api-version", api_version), *kept, ("$skiptoken", str(skip + page_size))]
        query = "&".join(f"{quote(k, safe='$')}={quote(v, safe='')}" for k, v in pairs)
        body["nextLink"] = f"https://{request.header('host', '127.0.0.1')}{quote(request.path)}?{query}"
    return body
