"""WebSockets (graphql-transport-ws) held to the same bounds as HTTP: each
operation a request of its own with its own budget and log line, messages
checked for their shape, and a socket dropped when it is not acknowledged in
time or stops reading (its slot freed)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from graphql import GraphQLError
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import SubscribeMessage

from api import request_log
from api.domain.errors import BadUserInput
from api.graphql.context import Context, RequestBudget, operation_budget
from api.graphql.documents import too_long
from api.graphql.errors import with_codes
from api.metrics import Metrics
from api.worker_threads import settle
from api.ws_messages import malformed

logger = logging.getLogger("api")


class TransportWSHandler(BaseGraphQLTransportWSHandler[Context, None]):
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
        when it ends (a subscription's, when it is completed or the socket closes)
        and its calls have returned: a `complete` cancels the operation's task, not
        the calls in its threads, which hold its tenant's gate until they return.
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
            await settle(log)
            duration_ms = (time.perf_counter() - started) * 1000
            # The view's (`api.graphql.view`), and the log line with them.
            sink: Metrics = getattr(self.view, "metrics", None) or Metrics()
            sink.request(log, 200, duration_ms)

    def forget_id(self, id: str) -> None:
        # An operation that ends as its socket closes finds itself forgotten already
        # (the close cleans up every operation): Strawberry's `del` raised KeyError.
        self.operations.pop(id, None)

    async def handle_task_exception(self, error: Exception) -> None:
        """A client that closes its socket before an operation's last message (its
        result, its `complete`) is no fault of the server: an info line, not
        Strawberry's traceback."""
        if isinstance(error.__context__, ConnectionAbortedError):  # `held_to_account` dropped it
            return
        if isinstance(error, WebSocketDisconnected | WebSocketDisconnect):
            logger.info("websocket closed by the client before an operation's answer was sent")
            return
        await super().handle_task_exception(error)

    async def shutdown(self) -> None:
        for task in self.context.tasks:  # the token's expiry, among others
            task.cancel()
        for release in self.context.on_close:  # the user's share of sockets
            release()
        await super().shutdown()


async def close_at(when: float, close: Any) -> None:
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
# Strawberry's close when connection_init did not come in time.
_INIT_TIMED_OUT = 4408


async def held_to_account(app: Any, scope: Scope, receive: Receive, send: Send) -> None:
    """Run one WebSocket connection, dropped (its task cancelled, so its slot is
    freed) when it is not acknowledged by WS_ACK_DEADLINE_S or a send stalls.

    A dropped socket gets no close frame: the app returns without one and uvicorn
    closes the transport, which stops reading it at once. After a close frame
    uvicorn instead reads on, discarding, until the client answers or 10 s pass:
    a socket that floods pings without connection_init kept the event loop busy
    with its flood and its slot taken some 20 s (issue 37). So the init timeout's
    polite close (4408) goes only to a socket that sent nothing; one that sent
    messages without ever initialising is dropped then instead."""
    acknowledged = asyncio.Event()
    dropped = asyncio.Event()
    refused = False  # the init timeout's close sent: the connection ends with it
    received = 0
    connection: asyncio.Task[None]

    def drop(why: str) -> None:
        logger.info("websocket dropped: %s", why)
        dropped.set()
        connection.cancel()

    async def counted_receive() -> Any:
        nonlocal received
        message = await receive()
        received += message.get("type") == "websocket.receive"
        return message

    async def bounded_send(message: Any) -> None:
        nonlocal refused
        if dropped.is_set():  # no polite close frame into a buffer nobody reads
            raise ConnectionAbortedError("this socket was dropped")
        kind = message.get("type")
        if kind == "websocket.send" and '"connection_ack"' in (message.get("text") or ""):
            acknowledged.set()
        if kind == "websocket.close" and message.get("code") == _INIT_TIMED_OUT:
            if received:
                drop(f"{received} messages but no connection_init within {WS_INIT_TIMEOUT_S} s")
                raise ConnectionAbortedError("this socket was dropped")
            refused = True
        try:
            await asyncio.wait_for(send(message), WS_SEND_TIMEOUT_S)
        except TimeoutError:
            drop(f"a send stalled for {WS_SEND_TIMEOUT_S} s")
            raise

    connection = asyncio.ensure_future(app(scope, counted_receive, bounded_send))
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
        if dropped.is_set() or refused:
            _abort(receive)


def _abort(receive: Receive) -> None:
    """Close a socket's connection now, discarding what it has still to send: one
    dropped, or refused by the init timeout's close (its frame sent).

    A client that floods WebSocket ping frames and never reads fills the server's
    buffers with pongs (uvicorn answers them itself, with no flow control), and sends
    no message, so the init timeout closes it politely. uvicorn then waits 10 s for
    the client's close reply and closes its transport with `close()`, which waits for
    the write buffer to drain first, and so forever: the connection stayed
    ESTABLISHED 30 s and more after the init timeout (issue 48, finding 9: 200,000
    ping frames, a 2 KB receive buffer; here 20 s while the kernel's buffer held the
    pongs). `abort()` closes it at once (the kernel still sends what it holds, the
    close frame among it, unless the client's unread bytes make it a reset). The
    transport is reached through the server's `receive`, a method of its protocol
    object in uvicorn (each of its WebSocket protocols keeps its `transport`); under
    another server (Starlette's test client) there is none, and nothing is done."""
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    # (uvloop's transports, which uvicorn[standard] uses, are no asyncio.BaseTransport.)
    abort = getattr(transport, "abort", None)
    if callable(abort):
        abort()


async def try_again_later(scope: Scope, send: Send) -> None:
    """Refuse a socket over the process's limit with the documented 1013 (try again
    later): a close before the handshake's accept would reach the client as HTTP 403."""
    offered = scope.get("subprotocols") or []
    protocol = GRAPHQL_TRANSPORT_WS_PROTOCOL if GRAPHQL_TRANSPORT_WS_PROTOCOL in offered else None
    await send({"type": "websocket.accept", "subprotocol": protocol})
    await send({"type": "websocket.close", "code": 1013, "reason": "server busy; retry later"})
