"""Reading: one entity, and the changes feed (`changes`) in pages, from a sync's
first read of the log's tail and its bound (`api.domain.chain`) to the pages a
cursor continues; and the first token a new subscription is told."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from api.domain.cursor import CursorCodec, Position
from api.domain.errors import BadUserInput, TenantDeleted
from api.domain.identifiers import check_identifier
from api.domain.item_types import ItemType
from api.domain.records import LogTail, Record
from api.domain.retention import Retention
from api.domain.tokens import check_token, token_before
from api.ordering import wall_clock_ms
from api.service.ports import Page, Store

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
# Filling a page of chosen types reads, beyond the first page, at most this many
# log entries (of every type) per request, all its fields together: two full
# pages, about 700 KB of people, about 190 read units; then the page stops with a
# cursor. The worst request is then three full pages' reads (contract 3.4).
MAX_SCANNED = 2 * MAX_LIMIT
# Entries read per Query while filling such a page: a full page, whatever is
# still missing (a limit of 1 once cost one Query per entry read).
SCAN_PAGE = MAX_LIMIT
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

    def get(self, item_type: ItemType, tenant_id: str, entity_id: str) -> Record | None:
        check_identifier(tenant_id, "tenantID")
        check_identifier(entity_id, "id")
        record = self._store.get(tenant_id, entity_id)
        # Then the head (one GetItem): TENANT_DELETED while the tenant is being
        # deleted, whether or not the deletion has reached this entity yet (3.8).
        self._store.head(tenant_id)
        if record is None or record.deleted or record.item_type is not item_type:
            return None
        return record

    def changes(
        self,
        tenant_id: str,
        since: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
        types: frozenset[ItemType] | None = None,
        max_scanned: int = MAX_SCANNED,
    ) -> Page:
        """A page of the tenant's changes after `since` (or after `cursor`), in token order.

        Some changes are left out, in pages that stay full: with `types`, those of
        other types; in a first sync (no `since`), deletions (`Page.settled`). A
        page holds fewer than `limit` items only when the feed is drained, or when
        `max_scanned` further entries were read for it (its cursor continues;
        `scanned` says how many were read)."""
        check_identifier(tenant_id, "tenantID")
        limit = DEFAULT_LIMIT if limit is None else limit
        if not 1 <= limit <= MAX_LIMIT:
            raise BadUserInput(f"limit must be between 1 and {MAX_LIMIT}")
        page = self._changes(tenant_id, since, cursor, limit)
        settled = page.settled

        def wanted(record: Record) -> bool:
            if types is not None and record.item_type not in types:
                return False
            return not (record.deleted and settled is not None and record.change_token <= settled)

        if types is None and settled is None:
            return page
        items: list[Record] = []
        scanned = 0
        while True:
            for record in page.items:
                if wanted(record):
                    items.append(record)
                    if len(items) == limit and record is not page.items[-1]:
                        # Full before the end of what was read: continue after it.
                        return self._cut(tenant_id, items, page, scanned)
            if len(items) == limit or page.cursor is None or scanned >= max_scanned:
                return replace(page, items=items, scanned=scanned)
            page = self._changes(
                tenant_id, None, page.cursor, min(SCAN_PAGE, max_scanned - scanned)
            )
            scanned += len(page.items)

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
            _check_since(tail, after)
        bound = tail.bound
        return bound if bound is not None and (after is None or bound > after) else None

    def _changes(self, tenant_id: str, since: str | None, cursor: str | None, limit: int) -> Page:
        # A cursor carries its own position, but a `since` sent beside it is still
        # checked: a garbage one is the client's bug, answered rather than ignored.
        after = None if since is None else check_token(since, "since")
        if cursor is not None:
            position = self._cursors.decode(tenant_id, cursor)
            items, more = self._store.changes(tenant_id, position.after, position.upper, limit)
            return self._page(tenant_id, items, more, position.upper, position.settled)
        return self._first_page(tenant_id, after, limit)

    def _first_page(self, tenant_id: str, after: str | None, limit: int) -> Page:
        """The first page of a sync: one read of the head and the newest entries gives
        the sync's upper bound, and often every change below it (`api.domain.chain`).
        A first sync (no `after`) leaves out the deletions the read proves settled."""
        tail = self._store.log_tail(tenant_id, after, min(limit, TAIL_ITEMS))
        if after is not None:
            _check_since(tail, after)
        if tail.head is None:
            # No write has made the head yet (or the first is still being applied).
            return Page(items=[], cursor=None, change_token=None)
        if after is not None and after < tail.head:
            # Changes follow `since`: deletions among them may have expired. (A device
            # up to date with a quiet tenant is not sent to resync, however old.)
            self._retention.check_since(after, self._clock_ms())
        settled = tail.settled if after is None else None
        bound = tail.bound
        if bound is None or (after is not None and bound <= after):
            # Nothing past `after` is provably complete yet (a write is still being
            # applied): the device keeps its token and gets the change next time.
            return Page(items=[], cursor=None, change_token=after)
        if tail.complete:
            # Every change of (after, bound], linked: a big group's may exceed `limit`.
            items = tail.records
        else:
            # Below the linked entries, page up from `after`, then append them.
            upper = bound if tail.lowest is None else token_before(tail.lowest)
            items, more = self._store.changes(tenant_id, after, upper, limit)
            if more:
                return self._page(tenant_id, items, more, bound, settled)
            # Those and the linked entries are all of (after, bound], in order.
            items = items + tail.records
        return self._page(tenant_id, items[:limit], len(items) > limit, bound, settled)

    def _cut(self, tenant_id: str, items: list[Record], page: Page, scanned: int) -> Page:
        """`items`, full, ending inside `page` (which has more, or a cursor): a page
        whose cursor continues right after its last item, within `page`'s bound."""
        assert page.cursor is not None or page.change_token is not None
        upper = (
            self._cursors.decode(tenant_id, page.cursor).upper
            if page.cursor is not None
            else page.change_token
        )
        assert upper is not None
        page_ = self._page(tenant_id, items, True, upper, page.settled)
        return replace(page_, scanned=scanned)

    def _page(
        self,
        tenant_id: str,
        items: list[Record],
        more: bool,
        upper: str,
        settled: str | None = None,
    ) -> Page:
        """A page of `items`; with `more`, its cursor continues above the last up to `upper`."""
        if not more:
            return Page(items=items, cursor=None, change_token=upper, settled=settled)
        last = items[-1].change_token
        position = Position(after=last, upper=upper, settled=settled)
        next_cursor = self._cursors.encode(tenant_id, position)
        return Page(items=items, cursor=next_cursor, change_token=last, settled=settled)


def _check_since(tail: LogTail, since: str) -> None:
    """A `since` the tenant cannot have given: from before its deletion, or newer
    than its every change (a sync and a subscription refuse it alike)."""
    if tail.head is None:
        # Its tokens are gone: deleted (contract 3.8), or never written.
        raise TenantDeleted(
            "this tenant holds no changes: drop your copy and sync with since: null"
        )
    if tail.born is not None and since < tail.born:
        raise TenantDeleted(
            "since is from before this tenant was deleted: drop your copy and sync with since: null"
        )
    if since > tail.head:
        raise BadUserInput(
            "since is newer than every change of this tenant; sync again with since: null"
        )
