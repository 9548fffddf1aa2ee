"""The gate bypass of issue 48 (finding 1), before and after, in one run.

A tenant's gate lets 4 of its reads and 4 of its writes into the worker pool at a
time. A field cancelled midway (graphql-core cancels the other root fields when a
non-null one fails; a socket's `complete` cancels its operation) used to give its
slot back at once while its worker thread went on with its DynamoDB call.

One uvicorn server per runner, on DynamoDB Local behind a proxy that holds each call
LATENCY_S and counts the attacked tenant's calls in flight. One client, one request
at a time, for ATTACK_S each: (1) HTTP requests of 29 `changes` aliases plus another
tenant's (FORBIDDEN at once, non-null); over one socket, (2) the 29 aliases
subscribed and completed 50 ms later, (3) a one-create push likewise. For each: the
most calls of the tenant in flight at once, the server's most threads, and the
DynamoDB calls the attacking requests' log lines counted against those the proxy
saw. "before": the runner as it was (`run_in_threadpool` awaited directly: a
cancelled call's task ends at once), through the same app otherwise
(`create_app_before`, this bench's switch); "after": the app as it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
from starlette.concurrency import run_in_threadpool

from api.app import create_app
from api.auth import make_local_token
from api.settings import Settings
from api.tenant_gate import READERS_PER_TENANT, WRITERS_PER_TENANT
from scripts.benchmarks.harness import SECRET, local_engine_settings
from tests.support.dynamo_proxy import ForwardingProxy
from tests.support.servers import api_server
from tests.support.subscribers import pid_listening, ws_url

TENANT = "gate-attacked"
LATENCY_S = 1.0
ATTACK_S = 3.0
ALIASES = 29
_READ = "changes(tenantID: $t, limit: 1) { changeToken }"
READS = "query($t: ID!) { " + " ".join(f"a{i}: {_READ}" for i in range(ALIASES)) + " }"
FAILING = READS[:-1] + f"denied: {_READ.replace('$t', chr(34) + 'other' + chr(34))} }}"
PUSH = "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }"
RUNNERS = {
    "before": "scripts.benchmarks.gate:create_app_before",
    "after": "scripts.benchmarks.gate:create_app_after",
}


def _logged() -> None:
    """The request log's lines on stderr (the server's log file)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("api.request")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def create_app_before() -> Any:
    """The switch: the runner as it was before issue 48 (anyio's pool awaited
    directly), the rest of the app as it is."""
    _logged()
    return create_app(run_blocking=run_in_threadpool)


def create_app_after() -> Any:
    _logged()
    return create_app()


class LatencyProxy(ForwardingProxy):
    """Between the server and DynamoDB Local: the calls whose body names `tenant`
    held `latency_s` and counted while in flight (most at once, all)."""

    def __init__(self, target: str, tenant: str, latency_s: float) -> None:
        self._tenant = tenant.encode()
        self._latency_s = latency_s
        self._lock = threading.Lock()
        self.now = self.most = self.calls = 0
        super().__init__(target)

    def reset(self) -> None:
        with self._lock:
            self.most = self.now
            self.calls = 0

    def wait_until_idle(self, within_s: float = 120.0, quiet_s: float = 0.5) -> None:
        """Until no call of the tenant has been in flight for `quiet_s`."""
        deadline, quiet_since = time.monotonic() + within_s, time.monotonic()
        while time.monotonic() < deadline:
            if self.now:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > quiet_s:
                return
            time.sleep(0.05)

    def _forward(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any, bytes]:
        counted = self._tenant in body
        if counted:
            with self._lock:
                self.calls += 1
                self.now += 1
                self.most = max(self.most, self.now)
        try:
            if counted:
                time.sleep(self._latency_s)
            return self._send(path, headers, body)
        finally:
            if counted:
                with self._lock:
                    self.now -= 1


@dataclasses.dataclass
class Attack:
    in_flight: int = 0  # the tenant's calls in flight at once, at most
    threads: int = 0  # the server's threads, at most
    logged: int = 0  # DynamoDB calls on the attacking requests' log lines
    made: int = 0  # the tenant's calls the proxy saw
    sent: int = 0  # requests (operations) sent


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


@contextmanager
def _watched(proxy: LatencyProxy, pid: int, attack: Attack) -> Iterator[None]:
    """During the attack: the server's threads sampled; after it, until the proxy
    is idle (the calls left behind have returned), the most in flight."""
    proxy.wait_until_idle()
    proxy.reset()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            attack.threads = max(attack.threads, _threads(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield
        proxy.wait_until_idle()
    finally:
        stop.set()
        sampler.join()
    attack.in_flight, attack.made = proxy.most, proxy.calls


def _http_attack(url: str, headers: dict[str, str], attack: Attack) -> None:
    with httpx2.Client(base_url=url, timeout=300) as http:
        until = time.monotonic() + ATTACK_S
        while time.monotonic() < until:
            body = {"query": FAILING, "variables": {"t": TENANT}}
            request_id = {"x-request-id": f"gate-attack-{attack.sent}"}
            http.post("/graphql", json=body, headers={**headers, **request_id})
            attack.sent += 1


async def _socket_attack(
    url: str, authorization: str, payload: dict[str, Any], ids: str, attack: Attack
) -> None:
    """Operations `payload` over one socket, each completed 50 ms after it was
    subscribed, ids `ids` and a number."""
    from websockets.asyncio.client import connect

    async with connect(ws_url(url), subprotocols=["graphql-transport-ws"]) as socket:  # type: ignore[list-item]
        init = {"type": "connection_init", "payload": {"Authorization": authorization}}
        await socket.send(json.dumps(init))
        assert json.loads(await socket.recv())["type"] == "connection_ack"
        until = time.monotonic() + ATTACK_S
        while time.monotonic() < until:
            op = f"{ids}{attack.sent}"
            await socket.send(json.dumps({"id": op, "type": "subscribe", "payload": payload}))
            await asyncio.sleep(0.05)
            await socket.send(json.dumps({"id": op, "type": "complete"}))
            attack.sent += 1


def _logged_calls(log: Path, request_id: str) -> int:
    """The DynamoDB calls on the log lines whose request id matches `request_id`."""
    calls = 0
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            logged = json.loads(line)
            if re.fullmatch(request_id, logged["requestId"]):
                calls += logged["dynamodbCalls"]
    return calls


def _attacks(settings: Settings, proxy: LatencyProxy, app: str, log: Path) -> dict[str, Attack]:
    token = make_local_token(SECRET, "attacker", [TENANT], 3600)
    headers = {"Authorization": f"Bearer {token}"}
    behind = dataclasses.replace(settings, dynamodb_endpoint=proxy.endpoint)
    attacks = {"http": Attack(), "socket reads": Attack(), "socket writes": Attack()}
    with api_server(behind, app=app, log_file=log) as url:
        pid = pid_listening(url)
        assert pid is not None
        create = {"createPerson": {"tenantID": TENANT, "person": {"givenName": "g"}}}
        push = {"query": PUSH, "variables": {"i": {"tenantID": TENANT, "mutations": [create]}}}
        httpx2.post(f"{url}/graphql", json=push, headers=headers, timeout=60)
        with _watched(proxy, pid, attacks["http"]):
            _http_attack(url, headers, attacks["http"])
        reads = {"query": READS, "variables": {"t": TENANT}}
        for name, payload, ids in (("socket reads", reads, "r"), ("socket writes", push, "w")):
            attack = attacks[name]
            with _watched(proxy, pid, attack):
                asyncio.run(_socket_attack(url, headers["Authorization"], payload, ids, attack))
        time.sleep(0.5)  # the last operations' lines written
    attacks["http"].logged = _logged_calls(log, r"gate-attack-\d+")
    attacks["socket reads"].logged = _logged_calls(log, r"ws-\w+-r\d+")
    attacks["socket writes"].logged = _logged_calls(log, r"ws-\w+-w\d+")
    return attacks


def gate_rows() -> list[tuple[str, str]]:
    results: dict[str, dict[str, Attack]] = {}
    with local_engine_settings() as settings, tempfile.TemporaryDirectory() as logs:
        assert settings.dynamodb_endpoint is not None
        for label, app in RUNNERS.items():
            with LatencyProxy(settings.dynamodb_endpoint, TENANT, LATENCY_S) as proxy:
                results[label] = _attacks(settings, proxy, app, Path(logs, f"{label}.log"))
    rows = []
    for name, what, bound in (
        ("http", f"{ALIASES} aliases + a failing non-null field over HTTP", READERS_PER_TENANT),
        (
            "socket reads",
            f"{ALIASES} aliases subscribed, completed after 50 ms",
            READERS_PER_TENANT,
        ),
        ("socket writes", "a push subscribed, completed after 50 ms", WRITERS_PER_TENANT),
    ):
        before, after = results["before"][name], results["after"][name]
        rows.append(
            (
                f"gate bypass, one client {ATTACK_S:.0f} s: {what} (gate {bound}, calls held "
                f"{LATENCY_S:.1f} s): most in flight, most server threads, before / after",
                f"{before.in_flight}, {before.threads} / {after.in_flight}, {after.threads}",
            )
        )
        rows.append(
            (
                "  requests sent; their log lines' DynamoDB calls / the proxy's, before / after",
                f"{before.sent}; {before.logged} / {before.made}"
                f"  /  {after.sent}; {after.logged} / {after.made}",
            )
        )
    return rows
