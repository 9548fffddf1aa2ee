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
6. Relay replays (issue 37, finding 4): two servers with a stream reader's lease,
   the follower holding subscriptions to 1,000 tenants. Every post the follower
   was sent (its first is a catch-up) is captured, then 64 clients send them
   again and again, signed as captured, and the same unsigned. Another tenant's
   read on the follower at the same request rate (20 a second) without and with
   each flood: p50, p99, max (before the fix, with the replay flood: p50 334 ms,
   max 1.58 s; each replayed catch-up read the 1,000 heads again).
7. Download links (issue 37): another tenant's read p50 / p99 / max, at one read
   every 50 ms, while 4 clients of one tenant page through 12,000 people with
   12,000 distinct photos (more than the 10,000 links a process reuses), first
   without `url`, then with `photo { url }`: the same load, but every link signed.
   Before, the links were signed on the event loop.
8. A big export (issue 37): `exportTenant` calls of a tenant of 2,000 reminders
   of some 15 KB, and of one of 50,000 deletions, each call's read and write
   units and time, with the call's bound lifted ("before": the old 20 steps of
   100 and 2,000 skipped deletions each, 2 uploads) and as it is ("after"); and
   another tenant's read p99 alone and while 2 clients export the big tenant over
   and over, on a server whose export steps are of up to 100 lines whatever they
   weigh ("before", as until steps were bounded in bytes) and on one as it is.
9. The blob sweep's round (issue 37, finding 3): a tenant of 25,000 records first
   in its registry shard and 8 small ones after it, each with a stale blob; the
   large tenant's calls before the first of theirs, and how long until each had
   its first, with each tenant's whole pass in one turn ("before") and with turns
   of TURN_CALLS calls ("after"); `scripts.benchmarks.sweep_turns`.
10. The gate bypass (issue 48, finding 1): one client's fields cancelled midway
   (a failing non-null field over HTTP, a socket's `complete`), with each call of
   the tenant held 1 s at a proxy: the tenant's calls in flight at most, the
   server's threads, and the calls its log lines counted, with the runner as it
   was ("before", a bench-only app) and as it is; `scripts.benchmarks.gate`.
11. One caller naming many tenants: a token of 12 tenants sends each 29 `changes`
   aliases over and over, its Queries held 1.5 s at a proxy; another caller's
   one-item read p50 / max alone and under it, with each tenant's gate alone
   ("before", a bench-only app) and with the caller's gate as well ("after"); the
   hog's calls in flight at most and the server's threads
   (`scripts.benchmarks.callers`).

Starts its own DynamoDB Local and servers; prints one table. Run with
scripts/bench-hostile (everything), or one part alone: scripts/bench-hostile
replay (6), links (7), exports (8; `exports attack`: its last row alone), sweep
(9), gate (10) or callers (11). `exports` alone also saves its rows as JSON in
`.bench-results/` and writes docs/contract.md's figures of an export's calls from
it (scripts/benchmarks/exports.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
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
from api.domain.records import Record
from api.domain.tokens import next_token, token_time
from api.service import exports as export_rules
from api.service.exports import TenantExport
from api.storage import models
from api.storage.store import DynamoStore
from scripts.benchmarks import exports
from scripts.benchmarks.callers import caller_rows
from scripts.benchmarks.gate import gate_rows
from scripts.benchmarks.harness import SECRET, local_engine_settings
from scripts.benchmarks.page import RESULTS, commit, machine
from scripts.benchmarks.sweep_turns import sweep_rows
from tests.support.bulk import bulk_deletions_and_reminders, bulk_people
from tests.support.family import PERSON
from tests.support.relay_capture import captured
from tests.support.servers import api_server, one_stream_reader
from tests.support.sockets import flooder, wait_for_a_slot
from tests.support.subscribers import ONE_USER_FLEET, SUBSCRIBE, pid_listening, ws_url

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
EXPORT = (
    "mutation($t: ID!, $e: ID) { exportTenant(tenantID: $t, exportID: $e) "
    "{ exportID done entities } }"
)
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


def _paced_reads(
    base: str, headers: dict[str, str], n: int = 300, rate: float = 20.0
) -> list[float]:
    """`n` reads of another tenant at `rate` a second (whatever their latency); ms each."""
    times: list[float] = []
    with httpx2.Client(base_url=base, timeout=120) as http:
        start = time.perf_counter()
        for i in range(n):
            wait = start + i / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            began = time.perf_counter()
            body = http.post("/graphql", json={"query": READ}, headers=headers).json()
            assert "errors" not in body, body
            times.append((time.perf_counter() - began) * 1000)
    return times


def _spread(times: list[float]) -> str:
    p99 = statistics.quantiles(times, n=100)[98]
    return f"{statistics.median(times):.1f} / {p99:.1f} / {max(times):.1f}"


async def _subscribe(base: str, tenants: list[str]) -> Any:
    """One socket with a subscription to each of `tenants` (at most 10)."""
    from websockets.asyncio.client import connect

    token = make_local_token(SECRET, "relay-bench", tenants, 3600)
    socket = await connect(ws_url(base), subprotocols=["graphql-transport-ws"])  # type: ignore[list-item]
    await socket.send(
        json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
    )
    assert json.loads(await socket.recv())["type"] == "connection_ack"
    for i, tenant in enumerate(tenants):
        payload = {"query": SUBSCRIBE, "variables": {"t": tenant, "s": None}}
        await socket.send(json.dumps({"id": f"s{i}", "type": "subscribe", "payload": payload}))
    return socket


def replay_rows() -> list[tuple[str, str]]:
    """6. Another tenant's reads on a follower, without and with a flood of the
    relay posts it was sent, replayed as captured (and unsigned)."""
    rows: list[tuple[str, str]] = []
    env = {**ONE_USER_FLEET, "REALTIME_LEASE_S": "6"}
    capture = "tests.support.relay_capture:create_app"
    calm = {"Authorization": f"Bearer {make_local_token(SECRET, 'calm', ['calm'], 3600)}"}
    with (
        local_engine_settings() as settings,
        api_server(settings, extra_env=env, app=capture, relayed=True) as reader,
        api_server(settings, extra_env=env, app=capture, relayed=True) as follower,
    ):
        with httpx2.Client(base_url=follower, timeout=120) as http:
            for i in range(10):
                person = {"tenantID": "calm", "person": {"givenName": f"p{i}"}}
                create = {"tenantID": "calm", "mutations": [{"createPerson": person}]}
                http.post(
                    "/graphql", json={"query": PUSH, "variables": {"i": create}}, headers=calm
                )
        tenants = [f"subscribed-{i}" for i in range(1000)]

        async def flood_rows() -> None:
            sockets = [await _subscribe(reader, ["calm"])]  # the reader: the first to join
            try:
                await asyncio.to_thread(one_stream_reader, [reader], 30)
                for start in range(0, len(tenants), 10):
                    sockets.append(await _subscribe(follower, tenants[start : start + 10]))
                deadline = time.monotonic() + 60
                posts: list[tuple[dict[str, str], bytes]] = []
                while not any(b'"catchUp": true' in body for _, body in posts):
                    assert time.monotonic() < deadline, "the follower was sent no catch-up"
                    await asyncio.sleep(0.2)
                    posts = await asyncio.to_thread(captured, follower)
                rows.extend(await asyncio.to_thread(_flood_rows, follower, calm, posts))
            finally:
                for socket in sockets:
                    await socket.close()

        asyncio.run(flood_rows())
    return rows


def _flood_rows(
    follower: str, calm: dict[str, str], posts: list[tuple[dict[str, str], bytes]]
) -> list[tuple[str, str]]:
    from api.realtime.relay import PATH, SIGNATURE_HEADER

    wire = [
        ({k: v for k, v in h.items() if k not in ("host", "content-length")}, body)
        for h, body in posts
    ]
    unsigned = [({k: v for k, v in h.items() if k != SIGNATURE_HEADER}, b) for h, b in wire]
    _paced_reads(follower, calm, n=40)  # warm up
    alone = _paced_reads(follower, calm)
    rows = [
        (
            "other tenant's read on a follower with 1,000 subscribed tenants, 20/s: "
            "p50 / p99 / max ms",
            _spread(alone),
        )
    ]
    p99: dict[str, float] = {}
    for name, sent in (("unsigned", unsigned), ("replayed as captured", wire)):
        answers: list[int] = []

        def flood(
            stop: threading.Event,
            sent: list[tuple[dict[str, str], bytes]] = sent,
            answers: list[int] = answers,
        ) -> None:
            with httpx2.Client(base_url=follower, timeout=120) as own:
                while not stop.is_set():
                    for headers, body in sent:
                        answers.append(own.post(PATH, content=body, headers=headers).status_code)

        stop = threading.Event()
        threads = [threading.Thread(target=flood, args=(stop,)) for _ in range(64)]
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        time.sleep(1.0)  # the flood under way
        try:
            times = _paced_reads(follower, calm)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        seconds = time.perf_counter() - began
        taken = sum(a == 204 for a in answers)
        rows.append(
            (
                f"  the same during 64 clients posting the {len(sent)} captured post(s) {name}: "
                "p50 / p99 / max ms; posts/s; taken (204)",
                f"{_spread(times)}; {len(answers) / seconds:.0f}; {taken}",
            )
        )
        p99[name] = statistics.quantiles(times, n=100)[98]
        ratio = p99[name] / statistics.quantiles(alone, n=100)[98]
        rows.append((f"  p99 with the {name} flood / p99 without", f"{ratio:.2f}"))
    # The same post rate, each post refused at its signature: what any post costs.
    ratio = p99["replayed as captured"] / p99["unsigned"]
    rows.append(("  p99 with the replay flood / p99 with the unsigned flood", f"{ratio:.2f}"))
    return rows


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


# The app with export steps of up to 100 lines whatever they weigh, as before steps
# were bounded in bytes too (STEP_BYTES): the "before" of the export attack's row.
STEPS_OF_100_APP = "scripts.bench_hostile:create_app_with_steps_of_100"


def create_app_with_steps_of_100() -> Any:
    export_rules.STEP_BYTES = 10**12
    return create_app()


def _exports(settings: Any, rows: list[tuple[str, str]], calls: bool = True) -> None:
    models.bind(settings)
    bulk_deletions_and_reminders("reminders", 0, 2_000, chars=7_500)  # some 15 KB each
    bulk_deletions_and_reminders("deletions", 50_000, 0)
    for tenant, what in (
        ("reminders", "2,000 reminders of 15 KB"),
        ("deletions", "50,000 deletions"),
    ):
        for label, bounded in (("before", False), ("after", True)):
            if not calls:
                break
            made = _export_calls(settings, tenant, bounded)
            rows.append(
                (
                    f"export of {what}, {label}: calls; per call max read units, "
                    "max write units, max s",
                    f"{len(made)}; {max(c[0] for c in made):.0f}, "
                    f"{max(c[1] for c in made):.0f}, {max(c[2] for c in made):.2f}",
                )
            )
    calm = {"Authorization": f"Bearer {make_local_token(SECRET, 'calm', ['calm'], 3600)}"}
    for label, app in (
        ("steps of 100 lines (before)", STEPS_OF_100_APP),
        ("steps of 256 KB (after)", "api.app:create_app"),
    ):
        with api_server(settings, app=app) as url:
            alone, attacked = _export_attack(url, calm)
        rows.append(
            (
                f"other tenant's read alone / during 2 clients exporting 2,000 x 15 KB, {label}: "
                "p99 ms",
                f"{_p99(alone):.1f} / {_p99(attacked):.1f} ({_p99(attacked) / _p99(alone):.2f}x; "
                f"p50 {statistics.median(alone):.1f} / {statistics.median(attacked):.1f})",
            )
        )


def _export_attack(url: str, calm: dict[str, str]) -> tuple[list[float], list[float]]:
    """Another tenant's read times alone, then while 2 clients export the tenant of
    2,000 reminders of 15 KB over and over."""
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
    return alone, attacked


def main() -> int:
    if sys.argv[1:] == ["replay"]:
        _print(replay_rows())
        return 0
    if sys.argv[1:2] == ["exports"]:
        load_at_start = os.getloadavg()[0]  # the page states it: other work inflates times
        exported: list[tuple[str, str]] = []
        with local_engine_settings() as settings:
            _exports(settings, exported, calls=sys.argv[2:] != ["attack"])
        _print(exported)
        if sys.argv[2:] == []:  # the whole section: docs/contract.md's figures
            exports.PAGE.keep(exports_result(exported, load_at_start), RESULTS)
        return 0
    if sys.argv[1:] == ["sweep"]:
        _print(sweep_rows())
        return 0
    if sys.argv[1:] == ["gate"]:
        _print(gate_rows())
        return 0
    if sys.argv[1:] == ["callers"]:
        _print(caller_rows())
        return 0
    if sys.argv[1:] == ["links"]:
        links: list[tuple[str, str]] = []
        _links_rows(links, _token_of("calm"))
        _print(links)
        return 0
    rows: list[tuple[str, str]] = []
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
    rows += replay_rows()
    _links_rows(rows, calm)
    with local_engine_settings() as settings:
        _exports(settings, rows)
    rows += sweep_rows()
    rows += gate_rows()
    rows += caller_rows()
    _print(rows)
    return 0


def exports_result(rows: list[tuple[str, str]], load_at_start: float) -> dict[str, Any]:
    """The `exports` section's run as it is saved and rendered: its rows as printed."""
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "scripts/bench-hostile exports",
        **commit(),
        "machine": machine(load_at_start),
        "rows": [list(row) for row in rows],
    }


def _token_of(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_local_token(SECRET, tenant, [tenant], 3600)}"}


def _print(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    sys.exit(main())
