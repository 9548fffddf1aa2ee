"""A tenant's data exported (contract 3.9): `exportTenant`, owners only.

The file's format and its parts: `api.service.export_file`.

A call starts a job, or goes on with one; calling again continues it, so a tenant
of any size is exported in bounded requests. A step reads one page (of a first
sync, then of the history partition) and writes its part of the file with the
job's new state in one transaction, so a call that dies halfway is resumed by the
next and no line is written twice.

A call holds itself to a budget of read units, write units and seconds (contract
3.9), counted in the capacity DynamoDB reports for its calls (`ExportJobs.metered`),
and sizes each step to what is left at its worst: the constants below say how.

Then the file is published to S3 from its parts in the table
(`api.service.export_publishing`), at most UPLOADS_PER_CALL uploads a call. A
finished job answers a presigned S3 GET, valid DOWNLOAD_LINK_S.
The parts stay in the table until the job's TTL (KEPT_S), which deletes them for
free; the bucket's lifecycle expires the object after as long.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ulid import ULID

from api.domain import catalog
from api.domain.errors import NotFound
from api.domain.exports import ExportJob, ExportPhase
from api.domain.identifiers import check_identifier
from api.domain.item_types import MAX_ITEM_BYTES
from api.domain.membership import groups_of
from api.domain.records import Record, record_json
from api.domain.retention import Retention
from api.domain.visibility import sees
from api.service import export_file
from api.service.export_ports import ExportFiles, ExportJobs, Meter
from api.service.export_publishing import Publishing, upload_bytes
from api.service.export_view import FROM_START, check_still_viewed
from api.service.reading import MAX_SCANNED, Reading

# Entities or versions per step at most: a record is at most 16 KB (MAX_ITEM_BYTES),
# so a step's parts stay far below a transaction's 4 MB.
STEP_ITEMS = 100
# ... and lines of at most STEP_BYTES in all, as far as the call's steps so far show
# what a line weighs (its first step counts each at MAX_ITEM_BYTES): a step's decoding,
# JSON and gzip hold the interpreter's lock from start to end, and other tenants'
# requests on the server wait through it: a step of 100 reminders of 15 KB is 1.5 MB
# of lines; 256 KB is some 17 of those (scripts/bench-hostile exports; commit abf533c).
STEP_BYTES = 256 * 1024
# Deletions a first-sync step skips at most (besides its page's entries): as a
# request's `changes` (contract 3.4).
STEP_SCANNED = MAX_SCANNED
# A call's budget (contract 3.9): no step starts once the call has consumed this many
# read units (a first-sync page of 1,000 people is some 80; contract 3.4 bounds a
# request at about 300) ...
READ_UNITS_PER_CALL = 300
# ... or write units (a step of 100 people of 400 bytes writes some 20: 2 per KB of
# gzip in a transaction, and the job) ...
WRITE_UNITS_PER_CALL = 300
# ... or after this many seconds (the API's Lambda stops at 10 s): a step then is at
# most a few hundred KB read and written, well under a second.
CALL_S = 2.0
# Steps per call at most, whatever the budget leaves (a step of skipped deletions
# costs a few units).
STEPS_PER_CALL = 200
# A server runs one export step at a time (of any tenant) and, after each, holds the
# turn idle PAUSE times as long as the step took: a step's decoding, JSON and gzip
# hold the interpreter's lock, so exports take at most about half a server and other
# tenants' reads find it free. A call waits for the turn within CALL_S, else answers
# its progress (maybe none) and the app calls again.
PAUSE = 1.0
_turn = threading.Lock()
# What one log entry or earlier version can cost at its largest: up to 16 KB of
# fields, their names and the item's keys and attributes (~18 KB), read consistently
# (1 unit per 4 KB) ...
ENTRY_READ_UNITS = 4.5
# ... and its line, gzipped (no smaller, at worst), written in a transaction (2 units
# per KB).
ENTRY_WRITE_UNITS = 36
# Read units a step may cost beyond its entries (the call's own, the job's GetItem and
# the head's, are metered before it): each Query's rounding up to 4 KB (at most 3 a
# step), the head a cursor page reads after them (1: contract 3.8) and, in the first
# step of a sync, its first read of the head and the 11 newest entries (contract 3.4).
_STEP_READ_SLACK = 3 + 1
_FIRST_READ_UNITS = 1 + 12 * ENTRY_READ_UNITS
_STEP_MIN_ENTRIES = 2  # the least a step reads: an entry and the one past it
DOWNLOAD_LINK_S = 15 * 60
KEPT_S = 7 * 24 * 3600
# S3 uploads (PUTs or parts) per call at most; and one sends a body only when the
# call's read units left pay for reading it back from the table, or as the call's
# first step (an S3 part is at least 5 MiB: some 1,400 read units, a call's alone).
UPLOADS_PER_CALL = 2


class TenantExport:
    def __init__(
        self,
        jobs: ExportJobs,
        files: ExportFiles,
        reading: Reading,
        clock_ms: Callable[[], int],
        retention: Retention | None = None,
    ) -> None:
        self._jobs = jobs
        self._retention = retention or Retention()
        self._files = files
        self._publishing = Publishing(jobs, files)
        self._reading = reading
        self._clock_ms = clock_ms

    def export_tenant(
        self, tenant_id: str, export_id: str | None, by: str, steps: int | None = None
    ) -> ExportJob:
        """Start an export (no `export_id`) or go on with one, for up to `steps` steps
        (STEPS_PER_CALL, read at each call); the job as it stands."""
        check_identifier(tenant_id, "tenantID")
        with self._jobs.metered() as meter:  # the call's reads and writes, from here
            # TENANT_DELETED while the tenant is being deleted: steps of the history or
            # of publishing read nothing else that would say so (one GetItem).
            self._reading.check_not_deleted(tenant_id)
            if export_id is None:
                job = ExportJob(tenant_id, str(ULID()), by, self._clock_ms(), groups_of(by))
                self._jobs.create(job, _expires_at(job))
            else:
                check_identifier(export_id, "exportID")
                found = self._jobs.get(tenant_id, export_id)
                # An export holds its caller's view (records not every member sees): it
                # is continued, and its file linked, only for the caller who started it;
                # to another, it does not exist.
                if (
                    found is None
                    or found.asked_by != by
                    or _expires_at(found) * 1000 <= self._clock_ms()
                ):
                    # (DynamoDB's TTL deletes an expired job some time after it expires.)
                    days = KEPT_S // 86400
                    raise NotFound(f"no export {export_id} of this tenant (kept {days} days)")
                if not set(found.groups) <= set(groups_of(by)):
                    # Its caller left a group since a call wrote part of it: the file
                    # may hold that group's records, outside the caller's view now.
                    raise NotFound(
                        f"no export {export_id} of this tenant for you: you left a group "
                        "since it began; start a new export"
                    )
                # Nor once a record it may hold has left its caller's view since.
                checked = check_still_viewed(
                    self._jobs, self._reading, self._retention, found, by, self._clock_ms()
                )
                # Its caller's view as this request found it (its groups now).
                groups = tuple(sorted({*found.groups, *groups_of(by)}))
                job = dataclasses.replace(found, asked_by=by, groups=groups, checked=checked)
            return self._run(job, STEPS_PER_CALL if steps is None else steps, meter)

    def _run(self, job: ExportJob, steps: int, meter: Meter) -> ExportJob:
        """Steps of the job until it is done, or the call's budget is spent."""
        call = _Call(meter, time.monotonic())
        for step in range(steps):
            if job.done:
                break
            # (Starting or completing an upload costs the table one PutItem: not held
            # back by the units, once the file's last part is sent.)
            bodiless = job.phase is ExportPhase.PUBLISH and not upload_bytes(job)
            spent = not bodiless and (call.reads_left() <= 0 or call.writes_left() <= 0)
            if step and (spent or call.elapsed() >= CALL_S):
                break  # the call's budget is spent: the next call goes on
            if not _turn.acquire(timeout=max(0.0, CALL_S - call.elapsed())):
                break  # other exports held the server's turn all this while
            try:
                took = time.monotonic()
                moved = self._next(job, call)
                time.sleep(PAUSE * (time.monotonic() - took))
            finally:
                _turn.release()
            if moved is None:
                break  # the call's budget would not pay for the next step
            job = moved
        return job

    def _next(self, job: ExportJob, call: _Call) -> ExportJob | None:
        """The job after the call's next step; None when the call's budget does not
        pay for it (nothing written)."""
        tenant_id = job.tenant_id
        parts: list[bytes]
        if job.phase is ExportPhase.PUBLISH:
            body = upload_bytes(job)
            # Reading the parts back: 1 unit per 4 KB, and per Query (of up to 8 parts)
            # its rounding and the parts' keys.
            units = body / 4096 + (job.parts - job.published) / 4 + 1
            if body and (
                call.uploads == UPLOADS_PER_CALL or (call.read and units > call.reads_left())
            ):
                return None  # a call sends the bodies it can pay for, or its first
            call.uploads += bool(body)
            call.read = call.read or bool(body)
            after, parts = self._publishing.step(job), []
        else:
            # Sized for entities at their largest, unless this call's steps so far show
            # what a line costs (twice that, the parts then checked).
            if call.read and _step_read_units(job, _STEP_MIN_ENTRIES) > call.reads_left():
                return None  # the call's read units left would not pay for a step
            writes_left = call.writes_left()
            line_units = ENTRY_WRITE_UNITS if call.line_cost is None else 2 * call.line_cost
            line_bytes = call.line_bytes or MAX_ITEM_BYTES
            lines_left = min(writes_left / line_units, STEP_BYTES / line_bytes)
            after, parts, lines, heaviest = self._step(job, call.reads_left(), lines_left)
            units = export_file.write_units(parts)
            if call.read and units > writes_left:
                return None  # its parts would pass the call's write units: the next call
            call.read = True
            if lines:
                call.line_cost = max(call.line_cost or 0.0, units / lines)
                call.line_bytes = max(call.line_bytes or 0, heaviest)
        if self._jobs.advance(job, after, parts, _expires_at(job)):
            return after
        # Another call moved the job: go on from where it stands. Or the job is gone:
        # expired, or its tenant deleted (contract 3.8).
        moved = self._jobs.get(tenant_id, job.export_id)
        started = after.upload_id is not None and after.upload_id != job.upload_id
        if started and (moved is None or moved.upload_id != after.upload_id):
            # Another call started an upload first: ours is stray. (Not when the job
            # holds ours: a write applied whose answer was lost.)
            self._publishing.abort(after)
        if moved is None:
            if job.phase is ExportPhase.PUBLISH:
                # What this step wrote to S3 after the deletion emptied the prefix.
                self._files.discard(tenant_id, job.export_id)
            raise NotFound(f"export {job.export_id} is gone: expired, or its tenant deleted")
        return moved

    def link(self, job: ExportJob) -> tuple[str, datetime]:
        """A finished job's download link (a presigned S3 GET) and until when it works."""
        return self._files.presign(job.tenant_id, job.export_id, DOWNLOAD_LINK_S)

    def _step(
        self, job: ExportJob, reads_left: float, lines_left: float
    ) -> tuple[ExportJob, list[bytes], int, int]:
        """The job after its next step, the parts that step writes, its count of lines
        and the bytes of its heaviest (before gzip); the step reads what `reads_left`
        read units pay for at their worst, and at most `lines_left` entities or
        versions (at least one)."""
        lines: list[dict[str, Any]] = []
        reads_left -= _step_read_units(job, 0)
        # Entries the step may read: its page's, one past them (a Query reads one past
        # its limit), and the deletions a first sync skips with one more Query.
        entries = max(_STEP_MIN_ENTRIES, int(reads_left // ENTRY_READ_UNITS))
        limit = max(1, min(STEP_ITEMS, entries - 1, int(lines_left)))
        if job.phase in (ExportPhase.ENTITIES, ExportPhase.CHANGES):
            # The first sync's pages, then one sync from their token: what moved while
            # they were read (an entity updated meanwhile left its place behind them).
            initial = job.phase is ExportPhase.ENTITIES
            if initial and job.parts == 0 and job.position is None:
                lines.append({"export": export_file.header(job)})
            page = self._reading.changes(
                job.tenant_id,
                since=None if initial or job.position else job.change_token,
                cursor=job.position,
                limit=limit,
                max_scanned=min(STEP_SCANNED, max(0, entries - limit - 2)),
                sub=job.asked_by,  # the caller's view: its stream read beside the log
                release=catalog.RELEASE,  # what it serves (LeftViewItem from visibilitySince)
            )
            # A first sync's deletions are the latest write's: not the tenant's data
            # (nor, in the caller's view, a record that left it).
            kept = [r for r in page.items if not (initial and (r.deleted or r.left_view))]
            lines += [{_kind(r): _line(r)} for r in kept]
            ended = page.cursor is None
            phase: ExportPhase
            if not ended:
                phase = job.phase
            elif initial and page.change_token:
                phase = ExportPhase.CHANGES
            else:  # caught up, or an empty tenant with no token to sync on from
                phase = ExportPhase.VERSIONS
            after = dataclasses.replace(
                job,
                entities=job.entities + sum(_kind(r) == "entity" for r in kept),
                position=page.cursor,
                phase=phase,
                change_token=page.change_token if ended else job.change_token,
                history_token=page.change_token if initial and ended else job.history_token,
                # The first read's proven token (the head's transaction's previous):
                # what leaves the caller's view after that read is above it.
                begun=(page.settled or FROM_START)
                if initial and job.position is None and job.begun is None
                else job.begun,
            )
        else:
            # The history as written up to the first sync's token: what it held then,
            # and the versions its entities of then became. Versions written since are
            # skipped, one read per entity (`versions_page`), so a tenant rewritten
            # throughout the export does not keep it from ending. (A job from before
            # `history_token` goes by its sync's token.)
            upto = job.history_token or job.change_token
            versions: list[Record] = []
            position = None
            if upto is not None:  # else the tenant had no change: no version either
                # Each Query it makes rounds its read up to 4 KB (a unit) once.
                reads = max(_STEP_MIN_ENTRIES, int(reads_left // (ENTRY_READ_UNITS + 1)))
                versions, position = self._jobs.versions_page(
                    job.tenant_id, job.position, min(limit, reads - 1), upto, reads
                )
            # Only the versions the caller saw: each by its own visibility (an earlier
            # version shared with the caller is in, a record's versions private to
            # another are not; contract 3.12).
            # And only of records in the caller's view now, as history answers (one
            # BatchGetItem of the page's records).
            shown = [r for r in versions if sees(r.visibility, job.asked_by)]
            seen = self._reading.seen(job.tenant_id, {r.id for r in shown}, job.asked_by)
            shown = [r for r in shown if r.id in seen]
            lines += [{"version": record_json(r)} for r in shown]
            after = dataclasses.replace(
                job,
                versions=job.versions + len(shown),
                position=position,
                phase=ExportPhase.VERSIONS if position else ExportPhase.PUBLISH,
            )
            if after.phase is ExportPhase.PUBLISH:
                lines.append(
                    {
                        "end": {
                            "entities": after.entities,
                            "versions": after.versions,
                            "changeToken": after.change_token,
                        }
                    }
                )
        encoded = [export_file.line(value) for value in lines]
        parts = export_file.gzip_members(encoded)
        after = dataclasses.replace(
            after, parts=job.parts + len(parts), bytes=job.bytes + sum(map(len, parts))
        )
        return after, parts, len(lines), max(map(len, encoded), default=0)


def _line(record: Record) -> dict[str, Any]:
    """A record of a sync's pages as its line holds it: a LeftView sentinel as the
    `LeftViewItem` a sync returns (its id, type and token; no fields)."""
    if not record.left_view:
        return record_json(record)
    return {**record_json(dataclasses.replace(record, deleted=True)), "__typename": "LeftViewItem"}


def _kind(record: Record) -> str:
    """A line's kind for a record of a sync's pages (export_file)."""
    return "leftView" if record.left_view else "deleted" if record.deleted else "entity"


@dataclasses.dataclass
class _Call:
    """What one call has used of its budget so far."""

    meter: Meter
    started: float  # time.monotonic()
    uploads: int = 0
    line_cost: float | None = None  # the most write units a line cost in this call
    line_bytes: int | None = None  # the most bytes a line weighed in this call
    read: bool = False  # whether a step read the tenant's data, or the file's parts

    def reads_left(self) -> float:
        return READ_UNITS_PER_CALL - self.meter.read_units

    def writes_left(self) -> float:
        return WRITE_UNITS_PER_CALL - self.meter.write_units

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def _step_read_units(job: ExportJob, entries: int) -> float:
    """What the job's next step reads at its worst, but for entries past `entries`."""
    units = _STEP_READ_SLACK + entries * ENTRY_READ_UNITS
    if job.position is None and job.phase is not ExportPhase.VERSIONS:
        units += _FIRST_READ_UNITS  # the first read of a sync
    return units


def _expires_at(job: ExportJob) -> int:
    return job.asked_at_ms // 1000 + KEPT_S
