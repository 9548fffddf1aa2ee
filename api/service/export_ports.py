"""What an export needs of the rest of the system (`api.service.exports`): its
jobs and their parts in the table, the capacity its calls consume, and the
finished files in S3. Implemented by `api.storage.exports` and
`api.storage.export_files`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol

from api.domain.exports import ExportJob
from api.domain.records import Record


class ExportJobs(Protocol):
    """What an export needs of storage (`api.storage.exports.ExportTable`)."""

    def create(self, job: ExportJob, expires_at: int) -> None: ...
    def get(self, tenant_id: str, export_id: str) -> ExportJob | None: ...
    def advance(
        self, before: ExportJob, after: ExportJob, parts: list[bytes], expires_at: int
    ) -> bool: ...
    def parts(self, tenant_id: str, export_id: str, start: int = 0) -> Iterator[bytes]: ...
    def versions_page(
        self, tenant_id: str, after: str | None, limit: int, upto: str, max_read: int
    ) -> tuple[list[Record], str | None]: ...
    def left_view(
        self, tenant_id: str, principals: Sequence[str], after: str, max_read_units: float
    ) -> tuple[set[str], bool, str | None]:
        """The ids of the LeftView sentinels above `after` in the main log and the
        streams of `principals`; whether all were read within `max_read_units`; and
        the token up to which the Queries held every entry (None: none)."""
        ...

    def metered(self) -> AbstractContextManager[Meter]:
        """A meter of the DynamoDB capacity consumed in this context meanwhile (its
        reads of the tenant's data included)."""
        ...


class Meter(Protocol):
    read_units: float
    write_units: float


class ExportFiles(Protocol):
    """Where finished exports' files go (`api.storage.export_files.S3ExportFiles`):
    one S3 object per export. Errors are the domain's (a transient one UNAVAILABLE)."""

    def put(self, tenant_id: str, export_id: str, body: bytes) -> None: ...
    def start_upload(self, tenant_id: str, export_id: str) -> str:
        """A new multipart upload of the export's object: its id."""
        ...

    def upload_part(
        self, tenant_id: str, export_id: str, upload_id: str, number: int, body: bytes
    ) -> str | None:
        """Part `number` (from 1) of the upload: its ETag; None when the upload is gone
        (completed, or aborted)."""
        ...

    def complete(self, tenant_id: str, export_id: str, upload_id: str, etags: list[str]) -> bool:
        """Complete the upload of these parts; False when the upload is gone."""
        ...

    def abort(self, tenant_id: str, export_id: str, upload_id: str) -> None: ...
    def size(self, tenant_id: str, export_id: str) -> int | None:
        """The size of the export's object; None when there is none."""
        ...

    def discard(self, tenant_id: str, export_id: str) -> None:
        """Remove the export's object (every version) and its incomplete uploads."""
        ...

    def presign(self, tenant_id: str, export_id: str, expires_in: int) -> tuple[str, datetime]:
        """A presigned GET of the export's object, saved as `<export>.jsonl.gz`."""
        ...
