"""The GraphQL types of history (contract 3.7): a page of earlier versions, and
restoring one."""

from __future__ import annotations

import strawberry

from api.graphql.types import SynchronizedItem


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
