"""The DynamoDB store: the service's `Store`, over the single table.

Behind it: reads (`api.storage.reads`), the transaction writer
(`api.storage.transactions`), item codecs (`api.storage.codecs`). Every PynamoDB
and botocore exception is translated at this boundary (`api.storage.errors`) into
a domain error (`api.domain.errors`); nothing above this package sees them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

from api.domain.chain import NO_STREAMS, Head, Streams
from api.domain.deletion import DeletionEnd, DeletionMark
from api.domain.devices import WRITER_DEVICE
from api.domain.membership import Access, MemberGuard, Roster
from api.domain.mutations import StoredOutcome, Write
from api.domain.records import LogTail, Record
from api.storage import members, reads, streams, tenants, transactions


class DynamoStore:
    """Reads and writes records of the single table (key design: `api.storage.keys`)."""

    def on_response(self, hook: Callable[..., None]) -> None:
        """Call `hook(parsed=...)` after every DynamoDB call (e.g. to count capacity)."""
        reads.connection().client.meta.events.register(
            "after-call.dynamodb", hook, unique_id=f"{hook.__module__}.{hook.__qualname__}"
        )

    def head(self, tenant_id: str) -> Head | None:
        return reads.head(tenant_id)

    def log_tail(self, tenant_id: str, after: str | None, count: int) -> LogTail:
        return reads.log_tail(tenant_id, after, count)

    def get(self, tenant_id: str, entity_id: str) -> Record | None:
        return reads.entity(tenant_id, entity_id)

    def read_many(
        self, tenant_id: str, entity_ids: Iterable[str], client_mutation_ids: Iterable[str]
    ) -> tuple[dict[str, Record], dict[str, StoredOutcome]]:
        return reads.many(tenant_id, entity_ids, client_mutation_ids)

    def changes(
        self, tenant_id: str, after: str | None, upper: str, limit: int
    ) -> tuple[list[Record], bool]:
        return reads.log_range(tenant_id, after, upper, limit)

    def version(
        self, tenant_id: str, entity_id: str, token: str, gone_before: int | None = None
    ) -> Record | None:
        return reads.version(tenant_id, entity_id, token, gone_before)

    def later_copies(
        self,
        tenant_id: str,
        floors: Sequence[tuple[str, int]],
        after: tuple[str, int, str] | None,
        limit: int,
    ) -> tuple[list[Record], tuple[str, int, str] | None]:
        return reads.later_copies(tenant_id, floors, after, limit)

    def versions(
        self,
        tenant_id: str,
        entity_id: str,
        before: str | None,
        limit: int,
        gone_before: int | None = None,
    ) -> tuple[list[Record], bool]:
        return reads.versions(tenant_id, entity_id, before, limit, gone_before)

    def mark_deleting(self, tenant_id: str, by: str, at_ms: int) -> DeletionMark | None:
        return tenants.mark_deleting(tenant_id, by, at_ms)

    def check_mark(self, tenant_id: str, mark: DeletionMark) -> None:
        tenants.check_mark(tenant_id, mark)

    def remove_items(self, tenant_id: str, mark: DeletionMark, limit: int) -> int:
        return tenants.remove_items(tenant_id, mark, limit)

    def finish_deletion(
        self, tenant_id: str, mark: DeletionMark, quota_bytes: int, now_s: int
    ) -> DeletionEnd | None:
        return tenants.finish(tenant_id, mark, quota_bytes, now_s)

    def get_outcome(self, tenant_id: str, client_mutation_id: str) -> StoredOutcome | None:
        return reads.outcome(tenant_id, client_mutation_id)

    def put_outcome(self, tenant_id: str, outcome: StoredOutcome) -> None:
        transactions.put_outcome(tenant_id, outcome)

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
    ) -> None:
        # The writing request's device (X-Device-ID), kept on the head: the stream's
        # silent pushes skip it (read here, where the writer's commit runs).
        transactions.commit(
            tenant_id,
            writes,
            head,
            check,
            gone,
            later_check,
            later_gone,
            copies,
            guard,
            streams,
            device=WRITER_DEVICE.get(),
        )

    def stream_entries_applied(
        self, tenant_id: str, present: Collection[str], gone: Collection[str]
    ) -> bool:
        return streams.entries_applied(tenant_id, present, gone)

    def stream_range(
        self, tenant_id: str, principal: str, after: str | None, upper: str, limit: int
    ) -> tuple[list[Record], bool]:
        return streams.stream_range(tenant_id, principal, after, upper, limit)

    def access(self, tenant_id: str, sub: str) -> Access:
        return members.access(tenant_id, sub)

    def roster(self, tenant_id: str) -> Roster:
        return members.roster(tenant_id)

    def bulk_load(self, tenant_id: str, records: list[Record]) -> None:
        """Load records of one tenant (an import, or benchmark data) with BatchWriteItem.

        Not transactional and not for a tenant that is being written. The records
        extend the tenant's chain in token order, and the head moves only after
        every entry is written, so a sync never bounds itself above a missing one.
        """
        if not records:
            return
        head = reads.head(tenant_id)
        if head is None:
            transactions.bulk_load(tenant_id, None, records)
        else:
            transactions.bulk_load(tenant_id, head.token, records, head.copies)
