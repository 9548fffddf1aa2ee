"""Idempotent mutations: a retried clientMutationID writes nothing and answers the same."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from api.settings import Settings
from api.storage import keys
from tests.support.faults import Fault, LoseResponse, transaction_conflict
from tests.support.gql import GraphQLClient
from tests.support.store_state import assert_consistent, tenant_state

Inject = Callable[[str, Callable[..., Any]], None]
UPDATE = (
    "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) "
    "{ person { id changeToken givenName } replayed } }"
)
CREATE = (
    "mutation($i: CreatePersonInput!) { createPerson(input: $i) "
    "{ person { id changeToken givenName } replayed } }"
)


def _update(
    gql: GraphQLClient, tenant: str, person: dict[str, Any], cmid: str, name: str = "new"
) -> dict[str, Any]:
    return gql.execute(
        UPDATE,
        {
            "i": {
                "tenantID": tenant,
                "id": person["id"],
                "changeToken": person["changeToken"],
                "changes": {"givenName": name},
                "clientMutationID": cmid,
            }
        },
    )


def _outcome_item(ddb: Any, settings: Settings, tenant: str, cmid: str) -> Any:
    return ddb.get_item(
        TableName=settings.table_name,
        ConsistentRead=True,
        Key={"pk": {"S": keys.tenant_pk(tenant)}, "sk": {"S": keys.outcome_sk(cmid)}},
    ).get("Item")


def test_a_repeated_request_is_answered_from_the_first_and_writes_nothing(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "old"})
    first = _update(gql, tenant, person, "m-1")
    assert first["data"]["updatePerson"]["replayed"] is False
    after_first = tenant_state(ddb, settings.table_name, tenant)

    again = _update(gql, tenant, person, "m-1")
    assert again["data"]["updatePerson"]["replayed"] is True
    assert again["data"]["updatePerson"]["person"] == first["data"]["updatePerson"]["person"]
    assert tenant_state(ddb, settings.table_name, tenant) == after_first


def test_the_replay_returns_the_first_result_even_after_later_changes(
    gql: GraphQLClient, tenant: str
) -> None:
    created = gql.execute(
        CREATE,
        {"i": {"tenantID": tenant, "person": {"givenName": "a"}, "clientMutationID": "create-1"}},
    )
    person = created["data"]["createPerson"]["person"]
    gql.update(tenant, "Person", person["id"], person["changeToken"], {"givenName": "b"})
    replay = gql.execute(
        CREATE,
        {"i": {"tenantID": tenant, "person": {"givenName": "a"}, "clientMutationID": "create-1"}},
    )
    assert replay["data"]["createPerson"] == {"person": person, "replayed": True}
    assert len(gql.sync(tenant).items) == 1  # no second person


def test_concurrent_identical_requests_write_once(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "old"})
    head_before = tenant_state(ddb, settings.table_name, tenant).head
    barrier = threading.Barrier(12)
    bodies: list[Any] = [None] * 12

    def send(i: int) -> None:
        barrier.wait()
        bodies[i] = _update(gql, tenant, person, "same-id")

    threads = [threading.Thread(target=send, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    payloads = [b["data"]["updatePerson"] for b in bodies]
    assert all("errors" not in b for b in bodies), bodies
    assert len({p["person"]["changeToken"] for p in payloads}) == 1
    assert sorted(p["replayed"] for p in payloads) == [False] + [True] * 11
    state = tenant_state(ddb, settings.table_name, tenant)
    assert_consistent(state)
    assert state.head == payloads[0]["person"]["changeToken"] > (head_before or "")
    assert len(state.log) == 1  # one entity, one write after its creation


def test_reusing_an_id_for_another_mutation_is_bad_input(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "old"})
    _update(gql, tenant, person, "m-1", name="first")
    before = tenant_state(ddb, settings.table_name, tenant)
    body = _update(gql, tenant, person, "m-1", name="different")
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert "m-1" in body["errors"][0]["message"]
    other = gql.execute(
        CREATE, {"i": {"tenantID": tenant, "person": {}, "clientMutationID": "m-1"}}
    )
    assert other["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert tenant_state(ddb, settings.table_name, tenant) == before


def test_a_replayed_failure_returns_the_same_error(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "old"})
    winner = gql.update(tenant, "Person", person["id"], person["changeToken"], {"givenName": "w"})
    first = _update(gql, tenant, person, "late")  # stale token
    error = first["errors"][0]
    assert error["extensions"]["code"] == "CONFLICT"
    assert "replayed" not in error["extensions"]
    # The entity moves on; the replay still tells what the first answer said.
    gql.update(tenant, "Person", person["id"], winner["changeToken"], {"givenName": "x"})
    replay = _update(gql, tenant, person, "late")
    again = replay["errors"][0]
    assert again["extensions"] == {**error["extensions"], "replayed": True}
    assert again["message"] == error["message"]

    missing = {"id": "nobody", "changeToken": person["changeToken"]}
    first = _update(gql, tenant, missing, "missing")
    replay = _update(gql, tenant, missing, "missing")
    assert first["errors"][0]["extensions"]["code"] == "NOT_FOUND"
    assert replay["errors"][0]["extensions"] == {"code": "NOT_FOUND", "replayed": True}


@pytest.mark.slow
def test_a_cancelled_transaction_leaves_neither_the_write_nor_its_record(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings, inject: Inject
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "old"})
    before = tenant_state(ddb, settings.table_name, tenant)
    fault = Fault(transaction_conflict)
    inject("before-send.dynamodb.TransactWriteItems", fault)
    body = _update(gql, tenant, person, "cancelled")
    assert body["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
    assert tenant_state(ddb, settings.table_name, tenant) == before
    assert _outcome_item(ddb, settings, tenant, "cancelled") is None
    fault.stop()
    # UNAVAILABLE is not remembered: the retry really applies the mutation.
    retry = _update(gql, tenant, person, "cancelled")
    assert retry["data"]["updatePerson"]["replayed"] is False


def test_a_retry_after_a_lost_response_is_a_replay_not_a_false_conflict(
    gql: GraphQLClient, tenant: str, inject: Inject
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "old"})
    lose = LoseResponse(times=1)
    inject("after-call.dynamodb.TransactWriteItems", lose)
    lost = _update(gql, tenant, person, "flaky")
    # The server saw its write applied although DynamoDB's answer was lost
    # (api.service.writing): the first answer is the write itself, not UNAVAILABLE.
    assert lost["data"]["updatePerson"]["replayed"] is False, lost
    retry = _update(gql, tenant, person, "flaky")
    assert retry["data"]["updatePerson"]["replayed"] is True
    assert retry["data"]["updatePerson"]["person"]["givenName"] == "new"
    first, again = (r["data"]["updatePerson"]["person"] for r in (lost, retry))
    assert again["changeToken"] == first["changeToken"]


def test_outcomes_expire_with_dynamodb_ttl_after_at_least_seven_days(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "old"})
    _update(gql, tenant, person, "ttl")
    item = _outcome_item(ddb, settings, tenant, "ttl")
    expires = int(item[keys.TTL_ATTRIBUTE]["N"])
    assert expires >= time.time() + 7 * 24 * 3600
    ttl = ddb.describe_time_to_live(TableName=settings.table_name)["TimeToLiveDescription"]
    assert ttl["AttributeName"] == keys.TTL_ATTRIBUTE
    assert ttl["TimeToLiveStatus"] in ("ENABLED", "ENABLING")


def test_an_expired_outcome_no_longer_replays(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "old"})
    first = _update(gql, tenant, person, "old-id")["data"]["updatePerson"]["person"]
    # As if eight days had passed and TTL had not yet removed the item.
    ddb.update_item(
        TableName=settings.table_name,
        Key={"pk": {"S": keys.tenant_pk(tenant)}, "sk": {"S": keys.outcome_sk("old-id")}},
        UpdateExpression="SET #e = :past",
        ExpressionAttributeNames={"#e": keys.TTL_ATTRIBUTE},
        ExpressionAttributeValues={":past": {"N": str(int(time.time()) - 60)}},
    )
    again = _update(gql, tenant, first, "old-id", name="newer")
    assert again["data"]["updatePerson"]["replayed"] is False
    assert again["data"]["updatePerson"]["person"]["givenName"] == "newer"


def test_malformed_client_mutation_ids_are_bad_input(gql: GraphQLClient, tenant: str) -> None:
    person = gql.create(tenant, "Person", {"givenName": "old"})
    for cmid in ("", "has space", "x" * 129, "a#b"):
        body = _update(gql, tenant, person, cmid)
        assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", cmid
