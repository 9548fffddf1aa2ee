"""The service's rules over the in-memory store: conflicts, idempotency, push, paging.

The same rules run against DynamoDB Local (and the torn engine) in
tests/integration; here they run in milliseconds, for the fast loop.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from api.domain.cursor import CursorCodec
from api.domain.errors import BadUserInput, NotFound, TenantDeleted
from api.domain.item_types import ItemType
from api.domain.mutations import Mutation, State
from api.domain.records import AlreadyExists, Conflict
from api.domain.tokens import next_token
from api.ordering import wall_clock_ms
from api.service import PushStatus, SyncService
from tests.support.family import PERSON, REMINDER
from tests.support.memory_store import MemoryStore

T = "family1"


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def service(store: MemoryStore) -> SyncService:
    return SyncService(store, CursorCodec("unit-secret"))


def test_an_update_from_a_stale_token_is_a_conflict_carrying_the_current_version(
    service: SyncService, store: MemoryStore
) -> None:
    first = service.create(PERSON, T, None, {"givenName": "Ann"})
    second = service.update(PERSON, T, first.id, first.change_token, {"givenName": "Anna"})
    writes = store.writes
    with pytest.raises(Conflict) as refused:
        service.update(PERSON, T, first.id, first.change_token, {"givenName": "Annie"})
    assert refused.value.current == second
    assert store.writes == writes  # nothing written
    assert service.get(PERSON, T, first.id) == second


def test_deleted_missing_and_foreign_type_entities_refuse_writes(service: SyncService) -> None:
    person = service.create(PERSON, T, "p1", {})
    gone = service.delete(PERSON, T, "p1", person.change_token)
    with pytest.raises(Conflict) as deleted:
        service.update(PERSON, T, "p1", gone.change_token, {"givenName": "x"})
    assert deleted.value.current.deleted
    with pytest.raises(NotFound):
        service.update(PERSON, T, "nobody", gone.change_token, {})
    reminder = service.create(REMINDER, T, "r1", {"title": "t"})
    with pytest.raises(NotFound):
        service.delete(PERSON, T, "r1", reminder.change_token)
    with pytest.raises(AlreadyExists) as taken:
        service.create(PERSON, T, "p1", {})  # a deleted id stays taken
    assert taken.value.current == gone
    assert service.get(PERSON, T, "p1") is None


def test_a_client_mutation_id_applies_once_and_replays_its_outcome(
    service: SyncService, store: MemoryStore
) -> None:
    create = Mutation("create", PERSON, T, "p1", None, {"givenName": "Ann"}, "m-1")
    applied = service.apply(create)
    again = service.apply(create)
    assert not applied.replayed and again.replayed and again.record == applied.record
    assert store.writes == 1
    with pytest.raises(BadUserInput, match="already used"):
        service.apply(Mutation("create", PERSON, T, "p2", None, {}, "m-1"))
    # A refused mutation's outcome is kept too: its replay is the same refusal,
    # even after the entity moved on.
    stale = Mutation("update", PERSON, T, "p1", "0" * 26, {"givenName": "x"}, "m-2")
    with pytest.raises(Conflict):
        service.apply(stale)
    service.update(PERSON, T, "p1", applied.record.change_token, {"givenName": "Bo"})
    with pytest.raises(Conflict) as replayed:
        service.apply(stale)
    assert replayed.value.replayed and replayed.value.current == applied.record


def test_one_bad_entry_of_a_push_is_rejected_alone(service: SyncService) -> None:
    results = service.push(
        T,
        [
            Mutation("create", PERSON, T, "a", None, {"givenName": "A"}),
            Mutation("create", PERSON, T, "b", None, {"givenName": 7}),  # not a string
            Mutation("create", PERSON, "other", "c", None, {}),  # another tenant
            Mutation("update", PERSON, T, "a", "0" * 26, {}),  # stale token
            Mutation("create", PERSON, T, "d", None, {"givenName": "D"}),
        ],
    )
    statuses = [r.status for r in results]
    assert statuses == [
        PushStatus.APPLIED,
        PushStatus.REJECTED,
        PushStatus.REJECTED,
        PushStatus.CONFLICT,
        PushStatus.APPLIED,
    ]
    assert results[3].record == results[0].record
    assert [r.id for r in service.changes(T).items] == ["a", "d"]


def test_paging_from_any_token_gives_each_latest_change_once_in_order(
    service: SyncService,
) -> None:
    rng = random.Random(7)
    tokens: dict[str, str] = {}
    seen_tokens: list[str] = []
    for i in range(120):
        entity = f"p{rng.randrange(40)}"
        if entity in tokens and rng.random() < 0.7:
            record = service.update(PERSON, T, entity, tokens[entity], {"givenName": str(i)})
        elif entity not in tokens:
            record = service.create(PERSON, T, entity, {"givenName": str(i)})
        else:
            continue
        tokens[entity] = record.change_token
        seen_tokens.append(record.change_token)
    for since in [None, *seen_tokens[::17]]:
        expected = sorted(
            (tok, entity) for entity, tok in tokens.items() if since is None or tok > since
        )
        got: list[tuple[str, str]] = []
        page = service.changes(T, since=since, limit=7)
        while True:
            got += [(r.change_token, r.id) for r in page.items]
            if page.cursor is None:
                break
            page = service.changes(T, cursor=page.cursor, limit=7)
        assert got == expected
        assert page.change_token == max(tokens.values())


def test_a_limit_out_of_range_is_bad_input_and_a_since_without_changes_is_refused(
    service: SyncService,
) -> None:
    service.create(PERSON, T, None, {})
    for limit in (0, 1001):
        with pytest.raises(BadUserInput):
            service.changes(T, limit=limit)
    with pytest.raises(TenantDeleted):  # no changes at all: deleted, or never written
        service.changes("empty-tenant", since=next_token(wall_clock_ms(), None))
    with pytest.raises(BadUserInput, match="newer than every change"):
        service.changes(T, since="1" + "0" * 25)  # in the year 3085


def test_changes_of_chosen_types_come_in_full_pages_until_the_feed_is_drained(
    service: SyncService,
) -> None:
    rng = random.Random(3)
    people: list[str] = []
    for i in range(90):
        kind = PERSON if rng.random() < 0.3 else REMINDER
        record = service.create(kind, T, f"e{i}", {})
        if kind is PERSON:
            people.append(record.change_token)
    everything = service.changes(T, limit=1000).items
    only = frozenset({PERSON})
    got: list[str] = []
    page = service.changes(T, limit=4, types=only)
    while True:
        assert all(r.item_type is PERSON for r in page.items)
        if page.cursor is not None:
            assert len(page.items) == 4  # a short page means drained
        got += [r.change_token for r in page.items]
        if page.cursor is None:
            break
        page = service.changes(T, cursor=page.cursor, limit=4, types=only)
    assert got == people
    assert page.change_token == everything[-1].change_token  # the whole feed was read
    # From a token, the same: only what is newer, only people.
    since = everything[40].change_token
    later = service.changes(T, since=since, limit=1000, types=only)
    assert [r.change_token for r in later.items] == [t for t in people if t > since]


def _put(
    entity: str,
    assumed: State | None,
    state: State,
    cmid: str | None = None,
    kind: ItemType = PERSON,
) -> Mutation:
    return Mutation("put", kind, T, entity, client_mutation_id=cmid, assumed=assumed, state=state)


def test_a_state_based_write_applies_on_the_assumed_state_and_else_conflicts(
    service: SyncService, store: MemoryStore
) -> None:
    ann, anna = State({"givenName": "Ann"}), State({"givenName": "Anna"})
    created = service.apply(_put("p1", None, ann)).record
    assert created.fields == {"givenName": "Ann"} and not created.deleted
    # Two edits in a row, each assuming the state the device last wrote: no token needed.
    service.apply(_put("p1", ann, anna))
    edited = service.apply(_put("p1", anna, State({"givenName": "Anna", "occupation": "x"})))
    assert edited.record.fields == {"givenName": "Anna", "occupation": "x"}
    writes = store.writes
    with pytest.raises(Conflict) as stale:  # assumes a state the server no longer holds
        service.apply(_put("p1", ann, State({"givenName": "Bo"})))
    assert stale.value.current == edited.record and store.writes == writes
    with pytest.raises(Conflict):  # assumes it does not exist
        service.apply(_put("p1", None, ann))
    with pytest.raises(NotFound):  # assumes a state of an entity that does not exist
        service.apply(_put("nobody", ann, anna))
    # Fields compare as the server normalizes them; absent and null are "not set".
    same = State({"givenName": "Anna", "occupation": "x", "familyName": None})
    deleted = service.apply(_put("p1", same, State(deleted=True))).record
    assert deleted.deleted
    with pytest.raises(Conflict) as gone:  # a deleted id stays deleted
        service.apply(_put("p1", State(deleted=True), ann))
    assert gone.value.current == deleted
    assert service.apply(_put("p1", State(deleted=True), State(deleted=True))).record == deleted


def test_a_state_based_write_is_idempotent_and_checked_like_any_input(
    service: SyncService, store: MemoryStore
) -> None:
    first = service.apply(_put("p2", None, State({"givenName": "A"}), cmid="put-1"))
    again = service.apply(_put("p2", None, State({"givenName": "A"}), cmid="put-1"))
    assert again.replayed and again.record == first.record and store.writes == 1
    with pytest.raises(BadUserInput, match="already used"):
        service.apply(_put("p2", None, State({"givenName": "B"}), cmid="put-1"))
    with pytest.raises(BadUserInput):
        service.apply(_put("p3", None, State({"givenName": 7})))
    with pytest.raises(BadUserInput):
        service.apply(_put("p3", None, State({"nope": "x"})))
    with pytest.raises(NotFound, match="p2 is a Person, not a Reminder"):  # a Person's id
        service.apply(_put("p2", State({"title": "A"}), State(), kind=REMINDER))


def test_merge_fields_rebases_a_state_onto_changes_of_other_fields_only(
    service: SyncService,
) -> None:
    base = State({"givenName": "Ann", "occupation": "a"})
    service.apply(_put("p4", None, base))
    # Device A changed givenName and wrote first.
    service.apply(_put("p4", base, State({"givenName": "Anna", "occupation": "a"})))
    # Device B, from the same base, changed occupation (and cleared nothing else).
    mine = State({"givenName": "Ann", "occupation": "b"})
    plain = Mutation("put", PERSON, T, "p4", assumed=base, state=mine)
    with pytest.raises(Conflict):  # without merge_fields: the server's state differs
        service.apply(plain)
    merged = service.apply(replace(plain, merge_fields=True)).record
    assert merged.fields == {"givenName": "Anna", "occupation": "b"}  # both edits survive
    # The same field changed on both sides stays a conflict, so does a deletion.
    overlap = State({"givenName": "Bo", "occupation": "a"})
    with pytest.raises(Conflict):
        service.apply(replace(plain, state=overlap, merge_fields=True))
    with pytest.raises(Conflict):
        service.apply(replace(plain, state=State(deleted=True), merge_fields=True))


def test_a_merge_that_would_outgrow_the_item_limit_is_a_conflict_and_writes_nothing(
    service: SyncService, store: MemoryStore
) -> None:
    """Each side fits the 16 KB limit, together they do not: written, the reminder
    would refuse every later write. It is a CONFLICT with the current version,
    nothing is written, and the reminder stays writable."""
    base = State({"title": "t"})
    service.apply(_put("r9", None, base, kind=REMINDER))
    # Another device wrote long notes: 15,000 bytes of UTF-8, the server's state now.
    server = State({"title": "t", "notes": "\u00e9" * 7500})
    current = service.apply(_put("r9", base, server, kind=REMINDER)).record
    # This device, from the same base, wrote a long title: 2,000 bytes. Merged: 17,010.
    mine = State({"title": "\U0001f600" * 500})
    writes = store.writes
    with pytest.raises(Conflict, match="too large") as refused:
        service.apply(replace(_put("r9", base, mine, kind=REMINDER), merge_fields=True))
    assert refused.value.current == current and store.writes == writes
    # The device resolves from the current version, and the write applies.
    resolved = State({"title": "\U0001f600" * 500, "notes": "short"})
    written = service.apply(_put("r9", server, resolved, kind=REMINDER)).record
    assert written.fields == {"title": "\U0001f600" * 500, "notes": "short"}


def test_a_garbage_since_beside_a_cursor_is_bad_input(service: SyncService) -> None:
    for i in range(3):
        service.apply(Mutation("create", PERSON, T, f"g{i}", None, {}))
    page = service.changes(T, limit=1)
    assert page.cursor is not None
    with pytest.raises(BadUserInput, match="since"):
        service.changes(T, since="not-a-token", cursor=page.cursor, limit=1)
    # A valid since beside a cursor (the reference client sends both): the cursor wins.
    resumed = service.changes(T, since=page.change_token, cursor=page.cursor, limit=1)
    assert [r.id for r in resumed.items] == ["g1"]
