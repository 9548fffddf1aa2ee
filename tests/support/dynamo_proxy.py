"""An HTTP proxy between API server processes and DynamoDB Local, as a slower
DynamoDB would be: it forwards every call unchanged, but holds the calls a `Hold`
picks (by operation and body) until the test lets them go, and counts those in
flight. A server started with this proxy as its DynamoDB endpoint (`api_server`,
settings naming it) runs unmodified; what a held call does, it does when let go,
on the table as it is then (a request DynamoDB received late, or that waited in a
queue on its way)."""

from __future__ import annotations

import http.client
import json
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import urlsplit

from scripts.local_engine import free_port

# What a hold picks: the call's operation (TransactWriteItems, Query, ...) and body.
Match = Callable[[str, dict[str, Any]], bool]


class Hold:
    """Calls that `match` picks (`once`: only the first), each held until `go` is set
    (at most `limit_s`), and counted: how many are held now, the most at once, all."""

    def __init__(self, match: Match, once: bool, limit_s: float) -> None:
        self._match = match
        self._once = once
        self._limit_s = limit_s
        self._lock = threading.Lock()
        self.reached = threading.Event()  # a call was picked
        self.go = threading.Event()
        self.now = self.most = self.calls = 0

    def picks(self, operation: str, body: dict[str, Any]) -> bool:
        with self._lock:
            if self.go.is_set() or (self._once and self.calls):
                return False  # let go: it holds nothing more
            if not self._match(operation, body):
                return False
            self.calls += 1
            self.now += 1
            self.most = max(self.most, self.now)
        self.reached.set()
        return True

    def wait(self) -> None:
        try:
            self.go.wait(self._limit_s)
        finally:
            with self._lock:
                self.now -= 1


class ForwardingProxy:
    """An HTTP proxy in front of DynamoDB Local that forwards every call unchanged;
    a subclass's `_forward` decides what happens on the way (hold it, delay it, count
    it) and sends it with `_send`. Use as a context manager; `endpoint` replaces
    DynamoDB Local's for a server."""

    def __init__(self, target: str) -> None:
        self._target = urlsplit(target).netloc
        self._server = _QuietServer(("127.0.0.1", free_port()), self._handler())
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_port}"

    def _forward(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any, bytes]:
        return self._send(path, headers, body)

    def _send(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any, bytes]:
        connection = http.client.HTTPConnection(self._target, timeout=60)
        try:
            connection.request("POST", path, body, headers)
            answer = connection.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            connection.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # botocore keeps its connections alive

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                status, answer_headers, answer = proxy._forward(self.path, headers, body)
                self.send_response(status)
                for name, value in answer_headers:
                    if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(name, value)
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        return Handler

    def __enter__(self) -> Self:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class DynamoProxy(ForwardingProxy):
    """Forwards every call, holding those a `Hold` picks (`hold`) until let go."""

    def __init__(self, target: str) -> None:
        self._holds: list[Hold] = []
        super().__init__(target)

    def hold(self, match: Match, once: bool = True, limit_s: float = 60.0) -> Hold:
        """From now on, hold the calls `match` picks (each waits at most `limit_s`)."""
        hold = Hold(match, once, limit_s)
        self._holds.append(hold)
        return hold

    def _forward(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any, bytes]:
        operation = headers.get("X-Amz-Target", headers.get("x-amz-target", "")).split(".")[-1]
        try:
            parsed = json.loads(body) if body else {}
        except ValueError:
            parsed = {}
        for hold in list(self._holds):
            if hold.picks(operation, parsed):
                hold.wait()
                break
        return self._send(path, headers, body)

    def __exit__(self, *exc: object) -> None:
        for hold in self._holds:
            hold.go.set()  # never leave a server's call waiting
        super().__exit__(*exc)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # botocore gave up on a held call (its read timeout) and retried it: the
        # answer has nobody to go to.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
