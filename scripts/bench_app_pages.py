"""A page of 100 records of each shipped app, in one run: the task tracker's tasks
with every field at its kinds' bounds (examples/tasks/catalog.yaml: lists full,
strings at their maxLength, the extreme doubles; its 100 ids left out, which would
take a task past the 16 KB item limit) against the family app's people
(examples/family/catalog.yaml, about 400 bytes each, as scripts/bench seeds them).

One DynamoDB Local; a server per app (each reads its catalog at start,
SYNC_CATALOG_FILE), a tenant of 100 records each, written in pushes of 20. Then
`changes(since: null, limit: 100)`, the first sync's page, asked --rounds times one
after another: the answer's bytes (uncompressed) and its latency (p50, p95), each
against the family page's in the same run. Prints one table. Run with
scripts/bench-app-pages.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from typing import Any

import httpx2

from api.auth import make_local_token
from api.domain.catalog_file import load
from api.settings import DEFAULT_CATALOG_FILE, Settings
from scripts.benchmarks.harness import SECRET, local_engine_settings, realistic_person
from tests.support.servers import api_server

TASKS = DEFAULT_CATALOG_FILE.parents[1] / "tasks" / "catalog.yaml"
RECORDS = 100
PUSH = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) "
    "{ results { status error { code message } } } }"
)
SELECTIONS = {
    "Person": "givenName familyName dateOfBirth relationship phoneNumber emailAddress "
    "profileColor occupation",
    "Task": "title priority count score ratio tags ids counts scores flags days times stages "
    "address { street city postalCode floor latitude doorCodes } checklist { text done }",
}
PAGE = (
    "query($t: ID!) { changes(tenantID: $t, since: null, limit: 100) "
    "{ items { __typename id changeToken ... on %s { %s } } cursor changeToken } }"
)
# A task at its kinds' bounds (tests/unit/test_field_kinds.py's), without its ids.
AT_BOUNDS: dict[str, Any] = {
    "title": "é" * 200,
    "priority": 5,
    "count": -(2**31),
    "score": -1.7976931348623157e308,
    "ratio": 0.30000000000000004,
    "tags": ['"' * 20] * 5,
    "counts": [2**31 - 1] * 100,
    "scores": [-2.2250738585072014e-308] * 100,
    "flags": [False] * 100,
    "days": ["2024-02-29"] * 100,
    "times": ["2026-11-21T23:02:38.123Z"] * 100,
    "stages": ["DOING"] * 100,
    "address": {
        "street": "s" * 100,
        "city": "c" * 60,
        "postalCode": "p" * 10,
        "floor": -5,
        "latitude": -89.99999999999999,
        "doorCodes": ['"' * 8] * 3,
    },
    "checklist": [{"text": '"' * 100, "done": False}] * 10,
}


def _post(http: httpx2.Client, token: str, query: str, variables: dict[str, Any]) -> Any:
    response = http.post(
        "/graphql",
        json={"query": query, "variables": variables},
        headers={"Authorization": f"Bearer {token}", "Accept-Encoding": "identity"},
    )
    body = response.json()
    assert not body.get("errors"), body["errors"]
    return response, body["data"]


def measure(settings: Settings, catalog_file: str, type_name: str, rounds: int) -> dict[str, Any]:
    tenant = f"pages-{type_name.lower()}"
    token = make_local_token(SECRET, "bench", [tenant], 3600)
    rng = random.Random(7)
    with (
        api_server(settings, extra_env={"SYNC_CATALOG_FILE": catalog_file}) as url,
        httpx2.Client(base_url=url, timeout=60) as http,
    ):
        key = type_name[0].lower() + type_name[1:]
        fields = [
            realistic_person(rng, n) if type_name == "Person" else AT_BOUNDS for n in range(RECORDS)
        ]
        mutations = [{f"create{type_name}": {"tenantID": tenant, key: f}} for f in fields]
        for start in range(0, RECORDS, 20):  # 100 tasks at their bounds pass 1 MB of body
            batch = mutations[start : start + 20]
            _, data = _post(http, token, PUSH, {"i": {"tenantID": tenant, "mutations": batch}})
            statuses = {r["status"] for r in data["pushChanges"]["results"]}
            assert statuses == {"APPLIED"}, data["pushChanges"]["results"][:2]
        query = PAGE % (type_name, SELECTIONS[type_name])
        latencies, size = [], 0
        for _ in range(rounds):
            started = time.perf_counter()
            response, data = _post(http, token, query, {"t": tenant})
            latencies.append((time.perf_counter() - started) * 1000)
            size = len(response.content)
            assert len(data["changes"]["items"]) == RECORDS
    q = statistics.quantiles(latencies, n=20, method="inclusive")
    return {"bytes": size, "p50": statistics.median(latencies), "p95": q[18]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-app-pages", description=__doc__)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    load(TASKS)  # refused here, not in a server's log, if it does not load
    with local_engine_settings() as settings:
        rows = {
            "family: 100 people": measure(
                settings, str(DEFAULT_CATALOG_FILE), "Person", args.rounds
            ),
            "tasks: 100 tasks at the kinds' bounds": measure(
                settings, str(TASKS), "Task", args.rounds
            ),
        }
    base = rows["family: 100 people"]
    print(
        f"{'page of changes (limit 100)':<40} {'bytes':>9} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'bytes ×':>8} {'p50 ×':>6}"
    )
    for name, row in rows.items():
        print(
            f"{name:<40} {row['bytes']:>9,} {row['p50']:>8.1f} {row['p95']:>8.1f} "
            f"{row['bytes'] / base['bytes']:>8.1f} {row['p50'] / base['p50']:>6.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
