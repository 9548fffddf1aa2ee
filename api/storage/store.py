"""The DynamoDB store: records in and out, one transaction per write.

Every PynamoDB and botocore exception is translated here, at the boundary, into
a domain error (`api.domain.errors`); nothing above this module sees them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError
from pynamodb.connection import Connection
from pynamodb.constants import ALL_OLD
from pynamodb.exceptions import PutError, PynamoDBException, TransactWriteError
from pynamodb.transactions import TransactWrite

from api.domain import catalog
from api.domain.chain import Head, prove_tail
from api.domain.errors import (
    OutcomeRecorded,
    StaleHead,
    SyncError,
    TransactionConflict,
    Unavailable,
    WritesRefused,
)
from api.domain.mutations import StoredOutcome, Write
from api.domain.records import LogTail, Record, write_refusal
from api.domain.tokens import token_after, token_time
from api.storage import keys
from api.storage.models import HeadItem, OutcomeItem, RecordItem

# Attribute names as stored, from the models (reads on every request skip model objects).
_PK = RecordItem.pk.attr_name
_SK = RecordItem.sk.attr_name
_TOKEN = RecordItem.token.attr_name
_PREV = RecordItem.prev.attr_name
_TYPE = RecordItem.type.attr_name
_ID = RecordItem.id.attr_name
_CREATED_MS = RecordItem.created_ms.attr_name
_DELETED = RecordItem.deleted.attr_name
_FIELDS = RecordItem.fields.attr_name
_ENTRIES = HeadItem.entries.attr_name
_FINGERPRINT = OutcomeItem.fingerprint.attr_name
_OUTCOME = OutcomeItem.outcome.attr_name
_EXPIRES = OutcomeItem.expires.attr_name
assert HeadItem.token.attr_name == _TOKEN and HeadItem.prev.attr_name == _PREV
# BatchGetItem reads at most this many keys per call.
_BATCH_GET_KEYS = 100
# Keys a throttled BatchGetItem leaves unprocessed are asked for again this often.
_BATCH_GET_ROUNDS = 5

# Error codes meaning "the store is busy or briefly unwell": the client may retry.
_RETRYABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "LimitExceededException",
    }
)


class DynamoStore:
    """Reads and writes records of the single table (key design: `api.storage.keys`)."""

    def on_response(self, hook: Callable[..., None]) -> None:
        """Call `hook(parsed=...)` after every DynamoDB call (e.g. to count capacity)."""
        _connection().client.meta.events.register(
            "after-call.dynamodb", hook, unique_id=f"{hook.__module__}.{hook.__qualname__}"
        )

    def head(self, tenant_id: str) -> Head | None:
        item = _get_raw(keys.log_pk(tenant_id), keys.HEAD_SK)
        return None if item is None else _head_from_raw(item)

    def log_tail(self, tenant_id: str, after: str | None, count: int) -> LogTail:
        """The head and up to `count` of the newest log entries above `after`, in one
        descending Query (the head sorts above every token), and what they prove
        (`api.domain.chain`): the sync's bound and the linked entries below it.

        When the head's transaction wrote more entries than the Query could return,
        a second Query reads them all: without them the bound would stay below it."""
        log_pk = keys.log_pk(tenant_id)
        raw_items, _ = _query_page(
            log_pk, None if after is None else RecordItem.sk > after, count + 1, ascending=False
        )
        head: Head | None = None
        head_prev = None
        if raw_items and raw_items[0][_SK]["S"] == keys.HEAD_SK:
            head_item, raw_items = raw_items[0], raw_items[1:]
            head, head_prev = _head_from_raw(head_item), _prev_of(head_item)
        entries = {raw[_SK]["S"]: raw for raw in raw_items}
        links = {t: _prev_of(r) for t, r in entries.items()}
        head_token = None if head is None else head.token
        proof = prove_tail(head_token, head_prev, links, after)
        if head is not None and proof.bound != head.token and len(raw_items) == count:
            lowest = max(filter(None, (after, head_prev)), default=None)
            if head.entries > count and (lowest is None or lowest < head.token):
                between = _log_range(lowest, head.token)
                for raw in _query_page(log_pk, between, head.entries)[0]:
                    entries[raw[_SK]["S"]] = raw
                    links[raw[_SK]["S"]] = _prev_of(raw)
                proof = prove_tail(head.token, head_prev, links, after)
        return LogTail(
            head=head_token,
            bound=proof.bound,
            records=[_record_from_raw(tenant_id, entries[t]) for t in proof.linked],
            complete=proof.complete,
        )

    def get(self, tenant_id: str, entity_id: str) -> Record | None:
        item = _get_raw(keys.tenant_pk(tenant_id), keys.entity_sk(entity_id))
        return None if item is None else _record_from_raw(tenant_id, item)

    def read_many(
        self, tenant_id: str, entity_ids: Iterable[str], client_mutation_ids: Iterable[str]
    ) -> tuple[dict[str, Record], dict[str, StoredOutcome]]:
        """Entities and stored outcomes of one tenant, by id (absent: none), strongly
        consistent, in one BatchGetItem per 100 keys: what a push is based on."""
        pk = keys.tenant_pk(tenant_id)
        wanted = [keys.entity_sk(i) for i in dict.fromkeys(entity_ids)]
        wanted += [keys.outcome_sk(c) for c in dict.fromkeys(client_mutation_ids)]
        records: dict[str, Record] = {}
        outcomes: dict[str, StoredOutcome] = {}
        for start in range(0, len(wanted), _BATCH_GET_KEYS):
            for raw in _batch_get_raw(pk, wanted[start : start + _BATCH_GET_KEYS]):
                sk = raw[_SK]["S"]
                if keys.is_outcome_sk(sk):
                    outcome = _outcome_from_raw(tenant_id, raw)
                    if outcome is not None:
                        outcomes[outcome.client_mutation_id] = outcome
                else:
                    record = _record_from_raw(tenant_id, raw)
                    records[record.id] = record
        return records, outcomes

    def changes(
        self, tenant_id: str, after: str | None, upper: str, limit: int
    ) -> tuple[list[Record], bool]:
        """Log entries with after < token <= upper, ascending; and whether more follow."""
        log_pk, condition = keys.log_pk(tenant_id), _log_range(after, upper)
        raw_items: list[dict[str, Any]] = []
        start_key = None
        # One Query, unless DynamoDB's 1 MB page limit cuts it short.
        while len(raw_items) <= limit:
            items, start_key = _query_page(
                log_pk, condition, limit + 1 - len(raw_items), start_key=start_key
            )
            raw_items += items
            if start_key is None:
                break
        records = [_record_from_raw(tenant_id, raw) for raw in raw_items[: limit + 1]]
        return records[:limit], len(records) > limit

    def bulk_load(self, tenant_id: str, records: list[Record]) -> None:
        """Load records of one tenant (an import, or benchmark data) with BatchWriteItem.

        Not transactional and not for a tenant that is being written. The records
        extend the tenant's chain in token order, and the head moves only after
        every entry is written, so a sync never bounds itself above a missing one.
        """
        if not records:
            return
        head_now = self.head(tenant_id)
        head = None if head_now is None else head_now.token
        ordered = sorted(records, key=lambda r: r.change_token)
        if head is not None and ordered[0].change_token <= head:
            raise ValueError("bulk_load: every record must be newer than the tenant's head")
        prev = head
        with _translated(), RecordItem.batch_write() as batch:
            for record in ordered:
                batch.save(_entity_item(record))
                batch.save(_log_item(record, prev))
                prev = record.change_token
        new_head = HeadItem(
            keys.log_pk(tenant_id),
            keys.HEAD_SK,
            token=ordered[-1].change_token,
            prev=ordered[-2].change_token if len(ordered) > 1 else head,
        )
        with _translated():
            new_head.save(condition=_head_is(head))

    def get_outcome(self, tenant_id: str, client_mutation_id: str) -> StoredOutcome | None:
        raw = _get_raw(keys.tenant_pk(tenant_id), keys.outcome_sk(client_mutation_id))
        return None if raw is None else _outcome_from_raw(tenant_id, raw)

    def put_outcome(self, tenant_id: str, outcome: StoredOutcome) -> None:
        """Store a failed mutation's outcome alone; OutcomeRecorded if one exists."""
        try:
            _outcome_item(tenant_id, outcome).save(condition=_outcome_absent())
        except PutError as exc:
            if _error_code(exc) == "ConditionalCheckFailedException":
                raise OutcomeRecorded() from exc
            raise _translate(exc) from exc
        except BotoCoreError as exc:
            raise _translate(exc) from exc

    def commit(
        self, tenant_id: str, writes: Sequence[Write], head: str | None, check: Collection[str]
    ) -> None:
        """Write versions of distinct entities as one TransactWriteItems, the next link
        of the tenant's chain (docs/ordering.md): each write's entity (conditioned on
        its expected token, or on being new), the delete of its old log entry, its new
        log entry at its token (linked to the entry before it), its outcome; the head
        (conditioned on holding `head`); and the chain's check that the log entries
        at `check` (the previous transaction's, unless this process saw them applied)
        exist, as a condition on the delete of an entry this transaction replaces, or
        as a ConditionCheck.

        Tokens must ascend in order and exceed `head`. Raises WritesRefused naming
        the writes whose entity or outcome refused the transaction, StaleHead,
        TransactionConflict (retry), or Unavailable.
        """
        # Each action's role and write, in the order DynamoDB reports cancellation
        # reasons: PynamoDB sends condition checks, deletes, puts, then updates.
        checks: list[_Role] = []
        deletes: list[_Role] = []
        puts: list[_Role] = []
        log_pk = keys.log_pk(tenant_id)
        prev = head
        try:
            with (
                _translated(),
                TransactWrite(connection=_connection(), return_consumed_capacity="TOTAL") as tx,
            ):
                for index, write in enumerate(writes):
                    record, expected = write.record, write.expected_token
                    if expected is not None:
                        # One action per item: the chain's check rides on this delete.
                        old_entry = RecordItem(log_pk, expected)
                        if expected in check:
                            tx.delete(old_entry, condition=RecordItem.sk.exists())
                            deletes.append(_Role("chain", index))
                        else:
                            tx.delete(old_entry)
                            deletes.append(_Role("old entry", index))
                    tx.save(
                        _entity_item(record),
                        condition=_entity_condition(record, expected),
                        return_values=ALL_OLD,
                    )
                    puts.append(_Role("entity", index))
                    tx.save(_log_item(record, prev))
                    puts.append(_Role("entry", index))
                    prev = record.change_token
                    if write.outcome is not None:
                        tx.save(
                            _outcome_item(tenant_id, write.outcome),
                            condition=_outcome_absent(),
                            return_values=ALL_OLD,
                        )
                        puts.append(_Role("outcome", index))
                replaced = {w.expected_token for w in writes}
                for token in sorted(set(check) - replaced):
                    tx.condition_check(RecordItem, log_pk, token, condition=RecordItem.sk.exists())
                    checks.append(_Role("chain", -1))
                tx.update(
                    HeadItem(log_pk, keys.HEAD_SK),
                    actions=[
                        HeadItem.token.set(writes[-1].record.change_token),
                        HeadItem.prev.remove() if head is None else HeadItem.prev.set(head),
                        HeadItem.entries.remove()
                        if len(writes) == 1
                        else HeadItem.entries.set(len(writes)),
                    ],
                    condition=_head_is(head),
                    return_values=ALL_OLD,
                )
        except TransactWriteError as exc:
            roles = [*checks, *deletes, *puts, _Role("head", -1)]
            raise _cancellation_error(exc, roles, writes) from exc


@dataclass(frozen=True)
class _Role:
    """What one action of a commit's transaction is for, and for which write."""

    kind: str  # entity, entry, old entry, outcome, chain, head
    write: int


def _connection() -> Connection:
    return RecordItem._get_connection().connection


def _get_raw(pk: str, sk: str) -> dict[str, Any] | None:
    """One item as DynamoDB's JSON, strongly consistent; reads on every request skip
    model objects."""
    with _translated():
        item: dict[str, Any] | None = (
            _connection()
            .get_item(RecordItem.Meta.table_name, pk, range_key=sk, consistent_read=True)
            .get("Item")
        )
    return item


def _query_page(
    pk: str,
    condition: Any,
    limit: int,
    ascending: bool = True,
    start_key: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """One consistent Query page of the partition `pk`, as DynamoDB's JSON, and the
    key to continue from (None: the range is read to its end)."""
    with _translated():
        page = RecordItem._get_connection().query(
            pk,
            range_key_condition=condition,
            scan_index_forward=ascending,
            consistent_read=True,
            exclusive_start_key=start_key,
            limit=limit,
        )
    items: list[dict[str, Any]] = page.get("Items", [])
    return items, page.get("LastEvaluatedKey")


def _log_range(after: str | None, upper: str) -> Any:
    """The log entries with after < token <= upper (no lower end: from the first)."""
    if after is None:
        return RecordItem.sk <= upper
    return RecordItem.sk.between(token_after(after), upper)


def _batch_get_raw(pk: str, sks: list[str]) -> list[dict[str, Any]]:
    """The items of `pk` at `sks` that exist (at most 100 keys), strongly consistent."""
    table = RecordItem.Meta.table_name
    pending = [{_PK: {"S": pk}, _SK: {"S": sk}} for sk in sks]
    found: list[dict[str, Any]] = []
    for round_ in range(_BATCH_GET_ROUNDS):
        if round_:
            time.sleep(0.01 * 2**round_)  # throttled: back off before asking again
        with _translated():
            # PynamoDB annotates `keys` as strings; it takes key maps like these.
            answer = _connection().batch_get_item(
                table,
                pending,  # type: ignore[arg-type]
                consistent_read=True,
            )
        found += answer.get("Responses", {}).get(table, [])
        pending = answer.get("UnprocessedKeys", {}).get(table, {}).get("Keys", [])
        if not pending:
            return found
    raise Unavailable("the data store is busy; retry later")


def _head_from_raw(raw: dict[str, Any]) -> Head:
    entries = raw.get(_ENTRIES)
    return Head(str(raw[_TOKEN]["S"]), 1 if entries is None else int(entries["N"]))


def _cancellation_error(
    exc: TransactWriteError, roles: list[_Role], writes: Sequence[Write]
) -> Exception:
    """What cancelled a commit, from its cancellation reasons (one per action, by
    position): a conflict with another transaction, then the writes refused by
    their entity's or outcome's condition, then a stale head, then the chain."""
    if _error_code(exc) != "TransactionCanceledException":
        return _translate(exc)
    refusals: dict[int, SyncError | OutcomeRecorded] = {}
    stale: StaleHead | None = None
    chain_unready = False
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
                current = _record_from_raw(write.record.tenant_id, raw) if raw else None
                refusals[role.write] = _entity_error(write, current)
        elif role.kind == "head":
            # ALL_OLD is empty when the head does not exist yet.
            stale = StaleHead(_head_from_raw(raw) if raw else None)
        elif role.kind == "chain":
            chain_unready = True
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


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except TransactWriteError:
        raise  # handled with its cancellation reasons by the caller
    except (PynamoDBException, BotoCoreError) as exc:
        raise _translate(exc) from exc


def _translate(exc: Exception) -> Exception:
    if _error_code(exc) in _RETRYABLE_CODES or isinstance(
        getattr(exc, "cause", exc), BotoCoreError
    ):
        return Unavailable("the data store is busy or unreachable; retry later")
    return exc


def _error_code(exc: Exception) -> str | None:
    # PynamoDB's own `cause_response_code` fails when the cause is a connection error.
    response = getattr(getattr(exc, "cause", None), "response", None) or {}
    code = response.get("Error", {}).get("Code")
    return str(code) if code else None


def _entity_item(record: Record) -> RecordItem:
    return _item(keys.tenant_pk(record.tenant_id), keys.entity_sk(record.id), record)


def _log_item(record: Record, prev: str | None) -> RecordItem:
    item = _item(keys.log_pk(record.tenant_id), record.change_token, record)
    item.prev = prev
    return item


def _prev_of(raw: dict[str, Any]) -> str | None:
    prev = raw.get(_PREV)
    return None if prev is None else str(prev["S"])


def _head_is(head: str | None) -> Any:
    """The head holds `head` (absent: the tenant has no write yet)."""
    return HeadItem.token.does_not_exist() if head is None else HeadItem.token == head


def _item(pk: str, sk: str, record: Record) -> RecordItem:
    return RecordItem(
        pk,
        sk,
        type=record.item_type.code,
        id=record.id,
        token=record.change_token,
        created_ms=int(record.created_at.timestamp() * 1000),
        deleted=True if record.deleted else None,
        fields=dict(record.fields) or None,
    )


def _record_from_raw(tenant_id: str, raw: dict[str, Any]) -> Record:
    """A record from DynamoDB's JSON (a GetItem, a Query page, a cancellation reason)."""
    token = raw[_TOKEN]["S"]
    fields = raw.get(_FIELDS, {}).get("M", {})
    return Record(
        item_type=catalog.BY_CODE[raw[_TYPE]["S"]],
        tenant_id=tenant_id,
        id=raw[_ID]["S"],
        change_token=token,
        created_at=datetime.fromtimestamp(int(raw[_CREATED_MS]["N"]) / 1000, tz=UTC),
        updated_at=token_time(token),
        deleted=raw.get(_DELETED, {}).get("BOOL", False),
        fields={name: _plain(value) for name, value in fields.items()},
    )


def _plain(value: dict[str, Any]) -> Any:
    # Field values are strings or booleans (see api.domain.item_types).
    ((kind, inner),) = value.items()
    return inner if kind in ("S", "BOOL") else None


def _outcome_absent() -> Any:
    """Absent, or expired but not yet removed by TTL."""
    return OutcomeItem.pk.does_not_exist() | (OutcomeItem.expires < int(time.time()))


def _outcome_item(tenant_id: str, outcome: StoredOutcome) -> OutcomeItem:
    return OutcomeItem(
        keys.tenant_pk(tenant_id),
        keys.outcome_sk(outcome.client_mutation_id),
        fingerprint=outcome.fingerprint,
        outcome=outcome.to_json(),
        expires=outcome.expires_at,
    )


def _outcome_from_raw(tenant_id: str, raw: dict[str, Any]) -> StoredOutcome | None:
    """A stored outcome from DynamoDB's JSON; None once expired (TTL deletes lazily:
    an expired outcome may linger, and counts as gone)."""
    expires = int(raw[_EXPIRES]["N"])
    if expires < time.time():
        return None
    client_mutation_id = raw[_SK]["S"][len(keys.outcome_sk("")) :]
    fingerprint, data = raw[_FINGERPRINT]["S"], raw[_OUTCOME]["S"]
    stored = StoredOutcome.from_json(tenant_id, client_mutation_id, fingerprint, data)
    return replace(stored, expires_at=expires)
