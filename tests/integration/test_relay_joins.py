"""A server that joins the stream reader's lease is posted to before the reader's next
heartbeat: from the stream, which carries the joining server's item, or, if it
joined before the reader took its iterators, from the servers read once more then.

Before, the reader learned of the servers only at its heartbeats (every 5 s): a
server's first subscribers heard of no other server's write until then, and a
burst of writes on six servers just started reached them up to 5 s late (relayed
p99 4.3-4.9 s). Here the reader's heartbeats are a thousand seconds apart, so
only the joins themselves can bring the pokes; nothing is timed.

Real servers on a table of their own (a lease that long must start free), as in
`test_stream_readers.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import pytest

from api.realtime.lease import LeaseItems, StreamReaderLease
from api.settings import Settings
from api.storage.table import ensure_table
from tests.support.gql import bearer, post_data
from tests.support.servers import api_server, one_stream_reader
from tests.support.subscribers import Subscriber, close_all, subscribe_many, ws_url

# A capability beyond the sync core: scripts/test --all (pyproject's `slow`).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

CREATE = "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { changeToken } } }"
# Heartbeats 1,000 s apart: after its first, the reader reads the servers no more.
LEASE_S = 3000


def _write(base: str, tenant: str, headers: dict[str, str]) -> str:
    created = post_data(base, CREATE, {"i": {"tenantID": tenant, "person": {}}}, headers)
    return str(created["createPerson"]["person"]["changeToken"])


async def _until(done: Callable[[], bool], what: str, within_s: float = 60) -> None:
    deadline = time.monotonic() + within_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}")
        await asyncio.sleep(0.05)


def test_servers_that_join_are_posted_to_before_the_readers_next_heartbeat(
    settings: Settings, ddb: Any
) -> None:
    table = f"joins-{time.monotonic_ns()}"
    ensure_table(ddb, table)
    own = dataclasses.replace(settings, table_name=table)
    items = LeaseItems(ddb, table)
    tenant = f"joins-{time.monotonic_ns()}"
    headers = bearer([tenant])
    env = {"REALTIME_LEASE_S": str(LEASE_S)}
    with contextlib.ExitStack() as stack:
        a, b, c = (
            stack.enter_context(api_server(own, extra_env=env, relayed=True)) for _ in range(3)
        )
        _write(a, tenant, headers)

        async def watch(base: str) -> tuple[Subscriber, list[asyncio.Task[None]]]:
            (subscriber,), tasks = await subscribe_many(
                ws_url(base), headers["Authorization"], tenant, None, 1
            )
            return subscriber, tasks

        async def run() -> None:
            watching = [await watch(a)]  # A joins first: it takes the lease
            try:
                assert await asyncio.to_thread(one_stream_reader, [a], 60) == a
                # B joins after A's heartbeat read the servers (and maybe before A
                # took its iterators): a write on A reaches B's subscriber.
                watching.append(await watch(b))
                await _until(lambda: len(items.servers()) == 2, "B's item in the table")
                token = await asyncio.to_thread(_write, a, tenant, headers)
                await _until(lambda: watching[1][0].got(token) is not None, "A's write on B")
                # C joins long after A's iterators were taken: a write on B, which A
                # reads in the stream, reaches C's subscriber.
                watching.append(await watch(c))
                await _until(lambda: len(items.servers()) == 3, "C's item in the table")
                token = await asyncio.to_thread(_write, b, tenant, headers)
                await _until(lambda: watching[2][0].got(token) is not None, "B's write on C")
                await _until(lambda: watching[0][0].got(token) is not None, "B's write on A")
            finally:
                for subscriber, tasks in watching:
                    await close_all([subscriber], tasks)

        asyncio.run(run())


class _Clock:
    def __init__(self) -> None:
        self.at = 100.0

    def __call__(self) -> float:
        return self.at


class _Reader:
    """A stream reader that always made progress just now."""

    def __init__(self, clock: _Clock) -> None:
        self._clock = clock

    @property
    def progressed_at(self) -> float:
        return self._clock.at

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _lease(
    items: LeaseItems, name: str, followed: dict[str, dict[str, str]], clock: _Clock
) -> StreamReaderLease:
    return StreamReaderLease(
        items,
        name,
        f"http://{name}",
        reader=lambda: _Reader(clock),
        follow=lambda servers: followed.__setitem__(name, dict(servers)),
        lease_s=15,
        clock=clock,
    )


def test_a_heartbeat_that_read_the_servers_before_one_joined_keeps_posting_to_it(
    ddb: Any,
) -> None:
    """The stream shows C's item while the reader's heartbeat is reading the servers
    (a read that began before C put it): the heartbeat's list, without C, does not
    drop it. And servers that put their items before the reader took its iterators
    are posted to once it has (`caught_up`), not at its next heartbeat."""
    table = f"joins-{time.monotonic_ns()}"
    ensure_table(ddb, table)
    followed: dict[str, dict[str, str]] = {}
    clock = _Clock()
    items = LeaseItems(ddb, table)

    class Racing(LeaseItems):
        joining: StreamReaderLease | None = None

        def servers(self) -> dict[str, tuple[str, int]]:
            found = super().servers()
            if self.joining is not None:  # put while this read is under way
                joining, self.joining = self.joining, None
                joining._beat()
                a.announced(joining.server_id, "http://" + joining.server_id)
            return found

    racing = Racing(ddb, table)
    a = _lease(racing, "a", followed, clock)
    a._beat()
    assert a.reading and followed["a"] == {}
    b = _lease(items, "b", followed, clock)
    b._beat()  # B joins before A's reading took its iterators
    assert followed["a"] == {}
    a.caught_up()
    assert followed["a"] == {"b": "http://b"}
    racing.joining = _lease(items, "c", followed, clock)
    clock.at += 5
    b._beat()
    a._beat()
    assert followed["a"] == {"b": "http://b", "c": "http://c"}
    clock.at += 5  # the next heartbeat's read sees C's item itself
    b._beat()
    a._beat()
    assert followed["a"] == {"b": "http://b", "c": "http://c"}
