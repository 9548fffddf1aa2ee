"""The write path through the API: contract 3.1-3.3 and the second item type."""

from __future__ import annotations

from typing import Any

import pytest

from api.settings import Settings
from tests.support import family
from tests.support.gql import GraphQLClient, GraphQLError
from tests.support.store_state import assert_consistent, tenant_state

# Every field of a Person, unset: what `current` carries for the ones not written.
PERSON_FIELDS = dict.fromkeys(family.PERSON.field_names)


def _expect_error(code: str, call: Any, *args: Any) -> GraphQLError:
    with pytest.raises(GraphQLError) as info:
        call(*args)
    assert info.value.code == code, info.value.errors
    return info.value


def test_create_returns_the_person_with_a_server_token(gql: GraphQLClient, tenant: str) -> None:
    person = gql.create(
        tenant,
        "Person",
        {
            "givenName": "Ann",
            "dateOfBirth": "1990-04-01",
            "relationship": "CHILD",
            "profileColor": "#A0B1C2",
        },
    )
    assert person["__typename"] == "Person" and person["tenantID"] == tenant
    assert len(person["changeToken"]) == 26 and len(person["id"]) == 26
    assert person["id"] != person["changeToken"]
    assert person["createdAt"] == person["updatedAt"]
    assert person["createdAt"].endswith("Z") and len(person["createdAt"]) == 24
    assert person["dateOfBirth"] == "1990-04-01" and person["relationship"] == "CHILD"
    assert gql.get(tenant, "Person", person["id"]) == person


def test_a_device_made_id_is_kept(gql: GraphQLClient, tenant: str) -> None:
    device_id = "6f1c2a9e-8b1d-4c1e-9f5e-2b7d3c4e5f60"
    person = gql.create(tenant, "Person", {"givenName": "Bo"}, id=device_id)
    assert person["id"] == device_id


def test_create_with_a_taken_id_is_already_exists_with_the_current_item(
    gql: GraphQLClient, tenant: str
) -> None:
    live = gql.create(tenant, "Person", {"givenName": "Ann"}, id="p1")
    error = _expect_error("ALREADY_EXISTS", gql.create, tenant, "Person", {"givenName": "X"}, "p1")
    assert error.extensions["current"]["changeToken"] == live["changeToken"]
    assert error.extensions["current"]["givenName"] == "Ann"

    deleted = gql.delete(tenant, "Person", "p1", live["changeToken"])
    error = _expect_error("ALREADY_EXISTS", gql.create, tenant, "Person", {"givenName": "X"}, "p1")
    assert error.extensions["current"]["__typename"] == "DeletedItem"
    assert error.extensions["currentChangeToken"] == deleted["changeToken"]


def test_ids_are_unique_across_types_within_a_tenant(gql: GraphQLClient, tenant: str) -> None:
    gql.create(tenant, "Person", {"givenName": "Ann"}, id="shared")
    _expect_error("ALREADY_EXISTS", gql.create, tenant, "Reminder", {"title": "x"}, "shared")


def test_update_applies_only_the_fields_sent_and_null_clears(
    gql: GraphQLClient, tenant: str
) -> None:
    person = gql.create(
        tenant, "Person", {"givenName": "Ann", "familyName": "Lee", "occupation": "pilot"}
    )
    updated = gql.update(
        tenant,
        "Person",
        person["id"],
        person["changeToken"],
        {"familyName": "Kim", "occupation": None},
    )
    assert updated["givenName"] == "Ann"  # absent: untouched
    assert updated["familyName"] == "Kim"
    assert updated["occupation"] is None  # explicit null: cleared
    assert updated["changeToken"] > person["changeToken"]
    assert updated["createdAt"] == person["createdAt"]
    assert updated["updatedAt"] >= person["updatedAt"]


def test_a_stale_token_is_a_conflict_carrying_the_current_version_and_writes_nothing(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "Ann"})
    current = gql.update(tenant, "Person", person["id"], person["changeToken"], {"givenName": "B"})
    before = tenant_state(ddb, settings.table_name, tenant)

    error = _expect_error(
        "CONFLICT",
        gql.update,
        tenant,
        "Person",
        person["id"],
        person["changeToken"],
        {"familyName": "lost?"},
    )
    assert error.extensions["currentChangeToken"] == current["changeToken"]
    expected = {k: v for k, v in current.items()}
    # `current` is the whole version, with who wrote it (the tests' token: "tester").
    assert error.extensions["current"] == {**PERSON_FIELDS, **expected, "writtenBy": "tester"}
    assert tenant_state(ddb, settings.table_name, tenant) == before

    error = _expect_error(
        "CONFLICT", gql.delete, tenant, "Person", person["id"], person["changeToken"]
    )
    assert error.extensions["current"]["givenName"] == "B"
    assert tenant_state(ddb, settings.table_name, tenant) == before


def test_a_conflict_is_a_graphql_error_with_null_data(gql: GraphQLClient, tenant: str) -> None:
    person = gql.create(tenant, "Person", {"givenName": "Ann"})
    gql.update(tenant, "Person", person["id"], person["changeToken"], {"givenName": "B"})
    body = gql.execute(
        "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) { person { id } } }",
        {
            "i": {
                "tenantID": tenant,
                "id": person["id"],
                "changeToken": person["changeToken"],
                "changes": {},
            }
        },
    )
    assert body["data"] is None
    assert body["errors"][0]["path"] == ["updatePerson"]
    assert body["errors"][0]["extensions"]["code"] == "CONFLICT"


def test_unknown_id_is_not_found(gql: GraphQLClient, tenant: str) -> None:
    token = gql.create(tenant, "Person", {"givenName": "Ann"})["changeToken"]
    _expect_error("NOT_FOUND", gql.update, tenant, "Person", "nobody", token, {"givenName": "x"})
    _expect_error("NOT_FOUND", gql.delete, tenant, "Person", "nobody", token)


def test_an_id_of_another_type_is_not_found(gql: GraphQLClient, tenant: str) -> None:
    reminder = gql.create(tenant, "Reminder", {"title": "call"})
    token = reminder["changeToken"]
    _expect_error("NOT_FOUND", gql.update, tenant, "Person", reminder["id"], token, {})
    _expect_error("NOT_FOUND", gql.delete, tenant, "Person", reminder["id"], token)
    assert gql.get(tenant, "Person", reminder["id"]) is None
    assert gql.get(tenant, "Reminder", reminder["id"])["changeToken"] == token  # type: ignore[index]


def test_delete_leaves_a_sentinel_and_later_writes_conflict_with_it(
    gql: GraphQLClient, tenant: str
) -> None:
    person = gql.create(tenant, "Person", {"givenName": "Ann"})
    deleted = gql.delete(tenant, "Person", person["id"], person["changeToken"])
    assert deleted["__typename"] == "DeletedItem"
    assert deleted["type"] == "PERSON" and deleted["id"] == person["id"]
    assert deleted["changeToken"] > person["changeToken"]
    assert deleted["createdAt"] == deleted["updatedAt"]
    assert gql.get(tenant, "Person", person["id"]) is None

    for call, args in (
        (gql.update, (tenant, "Person", person["id"], deleted["changeToken"], {"givenName": "x"})),
        (gql.delete, (tenant, "Person", person["id"], deleted["changeToken"])),
        (gql.update, (tenant, "Person", person["id"], person["changeToken"], {"givenName": "x"})),
    ):
        error = _expect_error("CONFLICT", call, *args)
        assert error.extensions["current"] == {**deleted, "type": "PERSON", "writtenBy": "tester"}
        assert error.extensions["currentChangeToken"] == deleted["changeToken"]


def test_the_second_type_has_the_same_rules(gql: GraphQLClient, tenant: str) -> None:
    person = gql.create(tenant, "Person", {"givenName": "Ann"})
    reminder = gql.create(
        tenant,
        "Reminder",
        {
            "title": "Dentist",
            "dueAt": "2026-12-01T09:30:00+01:00",
            "personID": person["id"],
            "completed": False,
        },
    )
    assert reminder["dueAt"] == "2026-12-01T08:30:00.000Z"
    done = gql.update(
        tenant, "Reminder", reminder["id"], reminder["changeToken"], {"completed": True}
    )
    assert done["completed"] is True and done["title"] == "Dentist"
    _expect_error(
        "CONFLICT",
        gql.update,
        tenant,
        "Reminder",
        reminder["id"],
        reminder["changeToken"],
        {"title": "x"},
    )
    deleted = gql.delete(tenant, "Reminder", reminder["id"], done["changeToken"])
    assert deleted["type"] == "REMINDER"


def test_tokens_strictly_increase_in_commit_order(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    tokens = []
    person = gql.create(tenant, "Person", {"givenName": "a"})
    tokens.append(person["changeToken"])
    for i in range(20):
        person = gql.update(
            tenant, "Person", person["id"], person["changeToken"], {"givenName": str(i)}
        )
        tokens.append(person["changeToken"])
        tokens.append(gql.create(tenant, "Reminder", {"title": str(i)})["changeToken"])
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    state = tenant_state(ddb, settings.table_name, tenant)
    assert_consistent(state)
    assert state.head == tokens[-1]


BAD_INPUTS = [
    ("bad color", "Person", {"profileColor": "blue"}),
    ("short color", "Person", {"profileColor": "#FFF"}),
    ("oversized name", "Person", {"givenName": "x" * 201}),
    ("oversized notes", "Reminder", {"notes": "x" * 8001}),
    ("oversized item", "Reminder", {"notes": "\u20ac" * 8000}),
]


@pytest.mark.parametrize(
    ("case", "type_name", "fields"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS]
)
def test_bad_input_is_rejected_with_nothing_written(
    gql: GraphQLClient,
    tenant: str,
    ddb: Any,
    settings: Settings,
    case: str,
    type_name: str,
    fields: dict[str, Any],
) -> None:
    seed = gql.create(tenant, type_name, {})
    before = tenant_state(ddb, settings.table_name, tenant)
    _expect_error("BAD_USER_INPUT", gql.create, tenant, type_name, fields)
    _expect_error(
        "BAD_USER_INPUT", gql.update, tenant, type_name, seed["id"], seed["changeToken"], fields
    )
    assert tenant_state(ddb, settings.table_name, tenant) == before


@pytest.mark.parametrize(
    ("variables", "why"),
    [
        ({"tenantID": "bad tenant", "id": "p1"}, "tenant id with a space"),
        ({"tenantID": "a#LOG", "id": "p1"}, "tenant id that would forge a key"),
        ({"tenantID": "t", "id": "x" * 65}, "id too long"),
        ({"tenantID": "t", "id": "I#p1"}, "id that would forge a key"),
    ],
)
def test_hostile_ids_are_rejected(gql: GraphQLClient, variables: dict[str, str], why: str) -> None:
    _expect_error(
        "BAD_USER_INPUT", gql.create, variables["tenantID"], "Person", {}, variables["id"]
    )


def test_malformed_scalars_are_rejected_by_graphql_validation(
    gql: GraphQLClient, tenant: str
) -> None:
    unknown = "NOT_A_RELATIONSHIP"  # no release's value: COUSIN is evolution.md's example
    assert unknown not in family.RelationshipType.__members__
    for fields in ({"dateOfBirth": "1990-02-30"}, {"relationship": unknown}, {"givenName": 5}):
        body = gql.execute(
            "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }",
            {"i": {"tenantID": tenant, "person": fields}},
        )
        assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", body
    assert gql.sync(tenant).items == []


def test_a_stale_token_that_is_not_a_ulid_is_bad_input(gql: GraphQLClient, tenant: str) -> None:
    person = gql.create(tenant, "Person", {})
    _expect_error("BAD_USER_INPUT", gql.update, tenant, "Person", person["id"], "not-a-token", {})
    _expect_error("BAD_USER_INPUT", gql.delete, tenant, "Person", person["id"], "")


def test_requests_without_a_bearer_token_are_unauthenticated(
    gql: GraphQLClient, tenant: str
) -> None:
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer "}):
        body = gql.execute(
            "query($t: ID!) { changes(tenantID: $t) { changeToken } }", {"t": tenant}, headers
        )
        assert body["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
        body = gql.execute(
            "mutation($t: ID!) { createPerson(input: {tenantID: $t, person: {}})"
            " { person { id } } }",
            {"t": tenant},
            headers,
        )
        assert body["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert gql.sync(tenant).items == []
