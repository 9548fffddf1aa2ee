"""History, first syncs without deletions, and the resync signal, over the
in-memory store (the same rules against DynamoDB Local and the torn engine are
in tests/integration/test_history.py)."""

from __future__ import annotations

import pytest

from api.domain.cursor import CursorCodec
from api.domain.errors import NotFound, ResyncRequired
from api.domain.mutations import Mutation
from api.domain.records import Conflict
from api.domain.retention import Retention
from api.ordering import wall_clock_ms
from api.service import SyncService
from tests.support.family import PERSON
from tests.support.memory_store import MemoryStore

T = "family1"


class Clock:
    def __init__(self) -> None:
        self.now_ms = wall_clock_ms()

    def __call__(self) -> int:
        return self.now_ms


def service(history: bool = True, clock: Clock | None = None) -> SyncService:
    return SyncService(
        MemoryStore(),
        CursorCodec("unit-secret"),
        clock_ms=clock or wall_clock_ms,
        retention=Retention(60),
        history=history,
    )


def first_sync(svc: SyncService, limit: int = 100) -> list[str]:
    """Ids and tombstone markers of a first sync, all pages."""
    seen: list[str] = []
    page = svc.changes(T, limit=limit)
    while True:
        seen += [("-" if r.deleted else "") + r.id for r in page.items]
        if page.cursor is None:
            return seen
        page = svc.changes(T, cursor=page.cursor, limit=limit)


def test_a_first_sync_returns_live_entities_only_in_full_pages() -> None:
    svc = service()
    live = [svc.create(PERSON, T, f"live{i}", {"givenName": "L"}).id for i in range(5)]
    for i in range(30):
        gone = svc.create(PERSON, T, f"gone{i}", {"givenName": "G"})
        svc.delete(PERSON, T, gone.id, gone.change_token)
    svc.create(PERSON, T, "last", {"givenName": "L"})
    assert first_sync(svc) == [*live, "last"]
    # Pages of 2 stay full although 30 deletions lie between the live entities.
    page = svc.changes(T, limit=2)
    assert [r.id for r in page.items] == live[:2]
    assert len(svc.changes(T, cursor=page.cursor, limit=2).items) == 2


def test_the_latest_transaction_s_deletion_is_still_sent_to_a_first_sync() -> None:
    # Its entity's earlier entry is not yet proven gone (docs/ordering.md, Lemma 2).
    svc = service()
    person = svc.create(PERSON, T, "p", {"givenName": "A"})
    svc.delete(PERSON, T, person.id, person.change_token)
    assert first_sync(svc) == ["-p"]


def test_an_incremental_sync_still_gets_every_deletion() -> None:
    svc = service()
    person = svc.create(PERSON, T, "p", {"givenName": "A"})
    since = svc.changes(T).change_token
    svc.delete(PERSON, T, person.id, person.change_token)
    svc.create(PERSON, T, "q", {"givenName": "B"})
    page = svc.changes(T, since=since)
    assert [(r.id, r.deleted) for r in page.items] == [("p", True), ("q", False)]


def test_a_since_older_than_the_retention_period_must_resync() -> None:
    clock = Clock()
    svc = service(clock=clock)
    svc.create(PERSON, T, "p", {"givenName": "A"})
    since = svc.changes(T).change_token
    assert since is not None
    clock.now_ms += 61_000
    # Up to date with a quiet tenant: no resync, however old the token.
    assert svc.changes(T, since=since).change_token == since
    svc.create(PERSON, T, "q", {"givenName": "B"})
    clock.now_ms += 1_000
    with pytest.raises(ResyncRequired):
        svc.changes(T, since=since)
    assert [r.id for r in svc.changes(T).items] == ["p", "q"]  # the resync itself
    fresh = svc.changes(T).change_token
    assert fresh is not None and svc.changes(T, since=fresh).items == []


def test_history_keeps_earlier_versions_with_their_writer_newest_first() -> None:
    svc = service()
    v1 = svc.writing.apply(_create("p", "Ann"), by="alice").record
    v2 = svc.writing.apply(_update(v1.change_token, "Anne"), by="bob").record
    v3 = svc.writing.apply(_update(v2.change_token, "Annie"), by="carol").record
    assert v3.written_by == "carol"
    versions = svc.versions(T, "p", limit=1)
    assert [(r.fields["givenName"], r.written_by) for r in versions.items] == [("Anne", "bob")]
    older = svc.versions(T, "p", cursor=versions.cursor, limit=1)
    assert [(r.fields["givenName"], r.written_by) for r in older.items] == [("Ann", "alice")]
    assert older.cursor is None


def test_a_restore_is_a_token_guarded_update_to_the_version_s_fields() -> None:
    svc = service()
    v1 = svc.writing.apply(_create("p", "Ann", emailAddress="ann@example.com"), by="alice").record
    v2 = svc.writing.apply(_update(v1.change_token, "Anne", emailAddress=None), by="bob").record
    with pytest.raises(Conflict):
        svc.restore(T, "p", v1.change_token, v1.change_token, by="carol")
    restored = svc.restore(T, "p", v2.change_token, v1.change_token, by="carol").record
    assert restored.fields == v1.fields and restored.written_by == "carol"
    assert restored.change_token > v2.change_token
    with pytest.raises(NotFound):
        svc.restore(T, "p", restored.change_token, restored.change_token)


def test_with_history_off_nothing_is_kept() -> None:
    svc = service(history=False)
    v1 = svc.create(PERSON, T, "p", {"givenName": "Ann"})
    svc.update(PERSON, T, "p", v1.change_token, {"givenName": "Anne"})
    assert svc.versions(T, "p").items == []


def _create(entity_id: str, name: str, **more: object) -> Mutation:
    return Mutation("create", PERSON, T, entity_id, None, {"givenName": name, **more})


def _update(token: str, name: str, **more: object) -> Mutation:
    return Mutation("update", PERSON, T, "p", token, {"givenName": name, **more})
