"""Whether a push's tenant refuses its writes because it is being deleted, or was
deleted since the copy the device edited (contract 3.8): what `api.service.writing`
asks before it answers a mutation without a transaction."""

from __future__ import annotations

from api.domain.chain import Head
from api.domain.errors import NotFound, SyncError, TenantDeleted
from api.domain.mutations import Mutation
from api.service.ports import Store, Written


class TenantCheck:
    """Whether a push's tenant refuses its writes (contract 3.8): it is being deleted,
    or was deleted since the copy the device edited. One consistent GetItem of the
    head, at most once a push, and only when an answer depends on it: a push with
    `since`, and a mutation answered without a transaction (a refusal, a replay);
    a write in a transaction conditions on the head, which refuses it when marked."""

    def __init__(self, store: Store, tenant_id: str, since: str | None) -> None:
        self._store = store
        self.tenant_id = tenant_id
        self._since = since
        self._read = False
        self._head: Head | None = None
        self._deleting: TenantDeleted | None = None

    def _load(self) -> None:
        if not self._read:
            try:
                self._head = self._store.head(self.tenant_id)
            except TenantDeleted as exc:
                self._deleting = exc
            self._read = True

    def of_push(self) -> TenantDeleted | None:
        """With `since`: refused exactly when a sync from it would be TENANT_DELETED
        (the tenant holds no changes, or was written again after it)."""
        if self._since is None:
            return None
        return self._before(self._since, "since")

    def of_answer(self, mutation: Mutation, decision: Written | SyncError) -> TenantDeleted | None:
        """For a mutation answered without writing: being deleted; or an update,
        delete or restore NOT_FOUND whose changeToken is from before the tenant was
        deleted (or the tenant holds no changes at all), as a sync from that token."""
        if self._since is not None or mutation.expected_token is None:
            # With `since`, the push's check said which life of the tenant the copy is
            # of: a NOT_FOUND then is a NOT_FOUND (a placeholder token included).
            self._load()
            return self._deleting
        if not isinstance(decision, NotFound):
            self._load()
            return self._deleting
        return self._before(mutation.expected_token, "changeToken")

    def _before(self, token: str, name: str) -> TenantDeleted | None:
        self._load()
        if self._deleting is not None:
            return self._deleting
        if self._head is None:
            return TenantDeleted(
                f"this tenant holds no changes, so {name} is from a deleted tenant: "
                "drop your copy (and its outbox) and sync with since: null"
            )
        if self._head.born is not None and token < self._head.born:
            return TenantDeleted(
                f"{name} is from before this tenant was deleted: drop your copy (and its "
                "outbox) and sync with since: null"
            )
        return None
