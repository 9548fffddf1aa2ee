"""Catching up an upgrade (docs/evolution.md): an app that now declares types,
fields or enum values it did not (a later release's, or its own release's that it
left out) gets the current version of every entity holding them, without
downloading the tenant again.

While it ran its older declaration, its syncs moved its token past changes of types
it did not declare (left out) and versions whose fields it did not select. Every
live entity has one copy of its current version (`api.storage.keys`,
`T#<tenant>#LATER`), filed by type and by the newest release whose content it holds,
so the catch-up reads, for each type asked, the copies from the earliest release
asked of it: its cost follows what it returns, not the tenant. It returns the
versions at or below the app's token (`upTo`); newer ones come with its next
`changes(since: upTo)`, which now selects all it declares. docs/ordering.md
("Catching up an upgrade") proves none is missed.

A tenant written before copies were kept (its head does not say it has them) is
caught up from its log instead, page by page: every entry at or below `upTo`.
"""

from __future__ import annotations

from collections.abc import Iterable

from api.domain import catalog
from api.domain.chain import Head, split_stream_key
from api.domain.cursor import CursorCodec, decode_catch_up, encode_catch_up
from api.domain.errors import BadUserInput, InvalidCursor, TenantDeleted, Unavailable
from api.domain.identifiers import check_identifier
from api.domain.item_types import ItemType
from api.domain.records import Record
from api.domain.tokens import check_token, token_before
from api.domain.visibility import principals_of, sees
from api.service.ports import Page, Store
from api.service.reading import DEFAULT_LIMIT, MAX_LIMIT, MAX_SCANNED, ReleaseView
from api.service.release_view import unknown_removal
from api.service.views import read_streams, shown

# A copy's place in the tenant's copies: (type code, release, entity id).
Position = tuple[str, int, str]
# How much of a field name an error repeats.
_ECHOED = 64
# Where a cursor reached: a copy's position, or (a tenant without copies) a log token.
_COPY, _LOG = "K", "L"
# ... or, in a tenant with restricted records and without copies, a token of the
# caller's stream (read after the log; "S" alone: from its start).
_STREAM = "S"


class Upgrades:
    def __init__(self, store: Store, cursors: CursorCodec) -> None:
        self._store = store
        self._cursors = cursors

    def catch_up(
        self,
        tenant_id: str,
        up_to: str,
        types: Iterable[ItemType] = (),
        fields: Iterable[str] = (),
        cursor: str | None = None,
        limit: int | None = None,
        release: int | None = None,
        by: str | None = None,
    ) -> Page:
        """A page of at most `limit` current versions, at or below `up_to`, of the
        tenant's entities of `types`, and of those holding content of a type's
        `fields` ("Type.field") or of a later release than the earliest of them; its
        cursor continues. Only those the caller `by` sees (contract 3.12; None: the
        tenant-wide ones), so a page may hold fewer than `limit`."""
        check_identifier(tenant_id, "tenantID")
        check_token(up_to, "upTo")
        limit = DEFAULT_LIMIT if limit is None else limit
        if not 1 <= limit <= MAX_LIMIT:
            raise BadUserInput(f"limit must be between 1 and {MAX_LIMIT}")
        view = ReleaseView(catalog.RELEASE if release is None else release)
        if view.release > catalog.RELEASE:
            # What it asks for may lie in content this server cannot render.
            raise Unavailable(
                f"this server serves release {catalog.RELEASE}: catch up with a server "
                f"of release {view.release}"
            )
        floors = _floors(list(types), list(fields))
        asked = ",".join(f"{code}:{floor}" for code, floor in floors)
        head = self._store.head(tenant_id)  # TENANT_DELETED while marked
        if cursor is None:
            reached = None
            born = _check_up_to(head, up_to)
        else:
            reached, born = decode_catch_up(self._cursors, tenant_id, cursor, up_to, asked)
            if head is None or head.born != born:
                raise TenantDeleted(
                    "this tenant was deleted after this cursor was made: drop your copy "
                    "and sync with since: null"
                )
        assert head is not None
        wanted = dict(floors)

        def shown(r: Record) -> bool:
            return (
                r.change_token <= up_to
                and not r.deleted
                and not r.left_view
                and not unknown_removal(r, release)
                and sees(r.visibility, by)
                and view.knows(r.item_type)
                and r.item_type.code in wanted
                and _release(r) >= wanted[r.item_type.code]
            )

        read = 0
        while True:
            if head.copies:
                items, last = self._copies_page(tenant_id, head, up_to, floors, reached, limit, by)
            else:
                items, last = self._log_page(tenant_id, head, up_to, reached, limit, by)
            kept = [r for r in items if shown(r)]
            read += len(items)
            # A page of only records outside the view (or not asked) reads on, up to
            # MAX_SCANNED of them: an empty page would count them for the caller.
            if kept or last is None or read >= MAX_SCANNED:
                break
            reached = last
        next_cursor = (
            None
            if last is None
            else encode_catch_up(self._cursors, tenant_id, last, up_to, asked, born)
        )
        return Page(items=kept, cursor=next_cursor, change_token=up_to)

    def _copies_page(
        self,
        tenant_id: str,
        head: Head,
        up_to: str,
        floors: list[tuple[str, int]],
        reached: str | None,
        limit: int,
        by: str | None,
    ) -> tuple[list[Record], str | None]:
        """Up to `limit` versions in copy order after `reached`: the copies, and the
        entries of the head's transaction at or below `up_to` (its copies may not all
        be applied yet; its log entries up to `up_to` are: the app's sync read them),
        those in the caller's streams too. Every earlier transaction's copies are
        applied by the head's read (checked by the transaction after it)."""
        after = None if reached is None else _position(reached)
        copies, last = self._store.later_copies(tenant_id, floors, after, limit)
        written = self._head_entries(tenant_id, head, up_to, by)
        by_id = {r.id: r for r in written}
        # A copy of an entity the head's transaction wrote is that version, or one
        # it replaced whose removal is not applied yet: its entry stands instead.
        merged = [r for r in copies if by_id.get(r.id, r) == r]
        held, floor_of = {r.id for r in merged}, dict(floors)
        # Only entries within the Query's range: one below its type's floor would sort
        # before every copy asked and end a page on a key the next page's Query cannot
        # start from (ExclusiveStartKey outside its key condition: ValidationException).
        merged += [
            r
            for r in written
            if not r.deleted
            and not r.left_view
            and r.id not in held
            and r.item_type.code in floor_of
            and _at(r)[1] >= floor_of[r.item_type.code]
            and (after is None or _at(r) > after)
            and (last is None or _at(r) <= last)
        ]
        merged.sort(key=_at)
        if len(merged) > limit:
            merged, last = merged[:limit], _at(merged[limit - 1])
        return merged, None if last is None else _COPY + ":".join(map(str, last))

    def _head_entries(self, tenant_id: str, head: Head, up_to: str, by: str | None) -> list[Record]:
        """The versions the head's transaction wrote at or below `up_to`: its main
        log entries, then its entries in the caller's streams (a restricted record's
        version is in its audience's streams, not in the main log), which stand for
        their records where the main log holds the sentinel of one leaving the
        tenant's view. One Query of each such stream, only when the transaction put
        an entry in it."""
        first = head.entry_tokens()[0]
        if not head.later_put and not head.later_removed or first > up_to:
            return []
        after, upper = token_before(first), min(up_to, head.token)
        entries, _ = self._store.changes(tenant_id, after, upper, head.entries)
        by_id = {r.id: r for r in entries}
        for principal in _streams_put(head, by):
            mine, _ = self._store.stream_range(tenant_id, principal, after, upper, head.entries)
            by_id.update((r.id, r) for r in mine if r.superseded is None)
        return sorted(by_id.values(), key=lambda r: r.change_token)

    def _log_page(
        self,
        tenant_id: str,
        head: Head,
        up_to: str,
        reached: str | None,
        limit: int,
        by: str | None,
    ) -> tuple[list[Record], str | None]:
        """A tenant without copies: the next `limit` log entries at or below `up_to`
        (each entity's latest version), the caller keeping those asked for; then, in a
        tenant with restricted records, the caller's stream's the same way."""
        if reached is not None and not reached.startswith((_LOG, _COPY, _STREAM)):
            raise InvalidCursor("cursor is not this catch-up's")
        stream = by if head.restricted and by is not None else None
        if reached is not None and reached.startswith(_STREAM):
            if stream is None:
                raise InvalidCursor("cursor is not this catch-up's")
            return self._stream_page(tenant_id, stream, reached[len(_STREAM) :], up_to, limit)
        # A copies cursor (signed: this catch-up's) whose tenant lost the copies'
        # mark since its page (a server of a build without copies wrote): the log from
        # its start, the pages before sent again (an app keeps a version it holds).
        after = None if reached is None or reached.startswith(_COPY) else reached[len(_LOG) :]
        entries, more = self._store.changes(tenant_id, after, up_to, limit)
        if more and entries:
            return entries, _LOG + entries[-1].change_token
        if stream is None:
            return entries, None
        # The main log is read: the caller's stream next (its first page here when
        # this one has room, else from the next call's cursor).
        if len(entries) >= limit:
            return entries, _STREAM
        mine, last = self._stream_page(tenant_id, stream, "", up_to, limit - len(entries))
        return entries + mine, last

    def _stream_page(
        self, tenant_id: str, by: str, reached: str, up_to: str, limit: int
    ) -> tuple[list[Record], str | None]:
        """The caller's streams (its own, its groups') from `reached` up to `up_to`."""
        after = reached or None
        entries, edge = read_streams(self._store.stream_range, tenant_id, by, after, up_to, limit)
        return shown(entries), None if edge is None else _STREAM + edge


def _streams_put(head: Head, by: str | None) -> list[str]:
    """The caller's streams that the head's transaction put entries in."""
    if not head.restricted or by is None:
        return []
    mine = set(principals_of(by))
    return sorted(mine & {split_stream_key(key)[1] for key in head.stream_put})


def _check_up_to(head: Head | None, up_to: str) -> str | None:
    """The tenant's first token, once `up_to` is checked against the head as a sync
    checks `since`."""
    if head is None or (head.born is not None and up_to < head.born):
        raise TenantDeleted(
            "upTo is from before this tenant was deleted: drop your copy and sync with since: null"
        )
    if up_to > head.token:
        raise BadUserInput("upTo is newer than every change of this tenant")
    return head.born


def _release(record: Record) -> int:
    """The release `record`'s entity's copy is filed under."""
    return record.item_type.copy_release(record.fields, record.copy_release)


def _at(record: Record) -> Position:
    """Where `record`'s copy is (or would be) among the tenant's copies."""
    release = _release(record) if record.copy_release is None else record.copy_release
    return (record.item_type.code, release, record.id)


def _position(reached: str) -> Position:
    if not reached.startswith(_COPY):
        raise InvalidCursor("cursor is not this catch-up's")
    code, release, entity_id = reached[len(_COPY) :].split(":", 2)
    return code, int(release), entity_id


def _floors(types: list[ItemType], fields: list[str]) -> list[tuple[str, int]]:
    """For each type asked, in code order, the earliest release whose content the
    catch-up returns: a type named, all of it (its own release); a field named
    ("Type.field"), the release that added it (an enum field of the first release
    whose values grew: the earliest release that added one)."""
    if not types and not fields:
        raise BadUserInput("name at least one type or field the app newly declares")
    floors: dict[str, int] = {}
    for item_type in types:
        floors[item_type.code] = item_type.since
    by_name = {t.name: t for t in catalog.ITEM_TYPES}
    for name in fields:
        type_name, _, field_name = name.partition(".")
        named = by_name.get(type_name)
        spec = next(
            (f for f in getattr(named, "fields", ()) if f.name == field_name),
            None,
        )
        if named is None or spec is None:
            shown = name if len(name) <= _ECHOED else name[:_ECHOED] + "…"
            raise BadUserInput(
                f"{shown!r} is not a field this server serves (release {catalog.RELEASE})"
            )
        later_values = [r for _, r in spec.enum_since]
        since = min(later_values) if spec.since == 1 and later_values else spec.since
        floors[named.code] = min(floors.get(named.code, since), since)
    return sorted(floors.items())
