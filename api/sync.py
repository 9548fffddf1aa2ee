"""The service layer: create, update, delete and read changes.

Orchestrates the domain rules (validation, tokens, cursors) and a `Store`. Knows
nothing of GraphQL or HTTP.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from api.domain.cursor import CursorCodec, Position
from api.domain.errors import (
    BadUserInput,
    Conflict,
    NotFound,
    StaleHead,
    TransactionConflict,
    Unavailable,
    WriteContention,
)
from api.domain.item_types import ItemType, apply_changes, check_identifier, check_size
from api.domain.records import Record
from api.domain.tokens import check_token, new_entity_id, next_token, token_ms, token_time

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
# A stale head costs one retry with a later token; a busy store costs a short,
# jittered wait. Past this many attempts the client is told to retry later.
MAX_WRITE_ATTEMPTS = 10
# A write that lost a race proposes its next token up to RETRY_LEAD_MS ahead of
# the head it lost to, doubling with each loss (capped).
RETRY_LEAD_MS = 10
MAX_RETRY_LEAD_MS = 1000
# A server whose clock is more than this behind a tenant's head corrects it by the gap.
SKEW_THRESHOLD_MS = 1000
MAX_SKEW_MS = 10 * 60 * 1000


class Store(Protocol):
    def head(self, tenant_id: str) -> str | None: ...
    def get(self, tenant_id: str, entity_id: str) -> Record | None: ...
    def changes(
        self, tenant_id: str, after: str | None, upper: str, limit: int
    ) -> tuple[list[Record], bool]: ...
    def create(self, record: Record) -> None: ...
    def replace(self, record: Record, expected_token: str) -> None: ...


@dataclass(frozen=True)
class Page:
    items: list[Record]
    cursor: str | None
    change_token: str | None


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


_conflict_wait = wait_random_exponential(multiplier=0.01, max=0.25)
_stale_head_wait = wait_random_exponential(multiplier=0.002, max=0.05)


def _contention_wait(state: RetryCallState) -> float:
    # A stale head is retried at once with a later token, and with a little
    # jitter once it keeps losing, so that busy writers stop colliding; a
    # transaction conflict (another writer on the same item) waits longer.
    outcome = state.outcome
    if outcome is not None and isinstance(outcome.exception(), TransactionConflict):
        return float(_conflict_wait(state))
    return float(_stale_head_wait(state)) if state.attempt_number > 2 else 0.0


class _TenantLocks:
    """One lock per tenant, forgotten when no writer holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, tenant_id: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(tenant_id, (threading.Lock(), 0))
            self._locks[tenant_id] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[tenant_id]
                if users == 1:
                    del self._locks[tenant_id]
                else:
                    self._locks[tenant_id] = (lock, users - 1)


class SyncService:
    def __init__(
        self,
        store: Store,
        cursors: CursorCodec,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._store = store
        self._cursors = cursors
        self._clock_ms = clock_ms
        # Latest head seen per tenant, so a token can be proposed without a read.
        # Only a hint: the store's condition on the head is what orders writes.
        self._heads: dict[str, str] = {}
        self._skew_ms = 0
        # Writers of one tenant in this process take turns: the store orders them
        # anyway, and a write that is bound to lose a race still costs capacity.
        self._tenant_locks = _TenantLocks()

    # --- reads -------------------------------------------------------------

    def get(self, item_type: ItemType, tenant_id: str, entity_id: str) -> Record | None:
        check_identifier(tenant_id, "tenantID")
        check_identifier(entity_id, "id")
        record = self._store.get(tenant_id, entity_id)
        if record is None or record.deleted or record.item_type is not item_type:
            return None
        return record

    def changes(
        self,
        tenant_id: str,
        since: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> Page:
        """A page of the tenant's changes after `since` (or after `cursor`), in token order."""
        check_identifier(tenant_id, "tenantID")
        limit = DEFAULT_LIMIT if limit is None else limit
        if not 1 <= limit <= MAX_LIMIT:
            raise BadUserInput(f"limit must be between 1 and {MAX_LIMIT}")
        if cursor is not None:
            position = self._cursors.decode(tenant_id, cursor)
            after: str | None = position.after
            upper = position.upper
        else:
            after = None if since is None else check_token(since, "since")
            head = self._store.head(tenant_id)
            if head is None:
                if after is not None:
                    raise BadUserInput("since is not a change token of this tenant")
                return Page(items=[], cursor=None, change_token=None)
            if after is not None and after > head:
                raise BadUserInput(
                    "since is newer than every change of this tenant; sync again with since: null"
                )
            if after == head:
                return Page(items=[], cursor=None, change_token=head)
            upper = head
        items, more = self._store.changes(tenant_id, after, upper, limit)
        if not more:
            return Page(items=items, cursor=None, change_token=upper)
        last = items[-1].change_token
        next_cursor = self._cursors.encode(tenant_id, Position(after=last, upper=upper))
        return Page(items=items, cursor=next_cursor, change_token=last)

    # --- writes ------------------------------------------------------------

    def create(
        self,
        item_type: ItemType,
        tenant_id: str,
        entity_id: str | None,
        changes: Mapping[str, Any],
    ) -> Record:
        check_identifier(tenant_id, "tenantID")
        if entity_id is not None:
            check_identifier(entity_id, "id")
        fields = apply_changes({}, item_type.normalize_changes(changes))
        check_size(fields)
        entity_id = entity_id or new_entity_id()

        def attempt(token: str) -> Record:
            record = Record(
                item_type=item_type,
                tenant_id=tenant_id,
                id=entity_id,
                change_token=token,
                created_at=token_time(token),
                updated_at=token_time(token),
                fields=fields,
            )
            self._store.create(record)
            return record

        return self._write(tenant_id, None, attempt)

    def update(
        self,
        item_type: ItemType,
        tenant_id: str,
        entity_id: str,
        expected_token: str,
        changes: Mapping[str, Any],
    ) -> Record:
        check_identifier(tenant_id, "tenantID")
        check_identifier(entity_id, "id")
        normalized = item_type.normalize_changes(changes)
        current = self._current(item_type, tenant_id, entity_id, expected_token)
        fields = apply_changes(current.fields, normalized)
        check_size(fields)

        def attempt(token: str) -> Record:
            record = replace(
                current, change_token=token, updated_at=token_time(token), fields=fields
            )
            self._store.replace(record, expected_token)
            return record

        return self._write(tenant_id, expected_token, attempt)

    def delete(
        self, item_type: ItemType, tenant_id: str, entity_id: str, expected_token: str
    ) -> Record:
        check_identifier(tenant_id, "tenantID")
        check_identifier(entity_id, "id")
        check_token(expected_token, "changeToken")

        def attempt(token: str) -> Record:
            at = token_time(token)
            record = Record(
                item_type=item_type,
                tenant_id=tenant_id,
                id=entity_id,
                change_token=token,
                created_at=at,
                updated_at=at,
                deleted=True,
            )
            # The store checks the expected token and type in the transaction itself.
            self._store.replace(record, expected_token)
            return record

        return self._write(tenant_id, expected_token, attempt)

    def _current(
        self, item_type: ItemType, tenant_id: str, entity_id: str, expected_token: str
    ) -> Record:
        """The entity an update is based on; Conflict/NotFound without writing anything."""
        check_token(expected_token, "changeToken")
        current = self._store.get(tenant_id, entity_id)
        if current is None or current.item_type is not item_type:
            raise NotFound(f"{item_type.name} {entity_id} does not exist")
        if current.deleted:
            raise Conflict(f"{item_type.name} {entity_id} was deleted", current)
        if current.change_token != expected_token:
            raise Conflict(
                f"{item_type.name} {entity_id} changed: its change token is "
                f"{current.change_token}, not {expected_token}",
                current,
            )
        return current

    def _write(self, tenant_id: str, floor: str | None, attempt: Callable[[str], Record]) -> Record:
        """Run `attempt(token)` until its token is accepted, retrying lost races."""
        retrying = Retrying(
            retry=retry_if_exception_type(WriteContention),
            stop=stop_after_attempt(MAX_WRITE_ATTEMPTS),
            wait=_contention_wait,
            before_sleep=lambda state: self._remember_head(tenant_id, state),
            reraise=True,
        )
        try:
            with self._tenant_locks.hold(tenant_id):
                for try_ in retrying:
                    with try_:
                        number = try_.retry_state.attempt_number
                        record = attempt(self._propose_token(tenant_id, floor, number))
        except WriteContention as exc:
            raise Unavailable("too many concurrent writes to this tenant; retry") from exc
        self._remember_head(tenant_id, record.change_token)
        return record

    def _propose_token(self, tenant_id: str, floor: str | None, attempt_number: int) -> str:
        """A token past the last head seen here and past `floor`, a token known to exist.

        Bumping past the expected token matters: another server may have bumped past
        the same stale head to exactly this entity's current token, and a write
        reusing it would name one log entry twice in its transaction. A write that
        lost a race aims further ahead with each loss, past the writers proposing
        from their clocks meanwhile; otherwise a server whose clock is behind, which
        can only propose "last head + 1", would lose every race to them.
        """
        after = max(filter(None, (self._heads.get(tenant_id), floor)), default=None)
        now = self._clock_ms() + self._skew_ms
        if after is not None and attempt_number > 1:
            reach = min(RETRY_LEAD_MS * 2 ** (attempt_number - 2), MAX_RETRY_LEAD_MS)
            now = max(now, token_ms(after)) + random.randint(1, reach)
        return next_token(now, after)

    def _remember_head(self, tenant_id: str, source: RetryCallState | str) -> None:
        if isinstance(source, str):
            head = source
        else:
            exc = source.outcome.exception() if source.outcome else None
            if not isinstance(exc, StaleHead):
                return
            head = exc.head
            # A clock far behind the tenant's head is wrong; follow the head's time.
            # Small gaps are left alone: they are in-flight writes, not a bad clock.
            behind_ms = token_ms(head) - (self._clock_ms() + self._skew_ms)
            if behind_ms > SKEW_THRESHOLD_MS:
                self._skew_ms = min(self._skew_ms + behind_ms, MAX_SKEW_MS)
        if len(self._heads) > 10_000:
            self._heads.clear()
        if head > self._heads.get(tenant_id, ""):
            self._heads[tenant_id] = head
