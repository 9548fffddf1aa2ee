"""Query and Mutation: thin resolvers that parse, check the tenant, call `SyncService`.

Resolvers are async and run the (blocking) service call in a worker thread, so
one server process keeps serving other requests while DynamoDB answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, TypeVar

import strawberry
from graphql import GraphQLError
from starlette.concurrency import run_in_threadpool
from strawberry.extensions import (
    AddValidationRules,
    DisableIntrospection,
    MaxAliasesLimiter,
    MaxTokensLimiter,
    QueryDepthLimiter,
    SchemaExtension,
)
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.schema import DEFAULT_ALLOWED_OPERATION_TYPES
from strawberry.types.execution import ExecutionContext, ExecutionResult
from strawberry.types.graphql import OperationType

from api import request_log
from api.auth import OWNER, READER, WRITER, Principal
from api.domain.catalog import BY_CODE
from api.domain.errors import (
    BadUserInput,
    Forbidden,
    SyncError,
    Unauthenticated,
    Unavailable,
)
from api.domain.mutations import Verb
from api.graphql.attachments import (
    Attachment,
    RequestUploadPayload,
    to_attachment,
    to_upload_payload,
)
from api.graphql.directives import authenticated
from api.graphql.documents import BoundedDocuments, ValidDocuments
from api.graphql.errors import ErrorCodes, with_codes
from api.graphql.execution import (
    PlainRecordExecutionContext,
    plain_record_classes,
    plain_record_fields,
)
from api.graphql.exports import TenantExportPayload, to_payload
from api.graphql.history import RestorePayload, RestoreVersionInput, VersionList
from api.graphql.push import PushChangesInput, PushChangesPayload, to_mutations, to_result
from api.graphql.scalars import SCALAR_MAP
from api.graphql.subscription import ChangeFeed, subscription_fields
from api.graphql.tenancy import DeleteTenantPayload
from api.graphql.types import (
    ITEM_TYPE_SCHEMAS,
    DeletedItemType,
    ItemTypeSchema,
    SynchronizedItemList,
    to_deleted_item,
    to_synchronized_item,
)
from api.service import PushResult, PushStatus, SyncService, Written
from api.service.history import DEFAULT_VERSIONS, MAX_VERSIONS
from api.service.reading import DEFAULT_LIMIT, MAX_LIMIT, MAX_SCANNED
from api.service.tenancy import ITEMS_PER_CALL
from api.service.writing import MAX_PUSH
from api.settings import Settings
from api.tenant_gate import READERS_PER_TENANT, TenantGate

logger = logging.getLogger("api.graphql")
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


async def _for_tenant(
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


def _given(value: Any) -> Any:
    return None if value is strawberry.UNSET else value


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
    requested = _given(limit)
    if requested is None or 1 <= requested <= MAX_LIMIT:  # else the service says why
        info.context.budget.spend_items(DEFAULT_LIMIT if requested is None else requested)
    chosen = _given(types)
    wanted = None if chosen is None else frozenset(BY_CODE[t.value] for t in chosen)
    if wanted is not None and not wanted:
        raise BadUserInput("types must name at least one type")
    budget: RequestBudget = info.context.budget
    # Pages of chosen types, and a first sync's, leave changes out and read on.
    allowance = budget.take_scans()
    try:
        page = await _for_tenant(
            info,
            tenantID,
            lambda s: s.changes(
                tenantID,
                since=_given(since),
                cursor=_given(cursor),
                limit=_given(limit),
                types=wanted,
                max_scanned=allowance,
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


def _query_fields(s: ItemTypeSchema) -> dict[str, Any]:
    async def get(info: strawberry.Info, tenantID: strawberry.ID, id: strawberry.ID) -> Any:
        record = await _for_tenant(info, tenantID, lambda svc: svc.get(s.item_type, tenantID, id))
        return None if record is None else s.to_object(record)

    get.__annotations__ = {
        "info": strawberry.Info,
        "tenantID": strawberry.ID,
        "id": strawberry.ID,
        "return": s.object_type | None,
    }
    return {s.field_name: strawberry.field(resolver=get, **authenticated())}


def _mutation_fields(s: ItemTypeSchema) -> dict[str, Any]:
    name, field_name = s.item_type.name, s.field_name

    async def _apply(info: strawberry.Info, verb: Verb, input: Any) -> Written:
        info.context.budget.spend_writes(1)
        mutation = s.mutation(verb, input)
        by = info.context.caller().sub
        return await _for_tenant(
            info, mutation.tenant_id, lambda svc: svc.apply(mutation, by), role=WRITER
        )

    async def create(info: strawberry.Info, input: Any) -> Any:
        written = await _apply(info, "create", input)
        return s.create_payload(
            **{field_name: s.to_object(written.record)}, replayed=written.replayed
        )

    async def update(info: strawberry.Info, input: Any) -> Any:
        written = await _apply(info, "update", input)
        return s.update_payload(
            **{field_name: s.to_object(written.record)}, replayed=written.replayed
        )

    async def delete(info: strawberry.Info, input: Any) -> Any:
        written = await _apply(info, "delete", input)
        return s.delete_payload(
            deletedItem=to_deleted_item(written.record), replayed=written.replayed
        )

    fields = {}
    for verb, resolver, input_type, payload in (
        ("create", create, s.create_input, s.create_payload),
        ("update", update, s.update_input, s.update_payload),
        ("delete", delete, s.delete_input, s.delete_payload),
    ):
        resolver.__annotations__ = {"info": strawberry.Info, "input": input_type, "return": payload}
        fields[f"{verb}{name}"] = strawberry.mutation(resolver=resolver, **authenticated())
    return fields


async def push_changes(info: strawberry.Info, input: PushChangesInput) -> PushChangesPayload:
    if len(input.mutations) <= MAX_PUSH:  # else the service says why
        info.context.budget.spend_writes(len(input.mutations))
    mutations = to_mutations(input)
    caller = info.context.caller()
    by = caller.sub
    if caller.role(input.tenantID) == READER:
        # Each entry is refused alone, with its code, so that an outbox drains.
        refusal = Forbidden("your role in this tenant is reader; writes need writer")
        return PushChangesPayload(
            results=[
                to_result(PushResult(m, PushStatus.REJECTED, error=refusal)) for m in mutations
            ]
        )
    results = await _for_tenant(
        info, input.tenantID, lambda s: s.push(input.tenantID, mutations, by), role=WRITER
    )
    return PushChangesPayload(results=[to_result(r) for r in results])


async def history(
    info: strawberry.Info,
    tenantID: strawberry.ID,
    id: strawberry.ID,
    cursor: str | None = strawberry.UNSET,
    limit: int | None = strawberry.UNSET,
) -> VersionList:
    requested = _given(limit)
    if requested is None or 1 <= requested <= MAX_VERSIONS:  # else the service says why
        info.context.budget.spend_items(DEFAULT_VERSIONS if requested is None else requested)
    versions = await _for_tenant(
        info, tenantID, lambda s: s.versions(tenantID, id, _given(cursor), requested)
    )
    return VersionList(
        items=[to_synchronized_item(r) for r in versions.items], cursor=versions.cursor
    )


async def restore_version(info: strawberry.Info, input: RestoreVersionInput) -> RestorePayload:
    info.context.budget.spend_writes(1)
    by = info.context.caller().sub
    written = await _for_tenant(
        info,
        input.tenantID,
        lambda s: s.restore(
            input.tenantID,
            input.id,
            input.changeToken,
            input.version,
            _given(input.clientMutationID),
            by,
        ),
        role=WRITER,
    )
    return RestorePayload(item=to_synchronized_item(written.record), replayed=written.replayed)


async def delete_tenant(
    info: strawberry.Info, tenantID: strawberry.ID, confirm: strawberry.ID
) -> DeleteTenantPayload:
    budget: RequestBudget = info.context.budget
    budget.spend_writes(MAX_PUSH)  # one deletion call per request, aliases included
    caller = info.context.caller()
    deletion = await _for_tenant(
        info, tenantID, lambda s: s.delete_tenant(tenantID, confirm, caller.sub), role=OWNER
    )
    return DeleteTenantPayload(removedItems=deletion.removed, done=deletion.done)


async def export_tenant(
    info: strawberry.Info, tenantID: strawberry.ID, exportID: strawberry.ID | None = None
) -> TenantExportPayload:
    budget: RequestBudget = info.context.budget
    budget.spend_writes(MAX_PUSH)  # one export call per request, aliases included
    caller = info.context.caller()
    exports = info.context.service.exports
    if exports is None:
        raise Unavailable("exports are not served here")

    def work(_: SyncService) -> tuple[Any, tuple[str, datetime] | None]:
        job = exports.export_tenant(tenantID, exportID, caller.sub)
        return job, exports.link(job) if job.done else None

    job, link = await _for_tenant(info, tenantID, work, role=OWNER)
    return to_payload(job, link)


async def request_upload(
    info: strawberry.Info, tenantID: strawberry.ID, sha256: str, size: int, contentType: str
) -> RequestUploadPayload:
    info.context.budget.spend_writes(1)  # a HeadObject each: bounded like writes
    attachments = info.context.service.attachments
    if attachments is None:
        raise Unavailable("attachments are not served here")
    answer = await _for_tenant(
        info,
        tenantID,
        lambda _: attachments.request_upload(tenantID, sha256, size, contentType),
        role=WRITER,
    )
    return to_upload_payload(answer)


async def attachment(info: strawberry.Info, tenantID: strawberry.ID, sha256: str) -> Attachment:
    info.context.budget.spend_items(1)  # a HeadObject each: bounded like items
    attachments = info.context.service.attachments
    if attachments is None:
        raise Unavailable("attachments are not served here")
    found = await _for_tenant(info, tenantID, lambda _: attachments.attachment(tenantID, sha256))
    return to_attachment(tenantID, found)


def _root(name: str, fields: dict[str, Any]) -> Any:
    namespace: dict[str, Any] = {"__module__": __name__, **fields}
    return strawberry.type(type(name, (), namespace))


Query = _root(
    "Query",
    {
        "changes": strawberry.field(resolver=changes, **authenticated()),
        "history": strawberry.field(
            resolver=history,
            description="An entity's earlier versions, newest first, kept for the retention "
            "period (not its current version).",
            **authenticated(),
        ),
        "attachment": strawberry.field(
            resolver=attachment,
            description="A blob of the tenant by the SHA-256 of its bytes, with a download "
            "link valid 15 minutes; NOT_FOUND unless those bytes are uploaded.",
            **authenticated(),
        ),
        **{k: v for s in ITEM_TYPE_SCHEMAS for k, v in _query_fields(s).items()},
    },
)
Mutation = _root(
    "Mutation",
    {
        **{k: v for s in ITEM_TYPE_SCHEMAS for k, v in _mutation_fields(s).items()},
        "restoreVersion": strawberry.mutation(
            resolver=restore_version,
            description="Write an earlier version's fields as the entity's next version: an "
            "update guarded by `changeToken`, with conflicts as usual.",
            **authenticated(),
        ),
        "deleteTenant": strawberry.mutation(
            resolver=delete_tenant,
            description="Owners only: delete every item of the tenant, in calls of up to "
            f"{ITEMS_PER_CALL} items (call again until `done`). From the first call, the "
            "tenant's writes and syncs are TENANT_DELETED. `confirm` repeats the tenantID.",
            **authenticated(),
        ),
        "exportTenant": strawberry.mutation(
            resolver=export_tenant,
            description="Owners only: export the tenant's live entities and their earlier "
            "versions as a gzipped JSON Lines file. Without `exportID`, starts an export; with "
            "it, goes on (each call within a bounded cost). Call again until `done`, then "
            "download `downloadURL`.",
            **authenticated(),
        ),
        "requestUpload": strawberry.mutation(
            resolver=request_upload,
            description="Writers: upload a blob (at most 10 MiB) addressed by the SHA-256 "
            "of its bytes. `alreadyPresent` when the tenant holds it; else one presigned PUT, "
            "valid 15 minutes, that refuses other bytes, sizes or types. QUOTA_EXCEEDED when "
            "the tenant's blobs have no room for `size` more bytes.",
            **authenticated(),
        ),
        "pushChanges": strawberry.mutation(
            resolver=push_changes,
            description=f"Up to {MAX_PUSH} queued mutations of any type, applied in order, "
            "each atomically on its own; one result per mutation.",
            **authenticated(),
        ),
    },
)

Subscription = _root("Subscription", subscription_fields())


class SyncSchema(strawberry.Schema):
    documents: ValidDocuments  # the parsed documents this schema keeps (bounded)

    async def execute(
        self,
        query: str | None,
        variable_values: dict[str, Any] | None = None,
        context_value: Any | None = None,
        root_value: Any | None = None,
        operation_name: str | None = None,
        allowed_operation_types: Iterable[OperationType] | None = None,
        operation_extensions: dict[str, Any] | None = None,
    ) -> ExecutionResult:
        """As Strawberry's, never for a subscription: `execute` runs queries and
        mutations (over HTTP and WebSocket alike); a subscription over HTTP is then
        refused before it runs (`api.app`: 400, BAD_USER_INPUT), where Strawberry
        would fail inside it."""
        allowed = set(allowed_operation_types or DEFAULT_ALLOWED_OPERATION_TYPES)
        return await super().execute(
            query,
            variable_values,
            context_value,
            root_value,
            operation_name,
            allowed - {OperationType.SUBSCRIPTION},
            operation_extensions,
        )

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        # Strawberry logs a traceback for every error. Expected errors (conflicts, bad
        # input, auth) are already in the request's log line with their code, and
        # unexpected ones were logged with their traceback by ErrorCodes. Errors of
        # a subscription (over WebSocket) get their codes here: no HTTP view sees them.
        errors[:] = with_codes(errors)
        for error in errors:
            logger.debug("graphql error at %s: %s", error.path, error.message)


class _RecordOperation(SchemaExtension):
    def on_execute(self) -> Any:
        log = request_log.current()
        if log is not None:
            context = self.execution_context
            log.operation = context.operation_name or (
                context.operation_type.value if context.operation_type else None
            )
        yield


def make_schema(settings: Settings) -> SyncSchema:
    """The served schema: the same types whatever the settings, with the request limits."""
    # The limit rules are made once: the validation cache is keyed by the rule
    # classes too, and the limiters make new ones on every instantiation.
    documents = ValidDocuments()
    limit_rules = [
        *QueryDepthLimiter(max_depth=settings.max_query_depth).validation_rules,
        *MaxAliasesLimiter(max_alias_count=settings.max_aliases).validation_rules,
    ]
    extensions: list[Any] = [
        ErrorCodes,
        _RecordOperation,
        lambda: MaxTokensLimiter(max_token_count=settings.max_query_tokens),
        lambda: AddValidationRules(limit_rules),
        # Apps send the same few operations again and again: parse and validate
        # each distinct document once (validation was most of a small request's
        # time), within bounds (`api.graphql.documents`).
        lambda: BoundedDocuments(cache=documents),
    ]
    if not settings.introspection:
        extensions.append(DisableIntrospection)
    context_class: Any = type("RecordExecutionContext", (PlainRecordExecutionContext,), {})
    schema = SyncSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        types=[s.object_type for s in ITEM_TYPE_SCHEMAS],
        extensions=extensions,
        config=StrawberryConfig(scalar_map=SCALAR_MAP),
        execution_context_class=context_class,
    )
    schema.documents = documents
    record_types = [s.item_type.name for s in ITEM_TYPE_SCHEMAS] + ["DeletedItem", "Attachment"]
    context_class.plain_fields = plain_record_fields(schema, record_types)
    context_class.plain_classes = plain_record_classes(schema, context_class.plain_fields)
    return schema


def default_schema() -> SyncSchema:
    """The schema with default settings: what `scripts/export-schema` prints into
    schema.graphql (Strawberry's CLI calls it). Nothing is built at import."""
    return make_schema(Settings())
