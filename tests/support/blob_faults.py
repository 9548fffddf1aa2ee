"""Faults between a device and the blob store, over real HTTP: a tiny reverse proxy in
front of the S3 engine, and a client-side blob transport that sends through it.

`BlobProxy` forwards each request to the engine unchanged, or does what a mobile
network and S3 do now and then, one request at a time (`fail_next`) or until told
otherwise (`fault`): refuse the connection, answer 503 or 403 (an expired link),
apply the request and lose the answer, answer 200 without storing anything, or
deliver other bytes than the engine sent."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, urlunsplit

from sync_client.transport import HttpBlobTransport

FAULTS = ("refuse", "503", "403", "lose_response", "swallow", "corrupt")
_HOP = {"connection", "keep-alive", "host", "transfer-encoding", "proxy-connection"}


class BlobProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream).netloc
        self.fault: str | None = None
        self._next: list[str] = []
        self._lock = threading.Lock()
        # Every request as the device sent it: (method, path, what the proxy did).
        self.log: list[tuple[str, str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_PUT(self) -> None:
                proxy._handle(self)

            def do_GET(self) -> None:
                proxy._handle(self)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.netloc = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail_next(self, *faults: str) -> None:
        assert all(f in FAULTS for f in faults), faults
        with self._lock:
            self._next.extend(faults)

    def requests(self, method: str) -> list[tuple[str, str, str]]:
        return [r for r in self.log if r[0] == method]

    def _take(self) -> str:
        with self._lock:
            return self._next.pop(0) if self._next else (self.fault or "forward")

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        fault = self._take()
        self.log.append((handler.command, handler.path, fault))
        if fault == "refuse":
            handler.close_connection = True
            return  # no answer at all: the connection closes
        if fault in ("503", "403"):
            self._answer(handler, int(fault), b"<Error><Code>Refused</Code></Error>")
            return
        if fault == "swallow":
            self._answer(handler, 200, b"")
            return
        status, headers, content = self._forward(handler, body)
        if fault == "lose_response":
            handler.close_connection = True
            return  # the engine applied it; the device never hears
        if fault == "corrupt" and content:
            content = bytes([content[0] ^ 0xFF]) + content[1:]
        self._answer(handler, status, content, headers)

    def _forward(
        self, handler: BaseHTTPRequestHandler, body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP}
        connection = http.client.HTTPConnection(self.upstream, timeout=30)
        try:
            connection.request(handler.command, handler.path, body=body, headers=headers)
            response = connection.getresponse()
            content = response.read()
            kept = {
                k: v
                for k, v in response.getheaders()
                if k.lower() not in _HOP and k.lower() != "content-length"
            }
            return response.status, kept, content
        finally:
            connection.close()

    @staticmethod
    def _answer(
        handler: BaseHTTPRequestHandler,
        status: int,
        content: bytes,
        headers: dict[str, str] | None = None,
    ) -> None:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(content)))
        handler.end_headers()
        handler.wfile.write(content)


class ProxiedBlobs(HttpBlobTransport):
    """The client's blob transport, sending every presigned request through a proxy
    (the URL's host replaced by the proxy's; path and query, signed, unchanged)."""

    def __init__(self, proxy: BlobProxy) -> None:
        super().__init__(timeout=10)
        self.proxy = proxy

    def put(self, url: str, data: bytes, headers: dict[str, str]) -> None:
        super().put(self._via(url), data, headers)

    def get(self, url: str) -> bytes:
        return super().get(self._via(url))

    def _via(self, url: str) -> str:
        return urlunsplit(urlsplit(url)._replace(netloc=self.proxy.netloc))


@contextmanager
def blob_proxy(upstream: str) -> Iterator[BlobProxy]:
    proxy = BlobProxy(upstream)
    try:
        yield proxy
    finally:
        proxy.close()
