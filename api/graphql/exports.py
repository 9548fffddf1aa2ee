"""`exportTenant` (contract 3.9): its payload."""

from __future__ import annotations

from datetime import datetime

import strawberry

from api.domain.exports import ExportJob


@strawberry.type
class TenantExportPayload:
    exportID: strawberry.ID = strawberry.field(
        description="Send it back to go on with this export."
    )
    done: bool = strawberry.field(
        description="True when the file is complete; false: call again with `exportID`."
    )
    entities: int = strawberry.field(description="Live entities written so far.")
    versions: int = strawberry.field(description="Earlier versions written so far.")
    bytes: int = strawberry.field(description="Size of the gzipped file so far.")
    downloadURL: str | None = strawberry.field(
        description="Once done: the gzipped JSON Lines file, a presigned S3 GET that "
        "needs no token, until `downloadExpiresAt`; ask again for a fresh link."
    )
    downloadExpiresAt: datetime | None = None


def to_payload(job: ExportJob, link: tuple[str, datetime] | None) -> TenantExportPayload:
    url, expires = link if link is not None else (None, None)
    return TenantExportPayload(
        exportID=strawberry.ID(job.export_id),
        done=job.done,
        entities=job.entities,
        versions=job.versions,
        bytes=job.bytes,
        downloadURL=url,
        downloadExpiresAt=expires,
    )
