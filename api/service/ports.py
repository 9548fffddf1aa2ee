"""What the service needs of storage (`Store`) and what it answers (pages, push
results): the types shared by its capabilities and the GraphQL layer."""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from api.domain.chain import NO_STREAMS, Head, Streams
from api.domain.deletion import DeletionEnd, DeletionMark
from api.domain.errors import SyncError
from api.domain.membership import Access, MemberGuard, Roster
from api.domain.mutations import Mutation, StoredOutcome, Write
from api.domain.records import LogTail, Record


class Store(Protocol):
    def head(self, tenant_id: str) -> Head | None: ...
    def log_tail(self, tenant_id: str, after: str | None, count: int) -> LogTail: ...
    def get(self, tenant_id: str, entity_id: str) -> Record | None: ...
    def read_many(
        self, tenant_id: str, entity_ids: Iterable[str], client_mutation_ids: Iterable[str]
    ) -> tuple[dict[str, Record], dict[str, StoredOutcome]]: ...
    def changes(
        self, tenant_id: str, after: str | None, upper: str, limit: int
    ) -> tuple[list[Record], bool]: ...
    def commit(
        self,
        tenant_id: str,
        writes: Sequence[Write],
        head: str | None,
        check: Collection[str],
        gone: Collection[str] = (),
        later_check: Collection[str] = (),
        later_gone: Collection[str] = (),
        copies: bool = False,
        guard: MemberGuard | None = None,
        streams: Streams = NO_STREAMS,
    ) -> None: ...
    def stream_entries_applied(
        self, tenant_id: str, present: Collection[str], gone: Collection[str]
    ) -> bool: ...
    def stream_range(
        self, tenant_id: str, principal: str, after: str | None, upper: str, limit: int
    ) -> tuple[list[Record], bool]: ...
    def access(self, tenant_id: str, sub: str) -> Access: ...
    def roster(self, tenant_id: str) -> Roster: ...
    def get_outcome(self, tenant_id: str, client_mutation_id: str) -> StoredOutcome | None: ...
    def later_copies(
        self,
        tenant_id: str,
        floors: Sequence[tuple[str, int]],
        after: tuple[str, int, str] | None,
        limit: int,
    ) -> tuple[list[Record], tuple[str, int, str] | None]: ...
    def version(
        self, tenant_id: str, entity_id: str, token: str, gone_before: int | None = None
    ) -> Record | None: ...
    def mark_deleting(self, tenant_id: str, by: str, at_ms: int) -> DeletionMark | None: ...
    def check_mark(self, tenant_id: str, mark: DeletionMark) -> None: ...
    def remove_items(self, tenant_id: str, mark: DeletionMark, limit: int) -> int: ...
    def finish_deletion(
        self, tenant_id: str, mark: DeletionMark, quota_bytes: int, now_s: int
    ) -> DeletionEnd | None: ...
    def versions(
        self,
        tenant_id: str,
        entity_id: str,
        before: str | None,
        limit: int,
        gone_before: int | None = None,
    ) -> tuple[list[Record], bool]: ...
    def put_outcome(self, tenant_id: str, outcome: StoredOutcome) -> None: ...


@dataclass(frozen=True)
class Page:
    items: list[Record]
    cursor: str | None
    change_token: str | None
    # Log entries read beyond the first page's, to fill a page of chosen types.
    scanned: int = 0
    # A first sync's: deletions up to this token are left out of its pages.
    settled: str | None = None
    # The tenant's first token when the sync began (None: not known), in its cursors.
    born: str | None = None
    # A page of a sync's re-read of groups its caller joined or left (never cut).
    regrouped: bool = False


@dataclass(frozen=True)
class Written:
    record: Record
    replayed: bool = False


class PushStatus(enum.Enum):
    APPLIED = "APPLIED"
    CONFLICT = "CONFLICT"
    REJECTED = "REJECTED"


@dataclass(frozen=True)
class PushResult:
    mutation: Mutation
    status: PushStatus
    record: Record | None = None  # after the write; the current version on CONFLICT
    error: SyncError | None = None
    replayed: bool = False
