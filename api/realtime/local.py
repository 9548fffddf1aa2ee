"""Realtime on a long-running server process: its hub, its stream follower, its limits.

A write committed by this process wakes its subscribers at once (`publish`); a
write committed by another process on the same table arrives through the
table's stream (`api.realtime.streams.StreamFollower`), started with the first
subscription: read by this process itself, or, with `REALTIME_PEER_URL` set, by
the one server holding the stream reader's lease, which posts it here
(`api.realtime.lease`, `api.realtime.relay`). Connections are counted here so
that one process never holds more than `ws_max_connections` sockets.

A server with `REALTIME_PEER_URL` checks that the URL reaches it (a signed nonce
posted to itself, `relay.probe`) once it starts listening and again when it joins
the lease at its first subscription. A URL that reaches another process, or
nothing, would leave it never poked: it logs why and reads the stream itself
instead of joining the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from botocore.config import Config
from ulid import ULID

from api import metrics
from api.domain.membership import Roster
from api.realtime.lease import LeaseItems, StreamReaderLease
from api.realtime.poke_receiver import PokeReceiver
from api.realtime.relay import PokeRelay, probe, relay_key
from api.realtime.signals import (
    DELETING,
    Audience,
    LiveFeed,
    Shares,
    TenantSignals,
    is_deletion,
)
from api.realtime.streams import StreamFollower, publish_heads
from api.settings import Settings
from api.worker_threads import RunBlocking

logger = logging.getLogger("api.realtime")

# The check of a server's own URL: each probe waits this long for its answer; at
# start the server is not listening yet, so a refused connection is tried again
# for this long (when it joins the lease it is listening: a few tries).
_PROBE_TIMEOUT_S = 2.0
_PROBE_AT_START_S = 30.0
_PROBE_AT_JOIN_S = 5.0


class LocalRealtime:
    def __init__(
        self,
        settings: Settings,
        latest_change: Callable[[str, str | None, str], Awaitable[str | None]],
        run_blocking: RunBlocking | None = None,
        sink: metrics.Metrics | None = None,
        roster: Callable[[str, str], Awaitable[Roster]] | None = None,
    ) -> None:
        """`latest_change`: a subscription's first read (`LiveFeed`); `run_blocking`:
        where the relay's catch-ups run (`api.worker_threads`); `roster`: a tenant's
        members after a token (`LiveFeed`)."""
        self._settings = settings
        self._metrics = sink = sink or metrics.Metrics()
        self.signals = TenantSignals(
            settings.ws_max_subscriptions, settings.ws_max_subscriptions_per_user
        )
        self.feed = LiveFeed(self.signals, latest_change, self._poked, roster)
        sink.gauge(metrics.SOCKETS_OPEN, lambda: self._connections)
        sink.gauge(
            metrics.STREAM_READER, lambda: int(self.lease is not None and self.lease.reading)
        )
        self._relay: PokeRelay | None = None  # this server's, once it joins the lease
        sink.gauge(metrics.RELAY_PENDING, lambda: self._relay.owed()[0] if self._relay else 0)
        sink.gauge(metrics.RELAY_BEHIND, lambda: self._relay.owed()[1] if self._relay else 0)
        self.follower: StreamFollower | None = None  # this process reads the stream itself
        self.lease: StreamReaderLease | None = None  # or whoever holds the lease does
        self.receiver: PokeReceiver | None = None
        self._heads_client: Any = None
        self.server_id = str(ULID())  # this process, among the servers of one table
        # Set when its REALTIME_PEER_URL does not reach it: it reads the stream itself.
        self._url_reaches_another: str | None = None
        self._starting = threading.Lock()  # the first subscription's start against close()
        self._closed = False
        if settings.realtime_peer_url is not None:
            self.receiver = PokeReceiver(
                self.server_id,
                relay_key(settings.cursor_secret),
                self.publish,
                self._catch_up,
                run_blocking,
            )
            logger.info(
                "server %s: pokes from the stream's reader come to %s",
                self.server_id,
                settings.realtime_peer_url,
            )
            threading.Thread(
                target=self._check_own_url, args=(_PROBE_AT_START_S,), daemon=True
            ).start()
        self._connections = 0
        self._sockets = Shares(settings.ws_max_connections_per_user)  # acknowledged, by user
        self._lock = threading.Lock()
        self.signals.on_first_subscription(self._start_follower)

    def _poked(self, token: str) -> None:
        """A subscription was sent `token` (a deletion's end is no poke)."""
        if is_deletion(token):
            return
        self._metrics.add(metrics.POKES_SENT)
        self._metrics.add(metrics.POKE_DELAY, metrics.poke_delay_ms(token))

    def publish(self, tenant_id: str, token: str, audience: Audience = None) -> None:
        """A write of this process committed, or a head change read from the table
        (the stream, a relay's post, a catch-up): the members of its `audience` are
        poked (None: every member; any thread)."""
        self.signals.publish(tenant_id, token, audience)

    def close_tenant(self, tenant_id: str) -> None:
        """The tenant is being deleted: its subscriptions end with TENANT_DELETED."""
        self.signals.publish(tenant_id, DELETING)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[bool]:
        """Admit one WebSocket connection if under the limit; yields whether it was."""
        with self._lock:
            admitted = self._connections < self._settings.ws_max_connections
            if admitted:
                self._connections += 1
        try:
            yield admitted
        finally:
            if admitted:
                with self._lock:
                    self._connections -= 1

    def admit_user(self, user: str) -> Callable[[], None] | None:
        """Count an acknowledged socket of `user` if under their share; returns what
        releases it (at the socket's close), or None when refused."""
        with self._lock:
            if not self._sockets.take(user):
                return None
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                self._sockets.give_back(user)

        return release

    def close(self) -> None:
        with self._starting:
            self._closed = True
        if self.lease is not None:
            self.lease.stop()
        if self.follower is not None:
            self.follower.stop()

    def status(self) -> dict[str, object]:
        """For /healthz: where this process's pokes from other servers come from (with
        `REALTIME_PEER_URL`, which server this is, from its start)."""
        reads = self.follower is not None or (self.lease is not None and self.lease.reading)
        if self.receiver is not None:
            return {"server": self.server_id, "readsStream": reads}
        return {"readsStream": reads}

    def _check_own_url(self, within_s: float) -> bool:
        """Whether REALTIME_PEER_URL reaches this process (a probe answered 204).
        No answer, or a 5xx (a process busy or failing), is tried again for
        `within_s`; a 4xx is final (409: another process; 403: one that does not
        share the key). If not, says so and remembers it: the server then reads the
        stream itself."""
        url = self._settings.realtime_peer_url
        assert url is not None and self.receiver is not None
        deadline = time.monotonic() + within_s
        while True:
            status, words = probe(
                url,
                relay_key(self._settings.cursor_secret),
                self.server_id,
                self.receiver.nonce(),
                _PROBE_TIMEOUT_S,
            )
            if status == 204:
                return True
            if 400 <= status < 500 or time.monotonic() > deadline or self._closed:
                break
            time.sleep(0.5)
        answer = f"answer {status} {words}".rstrip() if status else f"no answer: {words}"
        if self._url_reaches_another is None:
            logger.error(
                "server %s: its REALTIME_PEER_URL %s does not reach it (%s): the stream's "
                "reader could never poke it, so it reads the table's stream itself",
                self.server_id,
                url,
                answer,
            )
        self._url_reaches_another = answer
        return False

    def _start_follower(self) -> None:
        if self._settings.realtime_peer_url is None:
            self.follower = self._stream_follower(self.publish, lambda: None)
            self.follower.start()
            return
        # Called on the event loop by the first subscription: the check of its own URL
        # (an HTTP round trip to itself) runs on a thread of its own.
        threading.Thread(target=self._join, name="stream-lease-join", daemon=True).start()

    def _join(self) -> None:
        """Join the stream reader's lease, if this server's own URL reaches it; else
        read the stream itself."""
        own = self._url_reaches_another is None and self._check_own_url(_PROBE_AT_JOIN_S)
        with self._starting:
            if self._closed:
                return
            if not own:
                self.follower = self._stream_follower(self.publish, lambda: None)
                self.follower.start()
                return
            assert self._settings.realtime_peer_url is not None
            self._start_lease(self._settings.realtime_peer_url)

    def _start_lease(self, url: str) -> None:
        settings = self._settings
        relay = self._relay = PokeRelay(
            relay_key(settings.cursor_secret),
            epoch=lambda: lease.epoch,
            on_failure=lambda: self._metrics.add(metrics.RELAY_POST_FAILURES),
        )

        def publish_and_relay(tenant_id: str, token: str, audience: Audience) -> None:
            self.publish(tenant_id, token, audience)
            relay.offer(tenant_id, token, audience)

        def caught_up() -> None:  # the reader's iterators taken, its own heads read
            relay.catch_up()
            lease.caught_up()

        # Each lease call gives up within a heartbeat (2 attempts of at most 2 s), so a
        # hung call cannot keep a reader reading after the others took over.
        quick = Config(
            connect_timeout=2, read_timeout=2, retries={"total_max_attempts": 2, "mode": "standard"}
        )
        lease = self.lease = StreamReaderLease(
            LeaseItems(settings.dynamodb_client(config=quick), settings.table_name),
            self.server_id,
            url,
            reader=lambda: self._stream_follower(
                publish_and_relay, caught_up, announced=lease.announced
            ),
            follow=relay.follow,
            lease_s=settings.realtime_lease_s,
            on_take=lambda: self._metrics.add(metrics.LEASE_TAKEOVERS),
        )
        self.lease.start()

    def _stream_follower(
        self,
        publish: Callable[[str, str, Audience], None],
        caught_up: Callable[[], None],
        announced: Callable[[str, str], None] | None = None,
    ) -> StreamFollower:
        settings = self._settings
        return StreamFollower(
            settings.dynamodb_client(),
            settings.dynamodb_client("dynamodbstreams"),
            settings.table_name,
            publish,
            subscribed=self.signals.tenants,
            caught_up=caught_up,
            announced=announced,
        )

    def _catch_up(self) -> None:
        """The stream's reader asks: publish the heads of this process's tenants."""
        if self._heads_client is None:  # a client takes ~50 ms to build: once
            self._heads_client = self._settings.dynamodb_client()
        publish_heads(
            self._heads_client,
            self._settings.table_name,
            self.signals.tenants(),
            self.publish,
        )


async def close_at(when: float, close: Callable[[], Awaitable[object]]) -> None:
    """Await `close()` at epoch time `when` (a token's `exp`)."""
    await asyncio.sleep(max(0.0, when - time.time()))
    await close()
