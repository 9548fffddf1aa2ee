"""An export's file (contract 3.9): its format, its lines, and the gzip members
it is cut into (the parts kept in the table).

The file is gzipped JSON Lines: a first line naming the export, one line per live
entity (`{"entity": ...}`, as a first sync returns it), then what changed while
those were read (`entity` lines again, `{"deleted": ...}`, and `{"leftView": ...}`
for a record that left the caller's view meanwhile), one line per earlier version
the caller saw (`{"version": ...}`, as `history` returns it), and a last line
with the counts and the token of the sync the file ends at (`{"end": ...}`): a
file without it is truncated. Applied in order like sync pages, the lines give
the tenant at that token as its caller (`askedBy`) sees it: its tenant-wide records
and those shared with it (contract 3.12).
"""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from typing import Any

from api.domain.errors import NotFound
from api.domain.exports import ExportJob
from api.domain.timestamps import format_time

# DynamoDB stores an item of at most 400 KB: a part (a gzip member) stays below.
MAX_PART_BYTES = 350 * 1024


def header(job: ExportJob) -> dict[str, Any]:
    return {
        "tenantID": job.tenant_id,
        "exportID": job.export_id,
        "askedBy": job.asked_by,
        "askedAt": format_time(datetime.fromtimestamp(job.asked_at_ms / 1000, tz=UTC)),
    }


def line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def gzip_members(lines: list[bytes]) -> list[bytes]:
    """The lines as gzip members of at most MAX_PART_BYTES each (a line is at most
    about 16 KB, so one always fits)."""
    if not lines:
        return []
    member = gzip.compress(b"".join(lines), compresslevel=6, mtime=0)
    if len(member) <= MAX_PART_BYTES or len(lines) == 1:
        return [member]
    half = len(lines) // 2
    return gzip_members(lines[:half]) + gzip_members(lines[half:])


def write_units(parts: list[bytes]) -> float:
    """What a step's transaction costs for its parts: 2 write units per KB of each,
    and the job's item (under 1 KB, or some 37 bytes an ETag more)."""
    return sum(2 * -(-len(part) // 1024) for part in parts) + 4


def parts_gone(job: ExportJob) -> NotFound:
    # The table lost parts the job counts: they expired with it (TTL), or a deletion
    # of the tenant removed them first. Never a truncated file published.
    return NotFound(f"export {job.export_id} is gone: expired, or its tenant deleted")
