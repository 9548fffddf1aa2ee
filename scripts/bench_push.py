"""Push 500 queued edits one by one vs in batches of 100, in the same run.

Starts its own DynamoDB Local (in memory) and API server; prints one table.
Run with scripts/bench-push.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import httpx2

from api.auth import make_local_token
from scripts.bench import SECRET, local_engine_settings
from tests.support.servers import api_server

EDITS = 500
BATCH = 100
UPDATE = "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) { person { changeToken } } }"
PUSH = "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }"
CREATE = (
    "mutation($i: PushChangesInput!) { pushChanges(input: $i) "
    "{ results { status item { id changeToken } } } }"
)


def _post(client: httpx2.Client, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = client.post(
        "/graphql", json={"query": query, "variables": variables}
    ).json()
    assert "errors" not in body, body
    return body


def _seed(client: httpx2.Client, tenant: str) -> list[dict[str, Any]]:
    people = []
    for start in range(0, EDITS, BATCH):
        entries = [
            {
                "createPerson": {
                    "tenantID": tenant,
                    "person": {"givenName": f"p{start + i}", "familyName": "Bench"},
                }
            }
            for i in range(BATCH)
        ]
        results = _post(client, CREATE, {"i": {"tenantID": tenant, "mutations": entries}})
        people += [r["item"] for r in results["data"]["pushChanges"]["results"]]
    return people


def _edit(person: dict[str, Any], tenant: str, n: int) -> dict[str, Any]:
    return {
        "tenantID": tenant,
        "id": person["id"],
        "changeToken": person["changeToken"],
        "changes": {"occupation": f"job {n}"},
        "clientMutationID": f"edit-{n}",
    }


def main() -> int:
    with local_engine_settings() as settings, api_server(settings) as url:
        token = make_local_token(SECRET, "bench", ["one", "batch"], 3600)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx2.Client(base_url=url, headers=headers, timeout=60) as client:
            one_people = _seed(client, "one")
            batch_people = _seed(client, "batch")

            started = time.perf_counter()
            for n, person in enumerate(one_people):
                _post(client, UPDATE, {"i": _edit(person, "one", n)})
            one_by_one = time.perf_counter() - started

            started = time.perf_counter()
            for start in range(0, EDITS, BATCH):
                entries = [
                    {"updatePerson": _edit(p, "batch", start + i)}
                    for i, p in enumerate(batch_people[start : start + BATCH])
                ]
                body = _post(client, PUSH, {"i": {"tenantID": "batch", "mutations": entries}})
                statuses = {r["status"] for r in body["data"]["pushChanges"]["results"]}
                assert statuses == {"APPLIED"}, statuses
            batched = time.perf_counter() - started

    print(f"{'mode':<28}{'requests':>10}{'seconds':>10}{'edits/s':>10}{'ratio':>8}")
    print(
        f"{'one by one (updatePerson)':<28}{EDITS:>10}{one_by_one:>10.2f}"
        f"{EDITS / one_by_one:>10.0f}{1.0:>8.2f}"
    )
    print(
        f"{'pushChanges x100':<28}{EDITS // BATCH:>10}{batched:>10.2f}"
        f"{EDITS / batched:>10.0f}{batched / one_by_one:>8.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
