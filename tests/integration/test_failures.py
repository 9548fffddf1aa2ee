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


def test_a_write_applied_whose_answer_was_lost_is_answered_applied(
    gql: GraphQLClient, tenant: str, inject: Inject, ddb: Any, settings: Settings
) -> None:
    """DynamoDB applied the transaction and its answer was lost: the server looks
    (the entity holds the write's own token) and answers the real outcome, not an
    UNAVAILABLE whose resend would meet the client's own write as a false CONFLICT."""
    person = gql.create(tenant, "Person", {"givenName": "old"})
    lose = LoseResponse(times=1)
    inject("after-call.dynamodb.TransactWriteItems", lose)
    body = _update_body(gql, tenant, person)
    assert lose.calls == 1
    assert "errors" not in body, body
    written = body["data"]["updatePerson"]["person"]["changeToken"]
    state = tenant_state(ddb, settings.table_name, tenant)
    assert_consistent(state)  # all of it: entity, new log entry, old entry gone, head
    assert state.tokens()[person["id"]] == written > person["changeToken"]
    assert state.entities[person["id"]]["f"]["M"]["givenName"]["S"] == "new"


def test_a_retry_meeting_its_own_transaction_in_progress_is_never_internal(
    gql: GraphQLClient, tenant: str, inject: Inject, ddb: Any, settings: Settings
) -> None:
    """TransactionInProgressException (a retry with the same ClientRequestToken met
    its transaction still committing) is the store's trouble: UNAVAILABLE, retryable,
    when the write is not (yet) visible; nothing half written."""
    person = gql.create(tenant, "Person", {"givenName": "old"})
    before = tenant_state(ddb, settings.table_name, tenant)
    in_progress = Fault(lambda: dynamodb_error("TransactionInProgressException"), times=10**9)
    inject(TRANSACT, in_progress)
    body = _update_body(gql, tenant, person)
    assert in_progress.calls >= 1
    assert body["errors"][0]["extensions"] == {"code": "UNAVAILABLE", "retryable": True}
    assert tenant_state(ddb, settings.table_name, tenant) == before


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
        if i == 0:  # refused before sending: nothing written, and it says so
            assert body["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
        else:  # applied, its answer lost: the server found its write and says so
            assert body["data"]["createPerson"]["person"]["id"] == "p1", body
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
