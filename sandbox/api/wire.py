"""HTTP-shaped values shared by the API doubles: requests in, responses out, no sockets.

The doubles are functions of (world, request) so they can be tested without a
server; `sandbox.api.server` only moves bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import parse_qs


class Response(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str  # percent-decoded, without the query string
    query: Mapping[str, str] = field(default_factory=dict)  # first value of each parameter
    headers: Mapping[str, str] = field(default_factory=dict)  # keys lower-cased
    body: bytes = b""

    @staticmethod
    def build(
        method: str,
        path: str,
        query: Mapping[str, str] | str | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | str | Any = b"",
    ) -> Request:
        """Convenience for tests and the server: parses a raw query string, normalises headers, encodes JSON bodies."""
        if isinstance(query, str):
            query = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
        if not isinstance(body, bytes | str):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        return Request(
            method.upper(),
            path,
            dict(query or {}),
            {k.lower(): v for k, v in (headers or {}).items()},
            body,
        )

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)

    def json(self) -> Any:
        """The body as JSON; raises ValueError when it is not."""
        if not self.body:
            return None
        return json.loads(self.body)

    def bearer_token(self) -> str | None:
        scheme, _, token = self.header("authorization").partition(" ")
        return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def json_response(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> Response:
    body = b"" if payload is None else json.dumps(payload, separators=(",", ":")).encode()
    merged = {"Content-Type": "application/json"} if payload is not None else {}
    merged.update(headers or {})
    return Response(status, merged, body)
