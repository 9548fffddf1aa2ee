"""The service layer: mutations (one by one or pushed in a batch) and the changes feed.

Orchestrates the domain rules (validation, tokens, cursors, idempotency) and a
`Store`. Knows nothing of GraphQL or HTTP.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from api.domain.cursor import CursorCodec, Position
from api.domain.errors import (
    BadUserInput,
    Conflict,
    CurrentVersionError,
    InternalError,
    NotFound,
    OutcomeRecorded,
    SyncError,
    Unavailable,
)
from api.domain.identifiers import check_identifier
from api.domain.item_types import ItemType, apply_changes, check_size
from api.domain.mutations import (
    OUTCOME_RETENTION_S,
    Mutation,
    State,
    StoredOutcome,
    is_stored_error,
)
from api.domain.records import LogTail, Record, write_refusal
from api.domain.tokens import check_token, new_entity_id, token_before, token_time
from api.ordering import TokenOrdering, wall_clock_ms

logger = logging.getLogger("api.sync")

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_PUSH = 100
# A state-based write that loses a race compares again with the winner this often.
PUT_ATTEMPTS = 3
# A page of chosen types reads at most this many log entries (of every type): ten
# full pages, about 3.5 MB of people, 900 read units.
MAX_SCANNED = 10 * MAX_LIMIT
# The first read of a sync takes the head and up to this many of the newest log
# entries in one Query. A sync of at most TAIL_ITEMS - 1 changes ends with that
# read when its entries are linked (`api.domain.chain`): the Limit leaves room
# for one entry above the head, of a write whose head is not yet applied.
# Eleven people of ~300-370 bytes fit one read unit, what a separate head read cost.
TAIL_ITEMS = 11


class Store(Protocol):
    def head(self, tenant_id: str) -> str | None: ...
    def log_tail(self, tenant_id: str, after: str | None, count: int) -> LogTail: ...
    def get(self, tenant_id: str, entity_id: str) -> Record | None: ...
    def changes(
        self, tenant_id: str, after: str | None, upper: str, limit: int
    ) -> tuple[list[Record], bool]: ...
    def create(
        self, record: Record, head: str | None, outcome: StoredOutcome | None = None
    ) -> None: ...
    def replace(
        self,
        record: Record,
        expected_token: str,
        head: str | None,
        outcome: StoredOutcome | None = None,
    ) -> None: ...
    def get_outcome(self, tenant_id: str, client_mutation_id: str) -> StoredOutcome | None: ...
    def put_outcome(self, tenant_id: str, outcome: StoredOutcome) -> None: ...


@dataclass(frozen=True)
class Page:
    items: list[Record]
    cursor: str | None
    change_token: str | None


@dataclass(frozen=True)
class Written:
    record: Record
    replayed: bool = False


class PushStatus(enum.Enum):
    APPLIED = "APPLIED"
    CONFLICT = "CONFLICT"
    REJECTED = "REJECTED"


@dataclass(frozen=True)
class PushResult:
    mutation: Mutation
    status: PushStatus
    record: Record | None = None  # after the write; the current version on CONFLICT
    error: SyncError | None = None
    replayed: bool = False


class SyncService:
    def __init__(
        self,
        store: Store,
        cursors: CursorCodec,
        clock_ms: Callable[[], int] = wall_clock_ms,
        on_commit: Callable[[str, str], None] | None = None,
    ) -> None:
        self._store = store
        self._cursors = cursors
        # Called with (tenant, token) after each write this service commits.
        self._on_commit = on_commit
        self._ordering = TokenOrdering(store.head, clock_ms)

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
        types: frozenset[ItemType] | None = None,
    ) -> Page:
        """A page of the tenant's changes after `since` (or after `cursor`), in token order;
        with `types`, only changes of those types, in pages that stay full: a page
        holds fewer than `limit` items only when the feed is drained (or when
        MAX_SCANNED entries of other types were read for it: its cursor continues)."""
        check_identifier(tenant_id, "tenantID")
        limit = DEFAULT_LIMIT if limit is None else limit
        if not 1 <= limit <= MAX_LIMIT:
            raise BadUserInput(f"limit must be between 1 and {MAX_LIMIT}")
        page = self._changes(tenant_id, since, cursor, limit)
        if types is None:
            return page
        items = [r for r in page.items if r.item_type in types]
        scanned = len(page.items)
        while len(items) < limit and page.cursor is not None and scanned < MAX_SCANNED:
            page = self._changes(tenant_id, None, page.cursor, limit - len(items))
            items += [r for r in page.items if r.item_type in types]
            scanned += len(page.items)
        return Page(items=items, cursor=page.cursor, change_token=page.change_token)

    def _changes(self, tenant_id: str, since: str | None, cursor: str | None, limit: int) -> Page:
        if cursor is not None:
            position = self._cursors.decode(tenant_id, cursor)
            items, more = self._store.changes(tenant_id, position.after, position.upper, limit)
            return self._page(tenant_id, items, more, position.upper)
        after = None if since is None else check_token(since, "since")
        return self._first_page(tenant_id, after, limit)

    def _first_page(self, tenant_id: str, after: str | None, limit: int) -> Page:
        """The first page of a sync: one read of the head and the newest entries gives
        the sync's upper bound, and often every change below it (`api.domain.chain`)."""
        tail = self._store.log_tail(tenant_id, after, min(limit, TAIL_ITEMS))
        if tail.head is None:
            if after is not None:
                raise BadUserInput("since is not a change token of this tenant")
            # No write has made the head yet (or the first is still being applied).
            return Page(items=[], cursor=None, change_token=None)
        if after is not None and after > tail.head:
            raise BadUserInput(
                "since is newer than every change of this tenant; sync again with since: null"
            )
        bound = tail.bound
        if bound is None or (after is not None and bound <= after):
            # Nothing past `after` is provably complete yet (a write is still being
            # applied): the device keeps its token and gets the change next time.
            return Page(items=[], cursor=None, change_token=after)
        if tail.complete:
            return Page(items=tail.records, cursor=None, change_token=bound)
        # Below the linked entries, page up from `after`, then append them.
        upper = bound if tail.lowest is None else token_before(tail.lowest)
        items, more = self._store.changes(tenant_id, after, upper, limit)
        if not more:
            # Those and the linked entries are all of (after, bound], in order.
            items += tail.records
            more = len(items) > limit
            items = items[:limit]
        return self._page(tenant_id, items, more, bound)

    def _page(self, tenant_id: str, items: list[Record], more: bool, upper: str) -> Page:
        """A page of `items`; with `more`, its cursor continues above the last up to `upper`."""
        if not more:
            return Page(items=items, cursor=None, change_token=upper)
        last = items[-1].change_token
        next_cursor = self._cursors.encode(tenant_id, Position(after=last, upper=upper))
        return Page(items=items, cursor=next_cursor, change_token=last)

    def latest_change(self, tenant_id: str, after: str | None) -> str | None:
        """The newest change token a sync from `after` would reach now (None: none
        yet): what a new `changesAvailable` subscription is told first."""
        check_identifier(tenant_id, "tenantID")
        if after is not None:
            check_token(after, "since")
        bound = self._store.log_tail(tenant_id, after, 1).bound
        return bound if bound is not None and (after is None or bound > after) else None

    # --- writes ------------------------------------------------------------

    def apply(self, mutation: Mutation) -> Written:
        """Apply one mutation, at most once per clientMutationID."""
        mutation = mutation.validated()
        cmid = mutation.client_mutation_id
        if cmid is None:
            return Written(self._apply(mutation, None))
        expires_at = int(time.time()) + OUTCOME_RETENTION_S
        pending = StoredOutcome(cmid, mutation.fingerprint(), expires_at=expires_at)
        stored = self._store.get_outcome(mutation.tenant_id, cmid)
        if stored is not None:
            return _replay(stored, pending.fingerprint)
        try:
            return Written(self._apply(mutation, pending))
        except OutcomeRecorded:
            return self._replay_recorded(mutation.tenant_id, pending)
        except SyncError as exc:
            if not is_stored_error(exc):
                raise
            try:
                self._store.put_outcome(mutation.tenant_id, replace(pending, error=exc))
            except OutcomeRecorded:
                return self._replay_recorded(mutation.tenant_id, pending)
            raise

    def push(self, tenant_id: str, mutations: list[Mutation]) -> list[PushResult]:
        """Apply mutations in order, each atomically on its own; one result per mutation."""
        check_identifier(tenant_id, "tenantID")
        if len(mutations) > MAX_PUSH:
            raise BadUserInput(f"at most {MAX_PUSH} mutations per push, got {len(mutations)}")
        return [self._push_one(tenant_id, m) for m in mutations]

    def _push_one(self, tenant_id: str, mutation: Mutation) -> PushResult:
        if mutation.tenant_id != tenant_id:
            error = BadUserInput("every mutation of a push must name the push's tenantID")
            return PushResult(mutation, PushStatus.REJECTED, error=error)
        try:
            written = self.apply(mutation)
        except CurrentVersionError as exc:
            return PushResult(
                mutation, PushStatus.CONFLICT, record=exc.current, error=exc, replayed=exc.replayed
            )
        except SyncError as exc:
            return PushResult(mutation, PushStatus.REJECTED, error=exc, replayed=exc.replayed)
        except Exception:
            # A bug must cost one entry, never the push: an outbox holding a poisoned
            # entry would otherwise be stuck behind it on every resend.
            logger.exception("push entry failed (%s %s)", mutation.verb, mutation.item_type.name)
            failed = InternalError(
                "internal server error in this entry; resend it (with its clientMutationID a "
                "resend never applies it twice)"
            )
            return PushResult(mutation, PushStatus.REJECTED, error=failed)
        return PushResult(
            mutation, PushStatus.APPLIED, record=written.record, replayed=written.replayed
        )

    def create(
        self,
        item_type: ItemType,
        tenant_id: str,
        entity_id: str | None,
        changes: Mapping[str, Any],
    ) -> Record:
        return self.apply(Mutation("create", item_type, tenant_id, entity_id, None, changes)).record

    def update(
        self,
        item_type: ItemType,
        tenant_id: str,
        entity_id: str,
        expected_token: str,
        changes: Mapping[str, Any],
    ) -> Record:
        mutation = Mutation("update", item_type, tenant_id, entity_id, expected_token, changes)
        return self.apply(mutation).record

    def delete(
        self, item_type: ItemType, tenant_id: str, entity_id: str, expected_token: str
    ) -> Record:
        mutation = Mutation("delete", item_type, tenant_id, entity_id, expected_token)
        return self.apply(mutation).record

    def _replay_recorded(self, tenant_id: str, pending: StoredOutcome) -> Written:
        stored = self._store.get_outcome(tenant_id, pending.client_mutation_id)
        if stored is None:  # recorded, then expired in between: vanishingly rare
            raise OutcomeRecorded()
        return _replay(stored, pending.fingerprint)

    def _apply(self, mutation: Mutation, pending: StoredOutcome | None) -> Record:
        """Apply a validated mutation, and tell `on_commit` about it."""
        record = self._write(mutation, pending)
        if self._on_commit is not None:
            try:
                self._on_commit(record.tenant_id, record.change_token)
            except Exception:  # a poke is a hint: never fail the committed write
                logger.exception("on_commit failed")
        return record

    def _write(self, mutation: Mutation, pending: StoredOutcome | None) -> Record:
        """Write a validated mutation."""
        item_type, tenant_id, changes = mutation.item_type, mutation.tenant_id, mutation.changes

        def outcome(record: Record) -> StoredOutcome | None:
            return None if pending is None else replace(pending, record=record)

        if mutation.verb == "put":
            return self._put(mutation, outcome)
        if mutation.verb == "create":
            fields = apply_changes({}, changes)
            check_size(fields)
            new_id = mutation.entity_id or new_entity_id()

            def create(token: str, head: str | None) -> Record:
                record = _version(item_type, tenant_id, new_id, token, None, fields)
                self._store.create(record, head, outcome(record))
                return record

            return self._ordering.write(tenant_id, None, create, _token_of)

        entity_id, expected = mutation.entity_id, mutation.expected_token
        assert entity_id is not None and expected is not None  # validated()

        if mutation.verb == "update":
            current = self._current(item_type, tenant_id, entity_id, expected)
            fields = apply_changes(current.fields, changes)
            check_size(fields)

            def update(token: str, head: str | None) -> Record:
                record = _version(item_type, tenant_id, entity_id, token, current, fields)
                self._store.replace(record, expected, head, outcome(record))
                return record

            return self._ordering.write(tenant_id, expected, update, _token_of)

        def delete(token: str, head: str | None) -> Record:
            record = _version(item_type, tenant_id, entity_id, token, None, {}, deleted=True)
            # The store checks the expected token and the type in the transaction itself.
            self._store.replace(record, expected, head, outcome(record))
            return record

        return self._ordering.write(tenant_id, expected, delete, _token_of)

    def _put(self, mutation: Mutation, outcome: Callable[[Record], StoredOutcome | None]) -> Record:
        """A state-based write: applies when the server holds the assumed state (or,
        with merge_fields, a state that changed only other fields: rebased onto it),
        as one token-guarded transaction like any write; else CONFLICT with what it
        holds (NOT_FOUND when it holds nothing). A write that loses a race to
        another is compared again with what won, PUT_ATTEMPTS times at most."""
        item_type, tenant_id = mutation.item_type, mutation.tenant_id
        entity_id, state = mutation.entity_id, mutation.state
        assert entity_id is not None and state is not None  # validated()
        assumed = mutation.assumed
        for _ in range(PUT_ATTEMPTS):
            current = self._store.get(tenant_id, entity_id)
            if assumed is None and current is not None:
                raise Conflict(f"{item_type.name} {entity_id} already exists", current)
            target = state
            if assumed is not None and not assumed.holds(item_type, current):
                if current is None or current.item_type is not item_type:
                    raise NotFound(f"{item_type.name} {entity_id} does not exist")
                rebased = state.rebased(assumed, current) if mutation.merge_fields else None
                if rebased is None:
                    raise Conflict(
                        f"{item_type.name} {entity_id} is not in the assumed state", current
                    )
                target = rebased
            if current is not None and current.deleted:
                if state.deleted:
                    return current  # deleted already: nothing to write
                raise Conflict(
                    f"{item_type.name} {entity_id} was deleted; a deleted id stays deleted",
                    current,
                )
            expected = None if current is None else current.change_token

            def write(
                token: str,
                head: str | None,
                current: Record | None = current,
                target: State = target,
            ) -> Record:
                record = _version(
                    item_type,
                    tenant_id,
                    entity_id,
                    token,
                    current,
                    dict(target.fields),
                    deleted=target.deleted,
                )
                if current is None:
                    self._store.create(record, head, outcome(record))
                else:
                    self._store.replace(record, current.change_token, head, outcome(record))
                return record

            try:
                return self._ordering.write(tenant_id, expected, write, _token_of)
            except (CurrentVersionError, NotFound):
                continue  # another write won: compare again with what it wrote
        raise Unavailable(f"{item_type.name} {entity_id} keeps changing; retry")

    def _current(
        self, item_type: ItemType, tenant_id: str, entity_id: str, expected_token: str
    ) -> Record:
        """The entity an update is based on; Conflict/NotFound without writing anything."""
        current = self._store.get(tenant_id, entity_id)
        refusal = write_refusal(item_type, entity_id, expected_token, current)
        if refusal is not None:
            raise refusal
        assert current is not None  # an update expecting a token found its entity
        return current


def _version(
    item_type: ItemType,
    tenant_id: str,
    entity_id: str,
    token: str,
    current: Record | None,
    fields: dict[str, Any],
    deleted: bool = False,
) -> Record:
    """The entity written at `token`: with `fields`, created when `current` was (or
    now, when there is none); or deleted, both of its times now."""
    at = token_time(token)
    if deleted:
        return Record(item_type, tenant_id, entity_id, token, at, at, deleted=True)
    created = at if current is None else current.created_at
    return Record(item_type, tenant_id, entity_id, token, created, at, fields=fields)


def _token_of(record: Record) -> str:
    return record.change_token


def _replay(stored: StoredOutcome, fingerprint: str) -> Written:
    if stored.fingerprint != fingerprint:
        raise BadUserInput(
            f"clientMutationID {stored.client_mutation_id} was already used for another mutation"
        )
    if stored.error is not None:
        stored.error.replayed = True
        raise stored.error
    assert stored.record is not None
    return Written(stored.record, replayed=True)
