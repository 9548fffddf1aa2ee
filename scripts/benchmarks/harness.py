"""The harness: a DynamoDB Local with the bench table, seeded tenants, the product's
server and the floor's, timing (product and raw in alternating rounds), rows with
their units, and the table they print."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
from starlette.testclient import TestClient

from api.domain.records import Record
from api.domain.tokens import next_token, token_time
from api.settings import Settings
from api.storage.store import DynamoStore
from api.storage.table import ensure_table
from scripts.benchmarks.prices import PRICES_AS_OF, per_million_ops
from scripts.benchmarks.raw import head_token
from scripts.local_engine import LocalEngine, free_port
from scripts.local_s3 import LocalS3, ensure_bucket
from tests.support.family import PERSON

SECRET = "bench-secret-" + "x" * 40
TABLE = "bench"
BUCKET = "bench-blobs"
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
RELATIONSHIPS = ["SELF", "PARTNER", "CHILD", "PARENT", "SIBLING", "FRIEND", "COLLEAGUE"]

Call = Callable[[int, int], object]  # (client, iteration)


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


@dataclasses.dataclass(frozen=True)
class LocalEngines:
    settings: Settings
    blobs: LocalS3  # its request log counts the S3 requests of an attachment


@contextlib.contextmanager
def local_engines(short_lived: bool = False) -> Iterator[LocalEngines]:
    """An in-memory DynamoDB Local with the bench table and an S3 engine (moto's
    server, in memory) with the bench bucket, and settings pointing at both: the
    servers the bench starts (`api_server`) never reach AWS, /healthz included.
    `short_lived`: DynamoDB Local compiles with C1 only (`LocalEngine`)."""
    with (
        LocalEngine(free_port(), None, short_lived=short_lived) as engine,
        LocalS3(free_port()) as blobs,
    ):
        settings = dataclasses.replace(
            Settings.from_env({}),
            dynamodb_endpoint=engine.endpoint,
            s3_endpoint=blobs.endpoint,
            blob_bucket=BUCKET,
            auth_secret=SECRET,
            table_name=TABLE,
        )
        settings.apply_local_credentials()
        ensure_table(settings.dynamodb_client(), settings.table_name)
        ensure_bucket(
            settings.s3_client(),
            settings.blob_bucket,
            settings.aws_region,
            settings.blob_cors_origins,
        )
        yield LocalEngines(settings, blobs)


@contextlib.contextmanager
def local_engine_settings() -> Iterator[Settings]:
    """`local_engines`' settings, for the benches that need no more of them."""
    with local_engines() as engines:
        yield engines.settings


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


def measure(fn: Call, clients: int, iterations: int) -> Timing:
    """`fn(client, i)` from `clients` threads, `iterations` times each."""
    return Timing.of(*_latencies(fn, clients, iterations))


def measure_rounds(
    calls: dict[str, Call], clients: int, iterations: int, rounds: int = 4
) -> dict[str, Timing]:
    """Each of `calls` measured in alternating rounds, so that all see the same
    machine: this one's load drifts over seconds (DynamoDB Local's JIT and GC)."""
    rounds = max(1, min(rounds, iterations))
    runs: dict[str, tuple[list[float], float]] = {name: ([], 0.0) for name in calls}
    for n in range(rounds):
        share = iterations // rounds + (1 if n < iterations % rounds else 0)
        for name, fn in calls.items():
            latencies, wall = _latencies(fn, clients, share)
            total, spent = runs[name]
            runs[name] = (total + latencies, spent + wall)
    return {name: Timing.of(*run) for name, run in runs.items()}


def _latencies(fn: Call, clients: int, iterations: int) -> tuple[list[float], float]:
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


class Harness:
    """What every family of measures shares: the engine, the servers, the clients,
    the calls, and the rows measured so far."""

    def __init__(
        self,
        fast: bool,
        settings: Settings,
        ddb: Any,
        headers: dict[str, str],
        local: TestClient,
        clients: list[httpx2.Client],
        floors: list[httpx2.Client],
        server_pid: int | None,
    ) -> None:
        self.fast = fast
        self.iterations = 60 if fast else 300
        self.small = 1000  # the paged tenant's and the small one of the scale rows
        self.large = 50_000
        self.bulk = 10_000  # the tenant synced in bulk, exported, then deleted
        self.smoke = False  # --smoke: every row and section, with their fewest calls
        self.rng = random.Random(7)
        self.settings, self.ddb, self.headers = settings, ddb, headers
        self.local, self.clients, self.floors = local, clients, floors
        self.server_pid = server_pid
        self.rows: list[dict[str, Any]] = []
        self.captured: list[dict[str, Any]] = []
        harness = self

        class Capture(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                harness.captured.append(json.loads(record.getMessage()))

        request_logger = logging.getLogger("api.request")
        request_logger.addHandler(Capture())
        request_logger.setLevel(logging.INFO)
        request_logger.propagate = False

    # --- setup ----------------------------------------------------------------

    def seed(self, tenant: str, n: int, also: dict[str, Any] | None = None) -> list[Record]:
        """n realistic people, bulk-loaded with the store's own item layout; `also`:
        fields every one of them has besides (a photo, say)."""
        token = None
        records = []
        for i in range(n):
            token = next_token(int(time.time() * 1000) - 60_000, token)
            at = token_time(token)
            fields = PERSON.normalize_changes({**realistic_person(self.rng, i), **(also or {})})
            records.append(Record(PERSON, tenant, f"p{i:06d}", token, at, at, fields=fields))
        for start in range(0, n, 5000):
            DynamoStore().bulk_load(tenant, records[start : start + 5000])
        return records

    # --- calls ------------------------------------------------------------------

    def post(
        self, client: httpx2.Client, query: str, variables: dict[str, Any], path: str = "/graphql"
    ) -> dict[str, Any]:
        body: dict[str, Any] = client.post(
            path, json={"query": query, "variables": variables}
        ).json()
        if body.get("errors"):
            raise RuntimeError(body["errors"])
        return body["data"]

    def post_local(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        """A request to the in-process app (its request log line is captured)."""
        response = self.local.post(
            "/graphql", json={"query": query, "variables": variables}, headers=self.headers
        )
        body: dict[str, Any] = response.json()
        assert "errors" not in body, body
        return body["data"]

    def floor(self, client: int, route: str, body: dict[str, Any]) -> object:
        response = self.floors[client].post(f"/floor/{route}", json=body)
        response.raise_for_status()
        return response.json()

    def library(self, client: int, variables: dict[str, Any]) -> dict[str, Any]:
        """The changes query posted to the floor's bare Strawberry schema."""
        return self.post(self.floors[client], CHANGES, variables, path="/floor/graphql")

    def same_as_library(self, variables: dict[str, Any]) -> None:
        """The library's floor answers with the items the product does (it does the
        same work), before its times are compared with the product's."""
        ours = self.post(self.clients[0], CHANGES, variables)["changes"]["items"]
        bare = self.library(0, variables)["changes"]["items"]
        pairs = [[(i["id"], i["changeToken"]) for i in items] for items in (ours, bare)]
        assert pairs[0] == pairs[1], (
            f"library's floor: {pairs[1][:3]}..., product: {pairs[0][:3]}..."
        )

    def poster(self, variables: dict[str, Any]) -> Call:
        """A `measure` function posting the changes query with these variables."""
        return lambda c, _i: self.post(self.clients[c], CHANGES, variables)

    def capacity(self, query: str, variables: dict[str, Any]) -> float:
        """Capacity the API consumed for one request (from its request log line)."""
        self.captured.clear()
        self.post_local(query, variables)
        return float(self.captured[-1]["capacityUnits"])

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
        return units(
            min_read=minimum,
            read=api,
            local_api=api,
            local_raw=float(consumed.get("CapacityUnits", 0)),
        )

    def touch(self, tenant: str, n: int) -> str:
        """Update the n oldest entities of a tenant through the API, in pushes of 100
        (the log holds one entry per change however it came: a sync reads the same);
        the token before them. One by one, the sweep's 487 updates took 10 s."""
        first = self.post_local(CHANGES, {"t": tenant, "l": n})["changes"]
        since = head_token(self.ddb, TABLE, tenant)
        entries = [
            {
                "updatePerson": {
                    "tenantID": tenant,
                    "id": item["id"],
                    "changeToken": item["changeToken"],
                    "changes": {"occupation": "changed"},
                }
            }
            for item in first["items"]
        ]
        for start in range(0, len(entries), 100):
            batch = entries[start : start + 100]
            results = self.post_local(PUSH, {"i": {"tenantID": tenant, "mutations": batch}})
            statuses = {r["status"] for r in results["pushChanges"]["results"]}
            assert statuses == {"APPLIED"}, statuses
        return since

    # --- rows -------------------------------------------------------------------

    def row(
        self,
        name: str,
        product: Call,
        raw: Call,
        row_units: dict[str, Any],
        iterations: dict[int, int] | None = None,
        floor: Call | None = None,
        library: Call | None = None,
    ) -> None:
        """Measure `product`, `raw` (and the `floor` route, and the `library`'s floor,
        when given) with 1 and 8 clients, in alternating rounds; one table row each."""
        # (A smoke run's 8 clients: 2 calls each, 16 in all, which fill the row.)
        eight = 2 if self.smoke else max(10, self.iterations // 4)
        counts = iterations or {1: self.iterations, 8: eight}
        calls = {"product": product, "raw": raw, **({"floor": floor} if floor else {})}
        if library is not None:
            calls["library"] = library
        for clients in (1, 8):
            t = measure_rounds(calls, clients, counts[clients])
            p, r, f, lib = t["product"], t["raw"], t.get("floor"), t.get("library")
            row = {
                "operation": name,
                "clients": clients,
                "p50_ms": p.p50,
                "p95_ms": p.p95,
                "p99_ms": p.p99,
                "rps": p.rps,
                "raw_p50_ms": r.p50,
                "raw_rps": r.rps,
                "ratio_p50": p.p50 / r.p50,
                "floor_p50_ms": None if f is None else f.p50,
                "floor_ratio_p50": None if f is None else p.p50 / f.p50,
                # The bare Strawberry schema's p50 over the floor's: what the library costs.
                "library_p50_ms": None if lib is None else lib.p50,
                "library_floor_ratio_p50": None if lib is None or f is None else lib.p50 / f.p50,
                **row_units,
            }
            self.rows.append(row)
            vs_floor = "" if f is None else f", floor {f.p50:6.2f} ({p.p50 / f.p50:4.2f})"
            if lib is not None and f is not None:
                vs_floor += f", Strawberry {lib.p50:6.2f} ({lib.p50 / f.p50:4.2f})"
            print(
                f"  {name:<34} x{clients}: p50 {p.p50:6.2f} ms (raw {r.p50:6.2f}, "
                f"ratio {p.p50 / r.p50:4.2f}{vs_floor}), {p.rps:7.1f} req/s",
                flush=True,
            )


def print_rows(rows: list[dict[str, Any]]) -> None:
    """The table of rows, from the run's saved JSON as well as from a run."""
    header = (
        f"{'operation':<34}{'cl':>3}{'p50':>8}{'p95':>8}{'p99':>8}{'req/s':>8}"
        f"{'raw p50':>9}{'ratio':>7}{'floor':>8}{'/floor':>7}{'lib/fl':>7}{'units':>11}"
        f"{'minimum':>11}"
        f"{'$/M ops':>9}"
    )
    print()
    print(header)
    print("-" * len(header))
    for r in rows:
        row_units = f"{r['read_units']:g}r+{r['write_units']:g}w"
        minimum = f"{r['min_read_units']:g}r+{r['min_write_units']:g}w"
        floor = "" if r["floor_p50_ms"] is None else f"{r['floor_p50_ms']:.2f}"
        vs_floor = "" if r["floor_ratio_p50"] is None else f"{r['floor_ratio_p50']:.2f}"
        lib = r["library_floor_ratio_p50"]
        lib_floor = "" if lib is None else f"{lib:.2f}"
        print(
            f"{r['operation']:<34}{r['clients']:>3}{r['p50_ms']:>8.2f}{r['p95_ms']:>8.2f}"
            f"{r['p99_ms']:>8.2f}{r['rps']:>8.0f}{r['raw_p50_ms']:>9.2f}"
            f"{r['ratio_p50']:>7.2f}{floor:>8}{vs_floor:>7}{lib_floor:>7}{row_units:>11}"
            f"{minimum:>11}"
            f"{r['cost_per_million_usd']:>9.3f}"
        )
    print(
        f"($/M ops: {PRICES_AS_OF}; floor: the raw call behind a bare Starlette route;"
        " lib/fl: the same Query through a bare Strawberry schema, over the floor)"
    )


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
        "cost_per_million_usd": per_million_ops(read, write),
    }


def peak_rss_kb(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1])
    return float("nan")
