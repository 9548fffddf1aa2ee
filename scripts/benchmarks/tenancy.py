"""Exporting, then deleting, a tenant of 10,000 people (contract 3.8, 3.9), against
the baseline of one first sync of the same tenant (pages of 1,000): calls, time,
read and write units, dollars, from the request log of the in-process app; the
export's S3 requests (publishing the file, then its download by the presigned GET)
from the S3 engine's log, priced at S3's list prices."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import httpx2

from scripts.benchmarks.harness import CHANGES, Harness
from scripts.benchmarks.prices import READ_UNIT_USD, S3_GET_USD, S3_PUT_USD, WRITE_UNIT_USD
from scripts.local_s3 import LocalS3

# S3's request classes by HTTP method: PUT and POST (a multipart upload's create and
# completion) at the PUT price; GET and HEAD at the GET price (an export lists nothing).
_PUT_CLASS = frozenset({"PUT", "POST"})

EXPORT = (
    "mutation($t: ID!, $e: ID) { exportTenant(tenantID: $t, exportID: $e) "
    "{ exportID done entities bytes downloadURL } }"
)
DELETE = "mutation($t: ID!) { deleteTenant(tenantID: $t, confirm: $t) { removedItems done } }"


def measure_tenancy(h: Harness, tenant: str, engine: LocalS3) -> dict[str, Any]:
    """Run last on `tenant`: it is deleted."""
    rows = {"first sync (baseline)": _calls(h, CHANGES, {"t": tenant, "l": 1000}, "changes")}
    before = len(engine.requests())
    rows["export"] = _calls(h, EXPORT, {"t": tenant, "e": None}, "exportTenant")
    started = time.perf_counter()
    # The presigned S3 GET, as an app downloads it (no token, not through the API).
    download = httpx2.get(rows["export"]["last"]["downloadURL"], timeout=60)
    download.raise_for_status()
    rows["export"]["download_s"] = time.perf_counter() - started
    rows["export"]["bytes"] = len(download.content)
    requests = Counter(method for method, _, _ in engine.requests()[before:])
    s3_usd = sum(n * (S3_PUT_USD if m in _PUT_CLASS else S3_GET_USD) for m, n in requests.items())
    rows["export"]["s3_requests"] = dict(requests)
    rows["export"]["s3_usd"] = s3_usd
    rows["export"]["usd"] += s3_usd
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
            s3 = ", ".join(f"{n} {m}" for m, n in sorted(r["s3_requests"].items()))
            extra = (
                f"  {r['bytes'] / 1000:.0f} KB gzip, downloaded from S3 in "
                f"{r['download_s']:.2f} s; S3: {s3}, ${r['s3_usd']:.6f} (in the $)"
            )
        print(
            f"  {name:<22}{r['calls']:>4} calls{r['seconds']:>7.2f} s "
            f"({r['seconds'] / base['seconds']:.1f}x){r['read_units']:>8.0f} read units"
            f"{r['write_units']:>8.0f} write units  ${r['usd']:.4f}{extra}"
        )
