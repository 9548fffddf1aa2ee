"""The second shipped example app, the task tracker (examples/tasks/catalog.yaml),
served from its file and synced through the reference client: two devices create,
edit offline, conflict and converge on fields of every kind (numbers, lists,
objects, lists of objects), each merged as one value (contract 3.3). The API's own
features are the app's too: membership as data (Member records) and who sees what
from the release its file names (`visibilitySince`: 2), a client of it sent a
LeftViewItem, one of release 1 or of none a DeletedItem (3.12)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from sync_client import HttpTransport, SyncClient
from sync_client.schema import ClientSchema

from api.graphql.context import RELEASE_HEADER
from api.settings import Settings
from tests.support import kinds
from tests.support.gql import GraphQLClient, bearer
from tests.support.servers import api_server

pytestmark = pytest.mark.slow  # a server process of its own

# The reference client's schema as scripts/generate-clients wrote it for the app.
SCHEMA = ClientSchema.load(kinds.FILE.parent / "clients" / "python" / "client_schema.json")
# A device of the app's release 1, before who sees what (visibilitySince: 2).
RELEASE_1 = ClientSchema.of(kinds.ALL, 1)
TASK: dict[str, Any] = {
    "title": "paint the fence",
    "priority": 3,
    "count": -7,
    "score": 0.1,
    "ratio": 1,
    "tags": ["home", "Zoë"],
    "ids": ["p-1"],
    "counts": [0, 2**31 - 1],
    "scores": [1e-300, 2.5],
    "flags": [True, False],
    "days": ["2024-02-29"],
    "times": ["2026-11-21T23:02:38.123Z"],
    "stages": ["TODO", "DONE"],
    "address": {"street": "1 Rue de la Paix", "city": "Paris", "floor": -5, "latitude": 48.8},
    "checklist": [{"text": "buy paint", "done": False}],
}


@pytest.fixture(scope="module")
def url(settings: Settings) -> Iterator[str]:
    with api_server(settings, extra_env=kinds.SERVER_ENV) as server_url:
        yield server_url


def _device(url: str, tmp_path: Path, name: str, tenant: str) -> SyncClient:
    token = bearer([tenant])["Authorization"].split()[1]
    return SyncClient(
        tmp_path / f"{name}.sqlite3", tenant, HttpTransport(url, token), schema=SCHEMA
    )


def _set(value: Any) -> Any:
    """A value as written: an object's sub-fields that are set."""
    if isinstance(value, dict):
        return {k: _set(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_set(v) for v in value]
    return value


def test_the_task_tracker_syncs_every_kind_between_two_devices_and_converges(
    url: str, tmp_path: Path, tenant: str
) -> None:
    phone, tablet = (_device(url, tmp_path, n, tenant) for n in ("phone", "tablet"))
    project = phone.create(
        "Project",
        {"name": "House", "color": "#112233", "budgetCents": 120000, "hoursPerWeek": 2.5}
        | {"memberIDs": ["u1", "u2"], "status": "DOING", "startsOn": "2026-12-01"},
    )
    task = phone.create("Task", TASK | {"ids": [project]})
    assert phone.sync().applied == 2
    tablet.sync()
    synced = tablet.get(task)
    assert synced is not None and synced == phone.get(task)
    assert _set(synced) == {"__typename": "Task", **TASK, "ratio": 1.0, "ids": [project]}
    assert tablet.get(project) == phone.get(project)

    # Both offline: one value each of a list, an object, a number, a list of objects.
    phone.update(task, {"priority": 5, "tags": ["home"], "checklist": []})
    tablet.update(task, {"priority": 1, "address": {"city": "Lyon"}, "score": 2.0})
    assert phone.sync().applied == 1
    assert tablet.sync().conflicts == 1
    phone.sync()
    merged = phone.get(task)
    assert merged is not None and merged == tablet.get(task)
    # priority: the server's (phone's) value; every other field: whoever set it, whole.
    assert _set(merged) == {
        "__typename": "Task",
        **TASK,
        "ratio": 1.0,
        "ids": [project],
        "priority": 5,
        "tags": ["home"],
        "checklist": [],
        "address": {"city": "Lyon"},
        "score": 2.0,
    }


def test_a_bad_value_of_a_kind_is_refused_by_the_server_and_nothing_is_written(
    url: str, tmp_path: Path, tenant: str
) -> None:
    phone = _device(url, tmp_path, "phone", tenant)
    phone.create("Task", {"title": "ok", "priority": 9})  # above its maximum, 5
    report = phone.sync()
    assert report.applied == 0 and len(report.rejected) == 1
    (rejected,) = report.rejected
    assert rejected["error"]["code"] == "BAD_USER_INPUT"
    assert "Task.priority" in rejected["error"]["message"]
    other = _device(url, tmp_path, "other", tenant)
    other.sync()
    assert other.items() == {}


_ITEM = (
    "__typename id changeToken ... on Task { title visibility { owner sharedWith } }"
    " ... on DeletedItem { type } ... on LeftViewItem { type }"
)
_CHANGES = (
    "query($t: ID!, $s: ID) { changes(tenantID: $t, since: $s) "
    f"{{ items {{ {_ITEM} }} cursor changeToken }} }}"
)
_MEMBER = "mutation($i: CreateMemberInput!) { createMember(input: $i) { member { id role } } }"
_TASK = "mutation($i: CreateTaskInput!) { createTask(input: $i) { task { id changeToken } } }"
_SHARE = "mutation($i: SetVisibilityInput!) { setVisibility(input: $i) { item { changeToken } } }"


def test_members_and_who_sees_what_serve_the_task_tracker_from_its_visibility_release(
    url: str, tmp_path: Path, tenant: str
) -> None:
    """Its file names release 2 (visibilitySince): a client of it sets visibilities
    and is sent LeftViewItems; one of release 1 (the reference client with its
    ClientSchema) or of none is sent a DeletedItem and forgets the record."""
    with httpx2.Client(base_url=url, timeout=30) as http:
        gql = GraphQLClient(http)

        def call(sub: str, query: str, i: dict[str, Any], release: int | None = 2) -> Any:
            headers = bearer([tenant], sub=sub)
            if release is not None:
                headers[RELEASE_HEADER] = str(release)
            return gql.execute(query, {"t": tenant, **i}, headers=headers)

        def data(sub: str, query: str, i: dict[str, Any], release: int | None = 2) -> Any:
            body = call(sub, query, i, release)
            assert not body.get("errors"), body
            return body["data"]

        # Membership as data: the claim owner moves the tenant to Member records.
        for sub, role in (("alice", "OWNER"), ("bob", "WRITER")):
            member = {"tenantID": tenant, "id": sub, "member": {"role": role}}
            assert data("alice", _MEMBER, {"i": member})["createMember"]["member"]["role"] == role
        task = {"tenantID": tenant, "id": "t1", "task": {"title": "plan"}}
        shared = {"owner": None, "sharedWith": ["bob"]}
        # A client of release 1 sets no visibility; nothing is written.
        old = call("alice", _TASK, {"i": task | {"visibility": shared}}, release=1)
        assert old["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", old
        created = data("alice", _TASK, {"i": task | {"visibility": shared}})["createTask"]["task"]
        first = data("bob", _CHANGES, {"s": None})["changes"]
        (seen,) = [i for i in first["items"] if i["__typename"] == "Task"]
        assert seen["visibility"] == {"owner": "alice", "sharedWith": ["bob"]}
        bobs = SyncClient(
            tmp_path / "bob.sqlite3",
            tenant,
            HttpTransport(url, bearer([tenant], sub="bob")["Authorization"].split()[1]),
            schema=RELEASE_1,
        )
        bobs.sync()
        assert bobs.get("t1") is not None

        share = {"tenantID": tenant, "id": "t1", "changeToken": created["changeToken"]}
        data("alice", _SHARE, {"i": share | {"visibility": {"sharedWith": []}}})
        since = {"s": first["changeToken"]}
        (left,) = data("bob", _CHANGES, since)["changes"]["items"]
        assert (left["__typename"], left["id"], left["type"]) == ("LeftViewItem", "t1", "TASK")
        for release in (1, None):
            (gone,) = data("bob", _CHANGES, since, release)["changes"]["items"]
            assert (gone["__typename"], gone["id"], gone["type"]) == ("DeletedItem", "t1", "TASK")
        bobs.sync()  # release 1's device: the record left its member's view
        assert bobs.get("t1") is None
        assert data("alice", _CHANGES, since)["changes"]["items"][0]["visibility"] == {
            "owner": "alice",
            "sharedWith": [],
        }
