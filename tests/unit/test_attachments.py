"""Attachments' pure rules: the key layout (a persisted contract), the checksum's
encoding, and what a declared blob may be."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from api.domain.attachments import (
    MAX_BLOB_BYTES,
    Blob,
    PresignedUpload,
    StoredBlob,
    declared_blob,
    sha256_checksum,
    sha256_of_checksum,
)
from api.domain.errors import BadUserInput, NotFound
from api.service.attachments import Attachments, UploadAnswer
from api.storage.keys import blob_key

SHA = hashlib.sha256(b"photo").hexdigest()


def test_the_key_layout_is_per_tenant_and_content() -> None:
    assert blob_key("family1", SHA) == f"tenants/family1/blobs/{SHA}"
    # No tenant's key is under another's prefix, even for ids that extend others.
    assert not blob_key("a.b", SHA).startswith("tenants/a/")
    assert not blob_key("a", SHA).startswith("tenants/a.b/")


def test_the_checksum_is_base64_of_the_digest_and_reads_back() -> None:
    digest = hashlib.sha256(b"photo").digest()
    assert sha256_checksum(SHA) == base64.b64encode(digest).decode()
    assert sha256_of_checksum(sha256_checksum(SHA)) == SHA
    for unreadable in (None, "", "not base64!", base64.b64encode(b"short").decode()):
        assert sha256_of_checksum(unreadable) is None


def test_a_declared_blob_is_valid_or_says_why() -> None:
    assert declared_blob("t1", SHA, MAX_BLOB_BYTES, "image/heic") == Blob(
        "t1", SHA, MAX_BLOB_BYTES, "image/heic"
    )
    for args, says in (
        (("t/1", SHA, 1, "image/png"), "tenantID"),
        (("t1", SHA.upper(), 1, "image/png"), "sha256"),
        (("t1", SHA, True, "image/png"), "size"),
        (("t1", SHA, MAX_BLOB_BYTES + 1, "image/png"), "size"),
        (("t1", SHA, 1, "application/javascript"), "contentType"),
        (("t1", SHA, 1, "image/svg+xml"), "contentType"),  # a browser runs its scripts
        (("t1", SHA, 1, "image/xml"), "contentType"),
    ):
        with pytest.raises(BadUserInput, match=says):
            declared_blob(*args)


def test_a_stored_blob_holds_a_declared_one_only_when_all_three_match() -> None:
    blob = Blob("t1", SHA, 5, "image/png")
    assert StoredBlob(SHA, 5, "image/png").holds(blob)
    assert not StoredBlob(None, 5, "image/png").holds(blob)  # nothing proves the bytes
    assert not StoredBlob(SHA, 6, "image/png").holds(blob)
    assert not StoredBlob(SHA, 5, "image/jpeg").holds(blob)


class _CountingBlobs:
    """A BlobStore that holds what it is given and counts the calls made to it."""

    def __init__(self, held: dict[tuple[str, str], StoredBlob] | None = None) -> None:
        self.held = held or {}
        self.calls: list[str] = []

    def stat(self, tenant_id: str, sha256: str, generation: str = "") -> StoredBlob | None:
        self.calls.append("stat")
        return self.held.get((tenant_id, sha256))

    def presign_upload(self, blob: Blob, expires_in: int, generation: str = "") -> PresignedUpload:
        self.calls.append("presign_upload")
        return PresignedUpload(f"put:{blob.sha256}", {}, datetime.now(UTC))

    def presign_download(
        self, tenant_id: str, sha256: str, expires_in: int, generation: str = ""
    ) -> tuple[str, datetime]:
        self.calls.append("presign_download")
        return f"get:{sha256}", datetime.now(UTC)

    def reachable(self) -> bool:
        return True

    def remove_all(
        self, tenant_id: str, limit: int, check: Callable[[], None] | None = None
    ) -> int:
        raise AssertionError("attachments never delete blobs")


def test_a_request_costs_one_head_at_most_and_bad_input_none() -> None:
    blobs = _CountingBlobs({("t1", SHA): StoredBlob(SHA, 5, "image/png")})
    attachments = Attachments(blobs)
    assert attachments.request_upload("t1", SHA, 5, "image/png") == UploadAnswer(True)
    assert blobs.calls == ["stat"]
    blobs.calls.clear()
    answer = attachments.request_upload("t1", SHA, 5, "image/jpeg")  # held with another type
    assert not answer.already_present and answer.upload is not None
    assert blobs.calls == ["stat", "presign_upload"]  # presigning is local: no request
    blobs.calls.clear()
    with pytest.raises(BadUserInput):
        attachments.request_upload("t1", SHA, 0, "image/png")
    with pytest.raises(BadUserInput):
        attachments.attachment("t1", "nope")
    assert blobs.calls == []


def test_an_attachment_needs_bytes_proven_to_be_its_sha256() -> None:
    other = hashlib.sha256(b"other").hexdigest()
    blobs = _CountingBlobs(
        {
            ("t1", SHA): StoredBlob(SHA, 5, "image/png"),
            ("t1", other): StoredBlob(None, 5, "image/png"),  # unproven bytes
        }
    )
    attachments = Attachments(blobs)
    assert attachments.attachment("t1", SHA).url == f"get:{SHA}"
    for tenant, sha in (("t1", other), ("t2", SHA)):
        with pytest.raises(NotFound):
            attachments.attachment(tenant, sha)
