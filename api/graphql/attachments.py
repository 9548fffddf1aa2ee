"""Attachments (contract 3.10): `requestUpload` and `attachment`, their types,
the service's answers turned into them, and the `Attachment` an entity's field
holds (`api.graphql.types`)."""

from datetime import datetime
from typing import Any

import strawberry

from api.auth import WRITER
from api.domain.errors import Unavailable
from api.graphql.context import batch, for_tenant, viewer
from api.graphql.directives import authenticated
from api.service import SyncService
from api.service.attachments import Attachment as ServiceAttachment
from api.service.attachments import UploadAnswer

Link = tuple[str, datetime]


@strawberry.type
class HttpHeader:
    name: str
    value: str


@strawberry.type
class PresignedUpload:
    url: str = strawberry.field(description="Send the bytes here, within `expiresAt`.")
    method: str = strawberry.field(description="Always PUT.")
    headers: list[HttpHeader] = strawberry.field(
        description="Send each exactly so, with a body of exactly `size` bytes: S3 "
        "refuses any other length, type or SHA-256."
    )
    expiresAt: datetime


@strawberry.type
class RequestUploadPayload:
    alreadyPresent: bool = strawberry.field(
        description="True: the tenant already holds these bytes (same sha256, size and "
        "contentType); nothing to upload."
    )
    upload: PresignedUpload | None = strawberry.field(
        description="When not already present: the one request that uploads the bytes."
    )


@strawberry.type(
    description="A blob of the tenant, addressed by the SHA-256 of its bytes: what an "
    "entity's attachment field holds, and a link to download it."
)
class Attachment:
    sha256: str
    size: int
    contentType: str
    tenant_id: strawberry.Private[str]
    # Made when first asked for: a read that selects no `url` signs nothing. The
    # links of a page are signed together, off the event loop (`_links`).
    link: strawberry.Private[tuple[str, datetime] | None] = None

    @strawberry.field(
        description="A GET of the bytes, valid until `urlExpiresAt`: at least 10 minutes "
        "from this read (at most 15); read the entity or `attachment` again for a fresh one."
    )
    async def url(self, info: strawberry.Info) -> str:
        return (await self._signed(info))[0]

    @strawberry.field
    async def urlExpiresAt(self, info: strawberry.Info) -> datetime:
        return (await self._signed(info))[1]

    async def _signed(self, info: strawberry.Info) -> tuple[str, datetime]:
        if self.link is None:
            self.link = await batch(info, "links", _links).get(self.tenant_id, self.sha256)
        return self.link


def _links(service: SyncService, tenant_id: str, sha256s: list[str]) -> dict[str, Link]:
    """The download links a request's fields asked for, of one tenant: signed in one
    worker-thread call through the tenant's read gate (`TenantBatch`), so a page of
    1,000 photos neither holds the event loop (some 0.7 ms of CPU a link) nor
    escapes the tenant's admission."""
    if service.attachments is None:
        raise Unavailable("attachments are not served here")
    return service.attachments.download_links(tenant_id, sha256s)


@strawberry.input(
    description="A reference to a blob the tenant holds: upload it first (`requestUpload`). "
    "A write naming a blob the tenant does not hold with exactly this size and type is "
    "ATTACHMENT_MISSING, and writes nothing."
)
class AttachmentInput:
    sha256: str
    size: int
    contentType: str


def reference_of(value: AttachmentInput) -> dict[str, Any]:
    """An attachment input as the domain takes it (`api.domain.attachments.reference`)."""
    return {"sha256": value.sha256, "size": value.size, "contentType": value.contentType}


def attachment_of(tenant_id: str, stored: dict[str, Any]) -> Attachment:
    """An entity's stored reference as its `Attachment` (the link made when selected)."""
    return Attachment(
        sha256=stored["sha256"],
        size=int(stored["size"]),
        contentType=stored["contentType"],
        tenant_id=tenant_id,
    )


def to_upload_payload(answer: UploadAnswer) -> RequestUploadPayload:
    upload = answer.upload
    return RequestUploadPayload(
        alreadyPresent=answer.already_present,
        upload=None
        if upload is None
        else PresignedUpload(
            url=upload.url,
            method="PUT",
            headers=[HttpHeader(name=k, value=v) for k, v in upload.headers.items()],
            expiresAt=upload.expires_at,
        ),
    )


def to_attachment(tenant_id: str, attachment: ServiceAttachment) -> Attachment:
    return Attachment(
        sha256=attachment.sha256,
        size=attachment.size,
        contentType=attachment.content_type,
        tenant_id=tenant_id,
        link=(attachment.url, attachment.url_expires_at),
    )


async def request_upload(
    info: strawberry.Info, tenantID: strawberry.ID, sha256: str, size: int, contentType: str
) -> RequestUploadPayload | None:
    # Nullable, so that each alias answers on its own: one that fails (QUOTA_EXCEEDED
    # at its path) leaves the others' links, whose room is already reserved.
    info.context.budget.spend_writes(1)  # a HeadObject each: bounded like writes
    attachments = info.context.service.attachments
    if attachments is None:
        raise Unavailable("attachments are not served here")
    answer = await for_tenant(
        info,
        tenantID,
        lambda _: attachments.request_upload(
            tenantID, sha256, size, contentType, viewer(info, tenantID)
        ),
        role=WRITER,
    )
    return to_upload_payload(answer)


async def attachment(
    info: strawberry.Info,
    tenantID: strawberry.ID,
    sha256: str,
    id: strawberry.ID | None = None,
) -> Attachment:
    info.context.budget.spend_items(1)  # a HeadObject each: bounded like items
    attachments = info.context.service.attachments
    if attachments is None:
        raise Unavailable("attachments are not served here")
    found = await for_tenant(
        info,
        tenantID,
        lambda _: attachments.attachment(tenantID, sha256, viewer(info, tenantID), id),
    )
    return to_attachment(tenantID, found)


QUERIES: dict[str, Any] = {
    "attachment": strawberry.field(
        resolver=attachment,
        description="A blob of the tenant by the SHA-256 of its bytes, with a download "
        "link valid 15 minutes; NOT_FOUND unless those bytes are uploaded. `id`: the "
        "record whose attachment it is, required in a tenant with records not every "
        "member sees (NOT_FOUND unless that record is in the caller's view and "
        "references these bytes).",
        **authenticated(),
    ),
}
MUTATIONS: dict[str, Any] = {
    "requestUpload": strawberry.mutation(
        resolver=request_upload,
        description="Writers: upload a blob (at most 10 MiB) addressed by the SHA-256 "
        "of its bytes. `alreadyPresent` when the tenant holds it (never in a tenant with "
        "records not every member sees); else one presigned PUT, "
        "valid 15 minutes, that refuses other bytes, sizes or types. QUOTA_EXCEEDED when "
        "the tenant's blobs have no room for `size` more bytes. Null only with an error at "
        "its path: other aliases of the request keep their answers.",
        **authenticated(),
    ),
}
