"""The field kinds of docs/contract.md ("Field kinds") through the API, on a server
of a catalog of its own (tests/support/kinds.py): every kind written by create,
update and put, read back by get and a sync exactly (the doubles' edge values too),
merged as one value each, and every bad value refused BAD_USER_INPUT, naming the
field, with nothing written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from api.settings import Settings
from tests.support import kinds
from tests.support.gql import GraphQLClient
from tests.support.servers import api_server
from tests.support.store_state import tenant_state

pytestmark = pytest.mark.slow  # a server process of its own

SELECTION = (
    "__typename id changeToken title priority count score ratio tags ids counts scores "
    "flags days times stages address { street city postalCode floor latitude doorCodes } "
    "checklist { text done }"
)
CREATE = f"mutation($i: CreateTaskInput!) {{ createTask(input: $i) {{ task {{ {SELECTION} }} }} }}"
UPDATE = f"mutation($i: UpdateTaskInput!) {{ updateTask(input: $i) {{ task {{ {SELECTION} }} }} }}"
GET = f"query($t: ID!, $id: ID!) {{ task(tenantID: $t, id: $id) {{ {SELECTION} }} }}"
CHANGES = (
    "query($t: ID!) { changes(tenantID: $t) { items { __typename id "
    f"... on Task {{ {SELECTION} }} }} }} }}"
)
PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status "
    f"error {{ code message }} item {{ ... on Task {{ {SELECTION} }} }} }} }} }}"
)

# Every kind at its edges: the doubles a 38-digit Number could not keep among them.
EDGES: dict[str, Any] = {
    "title": "every kind",
    "priority": 5,
    "count": -(2**31),
    "score": 1.7976931348623157e308,
    "ratio": 0.1,
    "tags": ["a" * 20, "Zoë", "", '"quoted"', "x"],
    "ids": ["p-1", "p-2"],
    "counts": [0, 2**31 - 1],
    "scores": [0.1, 1e-300, -0.0, 1.7976931348623157e308, -5e-324, 2.0, 1 / 3],
    "flags": [True, False, True],
    "days": ["2024-02-29", "1990-04-01"],
    "times": ["2026-11-21T23:02:38.123Z"],
    "stages": ["DONE", "TODO", "DONE"],
    "address": {
        "street": "1 Rue de la Paix",
        "city": "Paris",
        "postalCode": "75002",
        "floor": -5,
        "latitude": -0.0,
        "doorCodes": ["1234A", "B"],
    },
    "checklist": [{"text": "milk", "done": False}, {"text": "eggs", "done": True}],
}


@pytest.fixture(scope="module")
def gql(settings: Settings) -> Iterator[GraphQLClient]:
    with (
        api_server(settings, extra_env=kinds.SERVER_ENV) as url,
        httpx2.Client(base_url=url, timeout=30) as http,
    ):
        yield GraphQLClient(http)


def _exact(value: Any) -> str:
    """JSON that tells -0.0 from 0.0 and a double's every digit (== does not)."""
    return json.dumps(value, sort_keys=True)


def _fields(task: dict[str, Any]) -> dict[str, Any]:
    """The kinds' fields that are set (an object's sub-fields that are set)."""
    return {k: _set(v) for k, v in task.items() if k in EDGES and v is not None}


def _set(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_set(v) for v in value]
    return value


def _items(gql: GraphQLClient, tenant: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = gql.data(CHANGES, {"t": tenant})["changes"]["items"]
    return items


def test_every_kind_round_trips_through_create_update_get_and_sync(
    gql: GraphQLClient, tenant: str, settings: Settings, ddb: Any
) -> None:
    created = gql.data(CREATE, {"i": {"tenantID": tenant, "task": EDGES}})["createTask"]["task"]
    assert _exact(_fields(created)) == _exact(EDGES)
    fetched = gql.data(GET, {"t": tenant, "id": created["id"]})["task"]
    assert _exact(_fields(fetched)) == _exact(EDGES)
    (synced,) = _items(gql, tenant)
    assert _exact(_fields(synced)) == _exact(EDGES)
    # As stored: a FLOAT is its shortest round-trip decimal in a String, an INT a Number.
    (item,) = tenant_state(ddb, settings.table_name, tenant).entities.values()
    stored = item["f"]["M"]
    assert stored["score"] == {"S": "1.7976931348623157e+308"}
    assert stored["scores"]["L"][1] == {"S": "1e-300"}
    assert stored["address"]["M"]["latitude"] == {"S": "-0.0"}
    assert stored["count"] == {"N": str(-(2**31))}

    # An update replaces a list and an object whole, and leaves the other fields.
    changes = {"tags": ["b"], "address": {"city": "Lyon"}, "checklist": None, "score": -0.0}
    updated = gql.data(
        UPDATE,
        {
            "i": {
                "tenantID": tenant,
                "id": created["id"],
                "changeToken": created["changeToken"],
                "changes": changes,
            }
        },
    )["updateTask"]["task"]
    expected = {**EDGES, **changes}
    del expected["checklist"]
    assert _exact(_fields(updated)) == _exact(expected)
    (synced,) = _items(gql, tenant)
    assert _exact(_fields(synced)) == _exact(expected)

    # A stale token: CONFLICT, its `current` carrying every kind as JSON, exactly.
    stale = {"tenantID": tenant, "id": created["id"], "changeToken": created["changeToken"]}
    body = gql.execute(UPDATE, {"i": {**stale, "changes": {"title": "late"}}})
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "CONFLICT"
    current = error["extensions"]["current"]
    assert _exact({k: v for k, v in current.items() if k in expected}) == _exact(expected)


def _put(
    tenant: str, id: str, assumed: dict[str, Any] | None, state: dict[str, Any], merge: bool
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "tenantID": tenant,
        "id": id,
        "state": {"task": state},
        "mergeFields": merge,
    }
    if assumed is not None:
        body["assumed"] = {"task": assumed}
    return {"putTask": body}


def _push(gql: GraphQLClient, tenant: str, *entries: dict[str, Any]) -> list[dict[str, Any]]:
    data = gql.data(PUSH, {"i": {"tenantID": tenant, "mutations": list(entries)}})
    results: list[dict[str, Any]] = data["pushChanges"]["results"]
    return results


def test_puts_round_trip_and_a_list_or_an_object_merges_as_one_value(
    gql: GraphQLClient, tenant: str
) -> None:
    (first,) = _push(gql, tenant, _put(tenant, "t1", None, EDGES, False))
    assert first["status"] == "APPLIED", first
    assert _exact(_fields(first["item"])) == _exact(EDGES)
    # The device's assumed state equals the server's exactly (the doubles too): applied.
    moved = {**EDGES, "ratio": 0.5}
    (second,) = _push(gql, tenant, _put(tenant, "t1", EDGES, moved, False))
    assert second["status"] == "APPLIED", second

    # Two devices edit from `moved`: one the tags, the other the address: the
    # field-level merge keeps both.
    tags = {**moved, "tags": [*moved["tags"][:4], "y"]}
    address = {**moved, "address": {**moved["address"], "city": "Nice"}}
    assert _push(gql, tenant, _put(tenant, "t1", moved, tags, True))[0]["status"] == "APPLIED"
    (merged,) = _push(gql, tenant, _put(tenant, "t1", moved, address, True))
    assert merged["status"] == "APPLIED", merged
    both = {**moved, "tags": tags["tags"], "address": address["address"]}
    assert _exact(_fields(merged["item"])) == _exact(both)

    # Both edit the checklist, different items of it: a list is one value, a conflict.
    mine = {**both, "checklist": [{"text": "milk", "done": True}, EDGES["checklist"][1]]}
    theirs = {**both, "checklist": [EDGES["checklist"][0], {"text": "eggs", "done": False}]}
    assert _push(gql, tenant, _put(tenant, "t1", both, theirs, True))[0]["status"] == "APPLIED"
    (conflict,) = _push(gql, tenant, _put(tenant, "t1", both, mine, True))
    assert conflict["status"] == "CONFLICT", conflict
    assert conflict["item"]["checklist"] == theirs["checklist"]
    # So is one sub-field of an object each.
    street = {**theirs, "address": {**theirs["address"], "street": "2 Rue"}}
    floor = {**theirs, "address": {**theirs["address"], "floor": 3}}
    assert _push(gql, tenant, _put(tenant, "t1", theirs, street, True))[0]["status"] == "APPLIED"
    (conflict,) = _push(gql, tenant, _put(tenant, "t1", theirs, floor, True))
    assert conflict["status"] == "CONFLICT", conflict
    (synced,) = _items(gql, tenant)
    assert _exact(_fields(synced)) == _exact(street)


# (field, value, what the message says besides the field): refused by GraphQL's own
# coercion (a bool, 1.5 or a string for an Int, 2**31, NaN and the infinities,
# a null item, an unknown or nested sub-field) or by the field's declaration.
BAD: list[tuple[str, Any, str]] = [
    ("priority", True, "Int cannot represent"),
    ("priority", 1.5, "Int cannot represent"),
    ("priority", "3", "Int cannot represent"),
    ("count", 2**31, "32-bit"),
    ("priority", 6, "Task.priority: must be at most 5"),
    ("priority", 0, "Task.priority: must be at least 1"),
    ("score", float("nan"), "Float cannot represent"),
    ("score", float("inf"), "Float cannot represent"),
    ("score", float("-inf"), "Float cannot represent"),
    ("score", 10**400, "Float cannot represent"),
    ("score", "1.5", "Float cannot represent"),
    ("ratio", 1.0000001, "Task.ratio: must be at most 1"),
    ("ratio", -0.1, "Task.ratio: must be at least 0"),
    ("tags", ["a", "b", "c", "d", "e", "f"], "Task.tags: must hold at most 5 items"),
    ("tags", ["a" * 21], "Task.tags: item 0: must be at most 20 characters"),
    ("tags", ["ok", "bell\x07"], "Task.tags: item 1: must not contain control characters"),
    ("tags", ["a", None], "non-null"),
    ("counts", [1, -1], "Task.counts: item 1: must be at least 0"),
    ("counts", [1, 2.5], "Int cannot represent"),
    ("scores", [1.0, float("nan")], "Float cannot represent"),
    ("days", ["2024-02-30"], "days"),
    ("stages", ["LATER"], "LATER"),
    ("ids", ["x" * 65], "Task.ids: item 0: must be at most 64 characters"),
    ("address", {"country": "FR"}, "country"),
    ("address", {"street": {"name": "x"}}, "street"),
    ("address", {"postalCode": "12345678901"}, "Task.address: postalCode: must be at most 10"),
    ("address", {"floor": 201}, "Task.address: floor: must be at most 200"),
    ("address", {"latitude": 90.5}, "Task.address: latitude: must be at most 90"),
    ("address", {"doorCodes": ["1", "2", "3", "4"]}, "Task.address: doorCodes: must hold at"),
    ("address", "Paris", "TaskAddressInput"),
    ("checklist", [{"text": "x"}] * 11, "Task.checklist: must hold at most 10 items"),
    ("checklist", [{"text": "x", "extra": 1}], "extra"),
    ("checklist", [{"text": "x", "sub": {"text": "y"}}], "sub"),
]


@pytest.mark.parametrize(
    ("field", "value", "why"), BAD, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BAD)]
)
def test_a_bad_value_is_bad_user_input_naming_the_field_and_writes_nothing(
    gql: GraphQLClient, tenant: str, field: str, value: Any, why: str
) -> None:
    body = gql.execute(CREATE, {"i": {"tenantID": tenant, "task": {field: value}}})
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    assert field in error["message"] and why in error["message"], error["message"]
    assert _items(gql, tenant) == []


def test_bad_values_in_an_update_and_in_a_put_are_refused_too(
    gql: GraphQLClient, tenant: str
) -> None:
    created = gql.data(CREATE, {"i": {"tenantID": tenant, "task": {"priority": 2}}})["createTask"]
    task = created["task"]
    body = gql.execute(
        UPDATE,
        {
            "i": {
                "tenantID": tenant,
                "id": task["id"],
                "changeToken": task["changeToken"],
                "changes": {"title": "x", "counts": [3, -3]},
            }
        },
    )
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert error["message"] == "Task.counts: item 1: must be at least 0"
    # The state's and the assumed state's values are checked alike.
    puts: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"priority": 2}, {"priority": 9}),
        ({"priority": 9}, {"priority": 3}),
        ({"priority": 2}, {"address": {"floor": 999}}),
    ]
    for assumed, state in puts:
        (result,) = _push(gql, tenant, _put(tenant, task["id"], assumed, state, False))
        assert result["status"] == "REJECTED", result
        assert result["error"]["code"] == "BAD_USER_INPUT"
        assert result["error"]["message"].startswith(("Task.priority:", "Task.address:"))
    (item,) = _items(gql, tenant)
    assert item["changeToken"] == task["changeToken"] and item["title"] is None
