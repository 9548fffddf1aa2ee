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
from api.domain.errors import (
    AlreadyExists,
    Conflict,
    NotFound,
    OutcomeRecorded,
    StaleHead,
    TransactionConflict,
    Unavailable,
)
from api.domain.mutations import StoredOutcome
from api.domain.records import LogTail, Record
from api.domain.tokens import token_after, token_time
from api.storage import keys
from api.storage.models import HeadItem, OutcomeItem, RecordItem

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
        return None if item is None else str(item["tok"]["S"])

    def log_tail(self, tenant_id: str, after: str | None, count: int) -> LogTail:
        """The head and up to `count` of the newest log entries above `after`: one
        descending Query, which reads the head first (it sorts above every token)."""
        with _translated():
            page = RecordItem._get_connection().query(
                keys.log_pk(tenant_id),
                range_key_condition=None if after is None else RecordItem.sk > after,
                scan_index_forward=False,
                consistent_read=True,
                limit=count + 1,
            )
        raw_items: list[dict[str, Any]] = page.get("Items", [])
        if not raw_items or raw_items[0]["sk"]["S"] != keys.HEAD_SK:
            return LogTail(head=None, records=[], complete=True)
        head = str(raw_items[0]["tok"]["S"])
        entries = raw_items[1:]
        # Entries above the head committed after it was read: the next sync's.
        records = [
            _record_from_raw(tenant_id, raw) for raw in reversed(entries) if raw["sk"]["S"] <= head
        ]
        return LogTail(
            head=head,
            records=records,
            complete="LastEvaluatedKey" not in page,
            lowest=entries[-1]["sk"]["S"] if entries else None,
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

        Not transactional and not for a tenant that is being written: each record's
        entity item and log entry and the head are written as in a normal write.
        """
        if not records:
            return
        with _translated(), RecordItem.batch_write() as batch:
            for record in records:
                batch.save(_entity_item(record))
                batch.save(_log_item(record))
        head = max(r.change_token for r in records)
        with _translated():
            HeadItem(keys.log_pk(tenant_id), keys.HEAD_SK, token=head).save(
                condition=HeadItem.token.does_not_exist() | (HeadItem.token < head)
            )

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

    def create(self, record: Record, outcome: StoredOutcome | None = None) -> None:
        """Write a new entity; AlreadyExists when its id is taken (live or deleted)."""
        with self._transaction(record, None, outcome) as tx:
            tx.save(
                _entity_item(record),
                condition=RecordItem.pk.does_not_exist(),
                return_values=ALL_OLD,
            )

    def replace(
        self, record: Record, expected_token: str, outcome: StoredOutcome | None = None
    ) -> None:
        """Write a new version of an entity whose current token is `expected_token`."""
        with self._transaction(record, expected_token, outcome) as tx:
            tx.save(
                _entity_item(record),
                condition=(RecordItem.token == expected_token)
                & (RecordItem.type == record.item_type.deleted_type)
                & RecordItem.deleted.does_not_exist(),
                return_values=ALL_OLD,
            )
            tx.delete(RecordItem(keys.log_pk(record.tenant_id), expected_token))

    @contextmanager
    def _transaction(
        self, record: Record, expected_token: str | None, outcome: StoredOutcome | None
    ) -> Iterator[TransactWrite]:
        """One TransactWriteItems: the caller's entity writes, the log entry, the head,
        and the mutation's outcome when it has a clientMutationID."""
        head = HeadItem(keys.log_pk(record.tenant_id), keys.HEAD_SK)
        try:
            with (
                _translated(),
                TransactWrite(connection=_connection(), return_consumed_capacity="TOTAL") as tx,
            ):
                yield tx
                tx.save(_log_item(record))
                if outcome is not None:
                    tx.save(
                        _outcome_item(record.tenant_id, outcome),
                        condition=_outcome_absent(),
                        return_values=ALL_OLD,
                    )
                tx.update(
                    head,
                    actions=[HeadItem.token.set(record.change_token)],
                    condition=HeadItem.token.does_not_exist()
                    | (HeadItem.token < record.change_token),
                    return_values=ALL_OLD,
                )
        except TransactWriteError as exc:
            raise _cancellation_error(exc, record, expected_token) from exc


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
    exc: TransactWriteError, record: Record, expected_token: str | None
) -> Exception:
    """Name the item whose condition failed, by its key: PynamoDB reorders items."""
    if _error_code(exc) != "TransactionCanceledException":
        return _translate(exc)
    current: Record | None = None
    entity_failed = stale_head = outcome_exists = False
    for reason in exc.cancellation_reasons:
        if reason is None:
            continue
        if reason.code == "TransactionConflict":
            return TransactionConflict(reason.message or "transaction conflict")
        if reason.code != "ConditionalCheckFailed":
            continue
        raw = reason.raw_item or {}
        sk = raw.get("sk", {}).get("S", "")
        if sk == keys.HEAD_SK:
            stale_head = True
            head_token = raw["tok"]["S"]
        elif keys.is_outcome_sk(sk):
            outcome_exists = True
        else:
            # Only the entity, the head and the outcome carry conditions, and the
            # last two only fail when they exist: anything else is the entity.
            entity_failed = True
            if raw:
                current = _record_from_raw(record.tenant_id, raw)
    if outcome_exists:  # first: a racing twin already did this very mutation
        return OutcomeRecorded()
    if entity_failed:
        return _entity_error(record, expected_token, current)
    if stale_head:
        return StaleHead(head_token)
    return Unavailable("the write was cancelled by the data store")


def _entity_error(record: Record, expected_token: str | None, current: Record | None) -> Exception:
    kind = record.item_type.name
    if expected_token is None and current is not None:
        return AlreadyExists(f"{kind} {record.id} already exists", current)
    if current is None or current.item_type is not record.item_type:
        return NotFound(f"{kind} {record.id} does not exist")
    if current.deleted:
        return Conflict(f"{kind} {record.id} was deleted", current)
    return Conflict(
        f"{kind} {record.id} changed: its change token is {current.change_token}, "
        f"not {expected_token}",
        current,
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


def _log_item(record: Record) -> RecordItem:
    return _item(keys.log_pk(record.tenant_id), record.change_token, record)


def _item(pk: str, sk: str, record: Record) -> RecordItem:
    return RecordItem(
        pk,
        sk,
        type=record.item_type.deleted_type,
        id=record.id,
        token=record.change_token,
        created_ms=int(record.created_at.timestamp() * 1000),
        deleted=True if record.deleted else None,
        fields=dict(record.fields) or None,
    )


def _record_from_raw(tenant_id: str, raw: dict[str, Any]) -> Record:
    """A record from DynamoDB's JSON (a GetItem, a Query page, a cancellation reason)."""
    token = raw["tok"]["S"]
    fields = raw.get("f", {}).get("M", {})
    return Record(
        item_type=catalog.BY_DELETED_TYPE[raw["ty"]["S"]],
        tenant_id=tenant_id,
        id=raw["id"]["S"],
        change_token=token,
        created_at=datetime.fromtimestamp(int(raw["ca"]["N"]) / 1000, tz=UTC),
        updated_at=token_time(token),
        deleted=raw.get("del", {}).get("BOOL", False),
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
