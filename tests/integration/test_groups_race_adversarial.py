"""Adversarial probes of `viewed` (cursor version 3, docs/ordering.md "A join or a
leave between two pages of a sync", contract 3.12 and 3.4): Member writes of the
caller that change no group, or several in a row, made while its device syncs or
re-reads a group; a member removed then re-added; a cursor of one member followed
by another; a cursor minted before a leave followed after it; a version 2 cursor
(an earlier release's) followed across a join; two devices of one member. Each
follows `changes` through the service on DynamoDB Local, a request's viewer read as
its access read would be (the first request's before the write when the write is
made in the moment between its access read and its first read of the log), and
checks that the device ends holding exactly what a new device of its member gets,
within a bounded number of syncs. Also: the DynamoDB calls of every page of a sync
with `viewed` and without it, and a catch-up across a join or a leave.

Two defects found here, now fixed: a join or a leave superseded by a later write of
the same Member record before a page reads its log entry (the page ends before the
join's marker in the member's stream, docs/ordering.md "A join or a leave superseded
before a page reads it"); and a member REMOVED in no group then re-added in none (its
access item keeps its joins and leaves through the removal)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from api.domain.cursor import CursorCodec
from api.domain.errors import InvalidCursor
from api.domain.membership import Viewer
from api.domain.mutations import Mutation
from api.domain.visibility import Visibility, sees
from api.service.ports import Page
from api.settings import Settings
from api.storage import capacity
from tests.integration.test_groups import UPDATE_MEMBER, _groups
from tests.integration.test_groups_adversarial import KIDS, RELEASE, _Family
from tests.integration.test_groups_race import (
    _Device as _ServerDevice,
)
from tests.integration.test_groups_race import (
    _first_log_read,
    _member_token,
    _new_device,
    _public,
    _setup,
    server,  # noqa: F401 (a fixture: the API server behind the proxy)
)
from tests.support.dynamo_proxy import DynamoProxy
from tests.support.family import MEMBER as MEMBER_TYPE
from tests.support.family import PERSON
from tests.support.gql import GraphQLClient

PUBLIC = ("p1", "p2", "p3", "p4", "p5")  # three pages of two
MAX_SYNCS = 4  # a sync cut by the write, the one that passes it, a poll (and one spare)


class _Device:
    """A device of `sub`: what it holds, the LeftViewItems it was sent, its token."""

    def __init__(self, family: _Family, sub: str = "bob", limit: int = 2) -> None:
        self.family, self.sub, self.limit = family, sub, limit
        self.held: dict[str, str] = {}
        self.left: list[str] = []
        self.token: str | None = None
        self.seen: list[str] = []  # every id any page sent it

    def viewer(self) -> Viewer:
        return self.family.service.membership.access(self.family.tenant, self.sub).viewer(self.sub)

    def sync(
        self,
        first: Viewer | None = None,
        between: Callable[[int, Page], None] | None = None,
        cursor_of: Callable[[str], str] = lambda c: c,
    ) -> list[Page]:
        """One sync: its first request with `first` (default: a fresh access read),
        `between(n, page)` run before its n-th later request, each later one with a
        fresh access read and `cursor_of(cursor)` as its cursor; its pages."""
        service, tenant = self.family.service, self.family.tenant
        page = service.changes(
            tenant, since=self.token, limit=self.limit, sub=first or self.viewer(), release=RELEASE
        )
        pages = [page]
        while page.cursor is not None and len(pages) < 60:
            if between is not None:
                between(len(pages), page)
            page = service.changes(
                tenant,
                cursor=cursor_of(page.cursor),
                limit=self.limit,
                sub=self.viewer(),
                release=RELEASE,
            )
            pages.append(page)
        assert page.cursor is None, "the sync did not end within 60 requests"
        for page in pages:
            for record in page.items:
                self.seen.append(record.id)
                if record.left_view:
                    self.left.append(record.id)
                if record.deleted or record.left_view:
                    self.held.pop(record.id, None)
                else:
                    self.held[record.id] = record.change_token
        self.token = page.change_token or self.token
        return pages

    def settle(self) -> int:
        """Syncs until one is a poll (one page, nothing in it, the token kept); how
        many it took, that poll included."""
        for n in range(1, MAX_SYNCS + 1):
            before = self.token
            pages = self.sync()
            if len(pages) == 1 and not pages[0].items and self.token == before:
                return n
        pytest.fail(f"{self.sub}'s device never settled: token {self.token}")


def _fresh(family: _Family, sub: str = "bob") -> dict[str, str]:
    device = _Device(family, sub, limit=100)
    device.sync()
    return device.held


def _member(family: _Family, sub: str, fields: dict[str, Any], create: bool = False) -> str:
    """o writes `sub`'s Member record (`fields`); the write's token."""
    if create:
        mutation = Mutation("create", MEMBER_TYPE, family.tenant, sub, None, fields)
        return family._member(mutation)
    assert sub == "bob"
    update = Mutation("update", MEMBER_TYPE, family.tenant, "bob", family.bob, fields)
    family.bob = family._member(update)
    return family.bob


def _synced(groups: list[str], tenant: str) -> tuple[_Family, _Device]:
    """bob in `groups`, olga's letter shared with kids, bob's device up to date, then
    five public records after its token."""
    family = _Family(tenant, groups)
    family.person("letter", KIDS)
    device = _Device(family)
    device.sync()
    for id in PUBLIC:
        family.person(id, None)
    return family, device


# A re-read loop: a device that never gets past a cut.


@pytest.mark.parametrize("race", ["in-window", "mid-sync", "both"])
def test_member_writes_that_change_no_group_are_passed_by_the_next_sync(
    settings: Settings, tenant: str, race: str
) -> None:
    """bob's displayName and role written (two writes in a row) between his sync's
    access read and its first read of the log, and/or between two of its pages: the
    sync ends before the first, the next passes them all, the one after is a poll."""
    family, device = _synced(["kids"], tenant)
    first = device.viewer()
    writes: list[str] = []
    if race in ("in-window", "both"):
        writes.append(_member(family, "bob", {"displayName": "Bobby"}))
        writes.append(_member(family, "bob", {"role": "WRITER"}))

    def between(n: int, page: Page) -> None:
        if n == 1 and race in ("mid-sync", "both"):
            writes.append(_member(family, "bob", {"displayName": "Robert"}))
            writes.append(_member(family, "bob", {"role": "READER"}))

    device.sync(first, between)
    # An update removes the log entry of the version it replaces: only the last
    # write's entry is left for the page to end before.
    assert device.token is not None and device.token < writes[-1], (writes, device.token)
    syncs = device.settle()
    assert device.token >= writes[-1] and syncs <= 2, (writes, device.token, syncs)
    assert device.held == _fresh(family), (sorted(device.held), sorted(_fresh(family)))


def test_a_member_write_made_while_the_device_re_reads_a_group_is_passed(
    settings: Settings, tenant: str
) -> None:
    """bob joined kids after his device's token; his sync re-reads kids one record a
    page; between two of the re-read's pages bob's displayName is written: the sync
    ends before it with kids' records, the next passes it, the one after is a poll."""
    family = _Family(tenant, [])
    for n in range(4):
        family.person(f"k{n}", KIDS)
    device = _Device(family, limit=1)
    device.sync()
    family.person("p0", None)
    family.groups(["kids"])
    renamed: list[str] = []

    def between(n: int, page: Page) -> None:
        if n == 2:
            assert page.regrouped, "the rename was meant to land mid-re-read"
            renamed.append(_member(family, "bob", {"displayName": "Bobby"}))

    pages = device.sync(between=between)
    assert pages[0].regrouped and renamed
    syncs = device.settle()
    assert device.token is not None and device.token >= renamed[0] and syncs <= 2
    assert {"k0", "k1", "k2", "k3"} <= set(device.held)
    assert device.held == _fresh(family), (sorted(device.held), sorted(_fresh(family)))


# bob REMOVED (in kids, or in no group) then re-added in none: his access item keeps
# its joins and leaves through the removal (a role-less item), so the re-add's item
# still records that he left kids, and his device's next sync re-reads it.


@pytest.mark.parametrize("other", ["adults", "zoo"])  # re-read before kids, or after it
def test_a_second_group_joined_while_the_device_re_reads_the_first_reaches_it(
    settings: Settings, tenant: str, other: str
) -> None:
    """bob joined kids after his device's token; while his sync re-reads kids (one
    record a page) he joins `other` too: the device ends with both groups' records,
    as a new device of his, within two syncs and a poll."""
    family = _Family(tenant, [])
    for n in range(3):
        family.person(f"k{n}", KIDS)
        family.person(f"o{n}", Visibility.of(None, [], [other]))
    device = _Device(family, limit=1)
    device.sync()
    family.person("p0", None)
    family.groups(["kids"])
    joined: list[str] = []

    def between(n: int, page: Page) -> None:
        if n == 2:
            assert page.regrouped, "the join was meant to land mid-re-read"
            joined.append(family.groups(["kids", other]))

    device.sync(between=between)
    syncs = device.settle()
    assert device.token is not None and device.token >= joined[0] and syncs <= 2
    assert {"k0", "k1", "k2", "o0", "o1", "o2"} <= set(device.held), sorted(device.held)
    assert device.held == _fresh(family)


@pytest.mark.parametrize(
    "kept",
    [True, False],
    ids=["removed-in-kids", "removed-in-none"],
)
@pytest.mark.parametrize("mid_sync", [True, False], ids=["mid-sync", "offline"])
def test_a_member_removed_then_re_added_without_kids_gets_a_left_view_of_its_records(
    settings: Settings, tenant: str, kept: bool, mid_sync: bool
) -> None:
    """bob, in kids, holds olga's letter; o writes him REMOVED (his groups kept, or
    none) and re-adds him as a READER in no group, between two pages of his sync or
    while his device is offline. His device must end without the letter (a
    LeftViewItem of it), as a new device of his."""
    family, device = _synced(["kids"], tenant)
    assert "letter" in device.held

    def remove_and_re_add() -> None:
        _member(family, "bob", {"role": "REMOVED", "groups": ["kids"] if kept else []})
        _member(family, "bob", {"role": "READER", "groups": []})

    if mid_sync:
        device.sync(between=lambda n, page: remove_and_re_add() if n == 1 else None)
    else:
        remove_and_re_add()
    device.settle()
    assert "letter" not in device.held and "letter" in device.left, (
        f"bob removed and re-added in no group; his device holds {sorted(device.held)}, "
        f"was sent LeftViewItems of {device.left}"
    )
    assert device.held == _fresh(family)


# Two Member writes of bob, the first moving him, the second changing no group: the
# log keeps only the second's entry (an update removes the entry of the version it
# replaces), so a page whose viewer reflects neither would end before the second
# only, its token past the move, with no re-read; the move's marker in bob's stream
# ends it before the first.


@pytest.mark.parametrize(
    "when",
    [
        "in-window",
        "renamed-mid-sync",
        "first-sync",  # in the moment, a device's first
        "both-mid-sync",  # both after the sync's first read: the device gets the letter
    ],
)
def test_a_join_then_a_rename_of_bob_during_his_sync_brings_the_letter(
    settings: Settings, tenant: str, when: str
) -> None:
    """bob joins kids (T1) between his sync's access read and its first read of the
    log (or between two of its pages); his displayName is written (T2) in that moment
    too, or between two of the sync's pages. His device must end with the letter, as
    a new device of his."""
    family, device = _synced([], tenant)
    if when == "first-sync":
        device = _Device(family)  # a new device of bob: its sync from null
    first = device.viewer()
    joined: list[str] = []
    renamed: list[str] = []
    if when != "both-mid-sync":
        joined.append(family.groups(["kids"]))
    if when in ("in-window", "first-sync"):
        renamed.append(_member(family, "bob", {"displayName": "Bobby"}))

    def between(n: int, page: Page) -> None:
        if n == 1 and when == "both-mid-sync":
            joined.append(family.groups(["kids"]))
        if n == 1 and when in ("renamed-mid-sync", "both-mid-sync"):
            renamed.append(_member(family, "bob", {"displayName": "Bobby"}))

    device.sync(first, between)
    cut = device.token
    device.settle()
    assert "letter" in device.held and device.held == _fresh(family), (
        f"joined kids at {joined}, renamed at {renamed}; the raced sync moved to {cut}; "
        f"holds {sorted(device.held)}"
    )


def test_a_leave_then_a_rename_of_bob_in_the_moment_sends_a_left_view(
    settings: Settings, tenant: str
) -> None:
    """bob leaves kids (T1), then his displayName is written (T2), both between his
    sync's access read and its first read of the log: his device must be sent a
    LeftViewItem of the letter and end as a new device of his."""
    family, device = _synced(["kids"], tenant)
    first = device.viewer()
    left = family.groups([])
    renamed = _member(family, "bob", {"displayName": "Bobby"})
    device.sync(first)
    cut = device.token
    device.settle()
    assert "letter" in device.left and device.held == _fresh(family), (
        f"left kids at {left}, renamed at {renamed}; the raced sync moved to {cut}; "
        f"sent LeftViewItems of {device.left}, holds {sorted(device.held)}"
    )


def test_on_a_server_a_join_then_a_rename_in_the_moment_brings_the_letter(
    server: tuple[str, DynamoProxy],  # noqa: F811
    gql: GraphQLClient,
    tenant: str,
) -> None:
    """The server holds bob's sync's first Query of the log (after its access read)
    while olga moves bob into kids and then writes his displayName: his device must
    end with the letter, as a new device of his."""
    base, proxy = server
    olga = _setup(gql, tenant, [])
    with httpx2.Client(base_url=base, timeout=60) as http:
        device = _ServerDevice(http, tenant)
        device.sync()
        for id in PUBLIC:
            _public(olga, id)
        hold = proxy.hold(_first_log_read(tenant))
        first: dict[str, Any] = {}
        request = threading.Thread(target=lambda: first.update(device.request(None)), daemon=True)
        request.start()
        try:
            assert hold.reached.wait(60), "the sync's first read of the log never came"
            _groups(olga, "bob", ["kids"])
            joined = _member_token(olga, "bob")
            changes = {"displayName": "Bobby"}
            i = {"tenantID": tenant, "id": "bob", "changeToken": joined, "changes": changes}
            olga.data(UPDATE_MEMBER, {"i": i})
        finally:
            hold.go.set()
        request.join(60)
        assert not request.is_alive() and first, "the first request did not answer"
        device.follow(device.apply(first))
        cut = device.token
        device.sync()
        device.sync()
        fresh = _new_device(http, tenant)
    assert "letter" in device.held and device.held == fresh.held, (
        f"joined kids at {joined}, renamed at {_member_token(olga, 'bob')}; the raced sync "
        f"moved to {cut}; holds {sorted(device.held)}"
    )


# Cursors followed by another member, or after a leave, or of an earlier release.


def test_bobs_cursors_followed_by_carol_show_her_only_her_view(
    settings: Settings, tenant: str
) -> None:
    """carol (in no group) follows bob's version 3 cursor (bob in kids, a record of
    his own): every record she is sent is one she sees. bob's re-read's cursor (he
    joined zoo) is refused to her: she never joined nor left zoo."""
    family, _ = _synced(["kids"], tenant)
    _member(family, "carol", {"role": "READER", "groups": []}, create=True)
    family.person("bobs", Visibility.of(None, ["bob"]))
    bob, carol = _Device(family), _Device(family, "carol")
    page = family.service.changes(tenant, limit=2, sub=bob.viewer(), release=RELEASE)
    assert page.cursor is not None and CursorCodec("x").decode(tenant, page.cursor).viewed
    sent: list[tuple[str, Visibility | None]] = []
    cursor: str | None = page.cursor
    while cursor is not None:
        page = family.service.changes(tenant, cursor=cursor, limit=2, sub=carol.viewer())
        sent += [(r.id, r.visibility) for r in page.items]
        cursor = page.cursor
    assert sent and all(sees(v, carol.viewer()) for _, v in sent), sent
    assert not {"letter", "bobs"} & {id for id, _ in sent}
    for id in ("z1", "z2"):
        family.person(id, Visibility.of(None, [], ["zoo"]))
    since = family.person("p6", None)
    family.groups(["kids", "zoo"])  # bob joins zoo after `since`: a re-read of zoo
    reread = family.service.changes(tenant, since=since, limit=1, sub=bob.viewer())
    assert reread.regrouped and reread.cursor is not None
    with pytest.raises(InvalidCursor, match="caller"):
        family.service.changes(tenant, cursor=reread.cursor, limit=1, sub=carol.viewer())


def test_a_cursor_minted_before_a_leave_sends_nothing_of_the_group_after_it(
    settings: Settings, tenant: str
) -> None:
    """bob's sync begins in kids; between two of its pages he leaves kids and olga
    shares a new record with kids: no page sends it, the sync ends before the leave,
    and the next sends a LeftViewItem of the letter."""
    family, device = _synced(["kids"], tenant)
    moved: list[str] = []

    def leave(n: int, page: Page) -> None:
        if n == 1:
            moved.append(family.groups([]))
            family.person("secret", KIDS)

    device.sync(between=leave)
    assert "secret" not in device.seen and device.token is not None and device.token < moved[0]
    device.settle()
    assert "secret" not in device.seen and "letter" in device.left
    assert device.held == _fresh(family)


def test_a_version_2_cursor_followed_across_a_join_is_cut_as_before(
    settings: Settings, tenant: str
) -> None:
    """bob's sync with streams, its cursors rewritten as an earlier release's (version
    2, no `viewed`), while he joins kids after its first page: the sync ends before
    the join (its `upper` rule), the next re-reads kids and brings the letter."""
    family, device = _synced([], tenant)
    family.person("private", Visibility.of(None, ["o"]))  # the tenant restricts a record
    codec = CursorCodec("x")
    v2: list[str] = []

    def earlier(cursor: str) -> str:
        position = codec.decode(tenant, cursor)
        assert position.viewed is None or position.streams
        v2.append(codec.encode(tenant, dataclasses.replace(position, viewed=None)))
        return v2[-1]

    joined: list[str] = []
    device.sync(
        between=lambda n, p: joined.append(family.groups(["kids"])) if n == 1 else None,
        cursor_of=earlier,
    )
    assert v2 and all(codec.body(tenant, c).startswith("2.") for c in v2)
    assert device.token is not None and device.token < joined[0]
    device.settle()
    assert "letter" in device.held and device.held == _fresh(family)


def test_two_devices_of_bob_one_mid_sync_across_the_join_the_other_polling(
    settings: Settings, tenant: str
) -> None:
    """bob's tablet syncs with its first request's access read before his join; his
    phone syncs (and polls) after the join, before the tablet's later pages: both end
    with the letter, as a new device of his."""
    family, tablet = _synced([], tenant)
    phone = _Device(family)
    phone.sync()
    first = tablet.viewer()
    joined = family.groups(["kids"])
    phone_syncs: list[int] = []
    tablet.sync(first, lambda n, p: phone_syncs.append(phone.settle()) if n == 1 else None)
    assert tablet.token is not None and tablet.token < joined
    tablet.settle()
    fresh = _fresh(family)
    assert "letter" in tablet.held and tablet.held == fresh, sorted(tablet.held)
    assert "letter" in phone.held and phone.held == fresh, sorted(phone.held)


# Cost: every page of a whole sync (a re-read's, the log's, the lifted last one).


def _metered_sync(
    family: _Family, since: str, limit: int, rewrite: Callable[[str], str]
) -> list[tuple[int, float, list[str]]]:
    """A sync of bob from `since`, each later request's cursor `rewrite(cursor)`:
    per request, its DynamoDB calls, read units and item ids."""
    tenant, viewer = family.tenant, family.viewer()
    rows = []
    cursor: str | None = None
    for n in range(60):
        with capacity.metered() as meter:
            if n == 0:
                page = family.service.changes(
                    tenant, since=since, limit=limit, sub=viewer, release=RELEASE
                )
            else:
                assert cursor is not None
                page = family.service.changes(
                    tenant, cursor=rewrite(cursor), limit=limit, sub=viewer, release=RELEASE
                )
        rows.append((meter.calls, meter.read_units, [r.id for r in page.items]))
        cursor = page.cursor
        if cursor is None:
            return rows
    pytest.fail("the sync did not end within 60 requests")


def test_every_page_of_a_sync_reads_as_with_the_previous_releases_cursors(
    settings: Settings, tenant: str
) -> None:
    """bob joined kids after `since`: his sync re-reads kids one record a page, then
    reads the log two a page. Followed with its own cursors (version 3, the re-read's
    carrying `viewed`) or with each rewritten without `viewed` (as the previous
    release wrote them), every request makes the same DynamoDB calls, of the same
    read units, and returns the same items."""
    family = _Family(tenant, [])
    for n in range(3):
        family.person(f"k{n}", KIDS)
    since = family.person("p0", None)
    for id in PUBLIC:
        family.person(id, None)
    family.groups(["kids"])
    codec = CursorCodec("x")

    def previous(cursor: str) -> str:
        body = codec.body(tenant, cursor)
        if body.startswith("R|"):  # a re-read's: its 6 parts of the previous release
            return codec.signed(tenant, "|".join(body.split("|")[:6]))
        position = codec.decode(tenant, cursor)
        return codec.encode(tenant, dataclasses.replace(position, viewed=None))

    seen: list[str] = []

    def own(cursor: str) -> str:
        seen.append(codec.body(tenant, cursor))
        return cursor

    with_viewed = _metered_sync(family, since, 1, own)
    assert any(b.startswith("R|") and b.count("|") == 6 for b in seen), seen
    assert any(b.startswith("3.") for b in seen), seen
    without = _metered_sync(family, since, 1, previous)
    assert len(with_viewed) > 5 and with_viewed == without, (with_viewed, without)


# A catch-up across a join or a leave, and cursors of one kind given to the other.


@pytest.mark.parametrize("move", ["join", "leave"])
def test_a_catch_up_across_a_join_or_a_leave_then_the_sync_end_as_a_new_device(
    settings: Settings, tenant: str, move: str
) -> None:
    """bob's device catches up Person records up to its token, one a page; between two
    pages bob joins (leaves) kids. Then it syncs from its token: it ends with (without)
    the letter, as a new device of his."""
    family, device = _synced([] if move == "join" else ["kids"], tenant)
    device.sync()
    up_to = device.token
    assert up_to is not None
    moved: list[str] = []
    cursor: str | None = None
    for n in range(30):
        page = family.service.catch_up(
            tenant, up_to, types=[PERSON], cursor=cursor, limit=1, by=device.viewer()
        )
        for record in page.items:
            device.held[record.id] = record.change_token
        if n == 0:
            moved.append(family.groups(["kids"] if move == "join" else []))
        cursor = page.cursor
        if cursor is None:
            break
    assert cursor is None and moved
    device.settle()
    assert ("letter" in device.held) is (move == "join"), (moved, sorted(device.held))
    assert device.held == _fresh(family)


def test_a_changes_cursor_is_no_catch_up_cursor_nor_the_other_way(
    settings: Settings, tenant: str
) -> None:
    """A sync's version 3 cursor given to catchUp, and a catch-up's cursor given to
    changes: INVALID_CURSOR both."""
    family, device = _synced(["kids"], tenant)
    viewer = device.viewer()
    page = family.service.changes(tenant, since=device.token, limit=2, sub=viewer)
    assert page.cursor is not None
    assert CursorCodec("x").body(tenant, page.cursor).startswith("3.")
    up_to = family.person("p6", None)
    with pytest.raises(InvalidCursor):
        family.service.catch_up(tenant, up_to, types=[PERSON], cursor=page.cursor, by=viewer)
    caught = family.service.catch_up(tenant, up_to, types=[PERSON], limit=1, by=viewer)
    assert caught.cursor is not None
    with pytest.raises(InvalidCursor):
        family.service.changes(tenant, cursor=caught.cursor, limit=2, sub=viewer)
