"""History (contract 3.7): `history`, a page of an entity's earlier versions,
and `restoreVersion`, writing one back."""

from typing import Any

import strawberry

from api.auth import WRITER
from api.graphql.context import as_member, for_tenant, given, viewer
from api.graphql.directives import authenticated
from api.graphql.types import SynchronizedItem, to_synchronized_item
from api.service.history import DEFAULT_VERSIONS, MAX_VERSIONS


@strawberry.type
class VersionList:
    items: list[SynchronizedItem] = strawberry.field(
        description="Earlier versions, newest first; each with its `changeToken`, "
        "`updatedAt` (when it was written) and `writtenBy`."
    )
    cursor: str | None = strawberry.field(
        description="Pass back as `cursor` for older versions; null when there are none."
    )


@strawberry.input
class RestoreVersionInput:
    tenantID: strawberry.ID
    id: strawberry.ID
    changeToken: str = strawberry.field(description="The entity's current change token.")
    version: str = strawberry.field(description="The `changeToken` of the version to restore.")
    clientMutationID: str | None = strawberry.UNSET


@strawberry.type
class RestorePayload:
    item: SynchronizedItem = strawberry.field(description="The entity's new version.")
    replayed: bool = strawberry.field(
        default=False,
        description="True when this is the stored result of an earlier request with the "
        "same clientMutationID; nothing was written this time.",
    )


async def history(
    info: strawberry.Info,
    tenantID: strawberry.ID,
    id: strawberry.ID,
    cursor: str | None = strawberry.UNSET,
    limit: int | None = strawberry.UNSET,
) -> VersionList:
    requested = given(limit)
    if requested is None or 1 <= requested <= MAX_VERSIONS:  # else the service says why
        info.context.budget.spend_items(DEFAULT_VERSIONS if requested is None else requested)
    versions = await for_tenant(
        info,
        tenantID,
        lambda s: s.versions(tenantID, id, given(cursor), requested, viewer(info, tenantID)),
    )
    return VersionList(
        items=[to_synchronized_item(r) for r in versions.items], cursor=versions.cursor
    )


async def restore_version(info: strawberry.Info, input: RestoreVersionInput) -> RestorePayload:
    info.context.budget.spend_writes(1)
    written = await as_member(
        info,
        input.tenantID,
        lambda s, role, moved: s.restore(
            input.tenantID,
            input.id,
            input.changeToken,
            input.version,
            given(input.clientMutationID),
            viewer(info, input.tenantID),
            role,
            moved,
        ),
        role=WRITER,
    )
    return RestorePayload(item=to_synchronized_item(written.record), replayed=written.replayed)


QUERIES: dict[str, Any] = {
    "history": strawberry.field(
        resolver=history,
        description="An entity's earlier versions, newest first, kept for the retention "
        "period (not its current version).",
        **authenticated(),
    ),
}
MUTATIONS: dict[str, Any] = {
    "restoreVersion": strawberry.mutation(
        resolver=restore_version,
        description="Write an earlier version's fields as the entity's next version: an "
        "update guarded by `changeToken`, with conflicts as usual.",
        **authenticated(),
    ),
}
