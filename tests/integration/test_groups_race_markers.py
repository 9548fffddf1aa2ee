"""The marker of a join or a leave (docs/ordering.md, "Groups"): a Member write that
moves its member into or out of a group, in a tenant with restricted records, puts
an entry in the member's own stream at its token, superseded by itself, which no
later write removes and no page sends; a sync whose viewer does not reflect it ends
before it. And a member REMOVED then re-added keeps its joins and leaves across the
removal: a catch-up from before it, then the sync, ends as a new device of his."""

from __future__ import annotations

from api.domain.chain import stream_key
from api.domain.records import Record
from api.domain.visibility import member_principal
from api.settings import Settings
from api.storage import members, reads, streams
from tests.integration.test_groups_adversarial import _Family
from tests.integration.test_groups_race_adversarial import _fresh, _member, _synced
from tests.support.family import PERSON


def _own_stream(family: _Family, sub: str = "bob") -> list[tuple[str, str | None, bool]]:
    """bob's own stream: (token, superseded, fields present) of each entry."""
    items, more = streams.stream_range(family.tenant, member_principal(sub), None, "~", 100)
    assert not more
    return [(r.change_token, r.superseded, bool(r.fields)) for r in items]


def test_a_join_and_a_leave_put_a_marker_no_page_sends(settings: Settings, tenant: str) -> None:
    """bob joins kids then leaves it, his displayName written between: his stream holds
    one marker for each move (none for the rename); his device, syncing after each,
    is sent each of his Member versions (the main log's entry wins over the marker at
    its token) and never a marker; it ends as a new device of his."""
    family, device = _synced([], tenant)
    device.sync()
    joined = family.groups(["kids"])
    device.sync()
    assert device.held["bob"] == joined and "letter" in device.held, sorted(device.held)
    renamed = _member(family, "bob", {"displayName": "Bobby"})
    device.sync()
    left = family.groups([])
    device.sync()
    assert device.held["bob"] == left and "letter" in device.left, (sorted(device.held), left)
    assert _own_stream(family) == [(joined, joined, False), (left, left, False)], renamed
    sent = [r for r in device.seen if r == "bob"]
    assert len(sent) >= 3 and device.held == _fresh(family)
    assert not any(r.marks for r in _all_pages(family))


def _all_pages(family: _Family) -> list[Record]:
    """Every item a new device of bob is sent, page by page (one item a page)."""
    service, tenant = family.service, family.tenant
    viewer = service.membership.access(tenant, "bob").viewer("bob")
    page = service.changes(tenant, limit=1, sub=viewer)
    items = list(page.items)
    while page.cursor is not None:
        page = service.changes(tenant, cursor=page.cursor, limit=1, sub=viewer)
        items += page.items
    return items


def test_a_tenant_without_restricted_records_gets_no_marker(
    settings: Settings, tenant: str
) -> None:
    """A tenant none of whose records is restricted: a join writes no marker (its syncs
    read no stream), and the head stays unrestricted."""
    family = _Family(tenant, [])
    family.person("p", None)
    family.groups(["kids"])
    assert _own_stream(family) == []
    head = reads.head(tenant)
    assert head is not None and not head.restricted


def test_a_catch_up_from_before_a_removal_then_the_sync_end_as_a_new_device(
    settings: Settings, tenant: str
) -> None:
    """bob (in kids) holds the letter; his device catches up Person records one a page,
    and between two pages o writes him REMOVED in no group and re-adds him in none.
    The catch-up, then the sync from his token, leave him without the letter (a
    LeftViewItem of it), as a new device of his."""
    family, device = _synced(["kids"], tenant)
    device.sync()
    up_to = device.token
    assert up_to is not None and "letter" in device.held
    cursor: str | None = None
    for n in range(30):
        page = family.service.catch_up(
            tenant, up_to, types=[PERSON], cursor=cursor, limit=1, by=device.viewer()
        )
        for record in page.items:
            device.held[record.id] = record.change_token
        if n == 0:
            _member(family, "bob", {"role": "REMOVED", "groups": []})
            _member(family, "bob", {"role": "READER", "groups": []})
        cursor = page.cursor
        if cursor is None:
            break
    assert cursor is None
    device.settle()
    assert "letter" not in device.held and "letter" in device.left, sorted(device.held)
    assert device.held == _fresh(family)


def test_a_removed_member_is_refused_and_in_no_roster(settings: Settings, tenant: str) -> None:
    """bob REMOVED (in kids, then in none): his access item keeps his joins and leaves
    but gives no role (a request is refused as before) and no group; the roster lists
    him nowhere but in `changed`."""
    family, _ = _synced(["kids"], tenant)
    removed = _member(family, "bob", {"role": "REMOVED", "groups": []})
    access = family.service.membership.access(tenant, "bob")
    assert access.moved and access.role is None and access.groups == ()
    assert access.viewer("bob").groups == ()
    roster = members.roster(tenant)
    assert "bob" not in (roster.roles or {}) and "bob" not in roster.groups
    assert roster.changed["bob"]["kids"].split()[-1] == removed


def test_a_marker_is_seen_applied_by_consistent_reads(settings: Settings, tenant: str) -> None:
    """The next write's check by reads of the head's stream entries (when they and it do
    not fit one transaction) finds a join's marker present, as its transaction put it
    (a group's superseded entry counts as removed, a marker does not)."""
    family, _ = _synced([], tenant)
    joined = family.groups(["kids"])
    head = reads.head(tenant)
    assert head is not None and head.token == joined
    key = stream_key(joined, member_principal("bob"))
    assert head.stream_put == (key,)
    assert streams.entries_applied(tenant, head.stream_put, ())
    assert not streams.entries_applied(tenant, (), head.stream_put)
