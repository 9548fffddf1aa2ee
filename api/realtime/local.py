"""Realtime on a long-running server process: its hub, its stream follower, its limits.

A write committed by this process wakes its subscribers at once (`publish`); a
write committed by another process on the same table arrives through the
table's stream (`api.realtime.streams.StreamFollower`), started with the first
subscription. Connections are counted here so that one process never holds
more than `ws_max_connections` sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from api.realtime.signals import DELETING, LiveFeed, Shares, TenantSignals
from api.realtime.streams import StreamFollower
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
        self.follower: StreamFollower | None = None
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
        if self.follower is not None:
            self.follower.stop()

    def _start_follower(self) -> None:
        settings = self._settings
        self.follower = StreamFollower(
            settings.dynamodb_client(),
            settings.dynamodb_client("dynamodbstreams"),
            settings.table_name,
            self.publish,
            subscribed=self.signals.tenants,
        )
        self.follower.start()


async def close_at(when: float, close: Callable[[], Awaitable[object]]) -> None:
    """Await `close()` at epoch time `when` (a token's `exp`)."""
    await asyncio.sleep(max(0.0, when - time.time()))
    await close()
