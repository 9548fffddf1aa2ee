"""`pushChanges`: many queued offline mutations in one request.

`PushMutation` is a @oneOf input with one field per mutation of every
synchronized type (`createPerson`, `updatePerson`, ...), built from the same
declarations as the single mutations. Conflicts are data here, not GraphQL
errors, so offline clients read them directly.
"""

from typing import Any

import strawberry

from api import request_log
from api.auth import READER
from api.domain.errors import RoleForbidden
from api.domain.mutations import Mutation, Verb
from api.graphql.context import as_member, viewer
from api.graphql.directives import authenticated
from api.graphql.types import (
    ITEM_TYPE_SCHEMAS,
    ItemTypeSchema,
    SynchronizedItem,
    build,
    to_synchronized_item,
)
from api.graphql.visibility import SetVisibilityInput, share
from api.service import PushResult as DomainPushResult
from api.service import PushStatus as DomainPushStatus
from api.service import SyncService
from api.service.writing import MAX_PUSH

PushStatus = strawberry.enum(DomainPushStatus, description="What became of one pushed mutation.")

# field of PushMutation -> (item type schema, verb, input type)
_VERBS: tuple[Verb, ...] = ("create", "update", "delete", "put")
_ENTRIES: dict[str, tuple[ItemTypeSchema, Verb, Any]] = {
    f"{verb}{s.item_type.name}": (s, verb, getattr(s, f"{verb}_input"))
    for s in ITEM_TYPE_SCHEMAS
    for verb in _VERBS
}

PushMutation = strawberry.input(
    build(
        "PushMutation",
        {
            **{name: entry[2] | None for name, entry in _ENTRIES.items()},
            "setVisibility": SetVisibilityInput | None,
        },
        {name: strawberry.field(default=strawberry.UNSET) for name in (*_ENTRIES, "setVisibility")},
    ),
    one_of=True,
    description="One queued mutation: set exactly one field.",
)


@strawberry.input
class PushChangesInput:
    tenantID: strawberry.ID
    mutations: list[PushMutation] = strawberry.field(  # type: ignore[valid-type]
        description="At most 100, applied in order, each atomically on its own."
    )
    since: strawberry.ID | None = strawberry.field(
        default=None,
        description="The change token of the copy the device edited (its last sync's "
        "`changeToken`); null when it holds none. A token from before the tenant was "
        "deleted (one a sync would answer TENANT_DELETED) refuses every entry with "
        "TENANT_DELETED, writing nothing: the device drops its copy and its outbox.",
    )


@strawberry.type
class PushError:
    code: str
    message: str
    reason: str | None = strawberry.field(
        default=None,
        description="With FORBIDDEN: NOT_A_MEMBER (the device lets go of the tenant) or ROLE.",
    )


@strawberry.type
class PushResult:
    clientMutationID: str | None
    status: PushStatus  # type: ignore[valid-type]
    item: SynchronizedItem | None = strawberry.field(
        description="APPLIED: the entity after the write. CONFLICT: the server's current "
        "version (a DeletedItem when deleted)."
    )
    error: PushError | None
    replayed: bool = strawberry.field(
        description="True when this is the stored result of an earlier push of the same "
        "clientMutationID; nothing was written this time."
    )


@strawberry.type
class PushChangesPayload:
    results: list[PushResult] = strawberry.field(description="One per mutation, in order.")


def to_mutations(input: PushChangesInput, release: int | None = None) -> list[Mutation]:
    mutations = []
    for entry in input.mutations:
        shared = getattr(entry, "setVisibility", None)
        if shared not in (None, strawberry.UNSET):
            mutations.append(share(shared, release))
            continue
        name = next(n for n in _ENTRIES if getattr(entry, n) not in (None, strawberry.UNSET))
        schema, verb, _ = _ENTRIES[name]
        mutations.append(schema.mutation(verb, getattr(entry, name), release))
    return mutations


def to_result(result: DomainPushResult) -> PushResult:
    error = result.error
    return PushResult(
        clientMutationID=result.mutation.client_mutation_id,
        status=result.status,
        item=None if result.record is None else to_synchronized_item(result.record),
        error=None
        if error is None
        else PushError(code=error.code, message=str(error), reason=error.reason),
        replayed=result.replayed,
    )


async def push_changes(info: strawberry.Info, input: PushChangesInput) -> PushChangesPayload:
    if len(input.mutations) <= MAX_PUSH:  # else the service says why
        info.context.budget.spend_writes(len(input.mutations))
    mutations = to_mutations(input, info.context.client_release())

    def push(s: SyncService, role: str, moved: bool) -> list[DomainPushResult]:
        if role == READER:
            # Each entry is refused alone, with its code, so that an outbox drains.
            refusal = RoleForbidden("your role in this tenant is reader; writes need writer")
            return [
                DomainPushResult(m, DomainPushStatus.REJECTED, error=refusal) for m in mutations
            ]
        return s.push(
            input.tenantID, mutations, viewer(info, input.tenantID), input.since, role, moved
        )

    # Any member may push (a reader's entries are refused one by one), in the writes' gate.
    results = await as_member(info, input.tenantID, push, role=READER)
    _count(results)
    return PushChangesPayload(results=[to_result(r) for r in results])


def _count(results: list[DomainPushResult]) -> None:
    """The entries' statuses and replays, for the request's metrics (`api.metrics`)."""
    log = request_log.current()
    if log is None:
        return
    for result in results:
        status = result.status.value
        log.push_statuses[status] = log.push_statuses.get(status, 0) + 1
        log.replays += result.replayed


MUTATIONS: dict[str, Any] = {
    "pushChanges": strawberry.mutation(
        resolver=push_changes,
        description=f"Up to {MAX_PUSH} queued mutations of any type, applied in order, "
        "each atomically on its own; one result per mutation.",
        **authenticated(),
    ),
}
