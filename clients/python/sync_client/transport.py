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
    """GraphQL over HTTP to `url`: the server's address (`http://127.0.0.1:8000`)
    or its endpoint (`http://127.0.0.1:8000/graphql`); either way requests go to
    the endpoint. An answer that is not a GraphQL response (a proxy's error page,
    a wrong path) is a TransportError that says so."""

    def __init__(self, url: str, token: str, timeout: float = 30.0) -> None:
        base = url.rstrip("/")
        self.url = base if base.endswith("/graphql") else base + "/graphql"
        self.token = token
        self.timeout = timeout
        # Sent with every request: the SyncClient declares its catalog release here.
        self.headers: dict[str, str] = {}

    def execute(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url,
            data=json.dumps({"query": query, "variables": variables}).encode(),
            headers={
                **self.headers,
                "Content-Type": "application/json",
                "Authorization": f"Bearer {self.token}",
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                raise TransportError(f"server error {exc.code}") from exc
            status, raw = exc.code, exc.read()
        except OSError as exc:
            raise TransportError(str(exc)) from exc
        return _graphql_body(self.url, status, raw)


def _graphql_body(url: str, status: int, raw: bytes) -> dict[str, Any]:
    """A GraphQL response (an object with `data` or `errors`), else TransportError."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict) or not ("data" in body or "errors" in body):
        start = raw[:80].decode("utf-8", "replace")
        raise TransportError(
            f"HTTP {status} from {url} is not a GraphQL response ({start!r}): "
            "is the URL the server's address or its /graphql endpoint?"
        )
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
