"""Three servers on one table, one stream reader among them (issue: realtime beyond
two servers). The reader is chosen by a lease and posts head changes to the others;
every server's relay endpoint fails on a schedule (`tests.support.relay_faults`:
refused, answer lost, too slow), and the reader is killed halfway. After the
writes stop, every subscriber on every surviving server has its tenant's last
token, and exactly one server reads the stream.

Before it, the lease's items on their own table, and what the relay endpoint
refuses.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import hmac
import json
import time
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from api.realtime.lease import LeaseItems
from api.realtime.relay import PATH, SIGNATURE_HEADER, PokeReceiver, relay_key
from api.settings import Settings
from api.storage.store import DynamoStore
from api.storage.table import ensure_table
from tests.support.gql import bearer, post_data
from tests.support.relay_faults import faults
from tests.support.servers import api_server, crash
from tests.support.subscribers import Subscriber, close_all, subscribe_many, ws_url

CREATE = "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { changeToken } } }"
# Heartbeats every 2 s: a takeover comes 4 to 8 s after the reader's crash, long
# after a round of writes (about 1 s) is done.
LEASE_S = 6
PER_TENANT = 2  # subscribers per tenant per server
WRITES = 8  # per server and round: two for each tenant it writes to


def test_one_server_holds_the_lease_until_it_lapses(ddb: Any) -> None:
    table = f"lease-{time.monotonic_ns()}"
    ensure_table(ddb, table)
    items = LeaseItems(ddb, table)
    assert items.holder() == (None, 0)
    assert items.hold("a", until=110, now=100)
    assert not items.hold("b", until=111, now=101)  # held by a until 110
    assert items.hold("a", until=120, now=105)  # a renews
    assert not items.hold("b", until=125, now=115)
    assert items.hold("b", until=131, now=121)  # a's lease lapsed at 120
    assert items.holder() == ("b", 131)
    items.announce("a", "http://a", until=130)
    items.announce("b", "http://b", until=140)
    assert items.servers(now=135) == {"b": "http://b"}  # a's item lapsed
    items.leave("a")  # not the holder: the lease stays
    assert items.holder() == ("b", 131)
    items.leave("b")
    assert items.holder() == (None, 0)
    assert items.servers(now=0) == {}


def test_the_relay_endpoint_takes_only_signed_well_formed_posts() -> None:
    published: list[tuple[str, str]] = []
    caught_up: list[bool] = []
    key = relay_key("secret")
    receiver = PokeReceiver(key, lambda t, token: published.append((t, token)), lambda: None)
    client = TestClient(Starlette(routes=[Route(PATH, receiver.take, methods=["POST"])]))

    def post(body: bytes, signed_with: bytes = key) -> int:
        signature = hmac.new(signed_with, body, hashlib.sha256).hexdigest()
        return client.post(PATH, content=body, headers={SIGNATURE_HEADER: signature}).status_code

    good = json.dumps({"catchUp": False, "pokes": {"t1": "01A"}}).encode()
    assert post(good, signed_with=relay_key("another secret")) == 403
    assert client.post(PATH, content=good).status_code == 403  # unsigned
    assert post(b"{not json") == 400
    assert post(json.dumps({"catchUp": "yes", "pokes": {}}).encode()) == 400
    assert published == []
    assert post(good) == 204
    assert published == [("t1", "01A")]

    def failing() -> None:
        caught_up.append(True)
        raise RuntimeError("throttled")

    failing_receiver = PokeReceiver(key, lambda t, token: None, failing)
    client = TestClient(Starlette(routes=[Route(PATH, failing_receiver.take, methods=["POST"])]))
    # A catch-up that fails is answered 503: the reader posts it again.
    assert post(json.dumps({"catchUp": True, "pokes": {}}).encode()) == 503
    assert caught_up == [True]


def _readers(bases: list[str]) -> list[str]:
    """The servers that say they read the table's stream."""
    return [
        base
        for base in bases
        if httpx2.get(f"{base}/healthz", timeout=5).json()["realtime"]["readsStream"]
    ]


def _one_reader(bases: list[str], within_s: float) -> str:
    deadline = time.monotonic() + within_s
    while True:
        readers = _readers(bases)
        if len(readers) == 1:
            return readers[0]
        assert time.monotonic() < deadline, f"readers after {within_s} s: {readers}"
        time.sleep(0.2)


def _writes(base: str, n: int, tenants: list[str], headers: dict[str, str]) -> None:
    """WRITES creates on `base`, alternating between the tenants (ids from `n`)."""
    for i in range(WRITES):
        _write(base, tenants[i % len(tenants)], f"w{n}-{i}", headers)


def _nobody_reads(bases: list[str]) -> None:
    """The writes were made while no server read the stream: only the new reader's
    catch-up (and its followers') can announce them."""
    assert not _readers(bases), "a server took over before the writes were done"


def _write(base: str, tenant: str, entity_id: str, headers: dict[str, str]) -> None:
    post_data(
        base,
        CREATE,
        {"i": {"tenantID": tenant, "id": entity_id, "person": {"givenName": "x"}}},
        headers,
    )


@pytest.mark.slow
def test_every_subscriber_on_three_servers_gets_the_last_token(settings: Settings) -> None:
    # Two tenants every server subscribes to, and one per server that only it does:
    # that one's writes on other servers reach it through the reader alone.
    shared = [f"relay-{time.monotonic_ns()}-{i}" for i in range(2)]
    own = [f"relay-{time.monotonic_ns()}-own{i}" for i in range(3)]
    tenants = shared + own
    headers = bearer(tenants)
    env = {"REALTIME_LEASE_S": str(LEASE_S)}
    with contextlib.ExitStack() as stack:
        bases = [
            stack.enter_context(
                api_server(
                    settings,
                    extra_env=env,
                    app="tests.support.relay_faults:create_app",
                    relayed=True,
                )
            )
            for _ in range(3)
        ]
        for tenant in tenants:  # each tenant has a head: `since` null waits for news
            _write(bases[0], tenant, "first", headers)
        subscribed = {base: [*shared, mine] for base, mine in zip(bases, own, strict=True)}
        # A server writes to every tenant but its own.
        others = {base: [t for t in tenants if t not in subscribed[base][2:]] for base in bases}

        async def run() -> list[str]:
            fleets: dict[tuple[str, str], tuple[list[Subscriber], Any]] = {}
            for base, its_tenants in subscribed.items():
                for tenant in its_tenants:
                    fleets[base, tenant] = await subscribe_many(
                        ws_url(base), headers["Authorization"], tenant, None, PER_TENANT
                    )

            async def writes_then_check(
                servers: list[str], first: int, before_checking: Any = None
            ) -> None:
                """Writes on each of `servers` at once, then every subscriber there gets
                its tenant's last token."""
                with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
                    await asyncio.gather(
                        *(
                            asyncio.wrap_future(
                                pool.submit(_writes, base, n, others[base], headers)
                            )
                            for n, base in enumerate(servers, first)
                        )
                    )
                if before_checking is not None:
                    before_checking(servers)
                last = {t: head.token for t in tenants if (head := DynamoStore().head(t))}
                behind: list[tuple[str, str, str | None]] = []
                deadline = time.monotonic() + LEASE_S * 3 + 15
                while time.monotonic() < deadline:
                    behind = [
                        (base, tenant, s.events[-1][1] if s.events else None)
                        for base in servers
                        for tenant in subscribed[base]
                        for s in fleets[base, tenant][0]
                        if s.got(last[tenant]) is None
                    ]
                    if not behind:
                        return
                    await asyncio.sleep(0.2)
                raise AssertionError(f"last tokens {last}; left behind: {behind}")

            try:
                reader = await asyncio.to_thread(_one_reader, bases, LEASE_S * 3)
                await writes_then_check(bases, 0)  # the reader hands on, through faults
                crash(reader)
                survivors = [b for b in bases if b != reader]
                await writes_then_check(survivors, 10, before_checking=_nobody_reads)
                await asyncio.to_thread(_one_reader, survivors, LEASE_S * 3)
                await writes_then_check(survivors, 20)  # the new reader hands on
                return survivors
            finally:
                for subscribers, tasks in fleets.values():
                    await close_all(subscribers, tasks)

        survivors = asyncio.run(run())
        assert len(_readers(survivors)) == 1  # a new reader, and one only
        injected = [faults(base) for base in survivors]
        for kind in ("refused", "answer lost", "too slow"):
            assert sum(f.get(kind, 0) for f in injected) > 0, injected
