"""A tenant's data exported (contract 3.9): `exportTenant`, owners only.

The file is gzipped JSON Lines: a first line naming the export, one line per live
entity (`{"entity": ...}`, as a first sync returns it), then what changed while
those were read (`entity` lines again, and `{"deleted": ...}`), one line per
earlier version (`{"version": ...}`, as `history` returns it), and a last line
with the counts and the token of the sync the file ends at (`{"end": ...}`): a
file without it is truncated. Applied in order like sync pages, the lines give
the tenant at that token.

A call starts a job, or goes on with one, for up to STEPS_PER_CALL steps; calling
again continues it, so a tenant of any size is exported in bounded requests. A
step reads one page (of a first sync, then of the history partition) and writes
its part of the file with the job's new state in one transaction, so a call that
dies halfway is resumed by the next and no line is written twice. A finished job
answers with a download link, valid for DOWNLOAD_LINK_S, signed with the job's
own key (`api.app` serves it); job and file expire after KEPT_S.
"""

from __future__ import annotations

import dataclasses
import enum
import gzip
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Protocol

from ulid import ULID

from api.domain.errors import NotFound
from api.domain.exports import ExportJob, ExportPhase
from api.domain.identifiers import check_identifier
from api.domain.records import Record, record_json
from api.domain.timestamps import format_time
from api.service.reading import Reading

# Entities or versions per step: a record is at most 16 KB (MAX_ITEM_BYTES), so a
# step's parts stay far below a transaction's 4 MB.
STEP_ITEMS = 100
# Steps per call: up to 2,000 lines, about 20 transactions of 10 KB for people of 400
# bytes (gzip keeps about a fifth), a second or two on DynamoDB.
STEPS_PER_CALL = 20
# DynamoDB stores an item of at most 400 KB: a part (a gzip member) stays below.
MAX_PART_BYTES = 350 * 1024
DOWNLOAD_LINK_S = 15 * 60
KEPT_S = 7 * 24 * 3600


class ExportJobs(Protocol):
    """What an export needs of storage (`api.storage.exports.ExportTable`)."""

    def create(self, job: ExportJob, expires_at: int) -> None: ...
    def get(self, tenant_id: str, export_id: str) -> ExportJob | None: ...
    def advance(
        self, before: ExportJob, after: ExportJob, parts: list[bytes], expires_at: int
    ) -> bool: ...
    def parts(self, tenant_id: str, export_id: str) -> Iterator[bytes]: ...
    def versions_page(
        self, tenant_id: str, after: str | None, limit: int
    ) -> tuple[list[Record], str | None]: ...


class Link(enum.Enum):
    VALID = "valid"
    EXPIRED = "expired"
    UNKNOWN = "unknown"  # no such export, not finished, or a signature that does not match


class TenantExport:
    def __init__(self, jobs: ExportJobs, reading: Reading, clock_ms: Callable[[], int]) -> None:
        self._jobs = jobs
        self._reading = reading
        self._clock_ms = clock_ms

    def export_tenant(
        self, tenant_id: str, export_id: str | None, by: str, steps: int = STEPS_PER_CALL
    ) -> ExportJob:
        """Start an export (no `export_id`) or go on with one; the job as it stands."""
        check_identifier(tenant_id, "tenantID")
        if export_id is None:
            job = ExportJob(tenant_id, str(ULID()), by, self._clock_ms(), key=secrets.token_hex(16))
            self._jobs.create(job, _expires_at(job))
        else:
            check_identifier(export_id, "exportID")
            found = self._jobs.get(tenant_id, export_id)
            if found is None:
                days = KEPT_S // 86400
                raise NotFound(f"no export {export_id} of this tenant (kept {days} days)")
            job = found
        for _ in range(steps):
            if job.done:
                break
            after, parts = self._step(job)
            if self._jobs.advance(job, after, parts, _expires_at(job)):
                job = after
                continue
            # Another call moved the job: go on from where it stands. Or the job is
            # gone: expired, or its tenant deleted (contract 3.8).
            moved = self._jobs.get(tenant_id, job.export_id)
            if moved is None:
                raise NotFound(f"export {job.export_id} is gone: expired, or its tenant deleted")
            job = moved
        return job

    def link(self, job: ExportJob) -> tuple[int, str]:
        """A finished job's download link: until when (epoch ms) and its signature."""
        until = self._clock_ms() + DOWNLOAD_LINK_S * 1000
        return until, _signature(job, until)

    def check_link(
        self, tenant_id: str, export_id: str, until: int, signature: str
    ) -> tuple[Link, int]:
        """Whether a download link is one `link` gave, and the file's size (one GetItem)."""
        job = self._jobs.get(tenant_id, export_id)
        if job is None or not job.done:
            return Link.UNKNOWN, 0
        if not hmac.compare_digest(_signature(job, until), signature):
            return Link.UNKNOWN, 0
        return (Link.VALID if self._clock_ms() < until else Link.EXPIRED), job.bytes

    def file(self, tenant_id: str, export_id: str) -> Iterator[bytes]:
        """The finished export's gzip file, part by part."""
        return self._jobs.parts(tenant_id, export_id)

    def _step(self, job: ExportJob) -> tuple[ExportJob, list[bytes]]:
        """The job after its next step, and the parts that step writes."""
        lines: list[dict[str, Any]] = []
        if job.phase in (ExportPhase.ENTITIES, ExportPhase.CHANGES):
            # The first sync's pages, then one sync from their token: what moved while
            # they were read (an entity updated meanwhile left its place behind them).
            first = job.phase is ExportPhase.ENTITIES
            if first and job.parts == 0 and job.position is None:
                lines.append({"export": _header(job)})
            page = self._reading.changes(
                job.tenant_id,
                since=None if first or job.position else job.change_token,
                cursor=job.position,
                limit=STEP_ITEMS,
            )
            # A first sync's deletions are the latest write's: not the tenant's data.
            kept = [r for r in page.items if not (first and r.deleted)]
            lines += [{"deleted" if r.deleted else "entity": record_json(r)} for r in kept]
            ended = page.cursor is None
            phase: ExportPhase
            if not ended:
                phase = job.phase
            elif first and page.change_token:
                phase = ExportPhase.CHANGES
            else:  # caught up, or an empty tenant with no token to sync on from
                phase = ExportPhase.VERSIONS
            after = dataclasses.replace(
                job,
                entities=job.entities + sum(not r.deleted for r in kept),
                position=page.cursor,
                phase=phase,
                change_token=page.change_token if ended else job.change_token,
            )
        else:
            versions, position = self._jobs.versions_page(job.tenant_id, job.position, STEP_ITEMS)
            lines += [{"version": record_json(r)} for r in versions]
            after = dataclasses.replace(
                job,
                versions=job.versions + len(versions),
                position=position,
                phase=ExportPhase.VERSIONS if position else ExportPhase.DONE,
            )
            if after.done:
                lines.append(
                    {
                        "end": {
                            "entities": after.entities,
                            "versions": after.versions,
                            "changeToken": after.change_token,
                        }
                    }
                )
        parts = _gzip_members([_line(line) for line in lines])
        return dataclasses.replace(
            after, parts=job.parts + len(parts), bytes=job.bytes + sum(map(len, parts))
        ), parts


def _header(job: ExportJob) -> dict[str, Any]:
    return {
        "tenantID": job.tenant_id,
        "exportID": job.export_id,
        "askedBy": job.asked_by,
        "askedAt": format_time(datetime.fromtimestamp(job.asked_at_ms / 1000, tz=UTC)),
    }


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _gzip_members(lines: list[bytes]) -> list[bytes]:
    """The lines as gzip members of at most MAX_PART_BYTES each (a line is at most
    about 16 KB, so one always fits)."""
    if not lines:
        return []
    member = gzip.compress(b"".join(lines), compresslevel=6, mtime=0)
    if len(member) <= MAX_PART_BYTES or len(lines) == 1:
        return [member]
    half = len(lines) // 2
    return _gzip_members(lines[:half]) + _gzip_members(lines[half:])


def _signature(job: ExportJob, until: int) -> str:
    message = f"{job.tenant_id}\n{job.export_id}\n{until}".encode()
    return hmac.new(job.key.encode(), message, hashlib.sha256).hexdigest()[:32]


def _expires_at(job: ExportJob) -> int:
    return job.asked_at_ms // 1000 + KEPT_S
