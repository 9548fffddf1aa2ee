"""Every page of a sync, cursor pages included, against DynamoDB Local: no deletion
missed past the retention whatever TTL has removed (contract 3.6, docs/ordering.md
Theorem 4), and TENANT_DELETED for a cursor of a tenant deleted since (3.8). Each
test builds its own service with a short retention and a clock it moves
(`tests.support.short_retention`)."""

from __future__ import annotations

from typing import Any

import pytest

from api.domain.errors import ResyncRequired, TenantDeleted
from api.domain.records import Record
from api.ordering import wall_clock_ms
from api.service import SyncService
from api.settings import Settings
from api.storage.store import DynamoStore
from tests.support.family import PERSON
from tests.support.short_retention import (
    EXPIRED_S,
    RETENTION_S,
    Clock,
    short_retention_service,
    ttl_removes_expired,
)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(settings: Settings) -> DynamoStore:
    return DynamoStore()


@pytest.fixture
def svc(store: DynamoStore, clock: Clock) -> SyncService:
    return short_retention_service(store, clock)


def person(svc: SyncService, tenant: str, name: str) -> Record:
    return svc.create(PERSON, tenant, None, {"givenName": name})


# --- finding 4: a sync continued past the retention --------------------------------


@pytest.mark.parametrize("ttl", ["removed at expiry", "still stored"])
def test_a_cursor_page_past_the_retention_is_resync_required(
    svc: SyncService, clock: Clock, tenant: str, ddb: Any, settings: Settings, ttl: str
) -> None:
    """The reported run: page 1 of a sync from `since` returns q1; the deletion of p
    above it expires; following the cursor returned q2 and no DeletedItem, and the
    poll from the last page's token was empty (it is the head: "up to date")."""
    p = person(svc, tenant, "p")
    since = svc.changes(tenant).change_token
    assert since is not None
    clock.advance(1)
    q1 = person(svc, tenant, "q1")
    clock.advance(1)
    svc.delete(PERSON, tenant, p.id, p.change_token)
    clock.advance(1)
    person(svc, tenant, "q2")
    page1 = svc.changes(tenant, since=since, limit=1)
    assert [r.id for r in page1.items] == [q1.id] and page1.cursor is not None
    clock.advance(EXPIRED_S)
    if ttl == "removed at expiry":
        assert ttl_removes_expired(ddb, settings.table_name, tenant, clock()) >= 1
    with pytest.raises(ResyncRequired):
        svc.changes(tenant, since=since, cursor=page1.cursor, limit=1)
    # The device kept page 1's token: a poll from it is sent to resync too.
    with pytest.raises(ResyncRequired):
        svc.changes(tenant, since=page1.change_token)
    # The resync itself leaves p out.
    fresh = {r.id for r in svc.changes(tenant, limit=100).items if not r.deleted}
    assert q1.id in fresh and p.id not in fresh


def test_a_cursor_page_within_the_retention_still_delivers_the_deletion(
    svc: SyncService, clock: Clock, tenant: str
) -> None:
    p = person(svc, tenant, "p")
    since = svc.changes(tenant).change_token
    q1 = person(svc, tenant, "q1")
    svc.delete(PERSON, tenant, p.id, p.change_token)
    page1 = svc.changes(tenant, since=since, limit=1)
    assert [r.id for r in page1.items] == [q1.id]
    clock.advance(RETENTION_S - 5)
    page2 = svc.changes(tenant, since=since, cursor=page1.cursor, limit=1)
    assert [(r.id, r.deleted) for r in page2.items] == [(p.id, True)]


def test_a_first_sync_s_cursor_page_past_the_retention_of_the_latest_write_resyncs(
    svc: SyncService, clock: Clock, tenant: str, ddb: Any, settings: Settings
) -> None:
    """A first sync owes the deletions of the head's transaction (W_n): a page may
    have returned an earlier version whose removal was not yet applied. Past their
    retention, its cursor pages are RESYNC_REQUIRED; the new first sync then settles
    them (the whole transaction is applied by then) and ends at the head."""
    people = [person(svc, tenant, f"p{i}") for i in range(3)]
    gone = people[0]
    deleted = svc.delete(PERSON, tenant, gone.id, gone.change_token)
    page1 = svc.changes(tenant, limit=1)
    assert page1.cursor is not None
    clock.advance(EXPIRED_S)
    ttl_removes_expired(ddb, settings.table_name, tenant, clock())
    with pytest.raises(ResyncRequired):
        svc.changes(tenant, cursor=page1.cursor, limit=1)
    fresh, pages = _follow(svc, tenant, limit=1)
    assert [r.id for r in fresh] == [p.id for p in people[1:]]
    assert pages[-1].change_token == deleted.change_token


def test_a_first_sync_of_a_tenant_quiet_past_the_retention_ends_at_its_head(
    svc: SyncService, clock: Clock, tenant: str, ddb: Any, settings: Settings
) -> None:
    """The tenant's last write was a deletion whose log entry TTL removed: the first
    read cannot prove its bound from the entries; the sync still ends at the head,
    from which a poll is up to date (it ended one write below and every poll from
    there was RESYNC_REQUIRED, until the tenant was written again)."""
    keep = person(svc, tenant, "keep")
    gone = person(svc, tenant, "gone")
    deleted = svc.delete(PERSON, tenant, gone.id, gone.change_token)
    clock.advance(EXPIRED_S)
    assert ttl_removes_expired(ddb, settings.table_name, tenant, clock()) >= 1
    items, pages = _follow(svc, tenant, limit=1)
    assert [r.id for r in items] == [keep.id]
    assert pages[-1].change_token == deleted.change_token
    assert svc.changes(tenant, since=deleted.change_token).items == []


def _follow(svc: SyncService, tenant: str, limit: int) -> tuple[list[Record], list[Any]]:
    page = svc.changes(tenant, limit=limit)
    pages = [page]
    while page.cursor is not None:
        page = svc.changes(tenant, cursor=page.cursor, limit=limit)
        pages.append(page)
    return [r for p in pages for r in p.items], pages


# --- finding 2 (cursor pages): a tenant deleted since the cursor was made -----------


def test_cursor_pages_of_a_tenant_deleted_since_are_tenant_deleted(
    svc: SyncService, store: DynamoStore, tenant: str
) -> None:
    for i in range(6):
        person(svc, tenant, f"p{i}")
    first = svc.changes(tenant, limit=2)  # a first sync's
    delta = svc.changes(tenant, since=first.items[0].change_token, limit=2)  # a `since` sync's
    cursors = [first.cursor, delta.cursor]
    assert all(cursors)
    store.mark_deleting(tenant, "owner", wall_clock_ms())  # the first call's mark
    for cursor in cursors:
        with pytest.raises(TenantDeleted):
            svc.changes(tenant, cursor=cursor, limit=2)
    while not svc.delete_tenant(tenant, tenant, by="owner").done:
        pass
    for cursor in cursors:
        with pytest.raises(TenantDeleted):
            svc.changes(tenant, cursor=cursor, limit=2)
    person(svc, tenant, "new")  # written again: a new tenant under the same id
    for cursor in cursors:
        with pytest.raises(TenantDeleted):
            svc.changes(tenant, cursor=cursor, limit=2)
    assert [r.fields["givenName"] for r in svc.changes(tenant).items] == ["new"]
