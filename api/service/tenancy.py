"""A tenant's data deleted in one call (contract 3.8): `deleteTenant`, owners only.

The call marks the tenant (from then on its writes and syncs are TENANT_DELETED),
closes its live subscriptions in this process, removes up to ITEMS_PER_CALL of
its items, and says whether it is done; calling again continues, so a tenant of
any size is deleted in bounded requests, and a call that dies halfway is resumed.
Its objects in S3 go first (blobs and exports' files, every version, and the
incomplete uploads of an export being published), counted apart from its items.
The last call removes the mark: the table keeps nothing of the tenant (but its
fence, its highest token, which the tenant written again starts above; its entry
in the blob sweep's registry, which a later sweep removes; and, if it reserved
uploads, its blob usage item reduced to a new generation of its blob keys). A
tenant written again later starts empty, and tokens from before are refused
(`api.service.reading`, `api.service.writing`).

The mark is the same id on the blob usage item (`requestUpload` and `attachment`
read it instead of the head) and on the head, written on both in one transaction,
and each call reads it (`DeletionMark`): every removal, in the table and in S3, is
made only while the head carries it, and the last step (the head, the usage item,
the fence) is one transaction conditioned on it. A call that finds no mark writes
one only on the life of the tenant it read (the head's first token, or no head),
so a call that read the tenant as the last deletion left it cannot mark the tenant
written again meanwhile. A call that runs late (an app's retry, two devices of the
owner) therefore finds its deletion over and answers `done`, touching nothing of
the tenant written again, or of a later deletion (docs/ordering.md, "Deleting a
tenant")."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from api.domain.deletion import DeletionOver
from api.domain.errors import BadUserInput
from api.domain.identifiers import check_identifier
from api.service.attachments import DEFAULT_QUOTA_BYTES, BlobStore
from api.service.ports import Store

logger = logging.getLogger(__name__)

# Items removed per call: 200 BatchWriteItem calls of 25, a few seconds on DynamoDB,
# far below API Gateway's 30 s and Lambda's timeout.
ITEMS_PER_CALL = 5000


@dataclass(frozen=True)
class Deletion:
    removed: int  # items removed so far, this call included
    done: bool  # nothing of the tenant is left
    blobs_removed: int = 0  # blobs (attachments) this call removed


class TenantDeletion:
    def __init__(
        self,
        store: Store,
        clock_ms: Callable[[], int],
        on_deleting: Callable[[str], None] | None = None,
        blobs: BlobStore | None = None,
        quota_bytes: int = DEFAULT_QUOTA_BYTES,
    ) -> None:
        self._store = store
        self._blobs = blobs
        self._quota_bytes = quota_bytes  # the room a tenant written again starts with
        self._clock_ms = clock_ms
        self._on_deleting = on_deleting  # closes the tenant's live subscriptions

    def delete_tenant(
        self, tenant_id: str, confirm: str, by: str, limit: int | None = None
    ) -> Deletion:
        """Up to `limit` items of the tenant removed (ITEMS_PER_CALL, read at each call)."""
        limit = ITEMS_PER_CALL if limit is None else limit
        check_identifier(tenant_id, "tenantID")
        if confirm != tenant_id:
            raise BadUserInput("confirm must repeat the tenantID: nothing was deleted")
        mark = self._store.mark_deleting(tenant_id, by, self._clock_ms())
        if mark is None:  # the deletion this call joined was ended meanwhile
            return Deletion(0, done=True)
        if self._on_deleting is not None:
            try:
                self._on_deleting(tenant_id)
            except Exception:  # closing sockets is a courtesy: never fail the deletion
                logger.exception("closing the subscriptions of a deleted tenant failed")
        blobs = removed = 0
        try:
            if self._blobs is not None:
                blobs = self._blobs.remove_all(
                    tenant_id, limit, lambda: self._store.check_mark(tenant_id, mark)
                )
            if blobs == limit:
                return Deletion(mark.removed, done=False, blobs_removed=blobs)
            removed = self._store.remove_items(tenant_id, mark, limit - blobs)
        except DeletionOver:
            return Deletion(mark.removed + removed, done=True, blobs_removed=blobs)
        if removed == limit - blobs:
            return Deletion(mark.removed + removed, done=False, blobs_removed=blobs)
        now_s = self._clock_ms() // 1000
        end = self._store.finish_deletion(tenant_id, mark, self._quota_bytes, now_s)
        if end is None:  # another call ended it first
            return Deletion(mark.removed + removed, done=True, blobs_removed=blobs)
        asked_at = datetime.fromtimestamp(end.asked_at_ms / 1000, tz=UTC).isoformat()
        logger.warning(
            "tenant deleted: tenant=%s asked_by=%s asked_at=%s items_removed=%d finished_by=%s",
            tenant_id,
            end.asked_by,
            asked_at,
            end.removed,
            by,
        )
        return Deletion(end.removed, done=True, blobs_removed=blobs)
