"""StorageQueueBacklog: a queue's length in Azurite, and a clear UsageUnavailable when it cannot be read."""

from __future__ import annotations

import pytest
from azure.storage.queue import QueueClient

from shared.adapters.backlog_queue import StorageQueueBacklog
from shared.adapters.storage_connection import StorageConnection
from shared.ports import UsageUnavailable


def test_the_backlog_is_the_number_of_messages_waiting(storage_connection: StorageConnection, queue_name: str) -> None:
    with QueueClient.from_connection_string(storage_connection.connection_string, queue_name) as queue:
        queue.create_queue()
        backlog = StorageQueueBacklog(storage_connection, queue_name)
        assert backlog.get_backlog() == 0
        for frame in range(7):
            queue.send_message(f"frame-{frame}")
        assert backlog.get_backlog() == 7
        queue.receive_message()  # taken but not done: still part of the work waiting
        assert backlog.get_backlog() == 7
        backlog.close()


def test_a_missing_queue_is_usage_unavailable_naming_the_queue(storage_connection: StorageConnection,
                                                               queue_name: str) -> None:
    backlog = StorageQueueBacklog(storage_connection, queue_name)
    with pytest.raises(UsageUnavailable, match=f"queue {queue_name}.*404"):
        backlog.get_backlog()
