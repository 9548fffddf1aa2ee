"""Composition root: settings, store, service, auth, GraphQL route, health check."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cross_web import HTTPException  # what Strawberry 0.341 raises for HTTP errors
from graphql import GraphQLError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette_compress import CompressMiddleware
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http import GraphQLHTTPResponse
from strawberry.schema.exceptions import InvalidOperationTypeError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import SubscribeMessage
from strawberry.types import ExecutionResult
from strawberry.types.graphql import OperationType
from strawberry.types.unset import UNSET, UnsetType

from api import request_log
from api.auth import Authenticator, Principal, connection_authorization
from api.domain.cursor import CursorCodec
from api.domain.errors import BadUserInput, SyncError, Unauthenticated, Unavailable
from api.domain.retention import Retention
from api.graphql.documents import too_long
from api.graphql.errors import with_codes
from api.graphql.schema import Context, RequestBudget, make_schema, operation_budget
from api.http import (
    RequestMiddleware,
    as_graphql_response,
    bad_request_body,
    wants_graphql_response,
    was_not_executed,
)
from api.ordering import wall_clock_ms
from api.service import SyncService
from api.settings import Settings
from api.storage import models
from api.storage.blob_usage import BlobUsageTable
from api.storage.blobs import S3Blobs
from api.storage.export_files import S3ExportFiles
from api.storage.exports import ExportTable
from api.storage.store import DynamoStore
from api.tenant_gate import READERS_PER_TENANT, TenantGate
from api.ws_messages import malformed

if TYPE_CHECKING:  # imported only where sockets are served (not on the HTTP Lambda)
    from api.realtime.local import LocalRealtime

logger = logging.getLogger("api")


class _TransportWSHandler(BaseGraphQLTransportWSHandler[Context, None]):
    """graphql-transport-ws with the HTTP path's bound on document size, messages
    checked for their shape, and coded errors."""

    async def handle_message(self, message: Any) -> None:
        problem = malformed(message)
        if problem is not None:
            await self.handle_invalid_message(problem)  # close 4400
            return
        await super().handle_message(message)

    async def handle_subscribe(self, message: SubscribeMessage) -> None:
        payload = message.get("payload")
        query = payload.get("query") if isinstance(payload, dict) else None
        refused = too_long(query if isinstance(query, str) else "", authenticated=True)
        limit = self.max_subscriptions_per_connection
        if refused is None and limit is not None and len(self.operations) >= limit:
            # Strawberry's own refusal carries no code.
            why = f"at most {limit} operations at once on one socket"
            refused = GraphQLError(why, original_error=BadUserInput(why))
        if refused is not None and self.connection_acknowledged:
            error = with_codes([refused])[0]
            await self.send_message(
                {"id": message["id"], "type": "error", "payload": [error.formatted]}
            )
            return
        await super().handle_subscribe(message)

    async def run_operation(self, operation: Any) -> None:
        """Each operation over the socket is a request of its own: its own budget
        (one push of 100, one page of 1,000 items), and its own log line, written
        when it ends (a subscription's, when it is completed or the socket closes).
        The operation runs in a task of its own, so these do not leak to others."""
        operation_budget.set(RequestBudget())
        log, _ = request_log.start(f"ws-{uuid.uuid4().hex[:12]}-{operation.id}"[:64])
        principal = self.context.principal
        log.sub = None if principal is None else principal.sub
        log.operation = operation.operation_name or "(websocket operation)"
        started = time.perf_counter()
        try:
            await super().run_operation(operation)
        finally:
            duration_ms = (time.perf_counter() - started) * 1000
            request_log.logger.info(log.line(200, duration_ms))

    async def shutdown(self) -> None:
        for task in self.context.tasks:  # the token's expiry, among others
            task.cancel()
        for release in self.context.on_close:  # the user's share of sockets
            release()
        await super().shutdown()


class _GraphQL(GraphQL[Context, None]):
    graphql_transport_ws_handler_class = _TransportWSHandler

    def __init__(
        self, settings: Settings, service: SyncService, realtime: LocalRealtime | None
    ) -> None:
        super().__init__(
            make_schema(settings),
            graphql_ide="graphiql" if settings.graphiql else None,
            allow_queries_via_get=True,
            # graphql-ws's protocol (Apollo Client, urql, RxDB), on /graphql.
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
            connection_init_wait_timeout=timedelta(seconds=WS_INIT_TIMEOUT_S),
            max_subscriptions_per_connection=settings.ws_max_subscriptions_per_connection,
        )
        self._service = service
        self._authenticator = Authenticator(settings)
        self._writes = TenantGate()
        self._reads = TenantGate(READERS_PER_TENANT, what="reads")
        self._realtime = realtime

    async def process_result(self, request: Any, result: ExecutionResult) -> GraphQLHTTPResponse:
        if result.errors:
            result.errors = with_codes(result.errors)
        processed = await super().process_result(request, result)
        if wants_graphql_response(request) and was_not_executed(result):
            # GraphQL over HTTP: a document that was never executed has no `data`,
            # and its response is a 400 (`__call__`).
            request.state.not_executed = True
            processed.pop("data", None)
        return processed

    async def render_graphql_ide(self, request: Request) -> Response:
        from api import graphiql  # only where GraphiQL is served (GRAPHIQL=true)

        return HTMLResponse(graphiql.page_html(), headers=graphiql.SECURITY_HEADERS)

    async def get_context(self, request: Any, response: Any) -> Context:
        # Strawberry asks for the context before it parses the document: who is
        # calling is known before any work is spent on what they sent.
        principal, error = await self._authenticate(request.headers.get("authorization"))
        log = request_log.current()
        if log is not None and principal is not None:
            log.sub = principal.sub
        return Context(
            request=request,
            service=self._service,
            principal=principal,
            auth_error=error,
            writes=self._writes,
            reads=self._reads,
            feed=None if self._realtime is None else self._realtime.feed,
        )

    async def on_ws_connect(self, context: Context) -> UnsetType | dict[str, object] | None:
        """graphql-transport-ws `connection_init`: browsers cannot set headers on a
        WebSocket, so the bearer token comes in its payload. A missing, bad or
        expired token refuses the connection (close 4403); the socket is closed
        (4403 `token expired`) when HTTP would stop accepting the token: at its exp
        plus JWT_LEEWAY_SECONDS."""
        header = connection_authorization(context.connection_params)
        principal, error = await self._authenticate(header)
        if principal is None:
            logger.info("websocket refused: %s", error)
            raise ConnectionRejectionError()
        if self._realtime is not None:
            release = self._realtime.admit_user(principal.sub)
            if release is None:
                logger.info("websocket refused: the user holds their share of sockets")
                raise ConnectionRejectionError({"reason": "too many sockets of this user"})
            context.on_close.append(release)
        context.principal, context.auth_error = principal, None
        if principal.expires_at is not None:
            socket = context.request
            context.tasks.append(
                asyncio.create_task(
                    _close_at(principal.expires_at, lambda: socket.close(4403, "token expired"))
                )
            )
        return UNSET

    async def _authenticate(self, header: str | None) -> tuple[Principal | None, SyncError | None]:
        known = self._authenticator.known(header)
        if known is not None:
            return known, None
        try:
            if self._authenticator.fetches_keys:
                # A key-set fetch may take seconds: never on the event loop.
                return await run_in_threadpool(self._authenticator.authenticate, header), None
            return self._authenticator.authenticate(header), None
        except (Unauthenticated, Unavailable) as exc:
            return None, exc

    async def execute_single(  # noqa: PLR0917 - Strawberry's signature
        self,
        request: Any,
        request_adapter: Any,
        sub_response: Any,
        context: Context,
        root_value: Any,
        request_data: Any,
    ) -> ExecutionResult:
        refused = too_long(request_data.query or "", context.principal is not None)
        if refused is not None:
            return ExecutionResult(data=None, errors=[refused])
        return await super().execute_single(
            request, request_adapter, sub_response, context, root_value, request_data
        )

    def decode_json(self, data: str | bytes) -> object:
        # Hostile bodies (nested a hundred thousand levels deep, or not UTF-8) are a
        # 400 like any other unparsable JSON, not a 500; so is JSON that is not an
        # object (a batch, a list, is refused by Strawberry itself).
        try:
            decoded = json.loads(data)
        except (RecursionError, ValueError) as exc:
            raise json.JSONDecodeError(f"invalid JSON body: {type(exc).__name__}", "", 0) from None
        if not isinstance(decoded, dict | list):
            raise json.JSONDecodeError("the body must be a JSON object", "", 0)
        return decoded

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            if self._realtime is None:  # this app serves no sockets (the HTTP Lambda)
                await send({"type": "websocket.close", "code": 1000})
                return
            async with self._realtime.connection() as admitted:
                if not admitted:
                    await _try_again_later(scope, send)
                    return
                await _held_to_account(super().__call__, scope, receive, send)
            return
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        request = Request(scope=scope, receive=receive)
        try:
            response = await self.run(request)
        except HTTPException as exc:
            # Strawberry answers these in plain text; clients read extensions.code.
            response = _coded_http_error(exc, request.method)
        if wants_graphql_response(request):
            not_executed = getattr(request.state, "not_executed", False)
            response = as_graphql_response(response, not_executed)
        await response(scope, receive, send)


async def _close_at(when: float, close: Any) -> None:
    from api.realtime.local import close_at

    await close_at(when, close)


# graphql-transport-ws: a socket must send connection_init within this long.
WS_INIT_TIMEOUT_S = 10
# A socket not acknowledged this long after it opened is dropped, whatever it sends:
# Strawberry's timeout politely sends a close frame, which waits forever on a
# client that never reads (it held its slot for the 300 s observed).
WS_ACK_DEADLINE_S = WS_INIT_TIMEOUT_S + 2
# A message that cannot be sent within this long (a client that stopped reading,
# its buffers full) drops the socket and frees its slot.
WS_SEND_TIMEOUT_S = 10


async def _held_to_account(app: Any, scope: Scope, receive: Receive, send: Send) -> None:
    """Run one WebSocket connection, dropped (its task cancelled, so its slot is
    freed) when it is not acknowledged by WS_ACK_DEADLINE_S or a send stalls."""
    acknowledged = asyncio.Event()
    dropped = asyncio.Event()
    connection: asyncio.Task[None]

    def drop(why: str) -> None:
        logger.info("websocket dropped: %s", why)
        dropped.set()
        connection.cancel()

    async def bounded_send(message: Any) -> None:
        if dropped.is_set():  # no polite close frame into a buffer nobody reads
            raise ConnectionAbortedError("this socket was dropped")
        if message.get("type") == "websocket.send" and '"connection_ack"' in (
            message.get("text") or ""
        ):
            acknowledged.set()
        try:
            await asyncio.wait_for(send(message), WS_SEND_TIMEOUT_S)
        except TimeoutError:
            drop(f"a send stalled for {WS_SEND_TIMEOUT_S} s")
            raise

    connection = asyncio.ensure_future(app(scope, receive, bounded_send))
    acked = asyncio.ensure_future(acknowledged.wait())
    try:
        await asyncio.wait(
            {connection, acked}, timeout=WS_ACK_DEADLINE_S, return_when="FIRST_COMPLETED"
        )
        if not acknowledged.is_set() and not connection.done():
            drop(f"not acknowledged within {WS_ACK_DEADLINE_S} s")
        with contextlib.suppress(asyncio.CancelledError):
            await connection
    finally:
        acked.cancel()
        connection.cancel()


async def _try_again_later(scope: Scope, send: Send) -> None:
    """Refuse a socket over the process's limit with the documented 1013 (try again
    later): a close before the handshake's accept would reach the client as HTTP 403."""
    offered = scope.get("subprotocols") or []
    protocol = GRAPHQL_TRANSPORT_WS_PROTOCOL if GRAPHQL_TRANSPORT_WS_PROTOCOL in offered else None
    await send({"type": "websocket.accept", "subprotocol": protocol})
    await send({"type": "websocket.close", "code": 1013, "reason": "server busy; retry later"})


def _coded_http_error(exc: HTTPException, method: str) -> Response:
    status, message = exc.status_code, exc.reason
    headers = {}
    cause = exc.__cause__
    if isinstance(cause, InvalidOperationTypeError):
        if cause.operation_type is OperationType.SUBSCRIPTION:
            status, message = 400, "subscriptions are served over WebSocket (graphql-transport-ws)"
        elif method == "GET":
            status, message = 405, "mutations are only allowed over POST"
            headers["Allow"] = "POST"
    log = request_log.current()
    if log is not None:
        log.codes.append("BAD_USER_INPUT")
    return JSONResponse(bad_request_body(message), status_code=status, headers=headers)


def create_app(settings: Settings | None = None, sockets: bool = True) -> Starlette:
    """The app; with `sockets` False (AWS Lambda behind an HTTP API, which carries
    no WebSocket), without the realtime hub, its stream follower and their imports."""
    settings = settings or Settings.from_env()
    for warning in settings.check():
        logger.warning(warning)
    settings.apply_local_credentials()
    models.bind(settings)
    store = DynamoStore()
    store.on_response(request_log.record_consumed_capacity)
    s3 = settings.s3_client()
    blobs = S3Blobs(s3, settings.blob_bucket, hashes_bytes=not settings.s3_verifies_checksums)
    offset = settings.clock_offset_ms
    realtime: LocalRealtime | None = None
    if sockets:
        from api.realtime.local import LocalRealtime

        # The realtime hub reads the service's latest change; the service publishes to it.
        realtime = LocalRealtime(
            settings, lambda tenant, after: service.latest_change(tenant, after)
        )
    service = SyncService(
        store,
        CursorCodec(settings.cursor_secret),
        clock_ms=(lambda: wall_clock_ms() + offset) if offset else wall_clock_ms,
        on_commit=None if realtime is None else realtime.publish,
        retention=Retention(settings.retention_seconds),
        history=settings.history,
        on_deleting=None if realtime is None else realtime.close_tenant,
        exports=ExportTable(),
        export_files=S3ExportFiles(s3, settings.blob_bucket),
        blobs=blobs,
        quota=BlobUsageTable(),
        quota_bytes=settings.blob_quota_bytes,
    )
    view = _GraphQL(settings, service, realtime)

    async def healthz(request: Request) -> Response:
        # The blob store is reported beside the table; without it only attachments
        # fail, so the server stays "ok" for sync (200) and says which part is down.
        blob_store = {
            "bucket": settings.blob_bucket,
            "reachable": await run_in_threadpool(blobs.reachable),
        }
        try:
            store.head("healthz")
        except SyncError as exc:
            return JSONResponse(
                {
                    "status": "unavailable",
                    "table": settings.table_name,
                    "error": exc.code,
                    "blobs": blob_store,
                },
                status_code=503,
            )
        except Exception:
            logger.exception("health check failed")
            return JSONResponse(
                {"status": "error", "table": settings.table_name, "blobs": blob_store},
                status_code=503,
            )
        answer: dict[str, object] = {
            "status": "ok" if blob_store["reachable"] else "degraded",
            "table": settings.table_name,
            "reachable": True,
            "blobs": blob_store,
        }
        if realtime is not None:
            answer["realtime"] = realtime.status()
        return JSONResponse(answer)

    routes: list[BaseRoute] = [
        Route("/graphql", view, methods=["GET", "POST"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    if realtime is not None:
        routes.append(WebSocketRoute("/graphql", view))
    if realtime is not None and realtime.receiver is not None:
        from api.realtime.relay import PATH

        routes.append(Route(PATH, realtime.receiver.take, methods=["POST"]))
    if settings.graphiql:
        from api import graphiql

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

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if realtime is not None:
            realtime.close()

    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
