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

A socket's `$connect` (it checks the subprotocol) imports and builds nothing of
GraphQL, JWT, the service or DynamoDB: those wait for the first message that uses
them (`api.realtime.aws_messages`, the runtime's parts), or for SnapStart's hook.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from typing import Any

from api import metrics
from api.realtime.aws_runtime import FanOutIncomplete, Runtime
from api.realtime.aws_runtime import runtime as _runtime
from api.realtime.streams import head_pokes

logger = logging.getLogger("api.realtime")

__all__ = [
    "FanOutIncomplete",
    "Runtime",
    "drain_handler",
    "push_flush_handler",
    "stream_handler",
    "websocket_handler",
]

PROTOCOL = "graphql-transport-ws"
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
    from api.realtime import push_fanout
    from api.realtime.fanout import fan_out  # GraphQL: not imported by a $connect

    rt = _runtime()
    records = event.get("Records", [])
    try:
        try:
            sent = _LOOP.run(fan_out(rt, head_pokes(records)))
        finally:  # the pushes go out whether or not every poke did (each is claimed)
            pushed = push_fanout.push_all(rt, push_fanout.writes(records), mark_empty=True)
    finally:
        rt.metrics.flush(function="fanout")
    # Pokes sent, and silent pushes where they are on.
    return {"sent": sent} if rt.pushes is None else {"sent": sent, "pushed": pushed}


def push_flush_handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """The push queue (SQS, each message delayed to a device's window's end): push the
    tokens its tenant's devices were kept waiting. A message that fails returns."""
    from api.realtime import push_fanout

    rt = _runtime()
    failures = []
    for message in event.get("Records", []):
        try:
            push_fanout.flush(rt, message["body"])
        except Exception:  # any: the message is retried, never dropped
            logger.exception("a push queue's flush failed")
            failures.append({"itemIdentifier": message["messageId"]})
    rt.metrics.flush(function="pushes")
    return {"batchItemFailures": failures}


def drain_handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """The fan-out's failure destination, an SQS queue: for each batch of the stream
    the fan-out gave up on, poke its tenants' subscribers with their heads as they
    are now (pokes are idempotent: each subscriber gets only a token newer than the
    last one it was sent). A message that fails returns to the queue."""
    from api.realtime.fanout import drain  # GraphQL: not imported by a $connect

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
        from api.realtime import aws_messages  # JWT, GraphQL: not imported by a $connect

        aws_messages.connection_init(rt, connection_id, message.get("payload"))
    elif kind == "ping":
        rt.send(connection_id, {"type": "pong"})
    elif kind == "pong":
        pass
    elif kind == "subscribe":
        from api.realtime import aws_messages

        await aws_messages.subscribe(rt, connection_id, message)
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


def before_snapshot() -> None:
    """With SnapStart (serverless.yml: the realtime, fan-out and drain functions), the
    runtime's parts that its invocations build on first use (the schema, the
    service, JWT verification, every client) and the modules they import are built
    when a version is published, and every cold start restores them from the
    snapshot. Then what startup made is left out of garbage collections, as the
    HTTP function does (`api.app.freeze_startup_heap`, which this module does not
    import: it would bring the web stack in)."""
    _runtime().build_all()
    # The modules the messages and the stream's batches run (imported on first use).
    import api.realtime.aws_messages  # noqa: F401
    import api.realtime.fanout  # noqa: F401
    import api.realtime.push_fanout  # noqa: F401

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
