"""`setVisibility` (contract 3.12): who sees a record, changed by its owner or a
tenant OWNER who sees it, token-guarded like an update; the same as a pushChanges
entry (`api.graphql.push`)."""

from typing import Any

import strawberry

from api.auth import WRITER
from api.domain import catalog
from api.domain.mutations import Mutation
from api.graphql.context import as_member, viewer
from api.graphql.directives import authenticated
from api.graphql.types import SynchronizedItem, to_synchronized_item
from api.graphql.visibility_types import VisibilityInput, from_input


@strawberry.input
class SetVisibilityInput:
    tenantID: strawberry.ID
    id: strawberry.ID
    changeToken: str = strawberry.field(description="The version it is based on (else CONFLICT).")
    visibility: VisibilityInput | None = strawberry.field(
        default=None, description="Who sees it from now on; null: the whole tenant."
    )
    clientMutationID: str | None = None


@strawberry.type
class SetVisibilityPayload:
    item: SynchronizedItem
    replayed: bool = False


def share(input: SetVisibilityInput, release: int | None) -> Mutation:
    """The domain mutation: a share of the record named by id, of its stored type
    (filled in by the service: `untyped`)."""
    visibility, _ = from_input(input.visibility, release)
    placeholder = catalog.ITEM_TYPES[0]
    return Mutation(
        "share",
        placeholder,
        input.tenantID,
        input.id,
        input.changeToken,
        client_mutation_id=input.clientMutationID,
        visibility=visibility,
        sets_visibility=True,
        untyped=True,
    )


async def set_visibility(info: strawberry.Info, input: SetVisibilityInput) -> SetVisibilityPayload:
    info.context.budget.spend_writes(1)
    mutation = share(input, info.context.client_release())
    written = await as_member(
        info,
        mutation.tenant_id,
        lambda svc, role, moved: svc.apply(mutation, viewer(info, mutation.tenant_id), role, moved),
        role=WRITER,
    )
    return SetVisibilityPayload(
        item=to_synchronized_item(written.record), replayed=written.replayed
    )


MUTATIONS: dict[str, Any] = {
    "setVisibility": strawberry.mutation(
        resolver=set_visibility,
        description="Who sees a record: its owner, or a tenant OWNER who sees it (contract "
        "3.12). Members who stop seeing it get a LeftViewItem at their next sync.",
        **authenticated(),
    ),
}
