"""Attachments' pure rules: the key layout (a persisted contract), the checksum's
encoding, and what a declared blob may be."""

from __future__ import annotations

import base64
import hashlib

import pytest

from api.domain.attachments import (
    MAX_BLOB_BYTES,
    Blob,
    StoredBlob,
    declared_blob,
    sha256_checksum,
    sha256_of_checksum,
)
from api.domain.errors import BadUserInput
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
    ):
        with pytest.raises(BadUserInput, match=says):
            declared_blob(*args)


def test_a_stored_blob_holds_a_declared_one_only_when_all_three_match() -> None:
    blob = Blob("t1", SHA, 5, "image/png")
    assert StoredBlob(SHA, 5, "image/png").holds(blob)
    assert not StoredBlob(None, 5, "image/png").holds(blob)  # nothing proves the bytes
    assert not StoredBlob(SHA, 6, "image/png").holds(blob)
    assert not StoredBlob(SHA, 5, "image/jpeg").holds(blob)
