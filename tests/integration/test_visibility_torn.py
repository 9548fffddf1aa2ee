"""Who sees what on DynamoDB's documented semantics (docs/ordering.md, "Who sees
what"): members write records of every visibility (tenant-wide, private, shared)
and change who sees them, through two server processes over the torn-commit
engine (each transaction applied item by item in random order, with stalls, while
reads see it half applied), as devices of two members sync at once. When the
writes stop, every device holds exactly its member's view."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import pytest

from api.settings import Settings
from api.storage import keys
from tests.integration.test_visibility_sync import _ITEM, _view
from tests.support.gql import GraphQLClient, bearer
from tests.support.servers import api_server
from tests.support.store_state import _query_all
from tests.support.torn import Action, TornEngine

DURATION_S = 10
MEMBERS = ("alice", "bob", "carol")
_CHANGES = (
    "query($t: ID!, $since: ID, $cursor: String, $limit: Int) {"
    " changes(tenantID: $t, since: $since, cursor: $cursor, limit: $limit) {"
    f" items {{ {_ITEM} }} cursor changeToken }} }}"
)
_CREATE = (
    "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id changeToken } } }"
)
_UPDATE = (
    "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) { person { id changeToken } } }"
)
_SHARE = (
    "mutation($i: SetVisibilityInput!) { setVisibility(input: $i) { item { id changeToken } } }"
)


@pytest.fixture(scope="module")
def torn_clients(settings: Settings, torn: TornEngine) -> Iterator[list[GraphQLClient]]:
    via_torn = {"DYNAMODB_ENDPOINT": torn.endpoint}
    with (
        api_server(settings, extra_env=via_torn) as first,
        api_server(settings, clock_offset_ms=-3000, extra_env=via_torn) as second,
    ):
        https = [httpx2.Client(base_url=url, timeout=60) for url in (first, second)]
        yield [GraphQLClient(http) for http in https]
        for http in https:
            http.close()


def _call(client: GraphQLClient, tenant: str, sub: str, query: str, variables: Any) -> Any:
    headers = {**bearer([f"{tenant}:writer"], sub=sub), "x-sync-release": "3"}
    return client.execute(query, variables, headers=headers)


def _audience(rng: random.Random, owner: str) -> dict[str, Any] | None:
    roll = rng.random()
    if roll < 0.35:
        return None  # tenant-wide
    others = [m for m in MEMBERS if m != owner]
    return {"sharedWith": rng.sample(others, rng.randint(0, len(others)))}


def _writer(
    clients: list[GraphQLClient],
    tenant: str,
    sub: str,
    stop: threading.Event,
    counts: dict[str, int],
) -> None:
    rng = random.Random(f"{tenant}-{sub}")
    mine: dict[str, str] = {}  # id -> token of the records it owns
    n = 0
    while not stop.is_set():
        client = rng.choice(clients)
        roll = rng.random()
        if roll < 0.3 or len(mine) < 3:
            n += 1
            i: dict[str, Any] = {"tenantID": tenant, "id": f"{sub}{n}"}
            i.update(person={"givenName": "g"}, visibility=_audience(rng, sub))
            body = _call(client, tenant, sub, _CREATE, {"i": i})
            key, field = "createPerson", "person"
        else:
            id = rng.choice(sorted(mine))
            if roll < 0.6:
                changes = {"familyName": f"f{rng.randint(0, 99)}"}
                i = {"tenantID": tenant, "id": id, "changeToken": mine[id], "changes": changes}
                body = _call(client, tenant, sub, _UPDATE, {"i": i})
                key, field = "updatePerson", "person"
            else:
                vis = _audience(rng, sub)
                i = {"tenantID": tenant, "id": id, "changeToken": mine[id], "visibility": vis}
                body = _call(client, tenant, sub, _SHARE, {"i": i})
                key, field = "setVisibility", "item"
        if body.get("errors"):
            code = body["errors"][0]["extensions"]["code"]
            assert code == "UNAVAILABLE", body
            counts["unavailable"] = counts.get("unavailable", 0) + 1
            continue
        item = body["data"][key][field]
        mine[item["id"]] = item["changeToken"]
        counts[key] = counts.get(key, 0) + 1


class _Device:
    def __init__(self, client: GraphQLClient, tenant: str, sub: str, seed: str) -> None:
        self.client, self.tenant, self.sub = client, tenant, sub
        self.rng = random.Random(seed)
        self.held: dict[str, str] = {}
        self.since: str | None = None

    def sync(self) -> None:
        cursor = None
        limit = self.rng.choice([1, 2, 5, 30])
        while True:
            variables = {"t": self.tenant, "since": self.since, "cursor": cursor, "limit": limit}
            body = _call(self.client, self.tenant, self.sub, _CHANGES, variables)
            assert not body.get("errors"), body
            page = body["data"]["changes"]
            for item in page["items"]:
                if item["__typename"] in ("DeletedItem", "LeftViewItem"):
                    self.held.pop(item["id"], None)
                elif item["changeToken"] > self.held.get(item["id"], ""):
                    self.held[item["id"]] = item["changeToken"]
            if page["changeToken"] is not None:
                self.since = page["changeToken"]
            cursor = page["cursor"]
            if cursor is None:
                return


@pytest.mark.slow
def test_devices_end_with_exactly_their_view_during_torn_commits(
    torn_clients: list[GraphQLClient], tenant: str, ddb: Any, settings: Settings
) -> None:
    stop = threading.Event()
    counts: dict[str, int] = {}
    writers = [
        threading.Thread(target=_writer, args=(torn_clients, tenant, sub, stop, counts))
        for sub in MEMBERS
    ]
    devices = [
        _Device(torn_clients[i % 2], tenant, sub, f"{tenant}-{sub}-{i}")
        for i, sub in enumerate(("alice", "alice", "bob", "bob"))
    ]
    failures: list[BaseException] = []

    def follow(device: _Device) -> None:
        try:
            while not stop.is_set():
                device.sync()
        except BaseException as exc:  # reported below
            failures.append(exc)

    readers = [threading.Thread(target=follow, args=(d,)) for d in devices]
    for thread in (*writers, *readers):
        thread.start()
    time.sleep(DURATION_S)
    # Enough work done, however loaded the machine (5 of each took more than 10 s at
    # a load average of 12.7): the writers go on until then, within a minute.
    enough = time.monotonic() + 60
    while time.monotonic() < enough and not _enough(counts):
        time.sleep(0.5)
    stop.set()
    for thread in (*writers, *readers):
        thread.join(timeout=60)
    assert not failures, failures
    assert _enough(counts), counts
    for device in devices:
        # Until the torn engine has applied every transaction (its stalls end): a
        # change a device's token moved past would stay missing, whatever the wait.
        deadline = time.monotonic() + 20
        while True:
            device.sync()
            view = _view(ddb, settings, tenant, device.sub)
            if device.held == view or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert device.held == view, _explain(ddb, settings, device, view)


def _enough(counts: dict[str, int]) -> bool:
    return counts.get("setVisibility", 0) > 5 and counts.get("createPerson", 0) > 5


def _explain(ddb: Any, settings: Settings, device: _Device, view: dict[str, str]) -> str:
    """Which records differ, what a first sync gets of them, and their entries."""
    fresh = _Device(device.client, device.tenant, device.sub, "fresh")
    fresh.sync()
    ids = {i for i in view.keys() | device.held.keys() if view.get(i) != device.held.get(i)}
    lines = [
        f"{i}: held {device.held.get(i)}, view {view.get(i)}, fresh {fresh.held.get(i)}"
        for i in sorted(ids)
    ]
    for pk in (keys.log_pk(device.tenant), keys.stream_pk(device.tenant, f"m:{device.sub}")):
        for raw in _query_all(ddb, settings.table_name, pk):
            if raw.get("id", {}).get("S") in ids:
                shown = {k: v for k, v in raw.items() if k in ("lv", "del", "vw", "pv")}
                lines.append(f"{pk} {raw['sk']['S']} {shown}")
    return "\n".join(lines)


def _stream_put(tenant: str, sub: str) -> Callable[[Action], bool]:
    pk = keys.stream_pk(tenant, f"m:{sub}")
    return lambda a: a.kind == "Put" and a.key_attributes["pk"]["S"] == pk


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()))
    thread.start()
    return thread, result


def test_a_later_write_cannot_overtake_a_pending_stream_entry(
    torn_clients: list[GraphQLClient], tenant: str, torn: TornEngine
) -> None:
    """T1 (one server) shares a record with bob: its head is applied, bob's stream
    entry pending. T2 (the other server) must not commit past it (the streams'
    check, docs/ordering.md "Who sees what"), or bob's sync could bound itself at
    T2, whose transaction put nothing in bob's stream, and skip T1 for good."""
    first, second = torn_clients
    created = _call(
        first, tenant, "carol", _CREATE, {"i": {"tenantID": tenant, "id": "c0", "person": {}}}
    )
    token = created["data"]["createPerson"]["person"]["changeToken"]
    device = _Device(second, tenant, "bob", "pending")
    device.sync()
    assert device.since == token
    shared = {"tenantID": tenant, "id": "a1", "person": {}, "visibility": {"sharedWith": ["bob"]}}
    with torn.hold(_stream_put(tenant, "bob")) as hold:
        t1, one = _in_thread(lambda: _call(first, tenant, "alice", _CREATE, {"i": shared}))
        assert hold.reached.wait(10)  # T1's head is applied, bob's entry is not
        other = {"tenantID": tenant, "id": "c1", "person": {}}
        t2, _ = _in_thread(lambda: _call(second, tenant, "carol", _CREATE, {"i": other}))
        time.sleep(1.0)  # T2 retries meanwhile (its check meets T1's pending entry)
        device.sync()
        assert device.since == token, "a sync went past T1's pending stream entry"
        hold.release()
        t1.join(30)
        t2.join(30)
    device.sync()
    assert device.held["a1"] == one[0]["data"]["createPerson"]["person"]["changeToken"]
    assert "c1" in device.held
