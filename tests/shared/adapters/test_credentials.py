"""make_azure_credential picks the credential named by AZURE_CREDENTIAL; building one does no I/O."""

from __future__ import annotations

import time

import pytest
from azure.identity import DefaultAzureCredential, ManagedIdentityCredential

from shared.adapters.credentials import StaticTokenCredential, make_azure_credential
from shared.settings import load_settings

BASE = {
    "CLUSTER_NAME": "c",
    "AZURE_SUBSCRIPTION_ID": "s",
    "NODE_RESOURCE_GROUPS": "rg",
    "KUBECONFIG_PATH": "/dev/null",
}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"AZURE_CREDENTIAL": "sandbox"}, StaticTokenCredential),
        ({"AZURE_CREDENTIAL": "managed-identity", "AZURE_CLIENT_ID": "00000000-0000-0000-0000-000000000001"}, ManagedIdentityCredential),
        ({"AZURE_CREDENTIAL": "default"}, DefaultAzureCredential),
        ({}, DefaultAzureCredential),
    ],
    ids=["sandbox", "managed-identity", "default", "unset"],
)
def test_the_setting_picks_the_credential(env: dict[str, str], expected: type) -> None:
    assert isinstance(make_azure_credential(load_settings({**BASE, **env})), expected)


def test_the_sandbox_token_is_fixed_and_does_not_expire_soon() -> None:
    credential = StaticTokenCredential()
    token = credential.get_token("https://management.azure.com/.default")
    info = credential.get_token_info("https://management.azure.com/.default")
    assert (token.token, info.token) == ("sandbox-token", "sandbox-token")
    assert min(token.expires_on, info.expires_on) > time.time() + 365 * 24 * 3600
