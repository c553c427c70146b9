"""Storage connection resolution (Functions convention) and the SDK-error wrapping, without Azurite."""

from __future__ import annotations

import socket
from collections.abc import Callable
from datetime import datetime, timezone

import pytest
from azure.core.exceptions import AzureError

from shared.adapters.action_queue import StorageActionQueue
from shared.adapters.credentials import StaticTokenCredential
from shared.adapters.storage_connection import (
    StorageConnection,
    StorageError,
    resolve_storage,
    resolve_storage_connection,
)
from shared.adapters.table_state import TableStateStore
from shared.settings import SettingsError, load_settings

CREDENTIAL = StaticTokenCredential("test-token")
T0 = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
REQUIRED_SETTINGS = {
    "CLUSTER_NAME": "c1",
    "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000",
    "NODE_RESOURCE_GROUPS": "rg",
    "KUBECONFIG_PATH": "/tmp/kubeconfig",
}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param(
            {"AzureWebJobsStorage": "UseDevelopmentStorage=true"},
            StorageConnection("AzureWebJobsStorage", connection_string="UseDevelopmentStorage=true"),
            id="connection-string",
        ),
        pytest.param(
            {
                "AzureWebJobsStorage": "UseDevelopmentStorage=true",
                "AzureWebJobsStorage__accountName": "ignored",
            },
            StorageConnection("AzureWebJobsStorage", connection_string="UseDevelopmentStorage=true"),
            id="connection-string-wins-over-identity",
        ),
        pytest.param(
            {
                "AzureWebJobsStorage__tableServiceUri": "https://acct.table.core.windows.net",
                "AzureWebJobsStorage__queueServiceUri": "https://acct.queue.core.windows.net",
            },
            StorageConnection(
                "AzureWebJobsStorage",
                table_service_uri="https://acct.table.core.windows.net",
                queue_service_uri="https://acct.queue.core.windows.net",
            ),
            id="service-uris",
        ),
        pytest.param(
            {"AzureWebJobsStorage__accountName": "acct"},
            StorageConnection(
                "AzureWebJobsStorage",
                table_service_uri="https://acct.table.core.windows.net",
                queue_service_uri="https://acct.queue.core.windows.net",
            ),
            id="account-name",
        ),
        pytest.param(
            {
                "AzureWebJobsStorage__accountName": "acct",
                "AzureWebJobsStorage__tableServiceUri": "https://tables.example.test",
            },
            StorageConnection(
                "AzureWebJobsStorage",
                table_service_uri="https://tables.example.test",
                queue_service_uri="https://acct.queue.core.windows.net",
            ),
            id="explicit-uri-beats-account-name",
        ),
    ],
)
def test_resolve_storage(env: dict[str, str], expected: StorageConnection) -> None:
    resolved = resolve_storage(env, credential=CREDENTIAL)
    assert resolved == expected
    assert resolved.uses_identity == (not expected.connection_string)
    if resolved.uses_identity:
        assert resolved.credential is CREDENTIAL


@pytest.mark.parametrize(
    ("env", "credential", "names_in_error"),
    [
        pytest.param({}, CREDENTIAL, ["AzureWebJobsStorage", "__tableServiceUri", "__accountName"], id="nothing"),
        pytest.param({"AzureWebJobsStorage": "  "}, CREDENTIAL, ["AzureWebJobsStorage"], id="blank"),
        pytest.param(
            {"AzureWebJobsStorage__tableServiceUri": "https://acct.table.core.windows.net"},
            CREDENTIAL,
            ["AzureWebJobsStorage__queueServiceUri"],
            id="only-table-uri",
        ),
        pytest.param({"AzureWebJobsStorage__accountName": "acct"}, None, ["credential"], id="identity-no-credential"),
    ],
)
def test_resolve_storage_names_what_is_missing(
    env: dict[str, str], credential: StaticTokenCredential | None, names_in_error: list[str]
) -> None:
    with pytest.raises(SettingsError) as raised:
        resolve_storage(env, credential=credential)
    for name in names_in_error:
        assert name in str(raised.value)


def test_resolve_storage_connection_uses_the_hosts_connection() -> None:
    """The queue trigger reads AzureWebJobsStorage, so our state and queue clients must too."""
    settings = load_settings(REQUIRED_SETTINGS)
    env = {"AzureWebJobsStorage__accountName": "acct", "Other": "UseDevelopmentStorage=true"}
    resolved = resolve_storage_connection(settings, env, credential=CREDENTIAL)
    assert resolved.name == "AzureWebJobsStorage"
    assert resolved.table_service_uri == "https://acct.table.core.windows.net"


def test_bad_connection_string_is_a_settings_error_naming_the_setting_not_the_secret() -> None:
    connection = StorageConnection("AzureWebJobsStorage", connection_string="AccountKey=s3cret;no=endpoint")
    with pytest.raises(SettingsError) as raised:
        TableStateStore(connection, "table")
    assert "AzureWebJobsStorage" in str(raised.value)
    assert "s3cret" not in str(raised.value)


def test_identity_connection_builds_clients_on_the_service_uris() -> None:
    connection = resolve_storage({"AzureWebJobsStorage__accountName": "acct"}, credential=CREDENTIAL)
    queue = StorageActionQueue(connection, "scale-actions")
    assert queue.poison().name == "scale-actions-poison"
    with TableStateStore(connection, "state") as store:
        assert store.table_name == "state"


@pytest.fixture
def closed_port() -> int:
    """A loopback port with nothing listening: connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


StorageCall = Callable[[TableStateStore, StorageActionQueue], object]


@pytest.mark.parametrize(
    ("call", "what"),
    [
        pytest.param(lambda store, queue: store.get_group("rg/pool"), "create table", id="table-read"),
        pytest.param(lambda store, queue: store.set_unneeded("node-1", T0), "create table", id="table-write"),
        pytest.param(lambda store, queue: queue.send_raw("x"), "create queue", id="queue"),
    ],
)
def test_unreachable_storage_raises_storage_error_naming_call_and_endpoint(
    closed_port: int, call: StorageCall, what: str
) -> None:
    connection = StorageConnection.from_string(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
        f"TableEndpoint=http://127.0.0.1:{closed_port}/devstoreaccount1;"
        f"QueueEndpoint=http://127.0.0.1:{closed_port}/devstoreaccount1;"
    )
    # retry_total=0: fail at the first refused connection instead of backing off for seconds.
    with TableStateStore(connection, "state", retry_total=0) as store, StorageActionQueue(
        connection, "scale-actions", retry_total=0
    ) as queue, pytest.raises(StorageError) as raised:
        call(store, queue)
    assert what in str(raised.value)
    assert f"127.0.0.1:{closed_port}" in str(raised.value)
    assert isinstance(raised.value.__cause__, AzureError)
