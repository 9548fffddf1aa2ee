"""Every table of a scripts/bench run, printed from its saved JSON alone: by the run
itself (scripts/bench.py) and on the benchmarks page (scripts/benchmarks/page.py), one
source of format."""

from __future__ import annotations

from typing import Any

from scripts.benchmarks.app_pages import print_app_pages
from scripts.benchmarks.attachments import print_attachments
from scripts.benchmarks.bulk import print_bulk
from scripts.benchmarks.churn import print_churn
from scripts.benchmarks.cost import print_cost
from scripts.benchmarks.harness import print_rows
from scripts.benchmarks.realtime import print_realtime
from scripts.benchmarks.realtime_cost import print_realtime_cost
from scripts.benchmarks.scale import print_scale
from scripts.benchmarks.silent_pushes import print_silent_pushes
from scripts.benchmarks.tenancy import print_tenancy
from scripts.benchmarks.upgrade import print_upgrade
from scripts.benchmarks.visibility import print_visibility
from scripts.benchmarks.writes import print_write_units
from scripts.profile_request import print_split

# Requests profiled per operation for the split by layer (--fast, --full; --smoke's:
# scripts/bench.py).
SPLIT_REQUESTS = {"fast": 50, "full": 200}
SMOKE_SPLIT_REQUESTS = 10


def report(saved: dict[str, Any]) -> None:
    """Prints every table of a run from its saved JSON alone (the run, and the page)."""
    print_rows(saved["rows"])
    print_cost(saved["cost"])
    print_realtime_cost(saved["realtime_cost"])
    print_write_units(saved["write_units"])
    print_scale(saved["scale"], saved["incremental_sync_units"])
    print_bulk(saved["bulk_sync"])
    print_churn(saved["churned_first_sync"], saved["avg_item_bytes"])
    print_tenancy(saved["tenancy"], saved["bulk_sync"]["items"])
    print_attachments(saved["attachments"])
    for label, c in saved["write_throughput"].items():
        print(f"{label}: {c['writes_per_s']:.0f} creates/s, {c['failed']} failed")
    print_realtime(saved["realtime"])
    # Rows a run before them did not have (its saved JSON is still printed as it was).
    if "visibility" in saved:
        print_visibility(saved["visibility"])
    if "silent_pushes" in saved:
        print_silent_pushes(saved["silent_pushes"])
    if "app_pages" in saved:
        print_app_pages(saved["app_pages"])
    print_upgrade(saved["upgrade"])
    print_split(saved["split_ms"], SPLIT_REQUESTS.get(saved["mode"], SMOKE_SPLIT_REQUESTS))
