"""Groups (contract 3.12 "Groups", 6 "Groups"): a record shared with a group of the
tenant is seen by the members whose Member record lists it, on every path, and by
no one else; moved out of the group, a member no longer sees it at its next
request. Through the GraphQL API on DynamoDB Local."""

from __future__ import annotations

from typing import Any

import pytest

from api.domain.membership import MAX_MEMBER_GROUPS, Viewer
from api.domain.mutations import Mutation
from api.domain.visibility import Visibility
from api.graphql.context import RELEASE_HEADER
from api.settings import Settings
from api.storage import capacity, keys
from tests.integration.test_visibility_sync import _CHANGES, Device
from tests.integration.test_visibility_sync import Member as Syncer
from tests.integration.test_visibility_writes import Inject, _create, _service, _write
from tests.support.family import MEMBER as MEMBER_TYPE
from tests.support.family import PERSON as PERSON_TYPE
from tests.support.gql import GraphQLClient, bearer
from tests.support.store_state import _query_all

RELEASE = 4  # the family app's groupsSince
MEMBER = "id changeToken role groups"
CREATE_MEMBER = (
    f"mutation($i: CreateMemberInput!) {{ createMember(input: $i) {{ member {{ {MEMBER} }} }} }}"
)
UPDATE_MEMBER = (
    f"mutation($i: UpdateMemberInput!) {{ updateMember(input: $i) {{ member {{ {MEMBER} }} }} }}"
)
CREATE_PERSON = (
    "mutation($i: CreatePersonInput!) { createPerson(input: $i) "
    "{ person { id changeToken visibility { owner sharedWith groups } } } }"
)
UPDATE_PERSON = (
    "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) { person { id changeToken } } }"
)
PERSON = "query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { id givenName } }"
HISTORY = "query($t: ID!, $id: ID!) { history(tenantID: $t, id: $id) { items { changeToken } } }"
CATCH_UP = (
    "query($t: ID!, $u: ID!) { catchUp(tenantID: $t, upTo: $u, types: [PERSON], limit: 1000) "
    "{ items { id } } }"
)


class Caller:
    """One member's device, declaring the release that knows groups."""

    def __init__(self, gql: GraphQLClient, tenant: str, sub: str) -> None:
        self.gql, self.tenant, self.sub = gql, tenant, sub
        self.headers = {**bearer([tenant], sub=sub), RELEASE_HEADER: str(RELEASE)}

    def run(self, query: str, variables: dict[str, Any]) -> Any:
        return self.gql.execute(query, variables, headers=self.headers)

    def data(self, query: str, variables: dict[str, Any]) -> Any:
        body = self.run(query, variables)
        assert "errors" not in body, body
        return body["data"]

    def code(self, query: str, variables: dict[str, Any]) -> str:
        body = self.run(query, variables)
        (error,) = body["errors"]
        return str(error["extensions"]["code"])

    def member(self, sub: str, role: str, groups: list[str]) -> Any:
        fields = {"role": role, "groups": groups}
        return self.run(
            CREATE_MEMBER, {"i": {"tenantID": self.tenant, "id": sub, "member": fields}}
        )

    def person(self, id: str, shared: list[str], groups: list[str]) -> str:
        i = {
            "tenantID": self.tenant,
            "id": id,
            "person": {"givenName": id},
            "visibility": {"sharedWith": shared, "groups": groups},
        }
        return str(self.data(CREATE_PERSON, {"i": i})["createPerson"]["person"]["changeToken"])

    def read(self, id: str) -> Any:
        return self.data(PERSON, {"t": self.tenant, "id": id})["person"]


def _family(gql: GraphQLClient, tenant: str) -> tuple[Caller, Caller, Caller, str]:
    """olga (owner), bob (writer, in group kids) and carol (writer, in no group);
    the token of bob's Member record."""
    olga = Caller(gql, tenant, "olga")
    assert "errors" not in olga.member("olga", "OWNER", []), "the move"
    bob = olga.member("bob", "WRITER", ["kids"])
    assert "errors" not in bob, bob
    assert "errors" not in olga.member("carol", "WRITER", [])
    token = bob["data"]["createMember"]["member"]["changeToken"]
    return olga, Caller(gql, tenant, "bob"), Caller(gql, tenant, "carol"), token


def _device(caller: Caller, limit: int = 2) -> Device:
    syncer = Syncer(caller.gql, caller.tenant, caller.sub, role="owner")
    syncer.headers = bearer([caller.tenant], sub=caller.sub)
    return Device(syncer, release=RELEASE, limit=limit)


def _groups(olga: Caller, sub: str, groups: list[str]) -> None:
    """olga moves `sub` into exactly `groups`."""
    query = "query($t: ID!, $id: ID!) { member(tenantID: $t, id: $id) { changeToken } }"
    token = olga.data(query, {"t": olga.tenant, "id": sub})["member"]["changeToken"]
    changes = {
        "tenantID": olga.tenant,
        "id": sub,
        "changeToken": token,
        "changes": {"groups": groups},
    }
    olga.data(UPDATE_MEMBER, {"i": changes})


def test_a_record_shared_with_a_group_is_seen_by_its_members_only(
    gql: GraphQLClient, tenant: str
) -> None:
    olga, bob, carol, _ = _family(gql, tenant)
    token = olga.person("p1", [], ["kids"])
    olga.person("p2", [], [])  # olga's private record
    bobs, carols = _device(bob), _device(carol)
    for device in (bobs, carols):
        device.sync()
    assert set(bobs.held) == {"p1"} | {"olga", "bob", "carol"}
    assert "p1" not in carols.held and "p2" not in carols.held | bobs.held
    assert bob.read("p1") == {"id": "p1", "givenName": "p1"}
    assert carol.read("p1") is None
    assert carol.code(HISTORY, {"t": tenant, "id": "p1"}) == "NOT_FOUND"
    assert {i["id"] for i in bob.data(CATCH_UP, {"t": tenant, "u": token})["catchUp"]["items"]} >= {
        "p1"
    }
    assert "p1" not in {
        i["id"] for i in carol.data(CATCH_UP, {"t": tenant, "u": token})["catchUp"]["items"]
    }
    update = {"tenantID": tenant, "id": "p1", "changeToken": token, "changes": {"givenName": "x"}}
    assert carol.code(UPDATE_PERSON, {"i": update}) == "NOT_FOUND"
    # bob, in the group, writes it; a stale token is a CONFLICT carrying what he sees.
    written = bob.data(UPDATE_PERSON, {"i": update})["updatePerson"]["person"]["changeToken"]
    body = bob.run(UPDATE_PERSON, {"i": update})
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "CONFLICT"
    assert error["extensions"]["current"]["changeToken"] == written
    # carol's stale write of it is NOT_FOUND, without the version.
    body = carol.run(UPDATE_PERSON, {"i": update})
    assert body["errors"][0]["extensions"]["code"] == "NOT_FOUND"
    assert "current" not in body["errors"][0]["extensions"]
    assert olga.read("p1")["givenName"] == "x"
    # Its history: the earlier version to bob, nothing to carol.
    history = bob.data(HISTORY, {"t": tenant, "id": "p1"})["history"]["items"]
    assert [v["changeToken"] for v in history] == [token]
    assert carol.code(HISTORY, {"t": tenant, "id": "p1"}) == "NOT_FOUND"


def test_a_member_moved_out_of_the_group_sees_none_of_its_records_at_its_next_request(
    gql: GraphQLClient, tenant: str
) -> None:
    olga, bob, carol, bobs_token = _family(gql, tenant)
    token = olga.person("p1", [], ["kids"])
    assert bob.read("p1") is not None
    moved = olga.data(
        UPDATE_MEMBER,
        {
            "i": {
                "tenantID": tenant,
                "id": "bob",
                "changeToken": bobs_token,
                "changes": {"groups": []},
            }
        },
    )
    assert moved["updateMember"]["member"]["groups"] == []
    assert bob.read("p1") is None
    assert bob.code(HISTORY, {"t": tenant, "id": "p1"}) == "NOT_FOUND"
    update = {"tenantID": tenant, "id": "p1", "changeToken": token, "changes": {"givenName": "x"}}
    assert bob.code(UPDATE_PERSON, {"i": update}) == "NOT_FOUND"
    fresh = _device(bob)
    fresh.sync()
    assert "p1" not in fresh.held
    # And moved into it, carol sees it at her next request.
    carols = carol.data(PERSON, {"t": tenant, "id": "carol"})  # not a person: null
    assert carols["person"] is None
    members = olga.data(
        'query($t: ID!) { member(tenantID: $t, id: "carol") { changeToken } }', {"t": tenant}
    )
    olga.data(
        UPDATE_MEMBER,
        {
            "i": {
                "tenantID": tenant,
                "id": "carol",
                "changeToken": members["member"]["changeToken"],
                "changes": {"groups": ["kids"]},
            }
        },
    )
    assert carol.read("p1") == {"id": "p1", "givenName": "p1"}


def test_groups_are_member_data_within_bounds(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    olga, _, _, _ = _family(gql, tenant)
    access = {
        i["sk"]["S"]: [g["S"] for g in i.get("gr", {}).get("L", [])]
        for i in _query_all(ddb, settings.table_name, keys.members_pk(tenant))
    }
    assert access[keys.member_sk("bob")] == ["kids"]
    # Past a member's bound, or a name that is not an id's: refused, nothing written.
    too_many = [f"g{n}" for n in range(MAX_MEMBER_GROUPS + 1)]
    for groups in (too_many, ["not a name"]):
        body = olga.member("dave", "WRITER", groups)
        assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", body
        assert "Member.groups" in body["errors"][0]["message"]
        assert olga.data(
            'query($t: ID!) { member(tenantID: $t, id: "dave") { id } }', {"t": tenant}
        ) == {"member": None}
    # A record's audience: at most 20 members and groups together.
    i = {
        "tenantID": tenant,
        "person": {"givenName": "x"},
        "visibility": {
            "sharedWith": [f"m{n}" for n in range(15)],
            "groups": [f"g{n}" for n in range(6)],
        },
    }
    assert olga.code(CREATE_PERSON, {"i": i}) == "BAD_USER_INPUT"


@pytest.mark.parametrize("release", [3])
def test_a_client_before_groups_may_not_name_them(
    gql: GraphQLClient, tenant: str, release: int
) -> None:
    olga, _, _, _ = _family(gql, tenant)
    olga.headers[RELEASE_HEADER] = str(release)
    i = {"tenantID": tenant, "person": {"givenName": "x"}, "visibility": {"groups": ["kids"]}}
    body = olga.run(CREATE_PERSON.replace(" groups }", " }"), {"i": i})
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", body
    assert "catalog release 4" in body["errors"][0]["message"]


@pytest.mark.parametrize("limit", [1, 3, 100])
def test_devices_of_members_moved_into_and_out_of_a_group_get_what_entered_and_left(
    gql: GraphQLClient, tenant: str, limit: int
) -> None:
    olga, bob, carol, _ = _family(gql, tenant)
    olga.person("p1", [], ["kids"])
    olga.person("p2", [], ["kids"])
    olga.person("p3", ["bob"], ["kids"])  # bob sees it as named too
    olga.person("p4", [], [])
    bobs, carols = _device(bob, limit), _device(carol, limit)
    offline = _device(bob, limit)  # syncs once before, once after every change
    for device in (bobs, carols, offline):
        device.sync()
    kids = {"p1", "p2", "p3"}
    assert kids <= set(bobs.held) and not kids & set(carols.held)
    # carol joins kids, bob leaves it; then a record is shared with kids anew.
    _groups(olga, "carol", ["kids"])
    carols.sync()
    assert kids <= set(carols.held), carols.held
    _groups(olga, "bob", [])
    olga.person("p5", [], ["kids"])
    for device in (bobs, carols, offline):
        device.sync()
    assert {"p1", "p2", "p5"}.isdisjoint(bobs.held) and "p3" in bobs.held
    assert bobs.held == offline.held
    assert "LeftViewItem" in bobs.seen
    assert kids | {"p5"} <= set(carols.held) and "p4" not in carols.held
    # A member with no change of groups since re-reads nothing: same as before.
    again = dict(carols.held)
    carols.sync()
    assert carols.held == again


def test_a_record_shared_with_a_group_costs_what_one_shared_with_one_member_does(
    settings: Settings, tenant: str, inject: Inject
) -> None:
    """Write units by AWS's rules (2 per item of a transaction under 1 KB, as in
    test_visibility_writes): a create, an update by another server, and the next
    server's create, of a record shared with one member, then with a group of n
    members (n = 1, 5, 20): the group is one stream entry whatever n."""
    sizes: list[int] = []
    inject(
        "provide-client-params.dynamodb.TransactWriteItems",
        lambda params, **_: sizes.append(len(params["TransactItems"])),
    )

    def units(name: str, visibility: Visibility, n: int) -> tuple[int, int, int]:
        t = f"{tenant}-{name}"
        owner = Mutation("create", MEMBER_TYPE, t, "o", None, {"role": "OWNER", "groups": []})
        _write(_service(), owner, by="o", role="owner")
        fields = {"role": "READER", "groups": ["kids"]}
        members = [Mutation("create", MEMBER_TYPE, t, f"m{i}", None, fields) for i in range(n)]
        results = _service().push(t, members, by="o", role="owner", moved=True)
        assert all(r.error is None for r in results), results
        # (A write after the members', whose transaction the measured one checks.)
        _write(_service(), _create(t, "p0", None), by="o")
        v1 = _write(_service(), _create(t, "p1", visibility), by="o")
        created = 2 * sizes[-1]
        update = Mutation("update", PERSON_TYPE, t, "p1", v1.change_token, {"familyName": "L"})
        _write(_service(), update, by="o")
        updated = 2 * sizes[-1]
        _write(_service(), _create(t, "p2", None), by="o")
        return created, updated, 2 * sizes[-1]

    member = units("member", Visibility.of(None, ["m0"]), 1)
    group = {n: units(f"g{n}", Visibility.of(None, [], ["kids"]), n) for n in (1, 5, 20)}
    print("write units (create, update, next server's create):", member, group)
    for n, written in group.items():
        assert written == member, (n, written, member)


def test_a_poll_after_changes_in_another_group_reads_what_an_idle_poll_reads(
    settings: Settings, tenant: str
) -> None:
    """bob is in kids; 100 records of group adults are created and updated: his poll
    reads the log's tail, his stream and kids' (each empty), no more read units than
    his poll from the head before them, which reads the log's tail alone."""
    service = _service()
    owner = Mutation("create", MEMBER_TYPE, tenant, "o", None, {"role": "OWNER", "groups": []})
    _write(service, owner, by="o", role="owner")
    bob = Mutation(
        "create", MEMBER_TYPE, tenant, "bob", None, {"role": "READER", "groups": ["kids"]}
    )
    (result,) = service.push(tenant, [bob], by="o", role="owner", moved=True)
    assert result.error is None, result.error
    adults = Visibility.of(None, [], ["adults"])
    _write(service, _create(tenant, "seed", adults), by="o")
    # bob as his requests' access read finds him (in kids; his Member record's token).
    viewer = service.membership.access(tenant, "bob").viewer("bob")
    assert result.record is not None and viewer.groups == ("kids",)
    assert viewer.token == result.record.change_token
    bob_token = service.changes(tenant, sub=viewer).change_token

    def poll() -> tuple[int, float, list[Any]]:
        with capacity.metered() as meter:
            page = service.changes(tenant, since=bob_token, sub=viewer)
        return meter.calls, meter.read_units, page.items

    idle = poll()
    for i in range(100):
        created = _write(service, _create(tenant, f"a{i}", adults), by="o")
        update = Mutation(
            "update", PERSON_TYPE, tenant, f"a{i}", created.change_token, {"familyName": "B"}
        )
        _write(service, update, by="o")
    after = poll()
    assert after[2] == [] and idle[2] == []
    print("poll (calls, read units): idle", idle[:2], "after 200 changes of adults", after[:2])
    assert (idle[0], after[0]) == (1, 3)
    assert after[1] <= idle[1], (after, idle)


def test_a_write_that_takes_a_record_out_of_the_group_during_the_re_read_is_not_missed(
    settings: Settings, tenant: str, inject: Inject
) -> None:
    """bob left kids; his device's next sync re-reads kids' stream up to its bound.
    Right before that Query, another server's write (above the bound) makes the
    kids record private to o: it supersedes the record's entry in kids' stream and
    puts its sentinel there above the bound, and bob does not read kids' stream
    any more. The entry, superseded rather than removed, is still read: bob's device
    is sent a LeftViewItem for it (docs/ordering.md, Theorem 7)."""
    service = _service()
    owner = Mutation("create", MEMBER_TYPE, tenant, "o", None, {"role": "OWNER", "groups": []})
    _write(service, owner, by="o", role="owner")
    fields = {"role": "READER", "groups": ["kids"]}
    bob = Mutation("create", MEMBER_TYPE, tenant, "bob", None, fields)
    (joined,) = service.push(tenant, [bob], by="o", role="owner", moved=True)
    assert joined.record is not None
    record = _write(service, _create(tenant, "p1", Visibility.of(None, [], ["kids"])), by="o")
    first = service.changes(tenant, sub=service.membership.access(tenant, "bob").viewer("bob"))
    assert "p1" in {r.id for r in first.items} and first.cursor is None
    left = Mutation(
        "update", MEMBER_TYPE, tenant, "bob", joined.record.change_token, {"groups": []}
    )
    (moved,) = service.push(tenant, [left], by="o", role="owner", moved=True)
    assert moved.error is None, moved.error
    viewer = service.membership.access(tenant, "bob").viewer("bob")
    # Every join and leave of kids within the retention: his creation in it, the leave.
    assert moved.record is not None
    assert viewer.changed == {"kids": f"{joined.record.change_token} {moved.record.change_token}"}
    kids = keys.stream_pk(tenant, "g:kids")
    raced: list[str] = []

    def race(params: dict[str, Any], **_: Any) -> None:
        values = params.get("ExpressionAttributeValues", {}).values()
        if raced or {"S": kids} not in values:
            return
        raced.append("yes")
        private = Mutation(
            "share",
            PERSON_TYPE,
            tenant,
            "p1",
            record.change_token,
            {},
            visibility=Visibility.of("o", []),
            sets_visibility=True,
        )
        _write(_service(), private, by="o", role="owner")

    inject("provide-client-params.dynamodb.Query", race)
    items: list[Any] = []
    page = service.changes(tenant, since=first.change_token, sub=viewer, release=RELEASE)
    items += page.items
    while page.cursor is not None:
        page = service.changes(tenant, cursor=page.cursor, sub=viewer, release=RELEASE)
        items += page.items
    assert raced
    assert [(r.id, r.left_view) for r in items if r.id == "p1"] == [("p1", True)], [
        (r.id, r.change_token, r.visibility, r.left_view, r.superseded) for r in items
    ]


def test_a_sync_of_chosen_types_after_a_join_gets_the_groups_records_page_by_page(
    settings: Settings, tenant: str
) -> None:
    service = _service()
    owner = Mutation("create", MEMBER_TYPE, tenant, "o", None, {"role": "OWNER", "groups": []})
    _write(service, owner, by="o", role="owner")
    fields = {"role": "READER", "groups": []}
    (bob,) = service.push(
        tenant,
        [Mutation("create", MEMBER_TYPE, tenant, "bob", None, fields)],
        by="o",
        role="owner",
        moved=True,
    )
    assert bob.record is not None
    kids = Visibility.of(None, [], ["kids"])
    ids = [_write(service, _create(tenant, f"p{i}", kids), by="o").id for i in range(5)]
    since = service.changes(tenant, sub=Viewer("bob")).change_token
    join = Mutation(
        "update", MEMBER_TYPE, tenant, "bob", bob.record.change_token, {"groups": ["kids"]}
    )
    (joined,) = service.push(tenant, [join], by="o", role="owner", moved=True)
    assert joined.error is None, joined.error
    viewer = service.membership.access(tenant, "bob").viewer("bob")
    got: list[str] = []
    cursor = None
    for _ in range(20):
        page = service.changes(
            tenant,
            since=None if cursor else since,
            cursor=cursor,
            limit=2,
            types=frozenset({PERSON_TYPE}),
            sub=viewer,
            release=RELEASE,
        )
        assert len(page.items) <= 2
        got += [r.id for r in page.items]
        cursor = page.cursor
        if cursor is None:
            break
    assert sorted(got) == sorted(ids)


def test_a_re_read_tells_nothing_of_records_the_member_never_saw_through_the_group(
    gql: GraphQLClient, tenant: str
) -> None:
    """carol joins kids after p1 left it (made private) and p2 was deleted: her device
    is sent nothing of either. bob leaves kids, then p4 is shared with kids: his
    device is sent nothing of p4. And bob's re-read cursor is not olga's."""
    olga, bob, carol, _ = _family(gql, tenant)
    token = olga.person("p1", [], ["kids"])
    p2 = olga.person("p2", [], ["kids"])
    olga.person("p3", [], ["kids"])
    bobs, carols = _device(bob, limit=1), _device(carol, limit=1)
    for device in (bobs, carols):
        device.sync()
    share = {"tenantID": tenant, "id": "p1", "changeToken": token, "visibility": {}}
    olga.data(
        "mutation($i: SetVisibilityInput!) { setVisibility(input: $i) { item { id } } }",
        {"i": share},
    )
    olga.data(
        "mutation($i: DeletePersonInput!) { deletePerson(input: $i) { deletedItem { id } } }",
        {"i": {"tenantID": tenant, "id": "p2", "changeToken": p2}},
    )
    _groups(olga, "carol", ["kids"])
    _groups(olga, "bob", [])
    olga.person("p4", [], ["kids"])
    seen: dict[str, list[str]] = {}
    for device in (bobs, carols):
        ids: list[str] = []
        cursor, since = None, device.token
        while True:
            variables = {"t": tenant, "since": since, "cursor": cursor, "limit": 1}
            body = device.member.call(_CHANGES, variables, RELEASE)
            assert not body.get("errors"), body
            page = body["data"]["changes"]
            ids += [item["id"] for item in page["items"]]
            if cursor is None and page["cursor"] and device is bobs:
                # bob's re-read cursor, sent by olga (in no group): refused.
                stolen = olga.run(
                    "query($t: ID!, $c: String) { changes(tenantID: $t, cursor: $c) "
                    "{ items { id } } }",
                    {"t": tenant, "c": page["cursor"]},
                )
                assert stolen["errors"][0]["extensions"]["code"] == "INVALID_CURSOR", stolen
            cursor = page["cursor"]
            if cursor is None:
                break
        seen[device.member.sub] = ids
    assert {"p3", "p4"} <= set(seen["carol"]) and not {"p1", "p2"} & set(seen["carol"])
    assert {"p1", "p2", "p3"} <= set(seen["bob"]) and "p4" not in seen["bob"]


def test_a_page_of_one_over_a_superseded_entry_goes_on(gql: GraphQLClient, tenant: str) -> None:
    """p1, shared with kids, is updated twice after bob's device synced: kids' stream
    holds its first update superseded by its second. bob's device, a page of one at a
    time, steps over it: its first sync ends at the first update's token (the head's
    entry in kids' stream was past the Query's Limit: the bound is the head's pv),
    holding nothing newer than it saw, and its next one reaches the second."""
    olga, bob, _, _ = _family(gql, tenant)
    token = olga.person("p1", [], ["kids"])
    device = _device(bob, limit=1)
    device.sync()
    tokens = []
    for name in ("one", "two"):
        update = {
            "tenantID": tenant,
            "id": "p1",
            "changeToken": token,
            "changes": {"givenName": name},
        }
        token = olga.data(UPDATE_PERSON, {"i": update})["updatePerson"]["person"]["changeToken"]
        tokens.append(token)
    device.sync()
    assert device.token == tokens[0] and device.held["p1"] < tokens[0]
    device.sync()
    assert device.token == tokens[1] and device.held["p1"] == tokens[1]


def test_a_deleted_tenants_group_streams_go(ddb: Any, settings: Settings, tenant: str) -> None:
    """A deletion removes the stream of every group in the audience of one of the
    tenant's records, superseded entries too."""
    service = _service()
    v1 = _write(service, _create(tenant, "p1", Visibility.of(None, [], ["kids"])), by="o")
    update = Mutation("update", PERSON_TYPE, tenant, "p1", v1.change_token, {"familyName": "L"})
    _write(service, update, by="o")
    kids = keys.stream_pk(tenant, "g:kids")
    held = _query_all(ddb, settings.table_name, kids)
    assert len(held) == 2 and sum("sup" in item for item in held) == 1
    while not service.delete_tenant(tenant, tenant, "o").done:
        pass
    assert _query_all(ddb, settings.table_name, kids) == []
