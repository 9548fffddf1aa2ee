"""Push 500 queued edits one by one vs in batches of 100, in the same run.

Starts its own DynamoDB Local (in memory) and API servers; prints one table. The
server reaches DynamoDB through a forwarding proxy that counts the calls and the
time spent answering them, first without delay, then adding RTT_MS to each call:
DynamoDB Local answers on the same machine, while on AWS each call is a network
round trip (same region, a few to 15 ms), which is what group commit saves. Each
with history on and off (HISTORY: an update also writes the version it replaces).
Where the time goes: in DynamoDB (Local, and the added delay: the proxy's time
answering), and elsewhere (the API process, and this client). Run with
scripts/bench-push: it prints its table, saves it as JSON in `.bench-results/` (`--out
DIR` elsewhere) and writes docs/sync.md's figures of a push from that JSON
(scripts/benchmarks/push.py; `--page DIR` elsewhere).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from typing import Any

import httpx2

from api.auth import make_local_token
from api.settings import Settings
from scripts.benchmarks import push
from scripts.benchmarks.harness import SECRET, local_engine_settings
from scripts.benchmarks.page import commit, machine
from tests.support.servers import api_server
from tests.support.torn import TornEngine

EDITS = 500
BATCH = 100
RTT_MS = 10
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


Row = tuple[str, int, int, float, float]  # mode, requests, DB calls, seconds, in DynamoDB


def _measure(settings: Settings, latency_ms: float, history: bool) -> list[Row]:
    """(mode, requests, DynamoDB calls, seconds, seconds answering in DynamoDB) of
    each way to push the edits."""
    rows = []
    assert settings.dynamodb_endpoint is not None
    env = {"HISTORY": "true" if history else "false"}
    with (
        TornEngine(settings.dynamodb_endpoint, tear=False, latency_ms=latency_ms) as proxy,
        api_server(settings, extra_env={"DYNAMODB_ENDPOINT": proxy.endpoint, **env}) as url,
    ):
        run = f"{latency_ms:g}{'h' if history else 'n'}"  # tenants of their own each run
        one, batch = f"one{run}", f"batch{run}"
        token = make_local_token(SECRET, "bench", [one, batch], 3600)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx2.Client(base_url=url, headers=headers, timeout=60) as client:
            one_people = _seed(client, one)
            batch_people = _seed(client, batch)

            calls, started = proxy.stats.calls, time.perf_counter()
            answering = proxy.stats.answering_s
            for n, person in enumerate(one_people):
                _post(client, UPDATE, {"i": _edit(person, one, n)})
            seconds = time.perf_counter() - started
            rows.append(
                (
                    "one by one (updatePerson)",
                    EDITS,
                    proxy.stats.calls - calls,
                    seconds,
                    proxy.stats.answering_s - answering,
                )
            )

            calls, started = proxy.stats.calls, time.perf_counter()
            answering = proxy.stats.answering_s
            for start in range(0, EDITS, BATCH):
                entries = [
                    {"updatePerson": _edit(p, batch, start + i)}
                    for i, p in enumerate(batch_people[start : start + BATCH])
                ]
                body = _post(client, PUSH, {"i": {"tenantID": batch, "mutations": entries}})
                statuses = {r["status"] for r in body["data"]["pushChanges"]["results"]}
                assert statuses == {"APPLIED"}, statuses
            seconds = time.perf_counter() - started
            rows.append(
                (
                    f"pushChanges x{BATCH}",
                    EDITS // BATCH,
                    proxy.stats.calls - calls,
                    seconds,
                    proxy.stats.answering_s - answering,
                )
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    push.PAGE.options(parser)
    args = parser.parse_args(argv)
    load_at_start = os.getloadavg()[0]  # the page states it: other work inflates times
    with local_engine_settings() as settings:
        results = [
            (f"{label}, history {'on' if history else 'off'}", _measure(settings, ms, history))
            for label, ms in (("DynamoDB Local", 0), (f"+ {RTT_MS} ms a call", RTT_MS))
            for history in (True, False)
        ]
    saved = result(results, load_at_start)
    report(saved)
    push.PAGE.keep(saved, args.out, args.page)
    return 0


def result(results: list[tuple[str, list[Row]]], load_at_start: float) -> dict[str, Any]:
    """The run as it is saved, printed and rendered: each DynamoDB's rows, one by one
    first (the baseline of `faster`)."""
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "scripts/bench-push",
        **commit(),
        "machine": machine(load_at_start),
        "edits": EDITS,
        "batch": BATCH,
        "runs": [
            {
                "dynamodb": label,
                "rows": [
                    {
                        "mode": mode,
                        "requests": requests,
                        "calls": calls,
                        "seconds": seconds,
                        "in_dynamodb_s": answering,
                        "faster": rows[0][3] / seconds,
                    }
                    for mode, requests, calls, seconds, answering in rows
                ],
            }
            for label, rows in results
        ],
    }


def report(saved: dict[str, Any]) -> None:
    """Prints a run's table from its saved JSON alone."""
    print(
        f"{'DynamoDB':<34}{'mode':<28}{'requests':>9}{'DB calls':>9}{'seconds':>9}"
        f"{'in DB':>7}{'API+client':>11}{'edits/s':>9}{'faster':>8}"
    )
    for run in saved["runs"]:
        for r in run["rows"]:
            print(
                f"{run['dynamodb']:<34}{r['mode']:<28}{r['requests']:>9}{r['calls']:>9}"
                f"{r['seconds']:>9.2f}{r['in_dynamodb_s']:>7.2f}"
                f"{r['seconds'] - r['in_dynamodb_s']:>11.2f}"
                f"{saved['edits'] / r['seconds']:>9.0f}{r['faster']:>7.1f}x"
            )
    print(
        "(in DB: the proxy's time answering, DynamoDB Local's and the added delay; "
        "API+client: the rest, the API process's and this client's)"
    )


if __name__ == "__main__":
    sys.exit(main())
