"""Reading: one entity, and the changes feed (`changes`) in pages, from a sync's
first read of the log's tail and its bound (`api.domain.chain`) to the pages a
cursor continues; and the first token a new subscription is told."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import replace

from api.domain import catalog
from api.domain.cursor import CursorCodec, Position
from api.domain.errors import BadUserInput, TenantDeleted
from api.domain.identifiers import check_entity_id, check_identifier
from api.domain.item_types import ItemType
from api.domain.records import Record
from api.domain.retention import Retention
from api.domain.tokens import check_token, token_before, token_ms
from api.domain.visibility import principals_of, sees
from api.ordering import wall_clock_ms
from api.service.ports import Page, Store
from api.service.read_state import MAX_LIMIT
from api.service.read_state import Reads as _Reads
from api.service.regroup import Regroup
from api.service.release_view import ReleaseView as ReleaseView
from api.service.release_view import for_client
from api.service.type_paging import FIRST_MARGIN, scan_size
from api.service.views import (
    after_life,
    check_since,
    merged,
    own_cut,
    read_streams,
    shown,
    stream_bound,
    viewed_by,
)

DEFAULT_LIMIT = 100

# Filling a page of chosen types reads, beyond the first page, at most this many log
# entries (of every type) per request, each Query's one past its Limit included: two
# full pages, about 700 KB of people, about 190 read units; then the page stops with
# a cursor. The worst request is then three full pages' reads (contract 3.4).
MAX_SCANNED = 2 * MAX_LIMIT
# The first read of a sync takes the head and up to this many of the newest log
# entries in one Query. A sync of at most TAIL_ITEMS - 1 changes ends with that
# read when its entries are linked (`api.domain.chain`): the Limit leaves room
# for one entry above the head, of a write whose head is not yet applied.
# Eleven people of ~300-370 bytes fit one read unit, what a separate head read cost.
TAIL_ITEMS = 11


class Reading:
    def __init__(
        self,
        store: Store,
        cursors: CursorCodec,
        clock_ms: Callable[[], int] = wall_clock_ms,
        retention: Retention | None = None,
    ) -> None:
        self._store = store
        self._cursors = cursors
        self._clock_ms = clock_ms
        self._retention = retention or Retention()
        self._regroup = Regroup(cursors, store.stream_range)

    def get(
        self, item_type: ItemType, tenant_id: str, entity_id: str, sub: str | None = None
    ) -> Record | None:
        """The entity, or None: none of this type, deleted, or outside the view of the
        caller `sub` (None: it sees tenant-wide records only)."""
        check_identifier(tenant_id, "tenantID")
        check_entity_id(entity_id, "id")
        record = self._store.get(tenant_id, entity_id)
        # Then the head (one GetItem): TENANT_DELETED while the tenant is being
        # deleted, whether or not the deletion has reached this entity yet (3.8).
        self._store.head(tenant_id)
        if record is None or record.deleted or record.item_type is not item_type:
            return None
        return record if sees(record.visibility, sub) else None

    def seen(self, tenant_id: str, entity_ids: set[str], sub: str | None) -> set[str]:
        """Those of `entity_ids` whose record (deleted or not) the caller `sub` sees
        now: one BatchGetItem (none for no id)."""
        if not entity_ids:
            return set()
        records, _ = self._store.read_many(tenant_id, sorted(entity_ids), ())
        return {i for i, r in records.items() if sees(r.visibility, sub)}

    def changes(
        self,
        tenant_id: str,
        since: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
        types: frozenset[ItemType] | None = None,
        max_scanned: int = MAX_SCANNED,
        release: int | None = None,
        sub: str | None = None,
    ) -> Page:
        """A page of the tenant's changes after `since` (or after `cursor`), in token order.

        Some changes are left out, in pages that stay full: with `types`, those of
        other types; in a first sync (no `since`), deletions (`Page.settled`); for a
        client of `release` (None: this server's), those of types it does not know.
        A page holds fewer than `limit` items only when the feed is drained, or when
        `max_scanned` further entries were read for it (its cursor continues;
        `scanned` says how many were read). For a client of a later release than
        this server's, a page ends before the first change this server cannot
        render whole (docs/evolution.md)."""
        check_identifier(tenant_id, "tenantID")
        limit = DEFAULT_LIMIT if limit is None else limit
        if not 1 <= limit <= MAX_LIMIT:
            raise BadUserInput(f"limit must be between 1 and {MAX_LIMIT}")
        reads = _Reads(sub=sub, limit=limit, continued=cursor is not None)
        view = ReleaseView(catalog.RELEASE if release is None else release)
        page = self._collect(tenant_id, since, cursor, limit, types, max_scanned, reads, view)
        self._settle(tenant_id, reads)
        return for_client(view.cut(replace(page, items=shown(page.items)), since), release)

    def _collect(
        self,
        tenant_id: str,
        since: str | None,
        cursor: str | None,
        limit: int,
        types: frozenset[ItemType] | None,
        max_scanned: int,
        reads: _Reads,
        view: ReleaseView,
    ) -> Page:
        first = limit
        if types is not None:
            first = min(MAX_LIMIT, limit + math.ceil(FIRST_MARGIN * math.sqrt(limit)))
        page = self._changes(tenant_id, since, cursor, first, reads)
        settled = page.settled

        def wanted(record: Record) -> bool:
            if types is not None and record.item_type not in types:
                return False
            if not view.knows(record.item_type):
                return False
            gone = record.deleted or record.left_view  # a first sync leaves both out
            return not (gone and settled is not None and record.change_token <= settled)

        if page.regrouped:  # a re-read's page, at most `limit` items: never cut
            return replace(page, items=[r for r in page.items if wanted(r)])
        if types is None and settled is None and all(view.knows(r.item_type) for r in page.items):
            return page
        items: list[Record] = []
        scanned = 0
        read = queries = 0  # entries read for the page; Queries beyond its first
        while True:
            read += len(page.items)
            for record in page.items:
                if wanted(record):
                    items.append(record)
                    if len(items) == limit and record is not page.items[-1]:
                        # Full before the end of what was read: continue after it.
                        return self._cut(tenant_id, items, page, scanned, reads)
            # A Query of Limit n reads n + 1 entries when more follow.
            room = max_scanned - scanned - 1
            if len(items) == limit or page.cursor is None or room < 1:
                return replace(page, items=items, scanned=scanned)
            size = min(room, scan_size(limit - len(items), len(items), read, queries))
            page = self._changes(tenant_id, None, page.cursor, size, reads)
            scanned += len(page.items) + (page.cursor is not None)
            queries += 1

    def check_not_deleted(self, tenant_id: str) -> None:
        """TenantDeleted while the tenant is being deleted (one GetItem of its head)."""
        check_identifier(tenant_id, "tenantID")
        self._store.head(tenant_id)

    def latest_change(self, tenant_id: str, after: str | None) -> str | None:
        """The newest change token a sync from `after` would reach now (None: none
        yet): what a new `changesAvailable` subscription is told first."""
        check_identifier(tenant_id, "tenantID")
        if after is not None:
            check_token(after, "since")
        tail = self._store.log_tail(tenant_id, after, 1)
        if after is not None:
            check_since(tail, after)
        bound = tail.bound
        return bound if bound is not None and (after is None or bound > after) else None

    def _changes(
        self, tenant_id: str, since: str | None, cursor: str | None, limit: int, reads: _Reads
    ) -> Page:
        page = self._read(tenant_id, since, cursor, limit, reads)
        # Its viewer's view, up to where it holds; a continued sync's, up to its bound.
        above = reads.upper if reads.continued else None
        return own_cut(page, reads.sub, since, above, reads.viewed)

    def _read(
        self, tenant_id: str, since: str | None, cursor: str | None, limit: int, reads: _Reads
    ) -> Page:
        after = None if since is None else check_token(since, "since")  # with a cursor too
        rest = functools.partial(self._changes, tenant_id, None, reads=reads)
        size = min(limit, reads.limit)
        if cursor is not None:
            place = self._regroup.place(tenant_id, cursor, reads.sub)
            if place is not None:  # a re-read of groups joined or left (its pages)
                reads.viewed = place.viewed
                # Past the retention above `since`, or its tenant deleted? (`_settle`)
                reads.owe(place.since, place.upper, token_ms(place.since), True)
                reads.upper, reads.born = place.upper, place.born
                return self._regroup.page(tenant_id, place, reads.sub, size, rest)
            position = self._cursors.decode(tenant_id, cursor)
            reads.viewed = position.viewed
            upper, settled = position.upper, position.settled
            if settled is None:
                # A sync from a `since`: every deletion above the position is owed.
                reads.owe(position.after, upper, token_ms(position.after), True)
            else:
                # A first sync owes only the deletions above `settled`: those of the
                # head's transaction when it began, whose tokens are consecutive up to
                # `upper` (within a millisecond of it).
                low = max(position.after, settled)
                reads.owe(low, upper, max(token_ms(low), token_ms(upper) - 1), True)
            reads.upper, reads.born = upper, position.born
            reads.streams = position.streams and reads.sub is not None
            items, more = self._store.changes(tenant_id, position.after, upper, limit)
            if position.streams and reads.sub is not None:
                start = after_life(position.after, position.born)
                stream = read_streams(
                    self._store.stream_range, tenant_id, reads.sub, start, upper, limit
                )
                items, more = merged(items, more, *stream, limit)
            page = self._page(tenant_id, items, more, upper, settled, position.born)
            if more or not reads.streams:
                return self._streamed(tenant_id, page, position.streams, reads)
            return self._lifted(tenant_id, page, limit, reads)
        reads.viewed = viewed_by(reads.sub)  # its sync's cursors carry it
        page = self._first_page(tenant_id, after, limit, reads)
        if not reads.streams:
            return page
        return self._regroup.start(tenant_id, after, page, reads.sub, size, rest, reads.viewed)

    def _lifted(self, tenant_id: str, page: Page, limit: int, reads: _Reads) -> Page:
        """The last page of a sync with streams, whose bound (`page.change_token`) is a
        head's `pv` (its first stream Query, cut by its Limit, had not reached the
        head's entries): with the head's transaction if it is the latest, the one
        right above, and its entries are read now (docs/ordering.md, "Who sees what")."""
        upper = page.change_token
        assert upper is not None
        rest = self._first_page(tenant_id, upper, limit, reads, quiet=True)
        if not rest.items:
            return page
        items = page.items + rest.items
        if rest.cursor is None and len(items) <= limit:
            return replace(rest, items=items)
        top = (
            self._cursors.decode(tenant_id, rest.cursor).upper if rest.cursor else rest.change_token
        )
        assert top is not None
        return self._streamed(
            tenant_id, self._page(tenant_id, items[:limit], True, top, None, page.born), True, reads
        )

    def _settle(self, tenant_id: str, reads: _Reads) -> None:
        """After a request's last read: TENANT_DELETED if it read with a cursor of a
        tenant deleted (or being deleted) since; RESYNC_REQUIRED if a deletion it owes
        may have been removed by TTL during its reads (`api.domain.retention`)."""
        if reads.upper is not None:
            # One GetItem of the head (1 read unit), after every Query of the request:
            # a deletion marked before any of them ran is seen here.
            head = self._store.head(tenant_id)  # TenantDeleted while marked
            if head is None or (
                head.born != reads.born
                if reads.born is not None
                # A cursor made before cursors carried `born`: a tenant born after its
                # bound is another (its tokens follow the deleted one's, by the clock).
                else head.born is not None and head.born > reads.upper
            ):
                raise TenantDeleted(
                    "this tenant was deleted after this cursor was made: drop your copy "
                    "and sync with since: null"
                )
        if reads.owed_low is not None:
            self._retention.check_kept(reads.owed_ms, self._clock_ms(), reads.from_cursor)

    def _first_page(
        self, tenant_id: str, after: str | None, limit: int, reads: _Reads, quiet: bool = False
    ) -> Page:
        """The first page of a sync: one read of the head and the newest entries gives
        the sync's upper bound, and often every change below it (`api.domain.chain`).
        A first sync (no `after`) leaves out the deletions the read proves settled."""
        started_ms = self._clock_ms()
        tail = self._store.log_tail(tenant_id, after, min(limit, TAIL_ITEMS))
        if after is not None:
            check_since(tail, after)
        if tail.head is None or quiet and tail.settled != after:
            # No write has made the head yet (or the first is still being applied);
            # `quiet`: only the transaction right above `after` (`Reading._lifted`).
            return Page(items=[], cursor=None, change_token=None)
        head = tail.head
        settled = tail.settled if after is None else None
        aged = self._retention.past(token_ms(head), started_ms)
        if aged:
            # The head's transaction is older than the retention, so applied whole
            # (premise P3, docs/ordering.md), its removals of earlier entries too: a
            # first sync leaves its deletions out as well, and it bounds the sync
            # although TTL may have removed the entries the read would prove it by.
            if after is None:
                settled = head
            if tail.bound != head:
                tail = replace(tail, bound=head, records=[], complete=False)
        if after is not None:
            # Changes follow `since`: deletions among them may have expired (a device up
            # to date with a quiet tenant is not sent to resync, however old).
            reads.owe(after, head, token_ms(after), False)
        elif tail.bound is not None:
            # A first sync owes the deletions above `settled`: the head's transaction's.
            reads.owe(settled or "", tail.bound, token_ms(tail.bound) - 1, False)
        bound = tail.bound
        streams = tail.last is not None and tail.last.restricted and reads.sub is not None
        reads.streams = streams
        stream: list[Record] = []
        stream_edge: str | None = None
        ahead = after is None or after < head  # else the stream owes nothing either
        if streams and ahead and bound is not None and tail.last and reads.sub is not None:
            # The caller's streams up to the head, a Query each (its token bounds too).
            start = after_life(after, tail.born)
            stream, stream_edge = read_streams(
                self._store.stream_range, tenant_id, reads.sub, start, head, limit
            )
            if not aged:
                mine = principals_of(reads.sub)
                bound = stream_bound(tail.last, bound, stream, mine, after) or tail.settled
            if bound is not None:
                kept = [r for r in tail.records if r.change_token <= bound]
                tail = replace(tail, bound=bound, records=kept)
                stream_edge = stream_edge if stream_edge and stream_edge < bound else None
                stream = [r for r in stream if r.change_token <= bound]
        if bound is None or (after is not None and bound <= after):
            # Nothing past `after` is proven yet (a write is being applied): the device
            # keeps its token and gets the change next time.
            return Page(items=[], cursor=None, change_token=after)
        more = False
        if tail.complete:
            # Every change of (after, bound], linked: a big group's may exceed `limit`.
            items = tail.records
        else:
            # Below the linked entries, page up from `after`, then append them.
            upper = bound if tail.lowest is None else token_before(tail.lowest)
            items, more = self._store.changes(tenant_id, after, upper, limit)
            if not more:
                # Those and the linked entries are all of (after, bound], in order.
                items = items + tail.records
        if streams:
            items, more = merged(items, more, stream, stream_edge, limit)
        more = more or len(items) > limit
        page = self._page(tenant_id, items[:limit], more, bound, settled, tail.born)
        return self._streamed(tenant_id, page, streams, reads)

    def _streamed(self, tenant_id: str, page: Page, streams: bool, reads: _Reads) -> Page:
        """`page` whose cursor says the sync reads the caller's stream too, and what its
        first request's viewer reflected (`reads.viewed`, `api.service.views.own_cut`)."""
        if not streams or page.cursor is None:
            return page
        position = replace(
            self._cursors.decode(tenant_id, page.cursor), streams=True, viewed=reads.viewed
        )
        return replace(page, cursor=self._cursors.encode(tenant_id, position))

    def _cut(
        self, tenant_id: str, items: list[Record], page: Page, scanned: int, reads: _Reads
    ) -> Page:
        """`items`, full, ending inside `page` (which has more, or a cursor): a page
        whose cursor continues right after its last item, within `page`'s bound, and
        reads the caller's stream too if the sync does (`reads.streams`)."""
        assert page.cursor is not None or page.change_token is not None
        upper = (
            self._cursors.decode(tenant_id, page.cursor).upper
            if page.cursor is not None
            else page.change_token
        )
        assert upper is not None
        page_ = self._page(tenant_id, items, True, upper, page.settled, page.born)
        return replace(self._streamed(tenant_id, page_, reads.streams, reads), scanned=scanned)

    def _page(
        self,
        tenant_id: str,
        items: list[Record],
        more: bool,
        upper: str,
        settled: str | None = None,
        born: str | None = None,
    ) -> Page:
        """A page of `items`; with `more`, its cursor continues above the last up to `upper`."""
        if not more:
            return Page(items=items, cursor=None, change_token=upper, settled=settled, born=born)
        last = items[-1].change_token
        position = Position(after=last, upper=upper, settled=settled, born=born)
        next_cursor = self._cursors.encode(tenant_id, position)
        return Page(items=items, cursor=next_cursor, change_token=last, settled=settled, born=born)
