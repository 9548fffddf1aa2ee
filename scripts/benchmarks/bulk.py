"""Bulk sync: a new device downloads a tenant of 10,000 items in pages of 1,000;
time, pages, read units against the minimum, the server's peak memory."""

from __future__ import annotations

import math
import time
from typing import Any

from api.domain.records import Record
from scripts.benchmarks import raw
from scripts.benchmarks.harness import CHANGES, TABLE, Harness, peak_rss_kb
from scripts.benchmarks.scale import sync_in_process


def measure_bulk(h: Harness, records: list[Record]) -> dict[str, Any]:
    before = peak_rss_kb(h.server_pid)
    started = time.perf_counter()
    pages = 0
    cursor = None
    while True:
        data = h.post(h.clients[0], CHANGES, {"t": "bulk", "l": 1000, "c": cursor})["changes"]
        pages += 1
        cursor = data["cursor"]
        if cursor is None:
            break
    elapsed = time.perf_counter() - started
    # The same sync in process, for the capacity of each page.
    units, _, _ = sync_in_process(h, {"t": "bulk", "l": 1000})
    sample = sum(raw.item_size(h.ddb, TABLE, r) for r in records[:200]) / 200
    print(f"  bulk sync {len(records):,}: {elapsed:.2f} s, {pages} pages", flush=True)
    return {
        "items": len(records),
        "pages": pages,
        "seconds": elapsed,
        "read_units": units,
        "min_read_units": math.ceil(sample * len(records) / 4096),
        "server_peak_rss_mb_before": before / 1024,
        "server_peak_rss_mb_after": peak_rss_kb(h.server_pid) / 1024,
    }


def print_bulk(b: dict[str, Any]) -> None:
    print(
        f"bulk sync of {b['items']:,} items: {b['seconds']:.2f} s, {b['pages']} pages, "
        f"{b['read_units']:.0f} read units (minimum {b['min_read_units']}), server peak "
        f"RSS {b['server_peak_rss_mb_after']:.0f} MB"
    )
