"""Publishing an export's file to S3 (contract 3.9), from its parts in the table,
one step at a time (`api.service.exports` runs the steps within a call's budget).

A file of at most SINGLE_PUT_MAX_BYTES goes in one PUT, a larger one by a
multipart upload of parts of at least UPLOAD_PART_BYTES (S3's minimum but for the
last). The upload's id and each uploaded part's ETag are kept on the job, written
with the same conditioned write as the steps before, so publishing resumes where it
stands and two racing calls cannot both advance it (uploading a part number again
replaces it; a completion whose answer was lost is found by the object's size).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

from api.domain.errors import SyncError
from api.domain.exports import ExportJob, ExportPhase
from api.service import export_file
from api.service.export_ports import ExportFiles, ExportJobs

# A file up to this size is one PutObject; a larger one a multipart upload whose
# parts (but the last) are at least UPLOAD_PART_BYTES, S3's minimum: a step gathers
# the file's parts until they reach it (at most 350 KB more). Module constants, so
# that tests can lower them (S3, and moto, refuse smaller parts).
SINGLE_PUT_MAX_BYTES = 5 * 1024 * 1024
UPLOAD_PART_BYTES = 5 * 1024 * 1024
# At most this many S3 parts an upload (S3 takes 10,000): parts grow past
# UPLOAD_PART_BYTES for a file above 5 GiB, and the job item keeps their ETags
# (some 37 bytes each) under DynamoDB's 400 KB.
MAX_UPLOAD_PARTS = 1000

logger = logging.getLogger(__name__)


class Publishing:
    def __init__(self, jobs: ExportJobs, files: ExportFiles) -> None:
        self._jobs = jobs
        self._files = files

    def step(self, job: ExportJob) -> ExportJob:
        """The job after its next step of publishing the file to S3."""
        tenant, export = job.tenant_id, job.export_id
        if _one_put(job):
            body = b"".join(self._jobs.parts(tenant, export))
            if len(body) != job.bytes:
                raise export_file.parts_gone(job)
            self._files.put(tenant, export, body)
            return _published(job)
        if job.upload_id is None:
            # A call that completed the upload and saved nothing (another reset the
            # job meanwhile) left the whole object: no second upload of it.
            if self._files.size(tenant, export) == job.bytes:
                return _published(job)
            return dataclasses.replace(job, upload_id=self._files.start_upload(tenant, export))
        if job.published < job.parts:
            body, published = self._gather(job)
            number = len(job.etags) + 1
            etag = self._files.upload_part(tenant, export, job.upload_id, number, body)
            if etag is None:
                return self._upload_gone(job)
            return dataclasses.replace(job, published=published, etags=(*job.etags, etag))
        # Every part is uploaded. A completion whose answer was lost (or another call's
        # that died before it saved the job) left the object: its size says so.
        if self._files.size(tenant, export) == job.bytes:
            return _published(job)
        if not self._files.complete(tenant, export, job.upload_id, list(job.etags)):
            return self._upload_gone(job)
        return _published(job)

    def abort(self, job: ExportJob) -> None:
        """Abort the job's upload: another call started one first (ours is stray)."""
        assert job.upload_id is not None
        # A courtesy: the lifecycle aborts a stray upload after a day anyway.
        with contextlib.suppress(SyncError):
            self._files.abort(job.tenant_id, job.export_id, job.upload_id)

    def _gather(self, job: ExportJob) -> tuple[bytes, int]:
        """The file's parts from `published` on until they make an S3 part (at least
        UPLOAD_PART_BYTES, more for a file of over MAX_UPLOAD_PARTS of those, or the
        rest); and the index of the part after them."""
        least = max(UPLOAD_PART_BYTES, -(-job.bytes // MAX_UPLOAD_PARTS))
        body = bytearray()
        index = job.published
        for part in self._jobs.parts(job.tenant_id, job.export_id, start=job.published):
            body += part
            index += 1
            if len(body) >= least or index == job.parts:
                break
        else:  # the parts ended before the job's count of them
            raise export_file.parts_gone(job)
        return bytes(body), index

    def _upload_gone(self, job: ExportJob) -> ExportJob:
        """The upload is gone: completed (by a call whose answer was lost) when the
        object is whole; else aborted (the bucket's lifecycle aborts an upload a day
        old), and publishing starts again."""
        if self._files.size(job.tenant_id, job.export_id) == job.bytes:
            return _published(job)
        logger.warning("export %s: its upload is gone, publishing again", job.export_id)
        return dataclasses.replace(job, published=0, upload_id=None, etags=())


def upload_bytes(job: ExportJob) -> int:
    """The most the job's next step reads of its file's parts to send to S3 (a PUT,
    or a part of at least UPLOAD_PART_BYTES and at most one part of the table more);
    0 when it sends no body."""
    if _one_put(job):
        return job.bytes
    if job.upload_id is not None and job.published < job.parts:
        least = max(UPLOAD_PART_BYTES, -(-job.bytes // MAX_UPLOAD_PARTS))
        return min(job.bytes, least + export_file.MAX_PART_BYTES)
    return 0


def _one_put(job: ExportJob) -> bool:
    """Whether the job's file goes to S3 in one PutObject (no upload started)."""
    return job.upload_id is None and job.bytes <= SINGLE_PUT_MAX_BYTES


def _published(job: ExportJob) -> ExportJob:
    return dataclasses.replace(job, phase=ExportPhase.DONE, published=job.parts)
