"""S3ExportFiles: finished exports' files in the blobs' bucket (contract 3.9), one
object each, `exports/<tenant>/<export>.jsonl.gz` (`api.storage.keys.export_key`).

The `ExportFiles` port of `api.service.exports`: a PutObject, or a multipart upload
(CreateMultipartUpload, UploadPart, CompleteMultipartUpload, AbortMultipartUpload),
HeadObject, and a presigned GET that saves the file under its name. The object is
stored as `application/gzip` without a Content-Encoding: the file is the gzip, and a
client must not unpack it in transit. Botocore errors become domain errors here
(`api.storage.errors`): S3 busy or failing is UNAVAILABLE, and the next call resumes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from api.storage.bucket_objects import (
    NO_UPLOAD,
    PAGE,
    abort_upload,
    abort_uploads,
    remove_versions,
)
from api.storage.errors import error_code, translated
from api.storage.keys import export_key

CONTENT_TYPE = "application/gzip"
_MISSING = frozenset({"404", "NoSuchKey", "NotFound"})


class S3ExportFiles:
    def __init__(self, client: Any, bucket: str) -> None:
        self._client = client
        self._bucket = bucket

    def put(self, tenant_id: str, export_id: str, body: bytes) -> None:
        with translated():
            self._client.put_object(
                Bucket=self._bucket,
                Key=export_key(tenant_id, export_id),
                Body=body,
                ContentType=CONTENT_TYPE,
            )

    def start_upload(self, tenant_id: str, export_id: str) -> str:
        with translated():
            answer = self._client.create_multipart_upload(
                Bucket=self._bucket, Key=export_key(tenant_id, export_id), ContentType=CONTENT_TYPE
            )
        return str(answer["UploadId"])

    def upload_part(
        self, tenant_id: str, export_id: str, upload_id: str, number: int, body: bytes
    ) -> str | None:
        try:
            with translated():
                answer = self._client.upload_part(
                    Bucket=self._bucket,
                    Key=export_key(tenant_id, export_id),
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=body,
                )
        except ClientError as exc:
            if error_code(exc) in NO_UPLOAD:
                return None
            raise
        return str(answer["ETag"])

    def complete(self, tenant_id: str, export_id: str, upload_id: str, etags: list[str]) -> bool:
        try:
            with translated():
                self._client.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=export_key(tenant_id, export_id),
                    UploadId=upload_id,
                    MultipartUpload={
                        "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]
                    },
                )
        except ClientError as exc:
            if error_code(exc) in NO_UPLOAD:
                return False
            raise
        return True

    def abort(self, tenant_id: str, export_id: str, upload_id: str) -> None:
        abort_upload(self._client, self._bucket, export_key(tenant_id, export_id), upload_id)

    def size(self, tenant_id: str, export_id: str) -> int | None:
        try:
            with translated():
                head = self._client.head_object(
                    Bucket=self._bucket, Key=export_key(tenant_id, export_id)
                )
        except ClientError as exc:
            if error_code(exc) in _MISSING:
                return None
            raise
        return int(head["ContentLength"])

    def discard(self, tenant_id: str, export_id: str) -> None:
        """Every version and delete marker of the object and its incomplete uploads
        (its key is the prefix of no other key: an export id is a ULID)."""
        key = export_key(tenant_id, export_id)
        remove_versions(self._client, self._bucket, key, PAGE)
        abort_uploads(self._client, self._bucket, key, PAGE)

    def presign(self, tenant_id: str, export_id: str, expires_in: int) -> tuple[str, datetime]:
        expires_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=expires_in)
        with translated():
            url = self._client.generate_presigned_url(
                "get_object",
                Params={
                    "Bucket": self._bucket,
                    "Key": export_key(tenant_id, export_id),
                    # Saved under the export's name, never rendered as a page.
                    "ResponseContentDisposition": (f'attachment; filename="{export_id}.jsonl.gz"'),
                },
                ExpiresIn=expires_in,
            )
        return url, expires_at
