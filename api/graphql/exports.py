"""`exportTenant` (contract 3.9): a tenant exported in resumable calls, then
delivered by a presigned S3 link."""

from datetime import datetime
from typing import Any

import strawberry

from api.auth import OWNER
from api.domain.errors import Unavailable
from api.domain.exports import ExportJob
from api.graphql.context import RequestBudget, for_tenant, viewer
from api.graphql.directives import authenticated
from api.service import SyncService
from api.service.writing import MAX_PUSH


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


async def export_tenant(
    info: strawberry.Info, tenantID: strawberry.ID, exportID: strawberry.ID | None = None
) -> TenantExportPayload:
    budget: RequestBudget = info.context.budget
    budget.spend_writes(MAX_PUSH)  # one export call per request, aliases included
    exports = info.context.service.exports
    if exports is None:
        raise Unavailable("exports are not served here")

    def work(_: SyncService) -> tuple[Any, tuple[str, datetime] | None]:
        job = exports.export_tenant(tenantID, exportID, viewer(info, tenantID))
        return job, exports.link(job) if job.done else None

    job, link = await for_tenant(info, tenantID, work, role=OWNER)
    return to_payload(job, link)


MUTATIONS: dict[str, Any] = {
    "exportTenant": strawberry.mutation(
        resolver=export_tenant,
        description="Owners only: export the tenant's live entities and their earlier "
        "versions as a gzipped JSON Lines file. Without `exportID`, starts an export; with "
        "it, goes on (each call within a bounded cost). Call again until `done`, then "
        "download `downloadURL`.",
        **authenticated(),
    ),
}
