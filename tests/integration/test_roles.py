"""Roles inside a shared tenant (contract 6): a reader reads, syncs and subscribes;
each of its writes is FORBIDDEN, before the store is touched; a push of a reader
is answered entry by entry, so that its outbox drains."""

from __future__ import annotations

from typing import Any

from api.settings import Settings
from tests.support.gql import GraphQLClient, bearer
from tests.support.store_state import tenant_state

PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) "
    "{ results { status error { code message reason } } } }"
)


def _as(gql: GraphQLClient, entry: str, query: str, variables: dict[str, Any]) -> Any:
    return gql.execute(query, variables, headers=bearer([entry]))


def test_a_reader_syncs_but_every_write_is_forbidden_and_nothing_is_written(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "Ann"})
    reader = f"{tenant}:reader"
    sync = _as(
        gql,
        reader,
        "query($t: ID!) { changes(tenantID: $t) { items { id } changeToken } }",
        {"t": tenant},
    )
    assert [i["id"] for i in sync["data"]["changes"]["items"]] == [person["id"]]
    before = tenant_state(ddb, settings.table_name, tenant)

    create = _as(
        gql,
        reader,
        "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }",
        {"i": {"tenantID": tenant, "person": {"givenName": "Bob"}}},
    )
    assert create["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    # A role refusal: the device keeps its copy (NOT_A_MEMBER would have it let go).
    assert create["errors"][0]["extensions"]["reason"] == "ROLE"
    entries = [
        {"createPerson": {"tenantID": tenant, "person": {"givenName": "Bob"}}},
        {
            "updatePerson": {
                "tenantID": tenant,
                "id": person["id"],
                "changeToken": person["changeToken"],
                "changes": {"givenName": "x"},
            }
        },
    ]
    pushed = _as(gql, reader, PUSH, {"i": {"tenantID": tenant, "mutations": entries}})
    results = pushed["data"]["pushChanges"]["results"]
    assert [(r["status"], r["error"]["code"], r["error"]["reason"]) for r in results] == [
        ("REJECTED", "FORBIDDEN", "ROLE")
    ] * 2
    restore = _as(
        gql,
        reader,
        "mutation($i: RestoreVersionInput!) { restoreVersion(input: $i) { replayed } }",
        {
            "i": {
                "tenantID": tenant,
                "id": person["id"],
                "changeToken": person["changeToken"],
                "version": person["changeToken"],
            }
        },
    )
    assert restore["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    assert tenant_state(ddb, settings.table_name, tenant) == before


def test_writers_owners_and_plain_members_write(gql: GraphQLClient, tenant: str) -> None:
    for entry in (f"{tenant}:writer", f"{tenant}:owner", tenant, f"{tenant}:reader"):
        headers = bearer([entry, f"{tenant}:writer"] if entry.endswith("reader") else [entry])
        body = gql.execute(
            "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }",
            {"i": {"tenantID": tenant, "person": {"givenName": entry}}},
            headers=headers,
        )
        assert "errors" not in body, (entry, body)  # named twice: the higher role


def test_a_tenant_id_with_a_colon_keeps_full_access(gql: GraphQLClient, tenant: str) -> None:
    colon = f"{tenant}:team"
    body = gql.execute(
        "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }",
        {"i": {"tenantID": colon, "person": {"givenName": "c"}}},
        headers=bearer([colon]),
    )
    assert "errors" not in body, body
    denied = gql.execute(
        "query($t: ID!) { changes(tenantID: $t) { changeToken } }",
        {"t": tenant},
        headers=bearer([f"{tenant}:admin"]),  # not a role: the tenant "<id>:admin"
    )
    assert denied["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    assert denied["errors"][0]["extensions"]["reason"] == "NOT_A_MEMBER"
