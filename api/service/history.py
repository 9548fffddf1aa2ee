"""History: an entity's earlier versions, newest first, and restoring one as an
ordinary token-guarded update (contract 3.7). Each write that replaces a version
keeps it (`api.service.deciding.Plan.kept`) for the retention period
(`api.domain.retention`); this module only reads them and writes through
`Writing`, so a restore meets conflicts, outcomes and replays like any update.

A version is kept until its `exp` less the margin (`Retention.gone_before`): the
retention after the write that replaced it. Past that it is neither listed nor
restored (NOT_FOUND), whether or not DynamoDB's TTL has removed it yet."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from api.domain.errors import BadUserInput, NotFound
from api.domain.identifiers import check_entity_id, check_identifier
from api.domain.mutations import Mutation
from api.domain.records import Record
from api.domain.retention import Retention
from api.domain.tokens import check_token
from api.domain.visibility import sees
from api.ordering import wall_clock_ms
from api.service.ports import Store, Written
from api.service.writing import Writing

DEFAULT_VERSIONS = 20
MAX_VERSIONS = 100


@dataclass(frozen=True)
class Versions:
    items: list[Record]  # newest first
    # Continues below the last item: more are kept, or DynamoDB's page (1 MB) ended
    # there. None: no older version is kept.
    cursor: str | None


class History:
    def __init__(
        self,
        store: Store,
        writing: Writing,
        clock_ms: Callable[[], int] = wall_clock_ms,
        retention: Retention | None = None,
    ) -> None:
        self._store = store
        self._writing = writing
        self._clock_ms = clock_ms
        self._retention = retention or Retention()

    def versions(
        self,
        tenant_id: str,
        entity_id: str,
        cursor: str | None = None,
        limit: int | None = None,
        sub: str | None = None,
    ) -> Versions:
        """Earlier versions of `entity_id` (not the current one), newest first; a
        page of `limit` (at most MAX_VERSIONS), continued with `cursor`. For a caller
        `sub` (contract 3.12): NOT_FOUND when the entity is outside its view, as
        for an id no record has (one GetItem), and only the versions whose own
        visibility included it, in full pages."""
        check_identifier(tenant_id, "tenantID")
        check_entity_id(entity_id, "id")
        limit = DEFAULT_VERSIONS if limit is None else limit
        if not 1 <= limit <= MAX_VERSIONS:
            raise BadUserInput(f"limit must be between 1 and {MAX_VERSIONS}")
        before = None if cursor is None else check_token(cursor, "cursor")
        gone_before = self._retention.gone_before(self._clock_ms())
        current = self._store.get(tenant_id, entity_id)
        if current is None or not sees(current.visibility, sub):
            # No record has this id, or it is outside the caller's view: one answer
            # for both (after the head's read: TENANT_DELETED first, if so), so that
            # history tells a hidden record from none in no way.
            self._store.head(tenant_id)
            raise NotFound(f"{entity_id} does not exist")
        items, last = self._visible(tenant_id, entity_id, before, limit, gone_before, sub)
        # TENANT_DELETED while the tenant is being deleted: one GetItem of its head
        # (1 read unit), after the Query, so that a deletion marked before it is seen.
        self._store.head(tenant_id)
        return Versions(items, last)

    def _visible(
        self,
        tenant_id: str,
        entity_id: str,
        before: str | None,
        limit: int,
        gone_before: int,
        sub: str | None,
    ) -> tuple[list[Record], str | None]:
        """Up to `limit` versions the caller saw, below `before`, and a cursor only if
        another it saw follows: the versions it never saw are read past, never
        counted (a page of them would tell how often the record changed unseen). A
        page whose Query stopped at DynamoDB's 1 MB page ends at its last version
        seen, with a cursor (one that saw none reads on)."""
        seen: list[Record] = []
        more = True
        while more and len(seen) <= limit:
            size = limit + 1 - len(seen)  # one past the page: whether a seen one follows
            items, more = self._store.versions(tenant_id, entity_id, before, size, gone_before)
            seen += [r for r in items if sees(r.visibility, sub)]
            if not items:
                break
            before = items[-1].change_token
            if more and len(items) < size and seen and len(seen) <= limit:
                return seen, seen[-1].change_token  # cut at 1 MB: the rest next page
        if len(seen) > limit:
            return seen[:limit], seen[limit - 1].change_token
        return seen, None

    def restore(
        self,
        tenant_id: str,
        entity_id: str,
        change_token: str,
        version: str,
        client_mutation_id: str | None = None,
        by: str | None = None,
        role: str | None = None,
        moved: bool = False,
    ) -> Written:
        """Write the fields of an earlier version as the entity's next version, if its
        current version is still `change_token` (else CONFLICT, as any update)."""
        check_identifier(tenant_id, "tenantID")
        check_entity_id(entity_id, "id")
        check_token(version, "version")
        gone_before = self._retention.gone_before(self._clock_ms())
        kept = self._store.version(tenant_id, entity_id, version, gone_before)
        if kept is None:
            self._store.head(tenant_id)  # TENANT_DELETED rather than NOT_FOUND, if so
        if kept is None or kept.deleted or not sees(kept.visibility, by):
            raise NotFound(
                f"{entity_id} has no earlier version {version} "
                "(versions are kept for the retention period)"
            )
        item_type = kept.item_type
        changes = {name: kept.fields.get(name) for name in item_type.field_names}
        mutation = Mutation(
            "update",
            item_type,
            tenant_id,
            entity_id,
            change_token,
            changes,
            client_mutation_id=client_mutation_id,
        )
        return self._writing.apply(mutation, by, role, moved)
