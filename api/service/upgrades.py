"""Catching up an upgrade (docs/evolution.md): an app that now declares types,
fields or enum values a later release added gets every version it skipped that
holds them, without downloading the tenant again.

While it ran its older release, its syncs moved its token past changes of types it
did not know (left out) and versions whose new fields it did not select. Every such
version that is still current is in the tenant's later copies (`api.storage.keys`,
`T#<tenant>#LATER`, one per entity holding a later release's content, under the
newest release it holds), so the catch-up reads those alone: its cost follows the
later content, not the tenant. It returns the versions at or below the app's token
(`upTo`); newer ones come with its next `changes(since: upTo)`, which now selects
all it declares. docs/ordering.md ("Catching up an upgrade") proves none is missed.
"""

from __future__ import annotations

from collections.abc import Iterable

from api.domain import catalog
from api.domain.cursor import CursorCodec, decode_catch_up, encode_catch_up
from api.domain.errors import BadUserInput, TenantDeleted, Unavailable
from api.domain.identifiers import check_identifier
from api.domain.item_types import ItemType
from api.domain.records import Record
from api.domain.tokens import check_token, token_before
from api.service.ports import Page, Store
from api.service.reading import DEFAULT_LIMIT, MAX_LIMIT, ReleaseView


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
    ) -> Page:
        """A page of the current versions, at or below `up_to`, of the tenant's
        entities holding content of the release that added the earliest of `types`
        and `fields` ("Type.field") or of any later one; its cursor continues."""
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
        floor = _floor(list(types), list(fields))
        items: list[Record] = []
        if cursor is None:
            after = None
            born, items = self._first_reads(tenant_id, up_to, floor)
        else:
            after, born = decode_catch_up(self._cursors, tenant_id, cursor, up_to, floor)
            head = self._store.head(tenant_id)  # TENANT_DELETED while marked
            if head is None or head.born != born:
                raise TenantDeleted(
                    "this tenant was deleted after this cursor was made: drop your copy "
                    "and sync with since: null"
                )
        copies, last = self._store.later_copies(tenant_id, floor, after, limit)
        # The head's transaction's entries (first) and its copies may name one entity.
        read = {r.id for r in items}
        items += [r for r in copies if r.change_token <= up_to and r.id not in read]
        kept = [r for r in items if view.knows(r.item_type) and not r.deleted]
        next_cursor = (
            None
            if last is None
            else encode_catch_up(self._cursors, tenant_id, last, up_to, floor, born)
        )
        return Page(items=kept, cursor=next_cursor, change_token=up_to)

    def _first_reads(
        self, tenant_id: str, up_to: str, floor: int
    ) -> tuple[str | None, list[Record]]:
        """The head, checked against `up_to` as a sync checks `since`: the tenant's
        first token, and the versions the head's own transaction wrote at or below
        `up_to` that hold later content (that transaction's copies may not all be
        applied yet, its log entries up to `up_to` are: the app's sync read them)."""
        head = self._store.head(tenant_id)  # TENANT_DELETED while marked
        if head is None or (head.born is not None and up_to < head.born):
            raise TenantDeleted(
                "upTo is from before this tenant was deleted: drop your copy and sync "
                "with since: null"
            )
        if up_to > head.token:
            raise BadUserInput("upTo is newer than every change of this tenant")
        first = head.entry_tokens()[0]
        if not head.later_put or first > up_to:
            return head.born, []
        entries, _ = self._store.changes(
            tenant_id, token_before(first), min(up_to, head.token), head.entries
        )
        return head.born, [
            r
            for r in entries
            if not r.deleted
            and r.item_type.known
            and (r.item_type.later_release(r.fields) or 0) >= floor
        ]


def _floor(types: list[ItemType], fields: list[str]) -> int:
    """The earliest release that added one of `types` or `fields` ("Type.field";
    an enum field counts from its earliest value after the first release)."""
    if not types and not fields:
        raise BadUserInput("name at least one type or field the app newly declares")
    releases = [t.since for t in types]
    by_name = {t.name: t for t in catalog.ITEM_TYPES}
    for name in fields:
        type_name, _, field_name = name.partition(".")
        spec = next(
            (f for f in getattr(by_name.get(type_name), "fields", ()) if f.name == field_name),
            None,
        )
        if spec is None:
            raise BadUserInput(
                f"{name!r} is not a field this server serves (release {catalog.RELEASE})"
            )
        later_values = [r for _, r in spec.enum_since]
        releases.append(min(later_values) if spec.since == 1 and later_values else spec.since)
    # Release 1's content has no later copies: what is asked of it is every copy.
    return max(2, min(releases))
