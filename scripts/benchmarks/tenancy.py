"""Exporting, then deleting, a tenant of 10,000 people (contract 3.8, 3.9), against
the baseline of one first sync of the same tenant (pages of 1,000): calls, time,
read and write units, dollars, from the request log of the in-process app."""

from __future__ import annotations

import time
from typing import Any

from scripts.benchmarks.harness import CHANGES, Harness
from scripts.benchmarks.prices import READ_UNIT_USD, WRITE_UNIT_USD

EXPORT = (
    "mutation($t: ID!, $e: ID) { exportTenant(tenantID: $t, exportID: $e) "
    "{ exportID done entities bytes downloadURL } }"
)
DELETE = "mutation($t: ID!) { deleteTenant(tenantID: $t, confirm: $t) { removedItems done } }"


def measure_tenancy(h: Harness, tenant: str) -> dict[str, Any]:
    """Run last on `tenant`: it is deleted."""
    rows = {"first sync (baseline)": _calls(h, CHANGES, {"t": tenant, "l": 1000}, "changes")}
    rows["export"] = _calls(h, EXPORT, {"t": tenant, "e": None}, "exportTenant")
    started = time.perf_counter()
    download = h.local.get(rows["export"]["last"]["downloadURL"])
    download.raise_for_status()
    rows["export"]["download_s"] = time.perf_counter() - started
    rows["export"]["bytes"] = len(download.content)
    rows["delete"] = _calls(h, DELETE, {"t": tenant}, "deleteTenant")
    for row in rows.values():
        del row["last"]
    return rows


def _calls(h: Harness, query: str, variables: dict[str, Any], field: str) -> dict[str, Any]:
    """Call until the operation says it is done (`cursor` null, or `done`)."""
    calls, read, write, seconds = 0, 0.0, 0.0, 0.0
    while True:
        h.captured.clear()
        started = time.perf_counter()
        data = h.post_local(query, variables)[field]
        seconds += time.perf_counter() - started
        line = h.captured[-1]
        calls += 1
        write += float(line["writeUnits"])
        read += float(line["capacityUnits"]) - float(line["writeUnits"])
        if field == "changes":
            if data["cursor"] is None:
                break
            variables = {**variables, "c": data["cursor"]}
        else:
            if data["done"]:
                break
            if "exportID" in data:
                variables = {**variables, "e": data["exportID"]}
    usd = read * READ_UNIT_USD + write * WRITE_UNIT_USD
    return {
        "calls": calls,
        "seconds": seconds,
        "read_units": read,
        "write_units": write,
        "usd": usd,
        "last": data,
    }


def print_tenancy(t: dict[str, Any], items: int) -> None:
    print()
    print(f"a tenant of {items:,} people: exported, then deleted (in-process app)")
    base = t["first sync (baseline)"]
    for name, r in t.items():
        extra = ""
        if name == "export":
            extra = f"  {r['bytes'] / 1000:.0f} KB gzip, downloaded in {r['download_s']:.2f} s"
        print(
            f"  {name:<22}{r['calls']:>4} calls{r['seconds']:>7.2f} s "
            f"({r['seconds'] / base['seconds']:.1f}x){r['read_units']:>8.0f} read units"
            f"{r['write_units']:>8.0f} write units  ${r['usd']:.4f}{extra}"
        )
