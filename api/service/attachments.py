"""Attachments (contract 3.10): blobs addressed by content, over its own port
(`BlobStore`), not more methods on the Store.

`request_upload` answers "already present" when the tenant's bucket prefix holds
the declared bytes (one HeadObject: deduplicated, nothing to upload), else a
presigned PUT that the blob store verifies (size, content type, SHA-256), once
the declared size is taken from the tenant's quota (`Quota`: one conditional
UpdateItem; QUOTA_EXCEEDED when the room is smaller, nothing presigned). The
sweep (`api.service.blob_sweep`) recounts the room from what the bucket holds.
`attachment` answers a short-lived download link for a blob that is present with
the SHA-256 its key names, else NOT_FOUND, with no DynamoDB read or write.

Entities reference blobs (`Person.photo`): `references` says which blobs a write
sets, and `missing` which of them the store does not hold, asked by writing
before it touches the table; `download_link` signs an entity's reference on read.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from api.domain.attachments import (
    DOWNLOAD_LINK_S,
    UPLOAD_LINK_S,
    Blob,
    PresignedUpload,
    StoredBlob,
    allowed_content_type,
    check_sha256,
    declared_blob,
    referenced_blob,
)
from api.domain.errors import AttachmentMissing, NotFound, QuotaExceeded
from api.domain.identifiers import check_identifier
from api.domain.mutations import Mutation

# HeadObjects in flight for one write's references.
REFERENCE_CHECKS = 8


def references(mutation: Mutation) -> list[Blob]:
    """The blobs a validated mutation makes its entity reference: each attachment it
    sets. A put's state that keeps an attachment as it assumes adds nothing: the put
    applies only where the server holds that reference, checked when it was written."""
    item_type = mutation.item_type
    names = item_type.attachment_fields
    if not names:
        return []
    if mutation.verb == "put":
        assert mutation.state is not None
        assumed = {} if mutation.assumed is None else mutation.assumed.fields
        values = [mutation.state.fields.get(n) for n in names]
        values = [v for n, v in zip(names, values, strict=True) if v != assumed.get(n)]
    else:
        values = [mutation.changes.get(n) for n in names]
    return [referenced_blob(mutation.tenant_id, v) for v in values if v is not None]


def _why(blob: Blob, stored: StoredBlob | None) -> AttachmentMissing:
    if stored is None or stored.sha256 != blob.sha256:
        return AttachmentMissing(
            f"the tenant holds no blob {blob.sha256}: upload it first (requestUpload)"
        )
    return AttachmentMissing(
        f"blob {blob.sha256} is held as {stored.size} bytes of {stored.content_type}, "
        f"not {blob.size} bytes of {blob.content_type}: upload it as declared (requestUpload)"
    )


class BlobStore(Protocol):
    """What attachments need of the blob store (`api.storage.blobs.S3Blobs`)."""

    def stat(self, tenant_id: str, sha256: str) -> StoredBlob | None: ...
    def presign_upload(self, blob: Blob, expires_in: int) -> PresignedUpload: ...
    def presign_download(
        self, tenant_id: str, sha256: str, expires_in: int
    ) -> tuple[str, datetime]: ...
    def reachable(self) -> bool: ...
    def remove_all(self, tenant_id: str, limit: int) -> int:
        """Delete up to `limit` of the tenant's blobs; how many went (fewer: none left)."""
        ...


class Quota(Protocol):
    """The tenants' room for blobs (`api.storage.blob_usage.BlobUsageTable`)."""

    def reserve(self, tenant_id: str, size: int, quota: int) -> bool:
        """Take `size` bytes of the tenant's room (`quota` before its first); False
        when the room is smaller (nothing taken)."""
        ...


# A tenant's blobs may take this much (BLOB_QUOTA_BYTES): 1 GiB, some 300 photos of
# 3 MB, $0.023 a month on S3 Standard.
DEFAULT_QUOTA_BYTES = 1024**3


@dataclass(frozen=True)
class UploadAnswer:
    already_present: bool
    upload: PresignedUpload | None = None


@dataclass(frozen=True)
class Attachment:
    sha256: str
    size: int
    content_type: str
    url: str
    url_expires_at: datetime


class Attachments:
    def __init__(
        self, blobs: BlobStore, quota: Quota | None = None, quota_bytes: int = DEFAULT_QUOTA_BYTES
    ) -> None:
        self._blobs = blobs
        self._quota = quota  # None: no quota kept (tests of the blob store alone)
        self._quota_bytes = quota_bytes

    def request_upload(
        self, tenant_id: str, sha256: str, size: int, content_type: str
    ) -> UploadAnswer:
        blob = declared_blob(tenant_id, sha256, size, content_type)  # bad input: nothing asked
        stored = self._blobs.stat(tenant_id, sha256)
        if stored is not None and stored.holds(blob):
            return UploadAnswer(already_present=True)
        # Absent, or bytes that are not the declared ones: this upload replaces them,
        # and counts against the quota until the sweep recounts what the bucket holds.
        if self._quota is not None and (
            size > self._quota_bytes or not self._quota.reserve(tenant_id, size, self._quota_bytes)
        ):
            raise QuotaExceeded(
                f"the tenant's blobs would exceed its quota of {self._quota_bytes} bytes: "
                "remove attachments no entity needs; blobs no entity references are "
                "removed by the daily sweep after 7 days"
            )
        return UploadAnswer(False, self._blobs.presign_upload(blob, UPLOAD_LINK_S))

    def download_link(self, tenant_id: str, sha256: str) -> tuple[str, datetime]:
        """A download link of an entity's reference, with no call to the blob store: the
        write that stored the reference found the blob (`missing`), and a referenced
        blob is never removed."""
        return self._blobs.presign_download(tenant_id, sha256, DOWNLOAD_LINK_S)

    def missing(self, blobs: Iterable[Blob]) -> dict[Blob, AttachmentMissing]:
        """Of the blobs some writes reference, those the store does not hold with
        exactly that sha256, size and type, each with why; one HeadObject per distinct
        blob, REFERENCE_CHECKS at a time (a push of 100 entries waits for about 13
        rounds of some 20 ms on S3, not 100)."""
        distinct = list(dict.fromkeys(blobs))
        if not distinct:
            return {}

        def check(blob: Blob) -> AttachmentMissing | None:
            stored = self._blobs.stat(blob.tenant_id, blob.sha256)
            return None if stored is not None and stored.holds(blob) else _why(blob, stored)

        if len(distinct) == 1:
            found = [check(distinct[0])]
        else:
            with ThreadPoolExecutor(min(REFERENCE_CHECKS, len(distinct))) as pool:
                found = list(pool.map(check, distinct))
        return {b: error for b, error in zip(distinct, found, strict=True) if error is not None}

    def attachment(self, tenant_id: str, sha256: str) -> Attachment:
        check_identifier(tenant_id, "tenantID")
        check_sha256(sha256)
        stored = self._blobs.stat(tenant_id, sha256)
        # Only bytes proven to hash to the key's sha256, of a type an upload may
        # declare (S3 refuses an upload with another type than the signed one).
        if (
            stored is None
            or stored.sha256 != sha256
            or not allowed_content_type(stored.content_type)
        ):
            raise NotFound(f"no attachment with sha256 {sha256} in this tenant")
        url, expires = self._blobs.presign_download(tenant_id, sha256, DOWNLOAD_LINK_S)
        return Attachment(sha256, stored.size, stored.content_type, url, expires)
