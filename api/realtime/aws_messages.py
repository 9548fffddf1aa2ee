"""The graphql-transport-ws messages of the WebSocket routes (`api.realtime.aws`)
that need JWT verification or GraphQL: `connection_init` and `subscribe`; and
running one stored operation through the schema (the fan-out's too). Imported on
the first such message, not by a socket's `$connect` (before the snapshot, with
SnapStart: `api.realtime.aws.before_snapshot`)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from graphql import GraphQLError, OperationDefinitionNode, parse
from strawberry.types.execution import PreExecutionError
from strawberry.utils.aio import aclosing

from api.auth import Principal, connection_authorization
from api.domain.errors import SyncError
from api.domain.membership import Access
from api.graphql.context import Context
from api.graphql.documents import too_long
from api.graphql.errors import with_codes
from api.realtime.aws_runtime import Runtime
from api.realtime.connections import (
    MAX_STORED_DOCUMENT,
    MAX_STORED_VARIABLES,
    Connection,
    Operation,
    Subscription,
    SubscriptionRefused,
)
from api.settings import Settings

_MAX_ID_LENGTH = 128


def connection_init(rt: Runtime, connection_id: str, payload: Any) -> None:
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


async def subscribe(rt: Runtime, connection_id: str, message: dict[str, Any]) -> None:
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
            latest = await asyncio.to_thread(
                self._rt.service.latest_seen, tenant_id, after, connection.sub
            )
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


async def execute(
    rt: Runtime,
    operation: Operation,
    principal: Principal,
    feed: Any,
    access: Access | None = None,
) -> Any:
    """The results of `operation` for `principal`, whose tokens come from `feed`;
    `access`: the caller's, when known (the fan-out's roster; None: read it)."""
    context = Context(
        request=None, service=rt.service, principal=principal, feed=feed, known_access=access
    )
    return await rt.schema.subscribe(
        operation.query,
        variable_values=operation.variables,
        context_value=context,
        operation_name=operation.name,
    )


def next_message(subscription_id: str, result: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"data": result.data}
    if result.errors:  # coded already, by the schema (SyncSchema.process_errors)
        payload["errors"] = [e.formatted for e in result.errors]
    return {"id": subscription_id, "type": "next", "payload": payload}
