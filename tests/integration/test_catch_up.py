"""`catchUp` (docs/evolution.md, "Upgrading an app") against real servers of release 1
and release 2 on one table (tests/apps/release2/catalog.yaml): content of the first release
an app left out, a rollback's edits and deletions, its pages and its errors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from api.domain.mutations import Write
from api.domain.records import Record
from api.domain.tokens import next_token, token_time
from api.settings import Settings
from api.storage import keys
from api.storage.store import DynamoStore
from tests.support import release2
from tests.support.gql import bearer
from tests.support.servers import api_server

pytestmark = pytest.mark.slow

_PERSON = "... on Person { givenName occupation nickname }"
_CATCH_UP = (
    "query($t: ID!, $u: ID!, $ty: [DeletedItemType!], $f: [String!], $c: String, $l: Int) "
    "{ catchUp(tenantID: $t, upTo: $u, types: $ty, fields: $f, cursor: $c, limit: $l) "
    f"{{ items {{ __typename id changeToken {_PERSON} }} cursor changeToken }} }}"
)


@pytest.fixture(scope="module")
def servers(settings: Settings) -> Iterator[tuple[str, str]]:
    """(a server of release 1, a server of release 2) on one table."""
    with (
        api_server(settings, extra_env={**release2.SERVER_ENV, "SYNC_RELEASE": "1"}) as old,
        api_server(settings, extra_env=release2.SERVER_ENV) as new,
    ):
        yield old, new


def _post(base: str, tenant: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = httpx2.post(
        f"{base}/graphql",
        json={"query": query, "variables": variables},
        headers=bearer([tenant]),
        timeout=60,
    ).json()
    return body


def _data(base: str, tenant: str, query: str, variables: dict[str, Any]) -> Any:
    body = _post(base, tenant, query, variables)
    assert "errors" not in body, body
    return body["data"]


Entries = list[tuple[str, dict[str, Any]]]


def _push(base: str, tenant: str, mutations: Entries) -> list[dict[str, Any]]:
    query = (
        "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status "
        "error { code } item { __typename id changeToken } } } }"
    )
    entries = [{kind: {"tenantID": tenant, **body}} for kind, body in mutations]
    results = _data(base, tenant, query, {"i": {"tenantID": tenant, "mutations": entries}})
    got: list[dict[str, Any]] = results["pushChanges"]["results"]
    assert [r["status"] for r in got] == ["APPLIED"] * len(got), got
    return [r["item"] for r in got]


def _head(base: str, tenant: str) -> str:
    query = "query($t: ID!) { changes(tenantID: $t, since: null, limit: 1000) { changeToken } }"
    token: str = _data(base, tenant, query, {"t": tenant})["changes"]["changeToken"]
    return token


def _catch_up(
    base: str, tenant: str, up_to: str, limit: int | None = None, **asked: list[str]
) -> tuple[list[dict[str, Any]], int]:
    """Every item of the catch-up, following its cursor; and how many pages it took."""
    items: list[dict[str, Any]] = []
    cursor, pages = None, 0
    while True:
        variables: dict[str, Any] = {"t": tenant, "u": up_to, "c": cursor, "l": limit}
        variables.update(ty=asked.get("types"), f=asked.get("fields"))
        page = _data(base, tenant, _CATCH_UP, variables)["catchUp"]
        assert limit is None or len(page["items"]) <= limit, page
        items += page["items"]
        pages += 1
        cursor = page["cursor"]
        if cursor is None:
            return items, pages


def test_a_catch_up_of_first_release_content_returns_it(
    servers: tuple[str, str], tenant: str
) -> None:
    # An app whose release 1 declared only the people table, without `occupation`,
    # upgrades and declares reminders and Person.occupation: both are release 1's.
    _, new = servers
    people: Entries = [
        ("createPerson", {"id": f"p{n}", "person": {"givenName": f"P{n}", "occupation": "pilot"}})
        for n in range(6)
    ] + [("createPerson", {"id": f"q{n}", "person": {"givenName": f"Q{n}"}}) for n in range(3)]
    reminders: Entries = [
        ("createReminder", {"id": f"r{n}", "reminder": {"title": f"R{n}"}}) for n in range(9)
    ]
    _push(new, tenant, people)
    _push(new, tenant, reminders)
    _push(new, tenant, [("createNote", {"id": "n1", "note": {"text": "bins on Tuesday"}})])
    up_to = _head(new, tenant)

    caught, _ = _catch_up(new, tenant, up_to, types=["REMINDER"])
    assert sorted(i["id"] for i in caught) == [f"r{n}" for n in range(9)], caught

    caught, _ = _catch_up(new, tenant, up_to, fields=["Person.occupation"])
    occupations = {i["id"]: i.get("occupation") for i in caught}
    assert {k: v for k, v in occupations.items() if v} == {f"p{n}": "pilot" for n in range(6)}
    assert {i["__typename"] for i in caught} == {"Person"}, caught


def test_a_rollback_s_deletions_stay_deleted_at_the_upgrade(
    servers: tuple[str, str], tenant: str, settings: Settings, ddb: Any
) -> None:
    old, new = servers
    made = _push(
        new,
        tenant,
        [
            ("createPerson", {"id": f"p{n}", "person": {"givenName": f"P{n}", "nickname": "N"}})
            for n in (1, 2, 3)
        ],
    )
    tokens = {i["id"]: i["changeToken"] for i in made}
    # Through the release 1 server: P1 deleted; P2 edited, then deleted; P3 edited.
    p2 = _push(
        old,
        tenant,
        [
            ("deletePerson", {"id": "p1", "changeToken": tokens["p1"]}),
            (
                "updatePerson",
                {"id": "p2", "changeToken": tokens["p2"], "changes": {"familyName": "L"}},
            ),
            (
                "updatePerson",
                {"id": "p3", "changeToken": tokens["p3"], "changes": {"familyName": "L"}},
            ),
        ],
    )[1]
    _push(old, tenant, [("deletePerson", {"id": "p2", "changeToken": p2["changeToken"]})])
    _push(old, tenant, [("createPerson", {"id": "p4", "person": {"givenName": "P4"}})])
    up_to = _head(new, tenant)

    caught, _ = _catch_up(new, tenant, up_to, fields=["Person.nickname"])
    assert [(i["id"], i["nickname"]) for i in caught] == [("p3", "N")], caught

    # One copy per live entity, none for a deleted one.
    copies = ddb.query(
        TableName=settings.table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.later_pk(tenant)}},
        ConsistentRead=True,
    )["Items"]
    assert sorted(c["id"]["S"] for c in copies) == ["p3", "p4"], copies


def test_a_catch_up_s_pages_hold_at_most_its_limit(servers: tuple[str, str], tenant: str) -> None:
    _, new = servers
    notes: Entries = [
        ("createNote", {"id": f"n{n:02d}", "note": {"text": f"N{n}"}}) for n in range(33)
    ]
    _push(new, tenant, notes)
    up_to = _head(new, tenant)
    caught, pages = _catch_up(new, tenant, up_to, limit=1, types=["NOTE"])
    assert sorted(i["id"] for i in caught) == [f"n{n:02d}" for n in range(33)]
    assert pages >= 33

    # Thirty aliases of limit 1: thirty items, as the request's budget counts them.
    aliases = " ".join(
        f"a{n}: catchUp(tenantID: $t, upTo: $u, types: [NOTE], limit: 1) {{ items {{ id }} }}"
        for n in range(30)
    )
    data = _data(new, tenant, f"query($t: ID!, $u: ID!) {{ {aliases} }}", {"t": tenant, "u": up_to})
    assert sum(len(page["items"]) for page in data.values()) == 30


def test_a_page_never_ends_below_the_floor_of_what_it_reads(
    servers: tuple[str, str], tenant: str
) -> None:
    # The head's transaction wrote a person without the field asked for: its entry
    # sorts below every copy asked and must not end a page (the next page's Query
    # could not start from it).
    _, new = servers
    _push(
        new, tenant, [("createPerson", {"id": "p1", "person": {"givenName": "A", "nickname": "N"}})]
    )
    _push(new, tenant, [("createPerson", {"id": "p2", "person": {"givenName": "B"}})])
    caught, _ = _catch_up(new, tenant, _head(new, tenant), limit=1, fields=["Person.nickname"])
    assert [(i["id"], i["nickname"]) for i in caught] == [("p1", "N")], caught


def test_a_field_name_is_not_echoed_whole(servers: tuple[str, str], tenant: str) -> None:
    _, new = servers
    _push(new, tenant, [("createPerson", {"id": "p1", "person": {"givenName": "Ann"}})])
    name = "Person." + "x" * 100_000
    variables = {"t": tenant, "u": _head(new, tenant), "f": [name]}
    response = httpx2.post(
        f"{new}/graphql",
        json={"query": _CATCH_UP, "variables": variables},
        headers=bearer([tenant]),
        timeout=60,
    )
    body = response.json()
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", body
    assert len(response.content) < 2_000, len(response.content)


def test_a_tenant_written_before_copies_were_kept_is_caught_up_from_its_log(
    servers: tuple[str, str], tenant: str, settings: Settings, ddb: Any
) -> None:
    # As a table written before every entity had its copy: a head without the
    # mark, later copies under release-first keys only, none of release 1's content.
    _, new = servers
    _push(
        new,
        tenant,
        [("createPerson", {"id": f"p{n}", "person": {"givenName": "P"}}) for n in range(3)],
    )
    _push(
        new,
        tenant,
        [("createReminder", {"id": f"r{n}", "reminder": {"title": "R"}}) for n in range(5)],
    )
    made = _push(new, tenant, [("createNote", {"id": "n1", "note": {"text": "bins"}})])
    pk = keys.later_pk(tenant)
    copies = ddb.query(
        TableName=settings.table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": pk}},
        ConsistentRead=True,
    )["Items"]
    for copy in copies:
        ddb.delete_item(TableName=settings.table_name, Key={"pk": copy["pk"], "sk": copy["sk"]})
    # The Note's copy as the earlier key design filed it: no range of a catch-up reads it.
    (note,) = [c for c in copies if c["id"]["S"] == "n1"]
    ddb.put_item(TableName=settings.table_name, Item={**note, "sk": {"S": "0002#n1"}})
    ddb.update_item(
        TableName=settings.table_name,
        Key={"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": keys.HEAD_SK}},
        UpdateExpression="REMOVE cp",
    )
    up_to = made[0]["changeToken"]

    caught, pages = _catch_up(new, tenant, up_to, limit=2, types=["REMINDER"])
    assert sorted(i["id"] for i in caught) == [f"r{n}" for n in range(5)], caught
    # 9 log entries, 2 a page; the first (p0, p1: no reminder) reads on to p2, r0.
    assert pages == 4
    caught, _ = _catch_up(new, tenant, up_to, types=["NOTE"])
    assert [i["id"] for i in caught] == ["n1"]


def test_a_tenant_written_meanwhile_by_a_server_of_an_earlier_build_is_caught_up_from_its_log(
    servers: tuple[str, str], tenant: str
) -> None:
    # A deployment rolled back to a build from before copies were kept, then forward
    # again: the earlier build writes the entity, its log entry and the head, with no
    # copy, no `lr`, and the head's copies mark untouched (it does not know it).
    _, new = servers
    _push(new, tenant, [("createReminder", {"id": "r0", "reminder": {"title": "R"}})])
    store = DynamoStore()
    head = store.head(tenant)
    assert head is not None and head.copies
    at = next_token(int(time.time() * 1000), head.token)
    when = token_time(at)
    earlier = Record(release2.REMINDER, tenant, "r1", at, when, when, fields={"title": "old"})
    store.commit(tenant, [Write(earlier, None)], head.token, head.entry_tokens())
    assert store.head(tenant).copies is False  # type: ignore[union-attr]
    # The build of today writes again: the mark does not come back.
    made = _push(new, tenant, [("createReminder", {"id": "r2", "reminder": {"title": "R"}})])
    assert store.head(tenant).copies is False  # type: ignore[union-attr]

    caught, _ = _catch_up(new, tenant, made[0]["changeToken"], types=["REMINDER"])
    assert sorted(i["id"] for i in caught) == ["r0", "r1", "r2"], caught


def test_a_catch_up_whose_tenant_loses_its_copies_between_pages_goes_on_from_its_log(
    servers: tuple[str, str], tenant: str
) -> None:
    _, new = servers
    reminders: Entries = [
        ("createReminder", {"id": f"r{n}", "reminder": {"title": "R"}}) for n in range(3)
    ]
    _push(new, tenant, reminders)
    up_to = _head(new, tenant)
    first = _data(new, tenant, _CATCH_UP, {"t": tenant, "u": up_to, "l": 1, "ty": ["REMINDER"]})[
        "catchUp"
    ]
    assert first["cursor"] is not None
    # A server of a build without copies writes: the copies' mark is behind for good.
    store = DynamoStore()
    head = store.head(tenant)
    assert head is not None
    at = next_token(int(time.time() * 1000), head.token)
    when = token_time(at)
    late = Record(release2.REMINDER, tenant, "r9", at, when, when, fields={"title": "late"})
    store.commit(tenant, [Write(late, None)], head.token, head.entry_tokens())

    items, cursor = list(first["items"]), first["cursor"]
    while cursor is not None:
        variables = {"t": tenant, "u": up_to, "l": 1, "ty": ["REMINDER"], "c": cursor}
        page = _data(new, tenant, _CATCH_UP, variables)["catchUp"]
        items += page["items"]
        cursor = page["cursor"]
    assert sorted({i["id"] for i in items}) == ["r0", "r1", "r2"], items
