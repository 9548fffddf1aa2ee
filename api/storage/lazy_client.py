"""A boto3 client made on its first use, not when the app is built.

S3's client is the dearest part of building the app: botocore loads and parses
S3's service model (230-320 ms in process on the loaded 2-core development VM,
against 85-155 ms for DynamoDB's), and the HTTP Lambda's sync requests never
touch S3; attachments and exports make it on their first call (docs/cold-start.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class LazyClient:
    """Stands for the client `make()` returns, making it once, on the first
    attribute asked of it (`head_object`, `meta`, ...)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._client: Any = None
        # Requests run in a thread pool, and boto3's default session is not safe to
        # make clients from in two threads at once: one makes it, others wait.
        self._lock = threading.Lock()

    @property
    def made(self) -> bool:
        return self._client is not None

    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make()
        return self._client

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # this object's own, not yet set (copy, pickle)
            raise AttributeError(name)
        return getattr(self.client(), name)
