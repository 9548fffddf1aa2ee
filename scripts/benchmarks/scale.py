"""Scale: an incremental sync and a poll on tenants of 1,000 and 50,000 items; and
the read units of whole incremental syncs of k changes against the minimum."""

from __future__ import annotations

import math
from typing import Any

from api.storage import keys
from scripts.benchmarks import raw
from scripts.benchmarks.harness import CHANGES, TABLE, Harness, measure

# Incremental syncs of this many changes, for their read units against the minimum.
SWEEP_CHANGES = (1, 5, 10, 11, 20, 40, 100, 300)


def measure_scale(h: Harness) -> dict[str, dict[str, float]]:
    print("==> scale", flush=True)
    results = {}
    for tenant, size in (("small", h.small), ("large", h.large)):
        since = h.touch(tenant, 10)
        head = raw.head_token(h.ddb, TABLE, tenant)
        sync = measure(h.poster({"t": tenant, "s": since}), 1, h.iterations)
        poll = measure(h.poster({"t": tenant, "s": head}), 1, h.iterations)
        results[tenant] = {
            "size": size,
            "sync_p50_ms": sync.p50,
            "poll_p50_ms": poll.p50,
            "sync_units": h.capacity(CHANGES, {"t": tenant, "s": since}),
            "poll_units": h.capacity(CHANGES, {"t": tenant, "s": head}),
        }
    return results


def sync_in_process(h: Harness, variables: dict[str, Any]) -> tuple[float, int, int]:
    """Read units, pages and DynamoDB calls of one whole sync through the in-process
    app, following cursors from the first page's `variables`."""
    units, pages, calls, cursor = 0.0, 0, 0, None
    while True:
        h.captured.clear()
        page_vars = variables if cursor is None else {**variables, "s": None, "c": cursor}
        cursor = h.post_local(CHANGES, page_vars)["changes"]["cursor"]
        units += float(h.captured[-1]["capacityUnits"])
        calls += int(h.captured[-1]["dynamodbCalls"])
        pages += 1
        if cursor is None:
            return units, pages, calls


def measure_sweep(h: Harness) -> list[dict[str, Any]]:
    return [_sync_units(h, "sweep", k) for k in SWEEP_CHANGES]


def _sync_units(h: Harness, tenant: str, k: int) -> dict[str, Any]:
    """Read units of a whole incremental sync of k changes, against the minimum: its
    changed items' bytes in 4 KB units."""
    since = h.touch(tenant, k)
    units, pages, calls = sync_in_process(h, {"t": tenant, "s": since})
    changed = h.ddb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :p AND sk BETWEEN :a AND :h",
        ExpressionAttributeValues={
            ":p": {"S": keys.log_pk(tenant)},
            ":a": {"S": since},
            ":h": {"S": keys.HEAD_SK},
        },
        ConsistentRead=True,
    )["Items"]
    size = sum(raw.size(i) for i in changed if i["sk"]["S"] not in (since, keys.HEAD_SK))
    return {
        "changes": k,
        "pages": pages,
        "queries": calls,
        "read_units": units,
        "min_read_units": math.ceil(size / 4096),
    }


def print_scale(rows: dict[str, dict[str, float]], sweep: list[dict[str, Any]]) -> None:
    print()
    small, large = rows["small"], rows["large"]
    sizes = f"{small['size']:>10,.0f}{large['size']:>10,.0f}"
    print(f"{'scale':<34}{sizes}{'ratio':>8}")
    for key, label in (
        ("sync_p50_ms", "incremental sync (10) p50 ms"),
        ("poll_p50_ms", "poll p50 ms"),
        ("sync_units", "incremental sync read units"),
        ("poll_units", "poll read units"),
    ):
        ratio = large[key] / small[key] if small[key] else float("nan")
        print(f"{label:<34}{small[key]:>10.2f}{large[key]:>10.2f}{ratio:>8.2f}")
    print(
        f"{'incremental sync of k changes':<34}{'units':>10}{'minimum':>10}{'ratio':>8}"
        f"{'Queries':>9}"
    )
    for w in sweep:
        label = f"  k = {w['changes']} ({w['pages']} page{'s' if w['pages'] > 1 else ''})"
        print(
            f"{label:<34}{w['read_units']:>10g}{w['min_read_units']:>10}"
            f"{w['read_units'] / w['min_read_units']:>8.2f}{w['queries']:>9}"
        )
