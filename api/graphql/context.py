"""What every resolver shares: the request's context (the caller, the service,
the tenant gates), its budget across aliases, and `for_tenant`, which runs a
service call for a tenant once the caller may.

Resolvers are async and run the (blocking) service call in a worker thread, so
one server process keeps serving other requests while DynamoDB answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import strawberry
from starlette.concurrency import run_in_threadpool

from api import request_log
from api.auth import Principal
from api.domain.errors import BadUserInput, SyncError, Unauthenticated
from api.graphql.subscription import ChangeFeed
from api.service import SyncService
from api.service.reading import MAX_LIMIT, MAX_SCANNED
from api.service.writing import MAX_PUSH
from api.tenant_gate import READERS_PER_TENANT, TenantGate

_T = TypeVar("_T")


@dataclass
class RequestBudget:
    """What one HTTP request may ask for in total, however many aliases it uses:
    the limits of one `pushChanges` and of one `changes` page."""

    writes: int = MAX_PUSH
    items: int = MAX_LIMIT
    # Log entries that filling pages of chosen types may read beyond their first
    # pages (`api.service.reading.MAX_SCANNED`): one allowance for all fields.
    scans: int = MAX_SCANNED

    def spend_writes(self, count: int) -> None:
        if count > self.writes:
            raise BadUserInput(f"at most {MAX_PUSH} writes per request, aliases included")
        self.writes -= count

    def take_scans(self) -> int:
        """All that is left of the scan allowance, for one field; it gives back what
        it did not read (`refund_scans`). Fields run concurrently: one holds it."""
        taken, self.scans = self.scans, 0
        return taken

    def refund_scans(self, count: int) -> None:
        self.scans += count

    def spend_items(self, count: int) -> None:
        if count > self.items:
            raise BadUserInput(f"at most {MAX_LIMIT} changes items per request, aliases included")
        self.items -= count


# A WebSocket carries many operations over one connection (one Context): each is
# a request of its own, with its own limits. Set in the operation's task.
operation_budget: ContextVar[RequestBudget | None] = ContextVar("operation_budget", default=None)


@dataclass
class Context:
    request: Any
    service: SyncService
    principal: Principal | None = None
    # Why there is no principal: reported by every @isAuthenticated field.
    auth_error: SyncError | None = None
    # An HTTP request's budget; over WebSocket, each operation has its own
    # (`operation_budget`, set by the socket's handler for the operation's task).
    request_budget: RequestBudget = field(default_factory=RequestBudget)
    writes: TenantGate = field(default_factory=TenantGate)  # the process's, from the view
    reads: TenantGate = field(default_factory=lambda: TenantGate(READERS_PER_TENANT, what="reads"))
    feed: ChangeFeed | None = None  # where `changesAvailable` reads (None: not served)
    # graphql-transport-ws: connection_init's payload (Strawberry sets it), and the
    # connection's own tasks (its token's expiry), cancelled when it closes.
    connection_params: dict[str, Any] | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    on_close: list[Callable[[], None]] = field(default_factory=list)  # at the socket's close

    @property
    def budget(self) -> RequestBudget:
        return operation_budget.get() or self.request_budget

    def caller(self) -> Principal:
        """The verified caller; else why the request has none (UNAUTHENTICATED or
        UNAVAILABLE). The token is verified once, before the document is parsed
        (`api.app`), because what a document may cost depends on it."""
        if self.principal is None:
            raise self.auth_error or Unauthenticated("send Authorization: Bearer <token>")
        return self.principal


async def for_tenant(
    info: strawberry.Info,
    tenant_id: str,
    work: Callable[[SyncService], _T],
    role: str | None = None,
) -> _T:
    """Run `work` for `tenant_id`, once the caller is known to belong to it (with
    `role`, to hold that role or a higher one), through the tenant's gate for reads,
    or for writes when a role is needed (`api.tenant_gate`)."""
    context: Context = info.context
    if role is not None:
        context.caller().require_role(tenant_id, role)
    else:
        context.caller().require_tenant(tenant_id)
    log = request_log.current()
    if log is not None:
        log.tenant = tenant_id
    async with (context.reads if role is None else context.writes).enter(tenant_id):
        return await run_in_threadpool(work, context.service)


def given(value: Any) -> Any:
    """An optional argument's value; None when the request left it out."""
    return None if value is strawberry.UNSET else value
