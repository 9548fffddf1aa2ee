"""Removing objects from the versioned bucket by prefix: every object version and
delete marker (a plain delete would only hide an object), and every incomplete
multipart upload (its parts are billed until it is aborted), in bounded calls.
Deleting a tenant empties its prefixes with these (`api.storage.blobs.S3Blobs`), and
an export whose job is gone removes its file (`api.storage.export_files`). Botocore
errors become domain errors here (`api.storage.errors`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from api.domain.errors import Unavailable
from api.storage.errors import error_code, translated

# Keys a List call returns at most, and a DeleteObjects takes at most.
PAGE = 1000
# An upload completed or aborted meanwhile (S3 says NoSuchUpload for both).
NO_UPLOAD = frozenset({"404", "NoSuchUpload"})


def remove_versions(
    client: Any, bucket: str, prefix: str, limit: int, check: Callable[[], None] | None = None
) -> int:
    """Delete up to `limit` object versions and delete markers under `prefix`,
    PAGE a round (ListObjectVersions, then DeleteObjects by VersionId, after `check`,
    which may raise to stop); how many."""
    removed = 0
    while removed < limit:
        with translated():
            page = client.list_object_versions(
                Bucket=bucket, Prefix=prefix, MaxKeys=min(PAGE, limit - removed)
            )
        doomed = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
        ][: limit - removed]
        if not doomed:
            break
        if check is not None:
            check()
        delete_versions(client, bucket, doomed)
        removed += len(doomed)
    return removed


def delete_versions(client: Any, bucket: str, doomed: list[dict[str, str]]) -> None:
    """One DeleteObjects of these versions (at most PAGE); UNAVAILABLE when S3 kept
    any (the caller's next call tries again)."""
    with translated():
        answer = client.delete_objects(Bucket=bucket, Delete={"Objects": doomed, "Quiet": True})
    if answer.get("Errors"):
        raise Unavailable("some objects could not be deleted; call again")


def abort_uploads(
    client: Any, bucket: str, prefix: str, limit: int, check: Callable[[], None] | None = None
) -> int:
    """Abort up to `limit` incomplete multipart uploads under `prefix` (each page after
    `check`, which may raise to stop); an upload gone meanwhile (completed, aborted)
    counts. How many."""
    aborted = 0
    while aborted < limit:
        with translated():
            page = client.list_multipart_uploads(
                Bucket=bucket, Prefix=prefix, MaxUploads=min(PAGE, limit - aborted)
            )
        uploads = page.get("Uploads", [])[: limit - aborted]
        if not uploads:
            break
        if check is not None:
            check()
        for upload in uploads:
            abort_upload(client, bucket, upload["Key"], upload["UploadId"])
        aborted += len(uploads)
    return aborted


def abort_upload(client: Any, bucket: str, key: str, upload_id: str) -> None:
    """Abort one multipart upload; nothing when it is gone already."""
    try:
        with translated():
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
    except ClientError as exc:
        if error_code(exc) not in NO_UPLOAD:
            raise
