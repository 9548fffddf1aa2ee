"""`changesAvailable`: the poke a device subscribes to, and the feed it reads.

The resolver checks the caller and its arguments before the first event, so a
foreign tenant is a FORBIDDEN error on that subscription alone. Where the tokens
come from is the context's `ChangeFeed`: the in-process hub on a long-running
server (`api.realtime.signals.LiveFeed`), a table-backed registration or a
single fanned-out event on AWS Lambda (`api.realtime.aws`).
"""

from collections.abc import AsyncIterator
from typing import Any, Protocol

import strawberry

from api.domain.errors import Unavailable
from api.domain.identifiers import check_identifier
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
    caller.require_tenant(tenantID)
    after = None if since is None or since is strawberry.UNSET else check_token(since, "since")
    feed: ChangeFeed | None = getattr(context, "feed", None)
    if feed is None:
        raise Unavailable("subscriptions are not served on this endpoint")
    return _events(feed, tenantID, after, caller.sub)


async def _events(
    feed: ChangeFeed, tenant_id: str, after: str | None, user: str
) -> AsyncIterator[ChangesAvailable]:
    async for token in feed.changes(tenant_id, after, user):
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
