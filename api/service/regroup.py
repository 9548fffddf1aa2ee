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
from api.domain.membership import groups_of
from api.domain.records import Record
from api.domain.tokens import is_token
from api.domain.visibility import group_principal, sees
from api.service.ports import Page
from api.service.views import StreamRange, after_life

# A re-read's cursor: '|' is in no token and no group name (an id's characters).
_REGROUP = "R"


@dataclass(frozen=True)
class _Place:
    since: str
    upper: str
    born: str | None
    group: str
    after: str | None  # the last token of the group's stream read (None: its start)


def regrouped(sub: str | None, since: str | None) -> list[str]:
    """The groups a sync from `since` re-reads: those its caller (a `Viewer`) joined
    or left after it (none for a first sync)."""
    changed = getattr(sub, "changed", None)
    if since is None or not changed:
        return []
    return sorted(group for group, token in changed.items() if token > since)


def reread(entries: list[Record], sub: str, since: str, group: str) -> list[Record]:
    """What a re-read sends of these entries of `group`'s stream (module docstring),
    none its member never saw through the group: one after it left the group, a
    sentinel or a deletion from before it joined it."""
    changed = getattr(sub, "changed", {}).get(group, since)
    member = group in groups_of(sub)
    sent: list[Record] = []
    for entry in entries:
        gone = entry.left_view or entry.deleted
        if entry.change_token > changed if not member else gone and entry.change_token < changed:
            continue
        if entry.superseded is not None:
            # Its later state reached a device of a sync past `superseded` (or it is
            # R's state at the bound, the later write being above it).
            if entry.superseded > since and not sees(entry.visibility, sub):
                sent.append(replace(entry, left_view=True, fields={}, superseded=None))
        elif gone:
            if entry.change_token > since:
                sent.append(entry)
        elif sees(entry.visibility, sub):
            if entry.change_token <= since:
                sent.append(entry)
        else:
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
        self, tenant_id: str, since: str | None, page: Page, sub: str | None, limit: int, rest: Rest
    ) -> Page:
        """The sync's first page `page` (read from `since`, its bound proven), or, when
        its caller's groups changed after `since`, the re-read's first page."""
        groups = regrouped(sub, since)
        if not groups or sub is None or since is None:
            return page
        upper = page.change_token
        if page.cursor is not None:
            upper = self._cursors.decode(tenant_id, page.cursor).upper
        if upper is None:
            return page
        place = _Place(since, upper, page.born, groups[0], None)
        return self._page(tenant_id, place, sub, limit, rest)

    def follow(
        self, tenant_id: str, cursor: str, limit: int, sub: str | None, rest: Rest
    ) -> Page | None:
        """The next page of a re-read's `cursor` (None: the cursor is not a re-read's)."""
        body = self._cursors.body(tenant_id, cursor)
        if not body.startswith(_REGROUP + "|"):
            return None
        parts = body.split("|")
        if len(parts) != 6 or sub is None:
            raise InvalidCursor("cursor is malformed")
        since, upper, born, group, after = parts[1:]
        if not all(is_token(t) for t in (since, upper, *(t for t in (born, after) if t))):
            raise InvalidCursor("cursor is malformed")
        if group not in regrouped(sub, since):  # another caller's, or done meanwhile
            raise InvalidCursor("cursor is not valid for this caller")
        place = _Place(since, upper, born or None, group, after or None)
        return self._page(tenant_id, place, sub, limit, rest)

    def _page(self, tenant_id: str, place: _Place, sub: str, limit: int, rest: Rest) -> Page:
        sent: list[Record] = []
        while len(sent) < limit:
            start = after_life(place.after, place.born)
            principal = group_principal(place.group)
            room = limit - len(sent)  # a re-read sends at most one item an entry
            entries, more = self._stream_range(tenant_id, principal, start, place.upper, room)
            sent += reread(entries, sub, place.since, place.group)
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
        self, tenant_id: str, place: _Place, sent: list[Record], limit: int, rest: Rest
    ) -> Page:
        """The re-read's last page: what it sent, then the sync's pages of `(since,
        upper]` from their first (what room is left of this page)."""
        if place.upper <= place.since:
            return Page(sent, None, place.since, born=place.born, regrouped=True)
        position = Position(place.since, place.upper, None, place.born, streams=True)
        cursor = self._cursors.encode(tenant_id, position)
        if len(sent) >= limit:
            return Page(sent, cursor, place.since, born=place.born, regrouped=True)
        following = rest(cursor, limit - len(sent))
        return replace(following, items=sent + following.items, regrouped=True)

    def _encode(self, tenant_id: str, place: _Place) -> str:
        body = "|".join(
            (_REGROUP, place.since, place.upper, place.born or "", place.group, place.after or "")
        )
        return self._cursors.signed(tenant_id, body)
