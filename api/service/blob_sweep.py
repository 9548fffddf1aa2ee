"""The sweep of unreferenced blobs (contract 3.10, docs/attachments.md): a blob no
stored entity references (live, or an earlier version kept in its history) is
removed after a grace period, and never one that an entity references.

A pass over a tenant goes in three phases, each resumable, in bounded calls:

1. LIST: its blobs (ListObjectsV2, 1,000 a page): their bytes are counted (the
   quota's room, `api.service.attachments`), and those older than GRACE_S that are
   not marked become candidates (at most MAX_PENDING with the marks).
2. REFS: only when there are candidates or marks, the sha256 of every attachment
   the tenant's entities, then their earlier versions, reference (consistent
   Queries, READS_PER_CALL records a call), kept for those candidates and marks.
3. ACT: a referenced mark is unmarked; a mark at least MARK_S old when REFS
   began and unreferenced is cleared, and deleted by its version id by a later
   pass whose REFS began at least MARK_S after it was cleared and found it
   unreferenced again; an unreferenced candidate is marked (copied onto itself
   with a mark: a new version, which `stat` answers as not held). At most
   ACTS_PER_CALL S3 actions a call. Then the room is reset to the quota minus the
   bytes listed and not deleted, and the next pass is due.

Why a mark, and why MARK_S: a write HEADs a blob and commits its reference a
moment later. A blob found held was found before its mark (its HEAD then saw the
unmarked version) or is a version written after the mark (a re-upload, which the
delete by version id leaves). A write whose HEAD preceded the mark commits
within the API's timeouts, seconds, far less than MARK_S: so before the REFS of
the pass that may clear the mark begins, and that REFS finds its reference. Why
two reads: a Query may see half of a transaction still being applied
(docs/ordering.md), so one read can miss a version that an update is moving from
the entity to its history; the same move is not still half applied MARK_S later.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from api.domain.errors import TenantDeleted
from api.domain.identifiers import check_identifier
from api.domain.records import Record
from api.service import sweep_round
from api.service.sweep_ports import SweepTable, SweptBlobs

logger = logging.getLogger(__name__)

# A blob is swept only once its current version is this old: a device that uploaded
# it and stayed offline longer before pushing the write that references it gets
# ATTACHMENT_MISSING on that push, and uploads it again from its own copy.
GRACE_S = 7 * 24 * 3600
# A mark is deleted only by a pass whose reference reads began at least this long
# after it. A write commits within seconds of its HeadObject (the API's Lambda
# stops at 10 s, serverless.yml `timeout`; DynamoDB calls give up after 2 s to
# connect and 5 s to read, twice, `api.storage.models`; S3's after 2 s and 3 s,
# twice, `Settings.s3_client`): an hour is more than 300 times that.
MARK_S = 3600
# Between passes of a tenant: its unreferenced blobs go within GRACE_S + a day +
# 5 hours of their upload (marked by a daily pass, a round's hour late at most;
# cleared, then deleted, each MARK_S and up to a round's hour after the step
# before), and its room is recounted daily.
EVERY_S = 24 * 3600
# Records read per call (pages of 1,000); 5,000 records of 1 KB are some 625 read
# units at most, well under a second on DynamoDB.
READS_PER_CALL = 5000
_PAGE = 1000
# Calls of one tenant's pass a round makes in a row (its turn) before it goes on with
# the next tenant: a small tenant's pass (a listing, its references, its actions) in
# one turn; a larger one's 20,000 records read, or 40 listing pages, or 400 S3
# actions, a turn, and the rest in later turns.
TURN_CALLS = 4
# Listing pages per call: 10,000 blobs.
LIST_PAGES_PER_CALL = 10
# S3 actions (a mark: HeadObject, CopyObject of up to 10 MiB, DeleteObjects; a
# delete: ListObjectVersions, DeleteObjects) per call: at some 0.1-0.4 s each, a
# call stays well within the sweep function's 300 s (serverless.yml).
ACTS_PER_CALL = 100
# Candidates and marks a pass holds at most (each some 130 bytes of the sweep's
# item: far below DynamoDB's 400 KB); more wait for the next pass.
MAX_PENDING = 1000
# Versions of other generations (uploads a deleted life's links sent after its
# deletion) removed per call: one DeleteObjects.
OTHERS_PER_CALL = 1000
# A call holds the tenant's sweep for this long: above the sweep function's
# timeout (serverless.yml, 300 s), so a live call is never overtaken.
HOLD_S = 600

LIST, REFS, ACT = "list", "refs", "act"
ENTITIES, HISTORY = "entities", "history"


@dataclass(frozen=True)
class SweepCall:
    """What one call did, and whether the pass is over (False: call again)."""

    done: bool
    busy: bool = False  # another sweep holds the tenant: nothing done
    listed: int = 0
    read: int = 0
    marked: int = 0
    unmarked: int = 0
    cleared: int = 0  # unreferenced marks, deleted by a later pass if still so
    deleted: int = 0
    others: int = 0  # versions of other generations removed (a deleted life's uploads)


def referenced(records: Iterable[Record]) -> set[str]:
    """The sha256 of every attachment the records reference (fields of kind
    ATTACHMENT, `ItemType.attachment_fields`), deleted entities' included."""
    found: set[str] = set()
    for record in records:
        for name in record.item_type.attachment_fields:
            value = record.fields.get(name)
            if isinstance(value, dict) and isinstance(value.get("sha256"), str):
                found.add(value["sha256"])
    return found


class BlobSweep:
    def __init__(
        self,
        blobs: SweptBlobs,
        table: SweepTable,
        quota_bytes: int,
        clock_s: Callable[[], float] = time.time,
        shards: int = 16,
    ) -> None:
        self._blobs = blobs
        self._table = table
        self._quota = quota_bytes
        self._clock = clock_s
        self._shards = shards

    def sweep(self, tenant_id: str, reads: int | None = None) -> SweepCall:
        """One bounded call of the tenant's pass (a new pass when none is under way
        and the last one ended), reading at most `reads` records (READS_PER_CALL).
        Call again while `done` is False."""
        check_identifier(tenant_id, "tenantID")
        reads = READS_PER_CALL if reads is None else reads
        holder = uuid.uuid4().hex
        now = int(self._clock())
        try:
            state = self._table.take(tenant_id, holder, now, now + HOLD_S)
        except TenantDeleted:
            return SweepCall(done=True)
        if state is None:
            return SweepCall(done=True, busy=True)
        if not state.get("ph"):
            state = _new_pass(state)
        try:
            generation = self._table.generation(tenant_id)
            call = self._step(tenant_id, holder, state, reads, generation)
        except TenantDeleted:
            return SweepCall(done=True)
        due = now if not call.done else self._next_due(state)
        self._table.release(tenant_id, holder, due)
        return call

    def sweep_due(self, budget_s: float, start_shard: int = 0) -> int:
        """A round (`api.service.sweep_round`): the tenants whose pass is due, each a
        turn of TURN_CALLS calls, until `budget_s` seconds have passed; how many
        calls it made."""
        return sweep_round.sweep_due(
            self.sweep, self._table, self._clock, self._shards, budget_s, start_shard, TURN_CALLS
        )

    def _same(self, tenant: str, generation: str) -> None:
        """TenantDeleted unless the tenant's generation is still `generation` (a
        deletion ended since made a new one, whose blobs nothing here may touch)."""
        if self._table.generation(tenant) != generation:
            raise TenantDeleted("the tenant was deleted since this call began")

    def _next_due(self, state: dict[str, Any]) -> int:
        marks = state.get("marks", {})
        if marks:  # decided once MARK_S has passed since the latest mark or clearing
            due = max(_since(m) for m in marks.values()) + MARK_S + 1
        else:
            due = int(state["ended"]) + EVERY_S
        held = state.get("held")
        return due if held is None else min(due, int(held) + 1)

    def _step(
        self, tenant: str, holder: str, state: dict[str, Any], reads: int, generation: str
    ) -> SweepCall:
        if state["ph"] == LIST:
            if state.get("og") is None:
                # First, every generation but the current one: what a deleted life's
                # links uploaded after its deletion, never read again.
                began = int(self._clock())
                others, gone = self._blobs.remove_other_generations(
                    tenant, generation, OTHERS_PER_CALL, lambda: self._same(tenant, generation)
                )
                if not gone:
                    self._table.save(tenant, holder, state)
                    return SweepCall(done=False, others=others)
                state["og"] = began  # none was left of what existed then
            listed = self._list(tenant, state, generation)
            self._table.save(tenant, holder, state)
            return SweepCall(done=False, listed=listed)
        if state["ph"] == REFS:
            read = self._refs(tenant, state, reads)
            self._table.save(tenant, holder, state)
            return SweepCall(done=False, read=read)
        assert state["ph"] == ACT, state
        return self._act(tenant, holder, state, generation)

    def _list(self, tenant: str, state: dict[str, Any], generation: str) -> int:
        older_than = datetime.fromtimestamp(self._clock() - GRACE_S, tz=UTC)
        marks, candidates = state["marks"], state["cand"]
        listed = 0
        for _ in range(LIST_PAGES_PER_CALL):
            page, after = self._blobs.list_blobs(tenant, state.get("at"), generation=generation)
            for blob in page:
                state["bytes"] += blob.size
                old = blob.sha256 not in marks and blob.last_modified < older_than
                # Beyond MAX_PENDING, a candidate waits for a later pass.
                if old and len(marks) + len(candidates) < MAX_PENDING:
                    candidates[blob.sha256] = blob.size
            listed += len(page)
            state["at"] = after
            if after is None:
                break
        if state["at"] is None:
            state["ph"] = REFS
            state["rs"] = int(self._clock())  # the reference reads begin
            state["at"] = None
            state["part"] = ENTITIES
            if not marks and not candidates:
                state["ph"] = ACT  # nothing to look up
        return listed

    def _refs(self, tenant: str, state: dict[str, Any], reads: int) -> int:
        wanted = set(state["marks"]) | set(state["cand"])
        hit = set(state["hit"])
        read = 0
        while read < reads:
            records, after = self._table.records_page(
                tenant, state["part"], state.get("at"), min(_PAGE, reads - read)
            )
            read += len(records)
            hit |= referenced(records) & wanted
            state["at"] = after
            if after is None:
                # Entities first, then earlier versions: a version replaced after
                # its entity's page was read was in that page; one replaced
                # before is in the history, which is read after.
                if state["part"] == HISTORY:
                    state["ph"] = ACT
                    break
                state["part"] = HISTORY
        state["hit"] = sorted(hit)
        return read

    def _act(self, tenant: str, holder: str, state: dict[str, Any], generation: str) -> SweepCall:
        """Decide the marks and mark the candidates, ACTS_PER_CALL S3 actions a call;
        each decision leaves the state (saved when the call stops short), so the next
        call goes on with the rest and a call that dies redoes only idempotent ones."""
        hit = set(state["hit"])
        marks: dict[str, list[Any]] = state["marks"]
        cands: dict[str, int] = state["cand"]
        deleted = unmarked = marked = cleared = acts = 0
        stopped = False  # at ACTS_PER_CALL with an action left: the rest in the next call
        for sha256, mark in sorted(marks.items()):
            version, marked_at, size = mark[:3]
            if sha256 not in hit and len(mark) == 3:
                if marked_at + MARK_S <= state["rs"]:
                    mark.append(int(self._clock()))  # cleared: the REFS ended before now
                    cleared += 1
                continue  # else marked too recently for this pass's reads
            if sha256 not in hit and mark[3] + MARK_S > state["rs"]:
                continue  # cleared too recently: a later pass reads again
            if acts == ACTS_PER_CALL:
                stopped = True
                break
            acts += 1
            if sha256 in hit:
                # Referenced again: a write whose HeadObject came before the mark.
                unmarked += self._blobs.unmark(tenant, sha256, version, generation)
            else:  # unreferenced in two reads at least MARK_S apart
                self._blobs.delete_marked(tenant, sha256, version, generation)
                state["bytes"] -= size
                deleted += 1
            del marks[sha256]
        older_than = datetime.fromtimestamp(self._clock() - GRACE_S, tz=UTC)
        for sha256, size in sorted(cands.items()):
            if sha256 not in hit:
                if acts == ACTS_PER_CALL:
                    stopped = True
                    break
                acts += 1
                version = self._blobs.mark(
                    tenant, sha256, older_than, int(self._clock()), generation
                )
                if version is not None:
                    # When the copy is done, not before: the time MARK_S counts from.
                    marks[sha256] = [version, int(self._clock()), size]
                    marked += 1
            del cands[sha256]
        if stopped:
            self._table.save(tenant, holder, state)
            return SweepCall(
                done=False, marked=marked, unmarked=unmarked, cleared=cleared, deleted=deleted
            )
        held_until = self._table.reset_room(tenant, self._quota - state["bytes"], state.get("og"))
        logger.info(
            "blob sweep: tenant=%s listed_bytes=%d marked=%d unmarked=%d cleared=%d deleted=%d",
            tenant,
            state["bytes"],
            marked,
            unmarked,
            cleared,
            deleted,
        )
        ended = _new_pass(state)
        ended["ph"] = None  # idle until due
        ended["ended"] = int(self._clock())
        ended["held"] = held_until  # a hold left for old links: due when they cannot land
        self._table.save(tenant, holder, ended)
        state.clear()
        state.update(ended)
        return SweepCall(
            done=True, marked=marked, unmarked=unmarked, cleared=cleared, deleted=deleted
        )


def _since(mark: list[Any]) -> int:
    """When the mark was made, or cleared (a mark is [version, marked at, size] and,
    once a pass found it unreferenced, the time it was cleared)."""
    return int(mark[3] if len(mark) > 3 else mark[1])


def _new_pass(state: dict[str, Any]) -> dict[str, Any]:
    """A pass from its start, keeping the marks of the last one."""
    return {
        "ph": LIST,
        "at": None,
        "part": ENTITIES,
        "bytes": 0,
        "cand": {},
        "hit": [],
        "rs": None,
        "marks": state.get("marks", {}),
        "ended": state.get("ended"),
        "held": state.get("held"),
        "og": None,  # when the removal of other generations began its last listing
    }
