"""`StateStore` on Azure Table storage: cooldowns, unneeded-since times and the action ledger.

Adapter module: every method except the key helpers does network I/O through
azure-data-tables. One table holds four partitions:

- `group`:    one row per node group (GroupState); `Deleting` is a JSON object: node name -> action id,
              `Committed` a JSON list of those nodes whose delete is under way, `Reclaim` a JSON
              object: node name -> ISO time pending pods asked for it back, `Stopped` a JSON list of
              the instance ids we deallocated, `Preempted` a JSON object: spot instance id -> the ISO
              time Azure said it would evict it, `Boots` a JSON list of measured boots in seconds,
              `BootRequests` a JSON list of [ISO time, nodes asked for, nodes still to come] (engine.idle).
- `unneeded`: one row per node that is unneeded, with `Since`.
- `ledger`:   one row per scale action (LedgerEntry); `progress` is `ProgressStep` + `ProgressAttempt`.
- `offering`: one row per unavailable offering (its key, `Until`, `Since`, `Kind`, `Code`, `Group`, `Message`).

Row keys are the group id, node name or action id, escaped by `encode_key` because Table
storage forbids `/ \\ # ?` and control characters in keys (group ids are `rg/vmss`); the
original value is kept in a column too, so the table stays readable in Storage Explorer.

Optimistic concurrency follows the port: rows are created with create_entity (first writer
wins) and replaced only with the ETag they were read with (If-Match); losing either race
is an expected outcome and returns False. Any other failure raises StorageError.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import TableClient, TableEntity, UpdateMode

from shared.adapters.storage_connection import (
    StorageConnection,
    StorageError,
    resolve_storage_connection,
    storage_errors,
    table_service_client,
)
from shared.domain import GroupState, OfferingKey, UnavailableOffering
from shared.ports import LedgerEntry, LedgerStatus

if TYPE_CHECKING:
    from collections.abc import Mapping

    from azure.core.credentials import TokenCredential

    from shared.settings import Settings

GROUP_PARTITION = "group"
UNNEEDED_PARTITION = "unneeded"
LEDGER_PARTITION = "ledger"
OFFERING_PARTITION = "offering"

# Characters Table storage rejects in PartitionKey/RowKey, plus '%' so the escaping is reversible.
_FORBIDDEN_IN_KEYS = frozenset("/\\#?%")


def encode_key(value: str) -> str:
    """A Table key for `value`: forbidden characters become %XX (UTF-8 bytes), everything else stays.

    `rg/vmss` becomes `rg%2Fvmss`; decode_key reverses it exactly.
    """
    return "".join(_escape(char) if _needs_escape(char) else char for char in value)


def decode_key(key: str) -> str:
    """The value encode_key was given."""
    return unquote(key, errors="strict")


def _needs_escape(char: str) -> bool:
    code = ord(char)
    # C0 and C1 control characters and DEL are forbidden in keys.
    return char in _FORBIDDEN_IN_KEYS or code < 0x20 or 0x7F <= code <= 0x9F


def _escape(char: str) -> str:
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))


class TableStateStore:
    """`shared.ports.StateStore` on one table; the table is created on first use if missing."""

    def __init__(
        self, connection: StorageConnection, table_name: str, *, create_table: bool = True, **client_options: Any
    ) -> None:
        """`client_options` go to the SDK's TableServiceClient (e.g. retry_total=0 to fail fast in tests)."""
        self._service = table_service_client(connection, **client_options)
        self._table: TableClient = self._service.get_table_client(table_name)
        self._table_name = table_name
        self._endpoint = f"{self._service.url.rstrip('/')}/{table_name}"
        self._table_ready = not create_table

    @classmethod
    def from_settings(
        cls, settings: Settings, *, env: Mapping[str, str], credential: TokenCredential | None = None
    ) -> TableStateStore:
        """The store for `settings.state_table` on the host's storage connection."""
        return cls(resolve_storage_connection(settings, env, credential=credential), settings.state_table)

    @property
    def table_name(self) -> str:
        return self._table_name

    def close(self) -> None:
        self._table.close()
        self._service.close()

    def __enter__(self) -> TableStateStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- groups -------------------------------------------------------------------

    def get_group(self, group_id: str) -> GroupState:
        entity = self._get(GROUP_PARTITION, group_id, what=f"read group {group_id!r}")
        if entity is None:
            return GroupState(group_id)
        return GroupState(
            group_id=group_id,
            last_scale_up=_time_or_none(entity.get("LastScaleUp")),
            last_scale_down=_time_or_none(entity.get("LastScaleDown")),
            last_failure=_time_or_none(entity.get("LastFailure")),
            removing=dict(json.loads(entity.get("Deleting") or "{}")),
            committed=frozenset(json.loads(entity.get("Committed") or "[]")),
            stopped=frozenset(json.loads(entity.get("Stopped") or "[]")),
            stopped_at={i: _parse_iso(at) for i, at in json.loads(entity.get("StoppedAt") or "{}").items()},
            reclaim={node: _parse_iso(at) for node, at in json.loads(entity.get("Reclaim") or "{}").items()},
            backoff_until=_time_or_none(entity.get("BackoffUntil")),
            backoff_failures=int(entity.get("BackoffFailures") or 0),
            backoff_reason=str(entity.get("BackoffReason") or ""),
            throttled_until=_time_or_none(entity.get("ThrottledUntil")),
            preempted={i: _parse_iso(at) for i, at in json.loads(entity.get("Preempted") or "{}").items()},
            boots=tuple(int(seconds) for seconds in json.loads(entity.get("Boots") or "[]")),
            boot_requests=tuple((_parse_iso(at), int(asked), int(left))
                                for at, asked, left in json.loads(entity.get("BootRequests") or "[]")),
            boots_counted_until=_time_or_none(entity.get("BootsCountedUntil")),
            etag=entity.metadata["etag"],
        )

    def update_group(self, state: GroupState) -> bool:
        entity: dict[str, Any] = {
            "PartitionKey": GROUP_PARTITION,
            "RowKey": encode_key(state.group_id),
            "GroupId": state.group_id,
            "Deleting": json.dumps(dict(state.removing), sort_keys=True),
            "Committed": json.dumps(sorted(state.committed)),
            "Stopped": json.dumps(sorted(state.stopped)),
            "StoppedAt": json.dumps({i: _utc(at, "StoppedAt").isoformat() for i, at in state.stopped_at.items()
                                     if i in state.stopped}, sort_keys=True),
            "Reclaim": json.dumps({node: _utc(at, "Reclaim").isoformat() for node, at in state.reclaim.items()},
                                  sort_keys=True),
            "Preempted": json.dumps({i: _utc(at, "Preempted").isoformat() for i, at in state.preempted.items()},
                                    sort_keys=True),
            "BackoffFailures": state.backoff_failures,
            "BackoffReason": state.backoff_reason,
            "Boots": json.dumps(list(state.boots)),
            "BootRequests": json.dumps([[_utc(at, "BootRequests").isoformat(), asked, left]
                                        for at, asked, left in state.boot_requests]),
        }
        for column, moment in (
            ("LastScaleUp", state.last_scale_up),
            ("LastScaleDown", state.last_scale_down),
            ("LastFailure", state.last_failure),
            ("BackoffUntil", state.backoff_until),
            ("ThrottledUntil", state.throttled_until),
            ("BootsCountedUntil", state.boots_counted_until),
        ):
            # Tables stores no nulls: an absent column is None, and REPLACE drops columns not sent.
            if moment is not None:
                entity[column] = _utc(moment, column)
        return self._write(entity, state.etag, what=f"update group {state.group_id!r}")

    # --- unneeded nodes ----------------------------------------------------------------

    def list_unneeded(self) -> dict[str, datetime]:
        entities = self._query_partition(UNNEEDED_PARTITION, what="list unneeded nodes")
        return {decode_key(entity["RowKey"]): _time(entity["Since"]) for entity in entities}

    def set_unneeded(self, node_name: str, since: datetime) -> None:
        entity = {
            "PartitionKey": UNNEEDED_PARTITION,
            "RowKey": encode_key(node_name),
            "Node": node_name,
            "Since": _utc(since, "since"),
        }
        self._ensure_table()
        with storage_errors(f"mark node {node_name!r} unneeded", endpoint=self._endpoint):
            self._table.upsert_entity(entity, mode=UpdateMode.REPLACE)

    def clear_unneeded(self, node_name: str) -> None:
        self._ensure_table()
        with storage_errors(f"clear unneeded node {node_name!r}", endpoint=self._endpoint):
            # The SDK already treats a missing row (404) as success.
            self._table.delete_entity(UNNEEDED_PARTITION, encode_key(node_name))

    # --- unavailable offerings ------------------------------------------------------

    def list_offerings(self) -> list[UnavailableOffering]:
        entities = self._query_partition(OFFERING_PARTITION, what="list unavailable offerings")
        return [_offering_from_entity(entity) for entity in entities]

    def put_offering(self, mark: UnavailableOffering) -> None:
        entity = {
            "PartitionKey": OFFERING_PARTITION,
            "RowKey": encode_key(mark.key.text),
            "Key": mark.key.text,
            "Until": _utc(mark.until, "until"),
            "Since": _utc(mark.since, "since"),
            "Kind": mark.kind,
            "Code": mark.code,
            "Group": mark.group,
            "Message": mark.message,
        }
        self._ensure_table()
        with storage_errors(f"mark offering {mark.key.text!r} unavailable", endpoint=self._endpoint):
            self._table.upsert_entity(entity, mode=UpdateMode.REPLACE)

    def delete_offering(self, key: str) -> None:
        self._ensure_table()
        with storage_errors(f"forget unavailable offering {key!r}", endpoint=self._endpoint):
            self._table.delete_entity(OFFERING_PARTITION, encode_key(key))

    # --- ledger -------------------------------------------------------------------

    def get_ledger_entry(self, action_id: str) -> LedgerEntry | None:
        entity = self._get(LEDGER_PARTITION, action_id, what=f"read ledger entry {action_id!r}")
        return None if entity is None else _ledger_from_entity(entity)

    def create_ledger_entry(self, entry: LedgerEntry) -> bool:
        return self._write(_ledger_to_entity(entry), None, what=f"create ledger entry {entry.action_id!r}")

    def update_ledger_entry(self, entry: LedgerEntry) -> bool:
        if entry.etag is None:
            raise ValueError(f"update_ledger_entry({entry.action_id!r}) needs the etag of the entry it read")
        return self._write(_ledger_to_entity(entry), entry.etag, what=f"update ledger entry {entry.action_id!r}")

    def list_ledger(self) -> list[LedgerEntry]:
        return [_ledger_from_entity(entity) for entity in self._query_partition(LEDGER_PARTITION, what="list ledger")]

    def list_finished_ledger(self, *, updated_before: datetime, limit: int) -> list[LedgerEntry]:
        self._ensure_table()
        with storage_errors("list finished ledger entries", endpoint=self._endpoint):
            # Filtered by the service, paged, and read no further than `limit`: a sweep stays bounded.
            entities = self._table.query_entities(
                "PartitionKey eq @partition and UpdatedAt lt @before and Outcome ne ''",
                parameters={"partition": LEDGER_PARTITION, "before": _utc(updated_before, "updated_before")},
                results_per_page=min(max(limit, 1), 1000),
            )
            return [_ledger_from_entity(entity) for entity in itertools.islice(entities, limit)]

    def delete_ledger_entry(self, entry: LedgerEntry) -> bool:
        if entry.etag is None:
            raise ValueError(f"delete_ledger_entry({entry.action_id!r}) needs the etag of the entry it read")
        self._ensure_table()
        # delete_entity treats 404 as success and raises nothing; the last response's status (read with
        # azure-core's per-call `raw_response_hook`, called once per attempt) tells a row already gone apart.
        statuses: list[int] = []
        with storage_errors(f"delete ledger entry {entry.action_id!r}", endpoint=self._endpoint):
            try:
                self._table.delete_entity(LEDGER_PARTITION, encode_key(entry.action_id), etag=entry.etag,
                                          match_condition=MatchConditions.IfNotModified,
                                          raw_response_hook=lambda response: statuses.append(
                                              response.http_response.status_code))
            except (ResourceModifiedError, ResourceNotFoundError):
                return False  # 412: changed since it was read: leave it to the next sweep
        # 404: deleted since it was read (by another sweeper), which is a change too. When a retry follows a
        # delete whose answer was lost, this says False for our own delete: the row is gone all the same.
        return not (statuses and statuses[-1] == 404)

    # --- plumbing -------------------------------------------------------------------

    def _ensure_table(self) -> None:
        # Once per instance: the function app keeps adapters for the worker's lifetime,
        # so this costs one request per worker rather than one per call.
        if self._table_ready:
            return
        creating = storage_errors(f"create table {self._table_name!r}", endpoint=self._endpoint)
        with creating, contextlib.suppress(ResourceExistsError):
            self._table.create_table()
        self._table_ready = True

    def _get(self, partition: str, value: str, *, what: str) -> TableEntity | None:
        self._ensure_table()
        with storage_errors(what, endpoint=self._endpoint):
            try:
                return self._table.get_entity(partition, encode_key(value))
            except ResourceNotFoundError:
                return None

    def _query_partition(self, partition: str, *, what: str) -> list[TableEntity]:
        self._ensure_table()
        with storage_errors(what, endpoint=self._endpoint):
            # Partition names are constants without quotes, so the filter needs no escaping.
            return list(self._table.query_entities(f"PartitionKey eq '{partition}'"))

    def _write(self, entity: dict[str, Any], etag: str | None, *, what: str) -> bool:
        """Create (etag None, first writer wins) or replace if unchanged since read; False when the race is lost."""
        self._ensure_table()
        with storage_errors(what, endpoint=self._endpoint):
            try:
                if etag is None:
                    self._table.create_entity(entity)
                else:
                    self._table.update_entity(
                        entity, mode=UpdateMode.REPLACE, etag=etag, match_condition=MatchConditions.IfNotModified
                    )
            except ResourceExistsError:
                return False  # 409: another writer created the row first
            except ResourceModifiedError:
                return False  # 412: the row changed since it was read
            except ResourceNotFoundError:
                if etag is None:
                    raise
                return False  # 404: the row was deleted since it was read, which is a change too
        return True


def _offering_from_entity(entity: TableEntity) -> UnavailableOffering:
    return UnavailableOffering(
        key=OfferingKey.parse(entity["Key"]), until=_time(entity["Until"]), since=_time(entity["Since"]),
        kind=entity.get("Kind", ""), code=entity.get("Code", ""), group=entity.get("Group", ""),
        message=entity.get("Message", ""),
    )


def _ledger_to_entity(entry: LedgerEntry) -> dict[str, Any]:
    step, attempt = entry.progress
    return {
        "PartitionKey": LEDGER_PARTITION,
        "RowKey": encode_key(entry.action_id),
        "ActionId": entry.action_id,
        "Kind": entry.kind,
        "Group": entry.group,
        "ProgressStep": step,
        "ProgressAttempt": attempt,
        "Status": entry.status,
        "UpdatedAt": _utc(entry.updated_at, "updated_at"),
        "Outcome": entry.outcome,
        "Operation": entry.operation,
        "Node": entry.node,
        "Duplicates": entry.duplicates,
        "Record": entry.record,
        **({"FaultedSince": _utc(entry.faulted_since, "faulted_since")} if entry.faulted_since else {}),
        **({"StepStartedAt": _utc(entry.step_started_at, "step_started_at")} if entry.step_started_at else {}),
    }


def _ledger_from_entity(entity: TableEntity) -> LedgerEntry:
    try:
        return LedgerEntry(
            action_id=entity["ActionId"],
            kind=entity["Kind"],
            group=entity["Group"],
            progress=(int(entity["ProgressStep"]), int(entity["ProgressAttempt"])),
            status=cast(LedgerStatus, entity["Status"]),
            updated_at=_time(entity["UpdatedAt"]),
            outcome=entity.get("Outcome", ""),
            operation=entity.get("Operation", ""),
            node=entity.get("Node", ""),
            duplicates=int(entity.get("Duplicates", 0)),
            record=entity.get("Record", ""),
            faulted_since=_time(entity["FaultedSince"]) if entity.get("FaultedSince") else None,
            # Rows written before the column existed have none: the step's next claim starts its clock.
            step_started_at=_time(entity["StepStartedAt"]) if entity.get("StepStartedAt") else None,
            etag=entity.metadata["etag"],
        )
    except KeyError as exc:
        raise StorageError(f"ledger row {entity.get('RowKey')!r} lacks column {exc.args[0]!r}") from exc


def _utc(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None:
        # A naive time is ambiguous; storing it as UTC could silently shift cooldowns by hours.
        raise ValueError(f"{name} must be a timezone-aware datetime, got {moment!r}")
    return moment.astimezone(timezone.utc)


def _time(value: datetime) -> datetime:
    # The SDK returns its own datetime subclass; hand out plain UTC datetimes.
    return datetime.combine(value.date(), value.timetz()).astimezone(timezone.utc)


def _time_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else _time(value)


def _parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(timezone.utc)
