"""How the client reaches the server: one GraphQL POST, or a TransportError."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Protocol


class TransportError(Exception):
    """The request may or may not have reached the server; retry it unchanged."""


class Transport(Protocol):
    def execute(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        """The GraphQL response body; TransportError when no response arrived."""
        ...


class HttpTransport:
    def __init__(self, url: str, token: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/") + "/graphql"
        self.token = token
        self.timeout = timeout

    def execute(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url,
            data=json.dumps({"query": query, "variables": variables}).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body: dict[str, Any] = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                raise TransportError(f"server error {exc.code}") from exc
            body = json.loads(exc.read() or b"{}")
        except (OSError, ValueError) as exc:
            raise TransportError(str(exc)) from exc
        return body


class BlobTransport(Protocol):
    """How the client moves bytes to and from presigned URLs (S3), not the API."""

    def put(self, url: str, data: bytes, headers: dict[str, str]) -> None:
        """PUT `data` with exactly `headers`; TransportError unless the answer is 2xx."""
        ...

    def get(self, url: str) -> bytes:
        """The body of a GET; TransportError unless the answer is 200."""
        ...


class HttpBlobTransport:
    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout

    def put(self, url: str, data: bytes, headers: dict[str, str]) -> None:
        self._send(urllib.request.Request(url, data=data, headers=headers, method="PUT"))

    def get(self, url: str) -> bytes:
        return self._send(urllib.request.Request(url, method="GET"))

    def _send(self, request: urllib.request.Request) -> bytes:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body: bytes = response.read()
        except urllib.error.HTTPError as exc:
            # 403 (an expired or refused link), 5xx, anything else: not done.
            exc.close()
            raise TransportError(f"blob {request.get_method()} answered {exc.code}") from exc
        except (OSError, ValueError) as exc:
            raise TransportError(str(exc)) from exc
        return body
