"""Attachments (contract 3.10): blobs of a tenant addressed by the SHA-256 of their
bytes, and what makes a declared blob valid. Plain Python, no S3."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from api.domain.errors import BadUserInput
from api.domain.identifiers import check_identifier

# One blob is at most 10 MiB: a phone photo (2-5 MB as JPEG or HEIC) or a document
# scan fits, and one PUT (S3 takes up to 5 GB in one) uploads it with no multipart.
MAX_BLOB_BYTES = 10 * 1024 * 1024
# Presigned requests are short-lived: an upload must start within 15 minutes, a
# download link is good for 15 minutes (ask again for a fresh one).
UPLOAD_LINK_S = 15 * 60
DOWNLOAD_LINK_S = 15 * 60

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# Media a person attaches to a record, and a few document types; never HTML or
# scripts, whatever host serves them: no XML subtype (image/svg+xml runs scripts
# when a browser opens it).
_CONTENT_TYPE_RE = re.compile(
    r"^(?:(?:image|audio|video)/(?![a-z0-9.+-]*(?:svg|xml))[a-z0-9][a-z0-9.+-]{0,62}"
    r"|text/plain|text/csv|application/pdf|application/zip|application/octet-stream)$"
)


@dataclass(frozen=True)
class Blob:
    """A tenant's blob as a client declares it: its bytes hash to `sha256`."""

    tenant_id: str
    sha256: str  # 64 lowercase hex digits
    size: int
    content_type: str
    # Who uploads it (`uploader_tag`), signed into its upload link: "" none named.
    uploader: str = ""

    @property
    def checksum(self) -> str:
        """The SHA-256 as S3's `x-amz-checksum-sha256` carries it: base64 of the digest."""
        return sha256_checksum(self.sha256)


@dataclass(frozen=True)
class StoredBlob:
    """What the blob store holds under a tenant's sha256: the SHA-256 its bytes are
    known to have (None when nothing proves it), their size and content type."""

    sha256: str | None
    size: int
    content_type: str
    uploader: str | None = None  # the uploader_tag its upload link named, if any

    def holds(self, blob: Blob) -> bool:
        return (self.sha256, self.size, self.content_type) == (
            blob.sha256,
            blob.size,
            blob.content_type,
        )


@dataclass(frozen=True)
class ListedBlob:
    """A blob as a listing of the bucket shows it: its key's sha256, its size, and when
    its current version was written (S3's LastModified)."""

    sha256: str
    size: int
    last_modified: datetime


@dataclass(frozen=True)
class PresignedUpload:
    """A PUT of the blob's bytes to `url` with exactly these headers, until `expires_at`."""

    url: str
    headers: dict[str, str]
    expires_at: datetime


@dataclass(frozen=True)
class BlobKeys:
    """What a tenant's blob usage item says of its blobs: the generation of their keys,
    and whether the tenant has (had) a record not every member sees (contract 3.10:
    then no dedup, and a link only through a record in the caller's view)."""

    generation: str = ""
    restricted: bool = False


def uploader_tag(sub: str) -> str:
    """The uploader named in an upload's object metadata: a digest of its sub (32 hex
    digits; a sub itself may hold what a header may not)."""
    return hashlib.sha256(sub.encode()).hexdigest()[:32]


def check_sha256(value: str) -> str:
    if not isinstance(value, str) or not _SHA256_RE.fullmatch(value):
        raise BadUserInput("sha256 must be 64 lowercase hexadecimal digits")
    return value


def declared_blob(tenant_id: str, sha256: str, size: int, content_type: str) -> Blob:
    """The blob a client declares, or BadUserInput saying what is wrong with it."""
    check_identifier(tenant_id, "tenantID")
    check_sha256(sha256)
    check_blob_size(size)
    check_content_type(content_type)
    return Blob(tenant_id, sha256, size, content_type)


def check_blob_size(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BLOB_BYTES:
        raise BadUserInput(f"size must be 1 to {MAX_BLOB_BYTES} bytes")
    return size


def check_content_type(content_type: object) -> str:
    if not allowed_content_type(content_type):
        raise BadUserInput(
            "contentType must be image/*, audio/*, video/*, text/plain, text/csv, "
            "application/pdf, application/zip or application/octet-stream (lowercase)"
        )
    assert isinstance(content_type, str)
    return content_type


# An entity's reference to a blob (a field of kind ATTACHMENT), as stored and as
# sent and synced: these keys, nothing else. The download link is not part of it:
# it is made when an item is read (`Attachment.url`), never stored.
REFERENCE_KEYS = ("sha256", "size", "contentType")


def reference(value: Mapping[str, Any]) -> dict[str, Any]:
    """A reference's stored form, or BadUserInput saying what is wrong with it."""
    if not isinstance(value, Mapping) or set(value) != set(REFERENCE_KEYS):
        raise BadUserInput(f"an attachment is exactly {{{', '.join(REFERENCE_KEYS)}}}")
    return {
        "sha256": check_sha256(value["sha256"]),
        "size": check_blob_size(value["size"]),
        "contentType": check_content_type(value["contentType"]),
    }


def referenced_blob(tenant_id: str, stored: Mapping[str, Any]) -> Blob:
    """The blob a stored reference of the tenant names."""
    return Blob(tenant_id, stored["sha256"], int(stored["size"]), stored["contentType"])


def allowed_content_type(content_type: object) -> bool:
    return isinstance(content_type, str) and _CONTENT_TYPE_RE.fullmatch(content_type) is not None


def sha256_checksum(sha256: str) -> str:
    return base64.b64encode(bytes.fromhex(sha256)).decode("ascii")


def sha256_of_checksum(checksum: str | None) -> str | None:
    """The hex SHA-256 that an `x-amz-checksum-sha256` value carries, or None."""
    if not checksum:
        return None
    try:
        digest = base64.b64decode(checksum, validate=True)
    except ValueError:
        return None
    return digest.hex() if len(digest) == 32 else None
