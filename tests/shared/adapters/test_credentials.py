"""make_azure_credential picks the credential named by AZURE_CREDENTIAL (building one does no I/O), and
the sandbox credential gets real expiring tokens from the sandbox's identity endpoint and renews them."""

from __future__ import annotations

import time
from typing import Any

import pytest
from azure.core.exceptions import ClientAuthenticationError
from azure.identity import CredentialUnavailableError, DefaultAzureCredential, ManagedIdentityCredential
from azure.mgmt.compute import ComputeManagementClient

from sandbox.api.server import SandboxServer
from sandbox.world import identity
from shared.adapters.compute import VmssCompute
from shared.adapters.credentials import SandboxCredential, StaticTokenCredential, make_azure_credential
from shared.settings import SettingsError, load_settings
from tests.fixtures.sandbox import SandboxFactory

BASE = {
    "CLUSTER_NAME": "c",
    "AZURE_SUBSCRIPTION_ID": "s",
    "NODE_RESOURCE_GROUPS": "rg",
    "KUBECONFIG_PATH": "/dev/null",
}
ARM_SCOPE = "https://management.azure.com/.default"
AKS_SCOPE = f"{identity.AKS_AUDIENCE}/.default"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"AZURE_CREDENTIAL": "sandbox", "SANDBOX_IDENTITY_ENDPOINT": "https://127.0.0.1:1/msi/token"}, SandboxCredential),
        ({"AZURE_CREDENTIAL": "managed-identity", "AZURE_CLIENT_ID": "00000000-0000-0000-0000-000000000001"}, ManagedIdentityCredential),
        ({"AZURE_CREDENTIAL": "default"}, DefaultAzureCredential),
        ({}, DefaultAzureCredential),
    ],
    ids=["sandbox", "managed-identity", "default", "unset"],
)
def test_the_setting_picks_the_credential(env: dict[str, str], expected: type) -> None:
    assert isinstance(make_azure_credential(load_settings({**BASE, **env})), expected)


def test_the_sandbox_credential_needs_the_sandbox_endpoint() -> None:
    settings = load_settings({**BASE, "AZURE_CREDENTIAL": "sandbox"})
    with pytest.raises(SettingsError, match="SANDBOX_IDENTITY_ENDPOINT: required when AZURE_CREDENTIAL=sandbox"):
        make_azure_credential(settings)


def test_a_static_credential_returns_its_fixed_token() -> None:
    credential = StaticTokenCredential("fixed")
    token = credential.get_token(ARM_SCOPE)
    info = credential.get_token_info(ARM_SCOPE)
    assert (token.token, info.token) == ("fixed", "fixed")
    assert min(token.expires_on, info.expires_on) > time.time() + 365 * 24 * 3600


# --- against the sandbox's identity endpoint -------------------------------------------------------------


@pytest.fixture
def server(sandbox_factory: SandboxFactory) -> SandboxServer:
    return sandbox_factory("burst")


def test_tokens_are_cached_per_scope_and_renewed_before_they_expire(server: SandboxServer) -> None:
    now = [time.time()]
    credential = SandboxCredential(server.identity_endpoint, ca_bundle=str(server.ca_path), wall=lambda: now[0])
    first = credential.get_token_info(ARM_SCOPE)
    assert credential.get_token(ARM_SCOPE).token == first.token  # cached
    assert first.expires_on == pytest.approx(time.time() + 3600, abs=5)
    assert first.refresh_on == pytest.approx(first.expires_on - 300, abs=1)  # 5 minutes before it expires
    other = credential.get_token_info(AKS_SCOPE)  # another scope: its own token
    assert other.token != first.token and credential.requests == 2
    assert server.world.identity.check(first.token, identity.ARM).ok
    assert server.world.identity.check(other.token, identity.AKS).ok
    now[0] = first.expires_on - 301
    assert credential.get_token(ARM_SCOPE).token == first.token
    now[0] = first.expires_on - 299
    renewed = credential.get_token_info(ARM_SCOPE)
    assert renewed.token != first.token and credential.requests == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"identity_header": "guessed"}, "HTTP 401"),
        ({"client_id": "00000000-0000-0000-0000-000000000001"}, "No User Assigned or Delegated Managed Identity"),
        ({"ca_bundle": None}, "CERTIFICATE_VERIFY_FAILED"),
    ],
    ids=["wrong identity header", "unknown client id", "untrusted CA"],
)
def test_a_refused_token_request_is_an_authentication_error(server: SandboxServer, kwargs: dict[str, Any], message: str) -> None:
    options: dict[str, Any] = {"ca_bundle": str(server.ca_path), **kwargs}
    credential = SandboxCredential(server.identity_endpoint, **options)
    with pytest.raises(ClientAuthenticationError, match=message):
        credential.get_token(ARM_SCOPE)


def test_the_apps_client_id_selects_the_sandbox_identity(server: SandboxServer) -> None:
    settings = load_settings({**server.env(), "AZURE_CLIENT_ID": identity.CLIENT_ID})
    credential = make_azure_credential(settings)
    assert server.world.identity.check(credential.get_token(ARM_SCOPE).token, identity.ARM).ok


def test_arm_calls_keep_working_across_token_expiry_because_the_credential_renews(
    sandbox_factory: SandboxFactory,
) -> None:
    """azure-core asks the credential before each request once a token is near its end; the
    credential then fetches a new one. A credential that kept the old token is refused."""
    lifetime = 1.5
    server = sandbox_factory("burst", token_lifetime=lifetime)
    credential = make_azure_credential(load_settings(server.env()))
    compute = VmssCompute.from_settings(load_settings(server.env()), credential=credential)
    assert [g.name for g in compute.list_node_groups()] == ["pool-d4"]
    stale = credential.get_token(ARM_SCOPE)
    time.sleep(lifetime + 0.1)
    assert server.world.identity.check(stale.token, identity.ARM).verdict is identity.Verdict.EXPIRED
    assert [g.name for g in compute.list_node_groups()] == ["pool-d4"]  # with a new token
    assert credential.get_token(ARM_SCOPE).token != stale.token

    kept = ComputeManagementClient(StaticTokenCredential(stale.token, expires_on=stale.expires_on), server.subscription_id,
                                   base_url=server.url, connection_verify=str(server.ca_path), retry_total=0)
    with pytest.raises(ClientAuthenticationError) as caught:
        kept.virtual_machine_scale_sets.get("rg-sandbox-nodes", "pool-d4")
    assert caught.value.error.code == "ExpiredAuthenticationToken"


def test_azure_identitys_managed_identity_credential_works_against_the_sandbox_endpoint(
    server: SandboxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real ManagedIdentityCredential, as in a Functions app: IDENTITY_ENDPOINT and IDENTITY_HEADER
    select its App Service flow. It talks https to the sandbox when given the sandbox's CA
    (`connection_verify`, passed down to its transport); App Service's own endpoint is http on localhost."""
    monkeypatch.setenv("IDENTITY_ENDPOINT", server.identity_endpoint)
    monkeypatch.setenv("IDENTITY_HEADER", identity.IDENTITY_HEADER)
    credential = ManagedIdentityCredential(client_id=identity.CLIENT_ID, connection_verify=str(server.ca_path))
    token = credential.get_token(ARM_SCOPE)
    assert token.expires_on == pytest.approx(time.time() + 3600, abs=5)
    compute = ComputeManagementClient(credential, server.subscription_id, base_url=server.url,
                                      connection_verify=str(server.ca_path))
    assert compute.virtual_machine_scale_sets.get("rg-sandbox-nodes", "pool-d4").sku.capacity == 1

    stranger = ManagedIdentityCredential(client_id="00000000-0000-0000-0000-000000000001",
                                         connection_verify=str(server.ca_path))
    with pytest.raises(CredentialUnavailableError, match="No User Assigned or Delegated Managed Identity"):
        stranger.get_token(ARM_SCOPE)

