"""S3Blobs: the blob store of attachments over one S3 bucket (contract 3.10).

Uploads never pass through the API: the server presigns a PUT that signs the key,
`Content-Length`, `Content-Type` and `x-amz-checksum-sha256`, so that S3 itself
refuses a request that changes any of them (403 SignatureDoesNotMatch) and bytes
whose SHA-256 is not the signed one (400 BadDigest). What S3 then holds is read
back with one HeadObject (ChecksumMode ENABLED: the stored SHA-256 checksum).

The local engine (moto 5.2.5) checks none of this (docs/attachments.md): with
`hashes_bytes`, `stat` also reads the object and hashes it, and reports its SHA-256
only when it equals the stored checksum, so a blob is held locally exactly when
AWS would hold it. Botocore errors become domain errors here (`api.storage.errors`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError, FlexibleChecksumError

from api.domain.attachments import (
    MAX_BLOB_BYTES,
    Blob,
    PresignedUpload,
    StoredBlob,
    sha256_of_checksum,
)
from api.domain.errors import Unavailable
from api.storage.errors import error_code, translated
from api.storage.keys import blob_key

_MISSING = frozenset({"404", "NoSuchKey", "NotFound"})
_CHUNK = 1024 * 1024
# The bucket's CORS rule but its origins, in CloudFormation's names (serverless.yml
# reads it, as it reads table.json): browsers PUT with the presigned upload's headers
# (`presign_upload`; Content-Length is the browser's own, never a CORS request
# header) and GET the presigned download; no HEAD, which a URL signed for GET refuses.
CORS_FILE = Path(__file__).with_name("blob_cors.json")


def cors_configuration(origins: Sequence[str]) -> dict[str, Any]:
    """The bucket's CORSConfiguration for S3's PutBucketCors (boto3's names): the rule
    of `blob_cors.json` for these origins (`*`: any)."""
    rule = json.loads(CORS_FILE.read_text())
    return {
        "CORSRules": [
            {
                "AllowedOrigins": list(origins),
                "AllowedMethods": rule["AllowedMethods"],
                "AllowedHeaders": rule["AllowedHeaders"],
                "ExposeHeaders": rule["ExposedHeaders"],
                "MaxAgeSeconds": rule["MaxAge"],
            }
        ]
    }


class S3Blobs:
    def __init__(self, client: Any, bucket: str, hashes_bytes: bool = False) -> None:
        self._client = client
        self._bucket = bucket
        self._hashes_bytes = hashes_bytes

    def stat(self, tenant_id: str, sha256: str) -> StoredBlob | None:
        """What the bucket holds under the tenant's sha256; None when nothing."""
        key = blob_key(tenant_id, sha256)
        try:
            with translated():
                head = self._client.head_object(
                    Bucket=self._bucket, Key=key, ChecksumMode="ENABLED"
                )
        except ClientError as exc:
            if error_code(exc) in _MISSING:
                return None
            raise
        size = int(head["ContentLength"])
        checked = sha256_of_checksum(head.get("ChecksumSHA256"))
        if head.get("ContentEncoding") or head.get("ContentDisposition"):
            # Headers the signature does not cover, added to the PUT: a client would
            # decode the bytes into something else (or save them under another name).
            checked = None
        if self._hashes_bytes and checked is not None:
            checked = checked if self._sha256_of(key, size) == checked else None
        return StoredBlob(sha256=checked, size=size, content_type=head.get("ContentType", ""))

    def _sha256_of(self, key: str, size: int) -> str | None:
        if size > MAX_BLOB_BYTES:  # never read more than a blob may hold
            return None
        digest = hashlib.sha256()
        try:
            with translated():
                # At most size + 1 bytes, whatever the object became since its HEAD.
                body = self._client.get_object(
                    Bucket=self._bucket, Key=key, Range=f"bytes=0-{size}"
                )["Body"]
        except ClientError as exc:
            if error_code(exc) in _MISSING:
                return None  # removed since its HEAD
            raise
        read = 0
        with translated():
            try:
                for chunk in iter(lambda: body.read(_CHUNK), b""):
                    digest.update(chunk)
                    read += len(chunk)
            except FlexibleChecksumError:
                # botocore checks the body against the stored checksum as it reads
                # (its response_checksum_validation "when_supported"): they differ.
                return None
        return digest.hexdigest() if read == size else None

    def presign_upload(self, blob: Blob, expires_in: int) -> PresignedUpload:
        params = {
            "Bucket": self._bucket,
            "Key": blob_key(blob.tenant_id, blob.sha256),
            "ContentLength": blob.size,
            "ContentType": blob.content_type,
            "ChecksumAlgorithm": "SHA256",
            "ChecksumSHA256": blob.checksum,
        }
        expires_at = _in(expires_in)  # before signing: never later than the URL's end
        with translated():
            url = self._client.generate_presigned_url(
                "put_object", Params=params, ExpiresIn=expires_in
            )
        # Every header signed into the URL must be sent exactly so: a client that
        # streams a body of unknown length (chunked) would be refused by S3.
        headers = {
            "Content-Length": str(blob.size),
            "Content-Type": blob.content_type,
            "x-amz-checksum-sha256": blob.checksum,
            "x-amz-sdk-checksum-algorithm": "SHA256",
        }
        return PresignedUpload(url=url, headers=headers, expires_at=expires_at)

    def presign_download(
        self, tenant_id: str, sha256: str, expires_in: int
    ) -> tuple[str, datetime]:
        expires_at = _in(expires_in)
        with translated():
            url = self._client.generate_presigned_url(
                "get_object",
                Params={
                    "Bucket": self._bucket,
                    "Key": blob_key(tenant_id, sha256),
                    # Saved, never rendered as a page of the bucket's host.
                    "ResponseContentDisposition": "attachment",
                },
                ExpiresIn=expires_in,
            )
        return url, expires_at

    def remove_all(self, tenant_id: str, limit: int) -> int:
        """Delete up to `limit` of the tenant's objects, 1,000 a call (ListObjectsV2,
        then DeleteObjects); how many went."""
        removed = 0
        prefix = blob_key(tenant_id, "").removesuffix("blobs/")
        while removed < limit:
            with translated():
                page = self._client.list_objects_v2(
                    Bucket=self._bucket, Prefix=prefix, MaxKeys=min(1000, limit - removed)
                )
            doomed = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if not doomed:
                break
            with translated():
                answer = self._client.delete_objects(
                    Bucket=self._bucket, Delete={"Objects": doomed, "Quiet": True}
                )
            if answer.get("Errors"):
                raise Unavailable("some blobs could not be deleted; call again")
            removed += len(doomed)
        return removed

    def reachable(self) -> bool:
        """One HeadBucket: whether the bucket answers (for /healthz)."""
        try:
            with translated():
                self._client.head_bucket(Bucket=self._bucket)
        except Exception:
            return False
        return True


def _in(seconds: int) -> datetime:
    return datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=seconds)
