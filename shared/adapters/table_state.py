"""`StateStore` on Azure Table storage: cooldowns, unneeded-since times and the action ledger.

Adapter module: every method except the key helpers does network I/O through
azure-data-tables. One table holds six partitions:

- `group`:    one row per node group (GroupState); `Deleting` is a JSON object: node name -> action id,
              `Committed` a JSON list of those nodes whose delete is under way, `Reclaim` a JSON
              object: node name -> ISO time pending pods asked for it back, `Stopped` a JSON list of
              the instance ids we deallocated, `Preempted` a JSON object: spot instance id -> the ISO
              time Azure said it would evict it, `Boots` a JSON list of measured boots in seconds,
              `BootRequests` a JSON list of [ISO time, nodes asked for, nodes still to come] (engine.idle),
              `Starts` a JSON list of measured starts in seconds, `StartRequests` a JSON list of
              [ISO time, [instance ids started], [ids not yet Ready]], `Replacing` a JSON object: node name ->
              {reason, toGroup, since (ISO), actionId, count, together, savingPerHour, detail, givenUpAt (ISO,
              only on a given-up replacement's tombstone; rows written before it read as under way)} (the nodes
              being replaced, engine.replacement).
- `unneeded`: one row per node that is unneeded, with `Since`.
- `ledger`:   one row per scale action (LedgerEntry); `progress` is `ProgressStep` + `ProgressAttempt`.
- `offering`: one row per unavailable offering (its key, `Until`, `Since`, `Kind`, `Code`, `Group`, `Message`).
- `limits`:   one row, `cluster`: `Reservations`, a JSON object: action id -> the room under the cluster-wide
              limits that scale-up holds (`group`, `target`, `nodes`, `cores`, `memory`, ISO `until`).
- `demand`:   one row per node group (DemandHistory, engine.forecast): `Start`, the whole UTC hour of the first
              peak, and `Peaks`, a JSON list of hourly peaks (numbers, null for an hour not observed; at most
              5 weeks of hours, a few KiB).

A column that cannot be read raises UnreadableRow naming the table, the row's keys and the column; listings
leave such a row out (logged) so that one bad row does not hide the others.

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
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar, cast, get_args
from urllib.parse import unquote

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import TableClient, TableEntity, UpdateMode

from shared.adapters.storage_connection import (
    StorageConnection,
    resolve_storage_connection,
    storage_errors,
    table_service_client,
)

log = logging.getLogger(__name__)
from shared.domain import (
    DemandHistory,
    GroupState,
    LimitReservation,
    LimitReservations,
    OfferingKey,
    Replacement,
    UnavailableOffering,
)
from shared.ports import LedgerEntry, LedgerStatus, UnreadableRow

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

    from shared.settings import Settings

GROUP_PARTITION = "group"
UNNEEDED_PARTITION = "unneeded"
LEDGER_PARTITION = "ledger"
OFFERING_PARTITION = "offering"
LIMITS_PARTITION = "limits"
LIMITS_ROW = "cluster"
DEMAND_PARTITION = "demand"

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
        read = _Columns(self._table_name, entity)
        return GroupState(
            group_id=group_id,
            last_scale_up=read("LastScaleUp", _time_or_none),
            last_scale_down=read("LastScaleDown", _time_or_none),
            last_failure=read("LastFailure", _time_or_none),
            removing=read("Deleting", lambda text: _json_map(text, _text)),
            committed=read("Committed", lambda text: frozenset(_json_list(text, _text))),
            stopped=read("Stopped", lambda text: frozenset(_json_list(text, _text))),
            stopped_at=read("StoppedAt", lambda text: _json_map(text, _parse_iso)),
            reclaim=read("Reclaim", lambda text: _json_map(text, _parse_iso)),
            backoff_until=read("BackoffUntil", _time_or_none),
            backoff_failures=read("BackoffFailures", lambda value: _whole(value or 0)),
            backoff_reason=str(entity.get("BackoffReason") or ""),
            throttled_until=read("ThrottledUntil", _time_or_none),
            preempted=read("Preempted", lambda text: _json_map(text, _parse_iso)),
            boots=read("Boots", lambda text: tuple(_json_list(text, _whole))),
            boot_requests=read("BootRequests", lambda text: tuple(
                (_parse_iso(at), _whole(asked), _whole(left)) for at, asked, left in _json_list(text, tuple))),
            boots_counted_until=read("BootsCountedUntil", _time_or_none),
            starts=read("Starts", lambda text: tuple(_json_list(text, _whole))),
            start_requests=read("StartRequests", lambda text: tuple(_json_list(text, _start_request))),
            atomic_holder=str(entity.get("AtomicHolder") or ""),
            atomic_since=read("AtomicSince", _time_or_none),
            replacing=read("Replacing", lambda text: {node: _replacement(node, body)
                                                      for node, body in _json_map(text, lambda body: body).items()}),
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
            "Starts": json.dumps(list(state.starts)),
            "StartRequests": json.dumps([[_utc(at, "StartRequests").isoformat(), list(started), list(left)]
                                         for at, started, left in state.start_requests]),
            "AtomicHolder": state.atomic_holder,
            "Replacing": _replacing_text(state.replacing),
        }
        for column, moment in (
            ("LastScaleUp", state.last_scale_up),
            ("LastScaleDown", state.last_scale_down),
            ("LastFailure", state.last_failure),
            ("BackoffUntil", state.backoff_until),
            ("ThrottledUntil", state.throttled_until),
            ("BootsCountedUntil", state.boots_counted_until),
            ("AtomicSince", state.atomic_since),
        ):
            # Tables stores no nulls: an absent column is None, and REPLACE drops columns not sent.
            if moment is not None:
                entity[column] = _utc(moment, column)
        return self._write(entity, state.etag, what=f"update group {state.group_id!r}")

    # --- unneeded nodes ----------------------------------------------------------------

    def list_unneeded(self) -> dict[str, datetime]:
        entities = self._query_partition(UNNEEDED_PARTITION, what="list unneeded nodes")
        read = self._unneeded_from_entity
        return dict(_readable(entities, read))

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
        return _readable(entities, lambda entity: _offering_from_entity(entity, self._table_name))

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
        return None if entity is None else _ledger_from_entity(entity, self._table_name)

    def create_ledger_entry(self, entry: LedgerEntry) -> bool:
        return self._write(_ledger_to_entity(entry), None, what=f"create ledger entry {entry.action_id!r}")

    def update_ledger_entry(self, entry: LedgerEntry) -> bool:
        if entry.etag is None:
            raise ValueError(f"update_ledger_entry({entry.action_id!r}) needs the etag of the entry it read")
        return self._write(_ledger_to_entity(entry), entry.etag, what=f"update ledger entry {entry.action_id!r}")

    def list_ledger(self) -> list[LedgerEntry]:
        return _readable(self._query_partition(LEDGER_PARTITION, what="list ledger"),
                         lambda entity: _ledger_from_entity(entity, self._table_name))

    def list_finished_ledger(self, *, updated_before: datetime, limit: int) -> list[LedgerEntry]:
        self._ensure_table()
        with storage_errors("list finished ledger entries", endpoint=self._endpoint):
            # Filtered by the service, paged, and read no further than `limit`: a sweep stays bounded.
            entities = self._table.query_entities(
                "PartitionKey eq @partition and UpdatedAt lt @before and Outcome ne ''",
                parameters={"partition": LEDGER_PARTITION, "before": _utc(updated_before, "updated_before")},
                results_per_page=min(max(limit, 1), 1000),
            )
            return _readable(itertools.islice(entities, limit),
                             lambda entity: _ledger_from_entity(entity, self._table_name))

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

    # --- the limits row ------------------------------------------------------------

    def get_limit_reservations(self) -> LimitReservations:
        entity = self._get(LIMITS_PARTITION, LIMITS_ROW, what="read the limits row")
        if entity is None:
            return LimitReservations()
        reservations = _Columns(self._table_name, entity)("Reservations", _reservations)
        return LimitReservations(reservations, etag=entity.metadata["etag"])

    def update_limit_reservations(self, row: LimitReservations) -> bool:
        entity = {"PartitionKey": LIMITS_PARTITION, "RowKey": LIMITS_ROW, "Reservations": _reservations_text(row)}
        return self._write(entity, row.etag, what="update the limits row")

    # --- demand by hour ---------------------------------------------------------------

    def get_demand(self, group_id: str) -> DemandHistory:
        entity = self._get(DEMAND_PARTITION, group_id, what=f"read the demand of group {group_id!r}")
        if entity is None:
            return DemandHistory(group_id)
        return _demand_from_entity(entity, self._table_name, group_id)

    def update_demand(self, history: DemandHistory) -> bool:
        entity: dict[str, Any] = {
            "PartitionKey": DEMAND_PARTITION,
            "RowKey": encode_key(history.group_id),
            "GroupId": history.group_id,
            # Compact: no spaces, whole numbers without a fraction (a peak of nodes usually is one).
            "Peaks": json.dumps([_compact(p) for p in history.peaks], separators=(",", ":")),
        }
        if history.start is not None:
            entity["Start"] = _utc(history.start, "Start")
        return self._write(entity, history.etag, what=f"update the demand of group {history.group_id!r}")

    def list_demand(self) -> list[DemandHistory]:
        return _readable(self._query_partition(DEMAND_PARTITION, what="list demand rows"),
                         lambda entity: _demand_from_entity(entity, self._table_name,
                                                            decode_key(entity["RowKey"])))

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

    def _unneeded_from_entity(self, entity: TableEntity) -> tuple[str, datetime]:
        return decode_key(entity["RowKey"]), _Columns(self._table_name, entity)("Since", _time, required=True)

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


def _offering_from_entity(entity: TableEntity, table: str) -> UnavailableOffering:
    read = _Columns(table, entity)
    return UnavailableOffering(
        key=read("Key", lambda text: OfferingKey.parse(_text(text)), required=True),
        until=read("Until", _time, required=True), since=read("Since", _time, required=True),
        kind=read("Kind", _optional_text), code=read("Code", _optional_text), group=read("Group", _optional_text),
        message=read("Message", _optional_text),
    )


def _demand_from_entity(entity: TableEntity, table: str, group_id: str) -> DemandHistory:
    read = _Columns(table, entity)
    return DemandHistory(group_id=group_id, start=read("Start", _time_or_none),
                         peaks=read("Peaks", lambda text: tuple(_json_list(text, _peak))),
                         etag=entity.metadata["etag"])


def _peak(value: object) -> float | None:
    """An hourly peak: a number at least 0, or null for an hour not observed."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
        raise ValueError(f"not a peak of nodes: {value!r:.60}")
    return value


def _compact(value: float | None) -> float | None:
    return int(value) if value is not None and float(value).is_integer() else value


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


def _ledger_from_entity(entity: TableEntity, table: str) -> LedgerEntry:
    """The entry a ledger row holds; UnreadableRow naming the row and column when one cannot be read."""
    read = _Columns(table, entity)
    return LedgerEntry(
        action_id=read("ActionId", _text, required=True),
        kind=read("Kind", _text, required=True),
        group=read("Group", _text, required=True),
        progress=(read("ProgressStep", _whole, required=True), read("ProgressAttempt", _whole, required=True)),
        status=read("Status", _status, required=True),
        updated_at=read("UpdatedAt", _time, required=True),
        outcome=read("Outcome", _optional_text),
        operation=read("Operation", _optional_text),
        node=read("Node", _optional_text),
        duplicates=read("Duplicates", lambda value: _whole(value or 0)),
        record=read("Record", _optional_text),
        faulted_since=read("FaultedSince", lambda value: _time(value) if value else None),
        # Rows written before the column existed have none: the step's next claim starts its clock.
        step_started_at=read("StepStartedAt", lambda value: _time(value) if value else None),
        etag=entity.metadata["etag"],
    )


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


T = TypeVar("T")


class _Columns:
    """One row's columns read one at a time: a value that cannot be read raises UnreadableRow naming the table,
    the row's keys and the column, never a bare JSONDecodeError or ValueError."""

    def __init__(self, table: str, entity: Mapping[str, Any]) -> None:
        self._table = table
        self._entity = entity

    def __call__(self, column: str, parse: Callable[[Any], T], *, required: bool = False) -> T:
        value = self._entity.get(column)
        if required and value is None:
            raise self._unreadable(column, "the column is missing")
        try:
            return parse(value)
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
            raise self._unreadable(column, f"{type(exc).__name__}: {str(exc)[:200]} (value {value!r:.120})") from exc

    def _unreadable(self, column: str, problem: str) -> UnreadableRow:
        return UnreadableRow(table=self._table, partition_key=str(self._entity.get("PartitionKey", "")),
                             row_key=str(self._entity.get("RowKey", "")), column=column, problem=problem)


def _readable(entities: Iterable[TableEntity], parse: Callable[[TableEntity], T]) -> list[T]:
    """Each row parsed. A row that cannot be read is logged by name and left out (and left as it is): one bad
    row must not hide every other row of its partition from the polls."""
    rows = []
    for entity in entities:
        try:
            rows.append(parse(entity))
        except UnreadableRow as exc:
            log.error("%s; the row is left out of the listing until it is repaired or deleted", exc)
    return rows


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value


def _optional_text(value: object) -> str:
    return "" if value is None else _text(value)


def _whole(value: object) -> int:
    """A whole number stored as a number or as decimal digits; a bool, a fraction or other text is refused."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise ValueError(f"not a whole number: {value!r:.60}")


def _start_request(item: object) -> tuple[datetime, tuple[str, ...], tuple[str, ...]]:
    """One of `StartRequests`: [ISO time, [instance ids started], [ids not yet Ready]]."""
    if not isinstance(item, list) or len(item) != 3 or not all(isinstance(ids, list) for ids in item[1:]):
        raise ValueError(f"expected [time, [ids], [ids]], got {item!r:.80}")
    at, started, left = item
    return _parse_iso(_text(at)), tuple(_text(i) for i in started), tuple(_text(i) for i in left)


def _status(value: object) -> LedgerStatus:
    if value not in get_args(LedgerStatus):
        raise ValueError(f"not one of {', '.join(get_args(LedgerStatus))}")
    return cast(LedgerStatus, value)


def _json_map(text: object, parse: Callable[[Any], T]) -> dict[str, T]:
    """A JSON object column (absent or empty: no entries), its values parsed."""
    loaded = json.loads(_text(text)) if text else {}
    if not isinstance(loaded, dict):
        raise TypeError(f"expected a JSON object, got {type(loaded).__name__}")
    return {_text(key): parse(value) for key, value in loaded.items()}


def _json_list(text: object, parse: Callable[[Any], T]) -> list[T]:
    """A JSON list column (absent or empty: no items), each item parsed."""
    loaded = json.loads(_text(text)) if text else []
    if not isinstance(loaded, list):
        raise TypeError(f"expected a JSON list, got {type(loaded).__name__}")
    return [parse(item) for item in loaded]


def _reservation(action_id: str, body: Any) -> LimitReservation:
    if not isinstance(body, dict):
        raise TypeError(f"reservation {action_id!r} is not a JSON object")
    return LimitReservation(action_id=action_id, group_id=_text(body["group"]), target=_whole(body["target"]),
                            nodes=_whole(body["nodes"]), cores=_whole(body["cores"]),
                            memory_bytes=_whole(body["memory"]), until=_parse_iso(_text(body["until"])))


def _reservations(text: object) -> dict[str, LimitReservation]:
    return {action_id: _reservation(action_id, body) for action_id, body in _json_map(text, lambda body: body).items()}


def _reservations_text(row: LimitReservations) -> str:
    return json.dumps({r.action_id: {"group": r.group_id, "target": r.target, "nodes": r.nodes, "cores": r.cores,
                                     "memory": r.memory_bytes, "until": _utc(r.until, "until").isoformat()}
                       for r in row.reservations.values()}, sort_keys=True)


def _replacement(node: str, body: Any) -> Replacement:
    """One `Replacing` entry: the node's replacement, as `_replacing_text` writes it."""
    if not isinstance(body, dict):
        raise TypeError(f"replacement of {node!r} is not a JSON object")
    together = body.get("together", [])
    if not isinstance(together, list):
        raise TypeError(f"replacement of {node!r}: together is not a JSON list")
    saving = body.get("savingPerHour", 0)
    if isinstance(saving, bool) or not isinstance(saving, (int, float)):
        raise ValueError(f"replacement of {node!r}: savingPerHour is not a number: {saving!r:.60}")
    return Replacement(node=node, reason=_text(body["reason"]), to_group=_text(body["toGroup"]),
                       since=_parse_iso(_text(body["since"])), action_id=_optional_text(body.get("actionId")),
                       count=_whole(body.get("count", 1)), together=tuple(_text(n) for n in together),
                       saving_per_hour=float(saving), detail=_optional_text(body.get("detail")),
                       given_up_at=(None if body.get("givenUpAt") is None
                                    else _parse_iso(_text(body["givenUpAt"]))))


def _replacing_text(replacing: Mapping[str, Replacement]) -> str:
    return json.dumps({node: {"reason": r.reason, "toGroup": r.to_group, "since": _utc(r.since, "Replacing").isoformat(),
                              "actionId": r.action_id, "count": r.count, "together": list(r.together),
                              "savingPerHour": r.saving_per_hour, "detail": r.detail,
                              # Only on a tombstone: a row stays readable by code that predates it.
                              **({} if r.given_up_at is None
                                 else {"givenUpAt": _utc(r.given_up_at, "Replacing givenUpAt").isoformat()})}
                       for node, r in replacing.items()}, sort_keys=True)
