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

The bucket is versioned (serverless.yml, `scripts.local_s3.ensure_bucket`) for the
sweep of unreferenced blobs (`api.service.blob_sweep`, docs/attachments.md): it
marks a blob by copying it onto itself with MARK_METADATA (a new version), and
later deletes exactly that version; `stat` answers a marked blob as not held.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError, FlexibleChecksumError

from api.domain.attachments import (
    MAX_BLOB_BYTES,
    Blob,
    ListedBlob,
    PresignedUpload,
    StoredBlob,
    sha256_of_checksum,
)
from api.storage.bucket_objects import (
    PAGE,
    abort_uploads,
    delete_versions,
    remove_versions,
)
from api.storage.errors import error_code, translated
from api.storage.keys import blob_key, blob_prefix, tenant_blobs_prefix, tenant_prefixes

_MISSING = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchVersion"})
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


# User metadata of a marked blob (S3 sends it as x-amz-meta-unreferenced-since): the
# sweep found no entity referencing it, at this time (epoch seconds).
MARK_METADATA = "unreferenced-since"
# Who uploaded the bytes (`uploader_tag`): named by the signed upload link of a tenant
# with restricted records, and checked when a write references them (contract 3.10).
UPLOADER_METADATA = "uploader"


class S3Blobs:
    def __init__(self, client: Any, bucket: str, hashes_bytes: bool = False) -> None:
        self._client = client
        self._bucket = bucket
        self._hashes_bytes = hashes_bytes

    def stat(self, tenant_id: str, sha256: str, generation: str = "") -> StoredBlob | None:
        """What the bucket holds under the tenant's sha256 (in its blob keys'
        `generation`, `api.storage.keys`); None when nothing."""
        key = blob_key(tenant_id, sha256, generation)
        try:
            with translated():
                head = self._client.head_object(
                    Bucket=self._bucket, Key=key, ChecksumMode="ENABLED"
                )
        except ClientError as exc:
            if error_code(exc) in _MISSING:
                return None
            raise
        if MARK_METADATA in head.get("Metadata", {}):
            # Marked by the sweep: about to be deleted unless referenced again. A write
            # setting it is ATTACHMENT_MISSING and requestUpload answers an upload,
            # whose PUT makes a new, unmarked version that the deletion leaves alone.
            return None
        size = int(head["ContentLength"])
        checked = sha256_of_checksum(head.get("ChecksumSHA256"))
        if head.get("ContentEncoding") or head.get("ContentDisposition"):
            # Headers the signature does not cover, added to the PUT: a client would
            # decode the bytes into something else (or save them under another name).
            checked = None
        if self._hashes_bytes and checked is not None:
            checked = checked if self._sha256_of(key, size) == checked else None
        uploader = head.get("Metadata", {}).get(UPLOADER_METADATA)
        content_type = head.get("ContentType", "")
        return StoredBlob(sha256=checked, size=size, content_type=content_type, uploader=uploader)

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

    def presign_upload(self, blob: Blob, expires_in: int, generation: str = "") -> PresignedUpload:
        params = {
            "Bucket": self._bucket,
            "Key": blob_key(blob.tenant_id, blob.sha256, generation),
            "ContentLength": blob.size,
            "ContentType": blob.content_type,
            "ChecksumAlgorithm": "SHA256",
            "ChecksumSHA256": blob.checksum,
        }
        if blob.uploader:  # who uploads it (a tenant with restricted records)
            params["Metadata"] = {UPLOADER_METADATA: blob.uploader}
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
        if blob.uploader:
            headers[f"x-amz-meta-{UPLOADER_METADATA}"] = blob.uploader
        return PresignedUpload(url=url, headers=headers, expires_at=expires_at)

    def presign_download(
        self, tenant_id: str, sha256: str, expires_in: int, generation: str = ""
    ) -> tuple[str, datetime]:
        expires_at = _in(expires_in)
        with translated():
            url = self._client.generate_presigned_url(
                "get_object",
                Params={
                    "Bucket": self._bucket,
                    "Key": blob_key(tenant_id, sha256, generation),
                    # Saved, never rendered as a page of the bucket's host.
                    "ResponseContentDisposition": "attachment",
                },
                ExpiresIn=expires_in,
            )
        return url, expires_at

    def remove_all(
        self, tenant_id: str, limit: int, check: Callable[[], None] | None = None
    ) -> int:
        """Delete up to `limit` of the tenant's objects: under each of its prefixes
        (`keys.tenant_prefixes`: its blobs, its exports' files), every object version
        and delete marker (the bucket is versioned: a plain delete would only hide an
        object), 1,000 a call (ListObjectVersions, then DeleteObjects by VersionId),
        then every incomplete multipart upload (an export's file being published:
        ListMultipartUploads, AbortMultipartUpload); how many of these went. Each
        delete and abort follows a `check` (the deletion's: still under way)."""
        removed = 0
        client, bucket = self._client, self._bucket
        for prefix in tenant_prefixes(tenant_id):
            removed += remove_versions(client, bucket, prefix, limit - removed, check)
            removed += abort_uploads(client, bucket, prefix, limit - removed, check)
        return removed

    def remove_other_generations(
        self, tenant_id: str, generation: str, limit: int, check: Callable[[], None]
    ) -> tuple[int, bool]:
        """Delete up to `limit` versions and delete markers of the tenant's blobs of
        every generation but `generation` (uploads presigned before a deletion that
        landed after it: never read again); how many went, and whether none is left.
        ListObjectVersions with the delimiter "/" lists the generations' prefixes
        under the tenant's (`tenants/<tenant>/`), one page of 1,000 a call (a tenant
        has a generation per deletion after it reserved, removed here as they come).
        `check` runs after each listing of versions and before their delete (the
        sweep's: the generation is still `generation`): the versions deleted were
        listed while it was, so none is of a later one (deleted by version id)."""
        keep = blob_prefix(tenant_id, generation)
        with translated():
            page = self._client.list_object_versions(
                Bucket=self._bucket, Prefix=tenant_blobs_prefix(tenant_id), Delimiter="/"
            )
        others = [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        others = [p for p in others if not keep.startswith(p)]
        removed = 0
        for prefix in others:
            removed += remove_versions(self._client, self._bucket, prefix, limit - removed, check)
            if removed >= limit:
                return removed, False
        return removed, not page.get("IsTruncated")

    # The sweep's side (`api.service.sweep_ports.SweptBlobs`).

    def list_blobs(
        self, tenant_id: str, after: str | None, limit: int = PAGE, generation: str = ""
    ) -> tuple[list[ListedBlob], str | None]:
        """One ListObjectsV2 page of the tenant's blobs of one generation (their current
        versions) in key order after the sha256 `after`; and the sha256 to go on from
        (None: the end)."""
        prefix = blob_prefix(tenant_id, generation)
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": prefix, "MaxKeys": limit}
        if after is not None:
            kwargs["StartAfter"] = prefix + after
        with translated():
            page = self._client.list_objects_v2(**kwargs)
        listed = [
            ListedBlob(o["Key"][len(prefix) :], int(o["Size"]), o["LastModified"])
            for o in page.get("Contents", [])
        ]
        more = bool(page.get("IsTruncated")) and listed
        return listed, listed[-1].sha256 if more else None

    def mark(
        self,
        tenant_id: str,
        sha256: str,
        older_than: datetime,
        since: int,
        generation: str = "",
    ) -> str | None:
        """Copy the blob onto itself with MARK_METADATA (a new version): the version id
        of the marked copy. Marked already (by a call that died before it recorded
        the mark): that version's id. None when there is nothing to mark (gone, or
        written since `older_than`: a re-upload is not marked)."""
        key = blob_key(tenant_id, sha256, generation)
        head = self._head(key)
        if head is None:
            return None
        if MARK_METADATA in head.get("Metadata", {}):
            return _version(head)
        if head["LastModified"] >= older_than:
            return None
        return self._copy(key, head, {MARK_METADATA: str(since)})

    def unmark(self, tenant_id: str, sha256: str, version_id: str, generation: str = "") -> bool:
        """Copy the marked version back without the mark, only while it is the current
        one (a newer version is a re-upload: unmarked already); whether it copied."""
        key = blob_key(tenant_id, sha256, generation)
        head = self._head(key)
        if head is None or _version(head) != version_id:
            return False
        return self._copy(key, head, {}) is not None

    def delete_marked(
        self, tenant_id: str, sha256: str, version_id: str, generation: str = ""
    ) -> None:
        """Delete this version of the blob and every version and delete marker written
        before it (so that no earlier version becomes the current one again: S3 makes
        the newest remaining version current); a version written after it (a
        re-upload) stays, and is the blob. One ListObjectVersions of the key (a
        sha256 key is the prefix of no other), one DeleteObjects."""
        key = blob_key(tenant_id, sha256, generation)
        with translated():
            page = self._client.list_object_versions(Bucket=self._bucket, Prefix=key, MaxKeys=PAGE)
        versions = [
            v for v in page.get("Versions", []) + page.get("DeleteMarkers", []) if v["Key"] == key
        ]
        marked = next((v for v in versions if v["VersionId"] == version_id), None)
        if marked is None:
            return  # deleted already (a call that died after its DeleteObjects)
        # LastModified has whole seconds: a version of the mark's second is kept, as
        # if newer. Not the listing's order, which S3's reference does not promise.
        doomed = [
            {"Key": key, "VersionId": v["VersionId"]}
            for v in versions
            if v is marked or v["LastModified"] < marked["LastModified"]
        ]
        delete_versions(self._client, self._bucket, doomed)

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            with translated():
                head: dict[str, Any] = self._client.head_object(Bucket=self._bucket, Key=key)
        except ClientError as exc:
            if error_code(exc) in _MISSING:
                return None
            raise
        return head

    def _copy(self, key: str, head: dict[str, Any], metadata: dict[str, str]) -> str | None:
        """CopyObject of the version `head` read onto the key, with `metadata` instead
        of its own (a new version, the current one unless a PUT comes after); the same
        type and headers, and S3 computes a SHA-256 checksum of the copy (what `stat`
        reads back); then that version is deleted. None when it was gone meanwhile."""
        kwargs: dict[str, Any] = {
            "Bucket": self._bucket,
            "Key": key,
            "CopySource": {"Bucket": self._bucket, "Key": key, "VersionId": _version(head)},
            "MetadataDirective": "REPLACE",
            "Metadata": metadata,
            "ContentType": head.get("ContentType", "application/octet-stream"),
            "ChecksumAlgorithm": "SHA256",
        }
        # Kept as they were: `stat` refuses a blob that carries them.
        for header in ("ContentEncoding", "ContentDisposition"):
            if head.get(header):
                kwargs[header] = head[header]
        try:
            with translated():
                answer = self._client.copy_object(**kwargs)
        except ClientError as exc:
            if error_code(exc) in _MISSING:
                return None
            raise
        # The copied version is no longer needed (the copy has its bytes), and must
        # never become current again: the delete of a marked version would bring it
        # back. (The lifecycle would expire it a day later.)
        delete_versions(self._client, self._bucket, [{"Key": key, "VersionId": _version(head)}])
        return str(answer["VersionId"])

    def reachable(self) -> bool:
        """One HeadBucket: whether the bucket answers (for /healthz)."""
        try:
            with translated():
                self._client.head_bucket(Bucket=self._bucket)
        except Exception:
            return False
        return True


def _version(head: dict[str, Any]) -> str:
    """The version id a HeadObject read; "null" is S3's id of an object written
    before the bucket was versioned (a stage deployed before the sweep)."""
    return str(head.get("VersionId") or "null")


def _in(seconds: int) -> datetime:
    return datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=seconds)
