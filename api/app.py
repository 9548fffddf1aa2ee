"""Composition root: settings, store, service, auth, GraphQL route, health check."""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from strawberry.asgi import GraphQL

from api import request_log
from api.auth import Authenticator
from api.domain.cursor import CursorCodec
from api.domain.errors import SyncError
from api.graphql.schema import Context, make_schema
from api.http import RequestMiddleware
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

    return Starlette(
        routes=[
            Route("/graphql", _GraphQL(settings, service), methods=["GET", "POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        middleware=[Middleware(RequestMiddleware, max_body_bytes=settings.max_body_bytes)],
    )
