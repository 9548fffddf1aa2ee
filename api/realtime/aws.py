"""AWS Lambda: API Gateway WebSocket routes speaking graphql-transport-ws, and the
DynamoDB stream handler that fans head changes out to the subscribers.

Lambda holds no socket, so each graphql-transport-ws message is one invocation
of `websocket_handler` and the connection's state lives in the table
(`api.realtime.connections`). A subscription runs through the same schema and
resolver as on a long-running server: at `subscribe` its feed registers it in
the table and yields the tenant's newest change if it is newer than `since`; at
fan-out its feed yields the one new token. So the payload is whatever the
client's selection asks for, and every check (token, tenant, arguments) is the
schema's.

API Gateway cannot close a socket with a chosen code: where graphql-ws closes
with 4400/4401/4403/4409/4429, this closes the connection (DeleteConnection)
without one, and clients see an ordinary close.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from graphql import GraphQLError, OperationDefinitionNode, parse
from strawberry.types.execution import PreExecutionError
from strawberry.utils.aio import aclosing

from api import metrics
from api.auth import Principal, connection_authorization
from api.domain.errors import SyncError
from api.graphql.documents import too_long
from api.graphql.errors import with_codes
from api.realtime.aws_runtime import Runtime, execute, next_message
from api.realtime.aws_runtime import runtime as _runtime
from api.realtime.connections import (
    MAX_STORED_DOCUMENT,
    MAX_STORED_VARIABLES,
    Connection,
    Operation,
    Subscription,
    SubscriptionRefused,
)
from api.realtime.fanout import FanOutIncomplete, drain, fan_out
from api.realtime.streams import head_changes
from api.settings import Settings

logger = logging.getLogger("api.realtime")

__all__ = ["FanOutIncomplete", "Runtime", "drain_handler", "stream_handler", "websocket_handler"]

PROTOCOL = "graphql-transport-ws"
_MAX_ID_LENGTH = 128
# API Gateway's WebSocket message quota is 128 KB; a graphql-transport-ws message
# nests 3 levels (message, payload, variables) above the variables' own values,
# and changesAvailable's variables are scalars.
MAX_MESSAGE = 128 * 1024
MAX_MESSAGE_DEPTH = 16

# One event loop per Lambda instance, kept from one invocation to the next with the
# worker threads of its default executor (each `asyncio.to_thread`): `asyncio.run`
# made a loop per invocation and stopped its threads at the end, so every message
# started a thread and let it go (the cost issue 40 took out of the HTTP function).
# An invocation still ends only once what it awaits has returned. The loop is this
# runner's own, not the thread's current one (Mangum's, in a process that has both).
_LOOP = asyncio.Runner(loop_factory=asyncio.new_event_loop)


def websocket_handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """The $connect, $disconnect and $default routes of the WebSocket API."""
    rt = _runtime()
    route = str(event.get("requestContext", {}).get("routeKey"))
    try:
        return _LOOP.run(handle_websocket(rt, event))
    finally:
        rt.metrics.add(metrics.WEBSOCKET_MESSAGES, route=route)
        rt.metrics.flush(route=route, function="realtime")


def stream_handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """The table's stream (filtered to head items): poke every subscriber."""
    rt = _runtime()
    try:
        sent = _LOOP.run(fan_out(rt, head_changes(event.get("Records", []))))
    finally:
        rt.metrics.flush(function="fanout")
    return {"sent": sent}


def drain_handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """The fan-out's failure destination, an SQS queue: for each batch of the stream
    the fan-out gave up on, poke its tenants' subscribers with their heads as they
    are now (pokes are idempotent: each subscriber gets only a token newer than the
    last one it was sent). A message that fails returns to the queue."""
    rt = _runtime()
    failures = []
    for message in event.get("Records", []):
        try:
            sent = _LOOP.run(drain(rt, json.loads(message["body"])))
        except Exception:  # any: the message is retried, never dropped
            logger.exception("draining a failed fan-out batch failed")
            failures.append({"itemIdentifier": message["messageId"]})
            rt.metrics.add(metrics.DRAIN_FAILURES)
        else:
            logger.info("drained a failed fan-out batch: %d sent", sent)
            rt.metrics.add(metrics.DRAINED_BATCHES)
    rt.metrics.flush(function="drain")
    return {"batchItemFailures": failures}


async def handle_websocket(rt: Runtime, event: dict[str, Any]) -> dict[str, Any]:
    request = event["requestContext"]
    route, connection_id = request["routeKey"], request["connectionId"]
    if route == "$connect":
        return _connect(event)
    if route == "$disconnect":
        rt.connections.close(connection_id)
        return {"statusCode": 200}
    message = _message(event.get("body"))
    if message is None:
        rt.hang_up(connection_id, "message must be a JSON object with a type")
        return {"statusCode": 200}
    kind = message["type"]
    if kind == "connection_init":
        _connection_init(rt, connection_id, message.get("payload"))
    elif kind == "ping":
        rt.send(connection_id, {"type": "pong"})
    elif kind == "pong":
        pass
    elif kind == "subscribe":
        await _subscribe(rt, connection_id, message)
    elif kind == "complete" and isinstance(message.get("id"), str):
        rt.connections.unsubscribe(connection_id, message["id"])
    else:
        rt.hang_up(connection_id, f"unknown message type {kind[:40]!r}")
    return {"statusCode": 200}


def _message(body: Any) -> dict[str, Any] | None:
    """The message a body holds, or None when it is not JSON, too large, nested too
    deep or not an object with a type. json.loads recurses once per level: a body
    nested 2,000 deep raised RecursionError out of the handler (a Lambda error), and
    one nested just under the limit would raise it later, in whatever walks it."""
    if not isinstance(body, str) or len(body) > MAX_MESSAGE:
        return None
    try:
        message = json.loads(body)
    except (RecursionError, ValueError):
        return None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        return None
    return None if _deeper_than(message, MAX_MESSAGE_DEPTH) else message


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether JSON `value` nests more than `limit` levels (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack += [(c, depth + 1) for c in children if isinstance(c, dict | list)]
    return False


def _connect(event: dict[str, Any]) -> dict[str, Any]:
    """Accept only graphql-transport-ws, and say so: browsers drop a socket whose
    handshake does not echo the subprotocol they asked for."""
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    offered = [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",")]
    if PROTOCOL not in offered:
        return {"statusCode": 400, "body": f"the subprotocol must be {PROTOCOL}"}
    return {"statusCode": 200, "headers": {"Sec-WebSocket-Protocol": PROTOCOL}}


def _connection_init(rt: Runtime, connection_id: str, payload: Any) -> None:
    try:
        principal = rt.authenticator.authenticate(connection_authorization(payload))
    except SyncError as exc:
        rt.hang_up(connection_id, f"connection_init refused: {exc.code}")
        return
    until = principal.expires_at if principal.expires_at is not None else time.time() + 3600
    if not rt.connections.open(connection_id, principal.sub, principal.tenants, until):
        rt.hang_up(connection_id, "too many initialisation requests")
        return
    rt.send(connection_id, {"type": "connection_ack"})


async def _subscribe(rt: Runtime, connection_id: str, message: dict[str, Any]) -> None:
    connection = rt.connections.get(connection_id)
    if connection is None:
        rt.hang_up(connection_id, "subscribe before connection_ack")
        return
    if connection.until < time.time():
        rt.hang_up(connection_id, "token expired")
        return
    subscription_id, payload = message.get("id"), message.get("payload")
    if (
        not isinstance(subscription_id, str)
        or not 0 < len(subscription_id) <= _MAX_ID_LENGTH
        or not isinstance(payload, dict)
        or not isinstance(payload.get("query"), str)
    ):
        rt.hang_up(connection_id, "invalid subscribe message")
        return
    query: str = payload["query"]
    variables = payload.get("variables") or {}
    name = payload.get("operationName") or None
    if not isinstance(variables, dict) or not isinstance(name, str | None):
        rt.hang_up(connection_id, "invalid subscribe message")
        return
    refused = too_long(query, authenticated=True) or _too_large_to_store(query, {})
    if refused is None:  # the document is short: parsing it costs little
        operation = Operation(query, _declared(query, name, variables, rt.settings), name)
        refused = _too_large_to_store(query, operation.variables)
    if refused is not None:
        _send_errors(rt, connection_id, subscription_id, [refused])
        return
    feed = _RegisteringFeed(rt, connection, subscription_id, operation)
    principal = Principal(connection.sub, connection.tenants, connection.until)
    rejected = await _run(rt, connection_id, subscription_id, operation, principal, feed)
    if not rejected and not feed.registered:
        # It ended (an error, or it was refused): graphql-ws expects `complete`.
        rt.send(connection_id, {"id": subscription_id, "type": "complete"})


def _declared(
    query: str, name: str | None, variables: dict[str, Any], settings: Settings
) -> dict[str, Any]:
    """The variables the operation `name` of `query` declares (all of them when the
    document does not parse or has no such operation: executing it reports that)."""
    try:
        document = parse(query, max_tokens=settings.max_query_tokens)
    except (GraphQLError, RecursionError):
        return variables
    operations = [
        d
        for d in document.definitions
        if isinstance(d, OperationDefinitionNode)
        and (name is None or (d.name is not None and d.name.value == name))
    ]
    if len(operations) != 1:
        return variables
    declared = {v.variable.name.value for v in operations[0].variable_definitions or ()}
    return {k: v for k, v in variables.items() if k in declared}


def _too_large_to_store(query: str, variables: dict[str, Any]) -> GraphQLError | None:
    """The error for an operation larger than a subscription item may hold, or None."""
    if len(query) > MAX_STORED_DOCUMENT:
        why = f"a subscription's document is longer than {MAX_STORED_DOCUMENT} characters"
    elif len(json.dumps(variables)) > MAX_STORED_VARIABLES:
        why = f"a subscription's variables are longer than {MAX_STORED_VARIABLES} characters"
    else:
        return None
    return GraphQLError(why, extensions={"code": "BAD_USER_INPUT"})


async def _run(
    rt: Runtime,
    connection_id: str,
    subscription_id: str,
    operation: Operation,
    principal: Principal,
    feed: Any,
) -> bool:
    """Run `operation` with `feed` and send what it yields; True if it was refused
    before execution (an `error` message was sent)."""
    source = await execute(rt, operation, principal, feed)
    async with aclosing(source):
        async for result in source:
            if isinstance(result, PreExecutionError):  # only ever the first result
                _send_errors(rt, connection_id, subscription_id, result.errors or [])
                return True
            rt.send(connection_id, next_message(subscription_id, result))
    return False


def _send_errors(rt: Runtime, connection_id: str, subscription_id: str, errors: list[Any]) -> None:
    formatted = [e.formatted for e in with_codes(list(errors))]
    rt.send(connection_id, {"id": subscription_id, "type": "error", "payload": formatted})


class _RegisteringFeed:
    """At `subscribe`: store the subscription, then yield the tenant's newest
    complete change if it is newer than `since`. Registering first means a write
    committed during the read is fanned out to it: nothing slips in between."""

    def __init__(
        self,
        rt: Runtime,
        connection: Connection,
        subscription_id: str,
        operation: Operation,
    ) -> None:
        self._rt = rt
        self._connection = connection
        self._subscription = (subscription_id, operation)
        self.registered = False

    async def changes(
        self, tenant_id: str, after: str | None, user: str = ""
    ) -> AsyncIterator[str]:
        # `user` is the connection's own: on AWS the share is per connection (10).
        subscription_id, operation = self._subscription
        connection = self._connection
        subscription = Subscription(
            connection_id=connection.connection_id,
            subscription_id=subscription_id,
            tenant_id=tenant_id,
            operation=operation,
            sub=connection.sub,
            until=connection.until,
        )
        try:
            await asyncio.to_thread(
                self._rt.connections.subscribe,
                connection,
                subscription,
                self._rt.settings.ws_max_subscriptions_per_connection,
            )
        except SubscriptionRefused:
            raise _Refused("subscription id in use, or too many subscriptions") from None
        self.registered = True
        try:
            latest = await asyncio.to_thread(self._rt.service.latest_change, tenant_id, after)
        except Exception:
            self.registered = False
            self._rt.connections.unsubscribe(connection.connection_id, subscription_id)
            raise
        # Claimed first, like a fan-out's event: one that raced ahead with this
        # token (or a newer one) already told the subscriber.
        if latest is not None and await asyncio.to_thread(
            self._rt.connections.claim, subscription, latest
        ):
            yield latest


class _Refused(SyncError):
    code = "BAD_USER_INPUT"


def before_snapshot() -> None:
    """With SnapStart (serverless.yml: the realtime, fan-out and drain functions), the
    runtime a first invocation would build (settings, schema, clients, those made on
    first use too) is built when a version is published, and every cold start
    restores it from the snapshot. Then what startup made is left out of garbage
    collections, as the HTTP function does (`api.app.freeze_startup_heap`, which
    this module does not import: it would bring the web stack in)."""
    rt = _runtime()
    rt.management.client()
    rt.streams.client()
    gc.collect()
    gc.freeze()


try:
    # Lambda's Python runtimes include the Snapshot Restore for Python library; it
    # runs the hook once, at publication, before the snapshot.
    from snapshot_restore_py import register_before_snapshot
except ImportError:  # anywhere else no snapshot is taken: nothing to do
    pass
else:
    register_before_snapshot(before_snapshot)
