"""The plain-record fast path answers exactly what graphql-core's own execution does."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from api.auth import Authenticator
from api.domain.cursor import CursorCodec
from api.graphql import schema as schema_module
from api.graphql.context import Context
from api.graphql.execution import PlainRecordExecutionContext
from api.graphql.schema import make_schema
from api.service import SyncService
from api.settings import Settings
from api.storage.blobs import S3Blobs
from api.storage.store import DynamoStore
from tests.support.blobs import upload
from tests.support.gql import GraphQLClient, bearer

QUERY = """
query($t: ID!, $limit: Int) {
  changes(tenantID: $t, limit: $limit) {
    items {
      __typename
      kind: __typename
      id
      ... on SynchronizedItem { changeToken createdAt }
      ... on Person { givenName name: givenName dateOfBirth relationship profileColor
                      updatedAt occupation photo { sha256 size contentType } }
      ... on Reminder { title dueAt completed personID notes @include(if: false) }
      ... on DeletedItem { type tenantID }
    }
    cursor
    changeToken
  }
}
"""


def _execute(schema: Any, settings: Settings, tenant: str, query: str = QUERY) -> dict[str, Any]:
    headers = {k.lower(): v for k, v in bearer([tenant]).items()}
    request = type("Request", (), {"headers": headers})()
    blobs = S3Blobs(settings.s3_client(), settings.blob_bucket)
    service = SyncService(DynamoStore(), CursorCodec(settings.cursor_secret), blobs=blobs)
    authenticator = Authenticator(settings)
    context = Context(
        request=request,
        service=service,
        principal=authenticator.authenticate(headers["authorization"]),
    )
    result = asyncio.run(
        schema.execute(query, variable_values={"t": tenant, "limit": 50}, context_value=context)
    )
    return {"data": result.data, "errors": [e.formatted for e in result.errors or []]}


def test_fast_path_and_graphql_core_agree(
    gql: GraphQLClient, tenant: str, settings: Settings, monkeypatch: Any
) -> None:
    ann = gql.create(
        tenant,
        "Person",
        {
            "givenName": "Ann",
            "dateOfBirth": "1990-04-01",
            "relationship": "CHILD",
            "profileColor": "#A0B1C2",
        },
    )
    gql.create(tenant, "Person", {})  # every optional field null
    gql.create(
        tenant,
        "Reminder",
        {
            "title": "Dentist",
            "dueAt": "2026-12-01T09:30:00+01:00",
            "completed": False,
            "personID": ann["id"],
        },
    )
    gone = gql.create(tenant, "Reminder", {"title": "x"})
    gql.delete(tenant, "Reminder", gone["id"], gone["changeToken"])

    fast, slow, lists_taken = _fast_and_slow(settings, tenant, monkeypatch)
    assert lists_taken == [True]  # the page's items went the list path
    assert fast["errors"] == [] and slow["errors"] == []
    assert json.dumps(fast, sort_keys=True) == json.dumps(slow, sort_keys=True)
    items = fast["data"]["changes"]["items"]
    assert [i["kind"] for i in items] == ["Person", "Person", "Reminder", "DeletedItem"]
    assert items[0]["name"] == "Ann" and items[0]["relationship"] == "CHILD"
    assert items[2]["dueAt"] == "2026-12-01T08:30:00.000Z" and "notes" not in items[2]


def test_attachments_go_the_fast_path_unless_a_link_is_selected_and_agree(
    gql: GraphQLClient, tenant: str, settings: Settings, monkeypatch: Any
) -> None:
    photo = upload(gql, tenant, b"\xff\xd8 a tiny jpeg")
    gql.create(tenant, "Person", {"givenName": "Ann", "photo": photo})
    gql.create(tenant, "Person", {"givenName": "Bo"})

    fast, slow, lists_taken = _fast_and_slow(settings, tenant, monkeypatch)
    assert lists_taken == [True]  # the reference's leaves: the fast path
    assert fast["errors"] == [] and slow["errors"] == []
    assert json.dumps(fast, sort_keys=True) == json.dumps(slow, sort_keys=True)
    assert [i["photo"] for i in fast["data"]["changes"]["items"]] == [photo, None]

    # `url` has a resolver (it signs): the normal way, with the same answer.
    with_url = QUERY.replace("photo { sha256 size contentType }", "photo { sha256 url }")
    fast, slow, lists_taken = _fast_and_slow(settings, tenant, monkeypatch, with_url)
    assert lists_taken == [False]
    assert fast["errors"] == [] and slow["errors"] == []
    links = [i["photo"].pop("url") for i in fast["data"]["changes"]["items"][:1]]
    del slow["data"]["changes"]["items"][0]["photo"]["url"]  # signed at another second
    assert json.dumps(fast, sort_keys=True) == json.dumps(slow, sort_keys=True)
    assert f"/tenants/{tenant}/blobs/{photo['sha256']}?" in links[0]


def _fast_and_slow(
    settings: Settings, tenant: str, monkeypatch: Any, query: str = QUERY
) -> tuple[dict[str, Any], dict[str, Any], list[bool]]:
    """The page executed with the fast path and without it, and whether the fast
    path completed each list itself."""
    fast_schema = make_schema(settings)
    context_class: Any = fast_schema.execution_context_class
    assert issubclass(context_class, PlainRecordExecutionContext)
    assert context_class.plain_fields  # the fast path is on
    lists_taken: list[bool] = []
    complete_list = PlainRecordExecutionContext._complete_plain_list

    def spy(self: Any, *args: Any) -> Any:
        completed = complete_list(self, *args)
        lists_taken.append(completed is not None)
        return completed

    monkeypatch.setattr(PlainRecordExecutionContext, "_complete_plain_list", spy)
    fast = _execute(fast_schema, settings, tenant, query)
    monkeypatch.undo()

    monkeypatch.setattr(
        schema_module, "PlainRecordExecutionContext", StrawberryGraphQLCoreExecutionContext
    )
    monkeypatch.setattr(schema_module, "plain_record_fields", lambda *a: {})
    slow = _execute(make_schema(settings), settings, tenant, query)
    monkeypatch.undo()
    return fast, slow, lists_taken
