"""What cheap hostile requests cost one API server (uvicorn), and another tenant.

1. Memory: server RSS before and after 210 different ~1 MB documents that fail
   validation, sent without a token.
2. CPU: a normal read's latency (p50, max) alone, then while two clients without
   a token send a 19.6 KB query with 550 fragment spreads, each time under a new
   operation name.
3. Fairness: the same read of another tenant while 45 clients each push 30
   creates to one tenant at once.
4. Read amplification: one request of 30 aliases of `changes(types: [REMINDER],
   limit: 1)` on a tenant of 10,500 people and one reminder (issue 25: before its
   fixes, one alias took 15.4 s, 10,001 calls and 10,001 read units), its read
   units and time; and another tenant's read while two clients send it over and
   over (before: held 98.7 s).
5. A socket slot: how long a client that opens a socket, never sends
   connection_init, floods pings and never reads keeps a server's only slot from
   a real client (before: the whole 300 s observed).
6. A big export (issue 37): `exportTenant` calls of a tenant of 2,000 reminders
   of some 15 KB, and of one of 50,000 deletions, each call's read and write
   units and time, with the call's bound lifted ("before": the old 20 steps of
   100 and 2,000 skipped deletions each, 2 uploads) and as it is ("after"); and
   another tenant's read p99 alone and while 2 clients export the big tenant over
   and over. `--exports` runs this part alone.

Starts its own DynamoDB Local and server; prints one table. Run with scripts/bench-hostile.
"""

from __future__ import annotations

import json
import logging
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
from starlette.testclient import TestClient

from api.app import create_app
from api.auth import make_local_token
from api.service import exports as export_rules
from api.service.exports import TenantExport
from api.storage import models
from scripts.benchmarks.harness import SECRET, local_engine_settings
from tests.support.bulk import bulk_deletions_and_reminders, bulk_people
from tests.support.servers import api_server
from tests.support.sockets import flooder, wait_for_a_slot
from tests.support.subscribers import pid_listening

READ = 'query { changes(tenantID: "calm", limit: 10) { changeToken items { id } } }'
# Thirty aliases of a page of one reminder among 10,500 people.
AMPLIFIED = (
    "query {"
    + " ".join(
        f'a{i}: changes(tenantID: "big", types: [REMINDER], limit: 1) {{ cursor items {{ id }} }}'
        for i in range(30)
    )
    + " }"
)
PUSH = "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }"
EXPORT = (
    "mutation($t: ID!, $e: ID) { exportTenant(tenantID: $t, exportID: $e) "
    "{ exportID done entities } }"
)


def _rss_mb(pid: int | None) -> float:
    assert pid is not None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) / 1024
    return float("nan")


def _fragments(n: int, name: str) -> str:
    fragments = "\n".join(f"fragment F{i} on Person {{ id givenName }}" for i in range(n))
    spreads = " ".join(f"...F{i}" for i in range(n))
    return f'query {name} {{ person(tenantID: "t", id: "x") {{ {spreads} }} }}\n{fragments}'


def _reads(http: httpx2.Client, headers: dict[str, str], n: int) -> tuple[float, float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        body = http.post("/graphql", json={"query": READ}, headers=headers).json()
        assert "errors" not in body, body
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times)


def _during(
    attack: Callable[[threading.Event], None],
    clients: int,
    measure: Callable[[], tuple[float, float]],
) -> tuple[float, float]:
    stop = threading.Event()
    threads = [threading.Thread(target=attack, args=(stop,)) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    try:
        return measure()
    finally:
        stop.set()
        for t in threads:
            t.join()


def _one_request(settings: Any, query: str, headers: dict[str, str]) -> tuple[float, int, float]:
    """Read units, DynamoDB calls and seconds of one request, through the in-process
    app (whose request log line has the units)."""
    lines: list[dict[str, Any]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(record.getMessage()))

    request_log = logging.getLogger("api.request")
    handler = Capture()
    request_log.addHandler(handler)
    request_log.setLevel(logging.INFO)
    try:
        with TestClient(create_app(settings)) as local:
            started = time.perf_counter()
            body = local.post("/graphql", json={"query": query}, headers=headers).json()
            seconds = time.perf_counter() - started
    finally:
        request_log.removeHandler(handler)
    assert "errors" not in body, body
    line = lines[-1]
    read = float(line["capacityUnits"]) - float(line["writeUnits"])
    return read, int(line["dynamodbCalls"]), seconds


def _p99(times: list[float]) -> float:
    return statistics.quantiles(times, n=100, method="inclusive")[98]


def _read_times(http: httpx2.Client, headers: dict[str, str], n: int) -> list[float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        body = http.post("/graphql", json={"query": READ}, headers=headers).json()
        assert "errors" not in body, body
        times.append((time.perf_counter() - started) * 1000)
    return times


def _export_calls(settings: Any, tenant: str, bounded: bool) -> list[tuple[float, float, float]]:
    """Read units, write units and seconds of each `exportTenant` call of one whole
    export, through the in-process app (whose request log line has the units);
    `bounded` False lifts the call's bound to what it was before issue 37."""
    lines: list[dict[str, Any]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(record.getMessage()))

    lifted = {
        "READ_UNITS_PER_CALL": 10**9,
        "WRITE_UNITS_PER_CALL": 10**9,
        "CALL_S": 10.0**9,
        "PAUSE": 0.0,
    }
    saved = {name: getattr(export_rules, name) for name in lifted}
    defaults = TenantExport.export_tenant.__defaults__
    request_log = logging.getLogger("api.request")
    handler = Capture()
    request_log.addHandler(handler)
    request_log.setLevel(logging.INFO)
    headers = {"Authorization": f"Bearer {make_local_token(SECRET, 'owner', [tenant], 3600)}"}
    calls: list[tuple[float, float, float]] = []
    try:
        if not bounded:
            for name, value in lifted.items():
                setattr(export_rules, name, value)
            TenantExport.export_tenant.__defaults__ = (20,)  # 20 steps a call
        with TestClient(create_app(settings)) as local:
            export_id = None
            while True:
                started = time.perf_counter()
                body = local.post(
                    "/graphql",
                    json={"query": EXPORT, "variables": {"t": tenant, "e": export_id}},
                    headers=headers,
                ).json()
                seconds = time.perf_counter() - started
                assert "errors" not in body, body
                line = lines[-1]
                units, writes = float(line["capacityUnits"]), float(line["writeUnits"])
                calls.append((units - writes, writes, seconds))
                job = body["data"]["exportTenant"]
                export_id = job["exportID"]
                if job["done"]:
                    return calls
    finally:
        for name, value in saved.items():
            setattr(export_rules, name, value)
        TenantExport.export_tenant.__defaults__ = defaults
        request_log.removeHandler(handler)


def _exports(settings: Any, url: str, rows: list[tuple[str, str]]) -> None:
    models.bind(settings)
    bulk_deletions_and_reminders("reminders", 0, 2_000, chars=7_500)  # some 15 KB each
    bulk_deletions_and_reminders("deletions", 50_000, 0)
    for tenant, what in (
        ("reminders", "2,000 reminders of 15 KB"),
        ("deletions", "50,000 deletions"),
    ):
        for label, bounded in (("before", False), ("after", True)):
            calls = _export_calls(settings, tenant, bounded)
            rows.append(
                (
                    f"export of {what}, {label}: calls; per call max read units, "
                    "max write units, max s",
                    f"{len(calls)}; {max(c[0] for c in calls):.0f}, "
                    f"{max(c[1] for c in calls):.0f}, {max(c[2] for c in calls):.2f}",
                )
            )
    calm = {"Authorization": f"Bearer {make_local_token(SECRET, 'calm', ['calm'], 3600)}"}
    owner = {"Authorization": f"Bearer {make_local_token(SECRET, 'o', ['reminders'], 3600)}"}
    with httpx2.Client(base_url=url, timeout=120) as http:
        for i in range(10):
            person = {"tenantID": "calm", "person": {"givenName": f"p{i}"}}
            create = {"tenantID": "calm", "mutations": [{"createPerson": person}]}
            http.post("/graphql", json={"query": PUSH, "variables": {"i": create}}, headers=calm)
        _read_times(http, calm, 30)  # warm up
        alone = _read_times(http, calm, 300)

        def export(stop: threading.Event) -> None:
            with httpx2.Client(base_url=url, timeout=300) as own:
                export_id = None
                while not stop.is_set():
                    body = own.post(
                        "/graphql",
                        json={"query": EXPORT, "variables": {"t": "reminders", "e": export_id}},
                        headers=owner,
                    ).json()
                    job = (body.get("data") or {}).get("exportTenant")
                    export_id = None if job is None or job["done"] else job["exportID"]

        stop = threading.Event()
        threads = [threading.Thread(target=export, args=(stop,)) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        try:
            attacked = _read_times(http, calm, 300)
        finally:
            stop.set()
            for t in threads:
                t.join()
    rows.append(
        (
            "other tenant's read alone / during 2 clients exporting 2,000 x 15 KB: p99 ms",
            f"{_p99(alone):.1f} / {_p99(attacked):.1f} "
            f"(p50 {statistics.median(alone):.1f} / {statistics.median(attacked):.1f})",
        )
    )


def main() -> int:
    rows: list[tuple[str, str]] = []
    if "--exports" in sys.argv[1:]:
        with local_engine_settings() as settings, api_server(settings) as url:
            _exports(settings, url, rows)
        _print(rows)
        return 0
    with local_engine_settings() as settings, api_server(settings) as url:
        pid = pid_listening(url)
        calm = {"Authorization": f"Bearer {make_local_token(SECRET, 'calm', ['calm'], 3600)}"}
        flood = {"Authorization": f"Bearer {make_local_token(SECRET, 'flood', ['flood'], 3600)}"}
        with httpx2.Client(base_url=url, timeout=120) as http:
            for i in range(10):
                person = {"tenantID": "calm", "person": {"givenName": f"p{i}"}}
                create = {"tenantID": "calm", "mutations": [{"createPerson": person}]}
                http.post(
                    "/graphql", json={"query": PUSH, "variables": {"i": create}}, headers=calm
                )
            _reads(http, calm, 20)  # warm up
            base = _reads(http, calm, 50)
            rows.append(("read alone: p50 / max ms", f"{base[0]:.1f} / {base[1]:.1f}"))

            # 1. memory
            before = _rss_mb(pid)
            field = "f" * 200
            for i in range(210):
                fields = " ".join(f"{field}{i}x{j}" for j in range(4500))
                document = f"query Q{i} {{ {fields} }}"
                http.post("/graphql", json={"query": document})
            after = _rss_mb(pid)
            rows.append(
                (
                    "RSS before / after 210 x 1 MB invalid documents, MB",
                    f"{before:.0f} / {after:.0f}",
                )
            )

            # 2. CPU
            counter = iter(range(10**9))

            def fragments(stop: threading.Event) -> None:
                with httpx2.Client(base_url=url, timeout=120) as own:
                    while not stop.is_set():
                        own.post("/graphql", json={"query": _fragments(550, f"Q{next(counter)}")})

            under = _during(fragments, 2, lambda: _reads(http, calm, 20))
            rows.append(
                (
                    "read during the fragment attack: p50 / max ms",
                    f"{under[0]:.1f} / {under[1]:.1f}",
                )
            )

            # 3. fairness
            entries = [
                {"createPerson": {"tenantID": "flood", "person": {"givenName": f"g{i}"}}}
                for i in range(30)
            ]

            def push(stop: threading.Event) -> None:
                with httpx2.Client(base_url=url, timeout=300) as own:
                    while not stop.is_set():
                        own.post(
                            "/graphql",
                            json={
                                "query": PUSH,
                                "variables": {"i": {"tenantID": "flood", "mutations": entries}},
                            },
                            headers=flood,
                        )

            flooded = _during(push, 45, lambda: _reads(http, calm, 20))
            rows.append(
                (
                    "other tenant's read during 45 x 30-entry pushes: p50 / max ms",
                    f"{flooded[0]:.1f} / {flooded[1]:.1f}",
                )
            )
            # 4. read amplification
            models.bind(settings)
            bulk_people("big", 10_500)
            big = {"Authorization": f"Bearer {make_local_token(SECRET, 'big', ['big'], 3600)}"}
            reminder = {"tenantID": "big", "reminder": {"title": "the one"}}
            http.post(
                "/graphql",
                json={
                    "query": PUSH,
                    "variables": {
                        "i": {"tenantID": "big", "mutations": [{"createReminder": reminder}]}
                    },
                },
                headers=big,
            )
            units, calls, seconds = _one_request(settings, AMPLIFIED, big)
            rows.append(
                (
                    "30 x changes(types: [REMINDER], limit: 1), 10,500 people: read units, "
                    "DynamoDB calls, s",
                    f"{units:.0f}, {calls}, {seconds:.2f}",
                )
            )

            def amplify(stop: threading.Event) -> None:
                with httpx2.Client(base_url=url, timeout=300) as own:
                    while not stop.is_set():
                        own.post("/graphql", json={"query": AMPLIFIED}, headers=big)

            attacked = _during(amplify, 2, lambda: _reads(http, calm, 20))
            rows.append(
                (
                    "other tenant's read during 2 clients sending that: p50 / max ms",
                    f"{attacked[0]:.1f} / {attacked[1]:.1f}",
                )
            )

            # 6. a big export
            _exports(settings, url, rows)

    # 5. a socket slot
    with (
        local_engine_settings() as settings,
        api_server(settings, extra_env={"WS_MAX_CONNECTIONS": "1"}) as url,
    ):
        stop = threading.Event()
        flooding = flooder(url, stop)
        try:
            held = wait_for_a_slot(url, calm["Authorization"], within_s=300)
        finally:
            stop.set()
            flooding.close()
        rows.append(
            (
                "a silent, flooding, non-reading socket holds the only slot for, s",
                f"{held:.0f}",
            )
        )
    _print(rows)
    return 0


def _print(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    sys.exit(main())
