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
import logging
import time
from typing import Any

import pytest
from botocore.config import Config
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from api.realtime.lease import LeaseItems, StreamReaderLease
from api.realtime.poke_receiver import PokeReceiver
from api.realtime.relay import (
    EPOCH_HEADER,
    PATH,
    SEQ_HEADER,
    SIGNATURE_HEADER,
    TO_HEADER,
    WINDOW,
    relay_key,
)
from api.settings import Settings
from api.storage.store import DynamoStore
from api.storage.table import ensure_table
from tests.support.faults import Fault, connection_refused, hooks_on
from tests.support.gql import bearer, post_data
from tests.support.relay_faults import faults
from tests.support.servers import api_server, crash, one_stream_reader, stream_readers
from tests.support.subscribers import Subscriber, close_all, subscribe_many, ws_url

# A capability beyond the sync core: scripts/test --all (pyproject's `slow`).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

CREATE = "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { changeToken } } }"
# Heartbeats every 2 s: a takeover comes 4 to 8 s after the reader's crash, long
# after a round of writes (about 1 s) is done.
LEASE_S = 6
PER_TENANT = 2  # subscribers per tenant per server
WRITES = 8  # per server and round: two for each tenant it writes to


class _Reader:
    """A stream reader that makes progress only when told to."""

    def __init__(self) -> None:
        self.progressed_at = 0.0
        self.running = False

    def start(self) -> None:
        self.running = True

    def stop(self) -> None:
        self.running = False


class _Clock:
    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def test_the_lease_moves_when_its_counter_stops_whatever_the_clocks(ddb: Any) -> None:
    table = f"lease-{time.monotonic_ns()}"
    ensure_table(ddb, table)
    items = LeaseItems(ddb, table)
    followed: dict[str, dict[str, str]] = {}

    def server(name: str, clock: _Clock) -> tuple[StreamReaderLease, _Reader]:
        reader = _Reader()
        lease = StreamReaderLease(
            items,
            name,
            f"http://{name}",
            reader=lambda: reader,
            follow=lambda servers: followed.__setitem__(name, servers),
            lease_s=15,
            clock=clock,
        )
        return lease, reader

    # b's clock is 1,000 s ahead of a's (monotonic clocks share no origin anyway).
    a_clock, b_clock = _Clock(100.0), _Clock(1100.0)
    a, a_reader = server("a", a_clock)
    b, b_reader = server("b", b_clock)
    a._beat()
    assert a.reading and a_reader.running  # nobody held it: a takes it
    for _ in range(10):  # a renews every 5 s; b never takes it, whatever its clock
        a_clock.at += 5
        b_clock.at += 5
        a_reader.progressed_at = a_clock.at
        b._beat()
        a._beat()
        assert a.reading and not b.reading
    assert followed["a"] == {"b": "http://b"}  # b's counter moves: a posts to it
    # a stops beating (a crash): b sees its last renewal at its next beat, and takes
    # over once the counter has stood still for more than a lease by b's clock.
    for _ in range(4):
        b_clock.at += 5
        b._beat()
        assert not b.reading
    b_clock.at += 5
    b._beat()
    assert b.reading
    assert items.holder()[0] == "b"
    a_clock.at += 5
    a_reader.progressed_at = a_clock.at
    a._beat()  # a comes back: its renewal fails and it stops reading
    assert not a.reading and not a_reader.running


def test_a_reader_that_makes_no_progress_steps_down(ddb: Any) -> None:
    table = f"lease-{time.monotonic_ns()}"
    ensure_table(ddb, table)
    items = LeaseItems(ddb, table)
    clock, reader = _Clock(0.0), _Reader()
    lease = StreamReaderLease(
        items,
        "a",
        "http://a",
        reader=lambda: reader,
        follow=lambda _: None,
        lease_s=15,
        clock=clock,
    )
    lease._beat()
    assert lease.reading
    clock.at = 16.0  # no stream poll completed for a lease (e.g. no GetRecords permission)
    lease._beat()
    assert not lease.reading and not reader.running
    clock.at = 30.0
    lease._beat()
    assert not lease.reading  # it leaves the lease to the others for two leases
    lease.stop()
    assert items.holder()[0] is None  # nobody holds it; its counter stays


def test_a_heartbeat_on_a_down_engine_is_logged_once_then_less_and_less_often(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """Each heartbeat (every 5 s) logged a traceback while the engine was down; now
    the first, then the 2nd, 4th, 8th... in a row in a line, and once when it beats
    again."""
    dynamodb = settings.dynamodb_client(config=Config(retries={"total_max_attempts": 1}))
    table = f"lease-{time.monotonic_ns()}"
    ensure_table(dynamodb, table)
    lease = StreamReaderLease(
        LeaseItems(dynamodb, table),
        "a",
        "http://a",
        reader=_Reader,
        follow=lambda _: None,
        lease_s=0.03,  # a heartbeat every 10 ms
    )
    down = Fault(connection_refused())
    caplog.set_level(logging.INFO, logger="api.realtime")
    with hooks_on(dynamodb.meta.events) as register:
        register("before-send.dynamodb", down)
        lease.start()
        try:
            deadline = time.monotonic() + 60
            # 33, not 32: the count goes up before its failure's line is logged, so the
            # 32nd's line is surely written once the 33rd failure is counted (CI read
            # the lines between the two: `said[5]`, IndexError).
            while lease.failures.count < 33 and time.monotonic() < deadline:
                time.sleep(0.02)
            failures = lease.failures.count
            said = [r for r in caplog.records if "heartbeat" in r.getMessage()]
            down.stop()  # the engine is back
            deadline = time.monotonic() + 30
            while lease.failures.count and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            lease.stop()
    assert failures >= 33, failures
    assert said[0].exc_info is not None, "the first failure's traceback"
    assert all(r.exc_info is None for r in said[1:]), "later failures: a line each"
    assert len(said) <= 7, [r.getMessage() for r in said]  # 1, 2, 4, 8, 16, 32 (64)
    assert "still fails (32 times in a row)" in said[5].getMessage()
    assert any("heartbeat works again" in r.getMessage() for r in caplog.records)


def test_the_relay_endpoint_takes_only_signed_new_well_formed_posts() -> None:
    published: list[tuple[str, str]] = []
    caught_up: list[bool] = []
    key = relay_key("secret")
    token = "01KAXW0000000000000000000Z"
    receiver = PokeReceiver(
        "me", key, lambda t, tok, _audience: published.append((t, tok)), lambda: None
    )
    client = TestClient(Starlette(routes=[Route(PATH, receiver.take, methods=["POST"])]))
    numbers = iter(range(1, 1000))

    def post(
        message: Any,
        signed_with: bytes = key,
        to: str = "me",
        epoch: int = 1,
        seq: int | None = None,
    ) -> int:
        body = message if isinstance(message, bytes) else json.dumps(message).encode()
        seq = next(numbers) if seq is None else seq
        signed = f"{to}\n{epoch}\n{seq}\n".encode() + body
        headers = {
            TO_HEADER: to,
            EPOCH_HEADER: str(epoch),
            SEQ_HEADER: str(seq),
            SIGNATURE_HEADER: hmac.new(signed_with, signed, hashlib.sha256).hexdigest(),
        }
        return client.post(PATH, content=body, headers=headers).status_code

    good = {"catchUp": False, "pokes": {"t1": token}}
    assert post(good, signed_with=relay_key("another secret")) == 403
    assert client.post(PATH, json=good).status_code == 403  # unsigned
    latin = {SIGNATURE_HEADER.encode(): "é".encode("latin-1")}  # not ASCII: still a 403
    assert client.post(PATH, json=good, headers=latin).status_code == 403
    assert post(b"{not json") == 400
    assert post({**good, "catchUp": "yes"}) == 400
    assert post({**good, "pokes": {"t1": "~~~~"}}) == 400  # not a token: it would stop events
    assert post({**good, "pokes": {"t#1": token}}) == 400
    assert post(good, to="another server") == 409  # a URL that reaches the wrong one
    assert published == []
    assert post(good, seq=500) == 204
    assert published == [("t1", token)]
    # The same post again, one below the window of numbers kept, an older reader's:
    # refused, nothing published. One below the highest but within the window, never
    # taken (posts in flight at once arrive in any order), is taken once.
    assert post(good, seq=500) == 409
    assert post(good, seq=500 - WINDOW) == 409
    assert post(good, epoch=0, seq=10**6) == 409  # a probe's epoch with no nonce issued
    assert published == [("t1", token)]
    assert post(good, seq=499) == 204
    assert post(good, seq=499) == 409
    assert post(good, seq=501) == 204
    assert post(good, epoch=2, seq=1) == 204  # a new reader: its numbers start again
    assert post(good, epoch=1, seq=1000) == 409
    assert published == [("t1", token)] * 4
    # A deletion's poke names the tenant's last token before it.
    assert post({**good, "pokes": {"t1": f"~deleting/{token}"}}, epoch=2, seq=2) == 204

    def failing() -> None:
        caught_up.append(True)
        raise RuntimeError("throttled")

    failing_receiver = PokeReceiver("me", key, lambda t, tok, _audience: None, failing)
    client = TestClient(Starlette(routes=[Route(PATH, failing_receiver.take, methods=["POST"])]))
    # A catch-up that fails is answered 503: the reader posts it again (a new number).
    assert post({"catchUp": True, "pokes": {}}) == 503
    assert post({"catchUp": True, "pokes": {}}) == 503
    assert caught_up == [True, True]


def _writes(base: str, n: int, tenants: list[str], headers: dict[str, str]) -> None:
    """WRITES creates on `base`, alternating between the tenants (ids from `n`)."""
    for i in range(WRITES):
        _write(base, tenants[i % len(tenants)], f"w{n}-{i}", headers)


def _nobody_reads(bases: list[str]) -> None:
    """Whether the writes were made while no server read the stream, so that only
    the new reader's catch-up (and its followers') can announce them. On a loaded
    machine a survivor may take over before the writes are done (the lease is
    LEASE_S): then part of them come through the stream instead, and the test still
    holds every subscriber to the last token, which is the promise."""
    readers = stream_readers(bases)
    if readers:
        logging.getLogger(__name__).warning(
            "a server took over before the writes were done (%s): the catch-up saw fewer",
            readers,
        )


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
                reader = await asyncio.to_thread(one_stream_reader, bases, LEASE_S * 3)
                await writes_then_check(bases, 0)  # the reader hands on, through faults
                crash(reader)
                survivors = [b for b in bases if b != reader]
                await writes_then_check(survivors, 10, before_checking=_nobody_reads)
                await asyncio.to_thread(one_stream_reader, survivors, LEASE_S * 3)
                await writes_then_check(survivors, 20)  # the new reader hands on
                return survivors
            finally:
                for subscribers, tasks in fleets.values():
                    await close_all(subscribers, tasks)

        survivors = asyncio.run(run())
        assert len(stream_readers(survivors)) == 1  # a new reader, and one only
        injected = [faults(base) for base in survivors]
        for kind in ("refused", "answer lost", "too slow"):
            assert sum(f.get(kind, 0) for f in injected) > 0, injected
