"""What a client of one catalog release is sent of a tenant's changes
(docs/evolution.md, "Old and new side by side"; contract 3.12: a LeftViewItem is a
DeletedItem to a client of a release before it; contract 6: so is a removed member's
Member record)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from api.domain import catalog
from api.domain.item_types import ItemType
from api.domain.membership import ROLE_FIELD
from api.domain.records import Record
from api.domain.tokens import token_before
from api.service.ports import Page


@dataclass(frozen=True)
class ReleaseView:
    """What a client of `release` is sent of a tenant's changes, by this server of
    `catalog.RELEASE` (docs/evolution.md, "Old and new side by side")."""

    release: int

    def knows(self, item_type: ItemType) -> bool:
        """Whether the client is sent changes of `item_type`. Not of a type its release
        does not have: it could not store them (its upgrade catches up on them). A
        client of a later release than this server's knows every type the server
        does, and changes of types the server does not know end its page (`cut`)."""
        if self.release > catalog.RELEASE:
            return True
        return item_type.known and item_type.since <= self.release

    def cut(self, page: Page, since: str | None) -> Page:
        """For a client of a later release: `page` up to the first change this server
        cannot render whole (a type, a field or an enum value it does not know, written
        by a later release's server), which it must not move the client's token past:
        the client keeps syncing what this server knows up to there, and gets the rest
        from a server of its release."""
        if self.release <= catalog.RELEASE:
            return page
        for index, record in enumerate(page.items):
            if not renders(record):
                before = token_before(record.change_token)
                # Before the tenant's first change, a first sync is still one.
                first = since is None and page.born is not None and before < page.born
                token = None if first else before
                return replace(page, items=page.items[:index], cursor=None, change_token=token)
        return page


def unknown_removal(record: Record, release: int | None) -> bool:
    """Whether `record` is a removed member's Member record (role REMOVED) that a
    client of `release` (None: one that declares none) does not know as such: one of
    a release before the app's REMOVED_RELEASE. It is a DeletedItem in its syncs and
    left out of its catch-ups (the same local effect: no access, no member); if the
    member is written again (re-added), its next version reaches it as a live one."""
    if record.deleted or record.left_view or record.item_type.code != catalog.MEMBER.code:
        return False
    if record.fields.get(ROLE_FIELD) != catalog.REMOVED:
        return False
    known = catalog.REMOVED_RELEASE
    return release is None or known is None or release < known


def for_client(page: Page, release: int | None) -> Page:
    """`page` as a client of `release` is sent it: its LeftViewItems (`left_views`)
    and removed members' records (`unknown_removal`) as that release knows them."""
    page = left_views(page, release)
    if not any(unknown_removal(r, release) for r in page.items):
        return page
    items = [
        replace(r, deleted=True, fields={}, visibility=None) if unknown_removal(r, release) else r
        for r in page.items
    ]
    return replace(page, items=items)


def left_views(page: Page, release: int | None) -> Page:
    """Each sentinel of a record that left the caller's view without its visibility
    (the audience it has now is not the caller's to know); for a client of a release
    before LeftViewItem (the app's VISIBILITY_RELEASE: none when its catalog names
    none), or one that declares none, as a DeletedItem (the same local effect: forget
    it; contract 3.12)."""
    if not any(r.left_view for r in page.items):
        return page
    known = catalog.VISIBILITY_RELEASE
    old = release is None or known is None or release < known
    items = [
        (
            replace(r, deleted=True, left_view=False, fields={}, visibility=None)
            if old
            else replace(r, visibility=None)
        )
        if r.left_view
        else r
        for r in page.items
    ]
    return replace(page, items=items)


def renders(record: Record) -> bool:
    """Whether this server can render `record` whole (its type, and every field it
    holds with its value)."""
    if not record.item_type.known:
        return False
    return record.deleted or record.item_type.renders(record.fields)
