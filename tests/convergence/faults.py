"""Faults between a device and the server, injected at the client's transport."""

from __future__ import annotations

import random
from typing import Any

from sync_client.transport import Transport, TransportError


class DeviceCrash(Exception):
    """The app died: its in-memory state is gone, its SQLite file is not."""


class FaultyTransport:
    """Wraps a real transport; drops requests and responses, goes offline, crashes."""

    def __init__(self, inner: Transport, rng: random.Random, rates: dict[str, float]) -> None:
        self.inner = inner
        self.rng = rng
        self.rates = rates
        self.online = True
        self.enabled = True
        self.counts = {"sent": 0, "lost_request": 0, "lost_response": 0, "crash": 0}

    def execute(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        if not self.online:
            raise TransportError("offline")
        if self.enabled and self.rng.random() < self.rates.get("lost_request", 0):
            self.counts["lost_request"] += 1
            raise TransportError("connection reset before the request arrived")
        body = self.inner.execute(query, variables)
        self.counts["sent"] += 1
        if self.enabled:
            roll = self.rng.random()
            if roll < self.rates.get("crash_after_send", 0):
                self.counts["crash"] += 1
                raise DeviceCrash("crashed with the response in flight")
            if roll < self.rates.get("crash_after_send", 0) + self.rates.get("lost_response", 0):
                self.counts["lost_response"] += 1
                raise TransportError("response lost after the server applied the request")
        return body
