"""Faults between a device and the server, injected at the client's transport."""

from __future__ import annotations

import random
from typing import Any

from sync_client.transport import BlobTransport, Transport, TransportError


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
        try:
            body = self.inner.execute(query, variables)
        except TransportError as exc:
            if str(exc).startswith("server error"):  # an HTTP 5xx: never an honest answer
                self.counts["server error"] = self.counts.get("server error", 0) + 1
            raise
        self.counts["sent"] += 1
        for code in _codes(body):
            self.counts[f"code {code}"] = self.counts.get(f"code {code}", 0) + 1
        if self.enabled:
            roll = self.rng.random()
            if roll < self.rates.get("crash_after_send", 0):
                self.counts["crash"] += 1
                raise DeviceCrash("crashed with the response in flight")
            if roll < self.rates.get("crash_after_send", 0) + self.rates.get("lost_response", 0):
                self.counts["lost_response"] += 1
                raise TransportError("response lost after the server applied the request")
        return body


class FaultyBlobs:
    """Wraps the device's real blob transport (presigned PUTs and GETs to S3): offline
    with its GraphQL transport, and loses uploads before they leave or their answer
    after S3 stored them."""

    def __init__(self, inner: BlobTransport, device: FaultyTransport) -> None:
        self.inner = inner
        self.device = device

    def put(self, url: str, data: bytes, headers: dict[str, str]) -> None:
        self._before("put")
        self.inner.put(url, data, headers)
        self._after("put")

    def get(self, url: str) -> bytes:
        self._before("get")
        data = self.inner.get(url)
        self._after("get")
        return data

    def _count(self, key: str) -> None:
        self.device.counts[key] = self.device.counts.get(key, 0) + 1

    def _roll(self, rate: str) -> bool:
        device = self.device
        return device.enabled and device.rng.random() < device.rates.get(rate, 0)

    def _before(self, verb: str) -> None:
        if not self.device.online:
            raise TransportError("offline")
        self._count(f"blob {verb}")
        if self._roll("lost_request"):
            self._count(f"blob {verb} lost")
            raise TransportError("connection reset before the request arrived")

    def _after(self, verb: str) -> None:
        if self._roll("lost_response"):
            self._count(f"blob {verb} answer lost")
            raise TransportError("response lost after S3 answered")


def _codes(body: dict[str, Any]) -> list[str]:
    """The error codes a response carries: its errors', and its push results'."""
    codes = [str((e.get("extensions") or {}).get("code")) for e in body.get("errors") or []]
    push = (body.get("data") or {}).get("pushChanges") or {}
    codes += [str(r["error"].get("code")) for r in push.get("results") or [] if r.get("error")]
    return codes
