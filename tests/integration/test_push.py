"""`pushChanges`: a week of offline edits in one request, each applied on its own."""

from __future__ import annotations

from typing import Any

import pytest

from api.settings import Settings
from tests.support.gql import ITEM_SELECTION, GraphQLClient
from tests.support.store_state import assert_consistent, tenant_state

PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { "
    "clientMutationID status replayed error { code message } "
    f"item {{ {ITEM_SELECTION} }} }} }} }}"
)


class _Script:
    """Builds push entries together with what each must produce."""

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.entries: list[dict[str, Any]] = []
        self.expected: list[tuple[str, str | None]] = []  # (status, error code)
        # The state the applied entries must lead to: id -> fields, or None when deleted.
        self.model: dict[str, dict[str, Any] | None] = {}
        self._n = 0

    def _cmid(self) -> str:
        self._n += 1
        return f"cm-{self._n}"

    def add(
        self,
        kind: str,
        body: dict[str, Any],
        status: str,
        code: str | None = None,
        cmid: str | None = None,
    ) -> str:
        cmid = cmid or self._cmid()
        self.entries.append({kind: {"tenantID": self.tenant, **body, "clientMutationID": cmid}})
        self.expected.append((status, code))
        return cmid

    def create(self, type_name: str, entity_id: str, fields: dict[str, Any]) -> None:
        key = type_name[0].lower() + type_name[1:]
        self.add(f"create{type_name}", {"id": entity_id, key: fields}, "APPLIED")
        self.model[entity_id] = dict(fields)

    def update(
        self,
        type_name: str,
        entity_id: str,
        token: str,
        changes: dict[str, Any],
        status: str = "APPLIED",
        code: str | None = None,
    ) -> None:
        self.add(
            f"update{type_name}",
            {"id": entity_id, "changeToken": token, "changes": changes},
            status,
            code,
        )
        if status == "APPLIED":
            fields = self.model[entity_id]
            assert fields is not None
            for name, value in changes.items():
                if value is None:
                    fields.pop(name, None)
                else:
                    fields[name] = value


def _push(gql: GraphQLClient, tenant: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return gql.execute(PUSH, {"i": {"tenantID": tenant, "mutations": entries}})


def test_a_hundred_mixed_mutations(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    seeded = {
        f"p{i}": gql.create(tenant, "Person", {"givenName": f"seed{i}"}, id=f"p{i}")
        for i in range(6)
    }
    script = _Script(tenant)
    for entity_id, person in seeded.items():
        script.model[entity_id] = {"givenName": person["givenName"]}
    # Updates that chain: each later one needs the token the earlier one makes, which
    # the client cannot know; so the second is a conflict whose item is the first's result.
    script.update("Person", "p0", seeded["p0"]["changeToken"], {"familyName": "A"})
    script.update(
        "Person", "p0", seeded["p0"]["changeToken"], {"familyName": "B"}, "CONFLICT", "CONFLICT"
    )
    script.add("deletePerson", {"id": "p1", "changeToken": seeded["p1"]["changeToken"]}, "APPLIED")
    script.model["p1"] = None
    script.update(
        "Person", "p1", seeded["p1"]["changeToken"], {"givenName": "x"}, "CONFLICT", "CONFLICT"
    )
    script.update(
        "Person", "ghost", seeded["p2"]["changeToken"], {"givenName": "x"}, "REJECTED", "NOT_FOUND"
    )
    script.add("createPerson", {"person": {"profileColor": "red"}}, "REJECTED", "BAD_USER_INPUT")
    script.add("createPerson", {"id": "p2", "person": {}}, "CONFLICT", "ALREADY_EXISTS")
    replayed_cmid = script.add(
        "createReminder", {"id": "r0", "reminder": {"title": "t"}}, "APPLIED"
    )
    script.model["r0"] = {"title": "t"}
    script.add(
        "createReminder", {"id": "r0", "reminder": {"title": "t"}}, "APPLIED", cmid=replayed_cmid
    )  # a retry of the same queued edit: a replay
    script.add(
        "createReminder",
        {"id": "r9", "reminder": {"title": "other"}},
        "REJECTED",
        "BAD_USER_INPUT",
        cmid=replayed_cmid,
    )  # same id, other mutation
    script.entries.append({"createPerson": {"tenantID": tenant + "-other", "person": {}}})
    script.expected.append(("REJECTED", "BAD_USER_INPUT"))
    p5_token = seeded["p5"]["changeToken"]
    for i in range(100 - len(script.entries)):
        if i % 3 == 2:  # the same queued base token again and again: only the first applies
            first = i == 2
            script.update(
                "Person",
                "p5",
                p5_token,
                {"occupation": f"o{i}"},
                "APPLIED" if first else "CONFLICT",
                None if first else "CONFLICT",
            )
        else:
            script.create("Person", f"n{i}", {"givenName": f"new{i}"})
    assert len(script.entries) == 100

    body = _push(gql, tenant, script.entries)
    assert "errors" not in body, body
    results = body["data"]["pushChanges"]["results"]
    assert [(r["status"], (r["error"] or {}).get("code")) for r in results] == script.expected
    assert [r["clientMutationID"] for r in results] == [
        next(iter(e.values())).get("clientMutationID") for e in script.entries
    ]

    # Conflicts carry the server's current version; applied results their new version.
    assert results[1]["item"]["changeToken"] == results[0]["item"]["changeToken"]
    assert results[1]["item"]["familyName"] == "A"
    assert results[3]["item"]["__typename"] == "DeletedItem"
    assert results[6]["item"]["id"] == "p2"
    assert results[8]["replayed"] is True and results[8]["item"] == results[7]["item"]
    applied = [r for r in results if r["status"] == "APPLIED" and not r["replayed"]]
    tokens = [r["item"]["changeToken"] for r in applied]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)  # in order

    state = {i["id"]: i for i in gql.sync(tenant).items}
    for entity_id, fields in script.model.items():
        item = state.pop(entity_id, None)
        if fields is None:
            # Deleted: a first sync leaves the deletion out, or (the latest push's) sends it.
            assert item is None or item["__typename"] == "DeletedItem"
            continue
        assert item is not None, entity_id
        declared = {
            k: v
            for k, v in item.items()
            if k
            not in (
                "__typename",
                "id",
                "tenantID",
                "changeToken",
                "createdAt",
                "updatedAt",
                "writtenBy",
            )
        }
        assert {k: v for k, v in declared.items() if v is not None} == fields, entity_id
    assert state == {}  # nothing else was written
    assert_consistent(tenant_state(ddb, settings.table_name, tenant))

    # Pushing the same batch again (the response was lost) changes nothing.
    before = tenant_state(ddb, settings.table_name, tenant)
    again = _push(gql, tenant, script.entries)["data"]["pushChanges"]["results"]
    assert tenant_state(ddb, settings.table_name, tenant) == before
    for first, second in zip(results, again, strict=True):
        if (
            first["clientMutationID"] is None
            or first["error"]
            and first["error"]["code"] == ("BAD_USER_INPUT")
        ):
            continue  # no clientMutationID, or never stored: re-evaluated, same verdict
        assert second["replayed"] is True
        assert (second["status"], second["item"]) == (first["status"], first["item"])


def test_more_than_a_hundred_is_bad_input_and_writes_nothing(
    gql: GraphQLClient, tenant: str
) -> None:
    entries = [{"createPerson": {"tenantID": tenant, "person": {}}}] * 101
    body = _push(gql, tenant, entries)
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert gql.sync(tenant).items == []


@pytest.mark.parametrize(
    "entry",
    [
        {},
        {"createPerson": None},
        "both",
    ],
    ids=["none set", "null", "two set"],
)
def test_each_entry_sets_exactly_one_mutation(gql: GraphQLClient, tenant: str, entry: Any) -> None:
    if entry == "both":
        entry = {
            "createPerson": {"tenantID": tenant, "person": {}},
            "createReminder": {"tenantID": tenant, "reminder": {}},
        }
    body = _push(gql, tenant, [entry])
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert gql.sync(tenant).items == []


def test_an_empty_push_is_fine(gql: GraphQLClient, tenant: str) -> None:
    body = _push(gql, tenant, [])
    assert body["data"]["pushChanges"]["results"] == []


def test_state_based_puts_through_push_apply_conflict_and_replay(
    gql: GraphQLClient, tenant: str, settings: Settings, ddb: Any
) -> None:
    """What an RxDB push does: each row says the state it assumes and the new one."""

    def put(entity: str, assumed: dict[str, Any] | None, state: dict[str, Any], cmid: str) -> Any:
        def as_input(s: dict[str, Any]) -> dict[str, Any]:
            if s.get("_deleted"):
                return {"deleted": True}
            return {"person": s}

        body: dict[str, Any] = {
            "tenantID": tenant,
            "id": entity,
            "state": as_input(state),
            "clientMutationID": cmid,
        }
        if assumed is not None:
            body["assumed"] = as_input(assumed)
        return {"putPerson": body}

    ann = {"givenName": "Ann", "dateOfBirth": "1990-01-02"}
    anna = {**ann, "givenName": "Anna"}
    first = _push(
        gql,
        tenant,
        [
            put("p1", None, ann, "r1"),
            put("p1", ann, anna, "r2"),  # the next edit, before any pull
            put("p1", ann, {**ann, "occupation": "x"}, "r3"),  # stale: another device's
            put("p2", None, {"givenName": "Bo"}, "r4"),
            put("p2", {"givenName": "Bo"}, {"_deleted": True}, "r5"),
        ],
    )["data"]["pushChanges"]["results"]
    assert [r["status"] for r in first] == ["APPLIED", "APPLIED", "CONFLICT", "APPLIED", "APPLIED"]
    assert first[2]["item"]["givenName"] == "Anna"  # the server's state, to resolve with
    assert first[2]["error"]["code"] == "CONFLICT"
    assert first[4]["item"]["__typename"] == "DeletedItem"
    # The response was lost: the same rows again write nothing and answer the same.
    again = _push(gql, tenant, [put("p1", None, ann, "r1"), put("p1", ann, anna, "r2")])
    results = again["data"]["pushChanges"]["results"]
    assert [r["replayed"] for r in results] == [True, True]
    assert [r["item"]["changeToken"] for r in results] == [
        r["item"]["changeToken"] for r in first[:2]
    ]
    state = tenant_state(ddb, settings.table_name, tenant)
    assert_consistent(state)
    assert len(gql.changes_page(tenant)["items"]) == 2
