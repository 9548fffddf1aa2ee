"""Composition root: settings, store, service, the GraphQL route
(`api.graphql.view`), the health check, the middleware."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette_compress import CompressMiddleware

from api import metric_sinks, metrics, request_log
from api.domain import catalog
from api.domain.audiences import Audience
from api.domain.cursor import CursorCodec
from api.domain.devices import WRITER_DEVICE
from api.domain.retention import Retention
from api.graphql.view import GraphQLView
from api.health import health_check, metrics_endpoint
from api.http import InFlight, RequestMiddleware
from api.ordering import wall_clock_ms
from api.prometheus_metrics import Prometheus
from api.push_setup import make_pushes
from api.service import SyncService
from api.settings import Settings
from api.storage import models
from api.storage.blob_usage import BlobUsageTable
from api.storage.blobs import S3Blobs
from api.storage.export_files import S3ExportFiles
from api.storage.exports import ExportTable
from api.storage.lazy_client import LazyClient
from api.storage.store import DynamoStore
from api.worker_threads import RunBlocking, anyio_pool, persistent_pool

if TYPE_CHECKING:  # imported only where sockets are served (not on the HTTP Lambda)
    from api.realtime.local import LocalRealtime
    from api.realtime.push_local import LocalPushes

logger = logging.getLogger("api")


def create_app(
    settings: Settings | None = None,
    sockets: bool = True,
    run_blocking: RunBlocking | None = None,
    sink: metrics.Metrics | None = None,
) -> Starlette:
    """The app; with `sockets` False (AWS Lambda behind an HTTP API, which carries
    no WebSocket), without the realtime hub, its stream follower and their imports.
    `run_blocking`: where requests' blocking calls run (default: anyio's pool, a
    server's; `api.worker_threads`). `sink`: where metrics go (default: METRICS, or
    Prometheus's at /metrics; `api.metrics`)."""
    settings = settings or Settings.from_env()
    run_blocking = run_blocking or anyio_pool()
    for warning in (*settings.check(catalog.RELEASE), *catalog.APP.warnings):
        logger.warning(warning)
    sink = sink or metric_sinks.for_server(settings.metrics)
    settings.apply_local_credentials()
    models.bind(settings)
    store = DynamoStore()
    store.on_response(request_log.record_consumed_capacity)
    # Made on the first attachment or export (api.storage.lazy_client): a sync never needs it.
    s3 = LazyClient(settings.s3_client)
    blobs = S3Blobs(s3, settings.blob_bucket, hashes_bytes=not settings.s3_verifies_checksums)
    offset = settings.clock_offset_ms
    realtime: LocalRealtime | None = None
    if sockets:
        from api.realtime.local import LocalRealtime

        # The realtime hub reads the service's latest change (a subscription's first
        # event: one Query), in the app's runner but not through the tenant's read
        # gate: a tenant's devices reconnecting at once (a server restarted, 1,000
        # sockets) found its 4 slots and 64 places taken and were refused for good
        # (tests/integration/test_realtime_load.py). The service publishes to it.
        realtime = LocalRealtime(
            settings,
            lambda tenant, after, sub: run_blocking(service.latest_seen, tenant, after, sub),
            run_blocking,
            sink,
            # Who is in a group a change names: the roster each event's check reads.
            lambda tenant, token: run_blocking(service.roster_at, tenant, token),
        )
    pushes = make_pushes(
        settings,
        (lambda: wall_clock_ms() + offset) if offset else wall_clock_ms,
        # Who is still a member, as the pokes read it (the service is made below).
        members=lambda tenant, token: service.roster_at(tenant, token),
        seen=lambda tenant, after, sub: service.latest_seen(tenant, after, sub),
    )
    # A server pushes its own commits (the Lambda HTTP function's go from the stream).
    local_pushes = None
    if pushes is not None and sockets:
        from api.realtime.push_local import LocalPushes

        local_pushes = LocalPushes(pushes, sink)
    service = SyncService(
        store,
        CursorCodec(settings.cursor_secret),
        clock_ms=(lambda: wall_clock_ms() + offset) if offset else wall_clock_ms,
        on_commit=_on_commit(realtime, local_pushes),
        retention=Retention(settings.retention_seconds),
        history=settings.history,
        on_deleting=None if realtime is None else realtime.close_tenant,
        exports=ExportTable(),
        export_files=S3ExportFiles(s3, settings.blob_bucket),
        blobs=blobs,
        quota=BlobUsageTable(),
        quota_bytes=settings.blob_quota_bytes,
        pushes=pushes,
    )
    view = GraphQLView(settings, service, realtime, run_blocking, sink)

    routes: list[BaseRoute] = [
        Route("/graphql", view, methods=["GET", "POST"]),
        Route(
            "/healthz",
            health_check(
                settings,
                store,
                blobs,
                None if realtime is None else realtime.status,
                run_blocking,
            ),
            methods=["GET"],
        ),
    ]
    if isinstance(sink, Prometheus):
        routes.append(
            Route("/metrics", metrics_endpoint(settings, sink.exposition), methods=["GET"])
        )
    if realtime is not None:
        routes.append(WebSocketRoute("/graphql", view))
    if realtime is not None and realtime.receiver is not None:
        from api.realtime.relay import PATH

        routes.append(Route(PATH, realtime.receiver.take, methods=["POST"]))
    if settings.graphiql:
        from api import graphiql

        routes.append(Route("/graphiql/assets/{name}", graphiql.asset, methods=["GET"]))
    in_flight = InFlight()  # a stopping server answers its unanswered requests (scripts/serve)
    middleware = [
        Middleware(
            RequestMiddleware,
            max_body_bytes=settings.max_body_bytes,
            metrics=sink,
            in_flight=in_flight,
        ),
        Middleware(CompressMiddleware, minimum_size=settings.compress_min_bytes),
    ]
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type", "x-request-id", "x-device-id"],
                expose_headers=["x-request-id"],
                max_age=600,
            )
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if local_pushes is not None:
            local_pushes.close()
        if realtime is not None:
            # Off the event loop and waited for a moment only: its threads' calls to
            # an engine that does not answer would hold a stopping server (they are
            # daemon threads: the process ends without them).
            closing = threading.Thread(target=realtime.close, name="realtime-close", daemon=True)
            closing.start()
            for _ in range(40):
                if not closing.is_alive():
                    break
                await asyncio.sleep(0.05)

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.in_flight = in_flight
    app.state.s3 = s3  # made on first use; api.lambda_handler makes it before a snapshot
    return app


def _on_commit(
    realtime: LocalRealtime | None, pushes: LocalPushes | None
) -> Callable[[str, str, Audience], None] | None:
    """What a commit calls, with its audience (whose view it changed): the realtime
    hub's poke, the push round, both or none; each for that audience only."""
    if realtime is None and pushes is None:
        return None

    def committed(tenant_id: str, token: str, audience: Audience) -> None:
        if realtime is not None:
            realtime.publish(tenant_id, token, audience)
        if pushes is not None:  # called where the write ran: its request's device
            pushes.publish(tenant_id, token, WRITER_DEVICE.get(), audience)

    return committed


def create_lambda_app(
    settings: Settings | None = None, sink: metrics.Metrics | None = None
) -> Starlette:
    """The app as AWS Lambda's HTTP function serves it (`api.lambda_handler`): no
    sockets, and blocking calls in threads that outlive each request, which Mangum
    runs in a `run_until_complete` of its own (`api.worker_threads`)."""
    settings = settings or Settings.from_env()
    return create_app(
        settings,
        sockets=False,
        run_blocking=persistent_pool(),
        sink=sink or metric_sinks.for_lambda(settings.metrics),
    )


def freeze_startup_heap() -> None:
    """Leave what startup made (modules, the schema, the clients: some 150,000
    objects) out of every later garbage collection; a process that serves requests
    calls it once, after building its app. Each full collection walked them all: a
    poll in 4,000 through the Lambda handler took 124-135 ms instead of 8, the
    collection 115-122 ms of it; frozen, full collections took 0.9-2 ms
    (measured: commit 274c7c3). Not in `create_app`: a process that builds
    many apps (the tests) would keep every one of them. Startup's garbage (import
    machinery's cycles) is collected first, so that it is not frozen for good."""
    gc.collect()
    gc.freeze()
