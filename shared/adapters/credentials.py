"""Azure credentials, chosen by the AZURE_CREDENTIAL app setting.

Adapter module: the credentials it builds fetch tokens over the network (the
managed identity endpoint, Entra ID, the sandbox's token endpoint) when first
asked. Building one does no I/O.

- `managed-identity` (in Azure): `ManagedIdentityCredential` with the user-assigned
  identity's client id; in a Functions app it talks to the platform's identity
  endpoint (IDENTITY_ENDPOINT / IDENTITY_HEADER).
- `default` (a developer): `DefaultAzureCredential` (environment, Azure CLI, ...).
- `sandbox`: `SandboxCredential`, which asks the sandbox's identity endpoint
  (SANDBOX_IDENTITY_ENDPOINT) for expiring tokens, as a managed identity would.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from azure.core.credentials import AccessToken, AccessTokenInfo, TokenRequestOptions
from azure.core.exceptions import ClientAuthenticationError

from shared.settings import SettingsError

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

    from shared.settings import Settings

# 2100-01-01T00:00:00Z: never refreshed within a test run, or a century.
_FAR_FUTURE = 4_102_444_800
# The X-IDENTITY-HEADER the sandbox's endpoint wants (sandbox.world.identity.IDENTITY_HEADER; shared never
# imports sandbox). App Service hands its value to the app in IDENTITY_HEADER; the sandbox's is fixed.
SANDBOX_IDENTITY_HEADER: Final = "sandbox-identity-header"
_API_VERSION: Final = "2019-08-01"  # the App Service managed identity protocol's
# A token is used until this much of its life is left, at most REFRESH_MARGIN: 5 minutes of a 1-hour
# token, as azure-core's policies do, and half of a very short one (the tests' few seconds).
REFRESH_MARGIN: Final = 300.0
REFRESH_FRACTION: Final = 0.5


class StaticTokenCredential:
    """A credential that always returns the same bearer token, never refreshed.

    For tests that need some credential but never reach a service that checks it (or
    want it refused). No real service, and not the sandbox's doubles, accept it.
    """

    def __init__(self, token: str = "static-token", *, expires_on: int = _FAR_FUTURE) -> None:
        self._token = token
        self._expires_on = expires_on

    def get_token(
        self,
        *scopes: str,
        claims: str | None = None,
        tenant_id: str | None = None,
        enable_cae: bool = False,
        **kwargs: Any,
    ) -> AccessToken:
        return AccessToken(self._token, self._expires_on)

    def get_token_info(self, *scopes: str, options: TokenRequestOptions | None = None) -> AccessTokenInfo:
        return AccessTokenInfo(self._token, self._expires_on)

    def close(self) -> None:
        """Nothing to release; present because azure-core closes credentials it is given."""

    def __enter__(self) -> StaticTokenCredential:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()


def scope_to_resource(scopes: tuple[str, ...]) -> str:
    """The `resource` a managed identity endpoint takes for one `<resource>/.default` scope (as azure-identity)."""
    if len(scopes) != 1:
        raise ValueError(f"a managed identity takes exactly one scope, got {list(scopes)}")
    scope = scopes[0].strip()
    return scope[: -len("/.default")] if scope.endswith("/.default") else scope


@dataclass(frozen=True, slots=True)
class _Cached:
    info: AccessTokenInfo
    refresh_on: float


class SandboxCredential:
    """A `TokenCredential` over the sandbox's token endpoint, shaped like App Service's managed identity endpoint.

    `GET {endpoint}?resource=<scope without /.default>&api-version=2019-08-01[&client_id=...]`
    with `X-IDENTITY-HEADER`; the answer's `expires_on` (epoch seconds) says when the token
    dies. Tokens are cached per resource and fetched again once less than REFRESH_MARGIN
    (or half their life, if shorter) is left, so a caller asking before every request never
    sends an expired one. Thread-safe. For the sandbox only: Azure has no such endpoint.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        client_id: str | None = None,
        ca_bundle: str | None = None,
        identity_header: str = SANDBOX_IDENTITY_HEADER,
        timeout: float = 10.0,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._endpoint = endpoint
        self._client_id = client_id or None
        self._header = identity_header
        self._timeout = timeout
        self._wall = wall
        self._context = ssl.create_default_context(cafile=ca_bundle or None)
        self._lock = threading.Lock()
        self._cache: dict[str, _Cached] = {}
        self.requests = 0  # tokens fetched from the endpoint, for tests

    def get_token(
        self,
        *scopes: str,
        claims: str | None = None,
        tenant_id: str | None = None,
        enable_cae: bool = False,
        **kwargs: Any,
    ) -> AccessToken:
        info = self._token_for(scope_to_resource(scopes), fresh=bool(claims))
        return AccessToken(info.token, info.expires_on)

    def get_token_info(self, *scopes: str, options: TokenRequestOptions | None = None) -> AccessTokenInfo:
        return self._token_for(scope_to_resource(scopes), fresh=bool((options or {}).get("claims")))

    def _token_for(self, resource: str, *, fresh: bool) -> AccessTokenInfo:
        # One lock for fetches too: concurrent callers wanting the same new token fetch it once.
        with self._lock:
            cached = self._cache.get(resource)
            if cached is not None and not fresh and self._wall() < cached.refresh_on:
                return cached.info
            fetched_at = self._wall()
            info = self._fetch(resource)
            margin = min(REFRESH_MARGIN, max(0.0, info.expires_on - fetched_at) * REFRESH_FRACTION)
            refresh_on = info.expires_on - margin
            info = AccessTokenInfo(info.token, info.expires_on, token_type=info.token_type, refresh_on=int(refresh_on))
            self._cache[resource] = _Cached(info, refresh_on)
            return info

    def _fetch(self, resource: str) -> AccessTokenInfo:
        params = {"resource": resource, "api-version": _API_VERSION}
        if self._client_id:
            params["client_id"] = self._client_id
        url = f"{self._endpoint}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers={"X-IDENTITY-HEADER": self._header, "Metadata": "true"})
        try:
            with urllib.request.urlopen(request, timeout=self._timeout, context=self._context) as response:
                body = json.loads(response.read())
            self.requests += 1
            return AccessTokenInfo(str(body["access_token"]), int(body["expires_on"]),
                                   token_type=str(body.get("token_type") or "Bearer"))
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise ClientAuthenticationError(
                f"sandbox identity endpoint {self._endpoint}: HTTP {exc.code} for resource {resource!r}: {detail}"
            ) from exc
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ClientAuthenticationError(
                f"sandbox identity endpoint {self._endpoint}: no token for resource {resource!r}: {exc}"
            ) from exc

    def close(self) -> None:
        """Nothing held open; present because azure-core closes credentials it is given."""

    def __enter__(self) -> SandboxCredential:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()


def make_azure_credential(settings: Settings) -> TokenCredential:
    """The credential named by `settings.azure_credential`: managed-identity, default or sandbox."""
    kind = settings.azure_credential
    if kind == "sandbox":
        # Checked here rather than in load_settings: in-process replays name the sandbox
        # credential yet never build one. build_context builds it right after loading the
        # settings, so the problem still surfaces at start-up, named.
        if not settings.sandbox_identity_endpoint:
            raise SettingsError(["SANDBOX_IDENTITY_ENDPOINT: required when AZURE_CREDENTIAL=sandbox "
                                 "(the sandbox prints it among its app settings)"])
        return SandboxCredential(settings.sandbox_identity_endpoint, client_id=settings.azure_client_id or None,
                                 ca_bundle=settings.arm_ca_bundle or None)
    # azure.identity is imported here, not at module level: it pulls in msal and
    # friends, which costs cold-start time that the sandbox and tests never need.
    if kind == "managed-identity":
        from azure.identity import ManagedIdentityCredential

        return ManagedIdentityCredential(client_id=settings.azure_client_id)
    if kind == "default":
        from azure.identity import DefaultAzureCredential

        return DefaultAzureCredential()
    raise ValueError(f"AZURE_CREDENTIAL: unknown credential kind {kind!r} (use managed-identity, default or sandbox)")
