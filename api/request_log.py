"""One JSON log line per request, filled in by whoever learns something about it.

The HTTP middleware opens the record and writes the line; the GraphQL layer adds
the operation, caller, tenant and error codes; a botocore hook adds the DynamoDB
capacity consumed. Never the token, and never field values.
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("api.request")
_current: ContextVar[RequestLog | None] = ContextVar("request_log", default=None)


@dataclass
class RequestLog:
    request_id: str
    operation: str | None = None
    sub: str | None = None
    tenant: str | None = None
    codes: list[str] = field(default_factory=list)
    capacity_units: float = 0.0  # reads and writes
    write_units: float = 0.0  # of them, writes'
    dynamodb_calls: int = 0
    # Calls of the request still running, which may outlive the task that asked for
    # them (a field cancelled because another failed): its line waits for them
    # (`api.worker_threads.settle`), and so counts them.
    outliving: set[asyncio.Future[Any]] = field(default_factory=set, repr=False)
    # The executed operation's root field (`api.metrics`: a closed set, the schema's),
    # "multiple" when it has several; None when nothing was executed.
    root_field: str | None = None
    push_statuses: dict[str, int] = field(default_factory=dict)  # pushChanges entries
    replays: int = 0  # push entries answered from a stored outcome
    throttled: int = 0  # calls the tenant's gate refused (api.tenant_gate)

    def track(self, work: asyncio.Future[Any]) -> None:
        if not work.done():
            self.outliving.add(work)
            work.add_done_callback(self.outliving.discard)

    def line(self, status: int, duration_ms: float) -> str:
        return json.dumps(self.fields(status, duration_ms), separators=(",", ":"))

    def fields(self, status: int, duration_ms: float) -> dict[str, Any]:
        """The line's fields (on Lambda, the EMF document's properties: `api.metrics`)."""
        failed = "INTERNAL_SERVER_ERROR" if status >= 500 else "OK"
        return {
            "requestId": self.request_id,
            "operation": _bounded(self.operation),
            "sub": _bounded(self.sub),
            "tenant": _bounded(self.tenant),
            "status": status,
            "result": ",".join(sorted(set(self.codes))) or failed,
            "durationMs": round(duration_ms, 1),
            "capacityUnits": round(self.capacity_units, 2),
            "writeUnits": round(self.write_units, 2),
            "dynamodbCalls": self.dynamodb_calls,
            "rootField": self.root_field,
        }


# Fields that come from the request (an operation name can be 500 KB) are cut here.
MAX_FIELD_CHARS = 128


def _bounded(value: str | None) -> str | None:
    if value is None or len(value) <= MAX_FIELD_CHARS:
        return value
    return value[:MAX_FIELD_CHARS] + f"...({len(value)} chars)"


def current() -> RequestLog | None:
    return _current.get()


def start(request_id: str) -> tuple[RequestLog, Any]:
    log = RequestLog(request_id=request_id)
    return log, _current.set(log)


def finish(reset_token: Any) -> None:
    _current.reset(reset_token)


def record_consumed_capacity(
    parsed: dict[str, Any] | None = None, model: Any = None, **_: Any
) -> None:
    """botocore `after-call.dynamodb` hook: count the call and add its ConsumedCapacity
    to the request (to its writes too, for a write operation)."""
    log = _current.get()
    if log is None:
        return
    log.dynamodb_calls += 1
    if not parsed:
        return
    consumed = parsed.get("ConsumedCapacity")
    entries = consumed if isinstance(consumed, list) else [consumed] if consumed else []
    units = sum(float(e.get("CapacityUnits", 0)) for e in entries)
    log.capacity_units += units
    if getattr(model, "name", None) in _WRITE_OPERATIONS:
        log.write_units += units


_WRITE_OPERATIONS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
)
