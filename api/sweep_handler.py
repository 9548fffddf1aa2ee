"""AWS Lambda entry point of the scheduled sweep of unreferenced blobs
(`api.service.blob_sweep`; serverless.yml runs it hourly): it sweeps the tenants
whose pass is due, from the registry of tenants with blobs, until its time is
nearly up. Nothing of the API (no schema, no GraphQL) is imported."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any

from api import metric_sinks, metrics
from api.service.blob_sweep import BlobSweep
from api.settings import Settings
from api.storage import keys, models
from api.storage.blob_usage import BlobUsageTable
from api.storage.blobs import S3Blobs
from api.storage.lazy_client import LazyClient

logging.getLogger().setLevel(logging.INFO)  # Lambda's root handler is at WARNING

# Left of the function's time when no new call starts: a call takes seconds (a
# listing page, 5,000 records, up to 1,000 copies or deletes of small objects).
_MARGIN_S = 60


def build(settings: Settings | None = None, clock_s: Callable[[], float] = time.time) -> BlobSweep:
    """The sweep over the configured table and bucket (`clock_s`: scripts/sweep's
    --ahead-days). S3's client is made when a tenant's pass first needs it: a round
    with no tenant due (most hours, for most tables) reads only the registry, and
    botocore's loading of S3's service model was the largest part of the build."""
    settings = settings or Settings.from_env()
    settings.apply_local_credentials()
    models.bind(settings)
    blobs = S3Blobs(
        LazyClient(settings.s3_client),
        settings.blob_bucket,
        hashes_bytes=not settings.s3_verifies_checksums,
    )
    return BlobSweep(blobs, BlobUsageTable(), settings.blob_quota_bytes, clock_s=clock_s)


_sweep: BlobSweep | None = None
_metrics: metrics.Metrics | None = None


def handler(event: Any, context: Any) -> dict[str, int]:
    global _sweep, _metrics
    if _metrics is None:
        _metrics = metric_sinks.for_lambda(Settings.from_env().metrics)
    try:
        if _sweep is None:
            _sweep = build()
        budget = context.get_remaining_time_in_millis() / 1000 - _MARGIN_S
        # From a random shard: a round cut short by its budget does not always leave
        # the same shards for the next hour.
        calls = _sweep.sweep_due(budget, start_shard=random.randrange(keys.REGISTRY_SHARDS))
    except Exception:
        _metrics.add(metrics.SWEEP_FAILURES)  # and Lambda counts an error
        raise
    else:
        _metrics.add(metrics.SWEEP_CALLS, calls)
    finally:
        _metrics.flush(function="sweep")
    logging.getLogger(__name__).info("blob sweep round: calls=%d", calls)
    return {"calls": calls}
