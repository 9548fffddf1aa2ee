"""Attachments (contract 3.10): blobs addressed by content, over its own port
(`BlobStore`), not more methods on the Store.

`request_upload` answers "already present" when the tenant's bucket prefix holds
the declared bytes (one HeadObject: deduplicated, nothing to upload), else a
presigned PUT that the blob store verifies (size, content type, SHA-256).
`attachment` answers a short-lived download link for a blob that is present with
the SHA-256 its key names, else NOT_FOUND. Neither writes to DynamoDB.
"""

from __future__ import annotations

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
)
from api.domain.errors import NotFound
from api.domain.identifiers import check_identifier


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
    def __init__(self, blobs: BlobStore) -> None:
        self._blobs = blobs

    def request_upload(
        self, tenant_id: str, sha256: str, size: int, content_type: str
    ) -> UploadAnswer:
        blob = declared_blob(tenant_id, sha256, size, content_type)  # bad input: nothing asked
        stored = self._blobs.stat(tenant_id, sha256)
        if stored is not None and stored.holds(blob):
            return UploadAnswer(already_present=True)
        # Absent, or bytes that are not the declared ones: this upload replaces them.
        return UploadAnswer(False, self._blobs.presign_upload(blob, UPLOAD_LINK_S))

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
