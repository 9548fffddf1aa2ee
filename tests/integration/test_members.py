"""Membership as data (contract 6): a tenant's Member records decide who may do what
from its first Member write on, at each request, whatever the token's claim says."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from botocore.exceptions import ReadTimeoutError
from starlette.testclient import TestClient

from api.domain.cursor import CursorCodec
from api.domain.errors import RoleForbidden
from api.domain.membership import OWNER, Access
from api.domain.mutations import Mutation, Verb
from api.service import SyncService
from api.settings import Settings
from api.storage import capacity, keys
from api.storage.store import DynamoStore
from tests.integration.test_export import EXPORT, _export, _lines, _stored
from tests.integration.test_realtime import _connect, _init, _receive, _subscribe
from tests.support import family
from tests.support.faults import LoseResponse, dynamodb_error
from tests.support.gql import GraphQLClient, bearer
from tests.support.store_state import tenant_state

MEMBER = "id changeToken role displayName"
CREATE = (
    f"mutation($i: CreateMemberInput!) {{ createMember(input: $i) {{ member {{ {MEMBER} }} }} }}"
)
UPDATE = (
    f"mutation($i: UpdateMemberInput!) {{ updateMember(input: $i) {{ member {{ {MEMBER} }} }} }}"
)
CREATE_REPLAYED = (
    "mutation($i: CreateMemberInput!) "
    f"{{ createMember(input: $i) {{ replayed member {{ {MEMBER} }} }} }}"
)
DELETE = (
    "mutation($i: DeleteMemberInput!) "
    "{ deleteMember(input: $i) { deletedItem { id changeToken } } }"
)
PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) "
    "{ results { status item { id changeToken } error { code reason } } } }"
)
CHANGES = (
    "query($t: ID!, $c: String, $l: Int) { changes(tenantID: $t, cursor: $c, limit: $l) "
    "{ items { __typename id ... on Member { role } } cursor changeToken } }"
)
CREATE_PERSON = (
    "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id changeToken } } }"
)
HISTORY = "query($t: ID!, $id: ID!) { history(tenantID: $t, id: $id) { items { changeToken } } }"
PERSON = "query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { id } }"
CATCH_UP = "query($t: ID!, $u: ID!) { catchUp(tenantID: $t, upTo: $u) { items { id } } }"
ATTACHMENT = "query($t: ID!, $s: String!) { attachment(tenantID: $t, sha256: $s) { url } }"


class Caller:
    """One person's device: its sub and the token it keeps sending."""

    def __init__(self, gql: GraphQLClient, sub: str, claims: list[str]) -> None:
        self.gql, self.sub, self.headers = gql, sub, bearer(claims, sub=sub)

    def run(self, query: str, variables: dict[str, Any]) -> Any:
        return self.gql.execute(query, variables, headers=self.headers)

    def data(self, query: str, variables: dict[str, Any]) -> Any:
        body = self.run(query, variables)
        assert "errors" not in body, body
        return body["data"]

    def member(self, tenant: str, sub: str, role: str | None, **more: Any) -> Any:
        """createMember of `sub` with `role` (None: left out) and `more` fields."""
        fields = more if role is None else {"role": role, **more}
        return self.run(CREATE, {"i": {"tenantID": tenant, "id": sub, "member": fields}})

    def person(self, tenant: str, name: str = "Ann") -> Any:
        return self.run(CREATE_PERSON, {"i": {"tenantID": tenant, "person": {"givenName": name}}})


def _refusal(body: Any) -> tuple[str, str | None]:
    extensions = body["errors"][0]["extensions"]
    return extensions["code"], extensions.get("reason")


def _moved(gql: GraphQLClient, tenant: str) -> tuple[Caller, dict[str, Any]]:
    """A tenant its claim owner moved to membership as data: its own OWNER record."""
    olga = Caller(gql, "olga", [tenant])
    created = olga.member(tenant, "olga", "OWNER", displayName="Olga")
    assert "errors" not in created, created
    return olga, created["data"]["createMember"]["member"]


def _members_partition(ddb: Any, settings: Settings, tenant: str) -> dict[str, Any]:
    items = ddb.query(
        TableName=settings.table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.members_pk(tenant)}},
        ConsistentRead=True,
    )["Items"]
    return {i["sk"]["S"]: i.get("role", {}).get("S") for i in items}


def test_the_move_needs_a_claim_owner_writing_its_own_owner_record_first(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    olga = Caller(gql, "olga", [tenant])
    wendy = Caller(gql, "wendy", [f"{tenant}:writer"])
    wendy.person(tenant)  # the tenant exists; a claim tenant as before
    before = tenant_state(ddb, settings.table_name, tenant)
    assert _refusal(wendy.member(tenant, "wendy", "OWNER")) == ("FORBIDDEN", "ROLE")
    assert _refusal(olga.member(tenant, "bob", "WRITER")) == ("FORBIDDEN", "ROLE")
    assert _refusal(olga.member(tenant, "olga", "WRITER")) == ("FORBIDDEN", "ROLE")
    missing = olga.member(tenant, "olga", None)
    assert _refusal(missing) == ("BAD_USER_INPUT", None)
    assert "Member.role" in missing["errors"][0]["message"]
    nulled = olga.run(CREATE, {"i": {"tenantID": tenant, "id": "olga", "member": {"role": None}}})
    assert _refusal(nulled)[0] == "BAD_USER_INPUT"
    no_id = olga.run(CREATE, {"i": {"tenantID": tenant, "member": {"role": "OWNER"}}})
    assert _refusal(no_id)[0] == "BAD_USER_INPUT"
    assert tenant_state(ddb, settings.table_name, tenant) == before
    assert _members_partition(ddb, settings, tenant) == {}

    _, own = _moved(gql, tenant)
    assert own["role"] == "OWNER"
    assert _members_partition(ddb, settings, tenant) == {"U#olga": "owner", "V": None}
    # Moved: the writer's claim no longer lets it in, nor does another claim owner's.
    assert _refusal(wendy.person(tenant)) == ("FORBIDDEN", "NOT_A_MEMBER")
    carol = Caller(gql, "carol", [tenant])
    assert _refusal(carol.run(CHANGES, {"t": tenant})) == ("FORBIDDEN", "NOT_A_MEMBER")


def test_a_writer_member_cannot_write_members_and_in_a_push_only_that_entry_is_refused(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    olga, _ = _moved(gql, tenant)
    assert "errors" not in olga.member(tenant, "bob", "WRITER")
    bob = Caller(gql, "bob", [tenant])  # its claim says owner: the record says writer
    assert _refusal(bob.member(tenant, "eve", "READER")) == ("FORBIDDEN", "ROLE")
    entries = [
        {"createPerson": {"tenantID": tenant, "person": {"givenName": "Ann"}}},
        {"createMember": {"tenantID": tenant, "id": "eve", "member": {"role": "OWNER"}}},
        {"createPerson": {"tenantID": tenant, "person": {"givenName": "Bo"}}},
    ]
    results = bob.data(PUSH, {"i": {"tenantID": tenant, "mutations": entries}})
    got = [(r["status"], r["error"]) for r in results["pushChanges"]["results"]]
    assert got == [
        ("APPLIED", None),
        ("REJECTED", {"code": "FORBIDDEN", "reason": "ROLE"}),
        ("APPLIED", None),
    ]
    assert set(_members_partition(ddb, settings, tenant)) == {"U#olga", "U#bob", "V"}


def test_a_removed_member_is_refused_at_its_very_next_request(
    gql: GraphQLClient, tenant: str
) -> None:
    olga, _ = _moved(gql, tenant)
    bob_record = olga.data(
        CREATE, {"i": {"tenantID": tenant, "id": "bob", "member": {"role": "WRITER"}}}
    )
    bob = Caller(gql, "bob", [tenant])
    person = bob.data(CREATE_PERSON, {"i": {"tenantID": tenant, "person": {"givenName": "A"}}})
    person = person["createPerson"]["person"]
    bob.person(tenant, "B")
    first = bob.data(CHANGES, {"t": tenant, "l": 1})["changes"]
    assert first["cursor"] is not None
    head = bob.data(CHANGES, {"t": tenant})["changes"]["changeToken"]

    member = bob_record["createMember"]["member"]
    olga.data(
        DELETE, {"i": {"tenantID": tenant, "id": "bob", "changeToken": member["changeToken"]}}
    )
    # Bob's token still lists the tenant: every one of its next requests is refused.
    for query, variables in {
        "changes": (CHANGES, {"t": tenant}),
        "page": (CHANGES, {"t": tenant, "c": first["cursor"]}),
        "catchUp": (CATCH_UP, {"t": tenant, "u": head}),
        "history": (HISTORY, {"t": tenant, "id": person["id"]}),
        "person": (PERSON, {"t": tenant, "id": person["id"]}),
        "mutation": (CREATE_PERSON, {"i": {"tenantID": tenant, "person": {}}}),
        "push": (
            PUSH,
            {
                "i": {
                    "tenantID": tenant,
                    "mutations": [{"createPerson": {"tenantID": tenant, "person": {}}}],
                }
            },
        ),
        "export": (EXPORT, {"t": tenant, "e": None}),
        "attachment": (ATTACHMENT, {"t": tenant, "s": "0" * 64}),
    }.values():
        assert _refusal(bob.run(query, variables)) == ("FORBIDDEN", "NOT_A_MEMBER"), query
    # The owner sees the removal in the log and the record's history.
    items = olga.data(CHANGES, {"t": tenant})["changes"]["items"]
    assert {"__typename": "DeletedItem", "id": "bob"} in items
    versions = olga.data(HISTORY, {"t": tenant, "id": "bob"})["history"]["items"]
    assert [v["changeToken"] for v in versions] == [member["changeToken"]]


def test_a_demoted_writer_reads_and_each_queued_write_is_refused_for_its_role(
    gql: GraphQLClient, tenant: str
) -> None:
    olga, _ = _moved(gql, tenant)
    added = olga.data(
        CREATE, {"i": {"tenantID": tenant, "id": "bob", "member": {"role": "WRITER"}}}
    )
    bob = Caller(gql, "bob", [tenant])
    assert "errors" not in bob.person(tenant)
    token = added["createMember"]["member"]["changeToken"]
    olga.data(
        UPDATE,
        {
            "i": {
                "tenantID": tenant,
                "id": "bob",
                "changeToken": token,
                "changes": {"role": "READER"},
            }
        },
    )
    assert _refusal(bob.person(tenant)) == ("FORBIDDEN", "ROLE")
    items = bob.data(CHANGES, {"t": tenant})["changes"]["items"]
    assert {"__typename": "Member", "id": "bob", "role": "READER"} in items
    outbox = [{"createPerson": {"tenantID": tenant, "person": {"givenName": n}}} for n in "XY"]
    results = bob.data(PUSH, {"i": {"tenantID": tenant, "mutations": outbox}})
    assert [(r["status"], r["error"]) for r in results["pushChanges"]["results"]] == [
        ("REJECTED", {"code": "FORBIDDEN", "reason": "ROLE"})
    ] * 2


def test_a_member_whose_token_does_not_list_the_tenant_syncs(
    gql: GraphQLClient, tenant: str
) -> None:
    olga, _ = _moved(gql, tenant)
    olga.person(tenant)
    dan = Caller(gql, "dan", [])
    assert _refusal(dan.run(CHANGES, {"t": tenant})) == ("FORBIDDEN", "NOT_A_MEMBER")
    olga.data(CREATE, {"i": {"tenantID": tenant, "id": "dan", "member": {"role": "WRITER"}}})
    assert len(dan.data(CHANGES, {"t": tenant})["changes"]["items"]) == 3
    assert "errors" not in dan.person(tenant)


def test_member_records_are_exported_like_any_other(
    gql: GraphQLClient, tenant: str, settings: Settings
) -> None:
    olga, own = _moved(gql, tenant)
    payload, _ = _export(lambda e: olga.data(EXPORT, {"t": tenant, "e": e})["exportTenant"])
    lines = _lines(_stored(settings, tenant, payload["exportID"]))
    entities = [line["entity"] for line in lines if "entity" in line]
    assert [(e["__typename"], e["id"], e["role"], e["displayName"]) for e in entities] == [
        ("Member", "olga", "OWNER", "Olga")
    ]
    assert entities[0]["changeToken"] == own["changeToken"]


def test_an_owner_cannot_delete_or_demote_itself(gql: GraphQLClient, tenant: str) -> None:
    olga, own = _moved(gql, tenant)
    key = {"tenantID": tenant, "id": "olga", "changeToken": own["changeToken"]}
    assert _refusal(olga.run(DELETE, {"i": key})) == ("FORBIDDEN", "ROLE")
    demote = {"i": {**key, "changes": {"role": "WRITER"}}}
    assert _refusal(olga.run(UPDATE, demote)) == ("FORBIDDEN", "ROLE")
    cleared = olga.run(UPDATE, {"i": {**key, "changes": {"role": None}}})
    assert _refusal(cleared)[0] == "BAD_USER_INPUT"
    renamed = olga.data(UPDATE, {"i": {**key, "changes": {"displayName": "O."}}})
    assert renamed["updateMember"]["member"]["role"] == "OWNER"
    versions = olga.data(HISTORY, {"t": tenant, "id": "olga"})["history"]["items"]
    assert [v["changeToken"] for v in versions] == [own["changeToken"]]


def test_deleting_the_tenant_removes_its_members_and_it_is_a_claim_tenant_again(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    olga, _ = _moved(gql, tenant)
    olga.data(CREATE, {"i": {"tenantID": tenant, "id": "bob", "member": {"role": "READER"}}})
    delete = "mutation($t: ID!, $c: ID!) { deleteTenant(tenantID: $t, confirm: $c) { done } }"
    while not olga.data(delete, {"t": tenant, "c": tenant})["deleteTenant"]["done"]:
        pass
    assert _members_partition(ddb, settings, tenant) == {}
    carol = Caller(gql, "carol", [tenant])  # a claim owner without a record: as before
    assert "errors" not in carol.person(tenant)
    assert _refusal(carol.member(tenant, "bob", "OWNER")) == ("FORBIDDEN", "ROLE")


def test_the_move_whose_answer_is_lost_then_resent_replays_once(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings, inject: Any
) -> None:
    olga = Caller(gql, "olga", [tenant])
    lose = LoseResponse(times=1)
    inject("after-call.dynamodb.TransactWriteItems", lose)
    move = {"tenantID": tenant, "id": "olga", "member": {"role": "OWNER"}, "clientMutationID": "m1"}
    lost = olga.data(CREATE, {"i": move})
    assert lose.calls == 1  # DynamoDB applied it; its answer was lost
    again = olga.data(CREATE_REPLAYED, {"i": move})["createMember"]
    assert again["replayed"] is True
    assert again["member"] == lost["createMember"]["member"]
    items = olga.data(CHANGES, {"t": tenant})["changes"]["items"]
    assert items == [{"__typename": "Member", "id": "olga", "role": "OWNER"}]
    assert _members_partition(ddb, settings, tenant) == {"U#olga": "owner", "V": None}

    # Adding a member: its answer lost once DynamoDB applied it, and the server cannot
    # see whether it applied (its read fails too): UNAVAILABLE; the resend replays it.
    unsure = {"on": True, "lost": 0}

    def lose_applied(parsed: Any = None, **_: Any) -> None:
        if unsure["on"] and "Error" not in (parsed or {}):
            unsure["lost"] += 1
            raise ReadTimeoutError(endpoint_url="http://injected")

    def failing_read(request: Any = None, **_: Any) -> Any:
        return dynamodb_error("InternalServerError") if unsure["lost"] else None

    inject("after-call.dynamodb.TransactWriteItems", lose_applied)
    inject("before-send.dynamodb.BatchGetItem", failing_read)
    add = {"tenantID": tenant, "id": "bob", "member": {"role": "READER"}, "clientMutationID": "m2"}
    first = olga.run(CREATE_REPLAYED, {"i": add})
    assert _refusal(first) == ("UNAVAILABLE", None)
    assert unsure["lost"] == 1
    unsure["on"], unsure["lost"] = False, 0
    resent = olga.data(CREATE_REPLAYED, {"i": add})["createMember"]
    assert resent["replayed"] is True and resent["member"]["role"] == "READER"
    assert olga.data(CREATE_REPLAYED, {"i": add})["createMember"]["replayed"] is True
    items = olga.data(CHANGES, {"t": tenant})["changes"]["items"]
    assert [i["id"] for i in items] == ["olga", "bob"]
    assert _members_partition(ddb, settings, tenant)["U#bob"] == "reader"


def test_two_owners_removing_each_other_at_once_leave_one_owner(
    settings: Settings, tenant: str, ddb: Any
) -> None:
    """Both requests found their caller an owner; the writes then commit one after
    the other: the second's check of its writer's own access item fails."""
    service = SyncService(DynamoStore(), CursorCodec(settings.cursor_secret))

    def member(verb: Verb, sub: str, token: str | None, fields: dict[str, Any]) -> Mutation:
        return Mutation(verb, family.MEMBER, tenant, sub, token, fields)

    olga = service.apply(member("create", "olga", None, {"role": "OWNER"}), "olga", OWNER)
    pat = service.apply(member("create", "pat", None, {"role": "OWNER"}), "olga", OWNER, True)
    olga_token, pat_token = olga.record.change_token, pat.record.change_token
    service.apply(member("delete", "pat", pat_token, {}), "olga", OWNER, moved=True)
    before = tenant_state(ddb, settings.table_name, tenant)
    with pytest.raises(RoleForbidden):
        service.apply(member("delete", "olga", olga_token, {}), "pat", OWNER, moved=True)
    with pytest.raises(RoleForbidden):  # pat's own record: gone, its put's condition fails
        service.apply(member("create", "pat2", None, {"role": "READER"}), "pat", OWNER, True)
    assert tenant_state(ddb, settings.table_name, tenant) == before
    assert _moved_role(service.access(tenant, "olga")) == (True, OWNER)
    assert _moved_role(service.access(tenant, "pat")) == (True, None)


def test_the_check_is_one_query_of_one_read_unit_per_tenant_and_request(
    gql: GraphQLClient, tenant: str, settings: Settings, inject: Any
) -> None:
    olga, _ = _moved(gql, tenant)
    person = olga.data(CREATE_PERSON, {"i": {"tenantID": tenant, "person": {}}})
    asked: list[str] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        pk = params.get("ExpressionAttributeValues", {}).get(":pk", {}).get("S")
        if pk == keys.members_pk(tenant):
            asked.append(params["KeyConditionExpression"])

    inject("before-parameter-build.dynamodb.Query", count)
    aliases = (
        "query($t: ID!, $id: ID!) { a: changes(tenantID: $t) { changeToken } "
        "b: changes(tenantID: $t) { changeToken } c: person(tenantID: $t, id: $id) { id } "
        'd: member(tenantID: $t, id: "olga") { role } }'
    )
    olga.data(aliases, {"t": tenant, "id": person["createPerson"]["person"]["id"]})
    assert len(asked) == 1
    units = []
    for asked_tenant, sub, expected in (
        (tenant, "olga", Access(True, OWNER)),
        (tenant, "zed", Access(True, None)),  # reads the marker V
        (tenant + "-none", "olga", Access()),  # a claim tenant: reads nothing
    ):
        with capacity.metered() as meter:
            assert _moved_role(DynamoStore().access(asked_tenant, sub)) == _moved_role(expected)
        assert meter.calls == 1
        units.append(meter.read_units)
    # A consistent read of one small item is 1 unit (rounded up to 4 KB); a Query that
    # finds nothing is counted 0 by DynamoDB Local (at most 1 on DynamoDB).
    assert units == [1.0, 1.0, 0.0], units


def test_an_open_subscription_of_a_removed_member_ends_with_not_a_member(
    app_client: TestClient, gql: GraphQLClient, tenant: str
) -> None:
    olga, _ = _moved(gql, tenant)
    added = olga.data(
        CREATE, {"i": {"tenantID": tenant, "id": "bob", "member": {"role": "READER"}}}
    )
    bob_record = added["createMember"]["member"]
    with _connect(app_client) as ws:
        _init(ws, bearer([tenant], sub="bob")["Authorization"])
        assert _receive(ws) == {"type": "connection_ack"}
        _subscribe(ws, "s", tenant, since=bob_record["changeToken"])
        person = olga.data(CREATE_PERSON, {"i": {"tenantID": tenant, "person": {}}})
        event = _receive(ws)  # still a member: the event as ever
        token = person["createPerson"]["person"]["changeToken"]
        assert event["payload"]["data"]["changesAvailable"]["changeToken"] == token
        removal = {"tenantID": tenant, "id": "bob", "changeToken": bob_record["changeToken"]}
        olga.data(DELETE, {"i": removal})
        refused = _receive(ws)
        assert refused["id"] == "s" and refused["type"] == "next"
        extensions = refused["payload"]["errors"][0]["extensions"]
        assert (extensions["code"], extensions["reason"]) == ("FORBIDDEN", "NOT_A_MEMBER")
        assert _receive(ws) == {"id": "s", "type": "complete"}
        # Its next subscribe, on the same socket and token, is refused at once.
        _subscribe(ws, "s2", tenant)
        again = _receive(ws)
        assert again["type"] == "error"
        assert again["payload"][0]["extensions"]["reason"] == "NOT_A_MEMBER"


def test_a_push_of_many_member_writes_fits_dynamodbs_100_actions_a_transaction(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    """Each Member write takes one more action (its access item) and each transaction
    one more (the marker, or the check of the writer's access): group commit counts
    them, or DynamoDB refuses a transaction of more than 100 actions."""
    olga = Caller(gql, "olga", [tenant])
    entries = [{"createMember": {"tenantID": tenant, "id": "olga", "member": {"role": "OWNER"}}}]
    entries += [
        {"createMember": {"tenantID": tenant, "id": f"m{n}", "member": {"role": "READER"}}}
        for n in range(99)
    ]
    results = olga.data(PUSH, {"i": {"tenantID": tenant, "mutations": entries}})
    assert {r["status"] for r in results["pushChanges"]["results"]} == {"APPLIED"}
    members = _members_partition(ddb, settings, tenant)
    assert len(members) == 101 and members["U#olga"] == "owner" and "V" in members


def test_what_the_check_adds_to_a_requests_capacity(
    gql: GraphQLClient, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The request log's capacity of one sync and of four aliases: a claim tenant's
    check finds nothing, a member's reads its access item (1 unit), once a request."""
    claim = Caller(gql, "olga", [tenant])
    claim.person(tenant)
    moved = tenant + "-m"
    olga = Caller(gql, "olga", [moved])
    _moved(gql, moved)
    olga.person(moved)
    aliases = " ".join(f"a{n}: changes(tenantID: $t) {{ changeToken }}" for n in range(4))

    def units(caller: Caller, query: str, t: str) -> float:
        caplog.set_level(logging.INFO)
        caplog.clear()
        caller.data(query, {"t": t})
        (line,) = [json.loads(r.getMessage()) for r in caplog.records if r.name == "api.request"]
        return float(line["capacityUnits"])

    one = "query($t: ID!) { changes(tenantID: $t) { changeToken } }"
    four = f"query($t: ID!) {{ {aliases} }}"
    figures = {
        (kind, shape): units(caller, query, t)
        for kind, caller, t in (("claim", claim, tenant), ("member", olga, moved))
        for shape, query in (("one", one), ("four", four))
    }
    print(figures)  # the report's figures (pytest -s)
    assert figures["member", "one"] == figures["claim", "one"] + 1.0, figures
    assert figures["member", "four"] == figures["claim", "four"] + 1.0, figures


def _moved_role(access: Access) -> tuple[bool, str | None]:
    """What these tests check of an access read (its groups and Member version aside)."""
    return access.moved, access.role
