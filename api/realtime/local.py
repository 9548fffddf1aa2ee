"""Realtime on a long-running server process: its hub, its stream follower, its limits.

A write committed by this process wakes its subscribers at once (`publish`); a
write committed by another process on the same table arrives through the
table's stream (`api.realtime.streams.StreamFollower`), started with the first
subscription: read by this process itself, or, with `REALTIME_PEER_URL` set, by
the one server holding the stream reader's lease, which posts it here
(`api.realtime.lease`, `api.realtime.relay`). Connections are counted here so
that one process never holds more than `ws_max_connections` sockets.
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

from api.realtime.lease import LeaseItems, StreamReaderLease
from api.realtime.relay import PokeReceiver, PokeRelay, relay_key
from api.realtime.signals import DELETING, LiveFeed, Shares, TenantSignals
from api.realtime.streams import StreamFollower, publish_heads
from api.settings import Settings

logger = logging.getLogger("api.realtime")


class LocalRealtime:
    def __init__(
        self, settings: Settings, latest_change: Callable[[str, str | None], str | None]
    ) -> None:
        self._settings = settings
        self.signals = TenantSignals(
            settings.ws_max_subscriptions, settings.ws_max_subscriptions_per_user
        )
        self.feed = LiveFeed(self.signals, latest_change)
        self.follower: StreamFollower | None = None  # this process reads the stream itself
        self.lease: StreamReaderLease | None = None  # or whoever holds the lease does
        self.receiver: PokeReceiver | None = None
        self._heads_client: Any = None
        self.server_id = str(ULID())  # this process, among the servers of one table
        if settings.realtime_peer_url is not None:
            self.receiver = PokeReceiver(
                self.server_id, relay_key(settings.cursor_secret), self.publish, self._catch_up
            )
        self._connections = 0
        self._sockets = Shares(settings.ws_max_connections_per_user)  # acknowledged, by user
        self._lock = threading.Lock()
        self.signals.on_first_subscription(self._start_follower)

    def publish(self, tenant_id: str, token: str) -> None:
        """A write of this process committed (any thread)."""
        self.signals.publish(tenant_id, token)

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
        if self.lease is not None:
            self.lease.stop()
        if self.follower is not None:
            self.follower.stop()

    def status(self) -> dict[str, object]:
        """For /healthz: where this process's pokes from other servers come from."""
        if self.lease is not None:
            return {"server": self.lease.server_id, "readsStream": self.lease.reading}
        return {"readsStream": self.follower is not None}

    def _start_follower(self) -> None:
        settings = self._settings
        if settings.realtime_peer_url is None:
            self.follower = self._stream_follower(self.publish, lambda: None)
            self.follower.start()
            return
        relay = PokeRelay(relay_key(settings.cursor_secret))

        def publish_and_relay(tenant_id: str, token: str) -> None:
            self.publish(tenant_id, token)
            relay.offer(tenant_id, token)

        # Each lease call gives up within a heartbeat (2 attempts of at most 2 s), so a
        # hung call cannot keep a reader reading after the others took over.
        quick = Config(
            connect_timeout=2, read_timeout=2, retries={"total_max_attempts": 2, "mode": "standard"}
        )
        self.lease = StreamReaderLease(
            LeaseItems(settings.dynamodb_client(config=quick), settings.table_name),
            self.server_id,
            settings.realtime_peer_url,
            reader=lambda: self._stream_follower(publish_and_relay, relay.catch_up),
            follow=relay.follow,
            lease_s=settings.realtime_lease_s,
        )
        self.lease.start()

    def _stream_follower(
        self, publish: Callable[[str, str], None], caught_up: Callable[[], None]
    ) -> StreamFollower:
        settings = self._settings
        return StreamFollower(
            settings.dynamodb_client(),
            settings.dynamodb_client("dynamodbstreams"),
            settings.table_name,
            publish,
            subscribed=self.signals.tenants,
            caught_up=caught_up,
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
