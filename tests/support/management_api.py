"""A local stand-in for API Gateway's Management API that records what it is sent.

`POST /@connections/{id}` (PostToConnection) and `DELETE /@connections/{id}`
(DeleteConnection), answered as AWS answers them: 200/204, or 410 with
`x-amzn-ErrorType: GoneException` for a connection that is gone. boto3's
`apigatewaymanagementapi` client talks to it unchanged (endpoint_url).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote


class ManagementApi:
    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []  # (connection id, message)
        self.deleted: list[str] = []
        self.gone: set[str] = set()
        self.failing: set[str] = set()  # PostToConnection answers 403 (not retried)
        self._lock = threading.Lock()
        self.url = ""

    def messages(self, connection_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [m for c, m in self.posts if c == connection_id]

    def clear(self) -> None:
        with self._lock:
            self.posts.clear()
            self.deleted.clear()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _connection_id(self) -> str | None:
                prefix = "/@connections/"
                return unquote(self.path[len(prefix) :]) if self.path.startswith(prefix) else None

            def _answer(self, status: int, error: str | None = None) -> None:
                body = b"" if error is None else json.dumps({"message": error}).encode()
                self.send_response(status)
                if error is not None:
                    self.send_header("x-amzn-ErrorType", error)
                    self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                connection_id = self._connection_id()
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                if connection_id is None:
                    self._answer(404, "NotFoundException")
                elif connection_id in api.gone:
                    self._answer(410, "GoneException")
                elif connection_id in api.failing:
                    self._answer(403, "ForbiddenException")
                else:
                    with api._lock:
                        api.posts.append((connection_id, json.loads(body)))
                    self._answer(200)

            def do_DELETE(self) -> None:  # noqa: N802
                connection_id = self._connection_id()
                if connection_id is None or connection_id in api.gone:
                    self._answer(410, "GoneException")
                    return
                with api._lock:
                    api.deleted.append(connection_id)
                api.gone.add(connection_id)
                self._answer(204)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    @contextmanager
    def running(self) -> Iterator[ManagementApi]:
        server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
