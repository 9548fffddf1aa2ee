"""Latency, throughput and DynamoDB cost of the API, next to the raw store in the same run.

Starts its own DynamoDB Local (in memory) and API server, seeds data, measures,
prints one table and saves it as JSON under scripts/bench-results/. Run with
`scripts/bench` (`--fast` takes about two minutes; `--full` measures longer and
uses the full tenant sizes).

Capacity: DynamoDB Local reports ConsumedCapacity, but not by AWS's rules for
transactions, so every row also gives the units AWS would bill, computed from
the item sizes by AWS's rules (reads: 4 KB per unit, strongly consistent;
transactional writes: 2 units per KB per item), and the minimum any design
could pay for the same data.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import math
import os
import platform
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx2
from starlette.testclient import TestClient

from api.app import create_app
from api.auth import make_local_token
from api.domain.catalog import PERSON
from api.domain.records import Record
from api.domain.tokens import next_token, token_time
from api.service.reading import TAIL_ITEMS
from api.settings import Settings
from api.storage import keys, models
from api.storage.store import DynamoStore
from api.storage.table import ensure_table
from scripts.bench_realtime import measure_realtime, print_realtime
from scripts.local_engine import LocalEngine, free_port
from tests.support.servers import api_server
from tests.support.subscribers import pid_listening

RESULTS = Path(__file__).resolve().parent / "bench-results"
SECRET = "bench-secret-" + "x" * 40
WCU_PRICE = 1.25  # $ per million write request units, on demand
RCU_PRICE = 0.25  # $ per million read request units
TENANTS = (
    ["page"]
    + [f"w{i}" for i in range(8)]
    + [
        "small",
        "large",
        "bulk",
        "hot",
        "sweep",
        "realtime",
        "wunits",
    ]
)
# Incremental syncs of this many changes, for their read units against the minimum.
SWEEP_CHANGES = (1, 5, 10, 11, 20, 40, 100, 300)
CHANGES = (
    "query($t: ID!, $s: ID, $c: String, $l: Int) { changes(tenantID: $t, since: $s, cursor: $c,"
    " limit: $l) { items { __typename id changeToken createdAt updatedAt ... on Person {"
    " givenName familyName dateOfBirth relationship phoneNumber emailAddress profileColor"
    " occupation } ... on DeletedItem { type } } cursor changeToken } }"
)
CREATE = (
    "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id changeToken } } }"
)
UPDATE = (
    "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) { person { id changeToken } } }"
)
PUSH = "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status item { id changeToken } } } }"  # noqa: E501

HEAD_BYTES = 70  # the head item: pk, sk, its token and the one before (prev)
RELATIONSHIPS = ["SELF", "PARTNER", "CHILD", "PARENT", "SIBLING", "FRIEND", "COLLEAGUE"]


def realistic_person(rng: random.Random, n: int) -> dict[str, Any]:
    """About 300-500 bytes stored, like a contact in a family or team app."""
    given = rng.choice(["Alexandra", "Benjamin", "Charlotte", "Dmitri", "Eleanor", "Fatima"])
    family = rng.choice(["Montgomery-Smith", "Okonkwo", "Lindqvist", "Fernandez", "Nakamura"])
    return {
        "givenName": f"{given} {n}",
        "familyName": family,
        "dateOfBirth": f"{rng.randint(1940, 2020)}-{rng.randint(1, 12):02d}-"
        f"{rng.randint(1, 28):02d}",
        "relationship": rng.choice(RELATIONSHIPS),
        "phoneNumber": f"+1 415 555 {rng.randint(1000, 9999)}",
        "emailAddress": f"{given.lower()}.{family.lower()}{n}@example.com",
        "profileColor": f"#{rng.randint(0, 0xFFFFFF):06X}",
        "occupation": rng.choice(
            [
                "Software engineer",
                "Pediatric nurse",
                "Retired teacher",
                "Student",
                "Architect and urban planner",
            ]
        ),
    }


@contextlib.contextmanager
def local_engine_settings() -> Iterator[Settings]:
    """An in-memory DynamoDB Local with the bench table, and settings pointing at it."""
    with LocalEngine(free_port(), None) as engine:
        settings = dataclasses.replace(
            Settings.from_env({}),
            dynamodb_endpoint=engine.endpoint,
            auth_secret=SECRET,
            table_name="bench",
        )
        settings.apply_local_credentials()
        ensure_table(settings.dynamodb_client(), settings.table_name)
        yield settings


@dataclasses.dataclass
class Timing:
    p50: float
    p95: float
    p99: float
    rps: float

    @classmethod
    def of(cls, latencies: list[float], wall: float) -> Timing:
        q = statistics.quantiles(latencies, n=100, method="inclusive")
        return cls(p50=q[49], p95=q[94], p99=q[98], rps=len(latencies) / wall)


def measure(fn: Callable[[int, int], object], clients: int, iterations: int) -> Timing:
    """`fn(client, i)` from `clients` threads, `iterations` times each."""
    return Timing.of(*_latencies(fn, clients, iterations))


def measure_pair(
    product: Callable[[int, int], object],
    raw: Callable[[int, int], object],
    clients: int,
    iterations: int,
    rounds: int = 4,
) -> tuple[Timing, Timing]:
    """`product` and `raw` measured in alternating rounds, so that both see the same
    machine: this one's load drifts over seconds (DynamoDB Local's JIT and GC)."""
    rounds = max(1, min(rounds, iterations))
    runs: dict[str, tuple[list[float], float]] = {"product": ([], 0.0), "raw": ([], 0.0)}
    for n in range(rounds):
        share = iterations // rounds + (1 if n < iterations % rounds else 0)
        for name, fn in (("product", product), ("raw", raw)):
            latencies, wall = _latencies(fn, clients, share)
            total, spent = runs[name]
            runs[name] = (total + latencies, spent + wall)
    return Timing.of(*runs["product"]), Timing.of(*runs["raw"])


def _latencies(
    fn: Callable[[int, int], object], clients: int, iterations: int
) -> tuple[list[float], float]:
    """Milliseconds of each call of `fn(client, i)`, from `clients` threads, and the
    wall time in seconds."""
    latencies: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def run(client: int) -> None:
        mine = []
        barrier.wait()
        for i in range(iterations):
            started = time.perf_counter()
            fn(client, i)
            mine.append((time.perf_counter() - started) * 1000)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, time.perf_counter() - started


class Bench:
    def __init__(self, fast: bool) -> None:
        self.fast = fast
        self.iterations = 60 if fast else 300
        self.large = 50_000
        self.rows: list[dict[str, Any]] = []
        self.rng = random.Random(7)

    # --- setup ----------------------------------------------------------------

    def seed(self, tenant: str, n: int) -> list[Record]:
        """n realistic people, bulk-loaded with the store's own item layout."""
        token = None
        records = []
        for i in range(n):
            token = next_token(int(time.time() * 1000) - 60_000, token)
            at = token_time(token)
            records.append(
                Record(
                    PERSON,
                    tenant,
                    f"p{i:06d}",
                    token,
                    at,
                    at,
                    fields=PERSON.normalize_changes(realistic_person(self.rng, i)),
                )
            )
        for start in range(0, n, 5000):
            DynamoStore().bulk_load(tenant, records[start : start + 5000])
        return records

    # --- calls ------------------------------------------------------------------

    def post(self, client: httpx2.Client, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = client.post(
            "/graphql", json={"query": query, "variables": variables}
        ).json()
        if body.get("errors"):
            raise RuntimeError(body["errors"])
        return body["data"]

    def _poster(
        self, client: httpx2.Client, variables: dict[str, Any]
    ) -> Callable[[int, int], object]:
        """A `measure` function posting the changes query with these variables."""
        return lambda _client, _i: self.post(client, CHANGES, variables)

    def capacity(self, query: str, variables: dict[str, Any]) -> float:
        """Capacity the API consumed for one request (from its request log line)."""
        self.captured.clear()
        response = self.local.post(
            "/graphql", json={"query": query, "variables": variables}, headers=self.headers
        )
        assert "errors" not in response.json(), response.text
        return float(self.captured[-1]["capacityUnits"])

    def measure_write_units(
        self, server: httpx2.Client, person: dict[str, Any], avg_item: float
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

        people = [r["item"] for r in self.post_local(PUSH, creates(100))["pushChanges"]["results"]]

        def updates(targets: list[dict[str, Any]], n: int) -> dict[str, Any]:
            entries = [
                {
                    "updatePerson": {
                        "tenantID": tenant,
                        "id": p["id"],
                        "changeToken": p["changeToken"],
                        "changes": {"occupation": f"units {n}"},
                    }
                }
                for p in targets
            ]
            return {"i": {"tenantID": tenant, "mutations": entries}}

        units: dict[str, dict[str, float]] = {}
        for name, variables in (
            ("create", lambda n: creates(1)),
            ("update", lambda n: updates(people[:1], n)),
            ("push of 100 updates", lambda n: updates(people, n)),
        ):
            units[name] = {}
            self.post(server, PUSH, creates(1))  # another server writes the last transaction
            for state in ("cold", "hot"):
                n = len(units) * 2 + len(units[name])
                if state == "cold":
                    with TestClient(create_app(self.settings)) as fresh:
                        sent, data = self.sent_write_units(PUSH, variables(n), avg_item, fresh)
                else:
                    self.post_local(PUSH, creates(1))  # now this process wrote the last one
                    sent, data = self.sent_write_units(PUSH, variables(n), avg_item, self.local)
                written = [r["item"] for r in data["pushChanges"]["results"]]
                if name != "create":
                    people[: len(written)] = written
                units[name][state] = sent
        return units

    def sent_write_units(
        self, query: str, variables: dict[str, Any], avg_item: float, app: TestClient
    ) -> tuple[int, dict[str, Any]]:
        """Write units by AWS's rules of the transactions the API sends for one request:
        2 per KB of each item (the size of a Put's item; deletes and checks touch log
        entries of about `avg_item` bytes; the head is HEAD_BYTES)."""
        sizes: list[float] = []

        def collect(params: dict[str, Any], **_: Any) -> None:
            for action in params["TransactItems"]:
                ((kind, body),) = action.items()
                if kind == "Put":
                    sizes.append(_size(body["Item"]))
                else:
                    sizes.append(HEAD_BYTES if kind == "Update" else avg_item)

        events = models.RecordItem._get_connection().connection.client.meta.events
        event = "provide-client-params.dynamodb.TransactWriteItems"
        events.register(event, collect)
        try:
            response = app.post(
                "/graphql", json={"query": query, "variables": variables}, headers=self.headers
            )
        finally:
            events.unregister(event, collect)
        data: dict[str, Any] = response.json()["data"]
        return _transaction_units(sizes), data

    def read_units(
        self,
        minimum: float,
        query: str,
        variables: dict[str, Any],
        raw: Callable[[], dict[str, Any]],
    ) -> dict[str, Any]:
        """For a read, DynamoDB Local's report follows AWS's rules: use it."""
        api = self.capacity(query, variables)
        consumed = raw().get("ConsumedCapacity") or {}
        return self.units(
            min_read=minimum,
            read=api,
            local_api=api,
            local_raw=float(consumed.get("CapacityUnits", 0)),
        )

    # --- rows -------------------------------------------------------------------

    def row(
        self,
        name: str,
        product: Callable[[int, int], object],
        raw: Callable[[int, int], Any],
        units: dict[str, Any],
        iterations: dict[int, int] | None = None,
    ) -> None:
        """Measure `product` and `raw` with 1 and 8 clients; one table row each."""
        counts = iterations or {1: self.iterations, 8: max(10, self.iterations // 4)}
        for clients in (1, 8):
            iterations_n = counts[clients]
            p, r = measure_pair(product, raw, clients, iterations_n)
            self.rows.append(
                {
                    "operation": name,
                    "clients": clients,
                    "p50_ms": p.p50,
                    "p95_ms": p.p95,
                    "p99_ms": p.p99,
                    "rps": p.rps,
                    "raw_p50_ms": r.p50,
                    "raw_rps": r.rps,
                    "ratio_p50": p.p50 / r.p50,
                    **units,
                }
            )
            print(
                f"  {name:<34} x{clients}: p50 {p.p50:6.2f} ms (raw {r.p50:6.2f}, "
                f"ratio {p.p50 / r.p50:4.2f}), {p.rps:7.1f} req/s",
                flush=True,
            )

    def run(self) -> dict[str, Any]:
        with local_engine_settings() as settings:
            self.settings = settings
            self.ddb = boto3.client(
                "dynamodb", endpoint_url=settings.dynamodb_endpoint, region_name="us-east-1"
            )
            models.bind(settings)
            logging.getLogger("api").setLevel(logging.WARNING)
            token = make_local_token(SECRET, "bench", TENANTS, 24 * 3600)
            self.headers = {"Authorization": f"Bearer {token}"}
            self.captured: list[dict[str, Any]] = []

            class Capture(logging.Handler):
                def emit(inner, record: logging.LogRecord) -> None:  # noqa: N805
                    self.captured.append(json.loads(record.getMessage()))

            request_logger = logging.getLogger("api.request")
            request_logger.addHandler(Capture())
            request_logger.setLevel(logging.INFO)
            request_logger.propagate = False

            print("==> seeding", flush=True)
            started = time.perf_counter()
            self.page = self.seed("page", 1000)
            self.small = self.seed("small", 1000)
            self.large_records = self.seed("large", self.large)
            self.bulk = self.seed("bulk", 10_000)
            self.seed("sweep", 1000)
            print(
                f"    {1000 + 1000 + self.large + 10_000 + 1000} items in "
                f"{time.perf_counter() - started:.0f} s",
                flush=True,
            )
            with api_server(settings) as url, TestClient(create_app(settings)) as local:
                self.local = local
                self.server_pid = pid_listening(url)
                clients = [
                    httpx2.Client(base_url=url, headers=self.headers, timeout=60) for _ in range(8)
                ]
                try:
                    self.measure_all(clients)
                finally:
                    for c in clients:
                        c.close()
            print("==> realtime", flush=True)
            self.realtime = measure_realtime(
                settings, self.ddb, self.headers["Authorization"], self.fast
            )
        return self.report()

    def measure_all(self, clients: list[httpx2.Client]) -> None:
        table = "bench"
        item_bytes = [_item_size(self.ddb, table, r) for r in self.page[:100]]
        page_bytes = sum(item_bytes)
        avg_item = page_bytes / len(item_bytes)
        print(f"==> rows (items average {avg_item:.0f} bytes)", flush=True)
        person_for_units = realistic_person(random.Random(1), 0)

        def query_page(limit: int, after: str | None = None) -> dict[str, Any]:
            cond = "pk = :p" + (" AND sk > :a" if after else "")
            values = {":p": {"S": keys.log_pk("page")}}
            if after:
                values[":a"] = {"S": after}
            return self.ddb.query(
                TableName=table,
                KeyConditionExpression=cond,
                ExpressionAttributeValues=values,
                Limit=limit,
                ConsistentRead=True,
                ReturnConsumedCapacity="TOTAL",
            )

        # 1. A bulk page of 100 people.
        self.row(
            "changes: page of 100 Person",
            lambda c, i: self.post(clients[c], CHANGES, {"t": "page", "l": 100}),
            lambda c, i: query_page(100),
            self.read_units(
                math.ceil(page_bytes / 4096),
                CHANGES,
                {"t": "page", "l": 100},
                lambda: query_page(100),
            ),
        )

        def query_tail(after: str) -> dict[str, Any]:
            """The first read of an incremental sync: the head and the newest entries."""
            return self.ddb.query(
                TableName=table,
                KeyConditionExpression="pk = :p AND sk > :a",
                ExpressionAttributeValues={":p": {"S": keys.log_pk("page")}, ":a": {"S": after}},
                ScanIndexForward=False,
                Limit=TAIL_ITEMS + 1,
                ConsistentRead=True,
                ReturnConsumedCapacity="TOTAL",
            )

        # 2. A poll with no changes.
        head = self.page[-1].change_token
        self.row(
            "changes: poll, no changes",
            lambda c, i: self.post(clients[c], CHANGES, {"t": "page", "s": head}),
            lambda c, i: query_tail(head),
            self.read_units(1, CHANGES, {"t": "page", "s": head}, lambda: query_tail(head)),
        )

        # 3. An incremental sync of 10 changes.
        since = self.touch("page", 10)
        ten_bytes = sum(item_bytes[:10])
        self.row(
            "changes: incremental, 10 changes",
            lambda c, i: self.post(clients[c], CHANGES, {"t": "page", "s": since}),
            lambda c, i: query_tail(since),
            self.read_units(
                math.ceil(ten_bytes / 4096),
                CHANGES,
                {"t": "page", "s": since},
                lambda: query_tail(since),
            ),
        )

        self.write_units = self.measure_write_units(clients[0], person_for_units, avg_item)

        # 4. createPerson, each client on its own tenant (no contention).
        counter = iter(range(10**9))
        person = realistic_person(self.rng, 0)

        def create(c: int, i: int) -> None:
            self.post(clients[c], CREATE, {"i": {"tenantID": f"w{c}", "person": person}})

        raw_create = _RawWrites(self.ddb, table, person)
        self.row(
            "createPerson",
            create,
            lambda c, i: raw_create.create(f"raw{c}", f"r{next(counter)}"),
            self.units(
                min_write=1,
                # entity, log entry, head (this server wrote the tenant's previous
                # transaction: no chain check)
                write=self.write_units["create"]["hot"],
                local_api=self.capacity(CREATE, {"i": {"tenantID": "w0", "person": person}}),
                local_raw=raw_create.create("raw-cap", "r-cap"),
            ),
        )

        # 5. updatePerson, each client on its own entity.
        owned = [
            self.post(clients[c], CREATE, {"i": {"tenantID": f"w{c}", "person": person}})[
                "createPerson"
            ]["person"]
            for c in range(8)
        ]

        def update(c: int, i: int) -> None:
            mine = owned[c]
            data = self.post(
                clients[c],
                UPDATE,
                {
                    "i": {
                        "tenantID": f"w{c}",
                        "id": mine["id"],
                        "changeToken": mine["changeToken"],
                        "changes": {"occupation": f"job {i}"},
                    }
                },
            )
            owned[c] = data["updatePerson"]["person"]

        for c in range(8):
            raw_create.create(f"rawu{c}", "u")
        cap_target = self.post(clients[0], CREATE, {"i": {"tenantID": "w0", "person": person}})[
            "createPerson"
        ]["person"]
        self.row(
            "updatePerson",
            update,
            lambda c, i: raw_create.update(f"rawu{c}", "u"),
            self.units(
                min_write=1,
                read=1,
                # entity, old entry (delete), new entry, head
                write=self.write_units["update"]["hot"],
                local_api=self.capacity(
                    UPDATE,
                    {
                        "i": {
                            "tenantID": "w0",
                            "id": cap_target["id"],
                            "changeToken": cap_target["changeToken"],
                            "changes": {"occupation": "x"},
                        }
                    },
                ),
                local_raw=raw_create.update("rawu0", "u"),
            ),
        )

        # 6. pushChanges of 100 updates.
        batches = {
            c: [
                self.post(clients[c], CREATE, {"i": {"tenantID": f"w{c}", "person": person}})[
                    "createPerson"
                ]["person"]
                for _ in range(100)
            ]
            for c in range(8)
        }

        def push_variables(c: int, i: int) -> dict[str, Any]:
            entries = [
                {
                    "updatePerson": {
                        "tenantID": f"w{c}",
                        "id": p["id"],
                        "changeToken": p["changeToken"],
                        "changes": {"occupation": f"push {i}"},
                    }
                }
                for p in batches[c]
            ]
            return {"i": {"tenantID": f"w{c}", "mutations": entries}}

        def push(c: int, i: int) -> None:
            data = self.post(clients[c], PUSH, push_variables(c, i))
            batches[c] = [r["item"] for r in data["pushChanges"]["results"]]

        for c in range(8):
            for n in range(100):
                raw_create.create(f"rawp{c}", f"p{n}")
                raw_create.create(f"rawq{c}", f"p{n}")
        push_units = self.write_units["push of 100 updates"]["hot"]
        # Reads: one BatchGetItem of 100 entities, 1 unit each (items under 4 KB).
        iterations_push = max(5, self.iterations // 10)
        self.row(
            "pushChanges: 100 updates",
            push,
            lambda c, i: [raw_create.update(f"rawp{c}", f"p{n}") for n in range(100)],
            self.units(min_write=100, read=100, write=push_units),
            iterations={1: iterations_push, 8: 3},
        )
        self.row(
            "  vs fewest raw transactions",
            push,
            lambda c, i: raw_create.update_packed(f"rawq{c}", [f"p{n}" for n in range(100)]),
            self.units(min_write=100, read=100, write=push_units),
            iterations={1: iterations_push, 8: 3},
        )

        self.scale(clients[0])
        self.contention(clients)

    def touch(self, tenant: str, n: int) -> str:
        """Update the n oldest entities of a tenant through the API; the token before them."""
        first = self.post_local(CHANGES, {"t": tenant, "l": n})["changes"]
        since = self.ddb.get_item(TableName="bench", ConsistentRead=True, Key=_head_key(tenant))[
            "Item"
        ]["tok"]["S"]
        for item in first["items"]:
            self.post_local(
                UPDATE,
                {
                    "i": {
                        "tenantID": tenant,
                        "id": item["id"],
                        "changeToken": item["changeToken"],
                        "changes": {"occupation": "changed"},
                    }
                },
            )
        return str(since)

    def post_local(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        response = self.local.post(
            "/graphql", json={"query": query, "variables": variables}, headers=self.headers
        )
        body: dict[str, Any] = response.json()
        assert "errors" not in body, body
        return body["data"]

    def scale(self, client: httpx2.Client) -> None:
        print("==> scale", flush=True)
        results = {}
        for tenant, size in (("small", 1000), ("large", self.large)):
            since = self.touch(tenant, 10)
            head = self.ddb.get_item(TableName="bench", ConsistentRead=True, Key=_head_key(tenant))[
                "Item"
            ]["tok"]["S"]
            sync_vars = {"t": tenant, "s": since}
            poll_vars = {"t": tenant, "s": head}
            sync = measure(self._poster(client, sync_vars), 1, self.iterations)
            poll = measure(self._poster(client, poll_vars), 1, self.iterations)
            results[tenant] = {
                "size": size,
                "sync_p50_ms": sync.p50,
                "poll_p50_ms": poll.p50,
                "sync_units": self.capacity(CHANGES, {"t": tenant, "s": since}),
                "poll_units": self.capacity(CHANGES, {"t": tenant, "s": head}),
            }
        self.scale_rows = results
        self.sweep_rows = [self.sync_units("sweep", k) for k in SWEEP_CHANGES]
        # A full bulk sync of 10,000 items, as a new device does.
        before = _peak_rss_kb(self.server_pid)
        started = time.perf_counter()
        pages = 0
        cursor = None
        while True:
            variables = {"t": "bulk", "l": 1000, "c": cursor}
            data = self.post(client, CHANGES, variables)["changes"]
            pages += 1
            cursor = data["cursor"]
            if cursor is None:
                break
        elapsed = time.perf_counter() - started
        # The same sync in process, for the capacity of each page.
        units, _, _ = self.sync_in_process({"t": "bulk", "l": 1000})
        self.bulk_row = {
            "items": 10_000,
            "pages": pages,
            "seconds": elapsed,
            "read_units": units,
            "min_read_units": math.ceil(
                sum(_item_size(self.ddb, "bench", r) for r in self.bulk[:200]) / 200 * 10_000 / 4096
            ),
            "server_peak_rss_mb_before": before / 1024,
            "server_peak_rss_mb_after": _peak_rss_kb(self.server_pid) / 1024,
        }
        print(f"  bulk sync 10,000: {elapsed:.2f} s, {pages} pages", flush=True)

    def sync_in_process(self, variables: dict[str, Any]) -> tuple[float, int, int]:
        """Read units, pages and DynamoDB calls of one whole sync through the in-process
        app, following cursors from the first page's `variables`."""
        units, pages, calls, cursor = 0.0, 0, 0, None
        while True:
            self.captured.clear()
            page_vars = variables if cursor is None else {**variables, "s": None, "c": cursor}
            cursor = self.post_local(CHANGES, page_vars)["changes"]["cursor"]
            units += float(self.captured[-1]["capacityUnits"])
            calls += int(self.captured[-1]["dynamodbCalls"])
            pages += 1
            if cursor is None:
                return units, pages, calls

    def sync_units(self, tenant: str, k: int) -> dict[str, Any]:
        """Read units of a whole incremental sync of k changes, against the minimum: its
        changed items' bytes in 4 KB units."""
        since = self.touch(tenant, k)
        units, pages, calls = self.sync_in_process({"t": tenant, "s": since})
        changed = self.ddb.query(
            TableName="bench",
            KeyConditionExpression="pk = :p AND sk BETWEEN :a AND :h",
            ExpressionAttributeValues={
                ":p": {"S": keys.log_pk(tenant)},
                ":a": {"S": since},
                ":h": {"S": keys.HEAD_SK},
            },
            ConsistentRead=True,
        )["Items"]
        size = sum(_size(i) for i in changed if i["sk"]["S"] not in (since, keys.HEAD_SK))
        minimum = math.ceil(size / 4096)
        return {
            "changes": k,
            "pages": pages,
            "queries": calls,
            "read_units": units,
            "min_read_units": minimum,
        }

    def contention(self, clients: list[httpx2.Client]) -> None:
        print("==> write throughput", flush=True)
        person = realistic_person(self.rng, 1)
        seconds = 5 if self.fast else 20
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
                while time.monotonic() < stop:
                    body = (
                        clients[c]
                        .post(
                            "/graphql",
                            json={
                                "query": CREATE,
                                "variables": {"i": {"tenantID": tenant_of(c), "person": person}},
                            },
                        )
                        .json()
                    )
                    if body.get("errors"):
                        failed[c] += 1
                    else:
                        done[c] += 1

            threads = [threading.Thread(target=writer, args=(c,)) for c in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            out[label] = {"writes_per_s": sum(done) / seconds, "failed": sum(failed)}
            print(
                f"  {label}: {sum(done) / seconds:.0f} writes/s, {sum(failed)} failed", flush=True
            )
        self.contention_rows = out

    @staticmethod
    def units(
        *,
        min_read: float = 0,
        min_write: float = 0,
        read: float = 0,
        write: float = 0,
        local_api: float | None = None,
        local_raw: float | None = None,
    ) -> dict[str, Any]:
        """Units per operation: the minimum, this design's (by AWS's rules), Local's report."""
        return {
            "min_read_units": min_read,
            "min_write_units": min_write,
            "read_units": read,
            "write_units": write,
            "local_api_units": local_api,
            "local_raw_units": local_raw,
            "cost_per_million_usd": round(read * RCU_PRICE + write * WCU_PRICE, 2),
        }

    def report(self) -> dict[str, Any]:
        header = (
            f"{'operation':<34}{'cl':>3}{'p50':>8}{'p95':>8}{'p99':>8}{'req/s':>8}"
            f"{'raw p50':>9}{'ratio':>7}{'units':>11}{'minimum':>11}{'$/M ops':>8}"
        )
        print()
        print(header)
        print("-" * len(header))
        for r in self.rows:
            units = f"{r['read_units']:g}r+{r['write_units']:g}w"
            minimum = f"{r['min_read_units']:g}r+{r['min_write_units']:g}w"
            print(
                f"{r['operation']:<34}{r['clients']:>3}{r['p50_ms']:>8.2f}{r['p95_ms']:>8.2f}"
                f"{r['p99_ms']:>8.2f}{r['rps']:>8.0f}{r['raw_p50_ms']:>9.2f}"
                f"{r['ratio_p50']:>7.2f}{units:>11}{minimum:>11}"
                f"{r['cost_per_million_usd']:>8.2f}"
            )
        print()
        print(f"{'write units (AWS rules)':<34}{'cold':>8}{'hot':>8}{'per mutation':>14}")
        single = self.write_units["update"]
        for name, u in self.write_units.items():
            n = 100 if name.startswith("push") else 1
            per = f"{u['cold'] / n:.2f}/{u['hot'] / n:.2f}"
            print(f"{name:<34}{u['cold']:>8g}{u['hot']:>8g}{per:>14}")
        push = self.write_units["push of 100 updates"]
        print(
            f"{'  a push per update vs one update':<34}"
            f"{push['cold'] / 100 / single['cold']:>8.2f}{push['hot'] / 100 / single['hot']:>8.2f}"
        )
        print()
        small, large = self.scale_rows["small"], self.scale_rows["large"]
        print(f"{'scale':<34}{'1,000':>10}{f'{self.large:,}':>10}{'ratio':>8}")
        for key, label in (
            ("sync_p50_ms", "incremental sync (10) p50 ms"),
            ("poll_p50_ms", "poll p50 ms"),
            ("sync_units", "incremental sync read units"),
            ("poll_units", "poll read units"),
        ):
            ratio = large[key] / small[key] if small[key] else float("nan")
            print(f"{label:<34}{small[key]:>10.2f}{large[key]:>10.2f}{ratio:>8.2f}")
        print(
            f"{'incremental sync of k changes':<34}{'units':>10}{'minimum':>10}{'ratio':>8}"
            f"{'Queries':>9}"
        )
        for w in self.sweep_rows:
            label = f"  k = {w['changes']} ({w['pages']} page{'s' if w['pages'] > 1 else ''})"
            print(
                f"{label:<34}{w['read_units']:>10g}{w['min_read_units']:>10}"
                f"{w['read_units'] / w['min_read_units']:>8.2f}{w['queries']:>9}"
            )
        b = self.bulk_row
        print(
            f"bulk sync of 10,000 items: {b['seconds']:.2f} s, {b['pages']} pages, "
            f"{b['read_units']:.0f} read units (minimum {b['min_read_units']}), server peak "
            f"RSS {b['server_peak_rss_mb_after']:.0f} MB"
        )
        for label, c in self.contention_rows.items():
            print(f"{label}: {c['writes_per_s']:.0f} creates/s, {c['failed']} failed")
        print_realtime(self.realtime)
        return {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": {
                "node": platform.node(),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            "mode": "fast" if self.fast else "full",
            "rows": self.rows,
            "scale": self.scale_rows,
            "incremental_sync_units": self.sweep_rows,
            "bulk_sync": self.bulk_row,
            "write_throughput": self.contention_rows,
            "write_units": self.write_units,
            "realtime": self.realtime,
        }


class _RawWrites:
    """The same DynamoDB writes the API makes, issued directly with boto3."""

    def __init__(self, ddb: Any, table: str, person: dict[str, Any]) -> None:
        self.ddb, self.table = ddb, table
        self.fields = {k: {"S": v} for k, v in PERSON.normalize_changes(person).items()}
        self.tokens: dict[tuple[str, str], str] = {}
        self.last: dict[str, str | None] = {}
        self.lock = threading.Lock()

    def _token(self, tenant: str) -> str:
        with self.lock:
            token = next_token(int(time.time() * 1000), self.last.get(tenant))
            self.last[tenant] = token
            return token

    def _record(self, tenant: str, entity_id: str, token: str, pk: str, sk: str) -> dict[str, Any]:
        return {
            "pk": {"S": pk},
            "sk": {"S": sk},
            "ty": {"S": "PERSON"},
            "id": {"S": entity_id},
            "tok": {"S": token},
            "ca": {"N": "1795300000000"},
            "f": {"M": self.fields},
        }

    def create(self, tenant: str, entity_id: str) -> float:
        return self._transact(tenant, [(entity_id, None)])

    def update(self, tenant: str, entity_id: str) -> float:
        self.ddb.get_item(
            TableName=self.table,
            ConsistentRead=True,
            Key={"pk": {"S": keys.tenant_pk(tenant)}, "sk": {"S": keys.entity_sk(entity_id)}},
        )
        return self._transact(tenant, [(entity_id, self.tokens[(tenant, entity_id)])])

    def update_packed(self, tenant: str, entity_ids: list[str]) -> float:
        """Updates of distinct entities in the fewest transactions that hold them: one
        BatchGetItem, then 33 updates (99 items) and the head per transaction."""
        for start in range(0, len(entity_ids), 100):
            wanted = [
                {"pk": {"S": keys.tenant_pk(tenant)}, "sk": {"S": keys.entity_sk(i)}}
                for i in entity_ids[start : start + 100]
            ]
            self.ddb.batch_get_item(
                RequestItems={self.table: {"Keys": wanted, "ConsistentRead": True}}
            )
        units = 0.0
        for start in range(0, len(entity_ids), 33):
            chunk = entity_ids[start : start + 33]
            units += self._transact(tenant, [(i, self.tokens[(tenant, i)]) for i in chunk])
        return units

    def _transact(self, tenant: str, writes: list[tuple[str, str | None]]) -> float:
        """The API's TransactWriteItems for (entity, old token or None) pairs of one
        writer: entities, old log entries, new log entries linked in order, the head.
        The writer wrote the previous transaction itself, so there is no chain check."""
        with self.lock:
            head = self.last.get(tenant)
        items: list[dict[str, Any]] = []
        prev = head
        for entity_id, old in writes:
            token = self._token(tenant)
            condition = "attribute_not_exists(pk)" if old is None else "tok = :old"
            put: dict[str, Any] = {
                "TableName": self.table,
                "ConditionExpression": condition,
                "Item": self._record(
                    tenant, entity_id, token, keys.tenant_pk(tenant), keys.entity_sk(entity_id)
                ),
            }
            if old is not None:
                put["ExpressionAttributeValues"] = {":old": {"S": old}}
                items.append({"Delete": {"TableName": self.table, **_log_key(tenant, old)}})
            items.append({"Put": put})
            entry = self._record(tenant, entity_id, token, keys.log_pk(tenant), token)
            if prev is not None:
                entry["pv"] = {"S": prev}
            items.append({"Put": {"TableName": self.table, "Item": entry}})
            self.tokens[(tenant, entity_id)] = prev = token
        assert prev is not None
        items.append(_head_update(self.table, tenant, prev, head, len(writes)))
        response = self.ddb.transact_write_items(
            ReturnConsumedCapacity="TOTAL", TransactItems=items
        )
        return sum(float(e["CapacityUnits"]) for e in response.get("ConsumedCapacity", []))


def _transaction_units(item_sizes: list[float]) -> int:
    """AWS: a transactional write costs 2 units per KB (rounded up) of each item."""
    return sum(2 * max(1, math.ceil(size / 1024)) for size in item_sizes)


def _head_key(tenant: str) -> dict[str, Any]:
    return {"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": keys.HEAD_SK}}


def _log_key(tenant: str, token: str) -> dict[str, Any]:
    return {"Key": {"pk": {"S": keys.log_pk(tenant)}, "sk": {"S": token}}}


def _head_update(
    table: str, tenant: str, token: str, head: str | None, entries: int
) -> dict[str, Any]:
    """The head moves from `head` to `token`, remembering `head` as its prev and how
    many entries the transaction wrote."""
    values: dict[str, Any] = {":t": {"S": token}, ":n": {"N": str(entries)}}
    update: dict[str, Any] = {
        "TableName": table,
        "Key": _head_key(tenant),
        "UpdateExpression": "SET tok = :t, n = :n",
        "ConditionExpression": "attribute_not_exists(tok)",
        "ExpressionAttributeValues": values,
    }
    if head is not None:
        update["UpdateExpression"] += ", pv = :p"
        update["ConditionExpression"] = "tok = :p"
        values[":p"] = {"S": head}
    return {"Update": update}


def _item_size(ddb: Any, table: str, record: Record) -> int:
    """DynamoDB's size of an item: attribute names plus values, in bytes."""
    item = ddb.get_item(
        TableName=table,
        Key={"pk": {"S": keys.log_pk(record.tenant_id)}, "sk": {"S": record.change_token}},
    )["Item"]
    return _size(item)


def _size(value: Any) -> int:
    total = 0
    for name, typed in value.items():
        total += len(name.encode())
        ((kind, inner),) = typed.items()
        if kind == "S":
            total += len(inner.encode())
        elif kind == "N":
            total += len(inner) // 2 + 1
        elif kind == "BOOL":
            total += 1
        elif kind == "M":
            total += 3 + _size(inner)
        else:
            total += len(str(inner))
    return total


def _peak_rss_kb(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1])
    return float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--fast", action="store_true", help="about two minutes (default)")
    mode.add_argument("--full", action="store_true", help="more iterations")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    args = parser.parse_args(argv)
    result = Bench(fast=not args.full).run()
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.out / f"{stamp}-{platform.node() or 'machine'}-{result['mode']}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"\nsaved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
