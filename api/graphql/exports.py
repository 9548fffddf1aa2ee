"""`exportTenant` (contract 3.9): its payload, and where a finished export downloads."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote, urlencode

import strawberry

from api.domain.exports import ExportJob

# The route `api.app` serves downloads on.
DOWNLOAD_PATH = "/exports/{tenant}/{export}"


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
        description="Once done: the gzipped JSON Lines file, for `downloadExpiresAt`; "
        "ask again for a fresh link."
    )
    downloadExpiresAt: datetime | None = None


def to_payload(job: ExportJob, base_url: str, link: tuple[int, str] | None) -> TenantExportPayload:
    url = expires = None
    if link is not None:
        until, signature = link
        path = DOWNLOAD_PATH.format(
            tenant=quote(job.tenant_id, safe=""), export=quote(job.export_id, safe="")
        )
        url = f"{base_url.rstrip('/')}{path}?{urlencode({'until': until, 'sig': signature})}"
        expires = datetime.fromtimestamp(until / 1000, tz=UTC)
    return TenantExportPayload(
        exportID=strawberry.ID(job.export_id),
        done=job.done,
        entities=job.entities,
        versions=job.versions,
        bytes=job.bytes,
        downloadURL=url,
        downloadExpiresAt=expires,
    )
