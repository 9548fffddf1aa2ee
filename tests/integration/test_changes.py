"""The read path: `changes` (contract 3.4)."""

from __future__ import annotations

from typing import Any

import pytest

from api.domain.cursor import CursorCodec, Position
from tests.support.gql import GraphQLClient, GraphQLError


def _expect_code(code: str, call: Any, *args: Any, **kwargs: Any) -> None:
    with pytest.raises(GraphQLError) as info:
        call(*args, **kwargs)
    assert info.value.code == code, info.value.errors


def _seed(gql: GraphQLClient, tenant: str, n: int) -> list[dict[str, Any]]:
    return [gql.create(tenant, "Person", {"givenName": f"p{i}"}) for i in range(n)]


def test_an_empty_tenant_has_no_changes_and_a_null_token(gql: GraphQLClient, tenant: str) -> None:
    page = gql.changes_page(tenant)
    assert page == {"items": [], "cursor": None, "changeToken": None}


def test_bulk_sync_with_small_pages_returns_each_entity_once_in_token_order(
    gql: GraphQLClient, tenant: str
) -> None:
    people = _seed(gql, tenant, 23)
    result = gql.sync(tenant, limit=5)
    assert result.pages == 5
    assert [i["id"] for i in result.items] == [p["id"] for p in people]
    tokens = [i["changeToken"] for i in result.items]
    assert tokens == sorted(tokens)
    assert result.change_token == people[-1]["changeToken"]


def test_every_page_carries_a_token_and_the_cursor_is_null_on_the_last(
    gql: GraphQLClient, tenant: str
) -> None:
    people = _seed(gql, tenant, 4)
    first = gql.changes_page(tenant, limit=3)
    assert first["cursor"] is not None
    assert first["changeToken"] == people[2]["changeToken"]
    last = gql.changes_page(tenant, cursor=first["cursor"], limit=3)
    assert [i["id"] for i in last["items"]] == [people[3]["id"]]
    assert last["cursor"] is None and last["changeToken"] == people[3]["changeToken"]


def test_an_entity_updated_many_times_appears_once_in_its_latest_version(
    gql: GraphQLClient, tenant: str
) -> None:
    other = gql.create(tenant, "Person", {"givenName": "other"})
    person = gql.create(tenant, "Person", {"givenName": "v0"})
    since = person["changeToken"]
    for i in range(1, 12):
        person = gql.update(
            tenant, "Person", person["id"], person["changeToken"], {"givenName": f"v{i}"}
        )
    result = gql.sync(tenant, since=since, limit=2)
    assert result.items == [person]
    assert other["id"] not in {i["id"] for i in result.items}


def test_deletions_come_as_deleted_items(gql: GraphQLClient, tenant: str) -> None:
    person = gql.create(tenant, "Person", {"givenName": "Ann"})
    reminder = gql.create(tenant, "Reminder", {"title": "x"})
    since = reminder["changeToken"]
    deleted = gql.delete(tenant, "Person", person["id"], person["changeToken"])
    result = gql.sync(tenant, since=since)
    assert result.items == [deleted]
    assert deleted["__typename"] == "DeletedItem" and deleted["type"] == "PERSON"
    # The bulk download of a new device sees the sentinel too, at its place in token order.
    bulk = gql.sync(tenant)
    assert [i["__typename"] for i in bulk.items] == ["Reminder", "DeletedItem"]


def test_resuming_from_each_pages_token_loses_nothing(gql: GraphQLClient, tenant: str) -> None:
    people = _seed(gql, tenant, 9)
    replica: dict[str, dict[str, Any]] = {}
    since: str | None = None
    # A client that stops after every page and resumes from the persisted token.
    for _ in range(20):
        page = gql.changes_page(tenant, since=since, limit=2)
        for item in page["items"]:
            replica[item["id"]] = item
        since = page["changeToken"]
        if page["cursor"] is None:
            break
        # Meanwhile other devices write.
        victim = people.pop(0)
        people.append(
            gql.update(tenant, "Person", victim["id"], victim["changeToken"], {"occupation": "x"})
        )
    final = gql.changes_page(tenant, since=since)
    for item in final["items"]:
        replica[item["id"]] = item
    assert final["cursor"] is None
    assert replica == {i["id"]: i for i in gql.sync(tenant).items}


def test_a_poll_with_no_changes_returns_the_same_token(gql: GraphQLClient, tenant: str) -> None:
    person = gql.create(tenant, "Person", {})
    page = gql.changes_page(tenant, since=person["changeToken"])
    assert page == {"items": [], "cursor": None, "changeToken": person["changeToken"]}


@pytest.mark.parametrize("limit", [0, -1, 1001, 10**9])
def test_limit_out_of_range_is_bad_input(gql: GraphQLClient, tenant: str, limit: int) -> None:
    _seed(gql, tenant, 1)
    _expect_code("BAD_USER_INPUT", gql.changes_page, tenant, limit=limit)


def test_limit_bounds_are_accepted(gql: GraphQLClient, tenant: str) -> None:
    people = _seed(gql, tenant, 3)
    assert len(gql.changes_page(tenant, limit=1)["items"]) == 1
    assert len(gql.changes_page(tenant, limit=1000)["items"]) == 3
    assert len(gql.changes_page(tenant)["items"]) == len(people)  # default 100


@pytest.mark.parametrize(
    "since", ["", "nope", "01M806P8YE0JNMW7TSMJ956FT", "01m806p8ye0jnmw7tsmj956fte"]
)
def test_since_that_is_not_a_ulid_is_bad_input(gql: GraphQLClient, tenant: str, since: str) -> None:
    _seed(gql, tenant, 1)
    _expect_code("BAD_USER_INPUT", gql.changes_page, tenant, since=since)


def test_since_ahead_of_every_change_is_bad_input(gql: GraphQLClient, tenant: str) -> None:
    _seed(gql, tenant, 1)
    _expect_code("BAD_USER_INPUT", gql.changes_page, tenant, since="7ZZZZZZZZZZZZZZZZZZZZZZZZZ")


def test_tampered_malformed_and_foreign_cursors_are_invalid(
    gql: GraphQLClient, tenant: str
) -> None:
    _seed(gql, tenant, 3)
    other_tenant = tenant + "-other"
    _seed(gql, other_tenant, 3)
    cursor = gql.changes_page(tenant, limit=1)["cursor"]
    foreign = gql.changes_page(other_tenant, limit=1)["cursor"]
    tampered = cursor[:-3] + ("AAA" if not cursor.endswith("AAA") else "BBB")
    forged = CursorCodec("guessed-secret").encode(
        tenant, Position(after="00000000000000000000000000", upper="7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
    )
    for bad in (tampered, foreign, forged, "garbage", "", "=" * 8):
        _expect_code("INVALID_CURSOR", gql.changes_page, tenant, cursor=bad)
    # A cursor replayed on another tenant is refused there too.
    _expect_code("INVALID_CURSOR", gql.changes_page, other_tenant, cursor=cursor)


def test_changes_never_show_another_tenants_items(gql: GraphQLClient, tenant: str) -> None:
    _seed(gql, tenant, 2)
    mine = gql.sync(tenant).items
    _seed(gql, tenant + "x", 2)
    assert {i["tenantID"] for i in gql.sync(tenant).items} == {tenant}
    assert gql.sync(tenant).items == mine


TYPED = (
    "query($t: ID!, $since: ID, $cursor: String, $limit: Int, $types: [DeletedItemType!]) {"
    " changes(tenantID: $t, since: $since, cursor: $cursor, limit: $limit, types: $types) {"
    " items { __typename id changeToken ... on DeletedItem { type } } cursor changeToken } }"
)


def test_changes_of_chosen_types_keep_pages_full_and_include_their_deletions(
    gql: GraphQLClient, tenant: str
) -> None:
    people = []
    for i in range(12):
        gql.create(tenant, "Reminder", {"title": str(i)})
        if i % 3 == 0:
            people.append(gql.create(tenant, "Person", {"givenName": str(i)}))
    gone = people.pop(0)
    deleted = gql.delete(tenant, "Person", gone["id"], gone["changeToken"])
    variables: dict[str, Any] = {"t": tenant, "limit": 2, "types": ["PERSON"]}
    pages = []
    while True:
        page = gql.data(TYPED, variables)["changes"]
        pages.append(page)
        if page["cursor"] is None:
            break
        variables = {**variables, "cursor": page["cursor"]}
    assert [len(p["items"]) for p in pages] == [2, 2]  # full until drained
    items = [i for p in pages for i in p["items"]]
    assert [i["id"] for i in items] == [p["id"] for p in people] + [deleted["id"]]
    assert items[-1] == {**items[-1], "__typename": "DeletedItem", "type": "PERSON"}
    everything = gql.changes_page(tenant, limit=1000)
    assert pages[-1]["changeToken"] == everything["changeToken"]
    with pytest.raises(GraphQLError, match="at least one type"):
        gql.data(TYPED, {"t": tenant, "types": []})
