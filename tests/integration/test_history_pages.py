"""History's pages and retention against DynamoDB Local (contract 3.7): every kept
version reachable across DynamoDB's 1 MB pages, none past the retention listed or
restored whether or not TTL has removed it, TENANT_DELETED during a deletion."""

from __future__ import annotations

import pytest

from api.domain.errors import NotFound, TenantDeleted
from api.domain.records import Record
from api.ordering import wall_clock_ms
from api.service import SyncService
from api.settings import Settings
from api.storage.store import DynamoStore
from tests.support.family import PERSON, REMINDER
from tests.support.short_retention import RETENTION_S, Clock, short_retention_service


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


@pytest.mark.slow
def test_history_pages_through_every_kept_version_beyond_dynamodb_s_1_mb_page(
    svc: SyncService, tenant: str
) -> None:
    notes = "é" * 8000  # 16,000 bytes: 90 versions are about 1.4 MB
    current = svc.create(REMINDER, tenant, None, {"title": "v0", "notes": notes})
    for i in range(1, 91):
        current = svc.update(REMINDER, tenant, current.id, current.change_token, {"title": f"v{i}"})
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = svc.versions(tenant, current.id, cursor=cursor, limit=100)
        seen += [r.fields["title"] for r in page.items]
        pages += 1
        cursor = page.cursor
        if cursor is None:
            break
    assert pages > 1
    assert seen == [f"v{i}" for i in range(89, -1, -1)]


def test_history_neither_lists_nor_restores_a_version_past_the_retention(
    svc: SyncService, clock: Clock, tenant: str
) -> None:
    """Still stored (TTL has not removed it): past the retention all the same."""
    v1 = person(svc, tenant, "v1")
    v2 = svc.update(PERSON, tenant, v1.id, v1.change_token, {"givenName": "v2"})
    clock.advance(RETENTION_S - 5)
    v3 = svc.update(PERSON, tenant, v1.id, v2.change_token, {"givenName": "v3"})
    assert [r.fields["givenName"] for r in svc.versions(tenant, v1.id).items] == ["v2", "v1"]
    clock.advance(10)  # v1 was replaced more than the retention ago, v2 not
    page = svc.versions(tenant, v1.id, limit=1)
    assert [r.fields["givenName"] for r in page.items] == ["v2"] and page.cursor is None
    assert svc.versions(tenant, v1.id, cursor=v2.change_token).items == []
    with pytest.raises(NotFound):
        svc.restore(tenant, v1.id, v3.change_token, v1.change_token)
    restored = svc.restore(tenant, v1.id, v3.change_token, v2.change_token).record
    assert restored.fields["givenName"] == "v2"


def test_history_of_a_tenant_being_deleted_is_tenant_deleted(
    svc: SyncService, store: DynamoStore, tenant: str
) -> None:
    v1 = person(svc, tenant, "v1")
    v2 = svc.update(PERSON, tenant, v1.id, v1.change_token, {"givenName": "v2"})
    assert len(svc.versions(tenant, v1.id).items) == 1
    store.mark_deleting(tenant, "owner", wall_clock_ms())
    with pytest.raises(TenantDeleted):
        svc.versions(tenant, v1.id)
    with pytest.raises(TenantDeleted):
        svc.restore(tenant, v1.id, v2.change_token, v1.change_token)
