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
6. Download links (issue 37): another tenant's read p50 / p99 / max, at one read
   every 50 ms, while 4 clients of one tenant page through 12,000 people with
   12,000 distinct photos (more than the 10,000 links a process reuses), first
   without `url`, then with `photo { url }`: the same load, but every link signed.
   Before, the links were signed on the event loop. `--only links` runs this alone.

Starts its own DynamoDB Local and server; prints one table. Run with scripts/bench-hostile.
"""

from __future__ import annotations

import json
import logging
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from starlette.testclient import TestClient

from api.app import create_app
from api.auth import make_local_token
from api.domain.catalog import PERSON
from api.domain.records import Record
from api.domain.tokens import next_token, token_time
from api.storage import models
from api.storage.store import DynamoStore
from scripts.benchmarks.harness import SECRET, local_engine_settings
from tests.support.bulk import bulk_people
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
PHOTO_PAGE = (
    'query($c: String) { changes(tenantID: "photos", cursor: $c, limit: 1000) { cursor '
    "items { ... on Person { id givenName photo { %s } } } } }"
)
PHOTOS = 12_000
_F = TypeVar("_F")


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
    measure: Callable[[], _F],
) -> _F:
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


def _people_with_photos(tenant: str, count: int) -> None:
    """`count` people, each with a photo of its own (references only: signing a link
    asks nothing of the blob store)."""
    token, records = None, []
    for i in range(count):
        token = next_token(int(time.time() * 1000) - 60_000, token)
        at = token_time(token)
        photo = {
            "sha256": f"{random.getrandbits(256):064x}",
            "size": 8,
            "contentType": "image/jpeg",
        }
        fields = {"givenName": f"given {i}", "photo": photo}
        records.append(Record(PERSON, tenant, f"p{i:06d}", token, at, at, False, fields))
    for start in range(0, count, 5000):
        DynamoStore().bulk_load(tenant, records[start : start + 5000])


def _paced(
    http: httpx2.Client, headers: dict[str, str], n: int, every_s: float, within_s: float = 20.0
) -> tuple[float, float, float, int]:
    """p50, p99 and max ms of up to `n` reads, one every `every_s` (or right after the
    last one, when it took longer), for at most `within_s`."""
    times: list[float] = []
    start = time.perf_counter()
    for i in range(n):
        time.sleep(max(0.0, start + i * every_s - time.perf_counter()))
        if time.perf_counter() - start > within_s and len(times) >= 2:
            break
        began = time.perf_counter()
        body = http.post("/graphql", json={"query": READ}, headers=headers).json()
        assert "errors" not in body, body
        times.append((time.perf_counter() - began) * 1000)
    q = statistics.quantiles(times, n=100, method="inclusive")
    return q[49], q[98], max(times), len(times)


def _links_rows(rows: list[tuple[str, str]], calm: dict[str, str]) -> None:
    with local_engine_settings() as settings, api_server(settings) as url:
        models.bind(settings)
        _people_with_photos("photos", PHOTOS)
        photos = {"Authorization": f"Bearer {make_local_token(SECRET, 'ph', ['photos'], 3600)}"}
        with httpx2.Client(base_url=url, timeout=120) as http:
            person = {"tenantID": "calm", "person": {"givenName": "p"}}
            create = {"tenantID": "calm", "mutations": [{"createPerson": person}] * 10}
            http.post("/graphql", json={"query": PUSH, "variables": {"i": create}}, headers=calm)
            _reads(http, calm, 20)  # warm up
            idle = _paced(http, calm, 150, 0.05)
            rows.append(
                (
                    "read alone, 1 every 50 ms: p50 / p99 / max ms, reads",
                    f"{_ms(idle[:3])}, {idle[3]}",
                )
            )
            for selection, name in (("sha256", "without url"), ("url", "with url")):

                def pages(stop: threading.Event, selection: str = selection) -> None:
                    with httpx2.Client(base_url=url, timeout=300) as own:
                        cursor = None
                        while not stop.is_set():
                            body = own.post(
                                "/graphql",
                                json={"query": PHOTO_PAGE % selection, "variables": {"c": cursor}},
                                headers=photos,
                            ).json()
                            assert "errors" not in body, str(body)[:300]
                            cursor = body["data"]["changes"]["cursor"]

                under = _during(pages, 4, lambda: _paced(http, calm, 150, 0.05))
                rows.append(
                    (
                        f"other tenant's read while 4 clients page 12,000 photos {name}: "
                        "p50 / p99 / max ms, reads",
                        f"{_ms(under[:3])}, {under[3]}",
                    )
                )


def _ms(figures: tuple[float, ...]) -> str:
    return " / ".join(f"{f:.1f}" for f in figures)


def main() -> int:
    rows: list[tuple[str, str]] = []
    if sys.argv[1:] == ["--only", "links"]:
        calm = {"Authorization": f"Bearer {make_local_token(SECRET, 'calm', ['calm'], 3600)}"}
        _links_rows(rows, calm)
        return _print(rows)
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
    _links_rows(rows, calm)
    return _print(rows)


def _print(rows: list[tuple[str, str]]) -> int:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
