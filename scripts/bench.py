"""Latency, throughput and DynamoDB cost of the API, next to the raw store and the
floor (the raw call behind a bare Starlette route) in the same run; attachments
against the raw S3 calls on the same engine.

Starts its own DynamoDB Local and S3 engine (moto's server; both in memory), the
API server and the floor server, seeds data, measures (`scripts/benchmarks/`: one
module per family), prints its tables and saves them as JSON in `.bench-results/`
(ignored by git; `--out DIR` for a kept folder), then writes the generated section of
docs/benchmarks.md and its plots from that JSON (`scripts/benchmarks/page.py`; `--page
DIR` elsewhere), and the figures docs/sync.md and docs/realtime.md quote from it
(`scripts/benchmarks/quoted.py`). Run with `scripts/bench` (`--fast`, the default; `--full` measures
longer; `--smoke`, the least that fills every row, is what the test suite runs: its
figures are not for reading, so its page goes to `--out`, never to docs/).

Capacity: DynamoDB Local reports ConsumedCapacity, but not by AWS's rules for
transactions, so every row also gives the units AWS would bill, computed from
the item sizes by AWS's rules (reads: 4 KB per unit, strongly consistent;
transactional writes: 2 units per KB per item), and the minimum any design
could pay for the same data. Prices: `scripts/benchmarks/prices.py`. The all-in
cost of five of the operations (HTTP API, Lambda, DynamoDB, S3) beside AppSync's,
from the Lambda handler's time in process: `scripts/benchmarks/cost.py`; realtime's
(a connected device-hour, a fan-out) beside AppSync's: `scripts/benchmarks/realtime_cost.py`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
from starlette.testclient import TestClient

from api.app import create_app
from api.auth import make_local_token
from api.settings import PROJECT_ROOT
from api.storage import models
from scripts.benchmarks import quoted, raw
from scripts.benchmarks.app_pages import measure_app_pages
from scripts.benchmarks.attachments import REFERENCE_TENANTS, measure_attachments
from scripts.benchmarks.bulk import measure_bulk
from scripts.benchmarks.churn import measure_churn
from scripts.benchmarks.cost import TENANT as COST_TENANT
from scripts.benchmarks.cost import measure_cost
from scripts.benchmarks.floor import FLOOR_APP
from scripts.benchmarks.harness import SECRET, TABLE, Harness, local_engines
from scripts.benchmarks.page import DOCS, machine
from scripts.benchmarks.page import write as write_page
from scripts.benchmarks.prices import PRICES_AS_OF
from scripts.benchmarks.reads import measure_reads
from scripts.benchmarks.realtime import measure_realtime
from scripts.benchmarks.realtime_burst import BURST_TENANTS
from scripts.benchmarks.realtime_cost import TENANTS as REALTIME_COST_TENANTS
from scripts.benchmarks.realtime_cost import measure_realtime_cost
from scripts.benchmarks.report import SMOKE_SPLIT_REQUESTS, SPLIT_REQUESTS, report
from scripts.benchmarks.scale import measure_scale, measure_sweep
from scripts.benchmarks.silent_pushes import measure_silent_pushes
from scripts.benchmarks.tenancy import measure_tenancy
from scripts.benchmarks.upgrade import measure_upgrade
from scripts.benchmarks.visibility import measure_visibility
from scripts.benchmarks.writes import measure_contention, measure_writes
from scripts.local_s3 import LocalS3
from scripts.profile_request import profile
from tests.support.servers import api_server
from tests.support.subscribers import pid_listening

RESULTS = PROJECT_ROOT / ".bench-results"
TENANTS = ["page", *(f"w{i}" for i in range(8)), "small", "large", "bulk", "hot", "sweep"]
TENANTS += ["realtime", "wunits", "churn", "churn-min", "attachments", *REFERENCE_TENANTS]
TENANTS += [COST_TENANT, *BURST_TENANTS, *REALTIME_COST_TENANTS]
# --smoke: timed calls per row (60 in --fast) and the large tenant's size (50,000):
# seeding that tenant and the rows' calls were 4 of the test's 8 minutes in CI; the
# small and paged tenants' (1,000); the bulk tenant's (10,000), which is also
# exported and deleted; requests profiled, and the unprofiled ones before them (20).
# Its DynamoDB Local compiles with C1 only (`SHORT_LIVED_JVM`): a smoke run's figures
# say that every row runs, not how fast.
SMOKE_ITERATIONS = 12
SMOKE_SMALL = 300
SMOKE_LARGE = 1_000
SMOKE_BULK = 2_000
SMOKE_WARM = 3


def run(fast: bool, smoke: bool = False) -> dict[str, Any]:
    load_at_start = os.getloadavg()[0]  # the page states it: other work inflates times
    mode = "smoke" if smoke else "fast" if fast else "full"
    with local_engines(short_lived=smoke) as engines:
        settings = engines.settings
        ddb = settings.dynamodb_client()
        models.bind(settings)
        logging.getLogger("api").setLevel(logging.WARNING)
        token = make_local_token(SECRET, "bench", TENANTS, 24 * 3600)
        headers = {"Authorization": f"Bearer {token}"}
        with (
            api_server(settings) as url,
            api_server(settings, app=FLOOR_APP) as floor_url,
            TestClient(create_app(settings)) as local,
        ):
            clients = [httpx2.Client(base_url=url, headers=headers, timeout=60) for _ in range(8)]
            floors = [httpx2.Client(base_url=floor_url, timeout=60) for _ in range(8)]
            h = Harness(fast, settings, ddb, headers, local, clients, floors, pid_listening(url))
            if smoke:
                h.iterations, h.small = SMOKE_ITERATIONS, SMOKE_SMALL
                h.large, h.bulk = SMOKE_LARGE, SMOKE_BULK
                h.smoke = True
            try:
                result = _measure(h, engines.blobs)
                result["attachments"] = measure_attachments(h, engines.blobs)
                result["cost"] = measure_cost(h)
                result["realtime_cost"] = measure_realtime_cost(h, result["cost"], mode)
                print("==> who sees what", flush=True)
                result["visibility"] = measure_visibility(h, mode, result["avg_item_bytes"])
            finally:
                for c in clients + floors:
                    c.close()
        print("==> silent pushes", flush=True)
        sync = result["cost"]["operations"]["incremental sync of 10"]
        result["silent_pushes"] = measure_silent_pushes(settings, sync, mode)
        print("==> each example app's page", flush=True)
        result["app_pages"] = measure_app_pages(settings, mode)
        print("==> upgrade", flush=True)
        result["upgrade"] = measure_upgrade(mode)
        print("==> realtime", flush=True)
        result["realtime"] = measure_realtime(settings, ddb, headers["Authorization"], mode)
        print("==> where a request's time goes (cProfile, in process)", flush=True)
        if smoke:
            result["split_ms"] = profile(SMOKE_SPLIT_REQUESTS, settings, warm=SMOKE_WARM)
        else:
            result["split_ms"] = profile(SPLIT_REQUESTS["fast" if fast else "full"], settings)
    return _report(result, mode, load_at_start)


def _measure(h: Harness, blobs: LocalS3) -> dict[str, Any]:
    print("==> seeding", flush=True)
    started = time.perf_counter()
    page = h.seed("page", h.small)
    h.seed("small", h.small)
    h.seed("large", h.large)
    bulk = h.seed("bulk", h.bulk)
    h.seed("sweep", 1000)
    seeded = 2 * h.small + h.large + h.bulk + 1000
    print(f"    {seeded} items in {time.perf_counter() - started:.0f} s", flush=True)
    item_bytes = [raw.item_size(h.ddb, TABLE, r) for r in page[:100]]
    avg_item = sum(item_bytes) / len(item_bytes)
    print(f"==> rows (items average {avg_item:.0f} bytes)", flush=True)
    measure_reads(h, page, item_bytes)
    write_units = measure_writes(h, avg_item)
    scale = measure_scale(h)
    sweep = measure_sweep(h)
    bulk_row = measure_bulk(h, bulk)
    churn = measure_churn(h)
    contention = measure_contention(h)
    tenancy = measure_tenancy(h, "bulk", blobs)  # last: it deletes the tenant
    return {
        "rows": h.rows,
        "scale": scale,
        "incremental_sync_units": sweep,
        "bulk_sync": bulk_row,
        "churned_first_sync": churn,
        "avg_item_bytes": avg_item,
        "write_throughput": contention,
        "write_units": write_units,
        "tenancy": tenancy,
    }


def _report(result: dict[str, Any], mode: str, load_at_start: float) -> dict[str, Any]:
    saved = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(load_at_start),
        "mode": mode,
        "prices": PRICES_AS_OF,
        **result,
    }
    report(saved)
    return saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--fast", action="store_true", help="about two minutes (default)")
    mode.add_argument("--full", action="store_true", help="more iterations")
    mode.add_argument("--smoke", action="store_true", help="every row, fewest calls (tests)")
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help="results folder (default .bench-results/)"
    )
    parser.add_argument(
        "--page",
        type=Path,
        help="where benchmarks.md and its plots are written (default docs/; --smoke: --out)",
    )
    args = parser.parse_args(argv)
    result = run(fast=not args.full, smoke=args.smoke)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.out / f"{stamp}-{platform.node() or 'machine'}-{result['mode']}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"\nsaved {path}")
    # A smoke run's figures say that every row runs, not how fast: never the docs'.
    docs = args.page or (args.out if args.smoke else DOCS)
    page = write_page(result, docs)
    quoted.write(result, docs)  # the figures other pages quote from the run
    print(f"wrote {page} and its plots, and the figures {', '.join(quoted.PAGE_NAMES)} quote")
    return 0


if __name__ == "__main__":
    sys.exit(main())
