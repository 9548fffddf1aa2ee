"""The transaction writer: a tenant's writes as one TransactWriteItems (the next
link of its chain, docs/ordering.md), lone outcome items, bulk loads; and what a
cancelled transaction's reasons mean for each write."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pynamodb.constants import ALL_OLD
from pynamodb.exceptions import TransactWriteError
from pynamodb.transactions import TransactWrite

from api.domain.chain import NO_STREAMS, StaleHead, Streams
from api.domain.errors import (
    NotAMember,
    OutcomeRecorded,
    RoleForbidden,
    SyncError,
    TenantDeleted,
    TransactionConflict,
    Unavailable,
    WritesRefused,
)
from api.domain.membership import MemberGuard
from api.domain.mutations import StoredOutcome, Write
from api.domain.records import Record, write_refusal
from api.storage import codecs, keys, members, reads
from api.storage.errors import error_code, translate, translated
from api.storage.models import FenceItem, HeadItem, OutcomeItem, RecordItem
from api.storage.reads import connection
from api.storage.stream_writes import StreamWrites


def commit(
    tenant_id: str,
    writes: Sequence[Write],
    head: str | None,
    check: Collection[str],
    gone: Collection[str] = (),
    later_check: Collection[str] = (),
    later_gone: Collection[str] = (),
    copies: bool = False,
    guard: MemberGuard | None = None,
    streams: Streams = NO_STREAMS,
    device: str | None = None,
) -> None:
    """Write versions of distinct entities as one TransactWriteItems, the next link
    of the tenant's chain (docs/ordering.md): each write's entity (conditioned on
    its expected token, or on being new), the delete of its old log entry, its new
    log entry at its token (linked to the entry before it), its outcome; the head
    (conditioned on holding `head`); and the chain's check that the log entries
    at `check` (the previous transaction's, unless this process saw them applied)
    exist, as a condition on the delete of an entry this transaction replaces, or
    as a ConditionCheck, and that the entries at `gone` (those the previous
    transaction's writes removed) do not; likewise the later copies at
    `later_check` and `later_gone` (docs/ordering.md, "Catching up an upgrade").
    `copies`: the head read says every live entity has its copy, so this
    transaction, which keeps them too, carries the mark on (a first one sets it).
    With history, each replaced version is kept (`Write.kept`); each write's later
    copy is put or removed (`Write.later`). Each Member write puts (deletes) its
    access item, and `guard` puts the tenant's marker (conditioned absent) or checks
    the writer's own access item (still an owner's), contract 6. Who sees what
    (`Write.entries`, docs/ordering.md "Who sees what"): a main entry is linked to
    the previous main entry (`streams.main`), each stream entry is put and the
    previous version's removed, and `streams` names the head's transaction's stream
    entries to check (present, or gone), as its main entries are.

    `device`: the writer's device (`X-Device-ID`), kept on the head for the stream's
    silent pushes, which skip it (absent: none named).

    Tokens must ascend in order and exceed `head`. Raises WritesRefused naming
    the writes whose entity or outcome refused the transaction, StaleHead,
    TransactionConflict (retry), or Unavailable.
    """
    # Each action's role and write, in the order DynamoDB reports cancellation
    # reasons: PynamoDB sends condition checks, deletes, puts, then updates.
    checks: list[_Role] = []
    deletes: list[_Role] = []
    puts: list[_Role] = []
    # A group's stream entries superseded, then the usage item's flag (before the head).
    updates: list[_Role] = []
    log_pk = keys.log_pk(tenant_id)
    later_pk = keys.later_pk(tenant_id)
    check_later, gone_later = frozenset(later_check), frozenset(later_gone)
    # The later copies this transaction puts and removes (the head records them).
    put_later: set[str] = set()
    removed_later: set[str] = set()
    seen = StreamWrites(tenant_id, head, streams)
    try:
        with (
            translated(),
            TransactWrite(connection=connection(), return_consumed_capacity="TOTAL") as tx,
        ):
            for index, write in enumerate(writes):
                record, expected = write.record, write.expected_token
                if expected is not None and write.entries.main_removed:
                    # One action per item: the chain's check rides on this delete.
                    old_entry = RecordItem(log_pk, expected)
                    if expected in check:
                        tx.delete(old_entry, condition=RecordItem.sk.exists())
                        deletes.append(_Role("chain", index))
                    elif expected in gone:
                        # A stale write (its entity's condition fails too) of an
                        # entry the previous transaction removed: the check rides here.
                        tx.delete(old_entry, condition=RecordItem.sk.does_not_exist())
                        deletes.append(_Role("chain", index))
                    else:
                        tx.delete(old_entry)
                        deletes.append(_Role("old entry", index))
                tx.save(
                    codecs.entity_item(record),
                    condition=_entity_condition(record, expected),
                    return_values=ALL_OLD,
                )
                puts.append(_Role("entity", index))
                if seen.main_entry(tx, write):
                    puts.append(_Role("entry", index))
                for role, what in seen.stream_entries(tx, write):
                    {"delete": deletes, "put": puts, "update": updates}[what].append(
                        _Role(role, index)
                    )
                if write.kept is not None:
                    tx.save(codecs.version_item(write.kept, write.expires_at))
                    puts.append(_Role("version", index))
                if write.later_removed is not None:
                    sk = codecs.later_sk(record, write.later_removed)
                    removed_later.add(sk)
                    tx.delete(RecordItem(later_pk, sk), condition=_later_condition(sk, check_later))
                    deletes.append(_Role("chain" if sk in check_later else "later", index))
                if write.later is not None:
                    sk = codecs.later_sk(record, write.later)
                    put_later.add(sk)
                    tx.save(
                        codecs.later_item(record, write.later),
                        condition=_later_condition(sk, check_later, gone_later),
                    )
                    checked = sk in check_later or sk in gone_later
                    puts.append(_Role("chain" if checked else "later", index))
                if write.member is not None:
                    action, kind = members.access_item(
                        tx, tenant_id, write.member, record, guard, write.group_changes
                    )
                    (deletes if action == "delete" else puts).append(_Role(kind, index))
                if write.outcome is not None:
                    tx.save(
                        codecs.outcome_item(tenant_id, write.outcome),
                        condition=_outcome_absent(),
                        return_values=ALL_OLD,
                    )
                    puts.append(_Role("outcome", index))
            if head is None:
                # The tenant's first transaction: its first token above the tenant id's
                # fence, the highest token a deleted life of it had (contract 3.8).
                first = writes[0].record.change_token
                tx.condition_check(
                    FenceItem,
                    keys.fence_pk(tenant_id),
                    keys.FENCE_SK,
                    condition=FenceItem.token.does_not_exist() | (FenceItem.token < first),
                )
                checks.append(_Role("fence", -1))
            guarded = None if guard is None else members.guard(tx, tenant_id, guard, writes)
            if guarded:
                (checks if guarded[0] == "check" else puts).append(_Role(guarded[1], -1))
            replaced = {w.expected_token for w in writes if w.entries.main_removed}
            for token in sorted(set(check) - replaced):
                tx.condition_check(RecordItem, log_pk, token, condition=RecordItem.sk.exists())
                checks.append(_Role("chain", -1))
            for token in sorted(set(gone) - replaced):
                tx.condition_check(
                    RecordItem, log_pk, token, condition=RecordItem.sk.does_not_exist()
                )
                checks.append(_Role("chain", -1))
            for sk in sorted(check_later - put_later - removed_later):
                tx.condition_check(RecordItem, later_pk, sk, condition=RecordItem.sk.exists())
                checks.append(_Role("chain", -1))
            for sk in sorted(gone_later - put_later - removed_later):
                tx.condition_check(
                    RecordItem, later_pk, sk, condition=RecordItem.sk.does_not_exist()
                )
                checks.append(_Role("chain", -1))
            checks += [_Role("chain", -1)] * seen.checks(tx)
            # Attachments read the flag off the usage item, set with the head's.
            if seen.usage_flag(tx):
                updates.append(_Role("usage", -1))
            removed = {
                w.expected_token
                for w in writes
                if w.expected_token is not None and w.entries.main_removed
            }
            tx.update(
                HeadItem(log_pk, keys.HEAD_SK),
                actions=[
                    HeadItem.token.set(writes[-1].record.change_token),
                    HeadItem.prev.remove() if head is None else HeadItem.prev.set(head),
                    HeadItem.entries.remove()
                    if len(writes) == 1
                    else HeadItem.entries.set(len(writes)),
                    HeadItem.removed.set(removed) if removed else HeadItem.removed.remove(),
                    *([HeadItem.born.set(writes[0].record.change_token)] if head is None else []),
                    # Copies stay marked only along an unbroken run of transactions
                    # that kept them (a rollback's server keeps none: models.HeadItem).
                    *(
                        [HeadItem.copies.set(writes[-1].record.change_token)]
                        if head is None or copies
                        else []
                    ),
                    HeadItem.later_put.set(put_later) if put_later else HeadItem.later_put.remove(),
                    HeadItem.device.set(device) if device else HeadItem.device.remove(),
                    HeadItem.later_removed.set(removed_later)
                    if removed_later
                    else HeadItem.later_removed.remove(),
                    *seen.head_actions(writes[-1].record.change_token, len(writes)),
                ],
                condition=_head_is(head),
                return_values=ALL_OLD,
            )
    except TransactWriteError as exc:
        roles = [*checks, *deletes, *puts, *updates, _Role("head", -1)]
        raise _cancellation_error(exc, roles, writes, lambda: reads.fence(tenant_id)) from exc


def put_outcome(tenant_id: str, outcome: StoredOutcome) -> None:
    """Store a failed mutation's outcome alone, in one TransactWriteItems with a check
    that the tenant is not being deleted (its head carries no mark): an outcome is
    never written behind a deletion's sweep of the tenant's partition (contract 3.8).
    DynamoDB isolates a transaction from the mark's UpdateItem (serializable), so
    the outcome is written before the mark, where the deletion finds and removes
    it, or not at all. OutcomeRecorded if one exists; TenantDeleted when marked."""
    try:
        with (
            translated(),
            TransactWrite(connection=connection(), return_consumed_capacity="TOTAL") as tx,
        ):
            tx.condition_check(
                HeadItem,
                keys.log_pk(tenant_id),
                keys.HEAD_SK,
                condition=HeadItem.deleting_by.does_not_exist(),
            )
            tx.save(codecs.outcome_item(tenant_id, outcome), condition=_outcome_absent())
    except TransactWriteError as exc:
        reasons = [r.code if r is not None else None for r in exc.cancellation_reasons or []]
        if reasons[:1] == ["ConditionalCheckFailed"]:
            raise TenantDeleted("this tenant is being deleted") from exc
        if reasons[1:2] == ["ConditionalCheckFailed"]:
            raise OutcomeRecorded() from exc
        if error_code(exc) == "TransactionCanceledException":  # a racing transaction
            raise Unavailable("the outcome was not stored; retry this mutation") from exc
        raise translate(exc) from exc


def bulk_load(tenant_id: str, head: str | None, records: list[Record], copies: bool = True) -> None:
    """Load records of one tenant above its head `head` with BatchWriteItem (see
    `DynamoStore.bulk_load`): each live one with its copy. `copies`: whether the
    tenant's entities have theirs (its head says so; a new tenant's do)."""
    ordered = sorted(records, key=lambda r: r.change_token)
    if head is not None and ordered[0].change_token <= head:
        raise ValueError("bulk_load: every record must be newer than the tenant's head")
    prev = head
    with translated(), RecordItem.batch_write() as batch:
        for record in ordered:
            if not record.deleted:
                release = record.item_type.copy_release(record.fields, record.copy_release)
                record = replace(record, copy_release=release)
                batch.save(codecs.later_item(record, release))
            batch.save(codecs.entity_item(record))
            batch.save(codecs.log_item(record, prev))
            prev = record.change_token
    new_head = HeadItem(
        keys.log_pk(tenant_id),
        keys.HEAD_SK,
        token=ordered[-1].change_token,
        prev=ordered[-2].change_token if len(ordered) > 1 else head,
        born=ordered[0].change_token if head is None else None,
        copies=ordered[-1].change_token if head is None or copies else None,
    )
    with translated():
        new_head.save(condition=_head_is(head))


@dataclass(frozen=True)
class _Role:
    """What one action of a commit's transaction is for, and for which write."""

    kind: str  # entity, entry, old entry, version, outcome, chain, usage, head
    write: int


def _cancellation_error(
    exc: TransactWriteError,
    roles: list[_Role],
    writes: Sequence[Write],
    read_fence: Callable[[], str | None],
) -> Exception:
    """What cancelled a commit, from its cancellation reasons (one per action, by
    position): a conflict with another transaction, then the writes refused by
    their entity's or outcome's condition, then a stale head, then the chain."""
    if error_code(exc) != "TransactionCanceledException":
        return translate(exc)
    refusals: dict[int, SyncError | OutcomeRecorded] = {}
    stale: StaleHead | None = None
    chain_unready = False
    members: SyncError | None = None
    for role, reason in zip(roles, exc.cancellation_reasons, strict=False):
        if reason is None:
            continue
        if reason.code == "TransactionConflict":
            return TransactionConflict(reason.message or "transaction conflict")
        if reason.code != "ConditionalCheckFailed":
            continue
        raw = reason.raw_item or {}
        if role.kind == "outcome":
            # First: a racing twin already did this very mutation.
            refusals[role.write] = OutcomeRecorded()
        elif role.kind == "entity":
            if not isinstance(refusals.get(role.write), OutcomeRecorded):
                write = writes[role.write]
                current = codecs.record_from_raw(write.record.tenant_id, raw) if raw else None
                refusals[role.write] = _entity_error(write, current)
        elif role.kind == "head":
            if codecs.is_deleting(raw):
                return TenantDeleted("this tenant is being deleted")
            # ALL_OLD is empty when the head does not exist yet.
            stale = StaleHead(codecs.head_from_raw(raw) if raw else None)
        elif role.kind == "chain":
            chain_unready = True
        elif role.kind == "marker":
            members = NotAMember("this tenant moved to membership as data meanwhile")
        elif role.kind == "guard":
            members = RoleForbidden("you are no longer an owner of this tenant")
        elif role.kind == "fence":
            # Read it (one GetItem, once per tenant written again through a server
            # whose clock is behind its fence), so that the retry starts above it.
            stale = StaleHead(None, fence=read_fence())
    if members is not None:  # each Member write is refused; the others may retry
        for index, write in enumerate(writes):
            if write.member is not None:
                refusals.setdefault(index, members)
    if refusals:
        return WritesRefused(refusals)
    if stale is not None:
        return stale
    if chain_unready:
        # The head holds the token we expected but an entry of its transaction is
        # not there: by DynamoDB's documented semantics an entry being committed is
        # reported as TransactionConflict instead; either way, wait and retry.
        return TransactionConflict("the previous write's log entries are not yet applied")
    return Unavailable("the write was cancelled by the data store")


def _entity_error(write: Write, current: Record | None) -> SyncError:
    record = write.record
    refusal = write_refusal(record.item_type, record.id, write.expected_token, current)
    # The entity's condition failed, so ALL_OLD returned what refused it.
    return refusal or Unavailable("the write was cancelled by the data store")


def _entity_condition(record: Record, expected_token: str | None) -> Any:
    if expected_token is None:
        return RecordItem.pk.does_not_exist()
    return (
        (RecordItem.token == expected_token)
        & (RecordItem.type == record.item_type.code)
        & RecordItem.deleted.does_not_exist()
    )


def _later_condition(sk: str, present: Collection[str], absent: Collection[str] = ()) -> Any:
    """The chain's check riding on a write of the later copy at `sk` (two actions on
    one item are not allowed): present when the previous transaction put it, absent
    when it removed it; else none."""
    if sk in present:
        return RecordItem.sk.exists()
    if sk in absent:
        return RecordItem.sk.does_not_exist()
    return None


def _head_is(head: str | None) -> Any:
    """The head holds `head` (absent: the tenant has no write yet), and the tenant is
    not being deleted."""
    holds = HeadItem.token.does_not_exist() if head is None else HeadItem.token == head
    return holds & HeadItem.deleting_by.does_not_exist()


def _outcome_absent() -> Any:
    """Absent, or expired but not yet removed by TTL."""
    return OutcomeItem.pk.does_not_exist() | (OutcomeItem.expires < int(time.time()))
