"""A StateStore in memory: the `plan` command's read-only overlay and the replay's whole state.

Service-level module with no I/O of its own; with a `base` store it reads through to it
and never writes to it.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime

from shared.domain import DemandHistory, GroupState, LimitReservations, UnavailableOffering
from shared.ports import LedgerEntry, StateStore


class MemoryStateStore:
    """A StateStore in memory; with `base`, an overlay whose writes stay here over that store's reads.

    Compare-and-swap holds as in Table storage (etags on group rows and ledger entries,
    first writer wins a ledger row), so the services' retry loops behave the same; and what
    TableStateStore refuses as a caller bug (a naive time, a ledger write without the etag it
    read) raises the same ValueError here. tests/contract/test_state_store.py holds both to it. Each
    compare-and-swap is atomic under threads, as Table storage's If-Match is across executors.
    """

    def __init__(self, base: StateStore | None = None) -> None:
        self._base = base
        self._groups: dict[str, GroupState] = {}
        self._unneeded: dict[str, datetime | None] | None = None  # None: not read yet; a None value: cleared
        self._ledger: dict[str, LedgerEntry] = {}
        self._deleted: set[str] = set()  # ledger entries deleted here (over the base's)
        self._offerings: dict[str, UnavailableOffering | None] | None = None  # as _unneeded
        self._limits: LimitReservations | None = None  # None: not written here (the base's, or none)
        self._demand: dict[str, DemandHistory] = {}  # rows written here, over the base's
        self._serial = 0
        self._lock = threading.RLock()  # one compare-and-swap at a time

    def _etag(self) -> str:
        with self._lock:
            self._serial += 1
            return f'W/"{self._serial}"'

    def get_group(self, group_id: str) -> GroupState:
        if group_id in self._groups:
            return self._groups[group_id]
        return self._base.get_group(group_id) if self._base else GroupState(group_id)

    def update_group(self, state: GroupState) -> bool:
        _check_group_times(state)
        with self._lock:
            if self.get_group(state.group_id).etag != state.etag:
                return False
            self._groups[state.group_id] = replace(state, etag=self._etag())
            return True

    def get_limit_reservations(self) -> LimitReservations:
        if self._limits is not None:
            return self._limits
        return self._base.get_limit_reservations() if self._base else LimitReservations()

    def update_limit_reservations(self, row: LimitReservations) -> bool:
        for reservation in row.reservations.values():
            _aware(reservation.until, "until")
        with self._lock:
            if self.get_limit_reservations().etag != row.etag:
                return False
            self._limits = replace(row, etag=self._etag())
            return True

    def get_demand(self, group_id: str) -> DemandHistory:
        if group_id in self._demand:
            return self._demand[group_id]
        return self._base.get_demand(group_id) if self._base else DemandHistory(group_id)

    def update_demand(self, history: DemandHistory) -> bool:
        if history.start is not None:
            _aware(history.start, "Start")
        with self._lock:
            if self.get_demand(history.group_id).etag != history.etag:
                return False
            self._demand[history.group_id] = replace(history, etag=self._etag())
            return True

    def list_demand(self) -> list[DemandHistory]:
        base = {h.group_id: h for h in (self._base.list_demand() if self._base else [])}
        return list({**base, **self._demand}.values())

    def _unneeded_map(self) -> dict[str, datetime | None]:
        if self._unneeded is None:
            self._unneeded = dict(self._base.list_unneeded()) if self._base else {}
        return self._unneeded

    def list_unneeded(self) -> dict[str, datetime]:
        return {node: since for node, since in self._unneeded_map().items() if since is not None}

    def set_unneeded(self, node_name: str, since: datetime) -> None:
        _aware(since, "since")
        self._unneeded_map()[node_name] = since

    def clear_unneeded(self, node_name: str) -> None:
        if self._base is None:
            self._unneeded_map().pop(node_name, None)
        else:
            self._unneeded_map()[node_name] = None  # hides the base's row

    def get_ledger_entry(self, action_id: str) -> LedgerEntry | None:
        if action_id in self._deleted:
            return None
        if action_id in self._ledger:
            return self._ledger[action_id]
        return self._base.get_ledger_entry(action_id) if self._base else None

    def create_ledger_entry(self, entry: LedgerEntry) -> bool:
        _check_ledger_times(entry)
        with self._lock:
            if self.get_ledger_entry(entry.action_id) is not None:
                return False
            self._deleted.discard(entry.action_id)
            self._ledger[entry.action_id] = replace(entry, etag=self._etag())
            return True

    def update_ledger_entry(self, entry: LedgerEntry) -> bool:
        if entry.etag is None:
            raise ValueError(f"update_ledger_entry({entry.action_id!r}) needs the etag of the entry it read")
        _check_ledger_times(entry)
        with self._lock:
            current = self.get_ledger_entry(entry.action_id)
            if current is None or current.etag != entry.etag:
                return False
            self._ledger[entry.action_id] = replace(entry, etag=self._etag())
            return True

    def list_ledger(self) -> list[LedgerEntry]:
        base = {e.action_id: e for e in (self._base.list_ledger() if self._base else [])}
        return [e for e in {**base, **self._ledger}.values() if e.action_id not in self._deleted]

    def list_finished_ledger(self, *, updated_before: datetime, limit: int) -> list[LedgerEntry]:
        _aware(updated_before, "updated_before")
        finished = [e for e in self.list_ledger() if e.outcome and e.updated_at < updated_before]
        return sorted(finished, key=lambda e: e.updated_at)[:limit]

    def delete_ledger_entry(self, entry: LedgerEntry) -> bool:
        if entry.etag is None:
            raise ValueError(f"delete_ledger_entry({entry.action_id!r}) needs the etag of the entry it read")
        with self._lock:
            current = self.get_ledger_entry(entry.action_id)
            if current is None or current.etag != entry.etag:
                return False
            self._ledger.pop(entry.action_id, None)
            self._deleted.add(entry.action_id)  # hides the base's row too
            return True


    def _offering_map(self) -> dict[str, UnavailableOffering | None]:
        if self._offerings is None:
            self._offerings = {m.key.text: m for m in self._base.list_offerings()} if self._base else {}
        return self._offerings

    def list_offerings(self) -> list[UnavailableOffering]:
        return [m for m in self._offering_map().values() if m is not None]

    def put_offering(self, mark: UnavailableOffering) -> None:
        _aware(mark.until, "until")
        _aware(mark.since, "since")
        self._offering_map()[mark.key.text] = mark

    def delete_offering(self, key: str) -> None:
        if self._base is None:
            self._offering_map().pop(key, None)
        else:
            self._offering_map()[key] = None  # hides the base's row


def _aware(moment: datetime, name: str) -> None:
    """As TableStateStore: a naive time is ambiguous, and storing it as UTC could shift cooldowns by hours."""
    if moment.tzinfo is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {moment!r}")


def _check_group_times(state: GroupState) -> None:
    # The times TableStateStore writes: deallocation times only for instances still stopped.
    for name, moment in (("LastScaleUp", state.last_scale_up), ("LastScaleDown", state.last_scale_down),
                         ("LastFailure", state.last_failure), ("BackoffUntil", state.backoff_until),
                         ("ThrottledUntil", state.throttled_until),
                         ("BootsCountedUntil", state.boots_counted_until), ("AtomicSince", state.atomic_since)):
        if moment is not None:
            _aware(moment, name)
    for instance, moment in state.stopped_at.items():
        if instance in state.stopped:
            _aware(moment, "StoppedAt")
    for moment in state.reclaim.values():
        _aware(moment, "Reclaim")
    for moment in state.preempted.values():
        _aware(moment, "Preempted")
    for moment, *_ in state.boot_requests:
        _aware(moment, "BootRequests")
    for moment, *_ in state.start_requests:
        _aware(moment, "StartRequests")
    for replacement in state.replacing.values():
        _aware(replacement.since, "Replacing")
        if replacement.given_up_at is not None:
            _aware(replacement.given_up_at, "Replacing given_up_at")


def _check_ledger_times(entry: LedgerEntry) -> None:
    _aware(entry.updated_at, "updated_at")
    if entry.faulted_since:
        _aware(entry.faulted_since, "faulted_since")
    if entry.step_started_at:
        _aware(entry.step_started_at, "step_started_at")
