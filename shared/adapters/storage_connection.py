"""Where the autoscaler's Table and Queue storage is, and how to build SDK clients for it.

Adapter module. Resolving a connection only reads the mapping it is given (normally
os.environ); building a client does no I/O either, the SDK connects on the first call.
`storage_errors` turns Azure SDK exceptions into `StorageError` for the other storage
adapters (table_state, action_queue).

Connections follow the Azure Functions convention. We use the host's own connection,
`AzureWebJobsStorage`, because the queue trigger reads from it: the setting holds a connection string
(`UseDevelopmentStorage=true` for Azurite), or is absent and `<name>__tableServiceUri`
plus `<name>__queueServiceUri` (or `<name>__accountName`) select identity-based access
with a TokenCredential.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from azure.core.exceptions import AzureError, HttpResponseError, ServiceRequestError
from azure.data.tables import TableServiceClient
from azure.storage.queue import QueueClient, TextBase64DecodePolicy, TextBase64EncodePolicy

from shared.settings import SettingsError

# The Functions host reads the queue trigger from this connection; our state and queue
# clients use the same one so that both always point at one storage account.
HOST_CONNECTION = "AzureWebJobsStorage"

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

    from shared.settings import Settings

DEFAULT_CONNECTION = "AzureWebJobsStorage"  # the Functions host's own storage connection


class StorageError(RuntimeError):
    """A Table or Queue storage call failed in a way the caller did not expect; the message names the call."""


@dataclass(frozen=True, slots=True)
class StorageConnection:
    """Either a connection string, or service URIs plus the TokenCredential to use with them.

    `name` is the connection's setting name, used in error messages only.
    """

    name: str
    connection_string: str = ""
    table_service_uri: str = ""
    queue_service_uri: str = ""
    credential: TokenCredential | None = field(default=None, repr=False, compare=False)

    @property
    def uses_identity(self) -> bool:
        return not self.connection_string

    @classmethod
    def from_string(cls, connection_string: str, *, name: str = "connection string") -> StorageConnection:
        """A connection given directly (tests, demos): `UseDevelopmentStorage=true` or a full string."""
        if not connection_string.strip():
            raise ValueError("a storage connection string must not be empty")
        return cls(name=name, connection_string=connection_string.strip())


def resolve_storage(
    env: Mapping[str, str], *, connection: str = DEFAULT_CONNECTION, credential: TokenCredential | None = None
) -> StorageConnection:
    """The storage connection named `connection`, read from `env` in the Functions convention.

    A connection string in `env[connection]` wins; otherwise `<connection>__tableServiceUri`
    and `<connection>__queueServiceUri` (or `<connection>__accountName`) are used with
    `credential`, which is then required. Raises SettingsError naming the settings looked for.
    """
    connection_string = env.get(connection, "").strip()
    if connection_string:
        return StorageConnection(name=connection, connection_string=connection_string)
    account = env.get(f"{connection}__accountName", "").strip()
    table_uri = env.get(f"{connection}__tableServiceUri", "").strip()
    queue_uri = env.get(f"{connection}__queueServiceUri", "").strip()
    if account:
        table_uri = table_uri or f"https://{account}.table.core.windows.net"
        queue_uri = queue_uri or f"https://{account}.queue.core.windows.net"
    if table_uri and queue_uri:
        if credential is None:
            raise SettingsError(
                [f"{connection}: identity-based storage (service URIs, no connection string) needs a credential"]
            )
        return StorageConnection(
            name=connection, table_service_uri=table_uri, queue_service_uri=queue_uri, credential=credential
        )
    if table_uri or queue_uri:
        missing = f"{connection}__queueServiceUri" if table_uri else f"{connection}__tableServiceUri"
        raise SettingsError(
            [f"{missing}: missing; identity-based storage needs both service URIs (or {connection}__accountName)"]
        )
    raise SettingsError(
        [
            f"{connection}: missing: set it to a storage connection string (UseDevelopmentStorage=true for "
            f"Azurite), or set {connection}__tableServiceUri and {connection}__queueServiceUri (or "
            f"{connection}__accountName) for identity-based access"
        ]
    )


class _CheckOnly:
    """Stands in for the credential while settings are only checked: nothing is ever asked of it."""


def storage_problems(env: Mapping[str, str]) -> list[str]:
    """What is wrong with the host's storage connection settings, found without connecting.

    The same rules `resolve_storage` and the SDK's connection-string parser apply when the app
    connects, run at start so that they are reported together with every other setting.
    """
    try:
        connection = resolve_storage(env, connection=HOST_CONNECTION, credential=_CheckOnly())  # type: ignore[arg-type]
        if not connection.uses_identity:
            queue_client(connection, "settings-check").close()  # parses the string; the SDK connects on first call
    except SettingsError as exc:
        return list(exc.problems)
    return []


def resolve_storage_connection(
    settings: Settings, env: Mapping[str, str], *, credential: TokenCredential | None = None
) -> StorageConnection:
    """resolve_storage for the host's connection, which the queue trigger also reads."""
    return resolve_storage(env, connection=HOST_CONNECTION, credential=credential)


def table_service_client(connection: StorageConnection, **client_options: Any) -> TableServiceClient:
    """A TableServiceClient; `client_options` go to the SDK (e.g. retry_total)."""
    if not connection.uses_identity:
        with _bad_connection_string(connection):
            return TableServiceClient.from_connection_string(connection.connection_string, **client_options)
    return TableServiceClient(
        endpoint=connection.table_service_uri, credential=_require_credential(connection), **client_options
    )


def queue_client(
    connection: StorageConnection,
    queue_name: str,
    *,
    base64: bool = True,
    **client_options: Any,
) -> QueueClient:
    """A QueueClient for `queue_name`.

    With base64 (the default) messages are written and read as base64 text, which is
    what the Functions host's queue trigger expects (host.json messageEncoding base64).
    """
    # A queue call moves a few KiB: a stalled endpoint must surface as an error within seconds (and be
    # retried by the caller), not after azure-core's default of minutes per attempt.
    client_options.setdefault("connection_timeout", 10)
    client_options.setdefault("read_timeout", 30)
    if base64:
        client_options.setdefault("message_encode_policy", TextBase64EncodePolicy())
        client_options.setdefault("message_decode_policy", TextBase64DecodePolicy())
    if not connection.uses_identity:
        with _bad_connection_string(connection):
            return QueueClient.from_connection_string(connection.connection_string, queue_name, **client_options)
    return QueueClient(
        connection.queue_service_uri, queue_name, credential=_require_credential(connection), **client_options
    )


@contextmanager
def storage_errors(what: str, *, endpoint: str) -> Iterator[None]:
    """Re-raise any Azure SDK error inside the block as StorageError naming `what` and `endpoint`.

    Expected outcomes (a 409 or 412 that means "someone else won") must be caught inside
    the block, before they reach this.
    """
    try:
        yield
    except AzureError as exc:
        raise StorageError(f"{what} failed at {endpoint}: {describe_azure_error(exc)}") from exc


def describe_azure_error(exc: AzureError) -> str:
    """One line: HTTP status and service error code where there are some, else the SDK's message."""
    if isinstance(exc, HttpResponseError):
        code = getattr(exc, "error_code", None) or ""
        code = getattr(code, "value", code)  # the SDKs' error-code enums: print Azure's own spelling
        reason = getattr(exc, "reason", None) or ""
        first_line = (exc.message or "").splitlines()[0] if exc.message else ""
        parts = [f"HTTP {exc.status_code}" if exc.status_code else "", str(code), reason or first_line]
        return " ".join(part for part in parts if part) or type(exc).__name__
    if isinstance(exc, ServiceRequestError):
        return f"could not connect ({exc.message}); is storage (locally Azurite: python -m devtools.azurite) running?"
    return f"{type(exc).__name__}: {exc.message}"


def _require_credential(connection: StorageConnection) -> TokenCredential:
    if connection.credential is None:
        raise ValueError(
            f"storage connection {connection.name!r} is identity-based (service URIs, no connection string): "
            "a TokenCredential is required"
        )
    return connection.credential


@contextmanager
def _bad_connection_string(connection: StorageConnection) -> Iterator[None]:
    # The SDKs raise a bare ValueError; name the setting so the operator knows what to fix,
    # without echoing the string itself (it may hold an account key).
    try:
        yield
    except ValueError as exc:
        raise SettingsError([f"{connection.name}: not a usable storage connection string ({exc})"]) from exc
