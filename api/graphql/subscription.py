"""`changesAvailable`: the poke a device subscribes to, and the feed it reads.

The resolver checks the caller and its arguments before the first event, so a
foreign tenant is a FORBIDDEN error on that subscription alone. Where the tokens
come from is the context's `ChangeFeed`: the in-process hub on a long-running
server (`api.realtime.signals.LiveFeed`), a table-backed registration or a
single fanned-out event on AWS Lambda (`api.realtime.aws`).
"""

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Protocol

import strawberry

from api.auth import Principal
from api.domain.errors import Unavailable
from api.domain.identifiers import check_identifier
from api.domain.membership import Access
from api.domain.tokens import check_token
from api.graphql.directives import authenticated


class ChangeFeed(Protocol):
    def changes(self, tenant_id: str, after: str | None, user: str = "") -> AsyncIterator[str]:
        """Change tokens of the tenant newer than `after`, each newer than the last
        (`user`: whose subscription, counted against their share)."""
        ...


@strawberry.type(
    description="The tenant has changes newer than the device's token: run `changes` "
    "with `since` set to the token the device holds. Carries no entity data; a burst "
    "of writes may give one event with the newest token."
)
class ChangesAvailable:
    tenantID: strawberry.ID
    changeToken: str = strawberry.field(
        description="The tenant's newest change token when the event was sent."
    )


async def changes_available(
    info: strawberry.Info,
    tenantID: strawberry.ID,
    since: strawberry.ID | None = strawberry.UNSET,
) -> AsyncIterator[ChangesAvailable]:
    context = info.context
    check_identifier(tenantID, "tenantID")
    caller = context.caller()
    after = None if since is None or since is strawberry.UNSET else check_token(since, "since")
    access: Access | None = getattr(context, "known_access", None)  # the fan-out's roster
    if access is None:
        # One read of the tenant's access items, in the app's runner but, like the
        # subscription's first read (`api.app`), not through the tenant's gates: a
        # tenant's devices reconnecting at once would find them full, refused for good.
        access = await context.run_blocking(
            lambda s: s.access(tenantID, caller.sub), context.service
        )
    access.role_of(lambda: caller.role(tenantID))  # NotAMember unless it may read
    feed: ChangeFeed | None = getattr(context, "feed", None)
    if feed is None:
        raise Unavailable("subscriptions are not served on this endpoint")
    return _events(context, feed, tenantID, after, caller)


async def _events(
    context: Any, feed: ChangeFeed, tenant_id: str, after: str | None, caller: Principal
) -> AsyncIterator[ChangesAvailable]:
    async for token in feed.changes(tenant_id, after, caller.sub):
        # A member removed since it subscribed is told at the next event it would get
        # (NOT_A_MEMBER), which ends the subscription: the tenant's roster read once
        # per change and process, whatever its subscribers (contract 6).
        future, mine = context.service.membership.roster_of(tenant_id, token)
        if mine:
            try:
                await context.run_blocking(
                    lambda s, f=future: s.membership.read_roster(tenant_id, f), context.service
                )
            finally:
                if not future.done():  # cancelled before its thread ran
                    why = Unavailable("the tenant's members were not read; resubscribe")
                    context.service.membership.abandon(tenant_id, future, why)
        roster = await asyncio.wrap_future(future)  # the others wait without a thread
        roster.access(caller.sub).role_of(lambda: caller.role(tenant_id))
        yield ChangesAvailable(tenantID=strawberry.ID(tenant_id), changeToken=token)


def subscription_fields() -> dict[str, Any]:
    return {
        "changesAvailable": strawberry.subscription(
            resolver=changes_available,
            description="Pokes the device whenever its tenant has changes newer than "
            "`since` (at once if it already has). Resubscribe after a disconnect with "
            "the token the device holds.",
            **authenticated(),
        )
    }
