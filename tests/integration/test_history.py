"""History over GraphQL against DynamoDB Local: earlier versions with who wrote
them, restores as token-guarded updates, and what expires (contract 3.6, 3.7)."""

from __future__ import annotations

from typing import Any

from api.settings import Settings
from tests.support.gql import ITEM_SELECTION, GraphQLClient, bearer
from tests.support.store_state import tenant_state

HISTORY = (
    "query($t: ID!, $id: ID!, $cursor: String, $limit: Int) {"
    " history(tenantID: $t, id: $id, cursor: $cursor, limit: $limit) {"
    f" items {{ {ITEM_SELECTION} writtenBy }} cursor }} }}"
)
UPDATE = (
    "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) "
    "{ person { id changeToken givenName writtenBy } } }"
)
RESTORE = (
    "mutation($i: RestoreVersionInput!) { restoreVersion(input: $i) "
    "{ item { __typename id changeToken writtenBy ... on Person { givenName } } replayed } }"
)


def _as(gql: GraphQLClient, sub: str, tenant: str, query: str, variables: Any) -> Any:
    return gql.execute(query, variables, headers=bearer([tenant], sub=sub))


def _update(gql: GraphQLClient, sub: str, tenant: str, person: Any, name: str) -> Any:
    body = _as(
        gql,
        sub,
        tenant,
        UPDATE,
        {
            "i": {
                "tenantID": tenant,
                "id": person["id"],
                "changeToken": person["changeToken"],
                "changes": {"givenName": name},
            }
        },
    )
    assert "errors" not in body, body
    return body["data"]["updatePerson"]["person"]


def test_history_lists_earlier_versions_with_their_writers_and_restores_one(
    gql: GraphQLClient, tenant: str
) -> None:
    v1 = gql.create(tenant, "Person", {"givenName": "Ann"})  # sub "tester"
    v2 = _update(gql, "alice", tenant, v1, "Anne")
    v3 = _update(gql, "bob", tenant, v2, "Annie")
    assert v3["writtenBy"] == "bob"

    page = gql.data(HISTORY, {"t": tenant, "id": v1["id"], "limit": 1})["history"]
    assert [(i["givenName"], i["writtenBy"]) for i in page["items"]] == [("Anne", "alice")]
    older = gql.data(HISTORY, {"t": tenant, "id": v1["id"], "cursor": page["cursor"]})["history"]
    assert [(i["givenName"], i["writtenBy"]) for i in older["items"]] == [("Ann", "tester")]
    assert older["cursor"] is None
    assert older["items"][0]["changeToken"] == v1["changeToken"]

    restore = {
        "i": {"tenantID": tenant, "id": v1["id"], "changeToken": v2["changeToken"]}
        | {"version": v1["changeToken"], "clientMutationID": "restore-1"}
    }
    stale = _as(gql, "carol", tenant, RESTORE, restore)
    assert stale["errors"][0]["extensions"]["code"] == "CONFLICT"
    restore["i"]["changeToken"] = v3["changeToken"]
    restore["i"]["clientMutationID"] = "restore-2"
    done = _as(gql, "carol", tenant, RESTORE, restore)["data"]["restoreVersion"]
    assert done["item"]["givenName"] == "Ann" and done["item"]["writtenBy"] == "carol"
    assert done["item"]["changeToken"] > v3["changeToken"] and done["replayed"] is False
    again = _as(gql, "carol", tenant, RESTORE, restore)["data"]["restoreVersion"]
    assert again == {**done, "replayed": True}
    history = gql.data(HISTORY, {"t": tenant, "id": v1["id"]})["history"]["items"]
    assert [i["givenName"] for i in history] == ["Annie", "Anne", "Ann"]

    unknown = {**restore["i"], "version": done["item"]["changeToken"], "clientMutationID": None}
    missing = _as(
        gql,
        "carol",
        tenant,
        RESTORE,
        {"i": {**unknown, "changeToken": done["item"]["changeToken"]}},
    )
    assert missing["errors"][0]["extensions"]["code"] == "NOT_FOUND"


def test_deletions_and_kept_versions_expire_but_entities_and_live_entries_do_not(
    gql: GraphQLClient, tenant: str, ddb: Any, settings: Settings
) -> None:
    kept = gql.create(tenant, "Person", {"givenName": "Kept"})
    gone = gql.create(tenant, "Person", {"givenName": "Gone"})
    _update(gql, "tester", tenant, kept, "Kept 2")
    gql.delete(tenant, "Person", gone["id"], gone["changeToken"])
    state = tenant_state(ddb, settings.table_name, tenant)
    entries = {e["id"]["S"]: e for e in state.log.values()}
    assert "exp" in entries[gone["id"]] and "exp" not in entries[kept["id"]]
    assert all("exp" not in item for item in state.entities.values())  # ids never reused
    versions = ddb.query(
        TableName=settings.table_name,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"T#{tenant}#HIST"}},
    )["Items"]
    assert sorted(v["f"]["M"]["givenName"]["S"] for v in versions) == ["Gone", "Kept"]
    assert all("exp" in v for v in versions)
    # The deleted person's history stays readable until it expires.
    history = gql.data(HISTORY, {"t": tenant, "id": gone["id"]})["history"]["items"]
    assert [i["givenName"] for i in history] == ["Gone"]
