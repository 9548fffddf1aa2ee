"""Where a process's metrics go (METRICS, docs/operations.md): CloudWatch's EMF on
AWS Lambda, Prometheus on a server, or nowhere. Apart from `api.metrics`, which
defines them: `api.prometheus_metrics` builds on that module, and is imported only
when chosen (prometheus-client is the `server` extra's, never on Lambda)."""

from __future__ import annotations

from api.metrics import Emf, Metrics


def for_server(kind: str | None) -> Metrics:
    """A server's metrics: Prometheus's unless METRICS says otherwise."""
    return _choose(kind or "prometheus")


def for_lambda(kind: str | None) -> Metrics:
    """A Lambda function's metrics: EMF unless METRICS says otherwise."""
    return _choose(kind or "emf")


def _choose(kind: str) -> Metrics:
    if kind == "emf":
        return Emf()
    if kind == "prometheus":
        from api.prometheus_metrics import Prometheus  # a server's only: never on Lambda

        return Prometheus()
    return Metrics()
