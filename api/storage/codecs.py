"""Records, heads and stored outcomes to and from items: PynamoDB models for writes,
DynamoDB's JSON for reads (reads on every request skip model objects)."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from api.domain import catalog
from api.domain.chain import Head
from api.domain.mutations import StoredOutcome
from api.domain.records import Record
from api.domain.tokens import token_time
from api.domain.visibility import Visibility
from api.storage import keys
from api.storage.field_values import revived, stored
from api.storage.models import HeadItem, OutcomeItem, RecordItem

# Attribute names as stored, from the models.
PK = RecordItem.pk.attr_name
SK = RecordItem.sk.attr_name
_TOKEN = RecordItem.token.attr_name
_PREV = RecordItem.prev.attr_name
_TYPE = RecordItem.type.attr_name
_ID = RecordItem.id.attr_name
_CREATED_MS = RecordItem.created_ms.attr_name
_DELETED = RecordItem.deleted.attr_name
_FIELDS = RecordItem.fields.attr_name
_WRITTEN_BY = RecordItem.written_by.attr_name
_COPY_RELEASE = RecordItem.copy_release.attr_name
_COPIES = HeadItem.copies.attr_name
_ENTRIES = HeadItem.entries.attr_name
_REMOVED = HeadItem.removed.attr_name
_BORN = HeadItem.born.attr_name
_LATER_PUT = HeadItem.later_put.attr_name
_LATER_REMOVED = HeadItem.later_removed.attr_name
_DELETING_BY = HeadItem.deleting_by.attr_name
_OWNER = RecordItem.owner.attr_name
_SHARED = RecordItem.shared.attr_name
_GROUPS = RecordItem.groups.attr_name
_SUPERSEDED = RecordItem.superseded.attr_name
_LEFT_VIEW = RecordItem.left_view.attr_name
_RESTRICTED = HeadItem.restricted.attr_name
_LAST_MAIN = HeadItem.last_main.attr_name
_PREV_MAIN = HeadItem.prev_main.attr_name
_MAIN_TOKENS = HeadItem.main_tokens.attr_name
_STREAM_PUT = HeadItem.stream_put.attr_name
_STREAM_REMOVED = HeadItem.stream_removed.attr_name
_FINGERPRINT = OutcomeItem.fingerprint.attr_name
_OUTCOME = OutcomeItem.outcome.attr_name
_EXPIRES = OutcomeItem.expires.attr_name
assert HeadItem.token.attr_name == _TOKEN and HeadItem.prev.attr_name == _PREV


def raw_key(pk: str, sk: str) -> dict[str, Any]:
    """An item's key as DynamoDB's JSON, for the client calls made without PynamoDB."""
    return {PK: {"S": pk}, SK: {"S": sk}}


def sort_key(raw: dict[str, Any]) -> str:
    return str(raw[SK]["S"])


def entity_item(record: Record) -> RecordItem:
    return _item(keys.tenant_pk(record.tenant_id), keys.entity_sk(record.id), record)


def log_item(
    record: Record, prev: str | None, expires_at: int | None = None, left: bool = False
) -> RecordItem:
    """The main log entry of `record`; a deletion's expires at `expires_at` (None:
    never). `left`: a LeftView sentinel (the record left the tenant's view), which
    expires like a deletion's."""
    item = _item(keys.log_pk(record.tenant_id), record.change_token, record, left)
    item.prev = prev
    if record.deleted or left:
        item.expires = expires_at
    return item


def stream_item(
    record: Record, principal: str, expires_at: int | None = None, left: bool = False
) -> RecordItem:
    """The entry of `record` in `principal`'s stream (docs/ordering.md, "Who sees
    what"): the version with its visibility, or a LeftView sentinel (`left`); a
    deletion's and a sentinel expire at `expires_at`."""
    item = _item(keys.stream_pk(record.tenant_id, principal), record.change_token, record, left)
    if record.deleted or left:
        item.expires = expires_at
    return item


def marker_item(record: Record, principal: str, expires_at: int | None) -> RecordItem:
    """The marker of a Member write that moves its member into or out of a group, in
    the member's stream `principal` (docs/ordering.md, "Groups"): the version without
    its fields, superseded by itself (`Record.marks`: never sent), no later write
    removes it; it expires at `expires_at`, the retention."""
    item = _item(keys.stream_pk(record.tenant_id, principal), record.change_token, record, True)
    item.superseded = record.change_token
    item.expires = expires_at
    return item


def later_item(record: Record, release: int) -> RecordItem:
    """The copy of `record` (docs/evolution.md), under `release`."""
    return _item(keys.later_pk(record.tenant_id), later_sk(record, release), record)


def later_sk(record: Record, release: int) -> str:
    """The sort key of `record`'s entity's copy under `release`."""
    return keys.later_sk(record.item_type.code, release, record.id)


def version_item(record: Record, expires_at: int | None) -> RecordItem:
    """An earlier version of an entity, kept in its history until `expires_at`."""
    item = _item(
        keys.history_pk(record.tenant_id), keys.history_sk(record.id, record.change_token), record
    )
    item.expires = expires_at
    return item


def _item(pk: str, sk: str, record: Record, left: bool = False) -> RecordItem:
    """The record as an item; `left`: its LeftView sentinel (no fields)."""
    visibility = record.visibility
    return RecordItem(
        pk,
        sk,
        type=record.item_type.code,
        id=record.id,
        token=record.change_token,
        created_ms=int(record.created_at.timestamp() * 1000),
        deleted=True if record.deleted else None,
        fields=None if left else stored(record.fields) or None,
        written_by=record.written_by,
        copy_release=None if left else record.copy_release,
        owner=record.owner,
        shared=None if visibility is None else list(visibility.shared_with),
        groups=None if visibility is None or not visibility.groups else list(visibility.groups),
        left_view=True if left else None,
    )


def prev_of(raw: dict[str, Any]) -> str | None:
    prev = raw.get(_PREV)
    return None if prev is None else str(prev["S"])


def head_from_raw(raw: dict[str, Any]) -> Head:
    entries, removed = raw.get(_ENTRIES), raw.get(_REMOVED, {}).get("SS", ())
    return Head(
        str(raw[_TOKEN]["S"]),
        1 if entries is None else int(entries["N"]),
        tuple(sorted(removed)),
        born=born_of(raw),
        later_put=tuple(sorted(raw.get(_LATER_PUT, {}).get("SS", ()))),
        later_removed=tuple(sorted(raw.get(_LATER_REMOVED, {}).get("SS", ()))),
        copies=raw.get(_COPIES, {}).get("S") == raw[_TOKEN]["S"],
        restricted=raw.get(_RESTRICTED, {}).get("BOOL", False),
        main_tokens=tuple(sorted(raw[_MAIN_TOKENS]["SS"])) if _MAIN_TOKENS in raw else None,
        last_main=raw[_LAST_MAIN]["S"] if _LAST_MAIN in raw else None,
        prev_main=raw[_PREV_MAIN]["S"] if _PREV_MAIN in raw else None,
        stream_put=tuple(sorted(raw.get(_STREAM_PUT, {}).get("SS", ()))),
        stream_removed=tuple(sorted(raw.get(_STREAM_REMOVED, {}).get("SS", ()))),
    )


def is_deleting(raw: dict[str, Any]) -> bool:
    """Whether this head marks its tenant as being deleted."""
    return _DELETING_BY in raw


def expires_of(raw: dict[str, Any]) -> int | None:
    """An item's `exp` (epoch seconds, DynamoDB's TTL; None: it does not expire)."""
    return int(raw[_EXPIRES]["N"]) if _EXPIRES in raw else None


def born_of(raw: dict[str, Any]) -> str | None:
    """The tenant's first token, from its head (None: written before it was kept)."""
    return str(raw[_BORN]["S"]) if _BORN in raw else None


def record_from_raw(tenant_id: str, raw: dict[str, Any]) -> Record:
    """A record from DynamoDB's JSON (a GetItem, a Query page, a cancellation reason)."""
    token = raw[_TOKEN]["S"]
    fields = raw.get(_FIELDS, {}).get("M", {})
    item_type = catalog.of_code(raw[_TYPE]["S"])
    return Record(
        item_type=item_type,
        tenant_id=tenant_id,
        id=raw[_ID]["S"],
        change_token=token,
        created_at=datetime.fromtimestamp(int(raw[_CREATED_MS]["N"]) / 1000, tz=UTC),
        updated_at=token_time(token),
        deleted=raw.get(_DELETED, {}).get("BOOL", False),
        fields=revived(item_type, {name: _plain(value) for name, value in fields.items()}),
        written_by=raw[_WRITTEN_BY]["S"] if _WRITTEN_BY in raw else None,
        copy_release=int(raw[_COPY_RELEASE]["N"]) if _COPY_RELEASE in raw else None,
        owner=raw[_OWNER]["S"] if _OWNER in raw else None,
        visibility=visibility_of(raw),
        left_view=raw.get(_LEFT_VIEW, {}).get("BOOL", False),
        superseded=raw[_SUPERSEDED]["S"] if _SUPERSEDED in raw else None,
    )


def visibility_of(raw: dict[str, Any]) -> Visibility | None:
    """A stored version's visibility (None: tenant-wide)."""
    if _SHARED not in raw:
        return None
    shared = tuple(str(value["S"]) for value in raw[_SHARED]["L"])
    groups = tuple(str(value["S"]) for value in raw.get(_GROUPS, {}).get("L", []))
    return Visibility(str(raw[_OWNER]["S"]), shared, groups)


def _plain(value: dict[str, Any]) -> Any:
    # Field values are strings (a FLOAT's too: api.storage.field_values), booleans,
    # whole numbers, lists, or maps (an object's, an attachment's).
    ((kind, inner),) = value.items()
    if kind in ("S", "BOOL"):
        return inner
    if kind == "N":
        return int(inner)
    if kind == "M":
        return {name: _plain(nested) for name, nested in inner.items()}
    if kind == "L":
        return _plain_list(inner)
    return None


def _plain_list(values: list[dict[str, Any]]) -> list[Any]:
    """A List's items: _plain's, the scalars without a call each (a page of records
    at their bounds holds some 60,000 items)."""
    plain: list[Any] = []
    for value in values:
        ((kind, inner),) = value.items()
        if kind == "S" or kind == "BOOL":
            plain.append(inner)
        elif kind == "N":
            plain.append(int(inner))
        else:
            plain.append(_plain(value))
    return plain


def outcome_item(tenant_id: str, outcome: StoredOutcome) -> OutcomeItem:
    return OutcomeItem(
        keys.tenant_pk(tenant_id),
        keys.outcome_sk(outcome.client_mutation_id),
        fingerprint=outcome.fingerprint,
        outcome=outcome.to_json(),
        expires=outcome.expires_at,
    )


def outcome_from_raw(tenant_id: str, raw: dict[str, Any]) -> StoredOutcome | None:
    """A stored outcome from DynamoDB's JSON; None once expired (TTL deletes lazily:
    an expired outcome may linger, and counts as gone)."""
    expires = int(raw[_EXPIRES]["N"])
    if expires < time.time():
        return None
    client_mutation_id = raw[SK]["S"][len(keys.outcome_sk("")) :]
    fingerprint, data = raw[_FINGERPRINT]["S"], raw[_OUTCOME]["S"]
    stored = StoredOutcome.from_json(tenant_id, client_mutation_id, fingerprint, data)
    return replace(stored, expires_at=expires)
