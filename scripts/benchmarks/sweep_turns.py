"""The blob sweep's round against a large tenant first in its shard (issue 37,
finding 3; `scripts/bench-hostile sweep`): how long the tenants after it wait for
their first call, before (each tenant's whole pass in one turn) and after (a turn
of TURN_CALLS calls, the pass resumed later). In process, on the bench's own
DynamoDB Local and S3 engine; calls read READ_UNITS records each here (5,000 in
production), so that a tenant of LARGE records stands for one of five times as many."""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from typing import Any

from starlette.testclient import TestClient

from api.app import create_app
from api.service import blob_sweep
from api.service.blob_sweep import GRACE_S, BlobSweep, SweepCall
from api.storage import models
from api.storage.blob_usage import BlobUsageTable
from api.storage.blobs import S3Blobs
from api.storage.keys import registry_shard
from scripts.benchmarks.harness import local_engine_settings
from tests.support.blobs import upload
from tests.support.bulk import bulk_people
from tests.support.gql import TEST_AUTH_SECRET, GraphQLClient

LARGE = 25_000  # the large tenant's records (issue 37's)
SMALL = 8  # tenants after it in its shard, each with one stale blob
READ_UNITS = 1_000  # records a call reads, here


class _Timed(BlobSweep):
    """The sweep, noting when each tenant's first call of the round started."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started = time.monotonic()
        self.first: dict[str, float] = {}
        self.calls: list[str] = []

    def sweep(self, tenant_id: str, reads: int | None = None) -> SweepCall:
        self.first.setdefault(tenant_id, time.monotonic() - self.started)
        self.calls.append(tenant_id)
        return super().sweep(tenant_id, reads)


def _tenants(prefix: str) -> tuple[str, list[str]]:
    """SMALL tenants of one registry shard, and a large one of that shard that sorts
    before them (the registry lists a shard in tenant order)."""
    small = [f"{prefix}-s0"]
    shard = registry_shard(small[0])
    names = (f"{prefix}-s{n}" for n in itertools.count(1))
    small += itertools.islice((t for t in names if registry_shard(t) == shard), SMALL - 1)
    large = next(
        f"0-{prefix}-{n}" for n in itertools.count() if registry_shard(f"0-{prefix}-{n}") == shard
    )
    return large, small


def _round(settings: Any, label: str, turn_calls: int) -> tuple[int, float]:
    """A large tenant and SMALL after it in one shard, each with a stale blob; one
    round of the sweep with turns of `turn_calls` calls: the large tenant's calls
    before the first of the others, and the seconds until each had its first."""
    large, small = _tenants(label)
    app_settings = dataclasses.replace(settings, auth_secret=TEST_AUTH_SECRET)
    with TestClient(create_app(app_settings)) as local:
        gql = GraphQLClient(local)
        for tenant in (large, *small):
            upload(gql, tenant, os.urandom(64))
    bulk_people(large, LARGE)
    sweep = _Timed(
        S3Blobs(settings.s3_client(), settings.blob_bucket, hashes_bytes=True),
        BlobUsageTable(),
        10**9,
        clock_s=lambda: time.time() + GRACE_S + 60,  # every blob past its grace
    )
    saved = blob_sweep.TURN_CALLS, blob_sweep.READS_PER_CALL
    blob_sweep.TURN_CALLS, blob_sweep.READS_PER_CALL = turn_calls, READ_UNITS
    try:
        sweep.sweep_due(budget_s=600)
    finally:
        blob_sweep.TURN_CALLS, blob_sweep.READS_PER_CALL = saved
    first_small = next(i for i, t in enumerate(sweep.calls) if t in small)
    return first_small, max(sweep.first[t] for t in small)


def sweep_rows() -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    with local_engine_settings() as settings:
        models.bind(settings)
        for label, turn_calls in (("before", 10**9), ("after", blob_sweep.TURN_CALLS)):
            calls, waited = _round(settings, label, turn_calls)
            rows.append(
                (
                    f"sweep round, a tenant of {LARGE:,} records first in its shard, "
                    f"{SMALL} after it ({label}): its calls before theirs; s until each "
                    "had its first",
                    f"{calls}; {waited:.2f}",
                )
            )
    return rows
