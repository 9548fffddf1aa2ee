"""Store faults injected at the HTTP layer between botocore and DynamoDB Local.

A `before-send` hook can answer in DynamoDB's place (a throttle, a cancelled
transaction) or fail the connection; an `after-call` hook can lose a response
after DynamoDB applied the request. The code under test runs unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError


@contextmanager
def hooks_on(events: Any) -> Iterator[Callable[[str, Callable[..., Any]], None]]:
    """A `register(event, handler)` for botocore hooks on `events` (a client's
    `meta.events`), first in line; every hook it registered is removed on exit."""
    registered: list[tuple[str, Callable[..., Any]]] = []

    def register(event: str, handler: Callable[..., Any]) -> None:
        events.register_first(event, handler)
        registered.append((event, handler))

    try:
        yield register
    finally:
        for event, handler in registered:
            events.unregister(event, handler)


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


def dynamodb_answer(payload: dict[str, Any], status: int = 200) -> AWSResponse:
    """An answer in DynamoDB's place: botocore parses it as it parses DynamoDB's."""
    headers = {"x-amzn-RequestId": "injected", "Content-Type": "application/x-amz-json-1.0"}
    return AWSResponse("http://injected", status, headers, _Raw(json.dumps(payload).encode()))


def dynamodb_error(code: str, message: str = "injected", **extra: Any) -> AWSResponse:
    return dynamodb_answer(
        {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message, **extra}, 400
    )


def transaction_conflict(n_items: int = 4) -> AWSResponse:
    reasons = [{"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}]
    reasons += [{"Code": "None"}] * (n_items - 1)
    return dynamodb_error(
        "TransactionCanceledException",
        "Transaction cancelled, please refer cancellation reasons for specific reasons "
        "[TransactionConflict, None, None, None]",
        CancellationReasons=reasons,
    )


class Fault:
    """A before-send hook answering `response` (or raising) for the first `times` calls."""

    def __init__(self, make: Callable[[], AWSResponse] | Exception, times: int = 10**9) -> None:
        self.make = make
        self.times = times
        self.calls = 0

    def stop(self) -> None:
        self.times = self.calls

    def __call__(self, request: Any = None, **_: Any) -> AWSResponse | None:
        if self.calls >= self.times:
            return None
        self.calls += 1
        if isinstance(self.make, Exception):
            raise self.make
        return self.make()


def connection_refused() -> Exception:
    return EndpointConnectionError(endpoint_url="http://127.0.0.1:1")


class LoseResponse:
    """An after-call hook: DynamoDB applied the request, then the response is lost."""

    def __init__(self, times: int = 1) -> None:
        self.times = times
        self.calls = 0

    def stop(self) -> None:
        self.times = self.calls

    def __call__(self, **_: Any) -> None:
        if self.calls < self.times:
            self.calls += 1
            raise ReadTimeoutError(endpoint_url="http://injected")
