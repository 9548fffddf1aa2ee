"""The DynamoDB store: records in and out, one transaction per write.

Every PynamoDB and botocore exception is translated here, at the boundary, into
a domain error (`api.domain.errors`); nothing above this module sees them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError
from pynamodb.connection import Connection
from pynamodb.constants import ALL_OLD
from pynamodb.exceptions import DoesNotExist, PutError, PynamoDBException, TransactWriteError
from pynamodb.transactions import TransactWrite

from api.domain import catalog
from api.domain.chain import prove_tail
from api.domain.errors import (
    OutcomeRecorded,
    StaleHead,
    TransactionConflict,
    Unavailable,
)
from api.domain.mutations import StoredOutcome
from api.domain.records import LogTail, Record, write_refusal
from api.domain.tokens import token_after, token_time
from api.storage import keys
from api.storage.models import HeadItem, OutcomeItem, RecordItem

# Attribute names as stored, from the models (reads on every request skip model objects).
_SK = RecordItem.sk.attr_name
_TOKEN = RecordItem.token.attr_name
_PREV = RecordItem.prev.attr_name
_TYPE = RecordItem.type.attr_name
_ID = RecordItem.id.attr_name
_CREATED_MS = RecordItem.created_ms.attr_name
_DELETED = RecordItem.deleted.attr_name
_FIELDS = RecordItem.fields.attr_name
assert HeadItem.token.attr_name == _TOKEN and HeadItem.prev.attr_name == _PREV

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

    def head(self, tenant_id: str) -> str | None:
        item = _get_raw(keys.log_pk(tenant_id), keys.HEAD_SK)
        return None if item is None else str(item[_TOKEN]["S"])

    def log_tail(self, tenant_id: str, after: str | None, count: int) -> LogTail:
        """The head and up to `count` of the newest log entries above `after`, in one
        descending Query (the head sorts above every token), and what they prove
        (`api.domain.chain`): the sync's bound and the linked entries below it."""
        with _translated():
            page = RecordItem._get_connection().query(
                keys.log_pk(tenant_id),
                range_key_condition=None if after is None else RecordItem.sk > after,
                scan_index_forward=False,
                consistent_read=True,
                limit=count + 1,
            )
        raw_items: list[dict[str, Any]] = page.get("Items", [])
        head = head_prev = None
        if raw_items and raw_items[0][_SK]["S"] == keys.HEAD_SK:
            head_item, raw_items = raw_items[0], raw_items[1:]
            head = str(head_item[_TOKEN]["S"])
            head_prev = _prev_of(head_item)
        entries = {raw[_SK]["S"]: raw for raw in raw_items}
        proof = prove_tail(head, head_prev, {t: _prev_of(r) for t, r in entries.items()}, after)
        return LogTail(
            head=head,
            bound=proof.bound,
            records=[_record_from_raw(tenant_id, entries[t]) for t in proof.linked],
            complete=proof.complete,
        )

    def get(self, tenant_id: str, entity_id: str) -> Record | None:
        item = _get_raw(keys.tenant_pk(tenant_id), keys.entity_sk(entity_id))
        return None if item is None else _record_from_raw(tenant_id, item)

    def changes(
        self, tenant_id: str, after: str | None, upper: str, limit: int
    ) -> tuple[list[Record], bool]:
        """Log entries with after < token <= upper, ascending; and whether more follow."""
        condition = (
            RecordItem.sk <= upper
            if after is None
            else RecordItem.sk.between(token_after(after), upper)
        )
        raw_items: list[dict[str, Any]] = []
        start_key = None
        with _translated():
            # One Query, unless DynamoDB's 1 MB page limit cuts it short.
            while len(raw_items) <= limit:
                page = RecordItem._get_connection().query(
                    keys.log_pk(tenant_id),
                    range_key_condition=condition,
                    consistent_read=True,
                    exclusive_start_key=start_key,
                    limit=limit + 1 - len(raw_items),
                )
                raw_items += page.get("Items", [])
                start_key = page.get("LastEvaluatedKey")
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
        head = self.head(tenant_id)
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
        with _translated():
            try:
                item = OutcomeItem.get(
                    keys.tenant_pk(tenant_id),
                    keys.outcome_sk(client_mutation_id),
                    consistent_read=True,
                )
            except DoesNotExist:
                return None
        # TTL deletes lazily: an expired outcome may linger, and counts as gone.
        if int(item.expires) < time.time():
            return None
        return _to_outcome(tenant_id, item)

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

    def create(
        self, record: Record, head: str | None, outcome: StoredOutcome | None = None
    ) -> None:
        """Write a new entity as the link after `head`; AlreadyExists when its id is
        taken (live or deleted)."""
        with self._transaction(record, None, head, outcome) as tx:
            tx.save(
                _entity_item(record),
                condition=RecordItem.pk.does_not_exist(),
                return_values=ALL_OLD,
            )

    def replace(
        self,
        record: Record,
        expected_token: str,
        head: str | None,
        outcome: StoredOutcome | None = None,
    ) -> None:
        """Write a new version of an entity whose current token is `expected_token`,
        as the link after `head`."""
        with self._transaction(record, expected_token, head, outcome) as tx:
            tx.save(
                _entity_item(record),
                condition=(RecordItem.token == expected_token)
                & (RecordItem.type == record.item_type.code)
                & RecordItem.deleted.does_not_exist(),
                return_values=ALL_OLD,
            )
            old_entry = RecordItem(keys.log_pk(record.tenant_id), expected_token)
            # The entry at the head is the chain's check (below); one action per item.
            if expected_token == head:
                tx.delete(old_entry, condition=RecordItem.sk.exists())
            else:
                tx.delete(old_entry)

    @contextmanager
    def _transaction(
        self,
        record: Record,
        expected_token: str | None,
        head: str | None,
        outcome: StoredOutcome | None,
    ) -> Iterator[TransactWrite]:
        """One TransactWriteItems: the caller's entity writes, the log entry, the head,
        the chain's check, and the mutation's outcome when it has a clientMutationID.

        The write is the next link of the tenant's chain (docs/ordering.md): the head
        must still hold `head`, and the log entry at `head` must exist, so this write
        cannot prepare before the previous write's entry is applied.
        """
        tenant_id = record.tenant_id
        chain_checked = head is not None
        try:
            with (
                _translated(),
                TransactWrite(connection=_connection(), return_consumed_capacity="TOTAL") as tx,
            ):
                if head is not None and head != expected_token:
                    tx.condition_check(
                        RecordItem, keys.log_pk(tenant_id), head, condition=RecordItem.sk.exists()
                    )
                yield tx
                tx.save(_log_item(record, head))
                if outcome is not None:
                    tx.save(
                        _outcome_item(tenant_id, outcome),
                        condition=_outcome_absent(),
                        return_values=ALL_OLD,
                    )
                tx.update(
                    HeadItem(keys.log_pk(tenant_id), keys.HEAD_SK),
                    actions=[
                        HeadItem.token.set(record.change_token),
                        HeadItem.prev.remove() if head is None else HeadItem.prev.set(head),
                    ],
                    condition=_head_is(head),
                    return_values=ALL_OLD,
                )
        except TransactWriteError as exc:
            raise _cancellation_error(exc, record, expected_token, chain_checked) from exc


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


def _cancellation_error(
    exc: TransactWriteError, record: Record, expected_token: str | None, chain_checked: bool
) -> Exception:
    """Name the item whose condition failed. PynamoDB orders a transaction's actions
    as condition checks, deletes, puts, updates: the chain's check (a ConditionCheck,
    or the Delete of the entry at the head) is first and the head update, the only
    update, is last; these two are named by position, the puts by key."""
    if _error_code(exc) != "TransactionCanceledException":
        return _translate(exc)
    current: Record | None = None
    entity_failed = stale_head = outcome_exists = chain_unready = False
    head_token: str | None = None
    last = len(exc.cancellation_reasons) - 1
    for position, reason in enumerate(exc.cancellation_reasons):
        if reason is None:
            continue
        if reason.code == "TransactionConflict":
            return TransactionConflict(reason.message or "transaction conflict")
        if reason.code != "ConditionalCheckFailed":
            continue
        raw = reason.raw_item or {}
        sk = raw.get(_SK, {}).get("S", "")
        if chain_checked and position == 0:
            chain_unready = True
        elif position == last:
            # ALL_OLD is empty when the head does not exist yet.
            stale_head = True
            head_token = raw[_TOKEN]["S"] if raw else None
        elif keys.is_outcome_sk(sk):
            outcome_exists = True
        else:
            # Only the entity, the head, the chain's check and the outcome carry
            # conditions, and the outcome's only fails when it exists.
            entity_failed = True
            if raw:
                current = _record_from_raw(record.tenant_id, raw)
    if outcome_exists:  # first: a racing twin already did this very mutation
        return OutcomeRecorded()
    if entity_failed:
        return _entity_error(record, expected_token, current)
    if stale_head:
        return StaleHead(head_token)
    if chain_unready:
        # The head holds the token we expected but its entry is not there: by
        # DynamoDB's documented semantics an entry being committed is reported as
        # TransactionConflict instead; either way, wait and retry.
        return TransactionConflict("the previous write's log entry is not yet applied")
    return Unavailable("the write was cancelled by the data store")


def _entity_error(record: Record, expected_token: str | None, current: Record | None) -> Exception:
    refusal = write_refusal(record.item_type, record.id, expected_token, current)
    # The entity's condition failed, so ALL_OLD returned what refused it.
    return refusal or Unavailable("the write was cancelled by the data store")


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


def _to_outcome(tenant_id: str, item: OutcomeItem) -> StoredOutcome:
    client_mutation_id = item.sk[len(keys.outcome_sk("")) :]
    stored = StoredOutcome.from_json(tenant_id, client_mutation_id, item.fingerprint, item.outcome)
    return replace(stored, expires_at=int(item.expires))
