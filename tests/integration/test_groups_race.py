"""A join or a leave that commits between a sync's first access read and its first
read of the log, in a sync of several requests (contract 3.12 "Groups",
docs/ordering.md "A join or a leave between two pages of a sync"). The first request's
viewer does not reflect it, so that request re-reads nothing; a later request's does,
and before every cursor of the sync carried what the first request's viewer
reflected (`viewed`), the sync passed the Member write with no re-read: a joined
group's older records never reached the device, a left group's stayed on it.

On a real server over DynamoDB Local, its DynamoDB calls through a proxy that holds
the request's first Query of the log while another process commits bob's Member
write (`tests/support/dynamo_proxy.py`); then through the service with a viewer read
before the write (the same interleaving, without a server), which also follows the
sync after the cut to its end, and a claim tenant's caller put in a group as its
tenant moves to membership as data. And a re-read's cursor followed after the
retention."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from api.domain.cursor import CursorCodec
from api.domain.errors import ResyncRequired, TenantDeleted
from api.domain.membership import Viewer
from api.domain.tokens import token_before
from api.graphql.context import RELEASE_HEADER
from api.service import SyncService
from api.service.ports import Page
from api.settings import Settings
from api.storage import capacity, keys
from api.storage.store import DynamoStore
from tests.integration.test_groups import CREATE_PERSON, RELEASE, Caller, _groups
from tests.integration.test_groups_adversarial import KIDS, _Family
from tests.integration.test_visibility_sync import _CHANGES
from tests.integration.test_visibility_writes import _create, _service, _write
from tests.support.dynamo_proxy import DynamoProxy, Match
from tests.support.gql import GraphQLClient, bearer
from tests.support.servers import api_server
from tests.support.short_retention import EXPIRED_S, Clock, short_retention_service

PUBLIC = ("p1", "p2", "p3", "p4", "p5")  # written after the device's token: 3 pages of 2


@pytest.fixture(scope="module")
def server(settings: Settings) -> Iterator[tuple[str, DynamoProxy]]:
    """An API server whose DynamoDB calls go through the proxy."""
    assert settings.dynamodb_endpoint is not None
    with DynamoProxy(settings.dynamodb_endpoint) as proxy:
        slow = dataclasses.replace(settings, dynamodb_endpoint=proxy.endpoint)
        with api_server(slow) as base:
            yield base, proxy


def _first_log_read(tenant: str) -> Match:
    """A Query of the tenant's log partition: a sync's first read, after its access
    read (a Query of the tenant's access partition)."""
    log = {"S": keys.log_pk(tenant)}
    return lambda op, body: (
        op == "Query" and log in body.get("ExpressionAttributeValues", {}).values()
    )


class _Device:
    """A device of bob on the server: what it holds, the LeftViewItems it was sent,
    its token, and the requests each sync took."""

    def __init__(self, http: httpx2.Client, tenant: str, limit: int = 2) -> None:
        self.http, self.tenant, self.limit = http, tenant, limit
        self.headers = {**bearer([tenant], sub="bob"), RELEASE_HEADER: str(RELEASE)}
        self.held: dict[str, str] = {}
        self.left: list[str] = []
        self.token: str | None = None

    def request(self, cursor: str | None) -> dict[str, Any]:
        variables = {"t": self.tenant, "since": self.token, "cursor": cursor, "limit": self.limit}
        body = self.http.post(
            "/graphql", json={"query": _CHANGES, "variables": variables}, headers=self.headers
        ).json()
        assert not body.get("errors"), body
        page: dict[str, Any] = body["data"]["changes"]
        return page

    def apply(self, page: dict[str, Any]) -> str | None:
        for item in page["items"]:
            if item["__typename"] == "LeftViewItem":
                self.left.append(item["id"])
            if item["__typename"] in ("DeletedItem", "LeftViewItem"):
                self.held.pop(item["id"], None)
            else:
                self.held[item["id"]] = item["changeToken"]
        self.token = page["changeToken"]
        cursor: str | None = page["cursor"]
        return cursor

    def follow(self, cursor: str | None) -> int:
        """Follows `cursor` to the end of the sync; the requests it took."""
        requests = 0
        while cursor is not None and requests < 50:
            cursor = self.apply(self.request(cursor))
            requests += 1
        assert cursor is None, "the sync did not end within 50 requests"
        return requests

    def sync(self) -> int:
        return 1 + self.follow(self.apply(self.request(None)))


def _setup(gql: GraphQLClient, tenant: str, groups: list[str]) -> Caller:
    """olga (owner), bob (reader, in `groups`), olga's letter shared with kids."""
    olga = Caller(gql, tenant, "olga")
    assert "errors" not in olga.member("olga", "OWNER", []), "the move"
    assert "errors" not in olga.member("bob", "READER", groups)
    olga.person("letter", [], ["kids"])
    return olga


def _public(olga: Caller, id: str) -> None:
    """A record without a visibility: the whole tenant sees it."""
    i = {"tenantID": olga.tenant, "id": id, "person": {"givenName": id}}
    olga.data(CREATE_PERSON, {"i": i})


def _member_token(olga: Caller, sub: str) -> str:
    query = "query($t: ID!, $id: ID!) { member(tenantID: $t, id: $id) { changeToken } }"
    return str(olga.data(query, {"t": olga.tenant, "id": sub})["member"]["changeToken"])


def _raced_sync(device: _Device, proxy: DynamoProxy, olga: Caller, groups: list[str]) -> str:
    """bob's next sync, two items a page, with olga's write of bob's groups committed
    (in-process, straight to DynamoDB Local) while the server holds the sync's first
    Query of the log, after its access read; the Member write's token."""
    hold = proxy.hold(_first_log_read(device.tenant))
    first: dict[str, Any] = {}
    request = threading.Thread(target=lambda: first.update(device.request(None)), daemon=True)
    request.start()
    try:
        assert hold.reached.wait(60), "the sync's first read of the log never came"
        _groups(olga, "bob", groups)
    finally:
        hold.go.set()
    request.join(60)
    assert not request.is_alive() and first, "the first request did not answer"
    assert first["cursor"] is not None, f"the sync took one request: no race: {first}"
    assert "bob" not in {i["id"] for i in first["items"]}
    device.follow(device.apply(first))
    return _member_token(olga, "bob")


def _new_device(http: httpx2.Client, tenant: str) -> _Device:
    device = _Device(http, tenant)
    device.sync()
    return device


@pytest.mark.parametrize("move", ["join", "leave"])
def test_a_group_joined_or_left_between_the_access_read_and_the_first_read_of_a_long_sync(
    server: tuple[str, DynamoProxy], gql: GraphQLClient, tenant: str, move: str
) -> None:
    """bob's device is up to date at S; olga writes five records; bob's sync from S
    (two a page) reads his access (kids: not yet joined, or still in), then olga's
    write moves him into (out of) kids, then the sync reads the log, its bound above
    that write. The sync ends right before the write, the next one re-reads kids and
    passes it, and the device then holds exactly what a new device of bob gets: the
    letter after a join; after a leave, no letter, and a LeftViewItem of it."""
    base, proxy = server
    olga = _setup(gql, tenant, [] if move == "join" else ["kids"])
    with httpx2.Client(base_url=base, timeout=60) as http:
        device = _Device(http, tenant)
        device.sync()
        assert ("letter" in device.held) is (move == "leave")
        for id in PUBLIC:
            _public(olga, id)
        moved = _raced_sync(device, proxy, olga, ["kids"] if move == "join" else [])
        cut = device.token
        requests = device.sync()  # from below the write: re-reads kids, then passes it
        token = device.token
        polled = device.sync()  # a poll: nothing is cut again
        fresh = _new_device(http, tenant)
    if move == "join":
        assert "letter" in device.held, f"joined kids at {moved}; holds {sorted(device.held)}"
    else:
        assert "letter" in device.left, f"left kids at {moved}; sent no LeftViewItem of it"
    assert device.held == fresh.held, (
        f"bob's device holds {sorted(device.held)}, a new device of his {sorted(fresh.held)}"
    )
    assert cut == token_before(moved), f"bob's Member write at {moved}; the sync moved to {cut}"
    assert token is not None and token >= moved and requests < 10, (moved, token, requests)
    assert polled == 1 and device.token == token


# The same interleaving through the service: its first request's viewer read before
# the Member write (as the request's access read was), every later request's after.


def _sync(
    service: SyncService, tenant: str, since: str | None, first: Viewer, later: Viewer
) -> tuple[list[Page], str | None]:
    """A sync from `since`, two items a page: its pages and the device's token."""
    page = service.changes(tenant, since=since, limit=2, sub=first, release=RELEASE)
    pages = [page]
    while page.cursor is not None and len(pages) < 50:
        page = service.changes(tenant, cursor=page.cursor, limit=2, sub=later, release=RELEASE)
        pages.append(page)
    assert page.cursor is None, "the sync did not end within 50 requests"
    return pages, page.change_token or since


def _held(pages: list[Page], held: dict[str, str]) -> dict[str, str]:
    for page in pages:
        for record in page.items:
            if record.deleted or record.left_view:
                held.pop(record.id, None)
            else:
                held[record.id] = record.change_token
    return held


@pytest.mark.parametrize("first_sync", [False, True])
def test_the_sync_after_the_cut_re_reads_the_group_and_passes_the_write(
    settings: Settings, tenant: str, first_sync: bool
) -> None:
    """A first sync (no `since`) or a later one, whose first request's viewer is bob
    before he joined kids, and whose log reads come after: it ends right before the
    join (no cursor), the next sync from there re-reads kids (its first page a
    re-read's) and ends past the join with the letter, and the one after is a poll."""
    family = _Family(tenant, [])
    family.person("letter", KIDS)
    held: dict[str, str] = {}
    since = None
    if not first_sync:
        pages, since = _sync(family.service, tenant, None, family.viewer(), family.viewer())
        _held(pages, held)
    for id in PUBLIC:
        family.person(id, None)
    before = family.viewer()
    joined = family.groups(["kids"])
    pages, cut = _sync(family.service, tenant, since, before, family.viewer())
    _held(pages, held)
    assert len(pages) > 1 and "letter" not in held
    after_cut, token = _sync(family.service, tenant, cut, family.viewer(), family.viewer())
    _held(after_cut, held)
    polls, polled = _sync(family.service, tenant, token, family.viewer(), family.viewer())
    fresh, _ = _sync(family.service, tenant, None, family.viewer(), family.viewer())
    assert "letter" in held and held == _held(fresh, {}), (sorted(held), joined, token)
    assert cut == token_before(joined), (joined, cut)
    assert after_cut[0].regrouped, "the sync after the cut did not re-read kids"
    assert token is not None and token >= joined and len(after_cut) < 10
    assert polled == token and [p.items for p in polls] == [[]]


def test_a_claim_tenants_caller_moved_into_a_group_mid_sync_gets_its_records(
    settings: Settings, tenant: str
) -> None:
    """A claim tenant (no Member record yet) with a record shared with kids: bob's
    sync reads his access (no Member version: his token's claim decides), then o's
    first Member write moves the tenant and the next puts bob in kids, then the sync
    reads the log. Its cursors carry `viewed` below every token, so it ends before
    bob's Member record, and the next sync re-reads kids."""
    service = _service()
    _write(service, _create(tenant, "letter", KIDS), by="o", role="owner")
    for id in PUBLIC:
        _write(service, _create(tenant, id, None), by="o", role="owner")
    before = service.membership.access(tenant, "bob").viewer("bob")
    assert before.token is None  # a claim tenant's caller
    family = _Family(tenant, ["kids"])  # o's Member record, then bob's, in kids
    pages, cut = _sync(family.service, tenant, None, before, family.viewer())
    held = _held(pages, {})
    after_cut, token = _sync(family.service, tenant, cut, family.viewer(), family.viewer())
    _held(after_cut, held)
    fresh, _ = _sync(family.service, tenant, None, family.viewer(), family.viewer())
    assert "letter" in held and held == _held(fresh, {}), (sorted(held), family.bob, cut)
    assert cut == token_before(family.bob) and token is not None and token >= family.bob


def test_a_cursor_carrying_viewed_reads_what_one_without_it_reads(
    settings: Settings, tenant: str
) -> None:
    """The rule costs no read: a page of a sync with streams, asked with its cursor
    (version 3, carrying `viewed`) or with the same position without it (version 2,
    an earlier release's), makes the same DynamoDB calls, of the same read units, and
    returns the same items."""
    family = _Family(tenant, ["kids"])
    family.person("letter", KIDS)
    for id in PUBLIC:
        family.person(id, None)
    viewer = family.viewer()
    page = family.service.changes(tenant, limit=2, sub=viewer, release=RELEASE)
    assert page.cursor is not None
    codec = CursorCodec("x")  # the service's (test_visibility_writes._service)
    position = codec.decode(tenant, page.cursor)
    assert position.streams and position.viewed == viewer.token
    earlier = codec.encode(tenant, dataclasses.replace(position, viewed=None))
    read = []
    for cursor in (page.cursor, earlier):
        with capacity.metered() as meter:
            next_ = family.service.changes(
                tenant, cursor=cursor, limit=2, sub=viewer, release=RELEASE
            )
        read.append((meter.calls, meter.read_units, [r.id for r in next_.items]))
    assert read[0] == read[1] and read[0][0] > 0, read


def test_a_sync_without_streams_writes_the_cursor_the_previous_release_reads(
    settings: Settings, tenant: str
) -> None:
    """Only a sync with streams carries `viewed` (version 3): bob's sync of a tenant
    that never restricted a record gets version 2 cursors, as from the previous
    release; once a record is restricted, his next sync's cursors are version 3."""
    family = _Family(tenant, ["kids"])
    for id in PUBLIC:
        family.person(id, None)
    codec = CursorCodec("x")
    for restricted in (False, True):
        if restricted:
            family.person("letter", KIDS)
        page = family.service.changes(tenant, limit=2, sub=family.viewer(), release=RELEASE)
        assert page.cursor is not None
        version = codec.body(tenant, page.cursor).split(".")[0]
        assert version == ("3" if restricted else "2"), (restricted, version)


def test_a_re_reads_cursor_followed_after_the_retention_is_resync_required_at_once(
    settings: Settings, tenant: str
) -> None:
    """bob joins kids after his device's token S; his sync's re-read of kids goes one
    record a page; its cursor, followed once S is past the retention, is
    RESYNC_REQUIRED on that page, as a page of the sync's log would be (entries of
    kids' stream above S may be gone by TTL), not a page of the re-read; so is the
    re-read's first page of the sync asked again from S."""
    family = _Family(tenant, [])
    for n in range(4):
        family.person(f"k{n}", KIDS)
    since = family.person("p0", None)
    family.groups(["kids"])
    clock = Clock()
    later = short_retention_service(DynamoStore(), clock)
    viewer = family.viewer()
    page = later.changes(tenant, since=since, limit=1, sub=viewer, release=RELEASE)
    assert page.regrouped and page.cursor is not None
    clock.advance(EXPIRED_S)  # S is past the retention and its margin
    with pytest.raises(ResyncRequired):
        page = later.changes(tenant, cursor=page.cursor, limit=1, sub=viewer, release=RELEASE)
        pytest.fail(f"a re-read's page after the retention: {[r.id for r in page.items]}")
    with pytest.raises(ResyncRequired):  # and its first page, the sync asked again from S
        later.changes(tenant, since=since, limit=1, sub=viewer, release=RELEASE)


@pytest.mark.parametrize("steps", [1, None], ids=["being-deleted", "deleted"])
def test_a_re_reads_cursor_of_a_tenant_deleted_since_is_tenant_deleted(
    settings: Settings, tenant: str, steps: int | None
) -> None:
    """bob's sync re-reads kids one record a page; the tenant's deletion begins (one
    step: its head marked, kids' stream still there) or ends, and the re-read's
    cursor is then TENANT_DELETED, as a cursor page of the log is: never a page of
    the group's records of a tenant being deleted, nor an empty page of a gone one."""
    family = _Family(tenant, [])
    for n in range(4):
        family.person(f"k{n}", KIDS)
    since = family.person("p0", None)
    family.groups(["kids"])
    viewer = family.viewer()
    page = family.service.changes(tenant, since=since, limit=1, sub=viewer, release=RELEASE)
    assert page.regrouped and page.cursor is not None
    if steps is None:
        while not family.service.delete_tenant(tenant, tenant, "o", limit=1000).done:
            pass
    else:
        assert not family.service.delete_tenant(tenant, tenant, "o", limit=steps).done
    with pytest.raises(TenantDeleted):
        page = family.service.changes(
            tenant, cursor=page.cursor, limit=1, sub=viewer, release=RELEASE
        )
        pytest.fail(f"a re-read's page of a deleted tenant: {[r.id for r in page.items]}")
