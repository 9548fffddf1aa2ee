"""An export of a tenant's data (contract 3.9): the job's state, stored between calls.

An export writes a gzipped JSON Lines file in parts, one step at a time: first the
live entities (pages of a first sync), then what changed meanwhile (one sync from
its token), then the earlier versions (the history), then a last line that says
how many of each it holds. Each step stores its parts
and the job's new state together, so a step either happened or did not: a call
that dies halfway is redone by the next. Then the file is published to S3 (one
object), from its parts: in one PUT, or a multipart upload whose id and uploaded
parts the job keeps, so that publishing resumes as the writing does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ExportPhase(enum.Enum):
    ENTITIES = "e"  # pages of `changes(since: null)`; `position` is the cursor
    CHANGES = "c"  # then one sync from its token: what moved meanwhile; `position`: cursor
    VERSIONS = "v"  # pages of the history partition; `position` is where the next starts
    PUBLISH = "p"  # the file's parts copied to its S3 object; `published`: parts copied
    DONE = "d"  # the S3 object holds the whole file


@dataclass(frozen=True)
class ExportJob:
    tenant_id: str
    export_id: str
    asked_by: str
    asked_at_ms: int
    # The groups its caller was in at any call that wrote part of it (contract 3.12):
    # once the caller has left one, its file is linked no more (it may hold that
    # group's records), nor is it continued.
    groups: tuple[str, ...] = ()
    phase: ExportPhase = ExportPhase.ENTITIES
    position: str | None = None  # where the phase goes on (None: from its start)
    parts: int = 0  # parts of the file written
    entities: int = 0
    versions: int = 0
    bytes: int = 0  # of the gzipped file so far
    change_token: str | None = None  # the token of the last sync whose pages are read
    # The first sync's token (the tenant's head when the export began): the history is
    # exported as written up to it, so versions written during the export do not
    # lengthen it (None: the tenant had no change then; or a job from before this
    # field, which goes by `change_token`).
    history_token: str | None = None
    # Below every token a record read into the file could leave the caller's view at
    # (the first sync's first read proves every write up to it): a LeftView sentinel
    # of the caller's partitions above it may be of a record the file holds (None: no
    # read yet, or a job from before this field, which goes by `history_token`).
    begun: str | None = None
    # Up to where the caller's partitions were last found to hold no LeftView of a
    # record out of its view (`api.service.export_view`): the next call reads above it.
    checked: str | None = None
    # Publishing (PUBLISH): the next part of the file to copy to S3, the multipart
    # upload's id (None: none started; a small file is one PUT), and the ETags of the
    # S3 parts uploaded so far (part n+1 is etags[n]).
    published: int = 0
    upload_id: str | None = None
    etags: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        return self.phase is ExportPhase.DONE
