"""`requestUpload` and `attachment` (contract 3.10): their types, and the service's
answers turned into them."""

from __future__ import annotations

from datetime import datetime

import strawberry

from api.service.attachments import Attachment as ServiceAttachment
from api.service.attachments import UploadAnswer


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


@strawberry.type
class Attachment:
    sha256: str
    size: int
    contentType: str
    url: str = strawberry.field(description="A GET of the bytes, valid until `urlExpiresAt`.")
    urlExpiresAt: datetime


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


def to_attachment(attachment: ServiceAttachment) -> Attachment:
    return Attachment(
        sha256=attachment.sha256,
        size=attachment.size,
        contentType=attachment.content_type,
        url=attachment.url,
        urlExpiresAt=attachment.url_expires_at,
    )
