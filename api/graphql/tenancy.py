"""`deleteTenant` (contract 3.8): its payload."""

from __future__ import annotations

import strawberry


@strawberry.type
class DeleteTenantPayload:
    removedItems: int = strawberry.field(
        description="Items of the tenant removed so far (all calls together)."
    )
    done: bool = strawberry.field(
        description="True when nothing of the tenant is left; false: call again to continue."
    )
