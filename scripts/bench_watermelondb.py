"""A first sync of 10,000 people into WatermelonDB through clients/watermelondb,
against reading the same `changes` pages alone, in one run.

Starts its own DynamoDB Local (in memory) and API server, seeds one tenant with
RECORDS people (pushes of 100), installs the module's pinned npm dependencies
(npm ci, into .cache/watermelondb-tests, as the tests do) and runs
clients/watermelondb/bench/first_sync.mjs, which prints one table. Run with
scripts/bench-watermelondb [records] [runs].
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from typing import Any

import httpx2

from api.auth import make_local_token
from api.settings import PROJECT_ROOT
from scripts.benchmarks.harness import SECRET, local_engine_settings
from tests.support.servers import api_server

MODULE = PROJECT_ROOT / "clients" / "watermelondb"
DEPS = PROJECT_ROOT / ".cache" / "watermelondb-tests"
PUSH = "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }"


def _install() -> None:
    wanted = (MODULE / "package-lock.json").read_text()
    installed = DEPS / "package-lock.json"
    if (
        not installed.exists()
        or installed.read_text() != wanted
        or not (DEPS / "node_modules").exists()
    ):
        DEPS.mkdir(parents=True, exist_ok=True)
        shutil.copy(MODULE / "package.json", DEPS / "package.json")
        installed.write_text(wanted)
        print("==> npm ci (clients/watermelondb's pinned dependencies) into .cache/", flush=True)
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=DEPS, check=True
        )
    shutil.copy(MODULE / "index.js", DEPS / "index.js")
    (DEPS / "bench").mkdir(exist_ok=True)
    shutil.copy(MODULE / "bench" / "first_sync.mjs", DEPS / "bench" / "first_sync.mjs")


def _seed(client: httpx2.Client, tenant: str, records: int) -> None:
    for start in range(0, records, 100):
        mutations: list[dict[str, Any]] = [
            {
                "createPerson": {
                    "tenantID": tenant,
                    "id": f"p{n:05d}",
                    "person": {
                        "givenName": f"Given {n}",
                        "familyName": "Bench",
                        "occupation": "tester",
                        "emailAddress": f"p{n}@example.com",
                    },
                }
            }
            for n in range(start, min(start + 100, records))
        ]
        body = client.post(
            "/graphql",
            json={"query": PUSH, "variables": {"i": {"tenantID": tenant, "mutations": mutations}}},
        ).json()
        assert {r["status"] for r in body["data"]["pushChanges"]["results"]} == {"APPLIED"}, body


def main() -> int:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    _install()
    tenant = "wmbench"
    token = make_local_token(SECRET, "bench", [tenant], 3600)
    with local_engine_settings() as settings, api_server(settings) as url:
        with httpx2.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        ) as client:
            print(f"==> seeding {records} people", flush=True)
            _seed(client, tenant, records)
        result = subprocess.run(
            [
                "node",
                "bench/first_sync.mjs",
                f"{url}/graphql",
                token,
                tenant,
                str(records),
                str(runs),
            ],
            cwd=DEPS,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if result.returncode != 0:
            print(result.stderr[-3000:], file=sys.stderr)
            return 1
        print(result.stdout, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
