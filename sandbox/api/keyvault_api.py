"""The Key Vault secrets double: `Vault.handle(request) -> Response`.

Served at the root of the sandbox's URL, as a vault is at the root of
`https://<vault>.vault.azure.net`: `GET /secrets/{name}[/{version}]?api-version=<7.x or dated>`
answers `{"value", "id", "attributes", ...}` as Key Vault does, so
azure-keyvault-secrets' `SecretClient.get_secret` works unchanged.

Authentication is Key Vault's challenge protocol, which the SDK's ChallengeAuthPolicy
drives: a request without a bearer token gets 401 with
`WWW-Authenticate: Bearer authorization="<authority>/<tenant>", resource="https://vault.azure.net"`;
the client then asks its credential for `https://vault.azure.net/.default` and retries.
Tokens must be unexpired and issued for that audience (`sandbox.world.identity`).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Final

from sandbox.api.wire import Request, Response, json_response
from sandbox.world.identity import KEY_VAULT, KEY_VAULT_AUDIENCE, TENANT_ID, TokenIssuer, Verdict

PREFIX: Final = "/secrets"
_ROUTE = re.compile(r"^/secrets/(?P<name>[^/]+)(?:/(?P<version>[^/]*))?/?$")
# 7.0-7.6, then dated versions (azure-keyvault-secrets 4.12 sends 2026-04-01), and 2016-10-01.
_API_VERSION = re.compile(r"^(7\.\d+|\d{4}-\d{2}-\d{2})(-preview(\.\d+)?)?$")
_CHALLENGE: Final = f'Bearer authorization="https://login.microsoftonline.com/{TENANT_ID}", resource="{KEY_VAULT_AUDIENCE}"'


@dataclass(frozen=True, slots=True)
class SecretVersion:
    name: str
    version: str
    value: str
    content_type: str | None
    created: int  # epoch seconds


def error_response(status: int, code: str, message: str, *, challenge: bool = False) -> Response:
    """Key Vault's error shape; every 401 carries the challenge, as the service's do."""
    headers = {"WWW-Authenticate": _CHALLENGE} if challenge else None
    return json_response(status, {"error": {"code": code, "message": message}}, headers)


class Vault:
    """One vault's secrets (names case-insensitive, every set adds a version). Thread-safe."""

    def __init__(self, issuer: TokenIssuer) -> None:
        self._issuer = issuer
        self._lock = threading.Lock()
        self._secrets: dict[str, list[SecretVersion]] = {}  # lower-cased name -> versions, oldest first

    def set_secret(self, name: str, value: str, *, content_type: str | None = None) -> SecretVersion:
        if not re.fullmatch(r"[0-9A-Za-z-]{1,127}", name):
            raise ValueError(f"secret names are 1-127 letters, digits and dashes, got {name!r}")
        secret = SecretVersion(name, uuid.uuid4().hex, value, content_type, int(time.time()))
        with self._lock:
            self._secrets.setdefault(name.lower(), []).append(secret)
        return secret

    def secret(self, name: str, version: str | None = None) -> SecretVersion | None:
        """The latest version of a secret, or the one named; None when there is none."""
        with self._lock:
            versions = list(self._secrets.get(name.lower(), ()))
        if version is None:
            return versions[-1] if versions else None
        return next((v for v in versions if v.version == version), None)

    def handle(self, request: Request) -> Response:
        token = request.bearer_token()
        if token is None:
            return error_response(401, "Unauthorized", "AKV10000: Request is missing a Bearer or PoP token.", challenge=True)
        check = self._issuer.check(token, KEY_VAULT)
        if check.verdict is Verdict.WRONG_AUDIENCE:
            assert check.issued is not None
            return error_response(
                401, "Unauthorized",
                f"AKV10022: Invalid audience. Expected {KEY_VAULT_AUDIENCE}, found: {check.issued.resource}.", challenge=True,
            )
        if check.verdict is Verdict.EXPIRED:
            return error_response(401, "Unauthorized", "The access token has expired.", challenge=True)
        if not check.ok:
            return error_response(401, "Unauthorized", "The access token is invalid.", challenge=True)
        api_version = request.query.get("api-version", "")
        if not _API_VERSION.match(api_version):
            return error_response(400, "BadParameter", f"The specified version ({api_version}) is not recognized.")
        match = _ROUTE.match(request.path)
        if match is None or request.method != "GET":
            return error_response(405 if match else 404, "BadParameter" if match else "NotFound",
                                  f"The sandbox vault serves GET /secrets/<name>[/<version>] only, not {request.method} {request.path}.")
        return self._get(request, match["name"], match["version"] or None)

    def _get(self, request: Request, name: str, version: str | None) -> Response:
        found = self.secret(name, version)
        if found is None:
            what = name if version is None else f"{name}/{version}"
            return error_response(404, "SecretNotFound", f"A secret with (name/id) {what} was not found in this key vault. "
                                  "If you recently deleted this secret you may be able to recover it using the correct "
                                  "recovery command. For help resolving this issue, please see https://go.microsoft.com/fwlink/?linkid=2125182")
        body: dict[str, Any] = {
            "value": found.value,
            "id": f"https://{request.header('host', '127.0.0.1')}/secrets/{found.name}/{found.version}",
            "attributes": {
                "enabled": True, "created": found.created, "updated": found.created,
                "recoveryLevel": "Recoverable+Purgeable", "recoverableDays": 90,
            },
            "tags": {},
        }
        if found.content_type:
            body["contentType"] = found.content_type
        return json_response(200, body)
