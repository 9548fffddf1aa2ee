"""Adversarial probes of groups (contract 3.12 "Groups", docs/ordering.md "Groups",
Theorem 7): a join or a leave racing a sync, a member leaving and rejoining a group,
a record shared with two groups, a member named and in a group. Each test follows
`changes` to the end as a device does and checks that the device holds exactly
its member's view. Through the service on DynamoDB Local."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from api.domain.membership import Viewer
from api.domain.mutations import Mutation
from api.domain.visibility import Visibility
from api.service.sync_service import SyncService
from api.settings import Settings
from api.storage import keys
from tests.integration.test_groups import UPDATE_PERSON, Caller, _device, _groups
from tests.integration.test_torn_sync import _clients_of, _in_thread, torn_servers  # noqa: F401
from tests.integration.test_visibility_adversarial import _PUSH
from tests.integration.test_visibility_writes import Inject, _create, _service, _write
from tests.support.family import MEMBER as MEMBER_TYPE
from tests.support.family import PERSON as PERSON_TYPE
from tests.support.gql import GraphQLClient
from tests.support.torn import TornEngine

RELEASE = 4  # the family app's groupsSince
KIDS = Visibility.of(None, [], ["kids"])


class _Family:
    """o (owner, in no group) and bob (reader, in `groups`), written through the
    service as another server would."""

    def __init__(self, tenant: str, groups: list[str]) -> None:
        self.service, self.tenant = _service(), tenant
        owner = Mutation("create", MEMBER_TYPE, tenant, "o", None, {"role": "OWNER", "groups": []})
        _write(self.service, owner, by="o", role="owner")
        fields = {"role": "READER", "groups": groups}
        self.bob = self._member(Mutation("create", MEMBER_TYPE, tenant, "bob", None, fields))

    def _member(self, mutation: Mutation) -> str:
        (result,) = self.service.push(self.tenant, [mutation], by="o", role="owner", moved=True)
        assert result.error is None and result.record is not None, result.error
        return result.record.change_token

    def groups(self, groups: list[str]) -> str:
        """o moves bob into exactly `groups`; the Member write's token."""
        update = Mutation("update", MEMBER_TYPE, self.tenant, "bob", self.bob, {"groups": groups})
        self.bob = self._member(update)
        return self.bob

    def viewer(self) -> Viewer:
        """bob as a request's access read finds him now."""
        return self.service.membership.access(self.tenant, "bob").viewer("bob")

    def person(self, id: str, visibility: Visibility | None) -> str:
        return _write(self.service, _create(self.tenant, id, visibility), by="o").change_token


class _Device:
    """A device of bob: what it holds after following `changes` to the end."""

    def __init__(self, service: SyncService, tenant: str, limit: int = 100) -> None:
        self.service, self.tenant, self.limit = service, tenant, limit
        self.held: dict[str, str] = {}
        self.token: str | None = None
        self.left: list[str] = []  # the ids it was sent a LeftViewItem for

    def sync(self, viewer: Viewer) -> None:
        page = self.service.changes(
            self.tenant, since=self.token, limit=self.limit, sub=viewer, release=RELEASE
        )
        self._apply(page.items)
        while page.cursor is not None:
            page = self.service.changes(
                self.tenant, cursor=page.cursor, limit=self.limit, sub=viewer, release=RELEASE
            )
            self._apply(page.items)
        self.token = page.change_token or self.token

    def _apply(self, items: list[Any]) -> None:
        for record in items:
            if record.left_view:
                self.left.append(record.id)
            if record.deleted or record.left_view:
                self.held.pop(record.id, None)
            else:
                self.held[record.id] = record.change_token

    def people(self) -> set[str]:
        return set(self.held) - {"o", "bob"}


def _race(tenant: str, inject: Inject, write: Any) -> list[str]:
    """Run `write` (another server's) once, right before the first Query of the
    tenant's log partition that follows (a sync's first read, after its access read)."""
    raced: list[str] = []

    def hook(params: dict[str, Any], **_: Any) -> None:
        values = params.get("ExpressionAttributeValues", {}).values()
        if raced or {"S": keys.log_pk(tenant)} not in values:
            return
        raced.append("yes")
        write()

    inject("provide-client-params.dynamodb.Query", hook)
    return raced


def test_a_join_committed_between_the_access_read_and_the_first_read_is_not_missed(
    settings: Settings, tenant: str, inject: Inject
) -> None:
    """bob's sync reads his access item (in no group), then another server's write
    moves him into kids, then the sync's first read finds the head at or above that
    write: the device's token passes the join, so no later sync re-reads kids (its
    `gt` is not above `since`). p1, shared with kids before the join, must still
    reach bob's device."""
    family = _Family(tenant, [])
    family.person("p1", KIDS)
    device = _Device(family.service, tenant)
    device.sync(family.viewer())
    assert device.people() == set()
    stale = family.viewer()  # the request's access read: bob in no group
    joined: list[str] = []
    raced = _race(tenant, inject, lambda: joined.append(family.groups(["kids"])))
    device.sync(stale)
    assert raced and device.token is not None
    for _ in range(2):  # his next syncs, with the access read seeing the join
        device.sync(family.viewer())
    assert family.viewer().groups == ("kids",)
    assert device.people() == {"p1"}, (
        f"bob joined kids at {joined[0]}, his device's token is {device.token}, "
        f"and it holds {sorted(device.people())}"
    )


def test_a_leave_committed_between_the_access_read_and_the_first_read_is_not_missed(
    settings: Settings, tenant: str, inject: Inject
) -> None:
    """The mirror: bob's access read finds him in kids, then he is moved out, then the
    sync's first read passes the leave. p1 (shared with kids alone) must leave his
    device at a later sync: a device that keeps it leaks a record its member no
    longer sees, for good."""
    family = _Family(tenant, ["kids"])
    family.person("p1", KIDS)
    device = _Device(family.service, tenant)
    device.sync(family.viewer())
    assert device.people() == {"p1"}
    stale = family.viewer()
    left: list[str] = []
    raced = _race(tenant, inject, lambda: left.append(family.groups([])))
    device.sync(stale)
    assert raced
    for _ in range(2):
        device.sync(family.viewer())
    assert family.viewer().groups == ()
    assert device.people() == set(), (
        f"bob left kids at {left[0]}, his device's token is {device.token}, "
        f"and it still holds {sorted(device.people())}"
    )


@pytest.mark.parametrize("limit", [1, 3, 100])
@pytest.mark.parametrize("how", ["deleted", "made private"])
def test_a_record_gone_while_its_member_was_out_of_the_group_leaves_its_device(
    settings: Settings, tenant: str, how: str, limit: int
) -> None:
    """bob's device holds p1 (kids). bob leaves kids, p1 is deleted (or made private
    to o), bob rejoins kids; his device, offline throughout, syncs from its token
    of before the leave. The access item keeps kids' latest change only (the
    rejoin), and the re-read leaves out the sentinels and deletions below it as
    "never seen through the group": but this device saw p1 through it."""
    family = _Family(tenant, ["kids"])
    token = family.person("p1", KIDS)
    family.person("p2", KIDS)
    device = _Device(family.service, tenant, limit)
    device.sync(family.viewer())
    assert device.people() == {"p1", "p2"}
    family.groups([])
    if how == "deleted":
        gone = Mutation("delete", PERSON_TYPE, tenant, "p1", token, {})
    else:
        gone = Mutation(
            "share",
            PERSON_TYPE,
            tenant,
            "p1",
            token,
            {},
            visibility=Visibility.of("o", []),
            sets_visibility=True,
        )
    _write(family.service, gone, by="o", role="owner")
    family.groups(["kids"])
    device.sync(family.viewer())
    device.sync(family.viewer())
    assert device.people() == {"p2"}, (
        f"p1 was {how} while bob was out of kids; his device still holds it: {device.held}"
    )


def test_a_record_shared_with_two_groups_stays_when_its_member_leaves_one(
    settings: Settings,
    tenant: str,
) -> None:
    """bob is in kids and teens; p1 is shared with both, p2 with kids alone, p3 with
    kids and named bob. He leaves kids: p2 leaves his device, p1 and p3 stay, and no
    LeftViewItem names them (a device that drops and re-fetches would flicker)."""
    family = _Family(tenant, ["kids", "teens"])
    family.person("p1", Visibility.of(None, [], ["kids", "teens"]))
    family.person("p2", KIDS)
    family.person("p3", Visibility.of(None, ["bob"], ["kids"]))
    for limit in (1, 2, 100):
        device = _Device(family.service, tenant, limit)
        device.sync(family.viewer())
        assert device.people() == {"p1", "p2", "p3"}
        devices = getattr(family, "devices", [])
        devices.append(device)
        family.devices = devices  # type: ignore[attr-defined]
    family.groups(["teens"])
    for device in family.devices:  # type: ignore[attr-defined]
        device.sync(family.viewer())
        assert device.people() == {"p1", "p3"}, (device.limit, device.held)
        assert set(device.left) == {"p2"}, (device.limit, device.left)


def test_several_groups_joined_and_left_in_one_sync_and_a_record_moved_between_them(
    settings: Settings,
    tenant: str,
) -> None:
    """bob is in a and b; p1 is in a, p2 in b, p3 in c. While his device is offline
    he moves to b and c, p1 moves from a to c, and p2 from b to a. At limits 1..4 and
    100, his device ends with exactly p1 and p3."""
    family = _Family(tenant, ["a", "b"])
    t1 = family.person("p1", Visibility.of(None, [], ["a"]))
    t2 = family.person("p2", Visibility.of(None, [], ["b"]))
    family.person("p3", Visibility.of(None, [], ["c"]))
    devices = [_Device(family.service, tenant, limit) for limit in (1, 2, 3, 4, 100)]
    for device in devices:
        device.sync(family.viewer())
        assert device.people() == {"p1", "p2"}
    family.groups(["b", "c"])
    for id, token, group in (("p1", t1, "c"), ("p2", t2, "a")):
        move = Mutation(
            "share",
            PERSON_TYPE,
            tenant,
            id,
            token,
            {},
            visibility=Visibility.of(None, [], [group]),
            sets_visibility=True,
        )
        _write(family.service, move, by="o", role="owner")
    for device in devices:
        device.sync(family.viewer())
        assert device.people() == {"p1", "p3"}, (device.limit, device.held)


def test_a_member_removed_and_re_added_in_no_group_loses_the_groups_records(
    settings: Settings, tenant: str
) -> None:
    """bob (in kids) holds p1 on his device; o sets his role REMOVED, then makes him a
    reader again in no group (a Member id is never re-created once deleted: this is
    the way back). His device, offline throughout, syncs from its token of before:
    it lets go of p1."""
    family = _Family(tenant, ["kids"])
    family.person("p1", KIDS)
    device = _Device(family.service, tenant)
    device.sync(family.viewer())
    assert device.people() == {"p1"}
    removed = Mutation("update", MEMBER_TYPE, tenant, "bob", family.bob, {"role": "REMOVED"})
    family.bob = family._member(removed)
    back = Mutation(
        "update", MEMBER_TYPE, tenant, "bob", family.bob, {"role": "READER", "groups": []}
    )
    family.bob = family._member(back)
    assert family.viewer().groups == ()
    device.sync(family.viewer())
    assert device.people() == set(), f"bob re-added in no group; his device holds {device.held}"


def test_a_re_read_page_reads_a_bounded_number_of_queries(
    settings: Settings, tenant: str, inject: Inject
) -> None:
    """bob's device syncs (in no group); then 60 records are shared with kids and bob
    joins kids. His next sync re-reads kids' stream: every entry is above `since`, so
    the re-read sends none of them (the pages of `(since, B]` do). At a limit of 1 the
    re-read's loop reads on, a Query of one entry at a time, until it has something to
    send or the stream ends: the request's reads grow with the group's stream, not
    with its page (a group with 10,000 entries in the retention: 10,000 Queries in one
    request, past any Lambda's timeout, and the next request starts over)."""
    family = _Family(tenant, [])
    device = _Device(family.service, tenant, limit=1)
    device.sync(family.viewer())
    for i in range(60):
        family.person(f"p{i}", KIDS)
    family.groups(["kids"])
    kids = {"S": keys.stream_pk(tenant, "g:kids")}
    queries: list[int] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        if kids in params.get("ExpressionAttributeValues", {}).values():
            queries.append(int(params.get("Limit", 0)))

    inject("provide-client-params.dynamodb.Query", count)
    page = family.service.changes(
        tenant, since=device.token, limit=1, sub=family.viewer(), release=RELEASE
    )
    assert len(page.items) <= 1
    assert len(queries) <= 4, (
        f"one request at limit 1 made {len(queries)} Queries of kids' stream "
        f"(Limits {sorted(set(queries))})"
    )


@pytest.mark.parametrize("limit", [1, 100])
def test_a_group_joined_and_left_while_offline_sends_nothing_of_it(
    settings: Settings, tenant: str, limit: int
) -> None:
    """bob (in no group) syncs; p1 is shared with kids; bob joins kids and leaves it
    again while his device is offline. The device never held p1 and bob is out of
    kids: its next sync sends nothing of p1, not even a LeftViewItem (its id)."""
    family = _Family(tenant, [])
    family.person("p1", KIDS)
    device = _Device(family.service, tenant, limit)
    device.sync(family.viewer())
    assert device.people() == set()
    family.groups(["kids"])
    family.groups([])
    device.sync(family.viewer())
    assert device.people() == set() and "p1" not in device.left, device.left


@pytest.fixture(scope="module")
def torn_clients(torn_servers: list[str]) -> Iterator[list[GraphQLClient]]:  # noqa: F811
    """Two API servers in front of the torn-commit engine (tests/support/torn.py)."""
    yield from _clients_of(torn_servers)


def test_a_group_records_update_half_applied_is_not_synced_past(
    torn_clients: list[GraphQLClient], tenant: str, torn: TornEngine
) -> None:
    """AWS applies a transaction's items one by one as readers see them (what DynamoDB
    Local hides; the torn engine shows it): p1's update, shared with kids, has its
    head and log entry applied and its entry in kids' stream held. bob's device (in
    kids) must not sync past it, then gets it once it is applied."""
    writer, reader = torn_clients
    olga = Caller(writer, tenant, "olga")
    assert "errors" not in olga.member("olga", "OWNER", []), "the move"
    assert "errors" not in olga.member("bob", "READER", ["kids"])
    token = olga.person("p1", [], ["kids"])
    device = _torn_device(Caller(reader, tenant, "bob"))
    device.sync()
    assert device.held.get("p1") == token and device.token is not None
    before = device.token
    kids = keys.stream_pk(tenant, "g:kids")
    update = {"tenantID": tenant, "id": "p1", "changeToken": token, "changes": {"givenName": "x"}}
    with torn.hold(lambda a: a.kind == "Put" and a.key_attributes["pk"]["S"] == kids) as hold:
        thread, written = _in_thread(lambda: olga.data(UPDATE_PERSON, {"i": update}))
        assert hold.reached.wait(10)  # the head and the log's entry are applied
        for _ in range(2):
            device.sync()
            assert device.token == before, "bob's device synced past a half-applied write"
        hold.release()
        thread.join(30)
    device.sync()
    assert device.held["p1"] == written[0]["updatePerson"]["person"]["changeToken"]


def _torn_device(caller: Caller) -> Any:
    return _device(caller, limit=2)


def test_a_resend_after_its_member_left_the_group_replays_nothing(
    gql: GraphQLClient, tenant: str
) -> None:
    """bob (in kids) updates p1 (kids) with a clientMutationID; carol (in no group)
    resends his entry; bob is moved out of kids and resends it (the first answer
    lost). Neither replay may carry p1: both are REJECTED NOT_FOUND, no item."""
    olga = Caller(gql, tenant, "olga")
    assert "errors" not in olga.member("olga", "OWNER", []), "the move"
    assert "errors" not in olga.member("bob", "WRITER", ["kids"])
    assert "errors" not in olga.member("carol", "WRITER", [])
    bob, carol = Caller(gql, tenant, "bob"), Caller(gql, tenant, "carol")
    token = olga.person("p1", [], ["kids"])
    changes = {"givenName": "by bob"}
    update: dict[str, Any] = {"tenantID": tenant, "id": "p1", "changeToken": token}
    update |= {"changes": changes, "clientMutationID": "cmid-bob-kids"}
    entry = {"updatePerson": update}
    push = {"i": {"tenantID": tenant, "mutations": [entry]}}
    (first,) = bob.data(_PUSH, push)["pushChanges"]["results"]
    assert first["status"] == "APPLIED", first
    (theirs,) = carol.data(_PUSH, push)["pushChanges"]["results"]
    assert theirs["item"] is None and theirs["status"] == "REJECTED", theirs
    _groups(olga, "bob", [])
    (again,) = bob.data(_PUSH, push)["pushChanges"]["results"]
    assert again["item"] is None and again["status"] == "REJECTED", again
    assert again["error"]["code"] == "NOT_FOUND", again
