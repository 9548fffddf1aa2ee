"""What the sweep of unreferenced blobs (`api.service.blob_sweep`) needs of the
blob store (`api.storage.blobs.S3Blobs`) and of the table
(`api.storage.blob_usage.BlobUsageTable`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from api.domain.attachments import ListedBlob
from api.domain.records import Record


class SweptBlobs(Protocol):
    """What the sweep needs of the blob store (`api.storage.blobs.S3Blobs`)."""

    def list_blobs(
        self, tenant_id: str, after: str | None, limit: int = ..., generation: str = ""
    ) -> tuple[list[ListedBlob], str | None]: ...
    def mark(
        self,
        tenant_id: str,
        sha256: str,
        older_than: datetime,
        since: int,
        generation: str = "",
    ) -> str | None:
        """The version id of the blob's marked current version (marked now, or
        already); None when gone or written since `older_than`."""
        ...

    def unmark(
        self, tenant_id: str, sha256: str, version_id: str, generation: str = ""
    ) -> bool: ...
    def delete_marked(
        self, tenant_id: str, sha256: str, version_id: str, generation: str = ""
    ) -> None:
        """Delete the marked version and the blob's versions before it, never one after."""
        ...

    def remove_other_generations(
        self, tenant_id: str, generation: str, limit: int, check: Callable[[], None]
    ) -> tuple[int, bool]:
        """Delete up to `limit` versions of the tenant's blobs of every generation but
        `generation` (each delete after `check`); how many, and whether none is left."""
        ...


class SweepTable(Protocol):
    """What the sweep needs of the table (`api.storage.blob_usage.BlobUsageTable`)."""

    def take(self, tenant_id: str, holder: str, now: int, until: int) -> dict[str, Any] | None: ...
    def generation(self, tenant_id: str) -> str:
        """The generation of the tenant's blob keys (the sweep touches no other);
        TenantDeleted while the tenant is being deleted."""
        ...

    def save(self, tenant_id: str, holder: str, state: dict[str, Any]) -> None: ...
    def reset_room(self, tenant_id: str, room: int, others_gone_at: int | None) -> int | None:
        """Set the room, less what is held for earlier generations' uploads unless they
        could not land after `others_gone_at`; until when a hold remains (None: none)."""
        ...

    def release(self, tenant_id: str, holder: str, due: int) -> None: ...
    def due(self, shard: int, now: int, after: str | None) -> tuple[list[str], str | None]: ...
    def records_page(
        self, tenant_id: str, partition: str, after: str | None, limit: int
    ) -> tuple[list[Record], str | None]: ...
