"""One caller naming many tenants against another caller's read, before and after
the caller's gate, in one run (`api.tenant_gate`, CALLS_PER_CALLER).

One uvicorn server per runner, on DynamoDB Local behind a proxy that holds each of
the hog's calls LATENCY_S (a slow Query) and counts them while in flight. The hog:
one token listing TENANTS tenants, one client per tenant sending requests of
ALIASES `changes` aliases over and over (pausing BACK_OFF_S after an answer with
an UNAVAILABLE field, as a client retries).
The other caller: one-item reads of its own tenant, one at a time, first alone
(the baseline, the same server), then for ATTACK_S under the hog. "before": each
tenant's gate alone (the caller's gate lifted, this bench's switch); "after": the
app as it is.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from typing import Any

import httpx2

from api.app import create_app
from api.auth import make_local_token
from api.settings import Settings
from api.tenant_gate import CALLS_PER_CALLER, TenantGate
from scripts.benchmarks.gate import LatencyProxy, _threads
from scripts.benchmarks.harness import SECRET, local_engine_settings
from tests.support.servers import api_server
from tests.support.subscribers import pid_listening

HOG = "callers-hog"  # the proxy holds the calls whose body names it
OTHER = "callers-other"
TENANTS = 12
ALIASES = 29
LATENCY_S = 1.5
ALONE_S = 3.0
BACK_OFF_S = 1.0  # the hog's pause after an UNAVAILABLE answer
ATTACK_S = 10.0
_READ = "changes(tenantID: $t, limit: 1) { changeToken }"
READS = "query($t: ID!) { " + " ".join(f"a{i}: {_READ}" for i in range(ALIASES)) + " }"
ONE_ITEM = "query($t: ID!, $id: ID!) { person(tenantID: $t, id: $id) { id } }"
CREATE = "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { id } } }"
RUNNERS = {
    "before": "scripts.benchmarks.callers:create_app_before",
    "after": "scripts.benchmarks.callers:create_app_after",
}


def create_app_before() -> Any:
    """The switch: a caller's gate that admits any number (each tenant's alone)."""
    from api.graphql import view

    view.caller_gate = lambda: TenantGate(1_000_000, what="calls", whose="caller")
    return create_app()


def create_app_after() -> Any:
    return create_app()


@dataclasses.dataclass
class Run:
    alone: list[float] = dataclasses.field(default_factory=list)  # ms
    attacked: list[float] = dataclasses.field(default_factory=list)  # ms
    in_flight: int = 0  # the hog's calls in flight at once, at most
    threads: int = 0  # the server's threads, at most
    hog_sent: int = 0
    hog_refused: int = 0  # requests answered with an UNAVAILABLE field


def _token(sub: str, tenants: list[str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_local_token(SECRET, sub, tenants, 3600)}"}


def _reads(
    http: httpx2.Client, person: str, headers: dict[str, str], seconds: float
) -> list[float]:
    times = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        started = time.perf_counter()
        body = http.post(
            "/graphql",
            json={"query": ONE_ITEM, "variables": {"t": OTHER, "id": person}},
            headers=headers,
        ).json()
        times.append((time.perf_counter() - started) * 1000)
        assert body["data"]["person"]["id"] == person, body
    return times


def _run(settings: Settings, app: str) -> Run:
    assert settings.dynamodb_endpoint is not None
    run = Run()
    hogs = [f"{HOG}{i:02d}" for i in range(TENANTS)]
    hog_headers, other_headers = _token("hog", hogs), _token("other", [OTHER])
    with LatencyProxy(settings.dynamodb_endpoint, HOG, LATENCY_S) as proxy:
        behind = dataclasses.replace(settings, dynamodb_endpoint=proxy.endpoint)
        with api_server(behind, app=app) as url, httpx2.Client(base_url=url, timeout=300) as http:
            pid = pid_listening(url)
            assert pid is not None
            create = {"i": {"tenantID": OTHER, "person": {"givenName": "o"}}}
            answer = http.post(
                "/graphql", json={"query": CREATE, "variables": create}, headers=other_headers
            ).json()
            person = answer["data"]["createPerson"]["person"]["id"]
            run.alone = _reads(http, person, other_headers, ALONE_S)
            stop = threading.Event()
            lock = threading.Lock()

            def hog(tenant: str) -> None:
                with httpx2.Client(base_url=url, timeout=300) as own:
                    while not stop.is_set():
                        body = own.post(
                            "/graphql",
                            json={"query": READS, "variables": {"t": tenant}},
                            headers=hog_headers,
                        ).json()
                        codes = {
                            e.get("extensions", {}).get("code") for e in body.get("errors", [])
                        }
                        with lock:
                            run.hog_sent += 1
                            run.hog_refused += "UNAVAILABLE" in codes
                        if "UNAVAILABLE" in codes:  # retryable: it backs off, as a client does
                            stop.wait(BACK_OFF_S)

            def sample() -> None:
                while not stop.is_set():
                    run.threads = max(run.threads, _threads(pid))
                    time.sleep(0.02)

            workers = [threading.Thread(target=hog, args=(t,)) for t in hogs]
            workers.append(threading.Thread(target=sample))
            for worker in workers:
                worker.start()
            time.sleep(LATENCY_S)  # the hog's first calls are held
            try:
                run.attacked = _reads(http, person, other_headers, ATTACK_S)
            finally:
                stop.set()
                for worker in workers:
                    worker.join()
            proxy.wait_until_idle()
            run.in_flight = proxy.most
    return run


def _ms(times: list[float]) -> str:
    return f"{statistics.median(times):.0f} / {max(times):.0f}"


def caller_rows() -> list[tuple[str, str]]:
    with local_engine_settings() as settings:
        runs = {label: _run(settings, app) for label, app in RUNNERS.items()}
    before, after = runs["before"], runs["after"]
    alone = before.alone + after.alone
    what = (
        f"one caller of {TENANTS} tenants, {ALIASES} aliases each, its Queries held "
        f"{LATENCY_S:.1f} s (caller's share {CALLS_PER_CALLER})"
    )
    return [
        (
            f"{what}: another caller's one-item read p50 / max ms, alone; under it, before / after",
            f"{_ms(alone)}; {_ms(before.attacked)} / {_ms(after.attacked)}",
        ),
        (
            f"  its reads in {ATTACK_S:.0f} s; the hog's calls in flight at most, the "
            "server's threads at most, before / after",
            f"{len(before.attacked)}; {before.in_flight}, {before.threads}"
            f"  /  {len(after.attacked)}; {after.in_flight}, {after.threads}",
        ),
        (
            "  the hog's requests sent; answered with an UNAVAILABLE field, before / after",
            f"{before.hog_sent}; {before.hog_refused} / {after.hog_sent}; {after.hog_refused}",
        ),
    ]
