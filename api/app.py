"""Composition root: settings, store, service, GraphQL route and health check."""

from __future__ import annotations

import logging
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from strawberry.asgi import GraphQL

from api.domain.cursor import CursorCodec
from api.domain.errors import SyncError
from api.graphql.schema import Context, schema
from api.settings import Settings
from api.storage import models
from api.storage.store import DynamoStore
from api.sync import SyncService, wall_clock_ms

logger = logging.getLogger("api")


class _GraphQL(GraphQL[Context, None]):
    def __init__(self, service: SyncService, graphiql: bool) -> None:
        super().__init__(schema, graphql_ide="graphiql" if graphiql else None)
        self._service = service

    async def get_context(self, request: Any, response: Any) -> Context:
        return Context(request=request, service=self._service)


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings or Settings.from_env()
    settings.apply_local_credentials()
    models.bind(settings)
    store = DynamoStore()
    offset = settings.clock_offset_ms
    service = SyncService(
        store,
        CursorCodec(settings.cursor_secret),
        clock_ms=(lambda: wall_clock_ms() + offset) if offset else wall_clock_ms,
    )
    graphql = _GraphQL(service, graphiql=settings.graphiql)

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
            Route("/graphql", graphql, methods=["GET", "POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )
