"""`deleteTenant` (contract 3.8): a tenant's data deleted in resumable calls."""

from typing import Any

import strawberry

from api.auth import OWNER
from api.graphql.context import RequestBudget, for_tenant
from api.graphql.directives import authenticated
from api.service.tenancy import ITEMS_PER_CALL
from api.service.writing import MAX_PUSH


@strawberry.type
class DeleteTenantPayload:
    removedItems: int = strawberry.field(
        description="Items of the tenant removed so far (all calls together)."
    )
    done: bool = strawberry.field(
        description="True when nothing of the tenant is left; false: call again to continue."
    )


async def delete_tenant(
    info: strawberry.Info, tenantID: strawberry.ID, confirm: strawberry.ID
) -> DeleteTenantPayload:
    budget: RequestBudget = info.context.budget
    budget.spend_writes(MAX_PUSH)  # one deletion call per request, aliases included
    caller = info.context.caller()
    deletion = await for_tenant(
        info, tenantID, lambda s: s.delete_tenant(tenantID, confirm, caller.sub), role=OWNER
    )
    return DeleteTenantPayload(removedItems=deletion.removed, done=deletion.done)


MUTATIONS: dict[str, Any] = {
    "deleteTenant": strawberry.mutation(
        resolver=delete_tenant,
        description="Owners only: delete every item of the tenant, in calls of up to "
        f"{ITEMS_PER_CALL} items (call again until `done`). From the first call, the "
        "tenant's writes and syncs are TENANT_DELETED. `confirm` repeats the tenantID.",
        **authenticated(),
    ),
}
