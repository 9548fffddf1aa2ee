"""Who sees what, end to end (contract 3.12, docs/ordering.md "Who sees what"):
devices of two members follow `changes` through the GraphQL API on DynamoDB Local
while records are shared, unshared, made private and tenant-wide; each ends with
exactly its member's view, one of them offline across every change. Then what a
caller outside a record's view gets of it (nothing), what a client of release 2 is
sent, and what a poll costs after changes the member cannot see."""

from __future__ import annotations

from typing import Any

from api.domain.cursor import CursorCodec
from api.domain.mutations import Mutation
from api.domain.visibility import Visibility, sees
from api.graphql.context import RELEASE_HEADER
from api.service import SyncService
from api.settings import Settings
from api.storage import capacity, codecs, keys
from api.storage.store import DynamoStore
from tests.support.family import PERSON
from tests.support.gql import GraphQLClient, bearer
from tests.support.store_state import _query_all

_ITEM = (
    "__typename id changeToken ... on Person { givenName visibility { owner sharedWith } }"
    " ... on DeletedItem { type } ... on LeftViewItem { type }"
)
_CHANGES = (
    "query($t: ID!, $since: ID, $cursor: String, $limit: Int) {"
    " changes(tenantID: $t, since: $since, cursor: $cursor, limit: $limit) {"
    f" items {{ {_ITEM} }} cursor changeToken }} }}"
)
_CREATE = (
    "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id changeToken } } }"
)
_SHARE = (
    f"mutation($i: SetVisibilityInput!) {{ setVisibility(input: $i) {{ item {{ {_ITEM} }} }} }}"
)


class Member:
    def __init__(self, gql: GraphQLClient, tenant: str, sub: str, role: str = "writer") -> None:
        self.gql, self.tenant, self.sub = gql, tenant, sub
        self.headers = bearer([f"{tenant}:{role}"], sub=sub)

    def call(self, query: str, variables: dict[str, Any], release: int | None = 3) -> Any:
        headers = dict(self.headers)
        if release is not None:
            headers[RELEASE_HEADER] = str(release)
        return self.gql.execute(query, variables, headers=headers)

    def data(self, query: str, variables: dict[str, Any]) -> Any:
        body = self.call(query, variables)
        assert not body.get("errors"), body
        return body["data"]

    def create(self, id: str, shared: list[str] | None) -> str:
        vis = None if shared is None else {"sharedWith": shared}
        i = {"tenantID": self.tenant, "id": id, "person": {"givenName": id}, "visibility": vis}
        return str(self.data(_CREATE, {"i": i})["createPerson"]["person"]["changeToken"])

    def share(self, id: str, token: str, shared: list[str] | None) -> str:
        vis = None if shared is None else {"sharedWith": shared}
        i = {"tenantID": self.tenant, "id": id, "changeToken": token, "visibility": vis}
        return str(self.data(_SHARE, {"i": i})["setVisibility"]["item"]["changeToken"])


class Device:
    """A device of a member: what it holds after following `changes` to the end."""

    def __init__(self, member: Member, release: int | None = 3, limit: int = 2) -> None:
        self.member, self.release, self.limit = member, release, limit
        self.held: dict[str, str] = {}  # id -> token
        self.token: str | None = None
        self.seen: set[str] = set()  # the __typenames it was sent

    def sync(self) -> None:
        cursor = None
        while True:
            variables = {"t": self.member.tenant, "since": self.token, "cursor": cursor}
            body = self.member.call(_CHANGES, {**variables, "limit": self.limit}, self.release)
            assert not body.get("errors"), body
            page = body["data"]["changes"]
            for item in page["items"]:
                self.seen.add(item["__typename"])
                if item["__typename"] in ("DeletedItem", "LeftViewItem"):
                    self.held.pop(item["id"], None)
                else:
                    self.held[item["id"]] = item["changeToken"]
            self.token, cursor = page["changeToken"], page["cursor"]
            if cursor is None:
                return


def _view(ddb: Any, settings: Settings, tenant: str, sub: str) -> dict[str, str]:
    """What `sub` sees of the tenant now, from its entity items."""
    raws = _query_all(ddb, settings.table_name, keys.tenant_pk(tenant))
    records = [codecs.record_from_raw(tenant, r) for r in raws if keys.is_entity_sk(r["sk"]["S"])]
    return {r.id: r.change_token for r in records if not r.deleted and sees(r.visibility, sub)}


def test_devices_of_two_members_end_with_exactly_their_view(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    a1, a2, b1, b2 = Device(alice), Device(alice), Device(bob), Device(bob, limit=1)
    tokens = {
        "p1": alice.create("p1", []),  # private
        "p2": alice.create("p2", ["bob"]),  # shared with bob
        "p3": alice.create("p3", None),  # tenant-wide
        "p4": bob.create("p4", []),  # bob's private
    }
    devices = (a1, a2, b1, b2)
    for device in devices:
        device.sync()
    assert set(a1.held) == {"p1", "p2", "p3"} and set(b1.held) == {"p2", "p3", "p4"}
    steps = [
        ("p1", ["bob"]),  # enters bob's view
        ("p2", []),  # leaves it (made private)
        ("p3", []),  # tenant-wide made private: leaves bob's view
        ("p1", None),  # private made tenant-wide
        ("p3", ["bob"]),  # back in bob's view
        ("p2", None),  # tenant-wide again
    ]
    for index, (id, shared) in enumerate(steps):
        tokens[id] = alice.share(id, tokens[id], shared)
        # b2 is offline across every change; the others sync after some of them.
        for device in (a1, b1) if index % 2 else (a2, b1):
            device.sync()
    for device in devices:
        device.sync()
        assert device.held == _view(ddb, settings, tenant, device.member.sub)
    assert b1.held.keys() == {"p1", "p2", "p3", "p4"}
    assert "LeftViewItem" in b1.seen  # left and re-entered, as a sentinel


def test_a_record_outside_the_view_is_nothing_to_the_caller(
    gql: GraphQLClient, tenant: str
) -> None:
    alice, carol = Member(gql, tenant, "alice"), Member(gql, tenant, "carol", role="owner")
    token = alice.create("p1", [])
    assert carol.data(
        'query($t: ID!) { person(tenantID: $t, id: "p1") { id } }', {"t": tenant}
    ) == {"person": None}
    for query, variables in (
        (
            "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) { person { id } } }",
            {"tenantID": tenant, "id": "p1", "changeToken": token, "changes": {"givenName": "x"}},
        ),
        (
            "mutation($i: DeletePersonInput!) { deletePerson(input: $i) { deletedItem { id } } }",
            {"tenantID": tenant, "id": "p1", "changeToken": token},
        ),
        (_SHARE, {"tenantID": tenant, "id": "p1", "changeToken": token, "visibility": None}),
        (_CREATE, {"tenantID": tenant, "id": "p1", "person": {"givenName": "x"}}),
    ):
        body = carol.call(query, {"i": variables})
        (error,) = body["errors"]
        assert error["extensions"]["code"] == "NOT_FOUND", error
        assert "current" not in error["extensions"] and "p1" not in str(body.get("data"))
    # Nothing was written: alice's record is as she left it.
    assert (
        alice.data(
            'query($t: ID!) { person(tenantID: $t, id: "p1") { changeToken } }', {"t": tenant}
        )["person"]["changeToken"]
        == token
    )
    # carol's own sync holds nothing of it.
    device = Device(carol)
    device.sync()
    assert "p1" not in device.held


def test_a_client_of_release_2_gets_a_deletion_for_a_record_that_left_its_view(
    gql: GraphQLClient, tenant: str
) -> None:
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    old, new, undeclared = Device(bob, release=2), Device(bob), Device(bob, release=None)
    token = alice.create("p1", ["bob"])
    for device in (old, new, undeclared):
        device.sync()
        assert "p1" in device.held
    alice.share("p1", token, [])
    for device in (old, new, undeclared):
        device.sync()
        assert "p1" not in device.held
    assert "LeftViewItem" in new.seen
    assert "LeftViewItem" not in old.seen | undeclared.seen
    assert "DeletedItem" in old.seen and "DeletedItem" in undeclared.seen
    # And it may not set a visibility: its creations are tenant-wide.
    body = bob.call(
        _CREATE,
        {"i": {"tenantID": tenant, "person": {"givenName": "x"}, "visibility": {"sharedWith": []}}},
        release=2,
    )
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


def test_a_poll_after_many_changes_the_member_cannot_see_reads_what_an_idle_poll_reads(
    tenant: str,
) -> None:
    service = SyncService(DynamoStore(), CursorCodec("x"))

    def write(mutation: Mutation, by: str) -> str:
        (result,) = service.push(tenant, [mutation], by=by, role="writer")
        assert result.record is not None, result.error
        return result.record.change_token

    private = Visibility("", ())
    write(
        Mutation(
            "create", PERSON, tenant, "seed", None, {}, visibility=private, sets_visibility=True
        ),
        "alice",
    )
    bob_token = service.changes(tenant, sub="bob").change_token

    def poll() -> tuple[int, float, list[Any]]:
        with capacity.metered() as meter:
            page = service.changes(tenant, since=bob_token, sub="bob")
        return meter.calls, meter.read_units, page.items

    idle = poll()
    # 200 changes bob cannot see: alice's private records, created and updated.
    for i in range(100):
        token = write(
            Mutation(
                "create",
                PERSON,
                tenant,
                f"a{i}",
                None,
                {"givenName": "A"},
                visibility=private,
                sets_visibility=True,
            ),
            "alice",
        )
        write(Mutation("update", PERSON, tenant, f"a{i}", token, {"familyName": "B"}), "alice")
    after = poll()
    assert after[2] == [] and idle[2] == []
    # Idle: the log's tail (from the head, nothing to read in a stream); after them:
    # the log's tail (the head alone) and bob's stream (nothing), no more read units.
    assert (idle[0], after[0]) == (1, 2)
    assert after[1] <= idle[1], (after, idle)


_HISTORY = (
    "query($t: ID!, $id: ID!) { history(tenantID: $t, id: $id) {"
    " items { changeToken ... on Person { givenName } } } }"
)


def test_history_holds_only_the_versions_the_caller_saw(gql: GraphQLClient, tenant: str) -> None:
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    carol = Member(gql, tenant, "carol")
    private = alice.create("p1", [])  # bob never saw this version
    shared = alice.share("p1", private, ["bob"])
    tenant_wide = alice.share("p1", shared, None)
    versions = bob.data(_HISTORY, {"t": tenant, "id": "p1"})["history"]["items"]
    assert [v["changeToken"] for v in versions] == [shared]
    mine = alice.data(_HISTORY, {"t": tenant, "id": "p1"})["history"]["items"]
    assert [v["changeToken"] for v in mine] == [shared, private]
    # Made private again: outside carol's view, its history is NOT_FOUND to her.
    assert [
        v["changeToken"]
        for v in carol.data(_HISTORY, {"t": tenant, "id": "p1"})["history"]["items"]
    ] == []
    alice.share("p1", tenant_wide, [])
    body = carol.call(_HISTORY, {"t": tenant, "id": "p1"})
    assert body["errors"][0]["extensions"]["code"] == "NOT_FOUND", body


_PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results {"
    f" status error {{ code }} item {{ {_ITEM} }} }} }} }}"
)


def test_a_push_creates_puts_and_shares_with_visibilities(gql: GraphQLClient, tenant: str) -> None:
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    token = alice.create("p1", None)
    entries = [
        {
            "putPerson": {
                "tenantID": tenant,
                "id": "p2",
                "state": {"person": {"givenName": "x"}, "visibility": {"sharedWith": ["bob"]}},
            }
        },
        {
            "setVisibility": {
                "tenantID": tenant,
                "id": "p1",
                "changeToken": token,
                "visibility": {"sharedWith": []},
                "clientMutationID": "s1",
            }
        },
        {"setVisibility": {"tenantID": tenant, "id": "nope", "changeToken": token}},
    ]
    results = alice.data(_PUSH, {"i": {"tenantID": tenant, "mutations": entries}})
    put, shared, missing = results["pushChanges"]["results"]
    assert put["status"] == "APPLIED"
    assert put["item"]["visibility"] == {"owner": "alice", "sharedWith": ["bob"]}
    assert shared["status"] == "APPLIED"
    assert shared["item"]["visibility"] == {"owner": "alice", "sharedWith": []}
    assert missing["status"] == "REJECTED" and missing["error"]["code"] == "NOT_FOUND"
    # The same share again (its clientMutationID): its first outcome, visibility included.
    again = alice.data(_PUSH, {"i": {"tenantID": tenant, "mutations": [entries[1]]}})
    (replayed,) = again["pushChanges"]["results"]
    assert replayed["item"] == shared["item"]
    device = Device(bob)
    device.sync()
    assert set(device.held) == {"p2"}


def test_a_first_sync_leaves_sentinels_out(gql: GraphQLClient, tenant: str) -> None:
    alice, bob = Member(gql, tenant, "alice"), Member(gql, tenant, "bob")
    token = alice.create("p1", ["bob"])
    alice.share("p1", token, [])  # a sentinel in bob's stream
    wide = alice.create("p2", None)
    alice.share("p2", wide, [])  # a sentinel in the main log
    alice.create("p3", None)  # the head's transaction: both sentinels are settled
    device = Device(bob, limit=1)
    device.sync()
    assert set(device.held) == {"p3"} and device.seen == {"Person"}
