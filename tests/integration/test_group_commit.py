"""Group commit: a push goes in as few transactions as DynamoDB allows, with the
results and the final state of applying its mutations one by one.

On DynamoDB Local; the same comparison runs through the torn-commit engine in
tests/integration/test_torn_sync.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from api.domain.cursor import CursorCodec
from api.domain.mutations import Mutation
from api.service import PushStatus, SyncService
from api.settings import Settings
from api.storage.store import DynamoStore
from tests.support.family import PERSON
from tests.support.gql import GraphQLClient
from tests.support.random_pushes import compare_grouped_with_one_by_one
from tests.support.store_state import assert_consistent, tenant_state

Inject = Callable[[str, Callable[..., Any]], None]


@pytest.mark.slow  # 6 s a seed; the torn engine's version runs in the fast loop
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_pushes_grouped_equal_one_by_one(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings, seed: int
) -> None:
    grouped, one_by_one = f"{tenant}-g", f"{tenant}-o"
    seen = compare_grouped_with_one_by_one(gql, grouped, one_by_one, seed=seed, rounds=6)
    # The pushes exercised every kind of answer, not only the easy one.
    assert seen.get("APPLIED", 0) > 20 and seen.get("CONFLICT", 0) > 5, seen
    assert seen.get("REJECTED", 0) > 0 and seen.get("replayed", 0) > 0, seen
    for name in (grouped, one_by_one):
        assert_consistent(tenant_state(ddb, settings.table_name, name))


def _transactions(inject: Inject) -> list[int]:
    """Collects the item count of every TransactWriteItems sent."""
    sizes: list[int] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        sizes.append(len(params["TransactItems"]))

    inject("provide-client-params.dynamodb.TransactWriteItems", count)
    return sizes


def _service(history: bool = True) -> SyncService:
    return SyncService(DynamoStore(), CursorCodec("x"), history=history)


def _people(service: SyncService, tenant: str, n: int) -> list[Any]:
    creates = [Mutation("create", PERSON, tenant, f"p{i}", None, {}) for i in range(n)]
    return [r.record for r in service.push(tenant, creates)]


@pytest.mark.parametrize(
    ("with_ids", "history", "transactions"),
    [
        (False, False, [97, 97, 97, 97, 21]),
        (True, False, [100, 96, 96, 96, 96, 26]),
        (False, True, [100, 96, 96, 96, 96, 26]),
        (True, True, [95, 97, 97, 97, 97, 97, 31]),
    ],
)
def test_a_hundred_updates_take_the_fewest_transactions(
    tenant: str, inject: Inject, with_ids: bool, history: bool, transactions: list[int]
) -> None:
    service = _service(history)
    people = _people(service, tenant, 100)
    sizes = _transactions(inject)
    cold = _service(history)  # a process that has not written here: checks the last entry
    updates = [
        Mutation(
            "update",
            PERSON,
            tenant,
            p.id,
            p.change_token,
            {"givenName": "x"},
            client_mutation_id=f"u{i}" if with_ids else None,
        )
        for i, p in enumerate(people)
    ]
    results = cold.push(tenant, updates)
    assert {r.status for r in results} == {PushStatus.APPLIED}
    tokens = [r.record.change_token for r in results if r.record]
    assert tokens == sorted(tokens) and len(set(tokens)) == 100
    # 4 items per update (entity, log entry, the old entry's delete, the copy; +1 with
    # an id, +1 with history: the kept version) and the head: at most 100 a
    # transaction, the fewest that can hold them. The first also checks the two
    # entries and two copies of the transaction before it (creates: nothing
    # replaced), which this process did not write.
    assert sizes == transactions


def test_a_write_refused_at_commit_is_answered_and_the_rest_retried_without_it(
    tenant: str, inject: Inject, ddb: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, other = _service(), _service()
    people = _people(service, tenant, 5)
    real_read = DynamoStore.read_many
    raced: list[Any] = []

    def read_then_lose_a_race(self: DynamoStore, *args: Any) -> Any:
        known = real_read(self, *args)
        if not raced:  # another server updates p2 after this push read it
            raced.append(None)
            raced[0] = other.update(PERSON, tenant, "p2", people[2].change_token, {})
        return known

    monkeypatch.setattr(DynamoStore, "read_many", read_then_lose_a_race)
    sizes = _transactions(inject)
    updates = [
        Mutation("update", PERSON, tenant, p.id, p.change_token, {"givenName": "new"})
        for p in people
    ]
    results = service.push(tenant, updates)
    assert [r.status for r in results] == [PushStatus.APPLIED] * 2 + [PushStatus.CONFLICT] + [
        PushStatus.APPLIED
    ] * 2
    assert results[2].record == raced[0]  # the current version, from the cancellation
    # The other server's update (5 items with its kept version and its copy, head, 8
    # checks of the creates' other entries and copies), then this push: cancelled by
    # p2's condition (5 updates of 5 items, head); without p2, cancelled by the head
    # the other server moved; then committed, checking the other server's entry, its
    # copy and its removal of p2's old entry.
    assert sizes == [14, 26, 21, 24]
    assert_consistent(tenant_state(ddb, settings.table_name, tenant))


def test_writes_of_one_entity_go_in_separate_transactions_in_order(
    tenant: str, inject: Inject
) -> None:
    service = _service()
    (person,) = _people(service, tenant, 1)
    sizes = _transactions(inject)
    same_token = [
        Mutation("update", PERSON, tenant, person.id, person.change_token, {"givenName": n})
        for n in ("first", "second")
    ]
    twice = [
        Mutation("create", PERSON, tenant, "q", None, {}, client_mutation_id="c1"),
        Mutation("create", PERSON, tenant, "q", None, {}, client_mutation_id="c1"),
    ]
    first, second, created, replayed = service.push(tenant, same_token + twice)
    assert first.status is PushStatus.APPLIED
    assert second.status is PushStatus.CONFLICT and second.record == first.record
    assert created.status is PushStatus.APPLIED and not created.replayed
    assert replayed.status is PushStatus.APPLIED and replayed.replayed
    assert replayed.record == created.record
    assert len(sizes) == 2  # the first update, then the create; the rest is answered
