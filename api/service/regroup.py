"""A sync's re-read of the groups its member joined or left after the sync's `since`
(docs/ordering.md, "Groups"): each such group's stream read in full up to the sync's
bound, before the pages of `(since, bound]`, in pages of its own whose cursor says
which group and where (signed, like every cursor).

For each entry of the group's stream, in token order: a version the member sees
now is sent when its token is at most `since` (above it, the pages that follow send
it from a partition the member reads); a version it does not see is sent as a
LeftView; a sentinel or a deletion is sent when its token is above `since`; a
version superseded after `since` that the member does not see is sent as a
LeftView (its entry is kept, superseded, for this: a write above the bound that
took the record out of the group may have superseded it before the re-read read it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from api.domain.cursor import CursorCodec, Position
from api.domain.errors import InvalidCursor
from api.domain.membership import History, groups_of, history_of
from api.domain.records import Record
from api.domain.tokens import is_token
from api.domain.visibility import group_principal, sees
from api.service.ports import Page
from api.service.views import StreamRange, after_life

# A re-read's cursor: '|' is in no token and no group name (an id's characters).
_REGROUP = "R"
# What one re-read page reads at most: this many Queries, each of a Limit of this
# many entries or the page's room if larger (at most 3 x 1,000 entries a request,
# about 3 x 350 KB of people; then the page ends, maybe empty, with its cursor).
REREAD_QUERIES = 3
REREAD_ENTRIES = 100


@dataclass(frozen=True)
class Place:
    """Where a re-read is: its sync's `since` and bound, the group and how far in."""

    since: str
    upper: str
    born: str | None
    group: str
    after: str | None  # the last token of the group's stream read (None: its start)
    # What the sync's first request's viewer reflected (`Position.viewed`; None: a
    # re-read's cursor of an earlier release, which did not carry it).
    viewed: str | None = None


def regrouped(sub: str | None, since: str | None) -> list[str]:
    """The groups a sync from `since` re-reads: those its caller (a `Viewer`) joined
    or left after it (none for a first sync)."""
    changed = getattr(sub, "changed", None)
    if since is None or not changed:
        return []
    return sorted(g for g in changed if History.parse(changed[g]).tokens[-1:] > (since,))


def moved_after(sub: str | None, since: str | None) -> str | None:
    """The newest write of its own Member record by which the caller (a `Viewer`)
    joined or left a group after `since` (None: none): a change in its view (its
    Member record is tenant-wide) that a sync from `since` reaches."""
    changed = getattr(sub, "changed", None)
    if since is None or not changed:
        return None
    tokens = [t for value in changed.values() for t in History.parse(value).tokens if t > since]
    return max(tokens, default=None)


def reread(entries: list[Record], sub: str, since: str, group: str) -> list[Record]:
    """What a re-read sends of these entries of `group`'s stream (module docstring),
    none its member never saw through the group: one after it last left the group;
    a LeftView, a sentinel or a deletion when it was out of the group at `since` and
    at every point up to the entry (`History.seen`)."""
    history = history_of(sub, group)
    member = group in groups_of(sub)
    left = None if member or not history.tokens else history.tokens[-1]
    sent: list[Record] = []
    for entry in entries:
        if left is not None and entry.change_token > left:
            continue
        if entry.superseded is not None:
            # Its later state reached a device of a sync past `superseded` (or it is
            # R's state at the bound, the later write being above it).
            gone = entry.superseded > since and not sees(entry.visibility, sub)
            if gone and history.seen(member, since, entry.superseded):
                sent.append(replace(entry, left_view=True, fields={}, superseded=None))
        elif entry.left_view or entry.deleted:
            if entry.change_token > since and history.seen(member, since, entry.change_token):
                sent.append(entry)
        elif sees(entry.visibility, sub):
            if entry.change_token <= since:
                sent.append(entry)
        elif history.seen(member, since, entry.change_token):
            sent.append(replace(entry, left_view=True, fields={}))
    return sent


Rest = Callable[[str, int], Page]


class Regroup:
    """The re-read's pages, between a sync's first read (its bound) and its pages of
    `(since, bound]`, which `rest` reads (from a cursor, up to a limit)."""

    def __init__(self, cursors: CursorCodec, stream_range: StreamRange) -> None:
        self._cursors = cursors
        self._stream_range = stream_range

    def start(
        self,
        tenant_id: str,
        since: str | None,
        page: Page,
        sub: str | None,
        limit: int,
        rest: Rest,
        viewed: str | None,
    ) -> Page:
        """The sync's first page `page` (read from `since`, its bound proven), or, when
        its caller's groups changed after `since`, the re-read's first page; its
        cursors carry `viewed` (`Position.viewed`)."""
        groups = regrouped(sub, since)
        if not groups or sub is None or since is None:
            return page
        upper = page.change_token
        if page.cursor is not None:
            upper = self._cursors.decode(tenant_id, page.cursor).upper
        if upper is None:
            return page
        place = Place(since, upper, page.born, groups[0], None, viewed)
        return self._page(tenant_id, place, sub, limit, rest)

    def place(self, tenant_id: str, cursor: str, sub: str | None) -> Place | None:
        """Where a re-read's `cursor` is (None: the cursor is not a re-read's). One of
        an earlier release (6 parts, no `viewed`) is still read."""
        body = self._cursors.body(tenant_id, cursor)
        if not body.startswith(_REGROUP + "|"):
            return None
        parts = body.split("|")
        if len(parts) not in (6, 7) or sub is None:
            raise InvalidCursor("cursor is malformed")
        since, upper, born, group, after, *viewed = parts[1:]
        optional = (born, after)
        if viewed == [""] or not all(
            is_token(t) for t in (since, upper, *viewed, *(t for t in optional if t))
        ):
            raise InvalidCursor("cursor is malformed")
        if group not in regrouped(sub, since):  # another caller's, or done meanwhile
            raise InvalidCursor("cursor is not valid for this caller")
        return Place(since, upper, born or None, group, after or None, *viewed)

    def page(self, tenant_id: str, place: Place, sub: str | None, limit: int, rest: Rest) -> Page:
        """The next page of a re-read from `place` (`Regroup.place`)."""
        assert sub is not None  # `place` refused a cursor without a caller
        return self._page(tenant_id, place, sub, limit, rest)

    def _page(self, tenant_id: str, place: Place, sub: str, limit: int, rest: Rest) -> Page:
        """Up to `limit` items of the re-read from `place`, reading at most
        REREAD_QUERIES Queries of REREAD_ENTRIES entries or more (`limit`'s): a page
        may hold none, its cursor where the reads stopped."""
        sent: list[Record] = []
        queries = 0
        while len(sent) < limit and queries < REREAD_QUERIES:
            start = after_life(place.after, place.born)
            principal = group_principal(place.group)
            size = max(limit - len(sent), REREAD_ENTRIES)
            entries, more = self._stream_range(tenant_id, principal, start, place.upper, size)
            queries += 1
            items = reread(entries, sub, place.since, place.group)
            if len(sent) + len(items) > limit:
                # Full inside what was read: continue after its last item's entry (an
                # item keeps its entry's token, one entry a token in a stream).
                sent += items[: limit - len(sent)]
                place = replace(place, after=sent[-1].change_token)
                break
            sent += items
            if more and entries:
                place = replace(place, after=entries[-1].change_token)
                continue
            later = [g for g in regrouped(sub, place.since) if g > place.group]
            if not later:
                return self._then(tenant_id, place, sent, limit, rest)
            place = replace(place, group=later[0], after=None)
        cursor = self._encode(tenant_id, place)
        return Page(sent, cursor, place.since, born=place.born, regrouped=True)

    def _then(
        self, tenant_id: str, place: Place, sent: list[Record], limit: int, rest: Rest
    ) -> Page:
        """The re-read's last page: what it sent, then the sync's pages of `(since,
        upper]` from their first (what room is left of this page)."""
        if place.upper <= place.since:
            return Page(sent, None, place.since, born=place.born, regrouped=True)
        position = Position(place.since, place.upper, None, place.born, True, place.viewed)
        cursor = self._cursors.encode(tenant_id, position)
        if len(sent) >= limit:
            return Page(sent, cursor, place.since, born=place.born, regrouped=True)
        following = rest(cursor, limit - len(sent))
        return replace(following, items=sent + following.items, regrouped=True)

    def _encode(self, tenant_id: str, place: Place) -> str:
        parts = (_REGROUP, place.since, place.upper, place.born or "", place.group)
        # `viewed` only when known: else the 6 parts an earlier release reads.
        viewed = () if place.viewed is None else (place.viewed,)
        body = "|".join((*parts, place.after or "", *viewed))
        return self._cursors.signed(tenant_id, body)
