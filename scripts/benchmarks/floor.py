"""The floor: the raw DynamoDB call of each row behind a bare Starlette route on the
product's server stack (uvicorn, the same process settings), returning the items
as JSON. What no GraphQL API on this stack can undercut; each row shows the product
against it. Bench-only code: run by `api_server(..., app=FLOOR_APP)`.

Beside it, at `/floor/graphql`, the library's floor for the reads: the same Query
answered through a bare Strawberry schema of `changes`' shape (Strawberry's own
ASGI view, its parser and validation caches, the items decoded; no authentication,
limits, extensions or middleware). The product cannot undercut it either while it
executes GraphQL with Strawberry: the read rows show it, so that what the library
costs and what the product adds to it can be told apart."""

from __future__ import annotations

from typing import Any

import strawberry
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from strawberry.asgi import GraphQL
from strawberry.extensions import ParserCache, ValidationCache
from strawberry.schema.config import StrawberryConfig

from api.domain.records import Record
from api.settings import Settings
from api.storage import codecs, keys
from scripts.benchmarks import raw

FLOOR_APP = "scripts.benchmarks.floor:create_floor_app"


def create_floor_app() -> Starlette:
    settings = Settings.from_env()
    settings.apply_local_credentials()
    ddb = settings.dynamodb_client()
    table = settings.table_name
    writes = raw.RawWrites(ddb, table, {"givenName": "floor", "occupation": "floor"})

    async def page(request: Request) -> Response:
        body = await request.json()
        answer = await run_in_threadpool(raw.query_page, ddb, table, body["tenant"], body["limit"])
        return JSONResponse({"items": answer["Items"]})

    async def tail(request: Request) -> Response:
        body = await request.json()
        answer = await run_in_threadpool(raw.query_tail, ddb, table, body["tenant"], body["after"])
        return JSONResponse({"items": answer["Items"]})

    async def write(request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        do = writes.create if request.path_params["verb"] == "create" else writes.update
        units = await run_in_threadpool(do, body["tenant"], body["id"])
        return JSONResponse({"units": units})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/floor/page", page, methods=["POST"]),
            Route("/floor/tail", tail, methods=["POST"]),
            # Before {verb}, which would take "graphql" for a verb.
            Route("/floor/graphql", GraphQL(_changes_schema(ddb, table), graphql_ide=None)),
            Route("/floor/{verb:str}", write, methods=["POST"]),
            Route("/healthz", healthz),
        ]
    )


@strawberry.interface(name="Item")
class _Item:
    id: strawberry.ID
    changeToken: strawberry.ID
    createdAt: str
    updatedAt: str


@strawberry.type(name="Person")
class _Person(_Item):
    givenName: str | None = None
    familyName: str | None = None
    dateOfBirth: str | None = None
    relationship: str | None = None
    phoneNumber: str | None = None
    emailAddress: str | None = None
    profileColor: str | None = None
    occupation: str | None = None


_PERSON_FIELDS = frozenset(_Person.__annotations__)


@strawberry.type(name="DeletedItem")
class _DeletedItem(_Item):
    type: str


@strawberry.type(name="Page")
class _Page:
    items: list[_Item]
    cursor: str | None
    changeToken: strawberry.ID | None


def _item(record: Record) -> _Item:
    id_, token = strawberry.ID(record.id), strawberry.ID(record.change_token)
    created, updated = record.created_at.isoformat(), record.updated_at.isoformat()
    if record.deleted:
        return _DeletedItem(
            id=id_,
            changeToken=token,
            createdAt=created,
            updatedAt=updated,
            type=record.item_type.code,
        )
    fields = {k: v for k, v in record.fields.items() if k in _PERSON_FIELDS}
    return _Person(id=id_, changeToken=token, createdAt=created, updatedAt=updated, **fields)


def _changes_schema(ddb: Any, table: str) -> strawberry.Schema:
    """`changes` on bare Strawberry: one Query (a page from the start, or the tail
    after `since`, as the floor's routes make), its items decoded and returned."""

    @strawberry.type
    class Query:
        @strawberry.field
        async def changes(
            self,
            tenantID: strawberry.ID,
            since: strawberry.ID | None = None,
            cursor: str | None = None,
            limit: int | None = None,
        ) -> _Page:
            if since is None:
                answer = await run_in_threadpool(raw.query_page, ddb, table, tenantID, limit or 100)
            else:
                answer = await run_in_threadpool(raw.query_tail, ddb, table, tenantID, since)
            found = answer["Items"]
            head = next((i for i in found if codecs.sort_key(i) == keys.HEAD_SK), None)
            records = sorted(
                (codecs.record_from_raw(tenantID, i) for i in found if i is not head),
                key=lambda r: r.change_token,
            )
            token = strawberry.ID(records[-1].change_token) if records else since
            return _Page(
                items=[_item(r) for r in records],
                cursor=None,
                changeToken=None if head is None else token,
            )

    return strawberry.Schema(
        Query,
        types=[_Person, _DeletedItem],
        extensions=[ParserCache, ValidationCache],
        config=StrawberryConfig(auto_camel_case=False),
    )
