"""The first read of a sync: the head and the newest changes in one descending Query.

Every split between the tail and the pages below it must still give each change
once, in order, in pages of at most `limit`, whatever the number of changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from api.domain.cursor import CursorCodec
from api.domain.mutations import Mutation
from api.domain.records import Record
from api.domain.tokens import next_token, token_after, token_time
from api.service import SyncService
from api.service.reading import TAIL_ITEMS
from api.settings import Settings
from api.storage import keys
from api.storage.store import DynamoStore
from tests.support import family

Inject = Callable[[str, Callable[..., Any]], None]


def _seed(tenant: str, n: int) -> list[Record]:
    records: list[Record] = []
    token = None
    for i in range(n):
        token = next_token(int(time.time() * 1000), token)
        at = token_time(token)
        fields = family.PERSON.normalize_changes({"givenName": f"p{i}"})
        records.append(Record(family.PERSON, tenant, f"p{i:03d}", token, at, at, fields=fields))
    DynamoStore().bulk_load(tenant, records)
    return records


def _sync(service: SyncService, tenant: str, since: str | None, limit: int) -> list[Any]:
    """Every page of one sync, following cursors to the end."""
    pages = [service.changes(tenant, since=since, limit=limit)]
    while pages[-1].cursor is not None:
        pages.append(service.changes(tenant, cursor=pages[-1].cursor, limit=limit))
    return pages


@pytest.fixture
def service(settings: Settings) -> SyncService:
    return SyncService(DynamoStore(), CursorCodec("test-cursor-secret"))


@pytest.mark.parametrize("n", [1, TAIL_ITEMS - 1, TAIL_ITEMS, TAIL_ITEMS + 1, 25])
def test_every_split_of_tail_and_pages_gives_each_change_once_in_order(
    service: SyncService, tenant: str, n: int
) -> None:
    records = _seed(tenant, n)
    tokens = [r.change_token for r in records]
    for limit in (1, 3, TAIL_ITEMS, TAIL_ITEMS + 1, 25):
        for start in sorted({0, 1, n - TAIL_ITEMS - 1, n - TAIL_ITEMS, n - 2, n - 1, n}):
            if not 0 <= start <= n:
                continue
            since = None if start == 0 else tokens[start - 1]
            pages = _sync(service, tenant, since, limit)
            got = [item.change_token for page in pages for item in page.items]
            assert got == tokens[start:], (limit, start)
            assert all(len(page.items) <= limit for page in pages), (limit, start)
            assert all(page.items for page in pages[:-1]), (limit, start)
            # Each page's token resumes exactly after that page.
            for page in pages[:-1]:
                assert page.change_token == page.items[-1].change_token
            assert pages[-1].change_token == tokens[-1]


def _calls(inject: Inject) -> list[tuple[str, float]]:
    """(operation, read units) of each DynamoDB call from here on."""
    calls: list[tuple[str, float]] = []

    def record(parsed: dict[str, Any], model: Any, **_: Any) -> None:
        units = parsed.get("ConsumedCapacity", {}).get("CapacityUnits", 0.0)
        calls.append((model.name, units))

    inject("after-call.dynamodb", record)
    return calls


def test_a_poll_and_a_small_sync_are_one_query(
    service: SyncService, tenant: str, inject: Inject
) -> None:
    records = _seed(tenant, 30)
    calls = _calls(inject)

    poll = service.changes(tenant, since=records[-1].change_token)
    assert (poll.items, poll.cursor, poll.change_token) == ([], None, records[-1].change_token)
    assert [op for op, _ in calls] == ["Query"]

    calls.clear()
    ten = TAIL_ITEMS - 1  # the most changes a tail read always completes
    small = service.changes(tenant, since=records[-1 - ten].change_token)
    assert [r.id for r in small.items] == [r.id for r in records[-ten:]]
    assert small.cursor is None
    assert [op for op, _ in calls] == ["Query"]

    calls.clear()
    larger = service.changes(tenant, since=records[0].change_token)
    assert [r.id for r in larger.items] == [r.id for r in records[1:]]
    assert [op for op, _ in calls] == ["Query", "Query"]  # the tail, then the rest below it


def test_log_entries_above_the_head_it_read_are_not_returned(
    service: SyncService, tenant: str, ddb: Any, settings: Settings
) -> None:
    """A descending read can meet an entry that committed after it read the head."""
    records = _seed(tenant, 3)
    head = records[-1].change_token
    above = token_after(head)
    item = ddb.get_item(
        TableName=settings.table_name,
        Key={"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": head}},
        ConsistentRead=True,
    )["Item"]
    ddb.put_item(
        TableName=settings.table_name,
        Item={**item, "sk": {"S": above}, "tok": {"S": above}, "id": {"S": "late"}},
    )

    page = service.changes(tenant, since=records[0].change_token)

    assert [r.id for r in page.items] == [r.id for r in records[1:]]
    assert (page.cursor, page.change_token) == (None, head)


PUSH = 30  # one group commit: a head whose transaction wrote 30 entries


@pytest.mark.parametrize("below", [0, 20])
@pytest.mark.parametrize("limit", [1, PUSH - 1, 1000])
def test_a_page_never_exceeds_its_limit_after_a_group_commit(
    service: SyncService, tenant: str, below: int, limit: int
) -> None:
    """Every branch of the first page: the whole tail linked down to `since` (or to the
    tenant's start), and the linked group above a range read in pages."""
    older = [r.change_token for r in _seed(tenant, below)] if below else []
    creates = [
        Mutation("create", family.PERSON, tenant, f"g{i:02d}", None, {}) for i in range(PUSH)
    ]
    group = [r.record.change_token for r in service.push(tenant, creates)]  # type: ignore[union-attr]
    tokens = older + group
    for start in sorted({0, below}):
        since = None if start == 0 else tokens[start - 1]
        pages = _sync(service, tenant, since, limit)
        got = [item.change_token for page in pages for item in page.items]
        assert got == tokens[start:], (limit, start)
        assert all(len(page.items) <= limit for page in pages), (
            limit,
            start,
            [len(p.items) for p in pages],
        )
        assert all(page.items for page in pages[:-1]), (limit, start)
        assert pages[-1].change_token == tokens[-1]
