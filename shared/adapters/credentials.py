"""Azure credentials for the ARM client, chosen by the AZURE_CREDENTIAL app setting.

Adapter module: the credentials it builds fetch tokens over the network
(managed identity endpoint, Entra ID) when first asked. Building one does no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from azure.core.credentials import AccessToken, AccessTokenInfo, TokenRequestOptions

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

    from shared.settings import Settings

# 2100-01-01T00:00:00Z: never refreshed within a test run, or a century.
_FAR_FUTURE = 4_102_444_800
SANDBOX_TOKEN = "sandbox-token"


class StaticTokenCredential:
    """A credential that always returns the same bearer token.

    For the sandbox only: its ARM double accepts this fixed token. Never use it
    against real Azure, where the token would simply be rejected.
    """

    def __init__(self, token: str = SANDBOX_TOKEN, *, expires_on: int = _FAR_FUTURE) -> None:
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


def make_azure_credential(settings: Settings) -> TokenCredential:
    """The credential named by `settings.azure_credential`: managed-identity, default or sandbox."""
    kind = settings.azure_credential
    if kind == "sandbox":
        return StaticTokenCredential()
    # azure.identity is imported here, not at module level: it pulls in msal and
    # friends, which costs cold-start time that the sandbox and tests never need.
    if kind == "managed-identity":
        from azure.identity import ManagedIdentityCredential

        return ManagedIdentityCredential(client_id=settings.azure_client_id)
    if kind == "default":
        from azure.identity import DefaultAzureCredential

        return DefaultAzureCredential()
    raise ValueError(f"AZURE_CREDENTIAL: unknown credential kind {kind!r} (use managed-identity, default or sandbox)")
