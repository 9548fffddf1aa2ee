"""The operators' metrics (`api.metrics`) in the Prometheus exposition format, on a
server: GET /metrics (`api.health.metrics_endpoint`). prometheus-client is the
`server` extra's: imported when a server's app is built, never on Lambda."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from api.metrics import (
    CATALOG,
    SWEEP_CALLS,
    SWEEP_FAILURES,
    SWEEP_LAST_SUCCESS,
    Metric,
    Metrics,
    request_dimensions,
    request_values,
)

if TYPE_CHECKING:
    from api.request_log import RequestLog


class Prometheus(Metrics):
    """The Prometheus exposition format, on a registry of this app's own."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self._gauge = Gauge
        self._series: dict[str, Any] = {}
        # Each labelled series, by its metric and label values, with what a value is
        # multiplied by (a histogram of milliseconds observes seconds): prometheus-
        # client's `labels()` checks and joins its arguments on every call, and the
        # label names were snake-cased on every call too; looked up here, a request's
        # metrics took 25-52 us instead of 49-87 (timeit, 3 to 6 series a request;
        # docs/benchmarks.md, "The operators' metrics").
        self._children: dict[tuple[Any, ...], tuple[Callable[[float], None], float]] = {}
        for metric in CATALOG:
            labels = [_snake(label) for label in metric.labels]
            name = metric.prometheus_name
            if metric.kind == "counter":
                self._series[metric.name] = Counter(
                    name, metric.help, labels, registry=self.registry
                )
            elif metric.kind == "histogram":
                buckets = metric.buckets or Histogram.DEFAULT_BUCKETS
                self._series[metric.name] = Histogram(
                    name, metric.help, labels, registry=self.registry, buckets=buckets
                )

    def request(self, log: RequestLog, status: int, duration_ms: float) -> None:
        super().request(log, status, duration_ms)  # the log line, as without metrics
        dimensions = request_dimensions(log, status)
        for metric, value, labels in request_values(log, status, duration_ms):
            self.add(metric, value, **dimensions, **labels)

    def add(self, metric: Metric, value: float = 1.0, **labels: str) -> None:
        key = (metric.name, *labels.items())
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._child(metric, labels)
        record, scale = child
        record(value * scale)

    def _child(
        self, metric: Metric, labels: dict[str, str]
    ) -> tuple[Callable[[float], None], float]:
        series = self._series[metric.name]
        if labels:
            series = series.labels(**{_snake(k): v for k, v in labels.items()})
        if metric.kind == "histogram":
            return series.observe, 0.001 if metric.unit == "Milliseconds" else 1.0
        return series.inc, 1.0

    def gauge(self, metric: Metric, read: Callable[[], float]) -> None:
        gauge = self._gauge(metric.prometheus_name, metric.help, registry=self.registry)
        gauge.set_function(read)

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def write_sweep_textfile(path: str, calls: int, failed: bool, now_s: float) -> None:
    """A sweep round on a server (`scripts/sweep --metrics-file`, run hourly by cron):
    its metrics in a file for node_exporter's textfile collector, the Prometheus way
    for a batch job that no scrape would find running. The counters carry on from
    the file's previous values (a round adds to them); the last success stays the
    previous round's when this one raised."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, write_to_textfile
    from prometheus_client.parser import text_string_to_metric_families

    before: dict[str, float] = {}
    try:
        with open(path, encoding="utf-8") as previous:
            for family in text_string_to_metric_families(previous.read()):
                for sample in family.samples:
                    before[sample.name] = sample.value
    except FileNotFoundError:
        pass
    registry = CollectorRegistry()
    for metric, added in ((SWEEP_CALLS, calls), (SWEEP_FAILURES, int(failed))):
        total = before.get(f"{metric.prometheus_name}_total", 0.0) + added
        Counter(metric.prometheus_name, metric.help, registry=registry).inc(total)
    name = SWEEP_LAST_SUCCESS.prometheus_name
    last = before.get(name, 0.0) if failed else now_s
    Gauge(name, SWEEP_LAST_SUCCESS.help, registry=registry).set(last)
    write_to_textfile(path, registry)  # written aside, then renamed: never read half
