"""A removed member (contract 6): its Member record stays with role REMOVED, giving no
access from its next request, and an owner re-adds it by writing the record again;
a client of a release before the app's `removedSince` is sent the removal as a
DeletedItem and the re-added member as a live one. Member ids are token subjects as
identity providers write them (`auth0|...`, `google-oauth2|...`, UUIDs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from sync_client import SyncClient
from sync_client.schema import ClientSchema

from api.domain import catalog
from api.graphql.context import RELEASE_HEADER
from api.settings import Settings
from tests.integration.test_members import (
    CHANGES,
    CREATE,
    CREATE_PERSON,
    HISTORY,
    PERSON,
    PUSH,
    UPDATE,
    Caller,
    _members_partition,
    _moved,
    _refusal,
)
from tests.integration.test_realtime import _connect, _init, _receive, _subscribe
from tests.support.gql import GraphQLClient, bearer
from tests.support.store_state import tenant_state

MEMBER_READ = "query($t: ID!, $id: ID!) { member(tenantID: $t, id: $id) { id role } }"
CATCH_UP_MEMBERS = (
    "query($t: ID!, $u: ID!, $c: String) { catchUp(tenantID: $t, upTo: $u, types: [MEMBER], "
    "cursor: $c, limit: 1) { items { id } cursor } }"
)
AUTH0 = "auth0|5f7c8ec7c33c6c004bbafe82"
GOOGLE = "google-oauth2|109876543210987654321"
COGNITO = "8f1c6a2e-3b7d-4e0a-9c55-2d4e6f708192"
SAML = "samlp|acme-corp|ann.lee+work@example.com"


def _as(caller: Caller, release: int | None) -> Caller:
    """The same caller declaring `release` (None: none)."""
    if release is not None:
        caller.headers = {**caller.headers, RELEASE_HEADER: str(release)}
    return caller


def _update(owner: Caller, tenant: str, member: dict[str, Any], role: str) -> dict[str, Any]:
    body = owner.data(
        UPDATE,
        {
            "i": {
                "tenantID": tenant,
                "id": member["id"],
                "changeToken": member["changeToken"],
                "changes": {"role": role},
            }
        },
    )
    updated: dict[str, Any] = body["updateMember"]["member"]
    return updated


def test_a_removed_member_keeps_its_record_loses_access_and_is_re_added(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    olga, _ = _moved(gql, tenant)
    bob_record = olga.data(
        CREATE, {"i": {"tenantID": tenant, "id": "bob", "member": {"role": "WRITER"}}}
    )["createMember"]["member"]
    bob = Caller(gql, "bob", [tenant])
    person = bob.data(CREATE_PERSON, {"i": {"tenantID": tenant, "person": {"givenName": "A"}}})
    person_id = person["createPerson"]["person"]["id"]

    removed = _update(olga, tenant, bob_record, "REMOVED")
    assert removed["role"] == "REMOVED"
    # Its access item is gone with the role: Bob's next request of every kind is refused.
    assert _members_partition(ddb, settings, tenant) == {"U#olga": "owner", "V": None}
    for query, variables in (
        (CHANGES, {"t": tenant}),
        (PERSON, {"t": tenant, "id": person_id}),
        (HISTORY, {"t": tenant, "id": person_id}),
        (CREATE_PERSON, {"i": {"tenantID": tenant, "person": {}}}),
    ):
        assert _refusal(bob.run(query, variables)) == ("FORBIDDEN", "NOT_A_MEMBER"), query
    # The record stays, live, for the owner (and its clients of the release that knows it).
    assert olga.data(MEMBER_READ, {"t": tenant, "id": "bob"})["member"] == {
        "id": "bob",
        "role": "REMOVED",
    }
    # Re-added under the same id by writing the record again.
    again = _update(olga, tenant, removed, "READER")
    assert again["role"] == "READER"
    assert _members_partition(ddb, settings, tenant) == {
        "U#olga": "owner",
        "U#bob": "reader",
        "V": None,
    }
    assert bob.data(PERSON, {"t": tenant, "id": person_id})["person"] == {"id": person_id}
    assert _refusal(bob.run(CREATE_PERSON, {"i": {"tenantID": tenant, "person": {}}})) == (
        "FORBIDDEN",
        "ROLE",
    )
    versions = olga.data(HISTORY, {"t": tenant, "id": "bob"})["history"]["items"]
    assert [v["changeToken"] for v in versions] == [
        removed["changeToken"],
        bob_record["changeToken"],
    ]


def test_an_owner_cannot_remove_itself_nor_move_a_tenant_with_a_removed_record(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    claim = Caller(gql, "olga", [tenant])
    claim.person(tenant)
    before = tenant_state(ddb, settings.table_name, tenant)
    assert _refusal(claim.member(tenant, "olga", "REMOVED")) == ("FORBIDDEN", "ROLE")
    assert tenant_state(ddb, settings.table_name, tenant) == before
    olga, own = _moved(gql, tenant)
    body = olga.run(
        UPDATE,
        {
            "i": {
                "tenantID": tenant,
                "id": "olga",
                "changeToken": own["changeToken"],
                "changes": {"role": "REMOVED"},
            }
        },
    )
    assert _refusal(body) == ("FORBIDDEN", "ROLE")


@pytest.mark.parametrize("release", [None, 2])
def test_a_client_of_a_release_before_removed_is_sent_a_deleted_item_then_the_member(
    gql: GraphQLClient, tenant: str, release: int | None
) -> None:
    """Release 2's clients have no REMOVED: a removed member's record is a DeletedItem
    in their syncs and absent from their catch-ups; re-added, it is a live Member."""
    assert catalog.REMOVED_RELEASE == 3
    olga, _ = _moved(gql, tenant)
    bob = olga.data(CREATE, {"i": {"tenantID": tenant, "id": "bob", "member": {"role": "READER"}}})
    old = _as(Caller(gql, "olga", [tenant]), release)
    new = _as(Caller(gql, "olga", [tenant]), 3)
    removed = _update(olga, tenant, bob["createMember"]["member"], "REMOVED")

    def seen(caller: Caller) -> Any:
        items = caller.data(CHANGES, {"t": tenant})["changes"]["items"]
        return next(i for i in items if i["id"] == "bob")

    assert seen(old) == {"__typename": "DeletedItem", "id": "bob"}
    assert seen(new) == {"__typename": "Member", "id": "bob", "role": "REMOVED"}
    assert _caught_up(old, tenant, removed["changeToken"]) == ["olga"]
    assert sorted(_caught_up(new, tenant, removed["changeToken"])) == ["bob", "olga"]
    _update(olga, tenant, removed, "WRITER")
    assert seen(old) == {"__typename": "Member", "id": "bob", "role": "WRITER"}


def _caught_up(caller: Caller, tenant: str, up_to: str) -> list[str]:
    """The ids a catch-up of the Member type returns, page by page."""
    ids: list[str] = []
    cursor = None
    while True:
        page = caller.data(CATCH_UP_MEMBERS, {"t": tenant, "u": up_to, "c": cursor})["catchUp"]
        ids += [i["id"] for i in page["items"]]
        cursor = page["cursor"]
        if cursor is None:
            return ids


class _Device:
    """The reference client's transport over the in-process app."""

    def __init__(self, client: TestClient, tenant: str) -> None:
        self._client = client
        self.headers = bearer([tenant], sub="olga")

    def execute(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        response = self._client.post(
            "/graphql", json={"query": query, "variables": variables}, headers=self.headers
        )
        body: dict[str, Any] = response.json()
        return body


def test_the_reference_client_of_release_2_forgets_a_removed_member_and_takes_it_back(
    app_client: TestClient, gql: GraphQLClient, tenant: str, tmp_path: Path
) -> None:
    olga, _ = _moved(gql, tenant)
    bob = olga.data(CREATE, {"i": {"tenantID": tenant, "id": "bob", "member": {"role": "READER"}}})
    schema = ClientSchema.of(catalog.DECLARED, 2)
    device = SyncClient(
        tmp_path / "old.sqlite3", tenant, _Device(app_client, tenant), schema=schema
    )
    device.sync()
    assert device.items()["bob"]["role"] == "READER"
    removed = _update(olga, tenant, bob["createMember"]["member"], "REMOVED")
    device.sync()
    assert "bob" not in device.items()
    _update(olga, tenant, removed, "WRITER")
    device.sync()
    assert device.items()["bob"]["role"] == "WRITER"
    device.close()


@pytest.mark.parametrize("sub", [AUTH0, GOOGLE, COGNITO, SAML, "x" * 256])
def test_a_member_id_is_a_token_subject_and_that_member_gets_in(
    gql: GraphQLClient, tenant: str, sub: str
) -> None:
    olga, _ = _moved(gql, tenant)
    created = olga.data(
        CREATE, {"i": {"tenantID": tenant, "id": sub, "member": {"role": "WRITER"}}}
    )
    assert created["createMember"]["member"]["id"] == sub
    member = Caller(gql, sub, [])  # its token lists no tenant: its record lets it in
    made = member.data(CREATE_PERSON, {"i": {"tenantID": tenant, "person": {"givenName": "A"}}})
    assert made["createPerson"]["person"]["id"]
    assert olga.data(MEMBER_READ, {"t": tenant, "id": sub})["member"]["role"] == "WRITER"
    versions = olga.data(HISTORY, {"t": tenant, "id": sub})["history"]["items"]
    assert versions == []  # no earlier version yet; the id is read, not refused


@pytest.mark.parametrize(
    "bad",
    ["", "auth0|a#b", "auth0 |x", "|auth0", "x" * 257, "ann\n", "auth0|é", "a\tb"],
)
def test_a_member_id_that_is_no_subject_is_bad_user_input_and_nothing_is_written(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings, bad: str
) -> None:
    olga, _ = _moved(gql, tenant)
    before = tenant_state(ddb, settings.table_name, tenant)
    body = olga.run(CREATE, {"i": {"tenantID": tenant, "id": bad, "member": {"role": "READER"}}})
    assert _refusal(body) == ("BAD_USER_INPUT", None), body
    push = olga.data(
        PUSH,
        {
            "i": {
                "tenantID": tenant,
                "mutations": [
                    {"createMember": {"tenantID": tenant, "id": bad, "member": {"role": "READER"}}}
                ],
            }
        },
    )
    (result,) = push["pushChanges"]["results"]
    assert result["status"] == "REJECTED" and result["error"]["code"] == "BAD_USER_INPUT"
    assert tenant_state(ddb, settings.table_name, tenant) == before


def test_other_types_ids_stay_identifiers(gql: GraphQLClient, tenant: str) -> None:
    olga, _ = _moved(gql, tenant)
    body = olga.run(CREATE_PERSON, {"i": {"tenantID": tenant, "id": AUTH0, "person": {}}})
    assert _refusal(body) == ("BAD_USER_INPUT", None)


def test_a_catch_up_pages_through_members_whose_ids_hold_the_cursors_separator(
    gql: GraphQLClient, tenant: str
) -> None:
    """A catch-up cursor names the copy it reached, a Member's id with '|' included."""
    olga, _ = _moved(gql, tenant)
    last = None
    for sub in (AUTH0, GOOGLE, SAML):
        made = olga.data(
            CREATE, {"i": {"tenantID": tenant, "id": sub, "member": {"role": "READER"}}}
        )
        last = made["createMember"]["member"]["changeToken"]
    assert last is not None
    ids = _caught_up(olga, tenant, last)
    assert sorted(ids) == sorted(["olga", AUTH0, GOOGLE, SAML])


def test_an_open_subscription_of_a_member_set_to_removed_ends_with_not_a_member(
    app_client: TestClient, gql: GraphQLClient, tenant: str
) -> None:
    """As for a deleted Member record (realtime.md): the removal is its last event."""
    olga, _ = _moved(gql, tenant)
    bob = olga.data(CREATE, {"i": {"tenantID": tenant, "id": "bob", "member": {"role": "READER"}}})
    record = bob["createMember"]["member"]
    with _connect(app_client) as ws:
        _init(ws, bearer([tenant], sub="bob")["Authorization"])
        assert _receive(ws) == {"type": "connection_ack"}
        _subscribe(ws, "s", tenant, since=record["changeToken"])
        _update(olga, tenant, record, "REMOVED")
        refused = _receive(ws)
        assert refused["id"] == "s" and refused["type"] == "next"
        extensions = refused["payload"]["errors"][0]["extensions"]
        assert (extensions["code"], extensions["reason"]) == ("FORBIDDEN", "NOT_A_MEMBER")
        assert _receive(ws) == {"id": "s", "type": "complete"}
