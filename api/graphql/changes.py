"""`changes` (contract 3.4): a page of a tenant's changes after a token, the
one read a device syncs with. Its types are the synchronized items
(`api.graphql.types`)."""

from typing import Annotated, Any

import strawberry

from api.domain.catalog import BY_CODE
from api.domain.errors import BadUserInput
from api.graphql.context import RequestBudget, for_tenant, given, viewer
from api.graphql.directives import authenticated
from api.graphql.types import DeletedItemType, SynchronizedItemList, to_synchronized_item
from api.service.reading import DEFAULT_LIMIT, MAX_LIMIT


async def changes(
    info: strawberry.Info,
    tenantID: strawberry.ID,
    since: strawberry.ID | None = strawberry.UNSET,
    cursor: str | None = strawberry.UNSET,
    limit: int | None = strawberry.UNSET,
    types: Annotated[
        list[DeletedItemType] | None,  # type: ignore[valid-type]
        strawberry.argument(
            description="Only changes of these types (deletions included), in pages that stay "
            "full. Send the same types with each cursor. Costs the read units of every change "
            "of the range, of any type."
        ),
    ] = strawberry.UNSET,
) -> SynchronizedItemList:
    requested = given(limit)
    if requested is None or 1 <= requested <= MAX_LIMIT:  # else the service says why
        info.context.budget.spend_items(DEFAULT_LIMIT if requested is None else requested)
    chosen = given(types)
    wanted = None if chosen is None else frozenset(BY_CODE[t.value] for t in chosen)
    if wanted is not None and not wanted:
        raise BadUserInput("types must name at least one type")
    budget: RequestBudget = info.context.budget
    release = info.context.client_release()
    # Pages of chosen types, and a first sync's, leave changes out and read on.
    allowance = budget.take_scans()
    try:
        page = await for_tenant(
            info,
            tenantID,
            lambda s: s.changes(
                tenantID,
                since=given(since),
                cursor=given(cursor),
                limit=given(limit),
                types=wanted,
                max_scanned=allowance,
                release=release,
                sub=viewer(info, tenantID),
            ),
        )
    except BaseException:
        budget.refund_scans(allowance)
        raise
    budget.refund_scans(allowance - page.scanned)
    return SynchronizedItemList(
        items=[to_synchronized_item(r) for r in page.items],
        cursor=page.cursor,
        changeToken=page.change_token,
    )


QUERIES: dict[str, Any] = {"changes": strawberry.field(resolver=changes, **authenticated())}
