"""What every resolver shares: the request's context (the caller, the service,
the tenant gates), its budget across aliases, and `for_tenant`, which runs a
service call for a tenant once the caller may.

Resolvers are async and run the (blocking) service call in a worker thread
(`api.worker_threads`), so one server process keeps serving other requests while
DynamoDB answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import strawberry

from api import request_log
from api.auth import Principal
from api.domain import catalog, releases
from api.domain.errors import BadUserInput, SyncError, Unauthenticated, UpgradeRequired
from api.domain.identifiers import is_identifier
from api.domain.membership import Access, require
from api.graphql.subscription import ChangeFeed
from api.service import SyncService
from api.service.reading import MAX_LIMIT, MAX_SCANNED
from api.service.writing import MAX_PUSH
from api.tenant_gate import READERS_PER_TENANT, TenantGate, caller_gate
from api.worker_threads import RunBlocking, anyio_pool

_T = TypeVar("_T")
_K = TypeVar("_K", bound=Hashable)

# The catalog release an app declares (docs/evolution.md): this header over HTTP,
# `release` in connection_init's payload over a socket.
RELEASE_HEADER = "x-sync-release"


@dataclass
class RequestBudget:
    """What one HTTP request may ask for in total, however many aliases it uses:
    the limits of one `pushChanges` and of one `changes` page."""

    writes: int = MAX_PUSH
    items: int = MAX_LIMIT
    # Log entries that filling pages of chosen types may read beyond their first
    # pages (`api.service.reading.MAX_SCANNED`): one allowance for all fields.
    scans: int = MAX_SCANNED
    # What each tenant's access items said of the caller (contract 6): read once per
    # tenant and request (aliases share it), by the first field that asks.
    access: dict[str, asyncio.Future[Access]] = field(default_factory=dict)

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
    callers: TenantGate = field(default_factory=caller_gate)  # the process's, from the view
    feed: ChangeFeed | None = None  # where `changesAvailable` reads (None: not served)
    # Where the service's blocking calls run: the app's choice (`api.worker_threads`).
    run_blocking: RunBlocking = field(default_factory=anyio_pool)
    # graphql-transport-ws: connection_init's payload (Strawberry sets it), and the
    # connection's own tasks (its token's expiry), cancelled when it closes.
    connection_params: dict[str, Any] | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    on_close: list[Callable[[], None]] = field(default_factory=list)  # at the socket's close
    # Work the fields ask of a tenant piece by piece, done in batches (`TenantBatch`).
    batches: dict[str, TenantBatch[Any, Any]] = field(default_factory=dict)
    # Apps declaring an older release are refused (MIN_CLIENT_RELEASE).
    min_release: int = 1
    # What the caller's access is known to be, read already (the AWS fan-out's roster):
    # `changesAvailable` does not read it again. None: read it.
    known_access: Access | None = None

    @property
    def budget(self) -> RequestBudget:
        return operation_budget.get() or self.request_budget

    def caller(self) -> Principal:
        """The verified caller; else why the request has none (UNAUTHENTICATED or
        UNAVAILABLE). The token is verified once, before the document is parsed
        (`api.app`), because what a document may cost depends on it."""
        if self.principal is None:
            raise self.auth_error or Unauthenticated("send Authorization: Bearer <token>")
        self.client_release()  # UPGRADE_REQUIRED before anything of a retired app's
        return self.principal

    def client_release(self) -> int | None:
        """The catalog release the app declares (None: it does not say; it is sent
        what this server's release serves). UPGRADE_REQUIRED when older than
        `min_release` (an app that does not say counts as release 1 there)."""
        params, headers = self.connection_params, getattr(self.request, "headers", None)
        if params is not None and "release" in params:  # null too: it is not a release
            release: int | None = releases.declared(params["release"])
        elif headers is not None and RELEASE_HEADER in headers:
            release = releases.declared(headers[RELEASE_HEADER])
        else:
            release = None
        if (release or 1) < self.min_release:
            raise UpgradeRequired(
                f"this app's release ({release or 1}) is no longer served: the server "
                f"serves release {self.min_release} and later ({catalog.RELEASE} is its newest)"
            )
        return release


async def for_tenant(
    info: strawberry.Info,
    tenant_id: str,
    work: Callable[[SyncService], _T],
    role: str | None = None,
) -> _T:
    """Run `work` for `tenant_id`, once the caller is known to belong to it (with
    `role`, to hold that role or a higher one), through the caller's gate, then the
    tenant's gate for reads, or for writes when a role is needed (`api.tenant_gate`)."""
    return await as_member(info, tenant_id, lambda service, _held, _moved: work(service), role)


async def as_member(
    info: strawberry.Info,
    tenant_id: str,
    work: Callable[[SyncService, str, bool], _T],
    role: str | None = None,
) -> _T:
    """`for_tenant`, with `work` told the caller's role and whether the tenant is one
    of membership as data (`checked_role`, inside the caller's and the tenant's gates:
    the check reads the tenant's access items)."""
    context: Context = info.context
    caller = context.caller()
    log = request_log.current()
    if log is not None:
        log.tenant = tenant_id
    # The runner returns, even to a cancelled field, only once the call has: the
    # slot is held as long as the call runs (`api.worker_threads`).
    # The check is a call on the tenant like the work: inside both gates.
    async with (
        context.callers.enter(caller.sub),
        (context.reads if role is None else context.writes).enter(tenant_id),
    ):
        held, moved = await checked_role(context, tenant_id)
        if role is not None:
            require(held, role)
        return await context.run_blocking(lambda s: work(s, held, moved), context.service)


async def checked_role(context: Context, tenant_id: str) -> tuple[str, bool]:
    """The caller's role in `tenant_id`, and whether the tenant is one of membership
    as data (contract 6): its live Member record's role there (NotAMember without
    one), else the token's claim's. One Query per tenant and request, at the first
    field that asks; the others await it."""
    caller = context.caller()
    memo = context.budget.access
    future = memo.get(tenant_id)
    if not is_identifier(tenant_id):  # no tenant's: the claim refuses it, or the service
        future = asyncio.get_running_loop().create_future()
        future.set_result(Access())
    elif future is None:
        future = memo[tenant_id] = asyncio.ensure_future(
            context.run_blocking(lambda s: s.access(tenant_id, caller.sub), context.service)
        )
        log = request_log.current()
        if log is not None:
            log.track(future)
    try:
        access = await asyncio.shield(future)
    except asyncio.CancelledError:
        # Its gate slots are held until the read returns (`api.worker_threads`); the
        # read goes on for the request's other fields.
        await asyncio.wait({future})
        raise
    return access.role_of(lambda: caller.role(tenant_id)), access.moved


def viewer(info: strawberry.Info, tenant_id: str) -> str:
    """The caller's sub with the groups its access read found in `tenant_id` (a
    `Viewer`; contract 3.12, "Groups"), once `checked_role` has read it: what the
    service's who-sees-what checks are given."""
    context: Context = info.context
    sub = context.caller().sub
    future = context.budget.access.get(tenant_id)
    if future is None or not future.done() or future.cancelled() or future.exception():
        return sub
    access: Access = future.result()
    return access.viewer(sub)


class TenantBatch(Generic[_K, _T]):
    """Pieces of work that fields ask one at a time (a download link per attachment
    of a page), gathered while the fields resolve, then done for each tenant in one
    call of `work` in a worker thread, through the tenant's read gate: a page's
    work is off the event loop and inside the tenant's admission, like its read
    (`for_tenant`). The caller was checked by the field that read the objects."""

    def __init__(
        self, context: Context, work: Callable[[SyncService, str, list[_K]], dict[_K, _T]]
    ) -> None:
        self._context = context
        self._work = work
        self._pending: dict[str, dict[_K, asyncio.Future[_T]]] = {}
        self._flush: asyncio.Task[None] | None = None
        self.calls = 0  # calls of `work` so far (tests count them)

    def get(self, tenant_id: str, key: _K) -> asyncio.Future[_T]:
        pending = self._pending.setdefault(tenant_id, {})
        future = pending.get(key)
        if future is None:
            future = pending[key] = asyncio.get_running_loop().create_future()
            if self._flush is None:
                self._flush = asyncio.ensure_future(self._flushed())
                # Not the fields' task: cancelling them does not end it, so the
                # request's line waits for it like for a call.
                log = request_log.current()
                if log is not None:
                    log.track(self._flush)
        return future

    async def _flushed(self) -> None:
        # graphql-core resolves sibling objects' fields in the same steps of the
        # event loop: a few steps later, every field of the page has asked.
        for _ in range(4):
            await asyncio.sleep(0)
        batches, self._pending, self._flush = self._pending, {}, None
        await asyncio.gather(*(self._run(t, futures) for t, futures in batches.items()))

    async def _run(self, tenant_id: str, futures: dict[_K, asyncio.Future[_T]]) -> None:
        try:
            async with (
                self._context.callers.enter(self._context.caller().sub),
                self._context.reads.enter(tenant_id),
            ):
                await checked_role(self._context, tenant_id)  # asked once a request
                # What the fields cancelled meanwhile (another failed) no longer ask.
                futures = {key: f for key, f in futures.items() if not f.done()}
                if not futures:
                    return
                self.calls += 1
                done = await self._context.run_blocking(
                    self._work, self._context.service, tenant_id, list(futures)
                )
        except Exception as exc:  # each field that asked reports it
            for future in futures.values():
                if not future.done():
                    future.set_exception(exc)
            return
        for key, future in futures.items():
            if not future.done():
                future.set_result(done[key])


def batch(
    info: strawberry.Info,
    name: str,
    work: Callable[[SyncService, str, list[_K]], dict[_K, _T]],
) -> TenantBatch[_K, _T]:
    """The request's (a socket's) batch of `name`, made at its first use."""
    batches = info.context.batches
    if name not in batches:
        batches[name] = TenantBatch(info.context, work)
    return batches[name]


def given(value: Any) -> Any:
    """An optional argument's value; None when the request left it out."""
    return None if value is strawberry.UNSET else value
