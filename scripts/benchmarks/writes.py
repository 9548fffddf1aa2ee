"""Writes: write units by AWS's rules (cold and hot), createPerson, updatePerson and a
push of 100 updates against the same raw transactions (and the floor route for
single writes), and write throughput with 8 writers."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx2
from starlette.testclient import TestClient

from api.app import create_app
from api.storage import models
from scripts.benchmarks import raw
from scripts.benchmarks.harness import CREATE, PUSH, TABLE, UPDATE, Harness, realistic_person, units


def units_person() -> dict[str, Any]:
    """The person whose writes the write units are of (and the all-in rows'
    comparators, scripts/benchmarks/datastore.py)."""
    return realistic_person(random.Random(1), 0)


def measure_writes(h: Harness, avg_item: float) -> dict[str, dict[str, float]]:
    """The write rows; returns the write units per mutation, cold and hot."""
    clients = h.clients
    write_units = _write_units(h, units_person(), avg_item)

    # 4. createPerson, each client on its own tenant (no contention).
    counter = iter(range(10**9))
    person = realistic_person(h.rng, 0)

    def create(c: int, i: int) -> None:
        h.post(clients[c], CREATE, {"i": {"tenantID": f"w{c}", "person": person}})

    raw_writes = raw.RawWrites(h.ddb, TABLE, person)
    h.row(
        "createPerson",
        create,
        lambda c, i: raw_writes.create(f"raw{c}", f"r{next(counter)}"),
        units(
            min_write=1,
            # entity, log entry, head (this server wrote the tenant's previous
            # transaction: no chain check)
            write=write_units["create"]["hot"],
            local_api=h.capacity(CREATE, {"i": {"tenantID": "w0", "person": person}}),
            local_raw=raw_writes.create("raw-cap", "r-cap"),
        ),
        floor=lambda c, i: h.floor(c, "create", {"tenant": f"floor{c}", "id": f"f{next(counter)}"}),
    )

    # 5. updatePerson, each client on its own entity.
    owned = [
        h.post(clients[c], CREATE, {"i": {"tenantID": f"w{c}", "person": person}})["createPerson"][
            "person"
        ]
        for c in range(8)
    ]

    def update(c: int, i: int) -> None:
        mine = owned[c]
        variables = _update_input(f"w{c}", mine, {"occupation": f"job {i}"})
        owned[c] = h.post(clients[c], UPDATE, variables)["updatePerson"]["person"]

    for c in range(8):
        raw_writes.create(f"rawu{c}", "u")
        h.floor(c, "create", {"tenant": f"flooru{c}", "id": "u"})
    target = h.post(clients[0], CREATE, {"i": {"tenantID": "w0", "person": person}})
    cap_target = target["createPerson"]["person"]
    h.row(
        "updatePerson",
        update,
        lambda c, i: raw_writes.update(f"rawu{c}", "u"),
        units(
            min_write=1,
            read=1,
            # entity, old entry (delete), new entry, head
            write=write_units["update"]["hot"],
            local_api=h.capacity(UPDATE, _update_input("w0", cap_target, {"occupation": "x"})),
            local_raw=raw_writes.update("rawu0", "u"),
        ),
        floor=lambda c, i: h.floor(c, "update", {"tenant": f"flooru{c}", "id": "u"}),
    )

    # 6. pushChanges of 100 updates, of people created by one push a client, and
    # raw ones by the fewest transactions (one by one, the 2,400 creates took 38 s).
    def created(c: int) -> list[dict[str, Any]]:
        entries = [{"createPerson": {"tenantID": f"w{c}", "person": person}}] * 100
        data = h.post(clients[c], PUSH, {"i": {"tenantID": f"w{c}", "mutations": entries}})
        return [r["item"] for r in data["pushChanges"]["results"]]

    batches = {c: created(c) for c in range(8)}

    def push(c: int, i: int) -> None:
        entries = [
            {"updatePerson": _update_input(f"w{c}", p, {"occupation": f"push {i}"})["i"]}
            for p in batches[c]
        ]
        variables = {"i": {"tenantID": f"w{c}", "mutations": entries}}
        data = h.post(clients[c], PUSH, variables)
        batches[c] = [r["item"] for r in data["pushChanges"]["results"]]

    for c in range(8):
        raw_writes.create_packed(f"rawp{c}", [f"p{n}" for n in range(100)])
        raw_writes.create_packed(f"rawq{c}", [f"p{n}" for n in range(100)])
    push_units = write_units["push of 100 updates"]["hot"]
    # Reads: one BatchGetItem of 100 entities, 1 unit each (items under 4 KB).
    # Pushes a client: a push of 100 and its raw baseline take seconds at 8 clients (a
    # smoke run's least: its figures are not read).
    pushes = {1: 2, 8: 1} if h.smoke else {1: max(5, h.iterations // 10), 8: 3}
    h.row(
        "pushChanges: 100 updates",
        push,
        lambda c, i: [raw_writes.update(f"rawp{c}", f"p{n}") for n in range(100)],
        units(min_write=100, read=100, write=push_units),
        iterations=pushes,
    )
    h.row(
        "  vs fewest raw transactions",
        push,
        lambda c, i: raw_writes.update_packed(f"rawq{c}", [f"p{n}" for n in range(100)]),
        units(min_write=100, read=100, write=push_units),
        iterations=pushes,
    )
    return write_units


def _update_input(tenant: str, person: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    return {
        "i": {
            "tenantID": tenant,
            "id": person["id"],
            "changeToken": person["changeToken"],
            "changes": changes,
        }
    }


def _write_units(
    h: Harness, person: dict[str, Any], avg_item: float
) -> dict[str, dict[str, float]]:
    """AWS's write units of a create, an update and a push of 100 updates, from the
    transactions the API sends: "cold" by a process that has not written the
    tenant yet, after another server's transaction (it reads the head and checks
    that transaction's entries), "hot" by the process that wrote the previous
    transaction (no check)."""
    tenant = "wunits"

    def creates(n: int) -> dict[str, Any]:
        entry = {"createPerson": {"tenantID": tenant, "person": person}}
        return {"i": {"tenantID": tenant, "mutations": [entry] * n}}

    people = [r["item"] for r in h.post_local(PUSH, creates(100))["pushChanges"]["results"]]

    def updates(targets: list[dict[str, Any]], n: int) -> dict[str, Any]:
        entries = [
            {"updatePerson": _update_input(tenant, p, {"occupation": f"units {n}"})["i"]}
            for p in targets
        ]
        return {"i": {"tenantID": tenant, "mutations": entries}}

    result: dict[str, dict[str, float]] = {}
    no_history = dataclasses.replace(h.settings, history=False)
    for name, variables, settings in (
        ("create", lambda n: creates(1), h.settings),
        ("update", lambda n: updates(people[:1], n), h.settings),
        ("update, history off", lambda n: updates(people[:1], n), no_history),
        ("push of 100 updates", lambda n: updates(people, n), h.settings),
        ("push of 100 updates, history off", lambda n: updates(people, n), no_history),
    ):
        result[name] = {}
        h.post(h.clients[0], PUSH, creates(1))  # another server writes the last transaction
        with TestClient(create_app(settings)) as app:
            for state in ("cold", "hot"):
                n = len(result) * 2 + len(result[name])
                if state == "hot":
                    app.post(  # now this process wrote the last transaction
                        "/graphql", json={"query": PUSH, "variables": creates(1)}, headers=h.headers
                    )
                sent, data = sent_write_units(h, variables(n), avg_item, app)
                written = [r["item"] for r in data["pushChanges"]["results"]]
                if name != "create":
                    people[: len(written)] = written
                result[name][state] = sent
    return result


def sent_write_units(
    h: Harness,
    variables: dict[str, Any],
    avg_item: float,
    app: TestClient,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """Write units by AWS's rules of the transactions the API sends for one push (by
    the bench's caller, or `headers`'): 2 per KB of each item (the size of a Put's
    item; deletes and checks touch log entries of about `avg_item` bytes; updates, the
    head and the blob usage item, are HEAD_BYTES)."""
    sizes: list[float] = []
    updated: list[tuple[int, dict[str, Any]]] = []  # (index in sizes, key)

    def collect(params: dict[str, Any], **_: Any) -> None:
        for action in params["TransactItems"]:
            ((kind, body),) = action.items()
            if kind == "Put":
                sizes.append(raw.size(body["Item"]))
            else:
                if kind == "Update":
                    updated.append((len(sizes), body["Key"]))
                sizes.append(raw.HEAD_BYTES if kind == "Update" else avg_item)

    events = models.RecordItem._get_connection().connection.client.meta.events
    event = "provide-client-params.dynamodb.TransactWriteItems"
    events.register(event, collect)
    try:
        response = app.post(
            "/graphql", json={"query": PUSH, "variables": variables}, headers=headers or h.headers
        )
    finally:
        events.unregister(event, collect)
    data: dict[str, Any] = response.json()["data"]
    for index, key in updated:  # an update is billed by its item's size as it leaves it
        item = h.ddb.get_item(TableName=TABLE, Key=key, ConsistentRead=True).get("Item", {})
        sizes[index] = max(sizes[index], raw.size(item))
    return raw.transaction_units(sizes), data


def measure_contention(h: Harness) -> dict[str, dict[str, float]]:
    """Creates per second with 8 writers, on one tenant and on 8."""
    print("==> write throughput", flush=True)
    person = realistic_person(h.rng, 1)
    seconds = 1 if h.smoke else 5 if h.fast else 20
    out = {}
    for label, tenant_of in (
        ("8 writers, 1 tenant", lambda c: "hot"),
        ("8 writers, 8 tenants", lambda c: f"w{c}"),
    ):
        done = [0] * 8
        failed = [0] * 8

        def writer(
            c: int,
            stop: float = time.monotonic() + seconds,
            tenant_of: Callable[[int], str] = tenant_of,
            done: list[int] = done,
            failed: list[int] = failed,
        ) -> None:
            client: httpx2.Client = h.clients[c]
            while time.monotonic() < stop:
                variables = {"i": {"tenantID": tenant_of(c), "person": person}}
                body = client.post("/graphql", json={"query": CREATE, "variables": variables})
                if body.json().get("errors"):
                    failed[c] += 1
                else:
                    done[c] += 1

        threads = [threading.Thread(target=writer, args=(c,)) for c in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out[label] = {"writes_per_s": sum(done) / seconds, "failed": sum(failed)}
        print(f"  {label}: {sum(done) / seconds:.0f} writes/s, {sum(failed)} failed", flush=True)
    return out


def print_write_units(write_units: dict[str, dict[str, float]]) -> None:
    print()
    print(f"{'write units (AWS rules)':<34}{'cold':>8}{'hot':>8}{'per mutation':>14}")
    single = write_units["update"]
    for name, u in write_units.items():
        n = 100 if name.startswith("push") else 1
        per = f"{u['cold'] / n:.2f}/{u['hot'] / n:.2f}"
        print(f"{name:<34}{u['cold']:>8g}{u['hot']:>8g}{per:>14}")
    push = write_units["push of 100 updates"]
    print(
        f"{'  a push per update vs one update':<34}"
        f"{push['cold'] / 100 / single['cold']:>8.2f}{push['hot'] / 100 / single['hot']:>8.2f}"
    )
