"""The `BacklogSource` port over an Azure Storage queue's length (LOAD_BACKLOG_QUEUE), with azure-storage-queue.

Adapter module: `get_backlog` reads the queue's properties (one call), whose
`approximate_message_count` is the service's own count of messages waiting (visible or not).
The queue lives in the app's storage account and is reached with the app's connection (managed
identity in Azure; the identity needs *Storage Queue Data Reader* on it).
"""

from __future__ import annotations

from typing import Any

from azure.core.exceptions import AzureError

from shared.adapters.storage_connection import StorageConnection, describe_azure_error, queue_client
from shared.ports import UsageUnavailable


class StorageQueueBacklog:
    def __init__(self, connection: StorageConnection, queue_name: str, **client_options: Any) -> None:
        self._queue_name = queue_name
        self._client = queue_client(connection, queue_name, base64=False, retry_total=1, **client_options)

    @property
    def name(self) -> str:
        return f"queue {self._queue_name}"

    def get_backlog(self) -> int:
        try:
            properties = self._client.get_queue_properties()
        except AzureError as exc:
            raise UsageUnavailable(f"length of {self.name}: {describe_azure_error(exc)}") from exc
        return int(properties.approximate_message_count or 0)

    def close(self) -> None:
        self._client.close()
