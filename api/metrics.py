"""The operators' metrics: each defined once here, written in the ecosystem's own
formats (docs/operations.md).

- On AWS Lambda, CloudWatch's Embedded Metric Format (EMF): a JSON document on
  stdout, one whole line, from which CloudWatch Logs extracts the metrics. A
  request's EMF document is its log line (`api.request_log`) with the metrics'
  directive and values added; other events (the fan-out, the drain, the sweep, a
  WebSocket message) write one document per invocation. Never through `logging`:
  Lambda's log handler prefixes each line with its level, time and request id, and
  CloudWatch extracts EMF only from an event that is a whole JSON object. The
  document is serialized by Powertools for AWS Lambda's EMF provider (its units,
  names and the specification's structure).
- On a server (scripts/serve, a container), the Prometheus exposition format
  (`prometheus-client`) at `GET /metrics`, for the holder of `HEALTH_TOKEN`.

Dimensions (labels) are closed sets: a GraphQL root field of the schema (never the
client's operation name, which is unbounded), an outcome code, a push entry's
status, an HTTP status class, a WebSocket route. Never a tenant id: a tenant is a
property of the log line (per-tenant cost is read from the log, scripts/top-tenants).
On CloudWatch every custom metric (name and dimension values) is billed
($0.30 a month each, scripts/benchmarks/prices.py), so a label that is not one of
its event's dimensions is folded into the metric's name there (`PushEntries` by
`status` is `PushEntriesApplied`, `PushEntriesConflict`, `PushEntriesRejected`),
and counts that are zero are left out of the document (they create no series).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from api.domain.tokens import token_ms

if TYPE_CHECKING:
    from api.request_log import RequestLog

logger = logging.getLogger("api.request")

NAMESPACE = "OfflineSync"


class Lines(Protocol):
    """Where EMF documents go (stdout, or a test's buffer)."""

    def write(self, text: str, /) -> int: ...


@dataclass(frozen=True)
class Metric:
    name: str  # CloudWatch's metric name; Prometheus' is `sync_` and its snake case
    kind: str  # "counter", "histogram" (a distribution: CloudWatch keeps its statistics) or "gauge"
    unit: str  # a CloudWatch unit: Count, Milliseconds, Seconds
    help: str
    labels: tuple[str, ...] = ()
    # A histogram's buckets on Prometheus, in seconds (CloudWatch keeps percentiles
    # of every value): None, prometheus-client's (5 ms to 10 s).
    buckets: tuple[float, ...] | None = None

    @property
    def prometheus_name(self) -> str:
        snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in self.name).lstrip("_")
        suffix = "_seconds" if self.unit == "Milliseconds" else ""
        return f"sync_{snake}{suffix}"


# What a request is (HTTP, and each operation over a server's WebSocket).
REQUEST_DIMENSIONS = ("rootField", "outcome")
REQUESTS = Metric("Requests", "counter", "Count", "Requests.", REQUEST_DIMENSIONS)
LATENCY = Metric(
    "Latency", "histogram", "Milliseconds", "Time to answer a request.", REQUEST_DIMENSIONS
)
CAPACITY_UNITS = Metric(
    "CapacityUnits",
    "counter",
    "Count",
    "DynamoDB capacity units consumed (reads and writes).",
    REQUEST_DIMENSIONS,
)
WRITE_UNITS = Metric("WriteUnits", "counter", "Count", "Of them, write units.", REQUEST_DIMENSIONS)
RESPONSES = Metric(
    "HttpResponses",
    "counter",
    "Count",
    "HTTP responses by status class, 4xx and 5xx (2xx: the requests less these).",
    (*REQUEST_DIMENSIONS, "statusClass"),
)
CONFLICTS = Metric(
    "Conflicts",
    "counter",
    "Count",
    "CONFLICT answers: push entries and single mutations.",
    REQUEST_DIMENSIONS,
)
REPLAYS = Metric(
    "Replays",
    "counter",
    "Count",
    "Push entries answered from a stored outcome.",
    REQUEST_DIMENSIONS,
)
RESYNC_REQUIRED = Metric(
    "ResyncRequired", "counter", "Count", "RESYNC_REQUIRED errors.", REQUEST_DIMENSIONS
)
TENANT_DELETED = Metric(
    "TenantDeleted", "counter", "Count", "TENANT_DELETED errors.", REQUEST_DIMENSIONS
)
UNAVAILABLE = Metric(
    "Unavailable",
    "counter",
    "Count",
    "UNAVAILABLE errors (DynamoDB throttled or did not answer).",
    REQUEST_DIMENSIONS,
)
TENANT_THROTTLED = Metric(
    "TenantThrottled",
    "counter",
    "Count",
    "Calls a tenant's or a caller's gate refused with UNAVAILABLE: more of its reads or "
    "writes at once than it admits (api.tenant_gate; a server's throttling of one tenant, "
    "or of one caller across its tenants).",
    REQUEST_DIMENSIONS,
)
PUSH_ENTRIES = Metric(
    "PushEntries",
    "counter",
    "Count",
    "pushChanges entries by status (APPLIED, CONFLICT, REJECTED).",
    (*REQUEST_DIMENSIONS, "status"),
)
# Realtime.
POKES_SENT = Metric("PokesSent", "counter", "Count", "changesAvailable events sent.")
POKE_DELAY = Metric(
    "PokeDelay",
    "histogram",
    "Milliseconds",
    "From a change's commit (its token's time) to its event's send.",
    # Up to minutes: a fan-out behind the stream, a server catching up after a restart.
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
SILENT_PUSHES = Metric(
    "SilentPushesSent", "counter", "Count", "Silent pushes published to SNS (docs/realtime.md)."
)
SILENT_PUSH_FAILURES = Metric(
    "SilentPushFailures",
    "counter",
    "Count",
    "Silent pushes SNS did not take (each token waits for a later round).",
)
SOCKETS_OPEN = Metric("SocketsOpen", "gauge", "Count", "WebSocket connections open (a server).")
WEBSOCKET_MESSAGES = Metric(
    "WebsocketMessages",
    "counter",
    "Count",
    "WebSocket API invocations by route ($connect, $disconnect, $default).",
    ("route",),
)
FANOUT_FAILURES = Metric(
    "FanoutFailures",
    "counter",
    "Count",
    "Tenants of a stream batch whose subscribers the fan-out could not all poke.",
)
DRAINED_BATCHES = Metric(
    "DrainedBatches", "counter", "Count", "Failed fan-out batches poked again by the drain."
)
DRAIN_FAILURES = Metric(
    "DrainFailures", "counter", "Count", "Failed fan-out batches the drain returned to the queue."
)
STREAM_READER = Metric(
    "StreamReader", "gauge", "Count", "1 while this server holds the stream reader's lease."
)
LEASE_TAKEOVERS = Metric(
    "LeaseTakeovers", "counter", "Count", "Times this server took the stream reader's lease."
)
# The relay of pokes between servers (api.realtime.relay): a server's equivalent of
# the fan-out's failure queue on AWS.
RELAY_PENDING = Metric(
    "RelayPending",
    "gauge",
    "Count",
    "Tenants whose newest poke the stream reader has still to post to another server.",
)
RELAY_BEHIND = Metric(
    "RelayBehindSeconds",
    "gauge",
    "Seconds",
    "How long the most behind server has had pokes owed and every post to it failing.",
)
RELAY_POST_FAILURES = Metric(
    "RelayPostFailures", "counter", "Count", "Posts of pokes to another server that failed."
)
# The blob sweep.
SWEEP_CALLS = Metric("SweepCalls", "counter", "Count", "Resumable calls of the blob sweep.")
SWEEP_FAILURES = Metric("SweepFailures", "counter", "Count", "Sweep rounds that raised.")
SWEEP_LAST_SUCCESS = Metric(
    "SweepLastSuccessTimestampSeconds",
    "gauge",
    "Seconds",
    "When a sweep round last ended without raising (a server's scripts/sweep --metrics-file).",
)

# Every metric above, in the order defined.
CATALOG: tuple[Metric, ...] = tuple(m for m in list(globals().values()) if isinstance(m, Metric))

# The codes an answer can carry (contract 3.5), the most telling first: a request's
# outcome is the first of its codes in this order ("OK" with none). A code outside
# it is "OTHER": the dimension stays a closed set whatever an error says.
OUTCOMES = (
    "INTERNAL_SERVER_ERROR",
    "UNAVAILABLE",
    "TENANT_DELETED",
    "RESYNC_REQUIRED",
    "UNAUTHENTICATED",
    "FORBIDDEN",
    "CONFLICT",
    "ALREADY_EXISTS",
    "QUOTA_EXCEEDED",
    "ATTACHMENT_MISSING",
    "INVALID_CURSOR",
    "NOT_FOUND",
    "BAD_USER_INPUT",
)
# A request's root field when its document has several ("multiple"), or none was
# executed (refused before GraphQL, unparsable, invalid: "none").
MULTIPLE = "multiple"
NONE = "none"


def outcome(codes: Iterable[str], status: int) -> str:
    present = set(codes)
    for code in OUTCOMES:
        if code in present:
            return code
    if present:
        return "OTHER"
    return "INTERNAL_SERVER_ERROR" if status >= 500 else "OK"


def poke_delay_ms(token: str, now_s: float | None = None) -> float:
    """From the commit of the change `token` names to now (a token is its commit's
    time, within the clock's skew between servers)."""
    return max(0.0, (now_s if now_s is not None else time.time()) * 1000 - token_ms(token))


class Metrics:
    """Where metrics go: nowhere (`Metrics()`, with the request's log line through
    `logging`), CloudWatch (`Emf`) or Prometheus (`Prometheus`)."""

    def request(self, log: RequestLog, status: int, duration_ms: float) -> None:
        """A request ended: its log line, and its metrics."""
        logger.info(log.line(status, duration_ms))

    def add(self, metric: Metric, value: float = 1.0, **labels: str) -> None:
        """Count (or observe, for a histogram) `value`."""

    def gauge(self, metric: Metric, read: Callable[[], float]) -> None:
        """A gauge read when the metrics are (a server's scrape)."""

    def flush(self, **properties: Any) -> None:
        """An invocation ended: write what it counted (EMF)."""


def request_values(
    log: RequestLog, status: int, duration_ms: float
) -> list[tuple[Metric, float, dict[str, str]]]:
    """A request's metrics: (metric, value, labels beyond the request's dimensions)."""
    values: list[tuple[Metric, float, dict[str, str]]] = [
        (REQUESTS, 1.0, {}),
        (LATENCY, duration_ms, {}),
        (CAPACITY_UNITS, log.capacity_units, {}),
    ]
    # Like the counts below, only when there is something to count: a read writes
    # nothing, and 2xx answers are the requests less the others (each metric left
    # out of a document is work and, on CloudWatch, a series less).
    if log.write_units:
        values.append((WRITE_UNITS, log.write_units, {}))
    if status >= 400:
        values.append((RESPONSES, 1.0, {"statusClass": f"{status // 100}xx"}))
    codes = log.codes
    conflicts = codes.count("CONFLICT") + log.push_statuses.get("CONFLICT", 0)
    for metric, value in (
        (CONFLICTS, conflicts),
        (REPLAYS, log.replays),
        (RESYNC_REQUIRED, codes.count("RESYNC_REQUIRED")),
        (TENANT_DELETED, codes.count("TENANT_DELETED")),
        (UNAVAILABLE, codes.count("UNAVAILABLE")),
        (TENANT_THROTTLED, log.throttled),
    ):
        if value:
            values.append((metric, float(value), {}))
    for push_status, count in sorted(log.push_statuses.items()):
        values.append((PUSH_ENTRIES, float(count), {"status": push_status}))
    return values


def request_dimensions(log: RequestLog, status: int) -> dict[str, str]:
    return {"rootField": log.root_field or NONE, "outcome": outcome(log.codes, status)}


class Emf(Metrics):
    """CloudWatch Embedded Metric Format, one JSON document a line on `out`."""

    def __init__(self, out: Lines | None = None, namespace: str = NAMESPACE) -> None:
        # Imported here, when the app is built: before SnapStart's snapshot, not on
        # a first request.
        from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
            AmazonCloudWatchEMFProvider,
        )

        # One provider for the process: making one (its lists of units) and adding
        # each metric through it (checks, debug strings) were 9% of a poll's
        # instructions (5.94 million against 5.41, cachegrind). The catalog's names
        # and units are checked by it once, here; each document is then serialized
        # from the values (`serialize_metric_set`).
        self._provider = AmazonCloudWatchEMFProvider(namespace=namespace)
        for metric in CATALOG:
            self._provider.add_metric(name=metric.name, unit=metric.unit, value=0)
        self._provider.clear_metrics()
        self._out = out
        self._pending: list[tuple[Metric, float, dict[str, str]]] = []

    def request(self, log: RequestLog, status: int, duration_ms: float) -> None:
        dimensions = request_dimensions(log, status)
        fields = {**log.fields(status, duration_ms), **dimensions}
        self._write(request_values(log, status, duration_ms), dimensions, fields)

    def add(self, metric: Metric, value: float = 1.0, **labels: str) -> None:
        self._pending.append((metric, value, labels))

    def flush(self, **properties: Any) -> None:
        pending, self._pending = self._pending, []
        dimensions = {k: v for k, v in properties.items() if isinstance(v, str)}
        dimensions = {k: v for k, v in dimensions.items() if k in _event_dimensions(pending)}
        self._write(pending, dimensions, properties)

    def _write(
        self,
        values: list[tuple[Metric, float, dict[str, str]]],
        dimensions: dict[str, str],
        properties: dict[str, Any],
    ) -> None:
        if not values:
            return
        metrics: dict[str, dict[str, Any]] = {}
        for metric, value, labels in values:
            name = metric.name
            for label, label_value in labels.items():
                if label not in dimensions:
                    name += label_value.capitalize()
            entry = metrics.setdefault(name, {"Unit": metric.unit, "Value": []})
            entry["Value"].append(float(value))
        provider = self._provider
        # And each metric without dimensions: what alarms and the dashboard read.
        provider.dimension_sets = [{}] if dimensions else []
        document = provider.serialize_metric_set(
            metrics=metrics, dimensions=dimensions, metadata=properties
        )
        out = self._out or sys.stdout
        out.write(json.dumps(document, separators=(",", ":")) + "\n")


def _event_dimensions(values: list[tuple[Metric, float, dict[str, str]]]) -> set[str]:
    """The labels every metric of an event carries: its document's dimensions."""
    label_sets = [set(m.labels) for m, _, _ in values]
    return set.intersection(*label_sets) if label_sets else set()
