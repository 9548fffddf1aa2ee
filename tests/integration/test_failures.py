"""Atomicity and error mapping under injected store failures (contract 3.2, 3.5)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from api.settings import Settings
from tests.support.faults import (
    Fault,
    LoseResponse,
    connection_refused,
    dynamodb_error,
    transaction_conflict,
)
from tests.support.gql import GraphQLClient
from tests.support.store_state import assert_consistent, tenant_state

Inject = Callable[[str, Callable[..., Any]], None]
TRANSACT = "before-send.dynamodb.TransactWriteItems"


def _update_body(gql: GraphQLClient, tenant: str, person: dict[str, Any]) -> dict[str, Any]:
    return gql.execute(
        "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) { person { changeToken } } }",
        {
            "i": {
                "tenantID": tenant,
                "id": person["id"],
                "changeToken": person["changeToken"],
                "changes": {"givenName": "new"},
            }
        },
    )


def test_transaction_conflicts_are_retried_until_the_write_goes_through(
    gql: GraphQLClient, tenant: str, inject: Inject, ddb: Any, settings: Settings
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "old"})
    fault = Fault(transaction_conflict, times=3)
    inject(TRANSACT, fault)
    body = _update_body(gql, tenant, person)
    assert "errors" not in body, body
    assert fault.calls == 3
    state = tenant_state(ddb, settings.table_name, tenant)
    assert_consistent(state)
    assert state.tokens()[person["id"]] == body["data"]["updatePerson"]["person"]["changeToken"]


@pytest.mark.slow
def test_endless_transaction_conflicts_give_unavailable_and_write_nothing(
    gql: GraphQLClient, tenant: str, inject: Inject, ddb: Any, settings: Settings
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "old"})
    before = tenant_state(ddb, settings.table_name, tenant)
    inject(TRANSACT, Fault(transaction_conflict))
    body = _update_body(gql, tenant, person)
    assert body["data"] is None
    assert body["errors"][0]["extensions"] == {"code": "UNAVAILABLE", "retryable": True}
    assert tenant_state(ddb, settings.table_name, tenant) == before


@pytest.mark.slow
def test_throttling_gives_unavailable_retryable(
    gql: GraphQLClient, tenant: str, inject: Inject
) -> None:
    gql.create(tenant, "Person", {})
    inject(
        "before-send.dynamodb.Query",
        Fault(
            lambda: dynamodb_error(
                "ProvisionedThroughputExceededException",
                "Rate of requests exceeds the allowed throughput",
            )
        ),
    )
    body = gql.execute("query($t: ID!) { changes(tenantID: $t) { changeToken } }", {"t": tenant})
    assert body["errors"][0]["extensions"] == {"code": "UNAVAILABLE", "retryable": True}
    assert "Throughput" not in body["errors"][0]["message"]


def test_an_unreachable_store_gives_unavailable_and_writes_nothing(
    gql: GraphQLClient, tenant: str, inject: Inject, ddb: Any, settings: Settings
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "old"})
    before = tenant_state(ddb, settings.table_name, tenant)
    inject(TRANSACT, Fault(connection_refused()))
    body = _update_body(gql, tenant, person)
    assert body["errors"][0]["extensions"] == {"code": "UNAVAILABLE", "retryable": True}
    assert tenant_state(ddb, settings.table_name, tenant) == before


def test_a_response_lost_after_the_write_leaves_the_whole_write_visible(
    gql: GraphQLClient, tenant: str, inject: Inject, ddb: Any, settings: Settings
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "old"})
    lose = LoseResponse(times=1)
    inject("after-call.dynamodb.TransactWriteItems", lose)
    body = _update_body(gql, tenant, person)
    assert lose.calls == 1
    assert body["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
    state = tenant_state(ddb, settings.table_name, tenant)
    assert_consistent(state)  # all of it: entity, new log entry, old entry gone, head
    assert state.tokens()[person["id"]] > person["changeToken"]
    assert state.entities[person["id"]]["f"]["M"]["givenName"]["S"] == "new"
    # The client's retry now conflicts, and the conflict shows its own write.
    retry = _update_body(gql, tenant, person)
    assert retry["errors"][0]["extensions"]["code"] == "CONFLICT"
    assert retry["errors"][0]["extensions"]["current"]["givenName"] == "new"


def test_failures_at_every_step_of_a_create_leave_all_or_nothing(
    gql: GraphQLClient, tenant: str, inject: Inject, ddb: Any, settings: Settings
) -> None:
    events: list[tuple[str, Fault | LoseResponse]] = [
        ("before-send.dynamodb.TransactWriteItems", Fault(connection_refused())),
        ("after-call.dynamodb.TransactWriteItems", LoseResponse(times=10**9)),
    ]
    for i, (event, hook) in enumerate(events):
        inject(event, hook)
        body = gql.execute(
            "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }",
            {"i": {"tenantID": tenant, "id": f"p{i}", "person": {"givenName": "x"}}},
        )
        assert body["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
        assert_consistent(tenant_state(ddb, settings.table_name, tenant))
        hook.stop()
    state = tenant_state(ddb, settings.table_name, tenant)
    assert "p0" not in state.entities  # refused before sending: nothing
    assert "p1" in state.entities  # lost after applying: everything


def test_an_unexpected_store_error_is_internal_without_details(
    gql: GraphQLClient, tenant: str, inject: Inject
) -> None:
    inject(
        "before-send.dynamodb.GetItem",
        Fault(
            lambda: dynamodb_error(
                "ResourceNotFoundException",
                "Requested resource not found: Table: sync-test not found",
            )
        ),
    )
    body = gql.execute('query($t: ID!) { person(tenantID: $t, id: "p1") { id } }', {"t": tenant})
    error = body["errors"][0]
    assert error["extensions"] == {"code": "INTERNAL_SERVER_ERROR"}
    assert error["message"] == "Internal server error"
    text = str(body)
    for leak in ("sync-test", "ResourceNotFound", "pynamodb", "botocore", "Traceback"):
        assert leak not in text
