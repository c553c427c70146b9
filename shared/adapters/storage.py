"""One import point for the storage adapters: connection resolution, the state table and the action queue.

Adapter module (the classes it re-exports do network I/O); the code lives in
storage_connection, table_state and action_queue.
"""

from __future__ import annotations

from shared.adapters.action_queue import ReceivedMessage, StorageActionQueue
from shared.adapters.storage_connection import (
    StorageConnection,
    StorageError,
    queue_client,
    resolve_storage,
    resolve_storage_connection,
    table_service_client,
)
from shared.adapters.table_state import TableStateStore, decode_key, encode_key

__all__ = [
    "ReceivedMessage",
    "StorageActionQueue",
    "StorageConnection",
    "StorageError",
    "TableStateStore",
    "decode_key",
    "encode_key",
    "queue_client",
    "resolve_storage",
    "resolve_storage_connection",
    "table_service_client",
]
