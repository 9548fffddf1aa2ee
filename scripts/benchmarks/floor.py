"""The floor: the raw DynamoDB call of each row behind a bare Starlette route on the
product's server stack (uvicorn, the same process settings), returning the items
as JSON. What no GraphQL API on this stack can undercut; each row shows the product
against it. Bench-only code: run by `api_server(..., app=FLOOR_APP)`."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.settings import Settings
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
            Route("/floor/{verb:str}", write, methods=["POST"]),
            Route("/healthz", healthz),
        ]
    )
