"""The later copies' place in the chain (docs/ordering.md, "Catching up an upgrade",
check 9): a transaction commits only once the copies the previous one put are
there and those it removed are gone, as it checks the previous log entries. A
copy not yet applied is modelled by removing it (Amazon DynamoDB applies a
transaction's items one by one; DynamoDB Local applies them at once)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from api.domain.cursor import CursorCodec
from api.domain.errors import TransactionConflict
from api.domain.mutations import Mutation, Write
from api.domain.records import Record
from api.domain.tokens import next_token, token_time
from api.ordering import Link
from api.service import SyncService
from api.settings import Settings
from api.storage import codecs, keys
from api.storage.store import DynamoStore
from tests.support import release2
from tests.support.family import REMINDER


def _record(tenant: str, entity_id: str, after: str | None, **fields: str) -> Record:
    token = next_token(int(time.time() * 1000), after)
    at = token_time(token)
    item_type = release2.NOTE if "text" in fields else release2.PERSON
    return Record(item_type, tenant, entity_id, token, at, at, fields=dict(fields))


def _next_link(store: DynamoStore, tenant: str) -> Link:
    """What a process that did not write the head's transaction checks (api.ordering)."""
    head = store.head(tenant)
    assert head is not None
    return Link.after(head)


def _commit(store: DynamoStore, tenant: str, writes: list[Write], link: Link) -> None:
    store.commit(
        tenant,
        writes,
        link.head,
        link.check,
        link.gone,
        later_check=link.later_check,
        later_gone=link.later_gone,
        copies=link.copies,
    )


def _put_copy(settings: Settings, ddb: Any, tenant: str, record: Record) -> None:
    """A later copy as a transaction puts it (the record, under release 2)."""
    item = codecs.later_item(record, 2).serialize()
    ddb.put_item(TableName=settings.table_name, Item=item)


def test_a_write_waits_for_the_later_copy_the_previous_transaction_put(
    settings: Settings, tenant: str, ddb: Any
) -> None:
    store = DynamoStore()
    note = _record(tenant, "n1", None, text="bins on Tuesday")
    store.commit(tenant, [Write(note, None, later=2)], None, ())
    copy_key = keys.later_sk("NOTE", 2, "n1")
    assert store.head(tenant).later_put == (copy_key,)  # type: ignore[union-attr]

    # The Note's copy is not applied yet: the next transaction must not commit.
    link = _next_link(store, tenant)
    ddb.delete_item(
        TableName=settings.table_name,
        Key={"pk": {"S": keys.later_pk(tenant)}, "sk": {"S": copy_key}},
    )
    person = _record(tenant, "p1", note.change_token, givenName="Ann")
    with pytest.raises(TransactionConflict):
        _commit(store, tenant, [Write(person, None)], link)
    assert store.head(tenant).token == note.change_token  # type: ignore[union-attr]

    # Applied: it commits, and its own head names no copy (it wrote none).
    _put_copy(settings, ddb, tenant, note)
    _commit(store, tenant, [Write(person, None)], link)
    head = store.head(tenant)
    assert head is not None and head.token == person.change_token and head.later_put == ()


def test_a_write_waits_until_the_copy_the_previous_transaction_removed_is_gone(
    settings: Settings, tenant: str, ddb: Any
) -> None:
    store = DynamoStore()
    ann = _record(tenant, "p1", None, givenName="Ann", nickname="Annie")
    store.commit(tenant, [Write(ann, None, later=2)], None, ())
    link = _next_link(store, tenant)
    cleared = _record(tenant, "p1", ann.change_token, givenName="Ann")
    _commit(store, tenant, [Write(cleared, ann.change_token, later_removed=2)], link)
    copy_key = keys.later_sk("PERSON", 2, "p1")
    assert store.head(tenant).later_removed == (copy_key,)  # type: ignore[union-attr]

    # The removal is not applied yet (the copy is still there): the next one waits.
    link = _next_link(store, tenant)
    _put_copy(settings, ddb, tenant, ann)
    bob = _record(tenant, "p2", cleared.change_token, givenName="Bob")
    with pytest.raises(TransactionConflict):
        _commit(store, tenant, [Write(bob, None)], link)


def _catch_up_all(service: SyncService, tenant: str, up_to: str) -> list[Record]:
    """Every version a catch-up of all Reminders returns, a page of at most 2 a call."""
    items: list[Record] = []
    cursor = None
    while True:
        page = service.catch_up(tenant, up_to, types=[REMINDER], cursor=cursor, limit=2)
        assert len(page.items) <= 2
        items += page.items
        cursor = page.cursor
        if cursor is None:
            return items


def test_a_catch_up_reads_the_head_s_transaction_where_its_copies_are_not_applied(
    settings: Settings, tenant: str, ddb: Any
) -> None:
    service = SyncService(DynamoStore(), CursorCodec("x"))
    create = [Mutation("create", REMINDER, tenant, f"r{n}", None, {"title": "t"}) for n in range(5)]
    service.push(tenant, create)
    later = [Mutation("create", REMINDER, tenant, f"r{n}", None, {"title": "t"}) for n in (5, 6)]
    r5, r6 = (r.record for r in service.push(tenant, later))
    assert r5 is not None and r6 is not None

    # The head's transaction's copies are not applied yet: its log entries stand in.
    table = settings.table_name
    for record in (r5, r6):
        key = {"pk": {"S": keys.later_pk(tenant)}, "sk": {"S": codecs.later_sk(record, 1)}}
        ddb.delete_item(TableName=table, Key=key)
    caught = _catch_up_all(service, tenant, r6.change_token)
    assert sorted(r.id for r in caught) == [f"r{n}" for n in range(7)]

    # Applied; then a deletion whose copy's removal is not applied yet: not returned.
    for record in (r5, r6):
        ddb.put_item(TableName=table, Item=codecs.later_item(record, 1).serialize())
    (gone,) = service.push(
        tenant, [Mutation("delete", REMINDER, tenant, "r6", r6.change_token, {})]
    )
    assert gone.record is not None
    ddb.put_item(TableName=table, Item=codecs.later_item(r6, 1).serialize())
    caught = _catch_up_all(service, tenant, gone.record.change_token)
    assert sorted(r.id for r in caught) == [f"r{n}" for n in range(6)]
