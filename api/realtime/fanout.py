"""The fan-out: each head change of the table's stream pokes the tenant's
subscribers (`PostToConnection`), each with a token newer than the last one sent
on its subscription; and the drain of batches the fan-out gave up on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from strawberry.types.execution import PreExecutionError
from strawberry.utils.aio import aclosing

from api import metrics
from api.auth import Principal
from api.domain.audiences import Audience, in_audience, to_check
from api.domain.errors import SyncError
from api.domain.membership import Access, Roster
from api.graphql.errors import with_codes
from api.realtime.aws_messages import execute, next_message
from api.realtime.aws_runtime import FanOutIncomplete, Runtime
from api.realtime.connections import Subscription
from api.realtime.failed_batches import tenants_in_batch

logger = logging.getLogger("api.realtime")

# PostToConnection calls in flight at once during a fan-out (each is a network
# round trip of a few milliseconds; 1,000 subscribers in well under a second).
FAN_OUT_CONCURRENCY = 32


class _OneEvent:
    """At fan-out: the one new token, if it is newer than the subscription's `since`.
    It is sent only if it is also newer than the last token sent on that
    subscription (`Connections.claim`): the event is shared by every subscriber of
    one operation, the last token sent is each one's own."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def changes(
        self, tenant_id: str, after: str | None, user: str = ""
    ) -> AsyncIterator[str]:
        if after is None or self._token > after:
            yield self._token


class _CheckedEvent(_OneEvent):
    """A token told UNTOLD (a drain's, or changes coalesced into one poke) to a
    subscriber outside its audience: an event only if its member's view has a change
    newer than its since and than the last token sent on its subscription (one read:
    `latest_seen`), carrying that change's token, never the newer one it was told
    (whose change it does not see)."""

    def __init__(self, rt: Runtime, subscription: Subscription, token: str) -> None:
        super().__init__(token)
        self._rt = rt
        self._subscription = subscription

    async def changes(
        self, tenant_id: str, after: str | None, user: str = ""
    ) -> AsyncIterator[str]:
        floor = max((t for t in (after, self._subscription.last) if t is not None), default=None)
        if floor is not None and self._token <= floor:
            return
        seen = await asyncio.to_thread(self._rt.service.latest_seen, tenant_id, floor, user)
        if seen is not None:
            yield seen


async def fan_out(rt: Runtime, changes: dict[str, tuple[str, Audience]]) -> int:
    """Send each tenant's newest token to its subscribers whose member is in its
    audience (None: all); how many were sent. Raises once every tenant was tried if
    any subscriber could not be sent its event, or a tenant's subscriptions could
    not be read."""
    gate = asyncio.Semaphore(FAN_OUT_CONCURRENCY)
    outcomes = [await _fan_out_tenant(rt, t, *poke, gate) for t, poke in changes.items()]
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    now = time.time()
    for (token, _), outcome in zip(changes.values(), outcomes, strict=True):
        if isinstance(outcome, int) and outcome:
            rt.metrics.add(metrics.POKES_SENT, outcome)
            rt.metrics.add(metrics.POKE_DELAY, metrics.poke_delay_ms(token, now))
    if failures:
        rt.metrics.add(metrics.FANOUT_FAILURES, len(failures))
        raise FanOutIncomplete(f"{len(failures)} of {len(outcomes)} tenants") from failures[0]
    return sum(o for o in outcomes if isinstance(o, int))


async def _fan_out_tenant(
    rt: Runtime, tenant_id: str, token: str, audience: Audience, gate: asyncio.Semaphore
) -> int | BaseException:
    try:
        # A change outside a member's view pokes none of its subscriptions (nor reads
        # the roster for them): they are left out before anything is read or sent.
        # A drain's poke (UNTOLD) goes to the others only once their views are read;
        # a change of a group's records to the group's members by the roster.
        subscriptions = [
            s
            for s in await asyncio.to_thread(_subscriptions_of, rt, tenant_id)
            if to_check(audience) or in_audience(s.sub, audience)
        ]
        # Who is still a member (contract 6): one Query of the tenant's roster per
        # change and instance, whatever its subscribers (docs/realtime.md).
        roster = (
            await asyncio.to_thread(rt.service.roster_at, tenant_id, token)
            if subscriptions
            else None
        )
    except SyncError as exc:
        return exc
    now = time.time()
    removed: list[Subscription] = []
    # Subscribers mostly send the same document: execute each distinct one once.
    payloads: dict[str, dict[str, Any] | None] = {}
    messages: list[tuple[Subscription, dict[str, Any]]] = []
    expired: set[str] = set()
    for subscription in subscriptions:
        if subscription.until < now:
            expired.add(subscription.connection_id)
            continue
        if subscription.last is not None and token <= subscription.last:
            continue  # it was sent this token, or a newer one
        if roster is not None and roster.moved and roster.access(subscription.sub).role is None:
            removed.append(subscription)  # told alone (NOT_A_MEMBER), then let go
            continue
        access = None if roster is None else roster.access(subscription.sub)
        # Its member's groups are the roster's (read after the change committed).
        viewer = subscription.sub if access is None else access.viewer(subscription.sub)
        if not in_audience(viewer, audience):
            if not to_check(audience, groups_known=access is not None):
                continue  # outside the change's audience, groups included: nothing
            # Its own operation, run on its own view's read (`_CheckedEvent`).
            checked = _CheckedEvent(rt, subscription, token)
            message = await _event(rt, subscription, token, access, checked)
        else:
            key = subscription.operation.key()
            if key not in payloads:
                payloads[key] = await _event(rt, subscription, token, access)
            message = payloads[key]
        if message is not None:
            messages.append((subscription, {**message, "id": subscription.subscription_id}))
    for connection_id in expired:
        await asyncio.to_thread(rt.hang_up, connection_id, "token expired")
    for subscription in removed:
        assert roster is not None
        await _let_go(rt, subscription, token, roster)

    async def deliver(subscription: Subscription, message: dict[str, Any]) -> bool:
        async with gate:
            return await asyncio.to_thread(_deliver, rt, subscription, token, message)

    sent = await asyncio.gather(*(deliver(s, m) for s, m in messages), return_exceptions=True)
    failed = [s for s in sent if isinstance(s, BaseException)]
    return failed[0] if failed else sum(s is True for s in sent)


def _deliver(rt: Runtime, subscription: Subscription, token: str, message: dict[str, Any]) -> bool:
    """Claim `token` on the subscription, then send it; False if it was not newer
    than the last one sent or the connection is gone. A failed send is released,
    so that a retry of the batch sends it again."""
    if not rt.connections.claim(subscription, token):
        return False
    posted = rt.post(subscription.connection_id, message)
    if posted is None:
        rt.connections.release(subscription, token)
        raise FanOutIncomplete(f"PostToConnection failed for {subscription.connection_id}")
    return posted


def _subscriptions_of(rt: Runtime, tenant_id: str) -> list[Subscription]:
    return list(rt.connections.subscriptions(tenant_id))


async def _event(
    rt: Runtime,
    subscription: Subscription,
    token: str,
    access: Access | None,
    feed: _OneEvent | None = None,
) -> dict[str, Any] | None:
    """The `next` message of one subscription for `token` (None: not newer than its
    since); `access`: its caller's, from the roster (not read again)."""
    principal = Principal(subscription.sub, frozenset({subscription.tenant_id}), subscription.until)
    feed = feed or _OneEvent(token)
    source = await execute(rt, subscription.operation, principal, feed, access)
    async with aclosing(source):
        async for result in source:
            if isinstance(result, PreExecutionError):
                return None
            return next_message(subscription.subscription_id, result)
    return None


async def _let_go(rt: Runtime, subscription: Subscription, token: str, roster: Roster) -> None:
    """A removed member's subscription: its operation run for it alone, whose resolver
    refuses it (NOT_A_MEMBER), sent as a local server sends an open subscription's
    error (a `next` carrying it), then `complete`; and the subscription removed."""
    principal = Principal(subscription.sub, frozenset({subscription.tenant_id}), subscription.until)
    connection_id, subscription_id = subscription.connection_id, subscription.subscription_id
    access = roster.access(subscription.sub)
    source = await execute(rt, subscription.operation, principal, _OneEvent(token), access)
    async with aclosing(source):
        async for result in source:
            errors = [e.formatted for e in with_codes(list(result.errors or []))]
            payload = {"data": getattr(result, "data", None), "errors": errors}
            message = {"id": subscription_id, "type": "next", "payload": payload}
            await asyncio.to_thread(rt.send, connection_id, message)
            break
    await asyncio.to_thread(rt.send, connection_id, {"id": subscription_id, "type": "complete"})
    await asyncio.to_thread(rt.connections.unsubscribe, connection_id, subscription_id)


async def drain(rt: Runtime, record: dict[str, Any]) -> int:
    info = record.get("DDBStreamBatchInfo")
    if not isinstance(info, dict):
        logger.error("not a stream batch's failure record: %s", str(record)[:500])
        return 0
    tenants = await asyncio.to_thread(tenants_in_batch, rt.streams, info)
    heads: dict[str, tuple[str, Audience]] = {}
    for tenant_id in sorted(tenants):
        latest = await asyncio.to_thread(rt.service.latest_change, tenant_id, None)
        if latest is not None:  # whose changes the batch held is not told: each checks
            audience = await asyncio.to_thread(rt.service.catch_up_audience, tenant_id)
            heads[tenant_id] = (latest, audience)
    from api.realtime.push_fanout import push_all

    try:
        return await fan_out(rt, heads)
    finally:  # and their silent pushes, by the same audiences (UNTOLD: each checks)
        changes = {t: (token, None, audience) for t, (token, audience) in heads.items()}
        push_all(rt, changes, mark_empty=True)
