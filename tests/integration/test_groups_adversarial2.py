"""A second adversarial read of groups (contract 3.12 "Groups", docs/ordering.md
"Groups"): `catchUp` and typed syncs across a join or a leave of the caller, a
subscription's first poke of a member who left, a group history cut at 20
changes, and an export's and a download link's next request after a leave. Each
sync test follows what a device does and checks that it ends holding exactly its
member's view. Through the service (and the API) on DynamoDB Local."""

from __future__ import annotations

import gzip
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

from api.domain.cursor import CursorCodec
from api.domain.errors import NotFound, ResyncRequired
from api.domain.membership import OWNER, Viewer
from api.domain.mutations import Mutation
from api.domain.records import Record
from api.domain.retention import Retention
from api.ordering import wall_clock_ms
from api.service import SyncService
from api.settings import Settings
from api.storage.store import DynamoStore
from tests.integration.test_export import _service as _export_service
from tests.integration.test_group_paths import DAVE, OLGA, ZED, _create_for_kids, kids, service
from tests.integration.test_group_paths import KIDS as ZEDS_KIDS
from tests.integration.test_groups_adversarial import KIDS, RELEASE, _Family, _race
from tests.integration.test_realtime import _connect, _init, _receive, _subscribe
from tests.integration.test_visibility_leaks import (
    ATTACHMENT,
    EXPORT,
    _as,
    _call,
    _code,
    _exported,
    _token_of,
    _upload,
    _write,
)
from tests.integration.test_visibility_writes import Inject
from tests.support.blobs import sha256_of
from tests.support.family import MEMBER as MEMBER_TYPE
from tests.support.family import PERSON as PERSON_TYPE
from tests.support.gql import GraphQLClient

__all__ = ["kids", "service"]  # the fixtures, from the group paths' tests


class _TypedDevice:
    """A device of bob that syncs only `types` (None: all), then, after an upgrade,
    catches up the rest and syncs them all."""

    def __init__(self, family: _Family, types: frozenset[Any] | None, limit: int = 100) -> None:
        self.family, self.types, self.limit = family, types, limit
        self.held: dict[str, str] = {}
        self.token: str | None = None

    def sync(self, viewer: Viewer) -> None:
        service, tenant = self.family.service, self.family.tenant
        page = service.changes(
            tenant,
            since=self.token,
            limit=self.limit,
            types=self.types,
            sub=viewer,
            release=RELEASE,
        )
        self._apply(page.items)
        while page.cursor is not None:
            page = service.changes(
                tenant,
                cursor=page.cursor,
                limit=self.limit,
                types=self.types,
                sub=viewer,
                release=RELEASE,
            )
            self._apply(page.items)
        self.token = page.change_token or self.token

    def catch_up(self, viewer: Viewer) -> None:
        """The upgrade: catchUp of Person up to its token; then it syncs every type."""
        service, tenant = self.family.service, self.family.tenant
        assert self.token is not None
        page = service.catch_up(
            tenant, self.token, types=[PERSON_TYPE], limit=self.limit, release=RELEASE, by=viewer
        )
        self._apply(page.items)
        while page.cursor is not None:
            page = service.catch_up(
                tenant,
                self.token,
                types=[PERSON_TYPE],
                cursor=page.cursor,
                limit=self.limit,
                release=RELEASE,
                by=viewer,
            )
            self._apply(page.items)
        self.types = None

    def _apply(self, items: list[Record]) -> None:
        for record in items:
            if record.deleted or record.left_view:
                self.held.pop(record.id, None)
            else:
                self.held[record.id] = record.change_token

    def people(self) -> set[str]:
        return set(self.held) - {"o", "bob"}


MEMBERS_ONLY = frozenset({MEMBER_TYPE})


def test_a_catch_up_with_a_viewer_still_in_a_group_left_after_up_to_ends_without_its_records(
    settings: Settings, tenant: str
) -> None:
    """bob's device syncs Members only up to U, bob in kids; o moves him out of kids
    (after U); the catch-up of Person runs on an access read taken before the leave
    (still in kids) and gets p1; the device's next sync from U must take it away."""
    family = _Family(tenant, ["kids"])
    family.person("p1", KIDS)
    device = _TypedDevice(family, MEMBERS_ONLY)
    device.sync(family.viewer())
    stale = family.viewer()
    family.groups([])
    device.catch_up(stale)
    assert device.people() == {"p1"}  # the stale viewer's view: the race's premise
    for _ in range(2):
        device.sync(family.viewer())
    assert device.people() == set()


def test_a_catch_up_with_a_viewer_out_of_a_group_joined_after_up_to_still_gets_its_records(
    settings: Settings, tenant: str
) -> None:
    """bob's device syncs Members only up to U, bob in no group; o moves him into kids
    after U; the catch-up runs on an access read from before the join (nothing); the
    device's next syncs from U must bring p1."""
    family = _Family(tenant, [])
    family.person("p1", KIDS)
    device = _TypedDevice(family, MEMBERS_ONLY)
    device.sync(family.viewer())
    stale = family.viewer()
    family.groups(["kids"])
    device.catch_up(stale)
    assert device.people() == set()
    for _ in range(2):
        device.sync(family.viewer())
    assert device.people() == {"p1"}


def test_a_typed_sync_past_a_join_then_a_catch_up_gets_the_groups_records(
    settings: Settings, tenant: str
) -> None:
    """bob joins kids while his device syncs Members only: its token passes the join
    (the re-read's Person entries are not its types); the upgrade's catch-up, then
    its syncs of every type, must bring p1, and a leave after it must take it away."""
    family = _Family(tenant, [])
    family.person("p1", KIDS)
    device = _TypedDevice(family, MEMBERS_ONLY)
    device.sync(family.viewer())
    family.groups(["kids"])
    device.sync(family.viewer())
    device.catch_up(family.viewer())
    device.sync(family.viewer())
    assert device.people() == {"p1"}
    family.groups([])
    device.sync(family.viewer())
    assert device.people() == set()


def test_a_first_poke_of_a_member_who_left_a_group_is_not_a_group_records_token(
    settings: Settings, tenant: str
) -> None:
    """bob, out of kids now, subscribes from a token before p2's write (shared with
    kids after he left): his first event must not be p2's token (outside his view)."""
    family = _Family(tenant, ["kids"])
    family.person("p1", KIDS)
    device = _TypedDevice(family, None)
    device.sync(family.viewer())
    left = family.groups([])
    p2 = family.person("p2", KIDS)
    first = family.service.latest_seen(tenant, device.token, "bob")
    assert first != p2
    assert first is None or first <= left


def test_a_group_history_cut_at_20_changes_ends_with_the_members_view(
    settings: Settings, tenant: str
) -> None:
    """bob's device syncs in kids, then o moves him out and in 21 times (his history
    of kids is cut) and out once more while the device is offline; a record shared
    with kids in between must not stay on it, and one tenant-wide must come."""
    family = _Family(tenant, ["kids"])
    family.person("p1", KIDS)
    device = _TypedDevice(family, None, limit=3)
    device.sync(family.viewer())
    assert device.people() == {"p1"}
    for round_ in range(11):
        family.groups([])
        if round_ == 5:
            family.person("p2", KIDS)
        family.groups(["kids"])
    family.groups([])
    family.person("p3", None)
    for _ in range(2):
        device.sync(family.viewer())
    assert device.people() == {"p3"}
    family.groups(["kids"])
    device.sync(family.viewer())
    assert device.people() == {"p1", "p2", "p3"}


def _olga_leaves_kids(service: SyncService, tenant: str) -> None:
    """Another owner's device moves olga out of kids (her Member record's update)."""
    base = service.membership.access(tenant, OLGA).viewer(OLGA).token
    member = Mutation("update", MEMBER_TYPE, tenant, OLGA, base, {"groups": []})
    service.apply(member, OLGA, OWNER, moved=True)


def test_an_export_made_in_a_group_is_not_linked_after_its_caller_left_it(
    gql: GraphQLClient, service: SyncService, kids: str, unhurried_exports: None
) -> None:
    """olga exports while in kids (the file holds zed's kids record), then leaves
    kids: her next call with that exportID must not link her a file holding a record
    outside her view now."""
    record = _write(service, kids, ZED, {"givenName": "kids-only"}, ZEDS_KIDS)
    payload, lines = _exported(gql, OLGA, kids)
    assert record.id in {line["entity"]["id"] for line in lines if "entity" in line}
    _olga_leaves_kids(service, kids)
    body = _call(gql, OLGA, kids, EXPORT, e=payload["exportID"])
    answer = (body.get("data") or {}).get("exportTenant")
    if answer is not None and answer["downloadURL"] is not None:
        linked = httpx2.get(answer["downloadURL"]).content
        assert b"kids-only" not in gzip.decompress(linked), "a left group's record, linked"
    assert _code(body) == "NOT_FOUND"
    # A new export is her view now.
    _, lines = _exported(gql, OLGA, kids)
    assert record.id not in {line["entity"]["id"] for line in lines if "entity" in line}


def test_a_group_records_blob_is_not_linked_right_after_its_member_left(
    gql: GraphQLClient, service: SyncService, kids: str
) -> None:
    """olga gets a link to the photo of a kids record, leaves kids, asks again: NOT_FOUND."""
    photo = b"kids photo, then gone " * 200
    ref = _upload(gql, ZED, kids, photo)
    record = _write(service, kids, ZED, {"givenName": "kids", "photo": ref}, ZEDS_KIDS)
    sha = sha256_of(photo)
    assert "errors" not in _call(gql, OLGA, kids, ATTACHMENT, sha=sha, id=record.id)
    _olga_leaves_kids(service, kids)
    assert _code(_call(gql, OLGA, kids, ATTACHMENT, sha=sha, id=record.id)) == "NOT_FOUND"


def test_an_export_written_in_a_group_joined_meanwhile_is_not_continued_after_leaving_it(
    settings: Settings, tenant: str, unhurried_exports: None
) -> None:
    """bob starts an export in no group, joins kids, a call writes part of it (kids'
    p1 in it), then he leaves kids: his next call with that exportID is NOT_FOUND
    (its file would hold p1), and one before the leave went on."""
    family = _Family(tenant, [])
    family.person("p1", KIDS)
    exports = _export_service(settings).exports
    job = exports.export_tenant(tenant, None, family.viewer(), steps=0)
    family.groups(["kids"])
    job = exports.export_tenant(tenant, job.export_id, family.viewer(), steps=1)
    assert job.entities >= 1 and not job.done
    family.groups([])
    with pytest.raises(NotFound):
        exports.export_tenant(tenant, job.export_id, family.viewer())


def test_a_subscription_of_a_member_who_left_a_group_is_not_poked_by_its_records(
    app_client: TestClient, gql: GraphQLClient, service: SyncService, kids: str
) -> None:
    """olga subscribes in kids, gets a kids record's poke, leaves kids while
    subscribed (her Member write pokes her), then zed writes kids records (one by
    this server, one by another process): her next event is the next tenant-wide
    change's token, never a kids record's."""
    first = _write(service, kids, ZED, {"givenName": "everyone"})
    with _connect(app_client) as ws:
        _init(ws, _as(OLGA, kids)["Authorization"])
        assert _receive(ws) == {"type": "connection_ack"}
        _subscribe(ws, OLGA, kids, since=first.change_token)
        inside = _write(service, kids, ZED, {"givenName": "kids"}, ZEDS_KIDS)
        assert _token_of(_receive(ws)) == inside.change_token
        _olga_leaves_kids(service, kids)
        left = _token_of(_receive(ws))
        assert left > inside.change_token
        mine = _create_for_kids(gql, kids)
        other = _write(service, kids, ZED, {"givenName": "kids 2"}, ZEDS_KIDS)
        after = _write(service, kids, ZED, {"givenName": "Later"})
        told = _token_of(_receive(ws))
        assert told not in (mine, other.change_token), "a left group's record's token"
        assert told == after.change_token


PEOPLE_ONLY = frozenset({PERSON_TYPE})


@pytest.mark.parametrize("limit", [1, 100])
@pytest.mark.parametrize("move", ["join", "leave"])
def test_a_typed_sync_racing_its_members_join_or_leave_ends_with_the_view(
    settings: Settings, tenant: str, inject: Inject, move: str, limit: int
) -> None:
    """A device syncing People only (its pages never hold bob's Member record) whose
    sync's access read is taken before another server moves bob into (or out of)
    kids and whose first read passes that write: its later syncs must still bring
    p1 (or take it away), at page limits 1 and 100."""
    family = _Family(tenant, [] if move == "join" else ["kids"])
    family.person("p1", KIDS)
    family.person("p0", None)
    device = _TypedDevice(family, PEOPLE_ONLY, limit=limit)
    device.sync(family.viewer())
    stale = family.viewer()
    raced = _race(tenant, inject, lambda: family.groups(["kids"] if move == "join" else []))
    device.sync(stale)
    assert raced
    for _ in range(2):
        device.sync(family.viewer())
    assert device.people() == ({"p0", "p1"} if move == "join" else {"p0"})


@pytest.mark.parametrize("move", ["join", "leave"])
def test_a_first_poke_after_a_join_or_leave_is_newer_than_the_subscriptions_since(
    settings: Settings, tenant: str, move: str
) -> None:
    """bob's device synced up to S; then o moves him into (or out of) kids, whose p1
    was written before S; he subscribes from S. His first event must tell a change
    after S (the join's or leave's, a Member write in his view): a token at or below
    S (the re-read's first item, p1's, sent first) tells nothing new, and the
    subscription holding S drops it."""
    family = _Family(tenant, [] if move == "join" else ["kids"])
    family.person("p1", KIDS)
    device = _TypedDevice(family, None)
    device.sync(family.viewer())
    assert device.token is not None
    moved = family.groups(["kids"] if move == "join" else [])
    first = family.service.latest_seen(tenant, device.token, "bob")
    assert first is not None and first > device.token, (first, device.token, moved)


def test_a_subscription_opened_after_its_member_joined_a_group_is_poked_with_the_join(
    app_client: TestClient, service: SyncService, kids: str
) -> None:
    """dave's device synced up to zed's kids record's token K; olga moves dave into
    kids; dave subscribes from K: his first event carries a token newer than K (the
    join's), not K itself (the re-read's first item, p1 as it was at K)."""
    record = _write(service, kids, ZED, {"givenName": "kids"}, ZEDS_KIDS)
    base = service.membership.access(kids, DAVE).viewer(DAVE).token
    joined = service.apply(
        Mutation("update", MEMBER_TYPE, kids, DAVE, base, {"groups": ["kids"]}),
        OLGA,
        OWNER,
        moved=True,
    ).record.change_token
    with _connect(app_client) as ws:
        _init(ws, _as(DAVE, kids)["Authorization"])
        assert _receive(ws) == {"type": "connection_ack"}
        _subscribe(ws, DAVE, kids, since=record.change_token)
        assert _token_of(_receive(ws)) == joined


def test_a_re_reads_cursor_followed_after_the_retention_ends_in_resync_required(
    settings: Settings, tenant: str
) -> None:
    """bob joins kids after his device's token S; his sync's re-read of kids goes page
    by page (limit 1), and he follows its cursor after S has passed the retention:
    the sync ends RESYNC_REQUIRED (entries of kids' stream above S may be gone by
    TTL) before its last page, never with a token past what it could not read."""
    family = _Family(tenant, [])
    for n in range(3):
        family.person(f"p{n}", KIDS)
    device = _TypedDevice(family, None, limit=1)
    device.sync(family.viewer())
    family.groups(["kids"])
    now = [wall_clock_ms()]
    later = SyncService(
        DynamoStore(), CursorCodec("x"), clock_ms=lambda: now[0], retention=Retention(60)
    )
    viewer = family.viewer()
    page = later.changes(tenant, since=device.token, limit=1, sub=viewer, release=RELEASE)
    assert page.cursor is not None and page.regrouped
    now[0] += 3_600_000  # an hour later: S is past the 60 s retention
    with pytest.raises(ResyncRequired):
        while page.cursor is not None:
            page = later.changes(tenant, cursor=page.cursor, limit=1, sub=viewer, release=RELEASE)
