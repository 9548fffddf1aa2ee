"""The service layer: mutations (one by one or pushed in a batch) and the changes feed.

Orchestrates the domain rules (validation, tokens, cursors, idempotency) and a
`Store`. Knows nothing of GraphQL or HTTP.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Protocol

from api.domain.chain import Head
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
    WritesRefused,
)
from api.domain.identifiers import check_identifier
from api.domain.item_types import ItemType, apply_changes, check_size
from api.domain.mutations import (
    OUTCOME_RETENTION_S,
    Mutation,
    State,
    StoredOutcome,
    Write,
    is_stored_error,
)
from api.domain.records import LogTail, Record, write_refusal
from api.domain.tokens import check_token, new_entity_id, token_before, token_time, tokens_from
from api.ordering import Link, TokenOrdering, wall_clock_ms

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
    def head(self, tenant_id: str) -> Head | None: ...
    def log_tail(self, tenant_id: str, after: str | None, count: int) -> LogTail: ...
    def get(self, tenant_id: str, entity_id: str) -> Record | None: ...
    def read_many(
        self, tenant_id: str, entity_ids: Iterable[str], client_mutation_ids: Iterable[str]
    ) -> tuple[dict[str, Record], dict[str, StoredOutcome]]: ...
    def changes(
        self, tenant_id: str, after: str | None, upper: str, limit: int
    ) -> tuple[list[Record], bool]: ...
    def commit(
        self, tenant_id: str, writes: Sequence[Write], head: str | None, check: Collection[str]
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
        (result,) = self._apply_in_order(mutation.tenant_id, [mutation])
        if result.error is not None:
            raise result.error
        assert result.record is not None
        return Written(result.record, replayed=result.replayed)

    def push(self, tenant_id: str, mutations: list[Mutation]) -> list[PushResult]:
        """Apply mutations with the results and final state of applying them one by one
        in order, each atomically on its own; one result per mutation."""
        check_identifier(tenant_id, "tenantID")
        if len(mutations) > MAX_PUSH:
            raise BadUserInput(f"at most {MAX_PUSH} mutations per push, got {len(mutations)}")
        return self._apply_in_order(tenant_id, mutations)

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

    def _apply_in_order(self, tenant_id: str, mutations: list[Mutation]) -> list[PushResult]:
        """Group commit: the writes go in as few transactions as DynamoDB allows, each
        holding the next mutations in order (docs/ordering.md, "Group commit")."""
        results: dict[int, PushResult] = {}
        todo: list[_Entry] = []
        for position, mutation in enumerate(mutations):
            if mutation.tenant_id != tenant_id:
                error = BadUserInput("every mutation of a push must name the push's tenantID")
                results[position] = _answer(mutation, error)
                continue
            try:
                todo.append(_Entry(position, mutation.validated()))
            except SyncError as exc:
                results[position] = _answer(mutation, exc)
        if todo:
            known = _Known(
                *self._store.read_many(
                    tenant_id,
                    (e.mutation.entity_id for e in todo if e.mutation.entity_id is not None),
                    (e.client_mutation_id for e in todo if e.client_mutation_id is not None),
                )
            )
            while todo:
                todo = self._next_transaction(tenant_id, todo, known, results)
        return [results[position] for position in range(len(mutations))]

    def _next_transaction(
        self,
        tenant_id: str,
        todo: list[_Entry],
        known: _Known,
        results: dict[int, PushResult],
    ) -> list[_Entry]:
        """Answer the next mutations in order: those decided by what the push knows
        (replays, refusals), and one transaction of writes; return the rest."""
        group: list[_Plan] = []
        taken: set[tuple[str, str]] = set()  # entity ids and clientMutationIDs in `group`
        items = 0
        scanned = 0
        for entry in todo:
            claims = entry.claims()
            if claims & taken:
                break  # a second write of one entity (or id) waits for the first's outcome
            try:
                decision = self._decide(entry, known)
            except SyncError as exc:
                decision = exc
            except Exception:
                logger.exception("push entry failed (%s)", entry.mutation.verb)
                decision = _internal_error()
            if isinstance(decision, _Plan):
                if items + decision.items > _ITEMS_FOR_WRITES:
                    break
                items += decision.items
                group.append(decision)
                taken |= claims
            else:
                results[entry.position] = self._conclude(tenant_id, entry, decision, known)
            scanned += 1
        rest = todo[scanned:]
        if not group:
            return rest
        committed, refusals = self._commit(tenant_id, group)
        for plan, record in zip(group, committed, strict=False):
            results[plan.entry.position] = PushResult(
                plan.entry.mutation, PushStatus.APPLIED, record=record
            )
            known.records[record.id] = record
            if plan.outcome is not None:
                known.outcomes[plan.outcome.client_mutation_id] = replace(
                    plan.outcome, record=record
                )
        retry: list[_Entry] = []
        for plan, refusal in zip(group[len(committed) :], refusals, strict=True):
            entry = plan.entry
            if refusal is None:
                retry.append(entry)  # did not fit this transaction, or was not refused
            elif isinstance(refusal, OutcomeRecorded):
                results[entry.position] = self._replay_recorded(tenant_id, entry)
            elif entry.mutation.verb == "put" and isinstance(
                refusal, (CurrentVersionError, NotFound)
            ):
                # Another write won: compare again with what it wrote.
                known.records.pop(plan.entity_id, None)
                current = self._store.get(tenant_id, plan.entity_id)
                if current is not None:
                    known.records[plan.entity_id] = current
                retry.append(replace(entry, losses=entry.losses + 1))
            else:
                if isinstance(refusal, CurrentVersionError):
                    known.records[plan.entity_id] = refusal.current
                results[entry.position] = self._conclude(tenant_id, entry, refusal, known)
        return retry + rest

    def _commit(
        self, tenant_id: str, group: list[_Plan]
    ) -> tuple[list[Record], list[SyncError | OutcomeRecorded | None]]:
        """Commit the longest prefix of `group` that fits one transaction: its records;
        else why each write of `group` was refused (None: not refused, try again)."""
        floor = max((p.expected for p in group if p.expected is not None), default=None)

        def attempt(first: str, link: Link) -> list[Record]:
            room = _ITEMS_FOR_WRITES - len(link.check)
            fitting: list[_Plan] = []
            for plan in group:
                room -= plan.items
                if room < 0:
                    break
                fitting.append(plan)
            tokens = tokens_from(first, len(fitting))
            writes = [plan.write(token) for plan, token in zip(fitting, tokens, strict=True)]
            self._store.commit(tenant_id, writes, link.head, link.check)
            return [w.record for w in writes]

        def head_of(records: list[Record]) -> Head:
            return Head(records[-1].change_token, len(records))

        try:
            records = self._ordering.write(tenant_id, floor, attempt, head_of)
        except WritesRefused as refused:
            return [], [refused.refusals.get(i) for i in range(len(group))]
        except SyncError as exc:
            return [], [exc] * len(group)
        except Exception:
            logger.exception("push transaction failed (%d writes)", len(group))
            return [], [_internal_error()] * len(group)
        if self._on_commit is not None:
            try:
                self._on_commit(tenant_id, records[-1].change_token)
            except Exception:  # a poke is a hint: never fail the committed write
                logger.exception("on_commit failed")
        return records, [None] * (len(group) - len(records))

    def _decide(self, entry: _Entry, known: _Known) -> _Plan | Written | SyncError:
        """What one mutation does, given what the push knows of the server: a write
        to commit, or an answer without writing (a replay, a refusal, a no-op)."""
        mutation = entry.mutation
        cmid = mutation.client_mutation_id
        if cmid is not None and cmid in known.outcomes:
            return _replay(known.outcomes[cmid], mutation.fingerprint())
        if entry.losses >= PUT_ATTEMPTS:
            return Unavailable(
                f"{mutation.item_type.name} {mutation.entity_id} keeps changing; retry"
            )
        item_type, changes = mutation.item_type, mutation.changes
        entity_id = mutation.entity_id or new_entity_id()
        current = known.records.get(entity_id)
        if mutation.verb == "put":
            return self._decide_put(entry, current)
        expected = mutation.expected_token
        refusal = write_refusal(item_type, entity_id, expected, current)
        if refusal is not None:
            return refusal
        if mutation.verb == "delete":
            return _Plan(entry, entity_id, expected, None, State(deleted=True))
        fields = apply_changes({} if current is None else current.fields, changes)
        check_size(fields)
        return _Plan(entry, entity_id, expected, current, State(fields))

    def _decide_put(self, entry: _Entry, current: Record | None) -> _Plan | Written | SyncError:
        """A state-based write: applies when the server holds the assumed state (or,
        with merge_fields, a state that changed only other fields: rebased onto it),
        as one token-guarded write like any other; else CONFLICT with what it holds
        (NOT_FOUND when it holds nothing). A write that loses a race to another is
        compared again with what won, PUT_ATTEMPTS times at most."""
        mutation = entry.mutation
        item_type, entity_id, assumed = mutation.item_type, mutation.entity_id, mutation.assumed
        state = mutation.state
        assert entity_id is not None and state is not None  # validated()
        if assumed is None and current is not None:
            return Conflict(f"{item_type.name} {entity_id} already exists", current)
        target = state
        if assumed is not None and not assumed.holds(item_type, current):
            if current is None or current.item_type is not item_type:
                return NotFound(f"{item_type.name} {entity_id} does not exist")
            rebased = state.rebased(assumed, current) if mutation.merge_fields else None
            if rebased is None:
                return Conflict(
                    f"{item_type.name} {entity_id} is not in the assumed state", current
                )
            target = rebased
        if current is not None and current.deleted:
            if state.deleted:
                return Written(current)  # deleted already: nothing to write
            return Conflict(
                f"{item_type.name} {entity_id} was deleted; a deleted id stays deleted", current
            )
        expected = None if current is None else current.change_token
        return _Plan(entry, entity_id, expected, current, target)

    def _conclude(
        self, tenant_id: str, entry: _Entry, decision: Written | SyncError, known: _Known
    ) -> PushResult:
        """The result of a mutation answered without writing; a refusal that depends
        on the server's state is stored as the clientMutationID's first outcome."""
        mutation = entry.mutation
        if isinstance(decision, Written):
            return PushResult(
                mutation, PushStatus.APPLIED, record=decision.record, replayed=decision.replayed
            )
        cmid = mutation.client_mutation_id
        if cmid is None or decision.replayed or not is_stored_error(decision):
            return _answer(mutation, decision)
        outcome = StoredOutcome(cmid, mutation.fingerprint(), error=decision, expires_at=_expiry())
        try:
            self._store.put_outcome(tenant_id, outcome)
        except OutcomeRecorded:
            return self._replay_recorded(tenant_id, entry)
        known.outcomes[cmid] = outcome
        return _answer(mutation, decision)

    def _replay_recorded(self, tenant_id: str, entry: _Entry) -> PushResult:
        """The outcome a racing twin of this mutation (same clientMutationID) stored."""
        mutation = entry.mutation
        assert mutation.client_mutation_id is not None
        stored = self._store.get_outcome(tenant_id, mutation.client_mutation_id)
        if stored is None:  # recorded, then expired in between: vanishingly rare
            return _answer(mutation, Unavailable("retry this mutation"))
        try:
            written = _replay(stored, mutation.fingerprint())
        except SyncError as exc:
            return _answer(mutation, exc)
        return PushResult(mutation, PushStatus.APPLIED, record=written.record, replayed=True)


# DynamoDB's limits on one TransactWriteItems: 100 items, one action per item, 4 MB.
# Writes take at most 99 items (one is the head's), fewer by the chain's checks of
# the previous transaction's entries (none after this process's own transaction);
# 99 items of at most 17 KB (16 KB of fields, MAX_ITEM_BYTES, and their names and
# keys) stay far below 4 MB.
_MAX_TRANSACTION_ITEMS = 100
_ITEMS_FOR_WRITES = _MAX_TRANSACTION_ITEMS - 1


@dataclass(frozen=True)
class _Entry:
    """A validated mutation of a push, by its position, and the races it lost."""

    position: int
    mutation: Mutation
    losses: int = 0

    @property
    def client_mutation_id(self) -> str | None:
        return self.mutation.client_mutation_id

    def claims(self) -> set[tuple[str, str]]:
        """What one transaction may write only once: the entity, the outcome's id."""
        claims = set()
        if self.mutation.entity_id is not None:
            claims.add(("entity", self.mutation.entity_id))
        if self.client_mutation_id is not None:
            claims.add(("clientMutationID", self.client_mutation_id))
        return claims


@dataclass
class _Known:
    """What a push knows of the server: entities and stored outcomes, as read at its
    start and as its own transactions and refusals left them."""

    records: dict[str, Record]
    outcomes: dict[str, StoredOutcome]


@dataclass(frozen=True)
class _Plan:
    """A mutation's write, waiting for its token."""

    entry: _Entry
    entity_id: str
    expected: str | None  # the token it replaces; None: a create
    current: Record | None  # the version it replaces (for createdAt)
    state: State

    @property
    def items(self) -> int:
        """The transaction items it takes: entity and log entry, the old entry's
        delete, the outcome."""
        return 2 + (self.expected is not None) + (self.outcome is not None)

    @cached_property
    def outcome(self) -> StoredOutcome | None:
        """The mutation's first outcome, pending its record (None: no clientMutationID).
        Made once: a fingerprint is a JSON dump and a hash, and a plan is sized and
        written on every attempt of its transaction."""
        mutation = self.entry.mutation
        if mutation.client_mutation_id is None:
            return None
        return StoredOutcome(
            mutation.client_mutation_id, mutation.fingerprint(), expires_at=_expiry()
        )

    def write(self, token: str) -> Write:
        mutation = self.entry.mutation
        record = _version(
            mutation.item_type,
            mutation.tenant_id,
            self.entity_id,
            token,
            self.current,
            dict(self.state.fields),
            deleted=self.state.deleted,
        )
        outcome = self.outcome
        return Write(
            record, self.expected, None if outcome is None else replace(outcome, record=record)
        )


def _expiry() -> int:
    return int(time.time()) + OUTCOME_RETENTION_S


def _answer(mutation: Mutation, error: SyncError) -> PushResult:
    if isinstance(error, CurrentVersionError):
        return PushResult(
            mutation,
            PushStatus.CONFLICT,
            record=error.current,
            error=error,
            replayed=error.replayed,
        )
    return PushResult(mutation, PushStatus.REJECTED, error=error, replayed=error.replayed)


def _internal_error() -> InternalError:
    # A bug must cost one entry, never the push: an outbox holding a poisoned
    # entry would otherwise be stuck behind it on every resend.
    return InternalError(
        "internal server error in this entry; resend it (with its clientMutationID a "
        "resend never applies it twice)"
    )


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
