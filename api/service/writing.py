"""Writing: single mutations and pushes, with the results and final state of
applying them one by one in order, committed in as few transactions as DynamoDB
allows (group commit, docs/ordering.md), at most once per clientMutationID."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from api.domain.chain import Head, Streams
from api.domain.errors import (
    BadUserInput,
    NotFound,
    OutcomeRecorded,
    SyncError,
    TenantDeleted,
    TransactionConflict,
    Unavailable,
    WritesRefused,
)
from api.domain.identifiers import check_identifier
from api.domain.item_types import ItemType
from api.domain.membership import MemberGuard
from api.domain.mutations import Mutation, StoredOutcome, is_stored_error
from api.domain.records import CurrentVersionError, Record
from api.domain.retention import Retention
from api.domain.tokens import check_token, tokens_from
from api.ordering import Link, TokenOrdering, wall_clock_ms
from api.service import deciding
from api.service.attachments import Attachments
from api.service.deciding import (
    STREAM_ITEMS_CAP,
    Entry,
    Known,
    Plan,
    answer,
    expiry,
    internal_error,
    outside_view,
)
from api.service.ports import PushResult, PushStatus, Store, Written
from api.service.referencing import typed, with_attachments
from api.service.replaying import replay_for
from api.service.tenant_check import TenantCheck
from api.service.transaction_room import fitting

logger = logging.getLogger(__name__)

MAX_PUSH = 100
# DynamoDB's limits on one TransactWriteItems: 100 items, one action per item, 4 MB.
# Writes take at most 99 items (one is the head's), fewer by the chain's checks, the
# fence's (a tenant's first), a Member writer's guard; 99 items of at most 17 KB
# (16 KB of fields, MAX_ITEM_BYTES, names and keys) stay far below 4 MB.
_MAX_TRANSACTION_ITEMS = 100
_ITEMS_FOR_WRITES = _MAX_TRANSACTION_ITEMS - 1


class Writing:
    def __init__(
        self,
        store: Store,
        clock_ms: Callable[[], int] = wall_clock_ms,
        on_commit: Callable[[str, str], None] | None = None,
        retention: Retention | None = None,
        history: bool = True,
        attachments: Attachments | None = None,
    ) -> None:
        self._store = store
        # Checks the blobs writes reference (contract 3.10); None: no blob store, and
        # a write that references one is refused.
        self._attachments = attachments
        # Called with (tenant, token) after each transaction this service commits.
        self._on_commit = on_commit
        self._retention = retention or Retention()
        self._history = history  # keep each replaced version (contract 3.7)
        self._ordering = TokenOrdering(store.head, clock_ms, self._retention)

    def apply(
        self,
        mutation: Mutation,
        by: str | None = None,
        role: str | None = None,
        moved: bool = False,
    ) -> Written:
        """Apply one mutation, at most once per clientMutationID; `by` is the caller's sub
        (on the version it writes), `role` its role, `moved` as in contract 6."""
        (mutation,) = typed(self._store, mutation.tenant_id, [mutation])
        (result,) = self._apply_in_order(mutation.tenant_id, [mutation], by, None, role, moved)
        if result.error is not None:
            raise result.error
        assert result.record is not None
        return Written(result.record, replayed=result.replayed)

    def push(
        self,
        tenant_id: str,
        mutations: list[Mutation],
        by: str | None = None,
        since: str | None = None,
        role: str | None = None,
        moved: bool = False,
    ) -> list[PushResult]:
        """Apply mutations with the results and final state of applying them one by one
        in order, each atomically on its own; one result per mutation. `since`: the
        change token of the copy the device edited (None: it holds none); a push
        from a copy of a deleted tenant is refused (contract 3.8)."""
        check_identifier(tenant_id, "tenantID")
        if len(mutations) > MAX_PUSH:
            raise BadUserInput(f"at most {MAX_PUSH} mutations per push, got {len(mutations)}")
        if since is not None:
            check_token(since, "since")
        mutations = typed(self._store, tenant_id, mutations)
        return self._apply_in_order(tenant_id, mutations, by, since, role, moved)

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

    def delete(self, item_type: ItemType, tenant_id: str, entity_id: str, token: str) -> Record:
        return self.apply(Mutation("delete", item_type, tenant_id, entity_id, token)).record

    def _apply_in_order(
        self,
        tenant_id: str,
        mutations: list[Mutation],
        by: str | None = None,
        since: str | None = None,
        role: str | None = None,
        moved: bool = False,
    ) -> list[PushResult]:
        """Group commit: the writes go in as few transactions as DynamoDB allows, each
        holding the next mutations in order (docs/ordering.md, "Group commit")."""
        tenant = TenantCheck(self._store, tenant_id, since)
        results: dict[int, PushResult] = {}
        todo: list[Entry] = []
        for position, mutation in enumerate(mutations):
            if mutation.tenant_id != tenant_id:
                error = BadUserInput("every mutation of a push must name the push's tenantID")
                results[position] = answer(mutation, error)
                continue
            try:
                todo.append(Entry(position, mutation.validated(), by=by, role=role))
            except SyncError as exc:
                results[position] = answer(mutation, exc)
        refusal = tenant.of_push()
        if refusal is not None:
            for entry in todo:
                results[entry.position] = answer(entry.mutation, refusal)
            todo = []
        if todo:
            known = Known(
                *self._store.read_many(
                    tenant_id,
                    (e.mutation.entity_id for e in todo if e.mutation.entity_id is not None),
                    (e.client_mutation_id for e in todo if e.client_mutation_id is not None),
                ),
                moved=moved,
                roster=lambda: self._store.roster(tenant_id),
            )
            todo = with_attachments(self._attachments, todo, known, results)
            while todo:
                todo = self._next_transaction(tenant_id, todo, known, results, tenant)
        return [results[position] for position in range(len(mutations))]

    def _next_transaction(
        self,
        tenant_id: str,
        todo: list[Entry],
        known: Known,
        results: dict[int, PushResult],
        tenant: TenantCheck,
    ) -> list[Entry]:
        """Answer the next mutations in order: those decided by what the push knows
        (replays, refusals), and one transaction of writes; return the rest."""
        group: list[Plan] = []
        taken: set[tuple[str, str]] = set()  # entity ids and clientMutationIDs in `group`
        items = 0
        stream_items = 0
        scanned = 0
        for entry in todo:
            claims = entry.claims()
            if claims & taken:
                break  # a second write of one entity (or id) waits for the first's outcome
            try:
                decision = deciding.decide(entry, known, self._history)
            except SyncError as exc:
                decision = exc
            except Exception:
                logger.exception("push entry failed (%s)", entry.mutation.verb)
                decision = internal_error()
            if isinstance(decision, Plan):
                # A transaction of Member writes also checks the writer's access, once.
                guard = decision.member is not None and not any(p.member for p in group)
                if items + decision.items + guard > _ITEMS_FOR_WRITES:
                    break
                streams = decision.entries.stream_items
                if group and stream_items + streams > STREAM_ITEMS_CAP:
                    break
                items += decision.items + guard
                stream_items += streams
                group.append(decision)
                taken |= claims
                if decision.moving:  # the move ends its transaction: the next see it done
                    scanned += 1
                    break
            else:
                results[entry.position] = self._conclude(tenant, entry, decision, known)
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
            known.moved |= plan.member is not None
            if plan.outcome is not None:
                known.outcomes[plan.outcome.client_mutation_id] = replace(
                    plan.outcome, record=record
                )
        retry: list[Entry] = []
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
                    refusal = outside_view(entry, refusal)
                results[entry.position] = self._conclude(tenant, entry, refusal, known)
        return retry + rest

    def _commit(
        self, tenant_id: str, group: list[Plan]
    ) -> tuple[list[Record], list[SyncError | OutcomeRecorded | None]]:
        """Commit the longest prefix of `group` that fits one transaction: its records;
        else why each write of `group` was refused (None: not refused, try again)."""
        floor = max((p.expected for p in group if p.expected is not None), default=None)
        sent: list[Record] = []  # the records of the last transaction sent
        marked = [False]  # whether its head carries the copies' mark on
        wrote: list[Head | None] = [None]  # the head it wrote

        members = [p for p in group if p.member is not None]
        by = members[0].entry.by if members else None
        guard = MemberGuard(by, any(p.moving for p in members)) if by is not None else None

        def fit(link: Link) -> list[Plan]:
            room = _ITEMS_FOR_WRITES - link.checked_items - (guard is not None)
            return fitting(group, room, link.streams.restricted)

        def attempt(first: str, link: Link) -> list[Record]:
            fitting = fit(link)
            if not fitting and link.streams.items:
                # The head's stream entries and this write do not fit one transaction:
                # seen applied by consistent reads instead (docs/ordering.md).
                streams = link.streams
                if not self._store.stream_entries_applied(tenant_id, streams.check, streams.gone):
                    raise TransactionConflict("the previous write's entries are not yet applied")
                link = replace(link, streams=Streams(streams.restricted, streams.main))
                fitting = fit(link)
            tokens = tokens_from(first, len(fitting))
            writes = [
                plan.write(token, self._retention)
                for plan, token in zip(fitting, tokens, strict=True)
            ]
            sent[:] = [w.record for w in writes]
            marked[0] = link.head is None or link.copies
            self._store.commit(
                tenant_id,
                writes,
                link.head,
                link.check,
                link.gone,
                later_check=link.later_check,
                later_gone=link.later_gone,
                copies=link.copies,
                guard=guard if any(w.member for w in writes) else None,
                streams=link.streams,
            )
            wrote[0] = link.head_written(writes, marked[0])
            return [w.record for w in writes]

        def head_of(records: list[Record]) -> Head:
            assert wrote[0] is not None and wrote[0].token == records[-1].change_token
            return wrote[0]

        try:
            records = self._ordering.write(tenant_id, floor, attempt, head_of)
        except WritesRefused as refused:
            return [], [refused.refusals.get(i) for i in range(len(group))]
        except Unavailable as exc:
            # Ambiguous: DynamoDB may have applied the transaction and lost its answer.
            if not self._applied(tenant_id, sent):
                return [], [exc] * len(group)
            records = list(sent)
        except SyncError as exc:
            return [], [exc] * len(group)
        except Exception:
            logger.exception("push transaction failed (%d writes)", len(group))
            return [], [internal_error()] * len(group)
        if self._on_commit is not None:
            try:
                self._on_commit(tenant_id, records[-1].change_token)
            except Exception:  # a poke is a hint: never fail the committed write
                logger.exception("on_commit failed")
        return records, [None] * (len(group) - len(records))

    def _applied(self, tenant_id: str, sent: list[Record]) -> bool:
        """Whether the transaction of `sent` committed, although its answer was lost (or
        DynamoDB said it was still in progress): a transaction is all or nothing, and
        its tokens are its own, so an entity holding one of them proves it committed.
        Not seeing it proves nothing (it may still be committing): the write stays
        UNAVAILABLE, and a resend with its clientMutationID finds its outcome."""
        if not sent:
            return False
        try:
            records, _ = self._store.read_many(tenant_id, [sent[0].id], [])
        except SyncError:
            return False
        current = records.get(sent[0].id)
        return current is not None and current.change_token == sent[0].change_token

    def _conclude(
        self, tenant: TenantCheck, entry: Entry, decision: Written | SyncError, known: Known
    ) -> PushResult:
        """The result of a mutation answered without writing; a refusal that depends
        on the server's state is stored as the clientMutationID's first outcome.
        Unless the tenant is being deleted, or was deleted since the version the
        mutation edits: then TENANT_DELETED, and nothing stored (contract 3.8)."""
        mutation = entry.mutation
        tenant_id = tenant.tenant_id
        refusal = tenant.of_answer(mutation, decision)
        if refusal is not None:
            return answer(mutation, refusal)
        if isinstance(decision, Written):
            return PushResult(
                mutation, PushStatus.APPLIED, record=decision.record, replayed=decision.replayed
            )
        cmid = mutation.client_mutation_id
        kept = decision.replayed or not is_stored_error(decision)  # nothing to store
        if cmid is None or cmid in known.outcomes or kept:  # stored: a replay refused
            return answer(mutation, decision)
        outcome = StoredOutcome(cmid, mutation.fingerprint(), error=decision, expires_at=expiry())
        try:
            self._store.put_outcome(tenant_id, outcome)
        except OutcomeRecorded:
            return self._replay_recorded(tenant_id, entry)
        except TenantDeleted as exc:  # marked since the head was read: nothing stored
            return answer(mutation, exc)
        known.outcomes[cmid] = outcome
        return answer(mutation, decision)

    def _replay_recorded(self, tenant_id: str, entry: Entry) -> PushResult:
        """The outcome a racing twin of this mutation (same clientMutationID) stored."""
        mutation = entry.mutation
        assert mutation.client_mutation_id is not None
        stored = self._store.get_outcome(tenant_id, mutation.client_mutation_id)
        if stored is None:  # recorded, then expired in between: vanishingly rare
            return answer(mutation, Unavailable("retry this mutation"))
        try:
            written = replay_for(mutation, entry.by, stored, {})
        except SyncError as exc:
            return answer(mutation, exc)
        return PushResult(mutation, PushStatus.APPLIED, record=written.record, replayed=True)
