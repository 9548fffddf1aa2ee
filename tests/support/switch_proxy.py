"""One address in front of two API servers (a rolling deploy, a rollback, a rotated
CURSOR_SECRET): each GraphQL POST goes to the current server, and the proxy can be
armed to move to the other one right after it handed a client a cursor, so that the
next page of that sync reaches a server that did not sign it. It records every
request it forwarded (which server, the tenant, the operation, `since`, `cursor`,
the answer's error code), for tests to count what a client asked. A test driver in
another process (node) arms it with `POST /_switch {"times": n, "on": [operation]}`
and `POST /_use {"server": i}`."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2

# What a client sends that the servers read (its token, its release, its device).
_FORWARDED = ("authorization", "content-type", "x-sync-release", "x-device-id")


@dataclass(frozen=True)
class Forwarded:
    server: int  # 0 or 1: the index of the server that answered
    tenant: str | None
    operation: str  # "changes", "catchUp" or "other"
    since: str | None
    cursor: str | None
    code: str | None  # the answer's first error code, None when it had none


class SwitchProxy:
    def __init__(self, first: str, second: str) -> None:
        self.servers = [first.rstrip("/"), second.rstrip("/")]
        self.current = 0
        self.log: list[Forwarded] = []
        # How many more times to move to the other server after an answer carrying
        # a cursor of one of `switch_on`'s operations.
        self.switches = 0
        self.switch_on: tuple[str, ...] = ("changes",)
        # Run once, at the first switch, before the client's next request is read
        # (a write between two pages of its sync).
        self.on_switch: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._http = httpx2.Client(timeout=60)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path in ("/_switch", "/_use"):
                    proxy._control(self.path, json.loads(raw))
                    status, body = 200, b"{}"
                else:
                    status, body = proxy._forward(self.path, dict(self.headers), raw)
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def switch_after_cursor(self, times: int = 1, on: tuple[str, ...] = ("changes",)) -> None:
        """Move to the other server after each of the next `times` answers to `on`'s
        operations that hand out a cursor."""
        with self._lock:
            self.switches = times
            self.switch_on = on

    def use(self, server: int) -> None:
        with self._lock:
            self.current = server
            self.switches = 0

    def requests(self, operation: str, tenant: str | None = None) -> list[Forwarded]:
        """The requests of `operation` forwarded (of `tenant`'s only, when given)."""
        return [
            f
            for f in self.log
            if f.operation == operation and (tenant is None or f.tenant == tenant)
        ]

    def _control(self, path: str, order: dict[str, Any]) -> None:
        if path == "/_use":
            self.use(int(order["server"]))
        else:
            self.switch_after_cursor(
                int(order.get("times", 1)), tuple(order.get("on", ["changes"]))
            )

    def _forward(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, bytes]:
        request = json.loads(raw or b"{}")
        query = str(request.get("query", ""))
        variables = request.get("variables") or {}
        operation = next((op for op in ("changes", "catchUp") if f"{op}(" in query), "other")
        with self._lock:
            server = self.current
        sent = {k: v for k, v in headers.items() if k.lower() in _FORWARDED}
        response = self._http.post(self.servers[server] + path, content=raw, headers=sent)
        body = response.content
        try:
            answer = json.loads(body)
        except ValueError:
            answer = {}
        errors = answer.get("errors") or []
        code = (errors[0].get("extensions") or {}).get("code") if errors else None
        page = (answer.get("data") or {}).get(operation) if operation != "other" else None
        with self._lock:
            self.log.append(
                Forwarded(
                    server,
                    variables.get("t") or (variables.get("i") or {}).get("tenantID"),
                    operation,
                    variables.get("since"),
                    variables.get("cursor"),
                    code,
                )
            )
            switched = bool(
                self.switches and operation in self.switch_on and page and page.get("cursor")
            )
            if switched:
                self.switches -= 1
                self.current = 1 - self.current
            hook, self.on_switch = (self.on_switch, None) if switched else (None, self.on_switch)
        if hook is not None:
            hook()
        return response.status_code, body

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._http.close()

    def __enter__(self) -> SwitchProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
