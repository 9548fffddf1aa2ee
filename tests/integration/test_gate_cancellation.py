"""A tenant's gate holds whatever cancels a request's fields (issue 48, finding 1).

graphql-core cancels a request's other root fields when a non-null one fails, and
graphql-transport-ws's `complete` cancels an operation. The gate's slot used to be
given back at once while the field's worker thread went on with its DynamoDB call:
one client held 175 Queries of one tenant in flight (gate: 4), and the request's log
line said 0 calls. Here a DynamoDB proxy (a botocore hook, in the worker thread)
adds latency to the tenant's calls and counts how many are in flight at once, over
HTTP (aliases plus a failing non-null field, from 3 clients at once) and over a
WebSocket (subscribe, then complete 50 ms later), with each pool a process runs
its calls in (`api.worker_threads`): never more than the gate, and the attacking
requests' log lines count every call the proxy saw."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mangum import Mangum
from starlette.testclient import TestClient

from api.app import create_app, create_lambda_app
from api.settings import PROJECT_ROOT, Settings
from api.tenant_gate import READERS_PER_TENANT, WRITERS_PER_TENANT
from api.worker_threads import RunBlocking, anyio_pool, persistent_pool
from tests.support.gql import GraphQLClient, bearer

# A capability's limits under attack, several seconds in all: scripts/test --all.
pytestmark = pytest.mark.slow

Inject = Callable[[str, Callable[..., Any]], None]
# Longer than the 50 ms before `complete`, so calls are cut midway. A push is one
# call (a transaction) and a socket sends one every ~0.1 s here: its writes are held
# longer, so that those a `complete` let through pile up.
LATENCY_S = {"reads": 0.2, "writes": 0.3}
ALIASES = 6  # more than the gate's 4: some wait at the gate, some are inside
READ = "changes(tenantID: $t, limit: 1) { changeToken }"
ALIASED = " ".join(f"a{i}: {READ}" for i in range(ALIASES))
# The last root field is another tenant's: FORBIDDEN at once, and non-null, so
# graphql-core cancels the aliases in flight.
FAILING = f"query($t: ID!, $o: ID!) {{ {ALIASED} denied: {READ.replace('$t', '$o')} }}"
PUSH = "mutation($i: PushChangesInput!) { pushChanges(input: $i) { results { status } } }"
POOLS: dict[str, Callable[[], RunBlocking]] = {
    "anyio (servers)": anyio_pool,
    "persistent (Lambda)": persistent_pool,
}


class InFlight:
    """Before each DynamoDB call of `tenant` (botocore's before-send, in the calling
    thread), wait as a slow table would, counting the calls in flight; `writes`
    tells whether the calls now are writes' (the test sends them apart)."""

    def __init__(self, tenant: str, writes: Callable[[], bool]) -> None:
        self.tenant = tenant
        self._writes = writes
        self.lock = threading.Lock()
        self.now = {"reads": 0, "writes": 0}
        self.most = {"reads": 0, "writes": 0}
        self.calls = 0

    def __call__(self, request: Any = None, **_: Any) -> None:
        body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        if self.tenant not in body:
            return
        # What its gates bound: calls on its own partitions (T#<tenant>, T#<tenant>#LOG,
        # ...); another tenant's whose id starts with it (the caller's access to that
        # one is read too) is counted and slowed alike, but not in flight as its own.
        own = re.search(rf'T#{re.escape(self.tenant)}["#]', body) is not None
        kind = "writes" if self._writes() else "reads"
        with self.lock:
            self.calls += 1
            self.now[kind] += own
            self.most[kind] = max(self.most[kind], self.now[kind])
        try:
            time.sleep(LATENCY_S[kind])
        finally:
            with self.lock:
                self.now[kind] -= own

    def wait_until_idle(self, within_s: float = 15.0) -> None:
        deadline = time.monotonic() + within_s
        while sum(self.now.values()) and time.monotonic() < deadline:
            time.sleep(0.02)


@pytest.fixture(params=list(POOLS), scope="module")
def client(request: pytest.FixtureRequest, settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings, run_blocking=POOLS[request.param]())) as running:
        yield running


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture) -> Callable[[str], list[dict[str, Any]]]:
    caplog.set_level(logging.INFO, logger="api.request")

    def of(prefix: str) -> list[dict[str, Any]]:
        records = [json.loads(r.getMessage()) for r in caplog.records if r.name == "api.request"]
        return [line for line in records if line["requestId"].startswith(prefix)]

    return of


def test_failing_fields_over_http_leave_no_read_past_the_gate(
    client: TestClient, tenant: str, inject: Inject, lines: Callable[[str], list[dict[str, Any]]]
) -> None:
    gql = GraphQLClient(client)
    gql.create(tenant, "Person", {})
    proxy = InFlight(tenant, lambda: False)  # reads only
    inject("before-send.dynamodb", proxy)
    headers = bearer([tenant])

    def attack(n: int) -> list[str]:
        codes = []
        for i in range(2):
            response = client.post(
                "/graphql",
                json={"query": FAILING, "variables": {"t": tenant, "o": f"{tenant}-other"}},
                headers={**headers, "x-request-id": f"attack-{tenant}-{n}-{i}"},
            )
            codes += [e["extensions"]["code"] for e in response.json()["errors"]]
        return codes

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        codes = [c for codes in pool.map(attack, range(3)) for c in codes]
    proxy.wait_until_idle()
    assert "FORBIDDEN" in codes and set(codes) <= {"FORBIDDEN", "UNAVAILABLE"}, codes
    assert proxy.most["reads"] <= READERS_PER_TENANT, proxy.most
    logged = lines(f"attack-{tenant}")
    assert len(logged) == 6
    assert sum(line["dynamodbCalls"] for line in logged) == proxy.calls > 0, (logged, proxy.calls)


def test_completed_socket_operations_leave_no_call_past_the_gate(
    client: TestClient, tenant: str, inject: Inject, lines: Callable[[str], list[dict[str, Any]]]
) -> None:
    gql = GraphQLClient(client)
    gql.create(tenant, "Person", {})
    writing = threading.Event()  # set while the socket sends mutations (reads are done)
    proxy = InFlight(tenant, writing.is_set)
    inject("before-send.dynamodb", proxy)
    creates = [{"createPerson": {"tenantID": tenant, "person": {"givenName": "g"}}}] * 3
    operations = [
        *({"query": f"query($t: ID!) {{ {ALIASED} }}", "variables": {"t": tenant}},) * 3,
        *({"query": PUSH, "variables": {"i": {"tenantID": tenant, "mutations": creates}}},) * 8,
    ]
    with client.websocket_connect("/graphql", subprotocols=["graphql-transport-ws"]) as ws:
        ws.send_json({"type": "connection_init", "payload": bearer([tenant])})
        assert ws.receive_json()["type"] == "connection_ack"
        for i, payload in enumerate(operations):
            if payload["query"] == PUSH and not writing.is_set():
                proxy.wait_until_idle()
                writing.set()
            ws.send_json({"id": f"op{i}", "type": "subscribe", "payload": payload})
            time.sleep(0.05)
            ws.send_json({"id": f"op{i}", "type": "complete"})
    # An operation's line is written once its calls have returned (a push retries
    # the transactions it lost to the others in the same call).
    deadline = time.monotonic() + 15
    while len(lines("ws-")) < len(operations) and time.monotonic() < deadline:
        time.sleep(0.02)
    proxy.wait_until_idle()
    most = proxy.most
    assert most["reads"] <= READERS_PER_TENANT and most["writes"] <= WRITERS_PER_TENANT, most
    logged = lines("ws-")
    assert len(logged) == len(operations), logged
    assert sum(line["dynamodbCalls"] for line in logged) == proxy.calls > 0, (logged, proxy.calls)


def test_a_lambda_invocation_ends_once_the_calls_of_its_cancelled_fields_have(
    settings: Settings,
    gql: GraphQLClient,
    tenant: str,
    inject: Inject,
    lines: Callable[[str], list[dict[str, Any]]],
) -> None:
    """A Lambda sandbox runs one request at a time, each in a `run_until_complete`
    of its own (Mangum): a cancelled field's call ran on into the next invocations
    (on AWS, frozen between them). Now none is left running when one returns."""
    # The request log through `logging` (METRICS=off), where `lines` reads it: on
    # Lambda it is an EMF line on stdout (api.metrics), the same counts.
    handler = Mangum(
        create_lambda_app(dataclasses.replace(settings, metrics="off")), lifespan="off"
    )
    try:
        _invoke_three_times(handler, gql, tenant, inject, lines)
    finally:
        # Mangum made this thread's event loop and keeps it, as a Lambda process
        # should; a test process closes it, or whoever drops it later warns.
        loop = asyncio.get_event_loop_policy().get_event_loop()
        if not loop.is_running():
            loop.close()
        asyncio.set_event_loop(None)


def _invoke_three_times(
    handler: Mangum,
    gql: GraphQLClient,
    tenant: str,
    inject: Inject,
    lines: Callable[[str], list[dict[str, Any]]],
) -> None:
    gql.create(tenant, "Person", {})
    proxy = InFlight(tenant, lambda: False)
    inject("before-send.dynamodb", proxy)
    event = json.loads(Path(PROJECT_ROOT, "tests/deploy/events/query.json").read_text())
    event["headers"]["authorization"] = bearer([tenant])["Authorization"]
    # Another tenant whose id starts with this one's: the proxy sees the read of the
    # caller's access to it too (`InFlight`), as every call the request log counts.
    other = f"{tenant}-other"
    event["body"] = json.dumps({"query": FAILING, "variables": {"t": tenant, "o": other}})
    left_running = []
    for i in range(3):
        event["headers"]["x-request-id"] = f"lambda-{tenant}-{i}"
        answer = handler(event, SimpleNamespace(aws_request_id=f"r{i}", function_name="api"))
        assert "FORBIDDEN" in answer["body"], answer
        left_running.append(proxy.now["reads"])
    proxy.wait_until_idle()
    assert left_running == [0, 0, 0] and proxy.most["reads"] <= READERS_PER_TENANT, (
        left_running,
        proxy.most,
    )
    logged = lines(f"lambda-{tenant}")
    assert sum(line["dynamodbCalls"] for line in logged) == proxy.calls > 0, (logged, proxy.calls)
