"""`catchUp` (docs/evolution.md): what an upgraded app skipped while it ran an
earlier release, read from the tenant's later copies alone (`api.service.upgrades`)."""

from typing import Annotated, Any

import strawberry

from api.domain.catalog import BY_CODE
from api.graphql.context import RequestBudget, for_tenant, given, viewer
from api.graphql.directives import authenticated
from api.graphql.types import DeletedItemType, SynchronizedItemList, to_synchronized_item
from api.service.reading import DEFAULT_LIMIT, MAX_LIMIT


async def catch_up(
    info: strawberry.Info,
    tenantID: strawberry.ID,
    upTo: Annotated[
        strawberry.ID,
        strawberry.argument(description="The app's change token: what it has synced up to."),
    ],
    types: Annotated[
        list[DeletedItemType] | None,  # type: ignore[valid-type]
        strawberry.argument(description="The types the upgraded app newly declares."),
    ] = strawberry.UNSET,
    fields: Annotated[
        list[str] | None,
        strawberry.argument(
            description='The fields the upgraded app newly declares, as "Type.field" '
            '(an enum field whose new values it now knows too, e.g. "Person.relationship").'
        ),
    ] = strawberry.UNSET,
    cursor: str | None = strawberry.UNSET,
    limit: int | None = strawberry.UNSET,
) -> SynchronizedItemList:
    requested = given(limit)
    if requested is None or 1 <= requested <= MAX_LIMIT:  # else the service says why
        budget: RequestBudget = info.context.budget
        budget.spend_items(DEFAULT_LIMIT if requested is None else requested)
    wanted = [BY_CODE[t.value] for t in given(types) or ()]
    release = info.context.client_release()
    page = await for_tenant(
        info,
        tenantID,
        lambda s: s.catch_up(
            tenantID,
            upTo,
            types=wanted,
            fields=given(fields) or (),
            cursor=given(cursor),
            limit=given(limit),
            release=release,
            by=viewer(info, tenantID),
        ),
    )
    return SynchronizedItemList(
        items=[to_synchronized_item(r) for r in page.items],
        cursor=page.cursor,
        changeToken=page.change_token,
    )


QUERIES: dict[str, Any] = {
    "catchUp": strawberry.field(
        resolver=catch_up,
        description="After an app's upgrade: the current versions, up to its token "
        "(upTo), of the entities holding what it newly declares (types, fields, enum "
        "values), which its earlier release's syncs left out; follow cursor until null, "
        "then sync from upTo as usual. Reads only such entities (docs/evolution.md).",
        **authenticated(),
    )
}
