"""Composition root: settings, store, service, auth, GraphQL route, health check."""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette_compress import CompressMiddleware
from strawberry.asgi import GraphQL
from strawberry.http import GraphQLHTTPResponse
from strawberry.types import ExecutionResult

from api import graphiql, request_log
from api.auth import Authenticator
from api.domain.cursor import CursorCodec
from api.domain.errors import SyncError
from api.graphql.errors import with_codes
from api.graphql.schema import Context, make_schema
from api.http import GraphQLResponseMediaType, RequestMiddleware
from api.ordering import wall_clock_ms
from api.settings import Settings
from api.storage import models
from api.storage.store import DynamoStore
from api.sync import SyncService

logger = logging.getLogger("api")


class _GraphQL(GraphQL[Context, None]):
    def __init__(self, settings: Settings, service: SyncService) -> None:
        super().__init__(
            make_schema(settings),
            graphql_ide="graphiql" if settings.graphiql else None,
            allow_queries_via_get=True,
        )
        self._service = service
        self._authenticator = Authenticator(settings)

    async def process_result(self, request: Any, result: ExecutionResult) -> GraphQLHTTPResponse:
        if result.errors:
            result.errors = with_codes(result.errors)
        return await super().process_result(request, result)

    async def render_graphql_ide(self, request: Request) -> Response:
        return HTMLResponse(graphiql.page_html())

    async def get_context(self, request: Any, response: Any) -> Context:
        return Context(request=request, service=self._service, authenticator=self._authenticator)

    def decode_json(self, data: str | bytes) -> object:
        # Hostile bodies (nested a hundred thousand levels deep, or not UTF-8) are a
        # 400 like any other unparsable JSON, not a 500.
        try:
            return json.loads(data)
        except (RecursionError, ValueError) as exc:
            raise json.JSONDecodeError(f"invalid JSON body: {type(exc).__name__}", "", 0) from None


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings or Settings.from_env()
    for warning in settings.check():
        logger.warning(warning)
    settings.apply_local_credentials()
    models.bind(settings)
    store = DynamoStore()
    store.on_response(request_log.record_consumed_capacity)
    offset = settings.clock_offset_ms
    service = SyncService(
        store,
        CursorCodec(settings.cursor_secret),
        clock_ms=(lambda: wall_clock_ms() + offset) if offset else wall_clock_ms,
    )

    async def healthz(request: Request) -> Response:
        try:
            store.head("healthz")
        except SyncError as exc:
            return JSONResponse(
                {"status": "unavailable", "table": settings.table_name, "error": exc.code},
                status_code=503,
            )
        except Exception:
            logger.exception("health check failed")
            return JSONResponse({"status": "error", "table": settings.table_name}, status_code=503)
        return JSONResponse({"status": "ok", "table": settings.table_name, "reachable": True})

    routes = [
        Route(
            "/graphql",
            GraphQLResponseMediaType(_GraphQL(settings, service)),
            methods=["GET", "POST"],
        ),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    if settings.graphiql:
        routes.append(Route("/graphiql/assets/{name}", graphiql.asset, methods=["GET"]))
    middleware = [
        Middleware(RequestMiddleware, max_body_bytes=settings.max_body_bytes),
        Middleware(CompressMiddleware, minimum_size=settings.compress_min_bytes),
    ]
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type", "x-request-id"],
                expose_headers=["x-request-id"],
                max_age=600,
            )
        )
    return Starlette(routes=routes, middleware=middleware)
