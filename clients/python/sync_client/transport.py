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
