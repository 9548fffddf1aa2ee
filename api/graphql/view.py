"""The GraphQL route over HTTP and WebSocket: the caller known before the
document is parsed, coded errors (GraphQL over HTTP's status codes included),
hostile bodies refused as 400s, sockets admitted and held to account
(`api.graphql.sockets`)."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from cross_web import HTTPException  # what Strawberry 0.341 raises for HTTP errors
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import Receive, Scope, Send
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http import GraphQLHTTPResponse
from strawberry.schema.exceptions import InvalidOperationTypeError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types import ExecutionResult
from strawberry.types.graphql import OperationType
from strawberry.types.unset import UNSET, UnsetType

from api import request_log
from api.auth import Authenticator, Principal, connection_authorization
from api.domain.catalog import RELEASE
from api.domain.devices import DEVICE_HEADER, WRITER_DEVICE
from api.domain.errors import SyncError, Unauthenticated, Unavailable
from api.domain.identifiers import IDENTIFIER
from api.graphql.context import Context
from api.graphql.documents import too_long
from api.graphql.errors import with_codes
from api.graphql.schema import make_schema
from api.graphql.sockets import (
    WS_INIT_TIMEOUT_S,
    TransportWSHandler,
    close_at,
    held_to_account,
    try_again_later,
)
from api.http import (
    as_graphql_response,
    bad_request_body,
    wants_graphql_response,
    was_not_executed,
)
from api.metrics import Metrics
from api.service import SyncService
from api.settings import Settings
from api.tenant_gate import READERS_PER_TENANT, TenantGate, caller_gate
from api.worker_threads import RunBlocking, anyio_pool

if TYPE_CHECKING:  # imported only where sockets are served (not on the HTTP Lambda)
    from api.realtime.local import LocalRealtime

logger = logging.getLogger("api")
_T = TypeVar("_T")


class GraphQLView(GraphQL[Context, None]):
    graphql_transport_ws_handler_class = TransportWSHandler

    def __init__(
        self,
        settings: Settings,
        service: SyncService,
        realtime: LocalRealtime | None,
        run_blocking: RunBlocking | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(
            make_schema(settings),
            graphql_ide="graphiql" if settings.graphiql else None,
            allow_queries_via_get=True,
            # graphql-ws's protocol (Apollo Client, urql, RxDB), on /graphql.
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
            connection_init_wait_timeout=timedelta(seconds=WS_INIT_TIMEOUT_S),
            max_subscriptions_per_connection=settings.ws_max_subscriptions_per_connection,
            # A browser page's socket from another origin is let in from the origins
            # its HTTP requests are (CORS_ORIGINS): a socket authenticates with the
            # token in connection_init, never with cookies the page did not send.
            allowed_origins=settings.cors_origins,
        )
        self._service = service
        self._authenticator = Authenticator(settings)
        self._writes = TenantGate()
        self._reads = TenantGate(READERS_PER_TENANT, what="reads")
        self._callers = caller_gate()
        self._realtime = realtime
        self._run_blocking = run_blocking or anyio_pool()
        self._min_release = settings.min_client_release
        self.metrics = metrics or Metrics()  # each socket operation's (`api.graphql.sockets`)

    async def process_result(self, request: Any, result: ExecutionResult) -> GraphQLHTTPResponse:
        if result.errors:
            result.errors = with_codes(result.errors)
        processed = await super().process_result(request, result)
        # Every answer says the release this server serves (docs/evolution.md): a
        # document it cannot validate may be an app of a later release's (a
        # rollback), told what to ask instead; and an app asking with an earlier
        # release's documents learns when a server of a later one answered them
        # (a rolling deploy), whose versions may hold fields they did not select.
        processed["extensions"] = {**(processed.get("extensions") or {}), "release": RELEASE}
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
        # The device it writes from: its writes push it nothing (docs/realtime.md).
        device = request.headers.get(DEVICE_HEADER)
        WRITER_DEVICE.set(device if device and IDENTIFIER.fullmatch(device) else None)
        return Context(
            request=request,
            service=self._service,
            principal=principal,
            auth_error=error,
            writes=self._writes,
            reads=self._reads,
            callers=self._callers,
            feed=None if self._realtime is None else self._realtime.feed,
            run_blocking=self._run_blocking,
            min_release=self._min_release,
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
                    close_at(principal.expires_at, lambda: socket.close(4403, "token expired"))
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
                return await self._run_blocking(self._authenticator.authenticate, header), None
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
                    await try_again_later(scope, send)
                    return
                await held_to_account(super().__call__, scope, receive, send)
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
