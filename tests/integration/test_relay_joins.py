"""A server that joins the stream reader's lease is posted to before the reader's next
heartbeat: from the stream, which carries the joining server's item, or, if it
joined before the reader took its iterators, from the servers read once more then.

Before, the reader learned of the servers only at its heartbeats (every 5 s): a
server's first subscribers heard of no other server's write until then, and a
burst of writes on six servers just started reached them up to 5 s late (relayed
p99 4.3-4.9 s). Here the reader's heartbeats are a thousand seconds apart, so
only the joins themselves can bring the pokes; nothing is timed.

Real servers on a table of their own (a lease that long must start free), as in
`test_stream_readers.py`; the subscriptions are held by the graphql-ws client from
npm (`tests/ecosystem/js/watch.mjs`, the versions tests/ecosystem/js pins).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from api.realtime.lease import LeaseItems, StreamReaderLease
from api.settings import Settings
from api.storage.table import ensure_table
from tests.support import node_packages
from tests.support.gql import bearer, post_data
from tests.support.servers import api_server, one_stream_reader
from tests.support.subscribers import ws_url

# A capability beyond the sync core: scripts/test --all (pyproject's `slow`).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

CREATE = "mutation($i: CreatePersonInput!) { createPerson(input: $i) { person { changeToken } } }"
# Heartbeats 1,000 s apart: after its first, the reader reads the servers no more.
LEASE_S = 3000
WATCH = Path(__file__).parents[1] / "ecosystem" / "js" / "watch.mjs"


@pytest.fixture(scope="module")
def node_clients() -> Path:
    """graphql-ws and ws as tests/ecosystem/js's lock file pins them, and watch.mjs."""
    deps = node_packages.install(node_packages.CLIENTS)
    shutil.copy(WATCH, deps / WATCH.name)  # its packages resolve from there
    return deps


class _Watcher:
    """A subscription held by the graphql-ws client from npm (watch.mjs), in node."""

    def __init__(self, deps: Path, base: str, authorization: str, tenant: str) -> None:
        node = shutil.which("node")
        assert node
        self.process = subprocess.Popen(
            [node, WATCH.name, ws_url(base), authorization, tenant],
            cwd=deps,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.tokens: list[str] = []
        self.errors: list[str] = []
        self._reading = threading.Thread(target=self._read, daemon=True)
        self._reading.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            said = json.loads(line)
            (self.tokens if "token" in said else self.errors).append(said.get("token") or line)

    def got(self, token: str) -> bool:
        assert not self.errors, self.errors
        return any(t >= token for t in self.tokens)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self._reading.join(timeout=10)  # to the pipe's end
        assert self.process.stdout is not None
        self.process.stdout.close()


def _write(base: str, tenant: str, headers: dict[str, str]) -> str:
    created = post_data(base, CREATE, {"i": {"tenantID": tenant, "person": {}}}, headers)
    return str(created["createPerson"]["person"]["changeToken"])


def _until(done: Callable[[], bool], what: str, within_s: float = 60) -> None:
    deadline = time.monotonic() + within_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}")
        time.sleep(0.05)


def test_servers_that_join_are_posted_to_before_the_readers_next_heartbeat(
    settings: Settings, ddb: Any, node_clients: Path
) -> None:
    table = f"joins-{time.monotonic_ns()}"
    ensure_table(ddb, table)
    own = dataclasses.replace(settings, table_name=table)
    items = LeaseItems(ddb, table)
    tenant = f"joins-{time.monotonic_ns()}"
    headers = bearer([tenant])
    env = {"REALTIME_LEASE_S": str(LEASE_S)}
    watchers: list[_Watcher] = []

    def watch(base: str) -> _Watcher:
        watchers.append(_Watcher(node_clients, base, headers["Authorization"], tenant))
        # Its first event (`since` null) comes once its subscription is registered.
        _until(lambda: bool(watchers[-1].tokens), "the subscription's first event")
        return watchers[-1]

    with contextlib.ExitStack() as stack:
        a, b, c = (
            stack.enter_context(api_server(own, extra_env=env, relayed=True)) for _ in range(3)
        )
        _write(a, tenant, headers)
        try:
            on_a = watch(a)  # A joins first: it takes the lease
            assert one_stream_reader([a], 60) == a
            # B joins after A's heartbeat read the servers (and maybe before A took
            # its iterators): a write on A reaches B's subscriber.
            on_b = watch(b)
            _until(lambda: len(items.servers()) == 2, "B's item in the table")
            token = _write(a, tenant, headers)
            _until(lambda: on_b.got(token), "A's write on B")
            # C joins long after A's iterators were taken: a write on B, which A reads
            # in the stream, reaches C's subscriber.
            on_c = watch(c)
            _until(lambda: len(items.servers()) == 3, "C's item in the table")
            token = _write(b, tenant, headers)
            _until(lambda: on_c.got(token), "B's write on C")
            _until(lambda: on_a.got(token), "B's write on A")
        finally:
            for watcher in watchers:
                watcher.stop()


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
