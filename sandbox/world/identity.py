"""The sandbox's identity: Entra ID behind a managed identity, and the token checks every API double makes.

`TokenIssuer` plays Entra ID behind a managed identity. It hands out opaque random
bearer tokens, each remembered with the audience it was asked for and a wall-clock
expiry (`time.time()`: azure-identity, MSAL and our own refresh logic all reason in
wall time, whatever speed the world runs at). The doubles then ask `check(token,
service)`, and answer as the real services do: ARM and Key Vault with their error
codes, Kubernetes and Log Analytics with a plain 401.

The world holds the issuer; the endpoint that hands its tokens out over HTTP, as App Service's
`IDENTITY_ENDPOINT` does, is `sandbox.api.token_endpoint`.
"""
from __future__ import annotations

import enum
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

DEFAULT_TOKEN_LIFETIME: Final = 3600.0  # wall seconds, as Entra ID's default access token lifetime
TOKEN_PATH: Final = "/msi/token"  # where the server serves the endpoint, like App Service's http://localhost:<port>/msi/token
API_VERSION: Final = "2019-08-01"
# The value of X-IDENTITY-HEADER. App Service makes one up per process and hands it to the app in
# IDENTITY_HEADER; the sandbox has no process to hand it to, so it is fixed and public, and known to
# shared.adapters.credentials (IDENTITY_HEADER there) without an import. Requests must still carry it.
IDENTITY_HEADER: Final = "sandbox-identity-header"
# The sandbox app's user-assigned managed identity; asking without a client_id gets its system-assigned one.
CLIENT_ID: Final = "5a4d0b0e-0000-4000-8000-0000000001d0"
TENANT_ID: Final = "5a4d0b0e-0000-4000-8000-00000000ea57"

# Services whose doubles check tokens, and the audiences each accepts (besides the aliases the
# server adds: the URLs it serves ARM and Log Analytics at, as a sovereign cloud's own endpoints are).
ARM: Final = "arm"
AKS: Final = "aks"
KEY_VAULT: Final = "key-vault"
LOG_ANALYTICS: Final = "log-analytics"
ARM_AUDIENCE: Final = "https://management.azure.com"
AKS_AUDIENCE: Final = "6dae42f8-4368-4678-94ff-3960e28e3630"  # the AKS Entra ID server application
KEY_VAULT_AUDIENCE: Final = "https://vault.azure.net"
LOG_ANALYTICS_AUDIENCE: Final = "https://api.loganalytics.io"
_AUDIENCES: Final[dict[str, tuple[str, ...]]] = {
    ARM: (ARM_AUDIENCE, "https://management.core.windows.net"),
    AKS: (AKS_AUDIENCE,),
    KEY_VAULT: (KEY_VAULT_AUDIENCE,),
    LOG_ANALYTICS: (LOG_ANALYTICS_AUDIENCE,),
}
_KEEP_EXPIRED: Final = 3600.0  # wall seconds an expired token is still recognised (as expired, not unknown)


def normalize_audience(audience: str) -> str:
    """What the sandbox compares: `resource` or a `<resource>/.default` scope, without a trailing slash, lower case."""
    text = audience.strip()
    if text.endswith("/.default"):
        text = text[: -len("/.default")]
    return text.rstrip("/").lower()


class Verdict(enum.Enum):
    OK = "ok"
    UNKNOWN = "unknown"  # never issued (or long forgotten): a forged or foreign token
    EXPIRED = "expired"
    WRONG_AUDIENCE = "wrong-audience"


@dataclass(frozen=True, slots=True)
class Issued:
    token: str
    resource: str  # as asked for
    expires_on: float  # wall clock, epoch seconds
    client_id: str

    def expiry_text(self) -> str:
        return _arm_time(self.expires_on)


@dataclass(frozen=True, slots=True)
class Check:
    verdict: Verdict
    issued: Issued | None = None

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK


class TokenIssuer:
    """Issues expiring bearer tokens per audience and checks them. Thread-safe; holds no world state."""

    def __init__(self, lifetime: float = DEFAULT_TOKEN_LIFETIME, *, wall: Callable[[], float] = time.time) -> None:
        if lifetime <= 0:
            raise ValueError(f"token lifetime must be positive, got {lifetime}")
        self.lifetime = float(lifetime)
        self._wall = wall
        self._lock = threading.Lock()
        self._tokens: dict[str, Issued] = {}
        self._audiences: dict[str, set[str]] = {
            service: {normalize_audience(a) for a in audiences} for service, audiences in _AUDIENCES.items()
        }
        self.issued_count = 0

    def alias(self, service: str, audience: str) -> None:
        """Also accept `audience` for `service` (the server's own ARM and Log Analytics URLs)."""
        with self._lock:
            self._audiences[service].add(normalize_audience(audience))

    def audiences(self, service: str) -> tuple[str, ...]:
        with self._lock:
            return tuple(sorted(self._audiences[service]))

    def issue(
        self, resource: str, *, client_id: str = CLIENT_ID, lifetime: float | None = None, token: str | None = None
    ) -> Issued:
        """A new token for `resource`; `lifetime` (wall seconds) overrides the issuer's for this one token.

        `token` picks the token's text instead of a random one: for tests that call the doubles as
        functions with a fixed Authorization header.
        """
        now = self._wall()
        expires_on = now + (self.lifetime if lifetime is None else lifetime)
        issued = Issued(token or secrets.token_urlsafe(32), resource, expires_on, client_id)
        with self._lock:
            self._forget_expired(now)
            self._tokens[issued.token] = issued
            self.issued_count += 1
        return issued

    def check(self, token: str | None, service: str) -> Check:
        """Whether `token` is an unexpired token issued for one of `service`'s audiences."""
        with self._lock:
            issued = self._tokens.get(token or "")
            accepted = self._audiences[service]
        if issued is None:
            return Check(Verdict.UNKNOWN)
        if normalize_audience(issued.resource) not in accepted:
            return Check(Verdict.WRONG_AUDIENCE, issued)
        if self._wall() >= issued.expires_on:
            return Check(Verdict.EXPIRED, issued)
        return Check(Verdict.OK, issued)

    def now_text(self) -> str:
        return _arm_time(self._wall())

    def _forget_expired(self, now: float) -> None:
        if len(self._tokens) < 256:
            return
        for token in [t for t, issued in self._tokens.items() if issued.expires_on + _KEEP_EXPIRED < now]:
            del self._tokens[token]


def _arm_time(epoch: float) -> str:
    """ARM's way of writing a UTC time in its token errors: `4/28/2021 8:47:49 AM`."""
    moment = datetime.fromtimestamp(epoch, UTC)
    hour = moment.hour % 12 or 12
    return f"{moment.month}/{moment.day}/{moment.year} {hour}:{moment:%M:%S} {'AM' if moment.hour < 12 else 'PM'}"


def quoted_list(audiences: Iterable[str]) -> str:
    """`'a/','a','b/','b'`, how ARM lists the audiences it allows."""
    return ",".join(f"'{form}'" for audience in audiences for form in (f"{audience}/", audience))
