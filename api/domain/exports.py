"""An export of a tenant's data (contract 3.9): the job's state, stored between calls.

An export writes a gzipped JSON Lines file in parts, one step at a time: first the
live entities (pages of a first sync), then what changed meanwhile (one sync from
its token), then the earlier versions (the history), then a last line that says
how many of each it holds. Each step stores its parts
and the job's new state together, so a step either happened or did not: a call
that dies halfway is redone by the next.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ExportPhase(enum.Enum):
    ENTITIES = "e"  # pages of `changes(since: null)`; `position` is the cursor
    CHANGES = "c"  # then one sync from its token: what moved meanwhile; `position`: cursor
    VERSIONS = "v"  # pages of the history partition; `position` is where the next starts
    DONE = "d"


@dataclass(frozen=True)
class ExportJob:
    tenant_id: str
    export_id: str
    asked_by: str
    asked_at_ms: int
    key: str  # signs the job's download links (never shown)
    phase: ExportPhase = ExportPhase.ENTITIES
    position: str | None = None  # where the phase goes on (None: from its start)
    parts: int = 0  # parts of the file written
    entities: int = 0
    versions: int = 0
    bytes: int = 0  # of the gzipped file so far
    change_token: str | None = None  # the token of the last sync whose pages are read

    @property
    def done(self) -> bool:
        return self.phase is ExportPhase.DONE
