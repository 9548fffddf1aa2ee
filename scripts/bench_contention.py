"""Writers contending for one tenant's head: the share of writes that end UNAVAILABLE.

Six writers (creates and updates of one tenant) through two API servers, for a
fixed time, first on DynamoDB Local (atomic transactions: the baseline), then
through the torn-commit engine (tests/support/torn.py: items applied one by one,
marks, pauses and rare stalls of 0.5-2 s). Prints one table.
Run with scripts/bench-contention [--seconds 30] [--writers 6].
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections import Counter
from contextlib import ExitStack
from typing import Any

import httpx2

from api.auth import make_local_token
from scripts.benchmarks.harness import SECRET, local_engine_settings
from tests.support.servers import api_server
from tests.support.torn import TornEngine

CREATE = (
    "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id changeToken } } }"
)
UPDATE = (
    "mutation($i: UpdatePersonInput!) { updatePerson(input: $i) { person { id changeToken } } }"
)


def _writer(
    url: str, token: str, tenant: str, seed: int, until: float, counts: Counter[str]
) -> None:
    rng = random.Random(seed)
    mine: list[dict[str, Any]] = []
    with httpx2.Client(
        base_url=url, timeout=60, headers={"Authorization": f"Bearer {token}"}
    ) as http:
        while time.monotonic() < until:
            if mine and rng.random() < 0.6:
                person = rng.choice(mine)
                query, field = UPDATE, "updatePerson"
                data = {
                    "tenantID": tenant,
                    "id": person["id"],
                    "changeToken": person["changeToken"],
                    "changes": {"familyName": f"f{rng.randint(0, 999)}"},
                }
            else:
                person, query, field = None, CREATE, "createPerson"
                data = {"tenantID": tenant, "person": {"givenName": f"g{rng.randint(0, 999)}"}}
            body = http.post("/graphql", json={"query": query, "variables": {"i": data}}).json()
            if body.get("errors"):
                counts[body["errors"][0]["extensions"]["code"]] += 1
                continue
            counts["ok"] += 1
            written = body["data"][field]["person"]
            if person is not None:
                mine.remove(person)
            mine.append(written)


def run(settings: Any, torn_seed: int | None, writers: int, seconds: float) -> dict[str, Any]:
    with ExitStack() as stack:
        env = {}
        torn = None
        if torn_seed is not None:
            torn = stack.enter_context(TornEngine(settings.dynamodb_endpoint, seed=torn_seed))
            env["DYNAMODB_ENDPOINT"] = torn.endpoint
        urls = [stack.enter_context(api_server(settings, extra_env=env)) for _ in range(2)]
        tenant = f"contention-{torn_seed}-{time.time_ns()}"
        token = make_local_token(SECRET, "bench", [tenant], 3600)
        counts: Counter[str] = Counter()
        until = time.monotonic() + seconds
        threads = [
            threading.Thread(target=_writer, args=(urls[i % 2], token, tenant, i, until, counts))
            for i in range(writers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = sum(counts.values())
        return {
            "writes": total,
            "ok": counts["ok"],
            "unavailable": counts["UNAVAILABLE"],
            "other": total - counts["ok"] - counts["UNAVAILABLE"],
            "rate": counts["ok"] / seconds,
            "stalls": torn.stats.stalls if torn else 0,
            "cancelled": (torn.stats.conflicts + torn.stats.condition_failures) if torn else 0,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--writers", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rows = []
    with local_engine_settings() as settings:
        rows.append(("DynamoDB Local (atomic)", run(settings, None, args.writers, args.seconds)))
        rows.append(("torn-commit engine", run(settings, args.seed, args.writers, args.seconds)))
    base = rows[0][1]["rate"]
    print(f"\n{args.writers} writers, one tenant, two servers, {args.seconds:.0f} s each")
    columns = ["engine", "writes", "ok", "UNAVAILABLE", "other errors", "ok/s", "vs atomic"]
    print("| " + " | ".join([*columns, "cancelled tx", "stalls"]) + " |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in rows:
        share = r["unavailable"] / max(r["writes"], 1)
        print(
            f"| {name} | {r['writes']} | {r['ok']} | {r['unavailable']} ({share:.1%}) "
            f"| {r['other']} | {r['rate']:.1f} | {r['rate'] / base:.2f}x "
            f"| {r['cancelled']} | {r['stalls']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
