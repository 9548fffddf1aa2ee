"""HTTP around GraphQL: the middleware (request id, body size limit, the per-request
log line), coded errors for requests refused before GraphQL runs, and the
GraphQL-over-HTTP media type."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strawberry.types import ExecutionResult

from api import request_log
from api.metrics import Metrics
from api.worker_threads import settle

REQUEST_ID_HEADER = "x-request-id"
# A client that has not sent its whole body by then is cut off: a slow body holds
# a connection and its buffer for as long as the client likes.
BODY_TIMEOUT_S = 30.0
_SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class InFlight:
    """The requests a server is answering, so that a stopping server answers those
    still unanswered `UNAVAILABLE` (503, retryable) instead of holding them: a call
    to an engine that does not answer would keep one for minutes (scripts/serve)."""

    def __init__(self) -> None:
        self._unanswered: dict[object, Callable[[], Awaitable[None]]] = {}
        self._answering: set[asyncio.Task[None]] = set()
        self.stopping = False

    def hold(self, key: object, answer_unavailable: Callable[[], Awaitable[None]]) -> None:
        if self.stopping:
            self._answer(answer_unavailable)
        else:
            self._unanswered[key] = answer_unavailable

    def answered(self, key: object) -> None:
        self._unanswered.pop(key, None)

    def stop(self) -> None:
        """On the event loop: answer every request not answered yet (each once)."""
        self.stopping = True
        for answer in list(self._unanswered.values()):
            self._answer(answer)
        self._unanswered.clear()

    def _answer(self, answer: Callable[[], Awaitable[None]]) -> None:
        task = asyncio.ensure_future(answer())  # beside the request's own task, held
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)


class RequestMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int,
        metrics: Metrics | None = None,
        in_flight: InFlight | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics or Metrics()
        self.in_flight = in_flight or InFlight()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        incoming = headers.get(REQUEST_ID_HEADER, "")
        request_id = incoming if _SAFE_REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex
        log, reset = request_log.start(request_id)
        started = time.perf_counter()
        status = 500
        responding = False  # the answer has begun: the app's, or the stopping server's
        superseded = False  # the stopping server answered: what the app sends goes nowhere

        async def stamped(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                self.in_flight.answered(key)
                status = message["status"]
                message["headers"] = [
                    *message.get("headers", []),
                    (REQUEST_ID_HEADER.encode(), request_id.encode()),
                ]
            await send(message)

        async def send_with_id(message: Message) -> None:
            nonlocal responding
            if superseded:
                return
            responding = True
            await stamped(message)

        async def unavailable() -> None:
            nonlocal responding, superseded
            if responding:
                return
            responding = superseded = True
            log.codes.append("UNAVAILABLE")
            await _send_error(stamped, 503, "the server is stopping: try again", "UNAVAILABLE")

        key = object()
        self.in_flight.hold(key, unavailable)
        try:
            await self._answer(scope, receive, headers, log, send_with_id)
        except asyncio.CancelledError:
            if not superseded:
                raise
            # Answered UNAVAILABLE by the stopping server, then cancelled by it (uvicorn's
            # graceful timeout): nothing left to say, not a traceback per request.
        finally:
            self.in_flight.answered(key)
            await settle(log)  # the calls of fields cancelled midway: counted, then logged
            duration_ms = (time.perf_counter() - started) * 1000
            self.metrics.request(log, status, duration_ms)  # and its log line
            request_log.finish(reset)

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        headers: dict[str, str],
        log: request_log.RequestLog,
        send_with_id: Send,
    ) -> None:
        try:
            # In this task: wait_for would run the read in a task of its own, one
            # more task and loop step for every request.
            async with asyncio.timeout(BODY_TIMEOUT_S):
                body = await self._read_body(headers, receive)
        except TimeoutError:
            log.codes.append("BAD_USER_INPUT")
            await _send_error(
                send_with_id, 408, f"request body not received in {BODY_TIMEOUT_S:.0f} s"
            )
            return
        if body is None:
            log.codes.append("BAD_USER_INPUT")
            await _send_error(
                send_with_id, 413, f"request body is larger than {self.max_body_bytes} bytes"
            )
            return
        await self.app(scope, _replay(body, receive), send_with_id)

    async def _read_body(self, headers: dict[str, str], receive: Receive) -> bytes | None:
        """The whole body, or None when it is larger than allowed (read no further)."""
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """Hand the buffered body to the app, then pass through (to see a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def bad_request_body(message: str, code: str = "BAD_USER_INPUT") -> dict[str, Any]:
    """A GraphQL-shaped error for a request refused before GraphQL could run."""
    return {"errors": [{"message": message, "extensions": {"code": code}}]}


async def _send_error(send: Send, status: int, message: str, code: str = "BAD_USER_INPUT") -> None:
    body = json.dumps(bad_request_body(message, code)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


GRAPHQL_RESPONSE = "application/graphql-response+json"


def wants_graphql_response(request: Request) -> bool:
    """GraphQL over HTTP: the client accepts `application/graphql-response+json`.

    With that media type a request that could not be executed at all (unparsable,
    invalid) is answered with 400 and no `data`, as the GraphQL-over-HTTP spec asks;
    clients that accept only `application/json` keep the classic 200 for every
    GraphQL result.
    """
    return GRAPHQL_RESPONSE in request.headers.get("accept", "")


def was_not_executed(result: ExecutionResult) -> bool:
    """No data, and only errors from before execution (they carry no path)."""
    errors = result.errors or []
    return result.data is None and bool(errors) and all(e.path is None for e in errors)


def as_graphql_response(response: Response, not_executed: bool) -> Response:
    """`response` (JSON) in the media type `application/graphql-response+json`."""
    if response.media_type == "application/json":
        response.headers["content-type"] = f"{GRAPHQL_RESPONSE}; charset=utf-8"
        if response.status_code == 200 and not_executed:
            response.status_code = 400
    return response
